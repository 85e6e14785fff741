#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_info
short_description: Describe a node's NVIDIA GPUs, their links and the labels they imply
version_added: 0.1.0
description:
  - Reads the node's NVIDIA GPUs through NVML (the C(nvidia-ml-py) bindings over the
    driver's C(libnvidia-ml.so.1)) and returns the driver versions, one entry per GPU
    (identity, memory, PCI and NUMA placement, compute capability, persistence and MIG
    state with MIG devices), the pairwise link matrix (PCIe relation, NVLink count,
    NVSwitch), and the node labels that later roles apply.
  - Labels use NVIDIA GPU feature discovery's keys and values (GFD v0.20.0), so node
    selectors written for GFD keep matching, plus C(nvidia.com/gpu.present) and
    C(accelerator=nvidia-<model>). Like GFD's, they also say what the device plugin offers
    (MIG strategy, MIG devices, time-slicing or MPS replicas, renamed resources), computed
    with the same code the gpuops device plugin serves with, from the configuration the
    device_plugin role recorded on the node (O(device_plugin_record)) or O(device_plugin).
  - When the gpuops device plugin would refuse the GPUs under that configuration (a MIG
    layout strategy single cannot serve, a shared resource the node does not have), a
    warning says why; the labels still follow GPU feature discovery (C(<model>-MIG-INVALID)).
  - A node without the driver, with the driver not loaded, or with no GPU gets a clear
    result instead of a traceback; a GPU that stops answering during the query is reported
    in RV(lost_gpus) and left out of the labels.
author:
  - gpuops.k8s maintainers (@gpuops)
requirements:
  - nvidia-ml-py (Python module C(pynvml)) on the managed node
  - the NVIDIA driver's C(libnvidia-ml.so.1) on the loader path
extends_documentation_fragment:
  - gpuops.k8s.attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
options:
  require_nvml:
    description:
      - Fail when NVML cannot be used (driver not installed or not loaded).
      - Set to V(false) on nodes that may not have a driver yet, for example before the
        driver role ran; the module then returns RV(nvml.available=false) and the reason.
      - With V(false), a node without nvidia-ml-py is such a node too (reason
        V(bindings_not_installed)); with V(true) the module fails there as any module
        missing its Python library does.
    type: bool
    default: true
  fail_on_lost_gpu:
    description:
      - Fail when a GPU stops answering during the query (lost, fallen off the bus).
      - With V(false) the GPU is listed in RV(lost_gpus), a warning is shown, and it does
        not count towards the labels.
    type: bool
    default: false
  sysfs_root:
    description:
      - Where the host's sysfs is mounted; NUMA nodes, PCI classes and the machine type
        are read from there.
      - Change it when the module runs in a container with the host's C(/sys) elsewhere.
    type: path
    default: /sys
  device_plugin:
    description:
      - What the node's device plugin serves, for the labels that describe it. Wins over
        O(device_plugin_record).
      - The shape of the device_plugin role's record (its C(device_plugin_served) fact).
    type: dict
    suboptions:
      mode:
        description:
          - Which plugin serves the node. V(gpuops) refuses what the gpuops daemon does not
            serve (C(sharing.mps)), as the daemon itself does. V(dra) is the gpuops daemon's
            DRA front end (driver C(gpu.gpuops.k8s)), read as V(gpuops) is. V(nvidia_dra) is
            NVIDIA's DRA driver, read as V(nvidia) is.
        type: str
        choices: [gpuops, nvidia, operator, dra, nvidia_dra]
        default: gpuops
      config:
        description:
          - The plugin's configuration file as data, NVIDIA's C(version v1) schema
            (C(flags.migStrategy), C(sharing.timeSlicing), C(sharing.mps)) plus the gpuops
            daemon's extensions (C(perDevice), C(devices), C(rename)).
        type: dict
        default: {}
      environment:
        description:
          - The plugin's environment; C(MIG_STRATEGY) wins over C(flags.migStrategy), as in
            both plugins.
        type: dict
        default: {}
  device_plugin_record:
    description:
      - The JSON file in which the device_plugin role records what the node's plugin
        serves, read when O(device_plugin) is not given.
      - When it does not exist the labels describe a plugin with its defaults (MIG
        strategy none, no sharing).
    type: path
    default: /etc/gpuops-device-plugin/served.json
  fail_on_plugin_error:
    description:
      - Fail when O(device_plugin) is not valid or O(device_plugin_record) cannot be read or
        is not valid.
      - Set to V(false) where such a node must still be described, for example by a
        diagnosis; the module then returns the GPUs, RV(device_plugin.error) says what is
        wrong, and RV(labels) is empty (what the labels should be depends on what the plugin
        serves).
    type: bool
    default: true
notes:
  - The module never changes the GPUs' settings.
seealso:
  - name: NVIDIA GPU feature discovery labels
    description: The label keys this module computes.
    link: https://github.com/NVIDIA/k8s-device-plugin/tree/main/docs/gpu-feature-discovery
