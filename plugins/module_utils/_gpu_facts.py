# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure logic over discovered GPU facts: families, link classes, Kubernetes labels.

Private to the gpuops.k8s collection; no I/O, no NVML, so it is unit-tested on plain data
and shared by the gpu_info module, the node labelling module and the device plugin.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# NVML topology levels (nvmlGpuTopologyLevel_t) -> our name and the points NVIDIA's
# go-gpuallocator gives a GPU pair for that PCIe relation (higher is closer).
PCIE_LEVELS = {
    0: ("same_board", 60),  # NVML_TOPOLOGY_INTERNAL
    10: ("single_switch", 50),  # NVML_TOPOLOGY_SINGLE
    20: ("multiple_switches", 40),  # NVML_TOPOLOGY_MULTIPLE
    30: ("host_bridge", 30),  # NVML_TOPOLOGY_HOSTBRIDGE
    40: ("same_numa_node", 20),  # NVML_TOPOLOGY_NODE (same CPU)
    50: ("cross_cpu", 10),  # NVML_TOPOLOGY_SYSTEM
}
NVLINK_POINTS = 100

# Label key prefixes this collection owns (GPU feature discovery compatible).
GPU_PREFIX = "nvidia.com/gpu."
CUDA_PREFIX = "nvidia.com/cuda."

_LABEL_VALUE_MAX = 63
_INVALID_LABEL_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")
_LABEL_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")
# Tokens after which a product name stops naming the model: memory sizes, form factors
# and memory types ("Tesla P100-PCIE-16GB" -> "tesla p100").
_MODEL_STOP = re.compile(r"^(\d+gb|pcie|sxm\d*|nvl\d*|hbm\d*e?|gddr\d*x?|mig|dgxa?\d*)$")


def arch_family(major, minor):
    """Return the GPU feature discovery family for a CUDA compute capability.

    GFD's table, with Blackwell (10.x, 12.x) added; GFD reports Ada (8.9) as ampere and
    so do we, so that node selectors written for GFD keep matching.
    """
    if major == 7:
        return "volta" if minor < 5 else "turing"
    return {
        1: "tesla",
        2: "fermi",
        3: "kepler",
        5: "maxwell",
        6: "pascal",
        8: "ampere",
        9: "hopper",
        10: "blackwell",
        12: "blackwell",
    }.get(major, "undefined")


def label_value(text):
    """Make text a valid Kubernetes label value (<= 63 chars of [A-Za-z0-9_.-], alnum ends)."""
    value = _INVALID_LABEL_CHARS.sub("-", str(text).strip())
    value = _LABEL_EDGE.sub("", value[:_LABEL_VALUE_MAX])
    return value


def accelerator_model(product_name):
    """Return the seeds' `accelerator` label value for a product name.

    "Tesla P100-PCIE-16GB" -> "nvidia-tesla-p100", "NVIDIA H100 80GB HBM3" -> "nvidia-h100".
    """
    tokens = [t for t in re.split(r"[\s_/-]+", product_name.lower()) if t]
    if tokens and tokens[0] == "nvidia":
        tokens = tokens[1:]
    model = []
    for token in tokens:
        if _MODEL_STOP.match(token):
            break
        model.append(token)
    return label_value("-".join(["nvidia"] + (model or tokens)))


def pcie_relation(level):
    """Name and score of an NVML topology level; unknown levels rank as cross-CPU."""
    return PCIE_LEVELS.get(level, ("cross_cpu", PCIE_LEVELS[50][1]))


