# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Plan the NVIDIA runtime's configuration files: which files, their new text, restart or not.

Private to the gpuops.k8s collection. Pure apart from reading the files: no AnsibleModule,
nothing written. Shared by the nvidia_runtime module and the container_runtime role's
drift guard, so both decide the same text and the same restart.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import re

from .containerd import containerd_drop_in, containerd_edit_data, containerd_in_place, containerd_version
from .crio import crio_edit, crio_edit_data
from .docker import docker_edit, parse_json
from .errors import ConfigParseError, RuntimeConfigError, UnsupportedOption
from .toml_text import parse_toml, same, tomllib

# A RuntimeClass handler must be a DNS label, and the runtime name is its handler.
_RUNTIME_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


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


DEFAULT_PATHS = {
    "containerd": "/etc/containerd/config.toml",
    "docker": "/etc/docker/daemon.json",
    "crio": "/etc/crio/crio.conf",
}
DEFAULT_DROP_INS = {
    "containerd": "/etc/containerd/conf.d/99-nvidia.toml",
    "crio": "/etc/crio/crio.conf.d/99-nvidia.conf",
}
SPEC_KEYS = ("state", "runtime_name", "runtime_path", "set_as_default", "enable_cdi")


def default_config_mode(runtime):
    """nvidia_runtime's config_mode when none is given: CRI-O gets a drop-in."""
    return "drop_in" if runtime == "crio" else "in_place"


def read(path):
    """A file's text, or "" when it does not exist yet."""
    try:
        with open(path) as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


def plan(params):
    """Compute {path: new text or None (remove)} for every file involved, plus metadata."""
    runtime, mode = params["runtime"], params["config_mode"]
    path = params["path"] or DEFAULT_PATHS[runtime]
    drop_in = params["drop_in_path"] or DEFAULT_DROP_INS.get(runtime)
    spec = {key: params[key] for key in SPEC_KEYS}
    validate_spec(spec, {"path": path, "drop_in_path": drop_in, "runtime_path": spec["runtime_path"]})
    result = {"files": {}, "before": {}}
    if runtime == "docker":
        if mode == "drop_in":
            raise UnsupportedOption("config_mode=drop_in: Docker reads a single daemon.json")
        text = read(path)
        result["files"][path] = docker_edit(text, spec, path)[0]
        result["before"][path] = text
    elif runtime == "crio":
        target = drop_in if mode == "drop_in" else path
        text = read(target)
        result["files"][target] = crio_edit(text, spec, target)[0]
        result["before"][target] = text
    elif mode == "drop_in":
        main_text, drop_text = read(path), read(drop_in)
        new_main, new_drop, _before, _after, version = containerd_drop_in(
            main_text,
            drop_text,
            spec,
            main_source=path,
            drop_in_source=drop_in,
            drop_in_path=drop_in,
            default_version=params["config_version"],
        )
        result["files"] = {path: new_main, drop_in: new_drop}
        result["before"] = {path: main_text, drop_in: drop_text}
        result["config_version"] = version
    else:
        text = read(path)
        new_text, _before, _after, version = containerd_in_place(text, spec, path, params["config_version"])
        result["files"][path] = new_text
        result["before"][path] = text
        result["config_version"] = version
    return result


def effective(runtime, path, text):
    """The data a runtime reads from text: what decides whether a restart is needed."""
    if not text:
        return None
    if runtime == "docker":
        return parse_json(text, path)
    return parse_toml(text, path).unwrap()


def changes(runtime, planned):
    """({path: new text or None} for the files whose text changes, restart required)."""
    changed = {
        p: t for p, t in planned["files"].items() if t != planned["before"][p] and (t or planned["before"][p])
    }
    restart = any(
        effective(runtime, p, planned["before"][p]) != effective(runtime, p, t or "")
        for p, t in changed.items()
    )
    return changed, restart


def predict_without_tomlkit(runtime, text, spec, source, default_version=2):
    """Check mode on a node where tomlkit is not installed yet (the role installs it in
    the same run): read with the standard library and apply the same edit to plain data.
    Returns (changed, config_version); the new text itself cannot be rendered."""
    if tomllib is None:
        raise RuntimeConfigError("%s: tomlkit (or Python >= 3.11) is needed to read TOML" % source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigParseError("%s: %s; the file is left untouched" % (source, error)) from error
    before = copy.deepcopy(data)
    if runtime == "crio":
        crio_edit_data(data, spec, source, dict)
        return not same(data, before), None
    version = containerd_version(data, default_version, source)
    if spec["state"] == "present" and "version" not in data and version != 1:
        data["version"] = version
    containerd_edit_data(data, version, spec, source, dict)
    return not same(data, before), version