"""

EXAMPLES = r"""
- name: Describe the GPUs
  gpuops.k8s.gpu_info:
  register: gpu

- name: Show what the node has
  ansible.builtin.debug:
    msg: "{{ gpu.gpu_count }} x {{ gpu.gpus[0].name }}, driver {{ gpu.nvml.driver_version }}"
  when: gpu.gpu_count > 0

- name: Preflight on nodes that may not have a driver yet
  gpuops.k8s.gpu_info:
    require_nvml: false
  register: gpu

- name: Labels for a node whose plugin time-slices each GPU four ways
  gpuops.k8s.gpu_info:
    device_plugin:
      config:
        version: v1
        sharing:
          timeSlicing:
            resources: [{name: nvidia.com/gpu, replicas: 4}]
  register: gpu

- name: Say why NVML is not usable
  ansible.builtin.debug:
    msg: "{{ gpu.nvml.reason }}: {{ gpu.nvml.error }}"
  when: not gpu.nvml.available
"""

RETURN = r"""
nvml:
  description: Whether NVML answered, and the versions it reported.
  returned: always
  type: dict
  contains:
    available:
      description: NVML initialised.
      type: bool
      sample: true
    reason:
      description:
        - Why NVML is unusable, V(library_not_found), V(init_failed) or
          V(bindings_not_installed) (no nvidia-ml-py for the node's Python); null when available.
      type: str
      sample: library_not_found
    error:
      description: The explanation that goes with RV(nvml.reason).
      type: str
      sample: "NVML library libnvidia-ml.so.1 was not found: the NVIDIA driver is not installed"
    driver_version:
      description: NVIDIA driver version.
      type: str
      sample: 550.54.15
    cuda_driver_version:
      description: Highest CUDA version the driver supports, C(major.minor).
      type: str
      sample: "12.4"
    nvml_version:
      description: NVML library version.
      type: str
      sample: 12.550.54.15
gpu_count:
  description: Number of usable GPUs (those in RV(gpus)).
  returned: always
  type: int
  sample: 8
gpus:
  description: One entry per usable GPU, in NVML index order.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: NVML index.
      type: int
    minor_number:
      description: Minor number of C(/dev/nvidia<minor>).
      type: int
    uuid:
      description: GPU UUID.
      type: str
      sample: GPU-4a8e1f07-0c8c-1d2e-a3b4-5c6d7e8f9a0b
    name:
      description: Product name.
      type: str
      sample: NVIDIA H100 80GB HBM3
    memory_total_mib:
      description: Framebuffer memory in MiB.
      type: int
      sample: 81559
    pci_bus_id:
      description: PCI bus id in NVML form (8-digit domain).
      type: str
      sample: 00000000:1B:00.0
    pci_bus_id_sysfs:
      description: PCI bus id as sysfs names it.
      type: str
      sample: 0000:1b:00.0
    numa_node:
      description: NUMA node from sysfs; null when the platform has none (-1) or sysfs lacks it.
      type: int
    mode:
      description: V(compute) or V(graphics) from the PCI class; null when unknown.
      type: str
    compute_capability:
      description: CUDA compute capability as C(major), C(minor) and C(full).
      type: dict
      sample: {major: 9, minor: 0, full: "9.0"}
    family:
      description: Architecture family as GPU feature discovery names it.
      type: str
      sample: hopper
    persistence_mode:
      description: Persistence mode; null when not supported.
      type: bool
    mig:
      description: MIG capability, current and pending mode, and MIG devices when enabled.
      type: dict
      sample:
        capable: true
        current: enabled
        pending: enabled
        devices:
          - index: 0
            uuid: MIG-5b1c...
            profile: 1g.10gb
            memory_total_mib: 9984
            gpu_instance_id: 7
            compute_instance_id: 0
            attributes: {memory_mib: 9984, multiprocessors: 16, gpu_instance_slices: 1,
                         compute_instance_slices: 1, copy_engines: 1, decoders: 1,
                         encoders: 0, jpeg_engines: 1, ofa_engines: 0}
    nvlinks:
      description: Active NVLinks, and how many end at an NVSwitch or at another GPU.
      type: dict
      sample: {active: 18, to_switch: 18, to_gpu: 0}
    fabric:
      description:
        - The GPU's NVLink fabric registration (multi-node NVLink such as GB200 NVL72, and
          NVSwitch boards), as NVML's C(nvmlDeviceGetGpuFabricInfo) reports it. C(state) is
          V(not_supported), V(not_started), V(in_progress) or V(completed); C(status) is the
          registration's NVML return code (0 when it succeeded); C(cluster_uuid) and
          C(clique_id) name the NVLink domain (C(nvidia.com/gpu.clique) in the labels).
        - Null when NVML could not say (the bindings or the driver lack the call, or the
          query failed).
      type: dict
      sample:
        state: completed
        status: 0
        cluster_uuid: 6f1c2a4e-58b0-4c3d-9e21-0a7b5c9d3e12
        clique_id: 32766
    vgpu:
      description:
        - Whether the GPU is an NVIDIA vGPU (read from its PCI configuration space, as GPU
          feature discovery does) and the host's driver version and branch.
        - Null when the configuration space could not be read in full (not root).
      type: dict
      sample: {present: false, host_driver_version: null, host_driver_branch: null}
