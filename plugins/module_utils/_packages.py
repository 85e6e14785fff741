# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What a node has installed, read cheaply, and what apt, dpkg and pip would then still do.

Private to the gpuops.k8s collection. node_state_info reads (dpkg-query for Debian packages,
a venv's *.dist-info directories for Python distributions); the decisions (packages_missing,
selections_to_change, requirements_missing) are pure and used by the filter plugins of
plugins/filter/packages.py, so that a role asks apt, dpkg_selections or pip only where the
read shows something for them to do (issue 32: each of those module runs costs a node about
half a second of CPU on a converged run).

Every decision leans one way: what the read cannot vouch for (a package dpkg does not know,
a version pattern apt reads otherwise, a requirement that is not an exact pin, no read at
all) stays in, for the module to judge as it always did.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import glob
import os
import re

# One line per package (and architecture, for a Multi-Arch package): name, version, and
# dpkg's status triplet "want error-flag state", e.g. "hold ok installed".
DPKG_QUERY_FORMAT = "${Package}\\t${Version}\\t${Status}\\n"
INSTALLED = "installed"
# dpkg-query --show exits 1 where some name matched no package; it still lists the others.
DPKG_QUERY_SOME_NOT_FOUND = 1

# apt's name=version, as the apt module takes it: the version may be a fnmatch pattern.
_APT_SPEC = re.compile(r"^(?P<name>[a-z0-9][a-z0-9+.-]+)(?:=(?P<version>[^=<>\s]+))?$")
# pip's name==version with nothing else (no extras, markers or other operators).
_EXACT_PIN = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(?P<version>[A-Za-z0-9.+!_-]+)\s*$")
_DIST_INFO = ".dist-info"
# The interpreter a venv's bin/python3 resolves to, as python3.11.
_PYTHON_VERSION = re.compile(r"^python(\d+\.\d+)$")


class PackagesInputError(ValueError):
    """A filter's input is not what it documents."""


def parse_dpkg_query(text, names):
    """{name: {installed, version, selection}} of each name from dpkg-query's lines in
    DPKG_QUERY_FORMAT. installed: dpkg's state is "installed" (not half-installed, unpacked
    or config-files); version: the installed version, else None; selection: dpkg's want
    (install, hold, deinstall, purge, unknown), None for a package dpkg does not know."""
    found = dict((name, {"installed": False, "version": None, "selection": None}) for name in names)
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 3 or fields[0] not in found:
            continue
        name, version, status = fields
        words = status.split()
        if len(words) != 3:
            continue
        entry = found[name]
        if words[2] == INSTALLED:
            entry.update(installed=True, version=version)
        # A Multi-Arch package has a line per architecture: one held holds the name.
        if entry["selection"] in (None, "install"):
            entry["selection"] = words[0]
    return found


def normalize_distribution(name):
    """PEP 503's normalized name: lower case, runs of - _ . as one -."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_python_env(path):
    """{exists, distributions}: whether the venv at path has a working python3, and each
    distribution in the site-packages of that Python's version (normalized name -> version),
    read from the *.dist-info names. A venv whose python3 no longer resolves, or now runs
    another version than the one its packages were installed for (a distribution upgrade),
    does not exist for this read: pip is to judge it."""
    python = os.path.realpath(os.path.join(path, "bin", "python3"))
    version = _PYTHON_VERSION.search(os.path.basename(python))
    if not (version and os.path.isfile(python)):
        return {"exists": False, "distributions": {}}
    site = os.path.join(path, "lib", "python" + version.group(1), "site-packages")
    distributions = {}
    for directory in glob.glob(os.path.join(site, "*" + _DIST_INFO)):
        stem = os.path.basename(directory)[: -len(_DIST_INFO)]
        name, dash, found = stem.rpartition("-")
        if dash and name:
            distributions[normalize_distribution(name)] = found
    return {"exists": True, "distributions": distributions}


def _packages_read(node_state):
    read = node_state.get("packages") if isinstance(node_state, dict) else None
    if not isinstance(read, dict):
        raise PackagesInputError("node_state must be node_state_info's result, read with packages")
    return read.get("by_name") if read.get("available") else None


def packages_missing(wanted, node_state):
    """The specs of WANTED (apt's name or name=version) that node_state_info's read does not
    show installed, at a version the pattern matches where one is given, in WANTED's order."""
    if not isinstance(wanted, list) or not all(isinstance(spec, str) and spec for spec in wanted):
        raise PackagesInputError("each wanted package must be a non-empty string (name or name=version)")
    items = _packages_read(node_state)
    if items is None:
        return list(wanted)
    return [spec for spec in wanted if not _installed(spec, items)]


def _installed(spec, items):
    match = _APT_SPEC.match(spec)
    entry = items.get(match.group("name")) if match else None
    if not entry or not entry.get("installed"):
        return False
    pattern = match.group("version")
    return pattern is None or fnmatch.fnmatch(entry.get("version") or "", pattern)


def selections_to_change(names, selection, node_state):
    """The NAMES whose dpkg selection the read does not show as SELECTION (hold or install),
    in NAMES' order; a name dpkg does not know stays in."""
    if selection not in ("hold", "install"):
        raise PackagesInputError("selection is %r; valid: hold, install" % (selection,))
    if not isinstance(names, list) or not all(isinstance(name, str) and name for name in names):
        raise PackagesInputError("names must be a list of package names")
    items = _packages_read(node_state)
    if items is None:
        return list(names)
    return [name for name in names if (items.get(name) or {}).get("selection") != selection]


def requirements_missing(requirements, env):
    """The REQUIREMENTS (pip's syntax) not satisfied in ENV (node_state_info's read of one
    venv): all of them where the venv is not there or one is not an exact name==version pin,
    which only pip can judge; else those whose distribution is absent or at another version."""
    if not isinstance(requirements, list) or not all(isinstance(spec, str) and spec for spec in requirements):
        raise PackagesInputError("requirements must be a list of pip requirement strings")
    if not isinstance(env, dict) or not isinstance(env.get("distributions"), dict):
        raise PackagesInputError("env must be one venv of node_state_info's python_envs")
    pins = [_EXACT_PIN.match(spec) for spec in requirements]
    if not env.get("exists") or not all(pins):
        return list(requirements)
    installed = env["distributions"]
    return [
        spec
        for spec, pin in zip(requirements, pins)
        if installed.get(normalize_distribution(pin.group("name"))) != pin.group("version")
    ]
