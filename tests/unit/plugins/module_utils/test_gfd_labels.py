# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_gfd_labels: GPU feature discovery's labels, case by case from GFD's own tests.

The GFD cases come from NVIDIA/k8s-device-plugin at tag v0.20.0, commit
1b826acc6af3079d8923bac395c3124b8861a9a6 ("GFD" below), files named per test:
internal/lm/resource_test.go, internal/lm/mig-strategy_test.go, internal/lm/nvml_test.go,
cmd/gpu-feature-discovery/mig_test.go, and the code they test (internal/lm/resource.go,
mig-strategy.go, nvml.go, machine-type.go). Their mock devices are rebuilt here in
gpu_info's shape (mock_* below) and the expected label maps are GFD's, value for value.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _gfd_labels as gfd
from ansible_collections.gpuops.k8s.plugins.module_utils import _node_labels as node_labels
from ansible_collections.gpuops.k8s.plugins.module_utils import _plugin_config as pc
from ansible_collections.gpuops.k8s.plugins.module_utils import _plugin_resources as pr

SYSTEM = {"driver_version": "550.54.15", "cuda_driver_version": "12.4"}
A100 = "NVIDIA A100-SXM4-40GB"


# GFD's mocks (internal/resource/testing/resource-testing.go): every GPU is "MOCKMODEL"
# with 300 MiB; a full GPU has compute capability 8.0 and MIG off (not MIG-capable); a
# MIG-enabled one answers compute capability 0.0 and is MIG-capable; NewMigDevice(gi, ci,
# gb) is profile "<gi>g.<gb>gb" with memory attribute gb and every other attribute 0.
def mock_full_gpu(index):
    return {
        "index": index,
        "uuid": "GPU-%08d-0000-0000-0000-000000000000" % index,
        "name": "MOCKMODEL",
        "minor_number": index,
        "memory_total_mib": 300,
        "compute_capability": {"major": 8, "minor": 0},
        "mode": "compute",
        "mig": {"capable": False, "current": None, "devices": []},
        "vgpu": {"present": False, "host_driver_version": None, "host_driver_branch": None},
    }


def mock_mig_enabled(index, *migs):
    gpu = mock_full_gpu(index)
    gpu["compute_capability"] = {"major": 0, "minor": 0}
    slots = [dict(m, index=n, uuid="MIG-%d-%d" % (index, n)) for n, m in enumerate(migs)]
    gpu["mig"] = {"capable": True, "current": "enabled", "devices": slots}
    return gpu


def mock_mig(gi, ci, gb, **attributes):
    values = {
        "memory_mib": gb,
        "multiprocessors": 0,
        "gpu_instance_slices": gi,
        "compute_instance_slices": ci,
        "copy_engines": 0,
        "decoders": 0,
        "encoders": 0,
        "jpeg_engines": 0,
        "ofa_engines": 0,
    }
    values.update(attributes)
    return {"profile": "%dg.%dgb" % (gi, gb), "memory_total_mib": gb, "attributes": values}


# The keys GFD's resource labelers write (NewResourceLabeler, NewGPUResourceLabeler,
# NewMIGResourceLabeler); other labelers write the rest of nvidia.com/gpu.*.
OTHER_LABELERS = {"nvidia.com/gpu.present", "nvidia.com/gpu.mode", "nvidia.com/gpu.machine"}


def resource_part(labels):
    return dict(
        (k, v)
        for k, v in labels.items()
        if (k.startswith("nvidia.com/gpu.") and k not in OTHER_LABELERS)
        or k.startswith("nvidia.com/mig-")
        or k == "nvidia.com/mig.strategy"
    )


def time_slicing(*resources, **kwargs):
    return pc.Config(shared=tuple(pc.SharedResource(*r) for r in resources), **kwargs)


def mps(*resources):
    return pc.Config(mps_shared=tuple(pc.SharedResource(*r) for r in resources))


def labels_for(gpus, plugin=None, machine="DGX A100"):
    return gfd.render(SYSTEM, gpus, machine=machine, plugin=plugin)


def full_gpu_labels(count, replicas="1", strategy="none", product="MOCKMODEL"):
    return {
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.replicas": replicas,
        "nvidia.com/gpu.sharing-strategy": strategy,
        "nvidia.com/gpu.memory": "300",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
    }


# --- GFD internal/lm/resource_test.go, TestGPUResourceLabeler (every case) ---------------


@pytest.mark.parametrize(
    "case, plugin, expected",
    [
        ("no sharing", pc.Config(), full_gpu_labels(1)),
        (
            "time-slicing ignores non-matching resource",
            time_slicing(("nvidia.com/not-gpu", 2)),
            full_gpu_labels(1),
        ),
        (
            "time-slicing appends suffix and doubles count",
            time_slicing(("nvidia.com/gpu", 2)),
            full_gpu_labels(1, "2", "time-slicing", "MOCKMODEL-SHARED"),
        ),
        (
            "time-slicing renamed does not append suffix and doubles count",
            time_slicing(("nvidia.com/gpu", 2, "nvidia.com/gpu.shared")),
            full_gpu_labels(1, "2", "time-slicing"),
        ),
        ("mps ignores non-matching resource", mps(("nvidia.com/not-gpu", 2)), full_gpu_labels(1)),
        (
            "mps appends suffix and doubles count",
            mps(("nvidia.com/gpu", 2)),
            full_gpu_labels(1, "2", "mps", "MOCKMODEL-SHARED"),
        ),
        (
            "mps renamed does not append suffix and doubles count",
            mps(("nvidia.com/gpu", 2, "nvidia.com/gpu.shared")),
            full_gpu_labels(1, "2", "mps"),
        ),
    ],
)
def test_gfd_gpu_resource_labeler(case, plugin, expected):
    assert resource_part(labels_for([mock_full_gpu(0)], plugin)) == expected, case


