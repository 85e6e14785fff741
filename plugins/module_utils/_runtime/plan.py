# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Plan the NVIDIA runtime's configuration files (which files, their new text, restart or
not), then apply the plan.

Private to the gpuops.k8s collection. The one path for everything that decides about these
files: the nvidia_runtime module (a real run, check mode, check mode on a node without
tomlkit), the container_runtime role's drift guard, and through the module the doctor.
plan() reads through a reader (NodeFiles: the node's files) and writes nothing; apply()
writes a plan's changes through the caller's io (AnsibleModule's atomic_move and
backup_local, or the guard's own).

The package (its __init__.py stays empty: ansible-core 2.17's empty-init sanity test):
calls go one way, downwards: plan -> containerd, crio, docker (the per-engine edits) ->
tables (edits on plain data) -> toml_edit (the difference applied to the user's text) ->
toml_text (reading, lexing, rendering) -> toml_data (parsed values named, compared and
diffed) -> errors. Nothing here does I/O at import; only plan reads files. The drift guard
(roles/container_runtime/files/gpuops_runtime_guard/_runtime) links these files.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from . import k3s
from .containerd import containerd_drop_in, containerd_in_place, containerd_version
from .crio import crio_edit
from .defaults import ENGINES, PARAMETERS
from .docker import docker_edit, parse_json
from .errors import RuntimeConfigError, UnsupportedOption
from .toml_data import pruned, same
from .toml_edit import UNRENDERED
from .toml_text import read_toml

SPEC_KEYS = ("state", "runtime_name", "runtime_path", "set_as_default", "enable_cdi")

# A RuntimeClass handler must be a DNS label, and the runtime name is its handler.
_RUNTIME_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# What containerd's disabled_plugins may name to turn the CRI plugin off.
_CRI_IDS = ("cri", "io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime")


def validate_spec(spec, paths):
    """Reject bad input before any file is read: name the field, the value, what is valid."""
    if not _RUNTIME_NAME.match(spec["runtime_name"] or ""):
        raise UnsupportedOption(
            "runtime_name=%r: must be a DNS label (lower-case letters, digits and '-', at most 63, "
            "starting and ending with a letter or digit), because it is the RuntimeClass handler"
            % spec["runtime_name"]
        )
    for field, value in sorted(paths.items()):
        if value is not None and not value.startswith("/"):
            raise UnsupportedOption("%s=%r: must be an absolute path" % (field, value))


class NodeFiles:
    """The node's files, as plan() reads them."""

    def read(self, path):
        """A file's text, or None when it does not exist."""
        try:
            with open(path) as handle:
                return handle.read()
        except FileNotFoundError:
            return None
        except OSError as error:
            raise RuntimeConfigError("%s: cannot be read: %s" % (path, error.strerror or error)) from error

    def listdir(self, directory):
        """The names of the files in a directory, sorted ([] when it does not exist)."""
        try:
            names = os.listdir(directory)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(n for n in names if os.path.isfile(os.path.join(directory, n)))


class Plan:
    """What a run does: {path: new text, None (remove it) or UNRENDERED} for every file it
    manages, each file's text now ("" when it does not exist), and what it tells the user."""

    def __init__(self, options):
        """options: what it is made from, the engine's defaults applied (resolve())."""
        self.options = options
        self.runtime, self.config_mode = options["runtime"], options["config_mode"]
        self.files, self.before, self.existed, self.data = {}, {}, {}, {}
        self.config_version = self.distribution = self.msg = None
        self.warnings = []

    def add(self, path, old, new, before, after):
        """A managed file: old text (None: missing), new text, the data before and after."""
        self.files[path], self.before[path], self.existed[path] = new, old or "", old is not None
        self.data[path] = (before, after if new is not None else {})

    @property
    def planned_files(self):
        return sorted(self.files)

    @property
    def parameters(self):
        """The options that make the same plan again (defaults.PARAMETERS), as resolved."""
        return {key: self.options[key] for key in PARAMETERS}

    def changes(self):
        """{path: new text, None or UNRENDERED} for the files this run changes."""
        return {
            path: new
            for path, new in self.files.items()
            if new != self.before[path] and (new is not None or self.existed[path])
        }

    def restart_required(self):
        """The runtime reads different data from the changed files."""
        return any(
            not same(self.data[path][0] or None, self.data[path][1] or None) for path in self.changes()
        )


def resolve(params):
    """The options with the engine's defaults (defaults.ENGINES) for what was left empty."""
    engine = ENGINES[params["runtime"]]
    resolved = dict(params)
    for key in ("config_mode", "path", "drop_in_path"):
        resolved[key] = params.get(key) or engine[key]
    if resolved["runtime"] == "docker" and resolved["config_mode"] == "drop_in":
        raise UnsupportedOption("config_mode=drop_in: Docker reads a single daemon.json; use in_place")
    return resolved


def plan(params, files=None):
    """The Plan for nvidia_runtime's options (as the module or the drift guard has them)."""
    files = NodeFiles() if files is None else files
    resolved = resolve(params)
    spec = {key: resolved[key] for key in SPEC_KEYS}
    validate_spec(
        spec,
        {
            "path": resolved["path"],
            "drop_in_path": resolved["drop_in_path"],
            "runtime_path": spec["runtime_path"],
        },
    )
    result = Plan(resolved)
    {"containerd": _containerd, "crio": _crio, "docker": _docker}[result.runtime](
        result, resolved, spec, files
    )
    return result


def _docker(result, params, spec, files):
    path = params["path"]
    old = files.read(path)
    new, before, after = docker_edit(old or "", spec, path)
    result.add(path, old, new, before, after)


def _crio(result, params, spec, files):
    if params["config_mode"] == "in_place":
        path = params["path"]
        old = files.read(path)
        result.add(path, old, *crio_edit(old or "", spec, path))
        return
    path = params["drop_in_path"]
    old = files.read(path)
    new, before, after = crio_edit(old or "", spec, path, _crio_context(params["path"], path, files))
    if spec["state"] == "absent" and not pruned(after):
        new = None  # the drop-in holds nothing else: it goes
    result.add(path, old, new, before, after)


def _merge(into, data):
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
    return into


def _crio_context(main, drop_in, files):
    """(data, source) of what CRI-O reads besides the drop-in: crio.conf, then the other
    files of the drop-in's directory in name order, later ones winning (crio.conf.d(5));
    hidden files and backups (name~) left out."""
    directory = os.path.dirname(drop_in)
    others = [
        os.path.join(directory, name)
        for name in files.listdir(directory)
        if name != os.path.basename(drop_in) and not name.startswith(".") and not name.endswith("~")
    ]
    merged = {}
    for path in [main, *others]:
        text = files.read(path)
        if text:
            _merge(merged, read_toml(text, path))
    return merged, "%s (with %s)" % (main, os.path.join(directory, "*"))


def _containerd(result, params, spec, files):
    path, drop_in = params["path"], params["drop_in_path"]
    old = files.read(path)
    program = k3s.generated_by(path, old or "")
    if program:
        data = read_toml(old or "", path)
        result.config_version = containerd_version(data, params["config_version"], path)
        templates = [
            t for t in k3s.TEMPLATES if files.read(os.path.join(os.path.dirname(path), t)) is not None
        ]
        result.distribution = program
        result.msg, warnings = k3s.check(program, path, data, spec, templates)
        result.warnings.extend(warnings)
        return
    # Removal looks in both places whatever config_mode says now: the entry in the main
    # file, the imports line and the drop-in an earlier run in the other mode left.
    if params["config_mode"] == "drop_in" or spec["state"] == "absent":
        old_drop = files.read(drop_in)
        new, new_drop, befores, afters, version = containerd_drop_in(
            old or "",
            old_drop or "",
            spec,
            main_source=path,
            drop_in_source=drop_in,
            drop_in_path=drop_in,
            default_version=params["config_version"],
        )
        result.add(path, old, new, befores[0], afters[0])
        result.add(drop_in, old_drop, new_drop, befores[1], afters[1])
    else:
        new, before, after, version = containerd_in_place(old or "", spec, path, params["config_version"])
        result.add(path, old, new, before, after)
    result.config_version = version
    disabled = result.data[path][1].get("disabled_plugins")
    named = [str(plugin) for plugin in disabled] if isinstance(disabled, list) else []
    if any(plugin in _CRI_IDS for plugin in named):
        result.warnings.append(
            "%s: containerd's CRI plugin is disabled (disabled_plugins = %s), so the kubelet cannot "
            "use this containerd and the %s runtime entry has no effect until the CRI plugin is "
            "enabled (Docker's containerd.io package ships this file)" % (path, named, spec["runtime_name"])
        )


def effective(runtime, path, text):
    """The data a runtime reads from text: what decides whether a restart is needed."""
    if not text:
        return None
    if runtime == "docker":
        return parse_json(text, path)
    return read_toml(text, path)


def apply(changes, backup, io):
    """Write changes ({path: new text, or None to remove the file}) through io (backup(path)
    -> its copy, write(path, text), remove(path)), a backup of each existing file first when
    backup; returns {path: its backup}."""
    backups = {}
    for path, text in sorted(changes.items()):
        if text is UNRENDERED:
            raise RuntimeConfigError("%s: tomlkit is required to write it" % path)
        if backup and os.path.exists(path):
            backups[path] = io.backup(path)
        if text is None:
            io.remove(path)
        else:
            io.write(path, text)
    return backups
