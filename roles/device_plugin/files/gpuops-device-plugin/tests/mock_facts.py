# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Discovery's facts as the DRA tests need them: the mock's HGX H100, and pools of any size."""

from pathlib import Path

import yaml

from gpuops_device_plugin import _gpu_facts

# The profile NVIDIA's mock NVML serves in the lab and tests/daemon (lab/profiles/README.md).
H100_PROFILE = Path(__file__).resolve().parents[5] / "lab" / "profiles" / "h100-8x-nvswitch.yaml"
MIB = 1024 * 1024


def _profile():
    with open(H100_PROFILE, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def mock_h100_facts():
    """What discover() answers on the mock with that profile (checked against a run on
    2026-11-28): eight H100s, each with 18 NVLinks to the NVSwitches. This host's sysfs has
    no such PCI devices, so numa_node and mode read None there."""
    profile = _profile()
    defaults = profile["device_defaults"]
    capability = defaults["compute_capability"]
    gpus = [
        {
            "index": device["index"],
            "minor_number": device["minor_number"],
            "uuid": device["uuid"],
            "name": defaults["name"],
            "memory_total_mib": defaults["memory"]["total_bytes"] // MIB,
            "pci_bus_id": "0000" + device["pci"]["bus_id"].upper(),
            "pci_bus_id_sysfs": _gpu_facts.sysfs_bus_id(device["pci"]["bus_id"]),
            "numa_node": None,
            "mode": None,
            "compute_capability": {
                "major": capability["major"],
                "minor": capability["minor"],
                "full": "%d.%d" % (capability["major"], capability["minor"]),
            },
            "family": _gpu_facts.arch_family(capability["major"], capability["minor"]),
            "persistence_mode": True,
            "mig": {"capable": True, "current": "disabled", "pending": "disabled", "devices": []},
            "vgpu": None,
            "nvlinks": {"active": 18, "to_switch": 18, "to_gpu": 0},
        }
        for device in sorted(profile["devices"], key=lambda d: d["index"])
    ]
    # The mock's answers: every link to a switch; one PCIe switch per half of the board,
    # the halves on different CPUs.
    switch_links = {gpu["index"]: [{"type": "switch", "pci_bus_id": None}] * 18 for gpu in gpus}
    levels = {
        (a["index"], b["index"]): 10 if a["index"] // 4 == b["index"] // 4 else 50 for a in gpus for b in gpus
    }
    links = _gpu_facts.link_matrix(gpus, switch_links, levels)
    system = profile["system"]
    return {
        "system": {
            "driver_version": system["driver_version"],
            "cuda_driver_version": system["cuda_version"],
            "nvml_version": system["nvml_version"],
        },
        "gpus": gpus,
        "lost_gpus": [],
        "links": links,
        "nvswitch": True,
    }


H100_UUIDS = [gpu["uuid"] for gpu in mock_h100_facts()["gpus"]]


def many_gpus(count):
    """count H100s without NVLink: pools larger than one slice holds."""
    facts = mock_h100_facts()
    template = facts["gpus"][0]
    facts["gpus"] = [dict(template, index=i, uuid="GPU-%036d" % i) for i in range(count)]
    facts["links"] = []
    return facts