def mig_profile_name(gpu_slices, memory_mib):
    """NVIDIA's MIG profile name, e.g. 1 slice and 9984 MiB -> "1g.10gb"."""
    return "%dg.%dgb" % (gpu_slices, -(-memory_mib // 1024))


def link_matrix(gpus, nvlink_remotes, pcie_levels):
    """Build the pairwise link matrix.

    gpus: list of dicts with `index` and `pci_bus_id` (NVML form).
    nvlink_remotes: {index: [remote, ...]} with remote = {"type": "gpu"|"switch"|...,
        "pci_bus_id": str or None} for each active NVLink.
    pcie_levels: {(index_a, index_b): NVML topology level} for a < b.

    An NVLink whose remote end is a switch makes its GPU NVSwitch-connected; two such GPUs
    reach each other through the switch fabric at full NVLink bandwidth.
    """
    by_bus = {_bus_key(g["pci_bus_id"]): g["index"] for g in gpus}
    switch_links = {}
    direct = {}
    for index, remotes in nvlink_remotes.items():
        switch_links[index] = sum(1 for r in remotes if r["type"] == "switch")
        for remote in remotes:
            peer = by_bus.get(_bus_key(remote.get("pci_bus_id") or ""))
            # Both ends report a direct link: count it from the lower index only.
            if remote["type"] == "gpu" and peer is not None and peer > index:
                direct[(index, peer)] = direct.get((index, peer), 0) + 1
    pairs = []
    indexes = sorted(g["index"] for g in gpus)
    for pos, a in enumerate(indexes):
        for b in indexes[pos + 1 :]:
            level = pcie_levels.get((a, b))
            relation, points = pcie_relation(level)
            nvlinks = direct.get((a, b), 0)
            via_switch = bool(switch_links.get(a)) and bool(switch_links.get(b))
            pairs.append(
                {
                    "gpus": [a, b],
                    "pcie": relation,
                    "pcie_level": level,
                    "nvlinks": nvlinks,
                    "nvswitch": via_switch,
                    "score": points
                    + NVLINK_POINTS * (min(switch_links[a], switch_links[b]) if via_switch else nvlinks),
                }
            )
    return pairs


def _bus_key(bus_id):
    """Compare PCI bus ids in any form: NVML's 8-digit domain or sysfs' 4-digit one."""
    bus_id = bus_id.lower()
    domain, _sep, rest = bus_id.rpartition(":")[0].partition(":")
    if not _sep:
        return bus_id
    return "%04x:%s:%s" % (int(domain or "0", 16), rest, bus_id.rpartition(":")[2])


def sysfs_bus_id(nvml_bus_id):
    """NVML "00000000:3B:00.0" -> sysfs "0000:3b:00.0"."""
    return _bus_key(nvml_bus_id)


def render_labels(system, gpus, machine=None):
    """The node labels for a set of usable GPUs (empty when there are none).

    Keys and values follow NVIDIA's GPU feature discovery so selectors written for GFD
    match, plus `nvidia.com/gpu.present` (GPU Operator) and the seeds' `accelerator`.
    GFD describes a node by its first GPU; so do we (the caller warns on mixed nodes).
    """
    if not gpus:
        return {}
    first = gpus[0]
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(len(gpus)),
        "nvidia.com/gpu.product": label_value(first["name"].replace(" ", "-")),
        "accelerator": accelerator_model(first["name"]),
        "nvidia.com/mig.capable": str(any(g["mig"]["capable"] for g in gpus)).lower(),
    }
    if first.get("memory_total_mib"):
        labels["nvidia.com/gpu.memory"] = str(first["memory_total_mib"])
    major, minor = first["compute_capability"]["major"], first["compute_capability"]["minor"]
    if major:
        labels.update(
            {
                "nvidia.com/gpu.family": arch_family(major, minor),
                "nvidia.com/gpu.compute.major": str(major),
                "nvidia.com/gpu.compute.minor": str(minor),
            }
        )
    if first.get("mode"):
        labels["nvidia.com/gpu.mode"] = first["mode"]
    if machine:
        labels["nvidia.com/gpu.machine"] = label_value(machine.replace(" ", "-"))
    labels.update(_version_labels(system))
    return labels


def _version_labels(system):
    labels = {}
    driver = system.get("driver_version") or ""
    parts = driver.split(".")
    if 2 <= len(parts) <= 3:
        revision = parts[2] if len(parts) == 3 else ""
        labels.update(
            {
                "nvidia.com/cuda.driver-version.major": parts[0],
                "nvidia.com/cuda.driver-version.minor": parts[1],
                "nvidia.com/cuda.driver-version.revision": revision,
                "nvidia.com/cuda.driver-version.full": driver,
                # GFD still writes the deprecated names; selectors in the wild use them.
                "nvidia.com/cuda.driver.major": parts[0],
                "nvidia.com/cuda.driver.minor": parts[1],
                "nvidia.com/cuda.driver.rev": revision,
            }
        )
    cuda = system.get("cuda_driver_version")
    if cuda:
        major, minor = cuda.split(".")[:2]
        labels.update(
            {
                "nvidia.com/cuda.runtime-version.major": major,
                "nvidia.com/cuda.runtime-version.minor": minor,
                "nvidia.com/cuda.runtime-version.full": "%s.%s" % (major, minor),
                "nvidia.com/cuda.runtime.major": major,
                "nvidia.com/cuda.runtime.minor": minor,
            }
        )
    return labels
