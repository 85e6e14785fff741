#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: node_state_info
short_description: Read what runs on a GPU node, in one call
version_added: 0.2.0
description:
  - Reads, without changing anything, the node-local state the C(gpu_doctor) and
    C(gpu_validation) roles judge, in one module call instead of one task each.
  - The NVIDIA kernel module (C(/proc/driver/nvidia/version)) and the major numbers of the
    NVIDIA drivers in C(/proc/devices).
  - Every C(/dev/nvidia*) entry (the GPUs' nodes, C(nvidiactl), C(nvidia-uvm),
    C(nvidia-uvm-tools), C(nvidia-modeset), C(nvidia-caps)) with its type and major and minor
    numbers.
  - The state of the systemd units given in O(units), read with one C(systemctl show). A host
    where systemd is not the init system says so in RV(systemd.available) and does not fail.
  - The kubelet's device plugin directory, with the plugins' sockets and the devices the
    kubelet's checkpoint has registered (those it holds healthy), parsed.
  - A stat of each path in O(paths) (for example the NVIDIA container runtime binary).
  - Where O(container_runtime_version) is given, whether the node's container runtime injects
    CDI devices (RV(runtime_cdi)), as DRA needs. For containerd 1.7 and newer this reads
    containerd's effective configuration with C(containerd config dump).
  - Where O(nvidia_ctk) is given, the CDI devices and the specs the CDI cache cannot load, as
    C(nvidia-ctk cdi list) reports them (RV(cdi)).
  - The Debian packages of O(packages) (installed version and dpkg selection, one
    C(dpkg-query)) and the Python distributions in the venvs of O(python_envs), so that a role
    asks apt, dpkg or pip only where something is to do (see the filters
    P(gpuops.k8s.packages_missing#filter), P(gpuops.k8s.selections_to_change#filter) and
    P(gpuops.k8s.requirements_missing#filter)).
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
  units:
    description:
      - systemd units whose state to read. A name without a unit type is a service
        (C(kubelet) is C(kubelet.service)), as for systemctl.
      - A unit systemd does not know is returned with C(LoadState) V(not-found).
    type: list
    elements: str
    default: []
  plugin_dir:
    description: The kubelet's device plugin directory.
    type: path
    default: /var/lib/kubelet/device-plugins
  paths:
    description: Paths to stat, links followed.
    type: list
    elements: path
    default: []
  dev_dir:
    description: Where the device nodes are.
    type: path
    default: /dev
  container_runtime_version:
    description:
      - The node's container runtime as its Node reports it (C(status.nodeInfo.containerRuntimeVersion),
        for example V(containerd://1.7.24) or V(cri-o://1.30.4)). Given, RV(runtime_cdi) says
        whether that runtime injects CDI devices; an empty string is a Node that reports none.
    type: str
  planned_enable_cdi:
    description:
      - The C(enable_cdi) the C(container_runtime) role applies to containerd in this run, taken
        for containerd's setting instead of the one it dumps. For check mode, where that role's
        change is not applied yet; unset, the setting as C(containerd config dump) prints it.
    type: bool
  nvidia_ctk:
    description:
      - NVIDIA's C(nvidia-ctk). Given, C(nvidia-ctk cdi list) is run (RV(cdi)); a path where
        nothing is installed gives RV(cdi.available) false.
    type: path
    version_added: 0.2.0
  packages:
    description:
      - Debian packages to read with C(dpkg-query) (RV(packages)). On a node without dpkg,
        RV(packages.available) is false.
    type: list
    elements: str
    default: []
    version_added: 0.2.0
  python_envs:
    description:
      - Virtual environments whose installed distributions to list (RV(python_envs)), from the
        names of their C(*.dist-info) directories.
    type: list
    elements: path
    default: []
    version_added: 0.2.0
notes:
  - Reading the kubelet's checkpoint needs root.
seealso:
  - module: gpuops.k8s.gpu_info
  - module: gpuops.k8s.kubelet_info
"""

EXAMPLES = r"""
- name: Read the node's state
  gpuops.k8s.node_state_info:
    units: [containerd, kubelet, gpuops-device-plugin]
    paths: [/usr/bin/nvidia-container-runtime]
  register: node_state

- name: Say whether containerd runs
  ansible.builtin.debug:
    msg: >-
      containerd is {{ node_state.systemd.units['containerd.service'].ActiveState }}
      ({{ node_state.systemd.units['containerd.service'].SubState }})
  when: node_state.systemd.available

- name: List the GPUs the kubelet holds healthy
  ansible.builtin.debug:
    msg: "{{ node_state.device_plugins.checkpoint.registered['nvidia.com/gpu'] | default([]) }}"
"""

RETURN = r"""
driver:
  description: The NVIDIA kernel module.
  returned: always
  type: dict
  contains:
    loaded:
      description: C(/proc/driver/nvidia/version) exists.
      type: bool
    version:
      description: Its NVRM line; null where the module is not loaded.
      type: str
      sample: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.163.01  Tue Apr  8 12:04:31 UTC 2025"
    majors:
      description:
        - The major number of each NVIDIA character device driver in C(/proc/devices)
          (V(nvidia-frontend) is the GPUs' and C(nvidiactl)'s, 195; V(nvidia-uvm) is chosen at load).
      type: dict
      sample: {nvidia-frontend: 195, nvidia-uvm: 510}
    error:
      description: Why a file could not be read; null where both were.
      type: str
devices:
  description:
    - Every C(/dev/nvidia*) entry, by name. C(type) is V(char), V(block), V(directory),
      V(file), V(socket), V(fifo), V(other) or V(missing) (a dangling link); C(major) and
      C(minor) are set for devices; C(link) is a link's target, else null.
  returned: always
  type: dict
  sample:
    nvidia0: {path: /dev/nvidia0, type: char, major: 195, minor: 0, link: null}
    nvidiactl: {path: /dev/nvidiactl, type: char, major: 195, minor: 255, link: null}
    nvidia-uvm: {path: /dev/nvidia-uvm, type: char, major: 510, minor: 0, link: null}
systemd:
  description: The units of O(units).
  returned: always
  type: dict
  contains:
    available:
      description: systemd is the init system (C(/run/systemd/system) exists) and answered.
      type: bool
    error:
      description: Why the units could not be read; null where they were or none were asked.
      type: str
      sample: systemd is not the init system here (no /run/systemd/system)
    units:
      description:
        - Each unit by its full name, with its C(LoadState), C(ActiveState), C(SubState),
          C(Result), C(UnitFileState) (V(enabled), V(disabled), V(static)..., empty for a unit
          systemd does not know), and for services C(NRestarts), C(ExecMainCode) and
          C(ExecMainStatus), as systemctl show prints them (strings).
      type: dict
      sample:
        containerd.service: {LoadState: loaded, ActiveState: inactive, SubState: dead, Result: success,
                             UnitFileState: enabled, NRestarts: "0", ExecMainCode: "1", ExecMainStatus: "0"}
device_plugins:
  description: The kubelet's device plugin directory.
  returned: always
  type: dict
  contains:
    dir:
      description: O(plugin_dir).
      type: str
    exists:
      description: The directory exists.
      type: bool
    sockets:
      description: The plugins' sockets in it (not the kubelet's own C(kubelet.sock)), by name.
      type: list
      elements: str
      sample: [nvidia-gpu.sock]
    kubelet_socket:
      description: The kubelet's registration socket C(kubelet.sock) is there.
      type: bool
    checkpoint:
      description:
        - The kubelet's C(kubelet_internal_checkpoint). C(registered) is its
          C(RegisteredDevices) by resource, the device IDs the kubelet held healthy when it last
          wrote the file (on each device update from a plugin and each allocation, not when a
          plugin disconnects); time-sliced replicas are C(<UUID>::<n>). C(allocated) is the pod
          UIDs of its C(PodDeviceEntries) by resource (pods gone stay listed until the kubelet
          next allocates). C(error) says why it could not be read or parsed.
      type: dict
      sample:
        path: /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint
        exists: true
        registered: {nvidia.com/gpu: [GPU-4a8e1f07-0c8c-1d2e-a3b4-5c6d7e8f9a0b]}
        allocated: {nvidia.com/gpu: [65df208a-dc4d-4bb0-8dc2-dca6fcd2cac6]}
        error: null
paths:
  description:
    - Each path of O(paths) with C(exists), C(type) (as in RV(devices)), C(executable), and its
      C(mode) (an octal string, V('0755')), C(uid) and C(gid), null where nothing is there.
  returned: always
  type: dict
  sample:
    /usr/bin/nvidia-container-runtime:
      {exists: true, type: file, executable: true, mode: '0755', uid: 0, gid: 0}
runtime_cdi:
  description:
    - Whether the container runtime of O(container_runtime_version) injects CDI devices; null
      where that option is not given. C(msg) is null where it does, else why not and what is
      valid (containerd 1.6 has no CDI; containerd 1.7 only with C(enable_cdi) in its CRI plugin;
      containerd 2 unless turned off; CRI-O from 1.23). A runtime not named here is not trusted.
  returned: always
  type: dict
  sample:
    runtime: containerd
    version: 1.7.24
    cdi: false
    setting: plugins."io.containerd.grpc.v1.cri".enable_cdi
    planned: null
    msg: >-
      containerd 1.7.24 has CDI off: plugins."io.containerd.grpc.v1.cri".enable_cdi = false
      (containerd's default). Turn it on with container_runtime_enable_cdi: true in this collection's
      container_runtime role. DRA needs containerd 1.7 with enable_cdi = true, containerd 2.0 or
      newer (CDI on unless turned off), or CRI-O 1.23+
cdi:
  description:
    - What C(nvidia-ctk cdi list) found in the CDI spec directories (C(/etc/cdi), C(/var/run/cdi));
      null where O(nvidia_ctk) is not given.
  returned: always
  type: dict
  contains:
    available:
      description: nvidia-ctk ran and answered.
      type: bool
    error:
      description: Why it could not be asked; null where it answered.
      type: str
    devices:
      description: The CDI devices, fully qualified (V(nvidia.com/gpu=0)).
      type: list
      elements: str
    spec_errors:
      description:
        - Each spec the CDI cache could not load, with why. A container runtime reads the same
          specs with the same code, and fails every container that asks for their devices.
      type: dict
  sample:
    available: true
    error: null
    devices: [nvidia.com/gpu=0, nvidia.com/gpu=all]
    spec_errors:
      /var/run/cdi/nvidia.yaml: >-
        failed to load CDI Spec failed to parse CDI Spec "/var/run/cdi/nvidia.yaml": failed to
        unmarshal CDI Spec: yaml: line 547: did not find expected ',' or '}'
packages:
  description: The packages of O(packages).
  returned: always
  type: dict
  contains:
    available:
      description: C(dpkg-query) is installed and answered (true where no package was asked).
      type: bool
    error:
      description: Why C(dpkg-query) could not be asked; null where it answered.
      type: str
    by_name:
      description:
        - Each package of O(packages) with C(installed) (dpkg's state is C(installed)),
          C(version) (the installed version, else null) and C(selection) (dpkg's want,
          V(install), V(hold), V(deinstall), V(purge) or V(unknown); null for a package dpkg
          does not know). Empty where RV(packages.available) is false.
      type: dict
  sample:
    available: true
    error: null
    by_name:
      containerd: {installed: true, version: 1.6.20~ds1-1+b1, selection: install}
      python3-tomlkit: {installed: false, version: null, selection: null}
python_envs:
  description:
    - Each venv of O(python_envs) with C(exists) (it has a C(bin/python*)) and C(distributions),
      the installed distributions by PEP 503 normalized name, with their versions.
  returned: always
  type: dict
  sample:
    /opt/gpuops-device-plugin/venv:
      exists: true
      distributions: {grpcio: 1.85.1, pyyaml: 6.0.3}
"""

import itertools

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuops.k8s.plugins.module_utils import _cdi_spec as cdi_spec
from ansible_collections.gpuops.k8s.plugins.module_utils import _node_state as node_state
from ansible_collections.gpuops.k8s.plugins.module_utils import _packages as packages
from ansible_collections.gpuops.k8s.plugins.module_utils import _runtime_cdi as runtime_cdi


def read_units(module, units):
    """The systemd part of the result: one systemctl show for every unit."""
    result = {"available": node_state.systemd_booted(), "error": None, "units": {}}
    if not result["available"]:
        result["error"] = "systemd is not the init system here (no %s)" % node_state.SYSTEMD_RUNTIME_DIR
        return result
    if not units:
        return result
    args = ["show", "--no-pager", "--property=" + ",".join(node_state.UNIT_PROPERTIES), "--", *units]
    out, _err, error = run_tool(module, "systemctl", args, "systemctl is not installed")
    try:
        if error:
            raise node_state.UnitStatesError(error)
        result["units"] = node_state.parse_unit_states(out, units)
    except node_state.UnitStatesError as failure:
        result.update(available=False, error=str(failure))
    return result


def run_tool(module, tool, args, missing, ok_rcs=(0,)):
    """(stdout, stderr, None) of `tool args` run in the C locale, or (None, None, why not):
    MISSING where the tool is not on PATH, else "<command> failed (rc N): <stderr>", the
    command named by the tool and its arguments up to the first option."""
    path = module.get_bin_path(tool)
    if not path:
        return None, None, missing
    rc, out, err = module.run_command([path, *args], environ_update={"LC_ALL": "C"})
    if rc not in ok_rcs:
        command = [tool, *itertools.takewhile(lambda arg: not arg.startswith("-"), args)]
        return None, None, "%s failed (rc %d): %s" % (" ".join(command), rc, err.strip())
    return out, err, None


def read_runtime_cdi(module, runtime_version, planned):
    """The runtime_cdi part of the result: containerd's configuration dumped where it decides."""
    if runtime_version is None:
        return None
    text = error = None
    if runtime_cdi.needs_config(runtime_version):
        text, _err, error = run_tool(
            module, "containerd", ["config", "dump"], "no containerd binary on this node's PATH"
        )
    return runtime_cdi.verdict(runtime_version, text, error, planned)


def read_cdi(module, nvidia_ctk):
    """The cdi part of the result: nvidia-ctk cdi list, as NVIDIA's own look at the CDI specs."""
    if nvidia_ctk is None:
        return None
    result = {"available": False, "error": None, "devices": [], "spec_errors": {}}
    if not node_state.read_paths([nvidia_ctk])[nvidia_ctk]["executable"]:
        result["error"] = "%s is not installed" % nvidia_ctk
        return result
    rc, out, err = module.run_command([nvidia_ctk, "cdi", "list"], environ_update={"LC_ALL": "C"})
    if rc != 0:
        result["error"] = "nvidia-ctk cdi list failed (rc %d): %s" % (rc, cdi_spec.failure_detail(err))
        return result
    result["devices"], result["spec_errors"] = cdi_spec.parse_cdi_list(out, err)
    result["available"] = True
    return result


def read_packages(module, names):
    """The packages part of the result: one dpkg-query for every name."""
    result = {"available": True, "error": None, "by_name": {}}
    if not names:
        return result
    out, _err, error = run_tool(
        module,
        "dpkg-query",
        ["--show", "--showformat=" + packages.DPKG_QUERY_FORMAT, "--", *names],
        "dpkg-query is not installed (not a Debian node)",
        ok_rcs=(0, packages.DPKG_QUERY_SOME_NOT_FOUND),
    )
    if error:
        result.update(available=False, error=error)
        return result
    result["by_name"] = packages.parse_dpkg_query(out, names)
    return result


def gather(module):
    params = module.params
    # Once each, in the order given: the result is keyed by unit.
    units = list(dict.fromkeys(node_state.unit_name(unit) for unit in params["units"] if unit.strip()))
    return {
        "changed": False,
        "driver": node_state.read_driver(),
        "devices": node_state.read_devices(params["dev_dir"]),
        "systemd": read_units(module, units),
        "device_plugins": node_state.read_device_plugins(params["plugin_dir"]),
        "paths": node_state.read_paths(params["paths"]),
        "runtime_cdi": read_runtime_cdi(
            module, params["container_runtime_version"], params["planned_enable_cdi"]
        ),
        "cdi": read_cdi(module, params["nvidia_ctk"]),
        "packages": read_packages(module, list(dict.fromkeys(name for name in params["packages"] if name))),
        "python_envs": dict((path, packages.read_python_env(path)) for path in params["python_envs"]),
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(
            units=dict(type="list", elements="str", default=[]),
            plugin_dir=dict(type="path", default="/var/lib/kubelet/device-plugins"),
            paths=dict(type="list", elements="path", default=[]),
            dev_dir=dict(type="path", default="/dev"),
            container_runtime_version=dict(type="str"),
            planned_enable_cdi=dict(type="bool"),
            nvidia_ctk=dict(type="path"),
            packages=dict(type="list", elements="str", default=[]),
            python_envs=dict(type="list", elements="path", default=[]),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**gather(module))


if __name__ == "__main__":
    main()
