# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A node's kubelet and its host, from what the kubelet_info module read: versions, the
cgroup hierarchy, the kubelet configuration's settings, and whether the kubelet will run.

Private to the gpuops.k8s collection. Pure: no I/O, so it is unit-tested on plain text and
shared by the kubelet_info module and the doctor's diagnosis (_doctor).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

# KEP-5573: from Kubernetes 1.35 the kubelet's failCgroupV1 defaults to true, so on a
# cgroup v1 host it exits at start unless its configuration says false. The setting itself
# exists since 1.31 (default false until 1.35).
FAIL_CGROUP_V1_DEFAULT_SINCE = (1, 35)
FAIL_CGROUP_V1_SINCE = (1, 31)

# What the kubelet configuration's top level says of these, as kubelet_info returns them.
CONFIG_KEYS = ("failCgroupV1", "cgroupDriver")

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")
# A top-level "key: value" line of a YAML document (no indentation), value a plain scalar.
_TOP_LEVEL_SCALAR = re.compile(r"^([A-Za-z][A-Za-z0-9]*)\s*:\s*([^#{}\[\]]*?)\s*(?:#.*)?$")
_YAML_BOOLS = {"true": True, "false": False}


def parse_version(text):
    """(major, minor, patch) from "Kubernetes v1.37.2", "v1.35.4" or "1.35"; None if absent."""
    match = _VERSION.search(text or "")
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


def cgroup_version(mounts):
    """2 where /sys/fs/cgroup is a cgroup2 mount (the unified hierarchy), 1 where it is any
    other (the v1 or hybrid layout: tmpfs with a mount per controller), None where it is not
    mounted. mounts: the text of /proc/self/mounts."""
    found = None
    # The last mount on the path is the one that shows (mounts stack).
    for line in (mounts or "").splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[1] == "/sys/fs/cgroup":
            found = 2 if fields[2] == "cgroup2" else 1
    return found


def config_settings(text):
    """The CONFIG_KEYS the kubelet configuration's top level sets: {key: value}.

    The file is JSON or YAML (kubeadm writes YAML). Only top-level plain scalars are read,
    without a YAML library (the managed node may have none): a key absent from the result
    is not set, and the kubelet takes its default.
    Raises ValueError when the text is neither a JSON object nor YAML with a top level.
    """
    stripped = (text or "").strip()
    if stripped[:1] in ("{", "["):
        data = json.loads(stripped)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return {key: data[key] for key in CONFIG_KEYS if key in data}
    found = {}
    for line in stripped.splitlines():
        match = _TOP_LEVEL_SCALAR.match(line)
        if match and match.group(1) in CONFIG_KEYS:
            value = match.group(2).strip("'\"")
            found[match.group(1)] = _YAML_BOOLS.get(value.lower(), value)
    return found


def refuses_cgroup_v1(version, fail_cgroup_v1):
    """Whether a kubelet of version (a parse_version tuple) whose configuration sets
    fail_cgroup_v1 (True, False, or None where unset) exits at start on a cgroup v1 host."""
    if version is None or fail_cgroup_v1 is False:
        return False
    if fail_cgroup_v1 is True:
        return version[:2] >= FAIL_CGROUP_V1_SINCE
    return version[:2] >= FAIL_CGROUP_V1_DEFAULT_SINCE
