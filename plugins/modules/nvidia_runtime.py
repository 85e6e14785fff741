#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: nvidia_runtime
short_description: Declare the NVIDIA container runtime in containerd, Docker or CRI-O configuration
version_added: 0.1.0
description:
  - Adds (or removes) the NVIDIA runtime in a container runtime's configuration, like
    C(nvidia-ctk runtime configure), but as a structural edit that keeps every other key,
    table, comment and the order of the user's file.
  - B(containerd) (config versions 1, 2 and 3; the CRI plugin table is picked by the file's
    C(version)) in place, or as a drop-in plus an C(imports) entry. A new runtime entry
    starts as a copy of the runtime containerd uses now (so runc's C(SystemdCgroup) and
    other options carry over) with C(options.BinaryName) set to O(runtime_path).
  - B(Docker) C(daemon.json) in place (key order kept), B(CRI-O) as a drop-in or in place.
  - Each result is parsed back and must equal the intended configuration before anything
    is written; an unparsable or unexpected file gets an error naming the file, line or
    key, and is left untouched.
  - Returns RV(restart_required), true only when the effective configuration changed; the
    module never restarts anything (the C(container_runtime) role does, through a handler).
author:
  - gpuops.k8s maintainers (@gpuops)
requirements:
  - tomlkit (Python module, for containerd and CRI-O) on the managed node
extends_documentation_fragment:
  - gpuops.k8s.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  runtime:
    description: Which container runtime's configuration to edit.
    type: str
    required: true
    choices: [containerd, docker, crio]
  state:
    description: Whether the NVIDIA runtime is declared (V(present)) or not (V(absent)).
    type: str
    default: present
    choices: [present, absent]
  path:
    description:
      - The runtime's main configuration file.
      - Defaults to C(/etc/containerd/config.toml), C(/etc/docker/daemon.json) or
        C(/etc/crio/crio.conf).
      - A missing file is created (containerd gets C(version = ) O(config_version)).
    type: path
  config_mode:
    description:
      - V(in_place) edits O(path). V(drop_in) writes O(drop_in_path) and, for containerd,
        adds it to O(path)'s C(imports).
      - containerd 1.6 and 1.7 merge an imported file per plugin, so the containerd
        drop-in holds a copy of O(path)'s CRI plugin table plus the runtime, rewritten
        from O(path) on every run (edit O(path), never the drop-in).
      - Defaults to V(in_place) for containerd and Docker (Docker has no drop-ins) and
        V(drop_in) for CRI-O.
    type: str
    choices: [in_place, drop_in]
  drop_in_path:
    description:
      - The drop-in file for O(config_mode=drop_in).
      - Defaults to C(/etc/containerd/conf.d/99-nvidia.toml) or C(/etc/crio/crio.conf.d/99-nvidia.conf).
    type: path
  runtime_name:
    description: Name of the runtime entry (and of the RuntimeClass handler that uses it).
    type: str
    default: nvidia
  runtime_path:
    description: The NVIDIA container runtime binary.
    type: path
    default: /usr/bin/nvidia-container-runtime
  set_as_default:
    description:
      - V(true) makes the runtime the default one; V(false) puts a default that names it
        back to runc; unset leaves the default as the file has it.
    type: bool
  enable_cdi:
    description:
      - "Turn the Container Device Interface on or off (containerd config 2 and 3:
        C(enable_cdi); Docker: C(features.cdi)); unset leaves it as it is."
      - CRI-O always has CDI on; setting this for CRI-O is an error.
    type: bool
  config_version:
    description:
      - containerd config version to write into a missing or empty O(path).
      - A file that states its version keeps it; one without a C(version) line is
        version 1, as containerd reads it.
    type: int
    default: 2
    choices: [1, 2, 3]
  backup:
    description: Keep a timestamped copy of each file before changing it.
    type: bool
    default: false
notes:
  - In check mode on a node where tomlkit is not installed yet (a fresh node whose
    tomlkit the same run installs), the prediction of C(changed) and RV(restart_required)
    is made from the data with Python's C(tomllib); the diff then has no new text.
  - Nothing is written in check mode; the predicted C(changed), RV(restart_required) and
    diff are what a real run does.
seealso:
  - name: NVIDIA Container Toolkit, configuring runtimes
    description: What C(nvidia-ctk runtime configure) writes, which this module mirrors.
    link: https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/install-guide.html
"""

EXAMPLES = r"""
- name: Declare the NVIDIA runtime for containerd and make it the default
  gpuops.k8s.nvidia_runtime:
    runtime: containerd
    set_as_default: true
    backup: true
  register: nvidia_runtime
  notify: Restart containerd

- name: Declare it through a drop-in, keeping config.toml for other tools
  gpuops.k8s.nvidia_runtime:
    runtime: containerd
    config_mode: drop_in

