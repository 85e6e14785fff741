# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _gpu_facts as facts


@pytest.mark.parametrize(
    "major, minor, family",
    [
        (1, 3, "tesla"),
        (3, 7, "kepler"),
        (5, 2, "maxwell"),
        (6, 0, "pascal"),
        (7, 0, "volta"),
        (7, 2, "volta"),
        (7, 5, "turing"),
        (8, 0, "ampere"),
        (8, 6, "ampere"),
        (8, 9, "ada-lovelace"),  # GFD since v0.18.0 (it said "ampere" before)
        (9, 0, "hopper"),
        (10, 0, "blackwell"),
        (12, 0, "blackwell"),
        (13, 0, "rubin"),
        (4, 0, "undefined"),
    ],
)
def test_arch_family_follows_gfd(major, minor, family):
    # NVIDIA/k8s-device-plugin v0.20.0 (1b826acc6af3) internal/lm/resource.go, getArchFamily.
    assert facts.arch_family(major, minor) == family


@pytest.mark.parametrize(
    "product, model",
    [
        ("Tesla P100-PCIE-16GB", "nvidia-tesla-p100"),
        ("Tesla T4", "nvidia-tesla-t4"),
        ("Tesla V100-SXM2-16GB", "nvidia-tesla-v100"),
        ("NVIDIA H100 80GB HBM3", "nvidia-h100"),
        ("NVIDIA A100-SXM4-40GB", "nvidia-a100"),
        ("NVIDIA H100 NVL", "nvidia-h100"),
        ("NVIDIA L40S", "nvidia-l40s"),
        ("NVIDIA RTX A6000", "nvidia-rtx-a6000"),
        ("NVIDIA GeForce RTX 4090", "nvidia-geforce-rtx-4090"),
    ],
)
def test_accelerator_model_is_the_seeds_label(product, model):
    assert facts.accelerator_model(product) == model


# NVIDIA/k8s-device-plugin v0.20.0 (1b826acc6af3) internal/lm/resource_test.go, TestSanitise:
# every case, input and expected value as GFD's test has them.
GFD_SANITISE_CASES = [
    ("a space separated string", "a-space-separated-string"),
    ("some(thing)else", "somethingelse"),
    ("some ( thing )else", "some-thing-else"),
    ("NVIDIA-TITAN-X-(Pascal)", "NVIDIA-TITAN-X-Pascal"),
    (" input  with multiple   spaces   ", "input-with-multiple-spaces"),
    ("some [ / thing / ]else", "some-thing-else"),
    ("some / thing /else", "some-thing-else"),
    ("some-thing.else_new", "some-thing.else_new"),
]


@pytest.mark.parametrize("raw, value", GFD_SANITISE_CASES)
def test_gfd_sanitise_matches_gfds_own_cases(raw, value):
    assert facts.gfd_sanitise(raw) == value
    assert facts.label_value(raw) == value  # all of them are valid label values already


@pytest.mark.parametrize(
    "raw, value",
    [
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("ProLiant DL380 (Gen10)", "ProLiant-DL380-Gen10"),
        ("NVIDIA TITAN X (Pascal)", "NVIDIA-TITAN-X-Pascal"),  # was NVIDIA-TITAN-X--Pascal
        ("-x-", "x"),
        ("a" * 80, "a" * 63),
        ("a" * 62 + "-b", "a" * 62),
        ("Tesla K80.", "Tesla-K80"),  # GFD writes "Tesla-K80.", which Kubernetes refuses
        ("", ""),
    ],
)
def test_label_value_is_gfds_and_valid_for_kubernetes(raw, value):
    assert facts.label_value(raw) == value