def test_gfd_gpu_resource_labeler_zero_count_is_empty():
    # "zero count returns empty": no GPU, no label at all (GFD's NewResourceLabeler too).
    assert labels_for([], time_slicing(("nvidia.com/gpu", 2))) == {}


# --- GFD internal/lm/mig-strategy_test.go, TestMigStrategyNoneLabels (every case) ---------


@pytest.mark.parametrize(
    "case, gpus, plugin, expected",
    [
        ("single non-mig device returns non-mig (none) labels", [mock_full_gpu(0)], None, full_gpu_labels(1)),
        (
            "sharing is applied to single device",
            [mock_full_gpu(0)],
            time_slicing(("nvidia.com/gpu", 2)),
            full_gpu_labels(1, "2", "time-slicing", "MOCKMODEL-SHARED"),
        ),
        (
            "sharing is applied to multiple devices",
            [mock_full_gpu(0), mock_full_gpu(1)],
            time_slicing(("nvidia.com/gpu", 2)),
            full_gpu_labels(2, "2", "time-slicing", "MOCKMODEL-SHARED"),
        ),
        (
            "sharing is not applied to single MIG device; replicas is zero",
            [mock_mig_enabled(0)],
            time_slicing(("nvidia.com/gpu", 2)),
            {
                "nvidia.com/gpu.count": "1",
                "nvidia.com/gpu.replicas": "0",
                "nvidia.com/gpu.sharing-strategy": "none",
                "nvidia.com/gpu.memory": "300",
                "nvidia.com/gpu.product": "MOCKMODEL",
            },
        ),
        (
            "sharing is not applied to multiple MIG device; replicas is zero",
            [mock_mig_enabled(0), mock_mig_enabled(1)],
            time_slicing(("nvidia.com/gpu", 2)),
            {
                "nvidia.com/gpu.count": "2",
                "nvidia.com/gpu.replicas": "0",
                "nvidia.com/gpu.sharing-strategy": "none",
                "nvidia.com/gpu.memory": "300",
                "nvidia.com/gpu.product": "MOCKMODEL",
            },
        ),
        (
            "sharing is applied to MIG device and non-MIG device",
            [mock_mig_enabled(0), mock_full_gpu(1)],
            time_slicing(("nvidia.com/gpu", 2)),
            full_gpu_labels(2, "2", "time-slicing", "MOCKMODEL-SHARED"),
        ),
    ],
)
def test_gfd_mig_strategy_none(case, gpus, plugin, expected):
    assert resource_part(labels_for(gpus, plugin)) == expected, case


# --- GFD internal/lm/mig-strategy_test.go, TestMigStrategySingleLabels (every case) -------

ATTRIBUTES_12_TO_17 = {
    "multiprocessors": 12,
    "copy_engines": 13,
    "decoders": 14,
    "encoders": 15,
    "jpeg_engines": 16,
    "ofa_engines": 17,
}
INVALID = {
    "nvidia.com/gpu.count": "0",
    "nvidia.com/gpu.replicas": "0",
    "nvidia.com/gpu.sharing-strategy": "",
    "nvidia.com/gpu.memory": "0",
    "nvidia.com/gpu.product": "MOCKMODEL-MIG-INVALID",
    "nvidia.com/mig.strategy": "single",
}
FAMILY_OF_THE_FULL_GPU = {
    "nvidia.com/gpu.compute.major": "8",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/gpu.family": "ampere",
}


def mig_single_labels(count, memory, product, slices, attributes=None):
    gi, ci = slices
    labels = {
        "nvidia.com/gpu.count": str(count),
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": str(memory),
        "nvidia.com/gpu.product": product,
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.slices.gi": str(gi),
        "nvidia.com/gpu.slices.ci": str(ci),
    }
    for key in (
        "multiprocessors",
        "engines.copy",
        "engines.decoder",
        "engines.encoder",
        "engines.jpeg",
        "engines.ofa",
    ):
        labels["nvidia.com/gpu." + key] = "0"
    labels.update(("nvidia.com/gpu." + k, str(v)) for k, v in (attributes or {}).items())
    return labels