- name: Docker, with CDI
  gpuops.k8s.nvidia_runtime:
    runtime: docker
    enable_cdi: true

- name: Remove it again
  gpuops.k8s.nvidia_runtime:
    runtime: crio
    state: absent
"""

RETURN = r"""
restart_required:
  description: The effective configuration changed, so the runtime must be restarted to use it.
  returned: always
  type: bool
  sample: true
config_version:
  description: The containerd config version the file is read as.
  returned: when O(runtime=containerd)
  type: int
  sample: 2
changed_files:
  description: Files written (or, in check mode, that would be written) or removed.
  returned: always
  type: list
  elements: str
  sample: [/etc/containerd/config.toml]
backup_files:
  description: Backups made, as changed file -> its backup (files that existed only).
  returned: always
  type: dict
  sample: {/etc/containerd/config.toml: /etc/containerd/config.toml.12345.2026-11-22@10:00:00~}
created_files:
  description: Files the change created (they had no previous version to back up).
  returned: always
  type: list
  elements: str
  sample: [/etc/containerd/conf.d/99-nvidia.toml]
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.errors import RuntimeConfigError
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.plan import (
    DEFAULT_DROP_INS,
    DEFAULT_PATHS,
    SPEC_KEYS,
    changes,
    default_config_mode,
    plan,
    predict_without_tomlkit,
    read,
    validate_spec,
)
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.toml_text import (
    HAS_TOMLKIT,
    TOMLKIT_IMPORT_ERROR,
)


def write(module, path, text):
    """Atomically replace path with text; a new file (and its directory) is made 0644/0755."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    existed = os.path.exists(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    module.atomic_move(tmp, path)
    if not existed:
        module.set_mode_if_different(path, "0644", False)


def predict(module, params):
    """Check mode without tomlkit (a fresh node, before the run that installs it)."""
    runtime, path = params["runtime"], params["path"] or DEFAULT_PATHS[params["runtime"]]
    if params["config_mode"] == "drop_in" and runtime == "containerd":
        path = params["drop_in_path"] or DEFAULT_DROP_INS[runtime]
    spec = {key: params[key] for key in SPEC_KEYS}
    try:
        validate_spec(spec, {"path": path, "runtime_path": spec["runtime_path"]})
        changed, version = predict_without_tomlkit(runtime, read(path), spec, path, params["config_version"])
    except RuntimeConfigError as error:
        module.fail_json(msg=str(error), changed=False, restart_required=False)
    module.warn(
        "tomlkit is not installed on this node yet: changed and restart_required are predicted "
        "from the data; the new text is rendered by the real run"
    )
    result = {
        "changed": changed,
        "restart_required": changed,
        "changed_files": [path] if changed else [],
        "created_files": [path] if changed and not os.path.exists(path) else [],
        "backup_files": {},
    }
    if version is not None:
        result["config_version"] = version
    return result


def run(module):
    params = module.params
    if params["config_mode"] is None:
        params["config_mode"] = default_config_mode(params["runtime"])
    if params["runtime"] != "docker" and not HAS_TOMLKIT:
        if not module.check_mode:
            module.fail_json(msg=missing_required_lib("tomlkit"), exception=TOMLKIT_IMPORT_ERROR)
        return predict(module, params)
    try:
        planned = plan(params)
    except RuntimeConfigError as error:
        failure = str(error)
    else:
        failure = None
    if failure is not None:
        module.fail_json(msg=failure, changed=False, restart_required=False)

    changed, restart = changes(params["runtime"], planned)
    result = {
        "changed": bool(changed),
        "restart_required": restart,
        "changed_files": sorted(changed),
        "diff": [
            {
                "before_header": p,
                "after_header": p,
                "before": planned["before"][p],
                "after": t or "",
            }
            for p, t in sorted(changed.items())
        ],
    }
    if "config_version" in planned:
        result["config_version"] = planned["config_version"]
    result["created_files"] = sorted(p for p in changed if not os.path.exists(p))
    result["backup_files"] = {}
    if changed and not module.check_mode:
        for path, text in sorted(changed.items()):
            if params["backup"] and os.path.exists(path):
                result["backup_files"][path] = module.backup_local(path)
            if text is None:
                os.remove(path)
            else:
                write(module, path, text)
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            runtime=dict(type="str", required=True, choices=["containerd", "docker", "crio"]),
            state=dict(type="str", default="present", choices=["present", "absent"]),
            path=dict(type="path"),
            config_mode=dict(type="str", choices=["in_place", "drop_in"]),
            drop_in_path=dict(type="path"),
            runtime_name=dict(type="str", default="nvidia"),
            runtime_path=dict(type="path", default="/usr/bin/nvidia-container-runtime"),
            set_as_default=dict(type="bool"),
            enable_cdi=dict(type="bool"),
            config_version=dict(type="int", default=2, choices=[1, 2, 3]),
            backup=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
