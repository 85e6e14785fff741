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
        (8, 9, "ampere"),  # GFD names Ada "ampere"; selectors written for GFD rely on it
        (9, 0, "hopper"),
        (10, 0, "blackwell"),
        (12, 0, "blackwell"),
        (4, 0, "undefined"),
    ],
)
def test_arch_family_follows_gfd(major, minor, family):
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


@pytest.mark.parametrize(
    "raw, value",
    [
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("ProLiant DL380 (Gen10)", "ProLiant-DL380-Gen10"),
        ("-x-", "x"),
        ("a" * 80, "a" * 63),
        ("a" * 62 + "-b", "a" * 62),
    ],
)
def test_label_value_is_valid_for_kubernetes(raw, value):
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


def _h100(index):
    return {
        "index": index,
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
        "compute_capability": {"major": 9, "minor": 0, "full": "9.0"},
        "mode": "compute",
        "mig": {"capable": True, "current": "disabled", "pending": "disabled", "devices": []},
    }


def test_render_labels_matches_gfd_and_the_seeds():
    system = {"driver_version": "550.54.15", "cuda_driver_version": "12.4"}
    labels = facts.render_labels(system, [_h100(i) for i in range(8)], machine="DGX H100")
    assert labels == {
        "accelerator": "nvidia-h100",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.machine": "DGX-H100",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/cuda.driver-version.major": "550",
        "nvidia.com/cuda.driver-version.minor": "54",
        "nvidia.com/cuda.driver-version.revision": "15",
        "nvidia.com/cuda.driver-version.full": "550.54.15",
        "nvidia.com/cuda.driver.major": "550",
        "nvidia.com/cuda.driver.minor": "54",
        "nvidia.com/cuda.driver.rev": "15",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "4",
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/cuda.runtime.major": "12",
        "nvidia.com/cuda.runtime.minor": "4",
    }


def test_render_labels_without_gpus_is_empty():
    assert facts.render_labels({"driver_version": "550.54.15"}, []) == {}


def test_render_labels_two_part_driver_and_no_cuda_version():
    gpu = dict(_h100(0), mig={"capable": False, "devices": []}, mode=None)
    labels = facts.render_labels({"driver_version": "535.86", "cuda_driver_version": None}, [gpu])
    assert labels["nvidia.com/cuda.driver-version.revision"] == ""
    assert labels["nvidia.com/mig.capable"] == "false"
    assert not any(k.startswith("nvidia.com/cuda.runtime") for k in labels)
    assert "nvidia.com/gpu.mode" not in labels
    assert "nvidia.com/gpu.machine" not in labels