@pytest.mark.parametrize(
    "case, gpus, expected",
    [
        (
            "single non-mig device returns non-mig (none) labels",
            [mock_full_gpu(0)],
            dict(full_gpu_labels(1), **{"nvidia.com/mig.strategy": "single"}),
        ),
        (
            "multiple non-mig device returns non-mig (none) labels",
            [mock_full_gpu(0), mock_full_gpu(1)],
            dict(full_gpu_labels(2), **{"nvidia.com/mig.strategy": "single"}),
        ),
        (
            "single mig-enabled device returns mig labels",
            [mock_mig_enabled(0, mock_mig(1, 2, 100))],
            mig_single_labels(1, 100, "MOCKMODEL-MIG-1g.100gb", (1, 2)),
        ),
        (
            "multiple mig-enabled devices returns mig labels",
            [
                mock_mig_enabled(0, mock_mig(1, 2, 100, **ATTRIBUTES_12_TO_17)),
                mock_mig_enabled(1, mock_mig(1, 2, 100, **ATTRIBUTES_12_TO_17)),
            ],
            mig_single_labels(
                2,
                100,
                "MOCKMODEL-MIG-1g.100gb",
                (1, 2),
                {
                    "multiprocessors": 12,
                    "engines.copy": 13,
                    "engines.decoder": 14,
                    "engines.encoder": 15,
                    "engines.jpeg": 16,
                    "engines.ofa": 17,
                },
            ),
        ),
        ("empty mig devices returns MIG invalid label", [mock_mig_enabled(0)], INVALID),
        (
            "mixed mig config returns MIG invalid label",
            [mock_mig_enabled(0, mock_mig(1, 2, 100), mock_mig(3, 4, 100))],
            INVALID,
        ),
        (
            "mixed mig enabled and disabled returns invalid config",
            [mock_mig_enabled(0, mock_mig(1, 2, 100)), mock_full_gpu(1)],
            dict(INVALID, **FAMILY_OF_THE_FULL_GPU),
        ),
        (
            "enabled, disabled, and empty returns invalid config",
            [mock_mig_enabled(0, mock_mig(1, 2, 100)), mock_full_gpu(1), mock_mig_enabled(2)],
            dict(INVALID, **FAMILY_OF_THE_FULL_GPU),
        ),
    ],
)
def test_gfd_mig_strategy_single(case, gpus, expected):
    assert resource_part(labels_for(gpus, pc.Config(mig_strategy="single"))) == expected, case


def test_single_with_an_empty_mig_enabled_gpu_beside_a_valid_one_is_invalid():
    # Not one of GFD's test cases, its code: mig-strategy.go newMigStrategySingleLabeler
    # checks AnyMigEnabledDeviceIsEmpty before anything else, so one empty MIG-enabled GPU
    # makes the node invalid even when every other GPU has the same single profile (and
    # NVIDIA's plugin refuses it: internal/rm/device_map.go assertAllMigDevicesAreValid).
    node = [mock_mig_enabled(0, mock_mig(1, 2, 100)), mock_mig_enabled(1)]
    assert resource_part(labels_for(node, pc.Config(mig_strategy="single"))) == INVALID
    with pytest.raises(pr.MigLayoutError) as refused:
        pr.offered(node, pc.Config(mig_strategy="single"))
    assert refused.value.reason == "empty"


def test_gfd_single_through_the_whole_labeler():
    # GFD cmd/gpu-feature-discovery/mig_test.go, TestMigStrategySingle: two 3g.20gb
    # devices on one MIG-enabled GPU give count 2, product MOCKMODEL-MIG-3g.20gb, memory 20.
    labels = labels_for(
        [mock_mig_enabled(0, mock_mig(3, 0, 20), mock_mig(3, 0, 20))], pc.Config(mig_strategy="single")
    )
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.product"] == "MOCKMODEL-MIG-3g.20gb"
    assert labels["nvidia.com/gpu.memory"] == "20"


# --- GFD internal/lm/resource_test.go, TestMigResourceLabeler (every case) ---------------
# GFD's test calls NewMIGResourceLabeler directly on one 1g.300gb device (gi 1, ci 2); here
# the same device is a node's only MIG device. The "mig mixed" cases name the resource
# mig-1g.1gb although the device is a 1g.300gb: on a node the resource is named after the
# profile, so the keys here are mig-1g.300gb, values unchanged.

MIG_300 = {
    "memory": "300",
    "multiprocessors": "0",
    "slices.gi": "1",
    "slices.ci": "2",
    "engines.copy": "0",
    "engines.decoder": "0",
    "engines.encoder": "0",
    "engines.jpeg": "0",
    "engines.ofa": "0",
}


def mig_300(resource, replicas, strategy, product):
    labels = dict((resource + "." + k, v) for k, v in MIG_300.items())
    labels.update(
        {
            resource + ".count": "1",
            resource + ".replicas": replicas,
            resource + ".sharing-strategy": strategy,
            resource + ".product": product,
        }
    )
    return labels


