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
  - B(Docker) C(daemon.json) in place (key order kept), B(CRI-O) as a drop-in or in place. A
    new CRI-O entry, like nvidia-ctk's, copies the default runtime's settings
    (C(runtime_root), C(monitor_path), C(allowed_annotations), ...); in drop-in mode that
    default is read from O(path) and the other files of the drop-in's directory.
  - B(k3s and RKE2) write their containerd C(config.toml) anew at every start (its first
    lines say so) and declare the C(nvidia) runtime themselves when they find
    C(nvidia-container-runtime) in C(/usr/local/nvidia/toolkit) or C(/usr/bin). Such a file
    is left alone, RV(distribution) names the distribution, RV(msg) says what it does and
    a warning what to do (restart it; its C(default-runtime) setting).
  - A containerd config whose CRI plugin is disabled (C(disabled_plugins), as Docker's
    C(containerd.io) package ships it) is edited, with a warning that the edit has no effect.
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
    description:
      - Whether the NVIDIA runtime is declared (V(present)) or not (V(absent)).
      - For containerd, V(absent) removes it from both places whatever O(config_mode) is
        now (the entry in O(path), the C(imports) line and O(drop_in_path)), so an
        inventory whose mode changed since the install still gets the node back.
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
      - V(true) makes the runtime the default one; V(false) gives back the default the file
        had before this module made it the default (or deletes the key it added), else
        names runc (a CRI-O drop-in and Docker, no key); unset leaves the default as the
        file has it.
      - O(state=absent) gives the default back the same way.
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
    tomlkit the same run installs), the same plan is made reading with Python's
    C(tomllib). C(changed), RV(restart_required) and the files are exact; the diff leaves
    out a file whose new text only tomlkit writes (an edit inside an array or inline table).
  - A key this module adds or changes so that O(state=absent) can give back what was there
    (a default runtime, an C(imports) line) gets a comment after it,
    C(# gpuops.k8s nvidia_runtime) followed by C(added) or C(was) and the old value.
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
  sample: [/etc/crio/crio.conf.d/99-nvidia.conf]
backup_files:
  description: Backups made, as changed file -> its backup (files that existed only).
  returned: always
  type: dict
  sample: {/etc/docker/daemon.json: /etc/docker/daemon.json.12345.2026-11-22@10:00:00~}
config_mode:
  description: The config mode used (O(config_mode), or the runtime's default for it).
  returned: always
  type: str
  sample: drop_in
parameters:
  description:
    - This run's options, all but O(state), defaults applied; O(config_mode), O(path) and
      O(drop_in_path) are the runtime's own where none was given (null for Docker, which
      has no O(drop_in_path)).
    - The same in check mode. The C(container_runtime) role writes them for its drift guard,
      which plans with them as this module does.
  returned: always
  type: dict
  sample:
    runtime: containerd
    config_mode: in_place
    path: /etc/containerd/config.toml
    drop_in_path: /etc/containerd/conf.d/99-nvidia.toml
    runtime_name: nvidia
    runtime_path: /usr/bin/nvidia-container-runtime
    set_as_default: true
    enable_cdi: null
    config_version: 2
    backup: true
planned_files:
  description:
    - The files this module manages for these options (what it writes when they drift),
      whether they change now or not; for the drift guard to watch.
    - Empty where the distribution writes the file itself (RV(distribution)).
  returned: always
  type: list
  elements: str
  sample: [/etc/crio/crio.conf.d/99-nvidia.conf]
distribution:
  description:
    - V(k3s) or V(rke2) when that distribution writes containerd's config file anew at
      every start; nothing is edited then (RV(msg)); null otherwise.
  returned: always
  type: str
  sample: k3s
msg:
  description: What the distribution does with the file and the NVIDIA runtime.
  returned: when RV(distribution) is set
  type: str
  sample: >-
    k3s writes /var/lib/rancher/k3s/agent/etc/containerd/config.toml anew from its template
    (config-v3.toml.tmpl or config.toml.tmpl beside it) at every start, so nothing was edited: ...
created_files:
  description: Files the change created (they had no previous version to back up).
  returned: always
  type: list
  elements: str
  sample: [/etc/containerd/conf.d/99-nvidia.toml]
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.defaults import ENGINES, OPTIONS
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.errors import (
    MissingTomlkit,
    RuntimeConfigError,
)
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.runner import run

ARGUMENT_SPEC = dict(
    runtime=dict(type="str", required=True, choices=sorted(ENGINES)),
    state=dict(type="str", default=OPTIONS["state"], choices=["present", "absent"]),
    path=dict(type="path"),
    config_mode=dict(type="str", choices=["in_place", "drop_in"]),
    drop_in_path=dict(type="path"),
    runtime_name=dict(type="str", default=OPTIONS["runtime_name"]),
    runtime_path=dict(type="path", default=OPTIONS["runtime_path"]),
    set_as_default=dict(type="bool"),
    enable_cdi=dict(type="bool"),
    config_version=dict(type="int", default=OPTIONS["config_version"], choices=[1, 2, 3]),
    backup=dict(type="bool", default=OPTIONS["backup"]),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = run(module)
    except MissingTomlkit as error:
        module.fail_json(msg=missing_required_lib("tomlkit"), exception=error.traceback)
    except RuntimeConfigError as error:
        module.fail_json(msg=str(error), changed=False, restart_required=False)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
