# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""resources: resource names, MIG strategies, time-slicing, Allocate per strategy."""

import dataclasses

import pytest
from gpus import A100, H100, gpu, mig, node

from gpuops_device_plugin import resources
from gpuops_device_plugin.config import Config, PerDevice, SharedResource


def by_name(found):
    return {r.name: r for r in found}


def a100_mig_node():
    gpus = [gpu(i, A100) for i in range(4)]
    gpus[0] = gpu(0, A100, mig=[mig(0, 0, "3g.20gb", 1), mig(0, 1, "3g.20gb", 2)])
    gpus[1] = gpu(1, A100, mig=[mig(1, 0, "1g.5gb", 7), mig(1, 1, "1g.5gb", 8), mig(1, 2, "2g.10gb", 3)])
    return gpus


def test_strategy_none_offers_whole_gpus_by_uuid():
    found = resources.build_resources(node(8), Config())
    assert [r.name for r in found] == ["nvidia.com/gpu"]
    assert sorted(found[0].devices) == sorted(g["uuid"] for g in node(8))
    assert found[0].socket_name == "gpuops-gpu.sock"
    assert not found[0].shared


def test_strategy_none_ignores_mig_and_offers_the_parent_gpu():
    found = by_name(resources.build_resources(a100_mig_node(), Config(mig_strategy="none")))
    assert list(found) == ["nvidia.com/gpu"]
    assert len(found["nvidia.com/gpu"].devices) == 4


def test_strategy_mixed_names_mig_resources_by_profile():
    found = by_name(resources.build_resources(a100_mig_node(), Config(mig_strategy="mixed")))
    assert sorted(found) == [
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.5gb",
        "nvidia.com/mig-2g.10gb",
        "nvidia.com/mig-3g.20gb",
    ]
    assert sorted(d.index for d in found["nvidia.com/gpu"].devices.values()) == ["2", "3"]
    assert sorted(d.index for d in found["nvidia.com/mig-1g.5gb"].devices.values()) == ["1:0", "1:1"]
    assert found["nvidia.com/mig-3g.20gb"].socket_name == "gpuops-mig-3g.20gb.sock"


def test_strategy_single_with_one_profile_everywhere():
    gpus = [gpu(i, A100, mig=[mig(i, s, "1g.5gb", 7 + s) for s in range(7)]) for i in range(2)]
    found = resources.build_resources(gpus, Config(mig_strategy="single"))
    assert [r.name for r in found] == ["nvidia.com/gpu"]
    assert len(found[0].devices) == 14
    assert all(d.mig_profile == "1g.5gb" for d in found[0].devices.values())


def test_strategy_single_refuses_mixed_profiles_and_names_them():
    gpus = [gpu(0, A100, mig=[mig(0, 0, "3g.20gb", 1)]), gpu(1, A100, mig=[mig(1, 0, "1g.5gb", 7)])]
    with pytest.raises(resources.ResourceError, match=r"one MIG profile on every GPU; found 1g.5gb, 3g.20gb"):
        resources.build_resources(gpus, Config(mig_strategy="single"))


def test_strategy_single_refuses_a_node_with_mig_on_some_gpus_only():
    with pytest.raises(resources.ResourceError, match=r"enabled on 2 of 4 \(GPUs 0, 1\)"):
        resources.build_resources(a100_mig_node(), Config(mig_strategy="single"))


def test_strategy_single_refuses_a_mig_enabled_gpu_without_mig_devices():
    # NVIDIA's plugin refuses it too (internal/rm/device_map.go, assertAllMigDevicesAreValid).
    gpus = [gpu(0, A100, mig=[mig(0, 0, "1g.5gb", 7)]), gpu(1, A100)]
    gpus[1]["mig"]["current"] = "enabled"
    with pytest.raises(resources.MigLayoutError, match=r"on every MIG-enabled GPU; GPU 1 has none"):
        resources.build_resources(gpus, Config(mig_strategy="single"))
    # mixed leaves the empty GPU out, like NVIDIA's plugin (a warning there).
    found = by_name(resources.build_resources(gpus, Config(mig_strategy="mixed")))
    assert list(found) == ["nvidia.com/mig-1g.5gb"]