@pytest.mark.parametrize(
    "case, strategy, sharing, expected",
    [
        ("no sharing", "single", (), mig_300("nvidia.com/gpu", "1", "none", "MOCKMODEL-MIG-1g.300gb")),
        (
            "shared appends suffix and doubles count",
            "single",
            (("nvidia.com/gpu", 2),),
            mig_300("nvidia.com/gpu", "2", "time-slicing", "MOCKMODEL-MIG-1g.300gb-SHARED"),
        ),
        (
            "renamed does not append suffix and doubles count",
            "single",
            (("nvidia.com/gpu", 2, "nvidia.com/gpu.shared"),),
            mig_300("nvidia.com/gpu", "2", "time-slicing", "MOCKMODEL-MIG-1g.300gb"),
        ),
        (
            "mig mixed appends shared",
            "mixed",
            (("nvidia.com/gpu", 2, "nvidia.com/gpu.shared"), ("nvidia.com/mig-1g.300gb", 2)),
            mig_300("nvidia.com/mig-1g.300gb", "2", "time-slicing", "MOCKMODEL-MIG-1g.300gb-SHARED"),
        ),
        (
            "mig mixed rename does not append",
            "mixed",
            (("nvidia.com/mig-1g.300gb", 2, "nvidia.com/mig-1g.300gb.shared"),),
            mig_300("nvidia.com/mig-1g.300gb", "2", "time-slicing", "MOCKMODEL-MIG-1g.300gb"),
        ),
    ],
)
def test_gfd_mig_resource_labeler(case, strategy, sharing, expected):
    node = [mock_mig_enabled(0, mock_mig(1, 2, 300))]
    labels = resource_part(labels_for(node, time_slicing(*sharing, mig_strategy=strategy)))
    prefix = "nvidia.com/gpu." if strategy == "single" else "nvidia.com/mig-"
    assert dict((k, v) for k, v in labels.items() if k.startswith(prefix)) == expected, case


# --- MIG mixed through the whole labeler ---------------------------------------------------


def test_gfd_mig_strategy_mixed():
    # GFD cmd/gpu-feature-discovery/mig_test.go, TestMigStrategyMixed (a MIG-enabled GPU with
    # a 3g.20gb and a 1g.5gb device; tests/expected-output-mig-mixed.txt lists the keys),
    # values from internal/lm/mig-strategy.go (newMigStrategyMixedLabeler,
    # newGPULabelers) and resource.go.
    node = [mock_mig_enabled(0, mock_mig(3, 0, 20), mock_mig(1, 0, 5))]
    labels = resource_part(labels_for(node, pc.Config(mig_strategy="mixed")))
    expected = {
        "nvidia.com/mig.strategy": "mixed",
        # The MIG-enabled GPU itself, without sharing (newGPULabelers).
        "nvidia.com/gpu.count": "1",
        "nvidia.com/gpu.replicas": "0",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": "300",
        "nvidia.com/gpu.product": "MOCKMODEL",
    }
    for profile, gi, memory in (("3g.20gb", 3, 20), ("1g.5gb", 1, 5)):
        resource = "nvidia.com/mig-" + profile
        expected.update(
            {
                resource + ".product": "MOCKMODEL-MIG-" + profile,
                resource + ".count": "1",
                resource + ".replicas": "1",
                resource + ".sharing-strategy": "none",
                resource + ".memory": str(memory),
                resource + ".multiprocessors": "0",
                resource + ".slices.gi": str(gi),
                resource + ".slices.ci": "0",
                resource + ".engines.copy": "0",
                resource + ".engines.decoder": "0",
                resource + ".engines.encoder": "0",
                resource + ".engines.jpeg": "0",
                resource + ".engines.ofa": "0",
            }
        )
    assert labels == expected


def test_mixed_ignores_a_mig_enabled_gpu_without_mig_devices():
    # mig-strategy.go: "In mig.strategy=mixed we ignore devices configured with
    # migEnabled=true but exposing no MIG devices"; it still counts as a GPU.
    labels = labels_for(
        [mock_mig_enabled(0, mock_mig(1, 0, 5)), mock_mig_enabled(1)], pc.Config(mig_strategy="mixed")
    )
    assert labels["nvidia.com/mig-1g.5gb.count"] == "1"
    assert labels["nvidia.com/gpu.count"] == "2"


# --- GFD internal/lm/nvml_test.go ------------------------------------------------------------


@pytest.mark.parametrize(
    "case, gpus, capable",
    [
        ("single non-mig capable device returns mig.capable as false", [mock_full_gpu(0)], "false"),
        (
            "multiple non-mig capable devices returns mig.capable as false",
            [mock_full_gpu(0), mock_full_gpu(1)],
            "false",
        ),
        ("single mig capable device returns mig.capable as true", [mock_mig_enabled(0)], "true"),
        (
            "one mig capable device among multiple returns mig.capable as true",
            [mock_full_gpu(0), mock_mig_enabled(1)],
            "true",
        ),
    ],
)
def test_gfd_mig_capability_labeler(case, gpus, capable):
    assert labels_for(gpus)["nvidia.com/mig.capable"] == capable, case


@pytest.mark.parametrize(
    "case, plugin, capable",
    [
        ("nil config", None, "false"),
        ("empty config", pc.Config(), "false"),
        ("config with timeslicing replicas", time_slicing(("nvidia.com/gpu", 2)), "false"),
        ("config with no mps replicas", mps(("nvidia.com/gpu", 1)), "false"),
        ("config with mps replicas no-mig-devices", mps(("nvidia.com/gpu", 2)), "true"),
    ],
)
def test_gfd_sharing_labeler(case, plugin, capable):
    assert labels_for([mock_full_gpu(0)], plugin)["nvidia.com/mps.capable"] == capable, case


