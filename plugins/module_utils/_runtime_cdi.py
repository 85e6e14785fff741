# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Whether a node's container runtime injects CDI devices, as DRA needs: the DRA kubelet
plugin prepares a claim by writing a CDI spec and answering CDI device names, which only a
runtime with CDI turns into the container's devices.

Private to the gpuops.k8s collection. Pure: the runtime as the Node reports it
(status.nodeInfo.containerRuntimeVersion) and containerd's effective configuration
(`containerd config dump`, TOML text) in, a verdict out. node_state_info reads both and the
device_plugin role refuses mode dra on a node whose verdict has a message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ._runtime.containerd import CRI_PLUGIN
from ._runtime.errors import RuntimeConfigError
from ._runtime.toml_text import read_toml

# Where enable_cdi is in what containerd dumps: 1.7's CRI plugin (its config version 2) and
# 2.x's CRI runtime plugin (version 3), the tables the container_runtime role writes it in.
CRI_17 = CRI_PLUGIN[2]
CRI_2 = CRI_PLUGIN[3]
CRIO_CDI = (1, 23)
VALID = (
    "containerd 1.7 with enable_cdi = true, containerd 2.0 or newer (CDI on unless turned off), "
    "or CRI-O 1.23+"
)
ROLE_SETTING = "container_runtime_enable_cdi: true in this collection's container_runtime role"

_VERSION = re.compile(r"^v?(\d+)\.(\d+)")


def parse_runtime_version(text):
    """(name, (major, minor) or None, version as reported) of a containerRuntimeVersion such
    as containerd://1.7.24, cri-o://1.30.4 or containerd://1.6.20~ds1; ("", None, "") for none."""
    name, _sep, version = (text or "").strip().partition("://")
    match = _VERSION.match(version)
    return name.lower(), (int(match.group(1)), int(match.group(2))) if match else None, version


def needs_config(runtime_version):
    """Whether the verdict needs containerd's configuration (containerd 1.7 or newer)."""
    name, version, _raw = parse_runtime_version(runtime_version)
    return name == "containerd" and version is not None and version >= (1, 7)


def containerd_cdi(version, data):
    """(on, the setting as a key path, its value as set or None) in containerd's dumped config."""
    plugin, default = (CRI_17, False) if version < (2, 0) else (CRI_2, True)
    table = (data.get("plugins") or {}).get(plugin)
    value = table.get("enable_cdi") if isinstance(table, dict) else None
    setting = 'plugins."%s".enable_cdi' % plugin
    return (value if isinstance(value, bool) else default), setting, value


def verdict(runtime_version, config_text=None, config_error=None, planned=None):
    """Whether the runtime injects CDI devices: a dict with runtime, version, cdi (bool),
    setting (containerd's key, else None), planned (see below) and msg (None where it does,
    else why not and what is valid). config_text: containerd's `config dump` (needed where
    needs_config()); config_error: why it could not be read. planned: the enable_cdi the
    container_runtime role applies in this run (check mode, where it is not applied yet),
    taken for containerd's setting; None: the setting as dumped."""
    name, version, raw = parse_runtime_version(runtime_version)
    found = {"runtime": name or None, "version": raw or None, "cdi": False, "setting": None}
    found["planned"] = planned
    said = "%s %s" % (name, raw)
    if not name:
        found["msg"] = (
            "the Node reports no container runtime (status.nodeInfo.containerRuntimeVersion is empty: is "
            "its kubelet registered?), so whether it injects CDI devices is unknown. DRA needs %s" % VALID
        )
    elif version is None:
        found["msg"] = "%s: its version %r cannot be read, so its CDI support is unknown. DRA needs %s"
        found["msg"] %= (name, raw, VALID)
    elif name == "cri-o":
        found["cdi"] = version >= CRIO_CDI
        if not found["cdi"]:
            found["msg"] = "%s has no CDI (CRI-O has it from 1.23). DRA needs %s" % (said, VALID)
    elif name == "containerd":
        _containerd(found, version, (config_text, config_error), planned)
    else:
        found["msg"] = (
            "%s is not a runtime this role knows to inject CDI devices (a claim's GPU would not reach "
            "its container). DRA needs %s" % (said, VALID)
        )
    found.setdefault("msg", None)
    return found


def _containerd(found, version, config, planned):
    """found completed for containerd: config is (its config dump, why it could not be read)."""
    said = "%s %s" % (found["runtime"], found["version"])
    config_text, config_error = config
    if version < (1, 7):
        found["msg"] = (
            "%s has no CDI support (containerd injects CDI devices from 1.7 on, there with enable_cdi = true "
            'in its CRI plugin, plugins."%s", which this collection\'s container_runtime role sets with '
            "container_runtime_enable_cdi: true): upgrade containerd. DRA needs %s" % (said, CRI_17, VALID)
        )
        return
    data = None
    if config_error is None:
        try:
            data = read_toml(config_text or "", "containerd config dump")
        except RuntimeConfigError as error:
            # read_toml speaks of a file it edits; nothing is edited here.
            config_error = str(error).replace("; the file is left untouched", "")
    if data is None:
        found["msg"] = "%s: its configuration cannot be read (%s), so whether CDI is on is unknown. %s" % (
            said,
            config_error,
            "DRA needs " + VALID,
        )
        return
    on, setting, value = containerd_cdi(version, data)
    found.update(setting=setting, cdi=on if planned is None else planned)
    if found["cdi"]:
        return
    if planned is not None:
        why = "the container_runtime role sets it to false (container_runtime_enable_cdi)"
    elif value is None:
        why = "containerd's default"
    else:
        why = "as its configuration sets it"
    found["msg"] = "%s has CDI off: %s = false (%s). Turn it on with %s. DRA needs %s" % (
        said,
        setting,
        why,
        ROLE_SETTING,
        VALID,
    )