def shared(**kwargs):
    return SharedResource(**{"name": "nvidia.com/gpu", "replicas": 4, **kwargs})


def test_time_slicing_per_node_replicates_every_gpu():
    found = resources.build_resources(node(2), Config(shared=(shared(),)))
    assert [r.name for r in found] == ["nvidia.com/gpu"]
    ids = sorted(found[0].devices)
    assert len(ids) == 8
    assert ids[:4] == ["GPU-00000000-0000-0000-0000-000000000000::%d" % n for n in range(4)]
    assert found[0].shared


def test_rename_by_default_moves_replicas_to_dot_shared():
    found = by_name(resources.build_resources(node(2), Config(rename_by_default=True, shared=(shared(),))))
    assert list(found) == ["nvidia.com/gpu.shared"]
    assert found["nvidia.com/gpu.shared"].socket_name == "gpuops-gpu.shared.sock"


def test_explicit_rename_wins():
    found = by_name(resources.build_resources(node(1), Config(shared=(shared(rename="nvidia.com/gpu-ts"),))))
    assert list(found) == ["nvidia.com/gpu-ts"]


def test_replicas_per_gpu_model_uuid_and_index():
    gpus = [*node(2), gpu(2, "Tesla T4"), gpu(3, "Tesla T4")]
    rules = (
        PerDevice(replicas=2, model=H100),
        PerDevice(replicas=8, uuid=gpus[3]["uuid"]),
        PerDevice(replicas=1, index="2"),
    )
    found = by_name(
        resources.build_resources(gpus, Config(rename_by_default=True, shared=(shared(per_device=rules),)))
    )
    per_gpu = {}
    for device in found["nvidia.com/gpu.shared"].devices.values():
        per_gpu[device.index] = per_gpu.get(device.index, 0) + 1
    assert per_gpu == {"0": 2, "1": 2, "3": 8}
    # One replica means not shared: GPU 2 stays a whole nvidia.com/gpu.
    assert list(found["nvidia.com/gpu"].devices) == [gpus[2]["uuid"]]


def test_devices_list_limits_sharing_to_the_named_gpus():
    found = by_name(
        resources.build_resources(node(3), Config(shared=(shared(devices=("0", node(3)[2]["uuid"])),)))
    )
    ids = found["nvidia.com/gpu"].devices
    assert len(ids) == 4 + 1 + 4
    assert node(3)[1]["uuid"] in ids


def test_sharing_an_unknown_resource_is_refused_with_what_exists():
    config = Config(shared=(shared(name="nvidia.com/mig-1g.5gb"),))
    with pytest.raises(
        resources.ResourceError, match=r"'nvidia.com/mig-1g.5gb' is not a resource .* offers nvidia.com/gpu"
    ):
        resources.build_resources(node(1), config)


def test_mig_devices_can_be_time_sliced_too():
    config = Config(
        mig_strategy="mixed",
        rename_by_default=True,
        shared=(shared(name="nvidia.com/mig-1g.5gb", replicas=3),),
    )
    found = by_name(resources.build_resources(a100_mig_node(), config))
    assert len(found["nvidia.com/mig-1g.5gb.shared"].devices) == 6
    assert "nvidia.com/mig-1g.5gb" not in found


# Allocate


def resource(count=4, **config):
    return resources.build_resources(node(count), Config(**config))[0]


def ids(res, *indexes):
    by_index = {d.index: i for i, d in res.devices.items()}
    return [by_index[str(n)] for n in indexes]


def test_envvar_with_uuids():
    res = resource()
    answer = resources.allocate(res, ids(res, 2, 0), Config())
    assert answer.envs == {"NVIDIA_VISIBLE_DEVICES": ",".join(ids(res, 2, 0))}
    assert (answer.mounts, answer.device_specs, answer.annotations, answer.cdi_devices) == ([], [], {}, [])


def test_envvar_with_indices():
    res = resource()
    answer = resources.allocate(res, ids(res, 3, 1), Config(device_id_strategy="index"))
    assert answer.envs == {"NVIDIA_VISIBLE_DEVICES": "3,1"}