lost_gpus:
  description: GPUs that stopped answering during the query, with NVML's error.
  returned: always
  type: list
  elements: dict
  sample: [{index: 3, error: GPU is lost, nvml_code: 15}]
links:
  description:
    - One entry per pair of usable GPUs.
    - C(pcie) is the closest common PCIe ancestor (V(same_board), V(single_switch),
      V(multiple_switches), V(host_bridge), V(same_numa_node), V(cross_cpu)); C(nvlinks)
      counts direct GPU-to-GPU NVLinks; C(nvswitch) is true when both GPUs have NVLinks
      to an NVSwitch; C(score) ranks the pair for allocation (higher is closer).
  returned: always
  type: list
  elements: dict
  sample: [{gpus: [0, 1], pcie: cross_cpu, pcie_level: 50, nvlinks: 0, nvswitch: true, score: 1810}]
nvswitch:
  description: Some GPU has an NVLink to an NVSwitch (fabric manager is needed).
  returned: always
  type: bool
labels:
  description:
    - Node labels the GPUs and the device plugin imply; empty when the node has no usable GPU.
    - GPU feature discovery's set (without its timestamp); a node with GPUs of several models
      is described by the first GPU's model; MIG strategy single describes the MIG devices
      (C(nvidia.com/gpu.product) C(<model>-MIG-<profile>)), mixed adds
      C(nvidia.com/mig-<profile>.*) per profile; C(nvidia.com/gpu.clique)
      (C(<cluster UUID>.<clique ID>)) when the GPUs registered with the NVLink fabric name
      one clique.
  returned: always
  type: dict
  sample:
    accelerator: nvidia-h100
    nvidia.com/gpu.present: "true"
    nvidia.com/gpu.count: "8"
    nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3-SHARED
    nvidia.com/gpu.replicas: "4"
    nvidia.com/gpu.sharing-strategy: time-slicing
    nvidia.com/gpu.memory: "81559"
    nvidia.com/gpu.family: hopper
    nvidia.com/gpu.compute.major: "9"
    nvidia.com/gpu.compute.minor: "0"
    nvidia.com/gpu.machine: DGX-H100
    nvidia.com/gpu.mode: compute
    nvidia.com/cuda.driver-version.full: 550.54.15
    nvidia.com/cuda.runtime-version.full: "12.4"
    nvidia.com/mig.capable: "true"
    nvidia.com/mps.capable: "false"
    nvidia.com/vgpu.present: "false"
device_plugin:
  description: The device plugin configuration the labels describe, and where it came from.
  returned: always
  type: dict
  contains:
    source:
      description: V(option) (O(device_plugin)), V(record) (O(device_plugin_record)) or V(none) (defaults).
      type: str
      sample: record
    mode:
      description:
        Which plugin serves the node (V(gpuops), V(nvidia), V(operator), V(dra)); null when unknown.
      type: str
      sample: gpuops
    mig_strategy:
      description: The plugin's MIG strategy.
      type: str
      sample: none
    sharing_strategy:
      description: V(time-slicing), V(mps) or V(none).
      type: str
      sample: time-slicing
    error:
      description:
        - Why the configuration could not be taken (its origin, the problem and the fix);
          null when it was. Only with O(fail_on_plugin_error=false), else the module fails
          with it.
      type: str
      sample: null
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.k8s.plugins.module_utils import _plugin_config as plugin_config
from ansible_collections.gpuops.k8s.plugins.module_utils._gpu_info import GpuInfoError, MissingBindings, run

ARGUMENT_SPEC = dict(
    require_nvml=dict(type="bool", default=True),
    fail_on_lost_gpu=dict(type="bool", default=False),
    sysfs_root=dict(type="path", default="/sys"),
    device_plugin=dict(
        type="dict",
        options=dict(
            mode=dict(type="str", default="gpuops", choices=list(plugin_config.PLUGIN_MODES)),
            config=dict(type="dict", default={}),
            environment=dict(type="dict", default={}),
        ),
    ),
    device_plugin_record=dict(type="path", default=plugin_config.RECORD_PATH),
    fail_on_plugin_error=dict(type="bool", default=True),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    failure = None
    try:
        result = run(module)
    except MissingBindings as error:
        module.fail_json(msg=missing_required_lib("nvidia-ml-py"), exception=error.traceback)
    except GpuInfoError as error:
        failure = error
    # Failed outside the except block, where ansible-core 2.17 and 2.18 would add a
    # traceback at -vvv: the message is the reason.
    if failure is not None:
        module.fail_json(msg=str(failure), **failure.result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
