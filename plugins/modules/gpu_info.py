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
  - Labels use NVIDIA GPU feature discovery's keys and values, so node selectors written
    for GFD keep matching, plus C(nvidia.com/gpu.present) and C(accelerator=nvidia-<model>).
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
      description: Why NVML is unusable, V(library_not_found) or V(init_failed); null when available.
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
          - {index: 0, uuid: MIG-5b1c..., profile: 1g.10gb, memory_total_mib: 9984,
             gpu_instance_id: 7, compute_instance_id: 0}
    nvlinks:
      description: Active NVLinks, and how many end at an NVSwitch or at another GPU.
      type: dict
      sample: {active: 18, to_switch: 18, to_gpu: 0}
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
  description: Node labels the GPUs imply; empty when the node has no usable GPU.
  returned: always
  type: dict
  sample:
    accelerator: nvidia-h100
    nvidia.com/gpu.present: "true"
    nvidia.com/gpu.count: "8"
    nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
    nvidia.com/gpu.memory: "81559"
    nvidia.com/gpu.family: hopper
    nvidia.com/gpu.compute.major: "9"
    nvidia.com/gpu.compute.minor: "0"
    nvidia.com/cuda.driver-version.full: 550.54.15
    nvidia.com/cuda.runtime-version.full: "12.4"
    nvidia.com/mig.capable: "true"
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.k8s.plugins.module_utils import _gpu_facts as facts
from ansible_collections.gpuops.k8s.plugins.module_utils import _nvml_discovery as nvml


def run(module):
    """Discover, then shape the result; typed discovery errors become a clear result."""
    params = module.params
    result = {
        "changed": False,
        "gpus": [],
        "gpu_count": 0,
        "lost_gpus": [],
        "links": [],
        "nvswitch": False,
        "labels": {},
    }
    try:
        found = nvml.discover(sysfs_root=params["sysfs_root"])
    except nvml.DiscoveryError as error:
        unusable = error
    else:
        unusable = None
    # Failed outside the except block: the reason is the message, not a traceback.
    if unusable is not None:
        result["nvml"] = {
            "available": False,
            "reason": unusable.reason,
            "error": str(unusable),
            "driver_version": None,
            "cuda_driver_version": None,
            "nvml_version": None,
        }
        if params["require_nvml"]:
            module.fail_json(msg=str(unusable), **result)
        return result

    result["nvml"] = dict(found["system"], available=True, reason=None, error=None)
    gpus, lost = found["gpus"], found["lost_gpus"]
    for gone in lost:
        message = "GPU %d did not answer NVML: %s" % (gone["index"], gone["error"])
        if params["fail_on_lost_gpu"]:
            module.fail_json(msg=message, **dict(result, gpus=gpus, lost_gpus=lost))
        module.warn(message + "; it is left out of gpu_count and the labels")
    if len(set(g["name"] for g in gpus)) > 1:
        module.warn(
            "GPUs of different models (%s): labels describe GPU %d like GPU feature "
            "discovery does" % (", ".join(sorted(set(g["name"] for g in gpus))), gpus[0]["index"])
        )
    machine = nvml.read_machine_type(params["sysfs_root"])
    result.update(
        gpus=gpus,
        gpu_count=len(gpus),
        lost_gpus=lost,
        links=found["links"],
        nvswitch=found["nvswitch"],
        labels=facts.render_labels(found["system"], gpus, machine=machine),
    )
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            require_nvml=dict(type="bool", default=True),
            fail_on_lost_gpu=dict(type="bool", default=False),
            sysfs_root=dict(type="path", default="/sys"),
        ),
        supports_check_mode=True,
    )
    if not nvml.HAS_PYNVML:
        module.fail_json(msg=missing_required_lib("nvidia-ml-py"), exception=nvml.PYNVML_IMPORT_ERROR)
    module.exit_json(**run(module))


if __name__ == "__main__":
    main()