def test_volume_mounts_point_dev_null_at_one_path_per_gpu():
    res = resource()
    answer = resources.allocate(res, ids(res, 1), Config(device_list_strategy=("volume-mounts",)))
    assert answer.envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert answer.mounts == [("/var/run/nvidia-container-devices/" + ids(res, 1)[0], "/dev/null", False)]


def test_cdi_annotations_and_cdi_cri_use_nvidias_names():
    res = resource()
    config = Config(device_list_strategy=("cdi-annotations", "cdi-cri"), device_id_strategy="index")
    answer = resources.allocate(res, ids(res, 0, 2), config, response_id=lambda: "req-1")
    names = ["k8s.device-plugin.nvidia.com/gpu=0", "k8s.device-plugin.nvidia.com/gpu=2"]
    assert answer.annotations == {"cdi.k8s.io/nvidia-device-plugin_req-1": ",".join(names)}
    assert answer.cdi_devices == names
    assert answer.envs == {}  # CDI only: no NVIDIA_VISIBLE_DEVICES


def test_envvar_and_cdi_together():
    res = resource()
    answer = resources.allocate(res, ids(res, 0), Config(device_list_strategy=("envvar", "cdi-cri")))
    assert answer.envs == {"NVIDIA_VISIBLE_DEVICES": ids(res, 0)[0]}
    assert answer.cdi_devices == ["k8s.device-plugin.nvidia.com/gpu=" + ids(res, 0)[0]]


def test_pass_device_specs_lists_control_nodes_that_exist_and_the_gpus():
    res = resource()
    present = {"/host/dev/nvidia-uvm"}
    config = Config(pass_device_specs=True, nvidia_dev_root="/host")
    answer = resources.allocate(res, ids(res, 3, 1), config, exists=present.__contains__)
    assert answer.device_specs == [
        ("/dev/nvidiactl", "/host/dev/nvidiactl", "rw"),
        ("/dev/nvidia-uvm", "/host/dev/nvidia-uvm", "rw"),
        ("/dev/nvidia3", "/host/dev/nvidia3", "rw"),
        ("/dev/nvidia1", "/host/dev/nvidia1", "rw"),
    ]


def test_unknown_ids_are_refused_and_named():
    res = resource()
    with pytest.raises(
        resources.InvalidRequest, match=r"unknown devices for nvidia.com/gpu: GPU-bogus, GPU-x"
    ):
        resources.allocate(res, [ids(res, 0)[0], "GPU-bogus", "GPU-x"], Config())


def test_empty_request_is_refused():
    with pytest.raises(resources.InvalidRequest, match="empty device list"):
        resources.allocate(resource(), [], Config())


def test_replicas_of_one_gpu_collapse_to_that_gpu():
    res = resource(2, shared=(shared(),))
    uuid = node(2)[1]["uuid"]
    answer = resources.allocate(res, [uuid + "::0", uuid + "::3"], Config(shared=(shared(),)))
    assert answer.envs == {"NVIDIA_VISIBLE_DEVICES": uuid}


def test_fail_requests_greater_than_one():
    config = Config(fail_requests_greater_than_one=True, shared=(shared(),))
    res = resources.build_resources(node(2), config)[0]
    uuid = node(2)[0]["uuid"]
    with pytest.raises(resources.InvalidRequest, match="maximum for a shared resource is 1"):
        resources.allocate(res, [uuid + "::0", uuid + "::1"], config)
    assert resources.allocate(res, [uuid + "::2"], config).envs == {"NVIDIA_VISIBLE_DEVICES": uuid}


def test_mig_allocation_uses_mig_uuids_or_nvidias_index_form():
    res = by_name(resources.build_resources(a100_mig_node(), Config(mig_strategy="mixed")))[
        "nvidia.com/mig-1g.5gb"
    ]
    chosen = sorted(res.devices)[:1]
    assert resources.allocate(res, chosen, Config()).envs == {"NVIDIA_VISIBLE_DEVICES": chosen[0]}
    index = resources.allocate(res, chosen, Config(device_id_strategy="index")).envs["NVIDIA_VISIBLE_DEVICES"]
    assert index == res.devices[chosen[0]].index == "1:0"


def test_frozen_devices_compare_by_value():
    device = resource().devices[node(1)[0]["uuid"]]
    assert dataclasses.replace(device) == device
