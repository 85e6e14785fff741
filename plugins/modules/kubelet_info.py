#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: kubelet_info
short_description: Read a node's kubelet and the cgroup hierarchy it runs on
version_added: 0.2.0
description:
  - Reads, without changing anything, what decides whether the node's kubelet can run on
    its host. That is the kubelet's version (C(kubelet --version)), the settings of its
    configuration file that concern the host (C(failCgroupV1), C(cgroupDriver)), and the
    host's cgroup hierarchy (v2 where C(/sys/fs/cgroup) is a C(cgroup2) mount, else v1).
  - The kubelet and its configuration file are the running kubelet's (its C(/proc) entry
    and C(--config) flag) when one runs, else O(kubelet_path) and the first file of
    O(config_paths) that exists.
  - From Kubernetes 1.35 a kubelet refuses to start on a cgroup v1 host unless its
    configuration sets C(failCgroupV1) to false (KEP-5573). The C(gpu_doctor) role and
    C(playbooks/site.yml)'s preflight turn these facts into a finding with its fix.
author:
  - gpuops.k8s maintainers (@gpuops)
extends_documentation_fragment:
  - gpuops.k8s.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  kubelet_path:
    description:
      - The kubelet binary, where no kubelet is running.
      - Defaults to C(kubelet) on E(PATH), then C(/usr/bin/kubelet) and C(/usr/local/bin/kubelet).
    type: path
  config_paths:
    description:
      - Where to look for the kubelet configuration file, in order, where no running kubelet
        names one with C(--config).
    type: list
    elements: path
    default:
      - /var/lib/kubelet/config.yaml
      - /etc/kubernetes/kubelet-config.yaml
      - /etc/kubernetes/kubelet.yaml
"""

EXAMPLES = r"""
- name: Read the kubelet
  gpuops.k8s.kubelet_info:
  register: kubelet

- name: Say whether the kubelet will run on this host
  ansible.builtin.debug:
    msg: >-
      kubelet {{ kubelet.version }} on cgroup v{{ kubelet.cgroup_version }},
      failCgroupV1 {{ kubelet.config.failCgroupV1 | default('unset') }}
"""

RETURN = r"""
binary:
  description: The kubelet binary read; null where none was found.
  returned: always
  type: str
  sample: /usr/bin/kubelet
version:
  description: The kubelet's version, as C(kubelet --version) prints it; null where there is no kubelet.
  returned: always
  type: str
  sample: v1.37.2
running:
  description: Whether a kubelet process runs on the node.
  returned: always
  type: bool
config_path:
  description: The kubelet configuration file read; null where none was found.
  returned: always
  type: str
  sample: /var/lib/kubelet/config.yaml
config:
  description:
    - The configuration's top-level C(failCgroupV1) and C(cgroupDriver), where it sets them.
      A key it does not set is absent, and the kubelet takes its default.
  returned: always
  type: dict
  sample: {failCgroupV1: false, cgroupDriver: systemd}
config_error:
  description: Why the configuration file could not be read; null where it was.
  returned: always
  type: str
kubeconfig:
  description:
    - The running kubelet's C(--kubeconfig), its credentials for the API server (the Node
      authorizer's identity of this node); null where no kubelet runs or it names none.
  returned: always
  type: str
  sample: /etc/kubernetes/kubelet.conf
cgroup_version:
  description:
    - 2 on the unified hierarchy, 1 on the v1 or hybrid layout, null where C(/sys/fs/cgroup)
      is not mounted.
  returned: always
  type: int
  sample: 2
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.k8s.plugins.module_utils._kubelet import (
    cgroup_version,
    config_settings,
    parse_version,
)

_BINARY_FALLBACKS = ["/usr/bin", "/usr/local/bin"]


def _read(path):
    with open(path) as handle:
        return handle.read()


def _root(pid):
    """(device, inode) of a process's root directory, or None where it cannot be read."""
    try:
        status = os.stat("/proc/%s/root" % pid)
    except OSError:
        return None
    return status.st_dev, status.st_ino


# A kubelet asked only for its version or help (kubelet_info itself runs one, and on a host
# reached by several inventory names at once another run may be caught mid-scan) is no
# running kubelet.
_ONE_SHOT_FLAGS = frozenset(("--version", "--help", "-h"))


def _flag(argv, name):
    """The value of flag name (--config, --kubeconfig) on a command line, or None."""
    for index, arg in enumerate(argv):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and index + 1 < len(argv):
            return argv[index + 1]
    return None


def running_kubelet():
    """(binary, --config value, --kubeconfig value) of a running kubelet, or Nones.

    Only a kubelet that sees this host's files counts: one in a container (a node of a
    kind-like lab, or a kubelet in a pod) shows in /proc too, but its binary and --config
    are paths inside the container, which here name nothing or something else. Of several,
    one started with --config wins, whatever order /proc lists them in.
    """
    ours = _root("self")
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = _read("/proc/%s/cmdline" % pid).split("\0")
            binary = os.readlink("/proc/%s/exe" % pid)
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if os.path.basename(binary) != "kubelet" or _ONE_SHOT_FLAGS.intersection(argv):
            continue
        # Its own root directory, not its mount namespace: the lab's host kubelet runs in a
        # namespace of its own over this host's root.
        if ours is not None and _root(pid) not in (ours, None):
            continue
        found.append((binary, _flag(argv, "--config"), _flag(argv, "--kubeconfig")))
    found.sort(key=lambda kubelet: kubelet[1] is None)
    return found[0] if found else (None, None, None)


def read_config(path):
    """(settings, error) of the configuration file at path."""
    try:
        return config_settings(_read(path)), None
    except (OSError, ValueError) as error:
        return {}, "%s: %s" % (path, error)


def gather(module):
    binary, config_path, kubeconfig = running_kubelet()
    running = binary is not None
    if not binary:
        binary = module.params["kubelet_path"] or module.get_bin_path("kubelet", opt_dirs=_BINARY_FALLBACKS)
    version = None
    if binary and os.access(binary, os.X_OK):
        rc, out, _err = module.run_command([binary, "--version"], environ_update={"LC_ALL": "C"})
        parsed = parse_version(out) if rc == 0 else None
        version = "v%d.%d.%d" % parsed if parsed else None
    else:
        binary = None
    if config_path is None:
        config_path = next((path for path in module.params["config_paths"] if os.path.isfile(path)), None)
    config, config_error = read_config(config_path) if config_path else ({}, None)
    return {
        "changed": False,
        "binary": binary,
        "version": version,
        "running": running,
        "config_path": config_path,
        "config": config,
        "config_error": config_error,
        "kubeconfig": kubeconfig,
        "cgroup_version": cgroup_version(_read("/proc/self/mounts")),
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            kubelet_path=dict(type="path"),
            config_paths=dict(
                type="list",
                elements="path",
                default=[
                    "/var/lib/kubelet/config.yaml",
                    "/etc/kubernetes/kubelet-config.yaml",
                    "/etc/kubernetes/kubelet.yaml",
                ],
            ),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**gather(module))


if __name__ == "__main__":
    main()
