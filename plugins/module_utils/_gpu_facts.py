# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure logic over discovered GPU facts: families, link classes, label values, vGPU and
NVLink fabric records.

Private to the gpuops.k8s collection; no I/O, no NVML, so it is unit-tested on plain data
and shared by the gpu_info module, the node labels (_gfd_labels) and the device plugin.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import uuid

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

_LABEL_VALUE_MAX = 63
# GPU feature discovery keeps letters, digits, "-", "_", "." and spaces, then joins the
# words with single dashes (internal/lm/resource.go, sanitise).
_GFD_DROPPED = re.compile(r"[^A-Za-z0-9_. -]")
_LABEL_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")
# Tokens after which a product name stops naming the model: memory sizes, form factors
# and memory types ("Tesla P100-PCIE-16GB" -> "tesla p100").
_MODEL_STOP = re.compile(r"^(\d+gb|pcie|sxm\d*|nvl\d*|hbm\d*e?|gddr\d*x?|mig|dgxa?\d*)$")


def arch_family(major, minor):
    """Return the GPU feature discovery family for a CUDA compute capability.

    GFD v0.20.0's table (internal/lm/resource.go, getArchFamily): Ada (8.9) is
    "ada-lovelace" since GFD v0.18.0, Blackwell is 10.x and 12.x, Rubin 13.x.
    """
    if major == 7:
        return "volta" if minor < 5 else "turing"
    if major == 8 and minor >= 9:
        return "ada-lovelace"
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
        13: "rubin",
    }.get(major, "undefined")


def gfd_sanitise(text):
    """text as GPU feature discovery writes it in a label value.

    GFD drops the characters a label value cannot hold (parentheses, slashes, ...) and
    joins the words with single dashes: "NVIDIA TITAN X (Pascal)" -> "NVIDIA-TITAN-X-Pascal".
    """
    return "-".join(_GFD_DROPPED.sub("", str(text)).split())


def valid_label_value(value):
    """value cut to 63 characters with a letter or digit at each end (empty stays empty).

    GFD stops at gfd_sanitise, so it can write a value Kubernetes refuses (a trailing "."
    or "-", more than 63 characters): there GFD's label is not applied at all, ours is.
    """
    return _LABEL_EDGE.sub("", value[:_LABEL_VALUE_MAX])


def label_value(text):
    """text as GPU feature discovery writes it, made a valid Kubernetes label value."""
    return valid_label_value(gfd_sanitise(text))


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


# PCI configuration space: the status register's "capability list" bit, the pointer to
# the first capability, and the vendor-specific capability that carries NVIDIA's vGPU
# record in a guest ("VF" at bytes 3-4; GFD internal/vgpu/pciutil.go and vgpu.go).
_PCI_STATUS = 0x06
_PCI_STATUS_CAP_LIST = 0x10
_PCI_CAP_POINTER = 0x34
_PCI_CAP_VENDOR_SPECIFIC = 0x09
_VGPU_SIGNATURE = b"VF"
_VGPU_FIRST_RECORD = 5
_VGPU_FIELD = 10  # host driver version, then branch: 10 bytes each, NUL padded


def _vendor_capability(config):
    if config[_PCI_STATUS] & _PCI_STATUS_CAP_LIST == 0:
        return None
    seen = set()
    pos = config[_PCI_CAP_POINTER]
    while pos and pos not in seen and pos + 2 < len(config):
        cap_id, following, length = config[pos], config[pos + 1], config[pos + 2]
        if cap_id == 0xFF:  # a broken chain
            return None
        if cap_id == _PCI_CAP_VENDOR_SPECIFIC:
            return bytes(config[pos : pos + length])
        seen.add(pos)
        pos = following
    return None


def vgpu_from_pci_config(config):
    """What a GPU's PCI configuration space says about vGPU, as GFD reads it.

    config: the bytes of sysfs' `config` file. Returns None when it holds less than the
    256-byte header and capabilities (read without privileges: GFD then writes no vGPU
    labels), else {"present": bool, "host_driver_version": str or None,
    "host_driver_branch": str or None}, the host's driver from the vGPU record's first
    entry of type 0.
    """
    config = bytes(config or b"")
    if len(config) < 256:
        return None
    capability = _vendor_capability(config)
    if capability is None or capability[3:5] != _VGPU_SIGNATURE:
        return {"present": False, "host_driver_version": None, "host_driver_branch": None}
    pos = _VGPU_FIRST_RECORD
    while pos + 1 < len(capability) and capability[pos] != 0:
        step = capability[pos + 1]
        if not step:
            break
        pos += step
    version = branch = None
    end = pos + 2 + 2 * _VGPU_FIELD
    if pos < len(capability) and capability[pos] == 0 and end <= len(capability):
        version = capability[pos + 2 : pos + 2 + _VGPU_FIELD].strip(b"\0").decode("ascii", "replace")
        branch = capability[pos + 2 + _VGPU_FIELD : end].strip(b"\0").decode("ascii", "replace")
    return {"present": True, "host_driver_version": version, "host_driver_branch": branch}


# nvmlGpuFabricState_t: where a GPU is in registering with the NVLink fabric (the fabric
# manager's multi-node NVLink domains: GB200 NVL72 and the like; NVSwitch boards report it too).
FABRIC_STATES = {0: "not_supported", 1: "not_started", 2: "in_progress", 3: "completed"}
FABRIC_NOT_SUPPORTED = 0


def gpu_fabric(state, status=None, cluster_uuid=None, clique_id=None):
    """A GPU's NVLink fabric registration from nvmlGpuFabricInfo_t's fields, as gpu_info reports it.

    state: nvmlGpuFabricState_t; status: the registration's nvmlReturn_t (0: it succeeded);
    cluster_uuid: the cluster's 16 bytes, written as Go's uuid.String() writes them (what GFD
    puts in nvidia.com/gpu.clique); clique_id: the clique within the cluster.
    """
    if cluster_uuid is not None:
        cluster_uuid = str(uuid.UUID(bytes=bytes(bytearray(cluster_uuid))))
    return {
        "state": FABRIC_STATES.get(state, "unknown"),
        "status": status,
        "cluster_uuid": cluster_uuid,
        "clique_id": clique_id,
    }