def test_gfd_sharing_labeler_refuses_mps_with_mig_devices():
    # "config with mps replicas mig-devices": errMPSSharingNotSupported, no labels.
    with pytest.raises(
        gfd.LabelError, match=r"sharing\.mps: MPS sharing is not supported on MIG-enabled GPUs \(GPU 0\)"
    ):
        labels_for([mock_mig_enabled(0, mock_mig(1, 0, 5))], mps(("nvidia.com/gpu", 2)))


@pytest.mark.parametrize(
    "case, modes, expected",
    [
        # PCI class 0x030000 (VGA) is graphics, 0x030200 (3D controller) compute, anything
        # else unknown; gpu_info reads the class from sysfs and gives None for the others.
        ("single device with compute PCI class", ["graphics"], "graphics"),
        ("single device with graphics PCI class", ["compute"], "compute"),
        ("single device with switch PCI class", [None], "unknown"),
        ("multiple device have same graphics PCI class", ["compute"] * 3, "compute"),
        ("multiple device have same compute PCI class", ["graphics"] * 3, "graphics"),
        (
            "multiple device with some with graphics and others with compute PCI class",
            ["graphics", "compute", "graphics"],
            "unknown",
        ),
        # nvml.go newGPUModeLabeler: a class that cannot be read makes it unknown too.
        ("one class unreadable", ["compute", None], "unknown"),
    ],
)
def test_gfd_gpu_mode_labeler(case, modes, expected):
    gpus = [dict(mock_full_gpu(i), mode=mode) for i, mode in enumerate(modes)]
    assert labels_for(gpus)["nvidia.com/gpu.mode"] == expected, case


# --- Full GPUs on real-looking nodes ---------------------------------------------------------


def gpu(index, name, memory, capability, mode="compute"):
    return dict(
        mock_full_gpu(index),
        name=name,
        memory_total_mib=memory,
        compute_capability={"major": capability[0], "minor": capability[1]},
        mode=mode,
        mig={"capable": False, "current": None, "devices": []},
    )