@pytest.mark.parametrize(
    "nvml, sysfs",
    [
        ("00000000:3B:00.0", "0000:3b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("00000001:C1:00.0", "0001:c1:00.0"),
    ],
)
def test_sysfs_bus_id(nvml, sysfs):
    assert facts.sysfs_bus_id(nvml) == sysfs


@pytest.mark.parametrize(
    "slices, memory_mib, name",
    [(1, 4864, "1g.5gb"), (3, 19968, "3g.20gb"), (7, 40192, "7g.40gb"), (1, 9984, "1g.10gb")],
)
def test_mig_profile_name(slices, memory_mib, name):
    assert facts.mig_profile_name(slices, memory_mib) == name


def _gpus(count):
    return [{"index": i, "pci_bus_id": "00000000:%02X:00.0" % (0x18 + i)} for i in range(count)]


def test_link_matrix_nvswitch_node_has_every_pair_through_the_switch():
    gpus = _gpus(8)
    remotes = {
        g["index"]: [{"link": n, "type": "switch", "pci_bus_id": "00000000:05:00.0"} for n in range(18)]
        for g in gpus
    }
    levels = {(a, b): (40 if a // 4 == b // 4 else 50) for a in range(8) for b in range(a + 1, 8)}
    pairs = facts.link_matrix(gpus, remotes, levels)
    assert len(pairs) == 28
    assert all(p["nvswitch"] and p["nvlinks"] == 0 for p in pairs)
    near = next(p for p in pairs if p["gpus"] == [0, 1])
    far = next(p for p in pairs if p["gpus"] == [0, 7])
    assert (near["pcie"], far["pcie"]) == ("same_numa_node", "cross_cpu")
    assert near["score"] == 20 + 18 * 100
    assert far["score"] == 10 + 18 * 100


def test_link_matrix_counts_a_direct_nvlink_once():
    gpus = _gpus(3)
    bus = {g["index"]: g["pci_bus_id"] for g in gpus}
    # GPUs 0 and 1 share 4 links (each end reports them); GPU 2 has none.
    remotes = {
        0: [{"link": n, "type": "gpu", "pci_bus_id": bus[1]} for n in range(4)],
        1: [{"link": n, "type": "gpu", "pci_bus_id": bus[0].lower()} for n in range(4)],
        2: [],
    }
    pairs = {tuple(p["gpus"]): p for p in facts.link_matrix(gpus, remotes, {(0, 1): 10})}
    assert pairs[(0, 1)]["nvlinks"] == 4
    assert pairs[(0, 1)]["score"] == 50 + 400
    assert not pairs[(0, 1)]["nvswitch"]
    assert pairs[(0, 2)]["nvlinks"] == 0
    # Level unknown (NVML did not answer): ranked as the farthest relation.
    assert pairs[(0, 2)]["pcie"] == "cross_cpu"


def test_link_matrix_single_gpu_has_no_pairs():
    assert facts.link_matrix(_gpus(1), {0: []}, {}) == []


# PCI configuration spaces laid out as GFD's internal/vgpu (v0.20.0, 1b826acc6af3) reads
# them: status bit 0x10 at 0x06, first capability pointer at 0x34, vendor-specific
# capability id 0x09 whose bytes 3-4 are "VF" in a vGPU guest, then records from byte 5
# (type, length, data); record type 0 holds the host driver's version and branch.
def _pci_config(capabilities, size=256, cap_list=True):
    config = bytearray(size)
    config[0:2] = b"\xde\x10"
    if cap_list:
        config[0x06] = 0x10
    pointer, pos = 0x34, 0x40
    for body in capabilities:
        config[pointer] = pos
        config[pos : pos + len(body)] = body
        pointer, pos = pos + 1, pos + 0x20 + len(body)
    return bytes(config)


def _vgpu_capability(*records):
    data = b"".join(records)
    return bytes([0x09, 0x00, 5 + len(data)]) + b"VF" + data


def _driver_record(version, branch):
    return bytes([0x00, 0x16]) + version.ljust(10, b"\0") + branch.ljust(10, b"\0")


def test_vgpu_guest_with_host_driver_record():
    power_management = bytes([0x01, 0x00, 0x03, 0x00])
    config = _pci_config([power_management, _vgpu_capability(_driver_record(b"460.16", b"r460_00"))])
    assert facts.vgpu_from_pci_config(config) == {
        "present": True,
        "host_driver_version": "460.16",
        "host_driver_branch": "r460_00",
    }


def test_vgpu_record_after_another_record():
    other = bytes([0x07, 0x04, 0xAA, 0xBB])
    config = _pci_config([_vgpu_capability(other, _driver_record(b"535.104", b"r535_00"))])
    assert facts.vgpu_from_pci_config(config)["host_driver_version"] == "535.104"


@pytest.mark.parametrize(
    "config",
    [
        _pci_config([bytes([0x09, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00])]),  # passthrough GPU
        _pci_config([bytes([0x09, 0x00, 0x08]) + b"VF"], cap_list=False),  # no capability list
        _pci_config([bytes([0x01, 0x40, 0x03])]),  # a chain that loops on itself
        _pci_config([bytes([0xFF, 0x00, 0x03])]),  # a broken chain
    ],
)
def test_not_a_vgpu(config):
    assert facts.vgpu_from_pci_config(config) == {
        "present": False,
        "host_driver_version": None,
        "host_driver_branch": None,
    }


def test_vgpu_without_driver_record_is_present_without_versions():
    config = _pci_config([_vgpu_capability(bytes([0x07, 0x02]))])
    assert facts.vgpu_from_pci_config(config) == {
        "present": True,
        "host_driver_version": None,
        "host_driver_branch": None,
    }


@pytest.mark.parametrize("config", [None, b"", _pci_config([], size=64)])
def test_unreadable_configuration_space_is_unknown(config):
    # Without privileges sysfs gives the 64-byte header only; GFD then writes no vGPU label.
    assert facts.vgpu_from_pci_config(config) is None


def test_gpu_fabric_writes_the_cluster_uuid_as_go_does():
    # GFD's GetFabricIDs: uuid.FromBytes(info.ClusterUuid[:]).String(), lower-case 8-4-4-4-12.
    raw = bytes.fromhex("6F1C2A4E58B04C3D9E210A7B5C9D3E12")
    assert facts.gpu_fabric(3, 0, list(raw), 32766) == {
        "state": "completed",
        "status": 0,
        "cluster_uuid": "6f1c2a4e-58b0-4c3d-9e21-0a7b5c9d3e12",
        "clique_id": 32766,
    }
    assert facts.gpu_fabric(1, 0, bytes(16), 0)["cluster_uuid"] == "00000000-0000-0000-0000-000000000000"


@pytest.mark.parametrize(
    "state, name",
    [(0, "not_supported"), (1, "not_started"), (2, "in_progress"), (3, "completed"), (9, "unknown")],
)
def test_gpu_fabric_states(state, name):
    assert facts.gpu_fabric(state)["state"] == name


def test_a_gpu_without_fabric_support():
    assert facts.gpu_fabric(facts.FABRIC_NOT_SUPPORTED) == {
        "state": "not_supported",
        "status": None,
        "cluster_uuid": None,
        "clique_id": None,
    }