def test_h100_node_has_gfds_whole_label_set():
    labels = gfd.render(
        SYSTEM, [gpu(i, "NVIDIA H100 80GB HBM3", 81559, (9, 0)) for i in range(8)], "DGX H100"
    )
    assert labels == {
        "accelerator": "nvidia-h100",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.machine": "DGX-H100",
        "nvidia.com/mig.capable": "false",
        "nvidia.com/mps.capable": "false",
        "nvidia.com/vgpu.present": "false",
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


def test_ada_is_ada_lovelace():
    # resource.go getArchFamily: 8.9 is "ada-lovelace" (since GFD v0.18.0).
    labels = labels_for([gpu(0, "NVIDIA L40S", 46068, (8, 9))])
    assert labels["nvidia.com/gpu.family"] == "ada-lovelace"
    assert (labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"]) == ("8", "9")


@pytest.mark.parametrize(
    "product, machine, product_label, machine_label",
    [
        # resource.go sanitise / TestSanitise: dropped characters, single dashes.
        (
            "NVIDIA TITAN X (Pascal)",
            "ProLiant DL380 Gen10 (Plus)",
            "NVIDIA-TITAN-X-Pascal",
            "ProLiant-DL380-Gen10-Plus",
        ),
        ("Quadro RTX 6000/8000", "System Product Name", "Quadro-RTX-60008000", "System-Product-Name"),
        # GFD would write "Tesla-K80." and "OEM." (not valid label values: Kubernetes
        # refuses the whole node update); ours end with a letter or digit.
        ("Tesla K80.", "OEM.", "Tesla-K80", "OEM"),
        # machine-type.go: the file's content, trimmed; empty stays empty.
        ("NVIDIA A10", "", "NVIDIA-A10", ""),
    ],
)
def test_odd_product_and_machine_names(product, machine, product_label, machine_label):
    labels = labels_for([gpu(0, product, 24258, (8, 6))], machine=machine)
    assert labels["nvidia.com/gpu.product"] == product_label
    assert labels["nvidia.com/gpu.machine"] == machine_label


def test_unreadable_machine_type_is_unknown():
    # machine-type.go newMachineTypeLabeler: a file that cannot be read gives "unknown".
    assert (
        labels_for([gpu(0, "Tesla T4", 15360, (7, 5))], machine=None)["nvidia.com/gpu.machine"] == "unknown"
    )


def test_mixed_gpu_modes_are_unknown():
    gpus = [
        gpu(0, "NVIDIA RTX A6000", 49140, (8, 6), "graphics"),
        gpu(1, "NVIDIA RTX A6000", 49140, (8, 6), "compute"),
    ]
    assert labels_for(gpus)["nvidia.com/gpu.mode"] == "unknown"


def test_a_node_of_two_models_is_described_by_the_first_gpus_model():
    # GFD labels each model and keeps whichever its map yields last; ours is the first GPU's,
    # and gpu.count counts GPUs of that model, as GFD's does (counts[name]).
    gpus = [
        gpu(0, "Tesla T4", 15360, (7, 5)),
        gpu(1, "NVIDIA A10", 24258, (8, 6)),
        gpu(2, "Tesla T4", 15360, (7, 5)),
    ]
    labels = labels_for(
        gpus, time_slicing(("nvidia.com/gpu", 2, None, None, (pc.PerDevice(4, model="Tesla T4"),)))
    )
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4-SHARED"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.family"] == "turing"
    assert labels["nvidia.com/gpu.replicas"] == "4"


def test_vgpu_labels():
    guest = dict(
        mock_full_gpu(0),
        vgpu={"present": True, "host_driver_version": "460.16", "host_driver_branch": "r460_00"},
    )
    labels = labels_for([guest, mock_full_gpu(1)])
    assert labels["nvidia.com/vgpu.present"] == "true"
    assert labels["nvidia.com/vgpu.host-driver-version"] == "460.16"
    assert labels["nvidia.com/vgpu.host-driver-branch"] == "r460_00"
    # A configuration space that could not be read: GFD writes no vGPU label at all.
    unknown = labels_for([dict(mock_full_gpu(0), vgpu=None)])
    assert not any(k.startswith("nvidia.com/vgpu.") for k in unknown)


def test_the_host_driver_is_the_last_vgpus_as_gfd_overwrites_it():
    # vgpu.go Labels: each vGPU's host driver is written over the one before.
    def guest(index, version):
        record = {"present": True, "host_driver_version": version, "host_driver_branch": "r" + version}
        return dict(mock_full_gpu(index), vgpu=record)

    labels = labels_for([guest(0, "460.16"), mock_full_gpu(1), guest(2, "460.32")])
    assert labels["nvidia.com/vgpu.host-driver-version"] == "460.32"
    assert labels["nvidia.com/vgpu.host-driver-branch"] == "r460.32"


def test_a_model_is_described_by_its_last_gpu_as_gfds_map_keeps_it():
    # resource.go newGPULabelers: fullGPUs[name] = device, for each GPU of the model in
    # turn; the memory of GPUs of one model differs with ECC on or off.
    gpus = [gpu(0, "NVIDIA A10", 24258, (8, 6)), gpu(1, "NVIDIA A10", 22731, (8, 6))]
    assert labels_for(gpus)["nvidia.com/gpu.memory"] == "22731"
    mig_enabled = [
        dict(mock_mig_enabled(0), memory_total_mib=300),
        dict(mock_mig_enabled(1), memory_total_mib=280),
    ]
    assert labels_for(mig_enabled)["nvidia.com/gpu.memory"] == "280"


def test_two_part_driver_and_no_cuda_version():
    labels = gfd.render({"driver_version": "535.86", "cuda_driver_version": None}, [mock_full_gpu(0)])
    assert labels["nvidia.com/cuda.driver-version.revision"] == ""
    assert not any(k.startswith("nvidia.com/cuda.runtime") for k in labels)


# --- Sharing our plugin can express and GFD cannot ------------------------------------------


def h100_node(count=4):
    return [gpu(i, "NVIDIA H100 80GB HBM3", 81559, (9, 0)) for i in range(count)]


def sharing(replicas=4, rename=None, devices=None, per_device=(), **kwargs):
    return time_slicing(("nvidia.com/gpu", replicas, rename, devices, per_device), **kwargs)


@pytest.mark.parametrize(
    "case, plugin, replicas, strategy, product",
    [
        ("per node", sharing(4), "4", "time-slicing", "NVIDIA-H100-80GB-HBM3-SHARED"),
        ("renameByDefault", sharing(4, rename_by_default=True), "4", "time-slicing", "NVIDIA-H100-80GB-HBM3"),
        (
            "explicit rename",
            sharing(4, rename="nvidia.com/h100-ts"),
            "4",
            "time-slicing",
            "NVIDIA-H100-80GB-HBM3",
        ),
        # Every GPU of the model through a perDevice rule: exactly GFD's value.
        (
            "per model",
            sharing(2, per_device=(pc.PerDevice(8, model="NVIDIA H100 80GB HBM3"),)),
            "8",
            "time-slicing",
            "NVIDIA-H100-80GB-HBM3-SHARED",
        ),
        # Different counts per GPU: the largest (the most one GPU is shared).
        (
            "per GPU, different counts",
            sharing(2, per_device=(pc.PerDevice(6, index="3"), pc.PerDevice(1, index="0"))),
            "6",
            "time-slicing",
            "NVIDIA-H100-80GB-HBM3-SHARED",
        ),
        (
            "some GPUs only",
            sharing(3, devices=("1", "2")),
            "3",
            "time-slicing",
            "NVIDIA-H100-80GB-HBM3-SHARED",
        ),
        # A rule that shares nothing: not shared, whatever the entry's default says.
        (
            "per GPU, all one replica",
            sharing(4, per_device=(pc.PerDevice(1, model="NVIDIA H100 80GB HBM3"),)),
            "1",
            "none",
            "NVIDIA-H100-80GB-HBM3",
        ),
    ],
)
def test_per_gpu_sharing_keeps_gfds_meaning(case, plugin, replicas, strategy, product):
    labels = labels_for(h100_node(), plugin)
    got = (
        labels["nvidia.com/gpu.replicas"],
        labels["nvidia.com/gpu.sharing-strategy"],
        labels["nvidia.com/gpu.product"],
        labels["nvidia.com/gpu.count"],
    )
    assert got == (replicas, strategy, product, "4"), case


@pytest.mark.parametrize(
    "plugin",
    [
        pc.Config(),
        sharing(4),
        sharing(4, rename_by_default=True),
        sharing(2, per_device=(pc.PerDevice(8, model="NVIDIA H100 80GB HBM3"),)),
        sharing(3, devices=tuple(str(i) for i in range(4))),
    ],
)
def test_labels_and_the_plugins_resources_agree(plugin):
    # With one replica count for all GPUs, count x replicas is what the plugin offers.
    labels = labels_for(h100_node(), plugin)
    offered = sum(len(devices) for _name, devices, _shared in pr.offered(h100_node(), plugin))
    assert int(labels["nvidia.com/gpu.count"]) * int(labels["nvidia.com/gpu.replicas"]) == offered


def test_a100_lab_profile_under_each_mig_strategy():
    # lab/profiles/a100-8x-mig.yaml: MIG on GPUs 0-2 (4g.20gb+2g.10gb+1g.5gb, 2x 3g.20gb,
    # 7x 1g.5gb), off on 3-7.
    def a100(index, *profiles):
        facts = gpu(index, A100, 40536, (8, 0))
        slots = [
            {
                "index": n,
                "uuid": "MIG-%d-%d" % (index, n),
                "profile": p,
                "memory_total_mib": m,
                "attributes": dict(mock_mig(g, g, m)["attributes"], multiprocessors=14 * g),
            }
            for n, (p, g, m) in enumerate(profiles)
        ]
        facts["mig"] = {"capable": True, "current": "enabled" if slots else "disabled", "devices": slots}
        return facts

    node = [
        a100(0, ("4g.20gb", 4, 19968), ("2g.10gb", 2, 9856), ("1g.5gb", 1, 4864)),
        a100(1, ("3g.20gb", 3, 19968), ("3g.20gb", 3, 19968)),
        a100(2, *[("1g.5gb", 1, 4864)] * 7),
    ] + [a100(i) for i in range(3, 8)]
    none = labels_for(node, pc.Config())
    assert (none["nvidia.com/gpu.count"], none["nvidia.com/gpu.product"]) == ("8", "NVIDIA-A100-SXM4-40GB")
    assert "nvidia.com/mig.strategy" not in none
    single = labels_for(node, pc.Config(mig_strategy="single"))  # MIG on some GPUs only
    assert single["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
    assert (single["nvidia.com/gpu.count"], single["nvidia.com/gpu.family"]) == ("0", "ampere")
    mixed = labels_for(node, time_slicing(("nvidia.com/mig-1g.5gb", 2), mig_strategy="mixed"))
    assert mixed["nvidia.com/gpu.count"] == "8"  # GFD counts the MIG-enabled GPUs too
    assert mixed["nvidia.com/mig-1g.5gb.count"] == "8"
    assert mixed["nvidia.com/mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"
    assert mixed["nvidia.com/mig-1g.5gb.multiprocessors"] == "14"
    assert mixed["nvidia.com/mig-3g.20gb.count"] == "2"
    assert mixed["nvidia.com/mig-3g.20gb.memory"] == "19968"
    assert sorted(
        k[: -len(".count")] for k in mixed if k.startswith("nvidia.com/mig-") and k.endswith(".count")
    ) == [
        "nvidia.com/mig-1g.5gb",
        "nvidia.com/mig-2g.10gb",
        "nvidia.com/mig-3g.20gb",
        "nvidia.com/mig-4g.20gb",
    ]


def test_mig_device_without_attributes_keeps_its_memory():
    slot = dict(mock_mig(1, 1, 5), attributes=None, memory_total_mib=4864)
    labels = labels_for([mock_mig_enabled(0, slot)], pc.Config(mig_strategy="single"))
    assert labels["nvidia.com/gpu.memory"] == "4864"
    assert "nvidia.com/gpu.slices.gi" not in labels


# --- gpu_node owns these keys: turned off, they go ------------------------------------------


def test_turning_mig_and_sharing_off_removes_their_labels():
    node_gpus = [mock_mig_enabled(0, mock_mig(1, 0, 5)), mock_full_gpu(1)]
    before = labels_for(node_gpus, time_slicing(("nvidia.com/mig-1g.5gb", 2), mig_strategy="mixed"))
    after = labels_for(node_gpus, pc.Config())
    node = {"metadata": {"name": "gpu-1", "labels": dict(before), "annotations": {}}}
    node["metadata"]["annotations"][node_labels.OWNER_ANNOTATION] = node_labels.plan(
        {"metadata": {"labels": {}}}, before, []
    )["patch"]["metadata"]["annotations"][node_labels.OWNER_ANNOTATION]
    result = node_labels.plan(node, after, [])
    gone = sorted(k for k in before if k not in after)
    assert "nvidia.com/mig.strategy" in gone
    assert "nvidia.com/mig-1g.5gb.replicas" in gone
    assert result["labels_removed"] == gone
    assert all(result["patch"]["metadata"]["labels"][k] is None for k in gone)


# --- nvidia.com/gpu.clique: GFD's IMEX labeler --------------------------------------------
# GFD's internal/lm/imex_test.go holds no test at v0.20.0; these cases follow imex.go
# (newImexLabeler, getFabricIDs) and the check it calls, go-nvlib's IsFabricAttached
# (vendor/github.com/NVIDIA/go-nvlib/pkg/nvlib/device/device.go), branch by branch.

CLUSTER = "6f1c2a4e-58b0-4c3d-9e21-0a7b5c9d3e12"
OTHER_CLUSTER = "0b9e8d7c-6a5f-4e3d-8c2b-1a0f9e8d7c6b"
CLIQUE = "nvidia.com/gpu.clique"


def registered(cluster=CLUSTER, clique=32766, state="completed", status=0):
    return {"state": state, "status": status, "cluster_uuid": cluster, "clique_id": clique}


NOT_SUPPORTED = {"state": "not_supported", "status": None, "cluster_uuid": None, "clique_id": None}


def fabric_node(*fabrics):
    return [dict(mock_full_gpu(n), fabric=f) for n, f in enumerate(fabrics)]


@pytest.mark.parametrize(
    "case, fabrics, clique",
    [
        # getFabricIDs: one cluster UUID and one clique ID -> "<cluster>.<clique>".
        ("every GPU in one clique", [registered()] * 4, CLUSTER + ".32766"),
        # cliqueID is fmt.Sprintf("%d"): clique 0 is a clique, not "no clique".
        ("clique 0", [registered(clique=0)] * 2, CLUSTER + ".0"),
        # IsFabricAttached false -> the GPU is skipped (continue), not a veto.
        ("GPUs not attached are left out", [registered(), NOT_SUPPORTED, registered()], CLUSTER + ".32766"),
        (
            "registration still in progress",
            [registered(state="in_progress"), registered()],
            CLUSTER + ".32766",
        ),
        ("registration not started", [registered(), registered(state="not_started")], CLUSTER + ".32766"),
        # info.Status != SUCCESS: the registration failed (here NVML_ERROR_UNKNOWN).
        ("failed registration", [registered(status=999), registered(clique=7)], CLUSTER + ".7"),
        # info.ClusterUuid == [16]uint8{}: completed but in no cluster.
        (
            "the zero cluster UUID",
            [registered(cluster=gfd.NO_CLUSTER, clique=1), registered()],
            CLUSTER + ".32766",
        ),
        # No attached GPU: both maps empty -> "", "" -> empty labeler.
        ("no fabric", [NOT_SUPPORTED] * 2, None),
        ("no GPU registered yet", [registered(state="in_progress")] * 2, None),
        ("only the zero cluster UUID", [registered(cluster=gfd.NO_CLUSTER)], None),
        # len(uniqueClusterUUIDs) > 1 or len(uniqueCliqueIDs) > 1 -> no label.
        ("two cluster UUIDs", [registered(), registered(cluster=OTHER_CLUSTER)], None),
        ("two cliques", [registered(clique=1), registered(clique=2)], None),
        # Checked apart: two clusters with the same clique ID are still two.
        ("two clusters, one clique ID", [registered(clique=5), registered(OTHER_CLUSTER, clique=5)], None),
    ],
)
def test_gfd_imex_labeler(case, fabrics, clique):
    labels = labels_for(fabric_node(*fabrics))
    assert labels.get(CLIQUE) == clique
    assert gfd.clique_labels(fabric_node(*fabrics)) == ({} if clique is None else {CLIQUE: clique})


def test_a_gpu_whose_fabric_could_not_be_read_leaves_out_only_the_clique():
    # getFabricIDs returns the error and GFD writes no labels at all; we keep the rest.
    labels = labels_for(fabric_node(registered(), None))
    assert CLIQUE not in labels
    assert labels["nvidia.com/gpu.count"] == "2"
    # Facts recorded before gpu_info read the fabric have no `fabric` key: no clique label.
    assert CLIQUE not in labels_for([mock_full_gpu(0)])


def test_the_clique_label_is_a_valid_label_value_whatever_the_clique():
    value = labels_for(fabric_node(registered(clique=2**32 - 1)))[CLIQUE]
    assert value == CLUSTER + ".4294967295"
    assert node_labels.normalize_labels({CLIQUE: value}) == {CLIQUE: value}


def test_the_clique_goes_with_any_mig_strategy():
    gpus = [dict(mock_mig_enabled(0, mock_mig(1, 1, 1)), fabric=registered())]
    for strategy in ("none", "single", "mixed"):
        assert labels_for(gpus, pc.Config(mig_strategy=strategy))[CLIQUE] == CLUSTER + ".32766"


def test_nvidias_plugin_labels_a_renamed_resource_shared_as_gfd_does():
    # GFD drops `rename` before labelling (DisableResourceNamingInConfig): the product says
    # SHARED; the gpuops plugin does rename, and its labels say so.
    document = {
        "sharing": {
            "timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2, "rename": "x.io/y"}]}
        }
    }
    nvidia = pc.served({"mode": "nvidia", "config": document})
    gpuops = pc.served({"mode": "gpuops", "config": document})
    assert labels_for([mock_full_gpu(0)], nvidia)["nvidia.com/gpu.product"] == "MOCKMODEL-SHARED"
    assert labels_for([mock_full_gpu(0)], gpuops)["nvidia.com/gpu.product"] == "MOCKMODEL"
