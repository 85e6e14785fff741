# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dra.slices: ResourceSlice specs from discovery's facts and the health state (pure)."""

import copy
from datetime import datetime, timedelta, timezone

import pytest
from fakes import Clock
from mock_facts import H100_UUIDS, many_gpus, mock_h100_facts

from gpuops_device_plugin.config import Config
from gpuops_device_plugin.discovery import LOST, Event, ProbeError
from gpuops_device_plugin.dra import slices
from gpuops_device_plugin.health import HealthState, HealthWatcher

NODE = "gpu-node-1"
NOW = datetime(2026, 11, 28, 4, 5, 6, 789, tzinfo=timezone.utc)
NOW_TEXT = "2026-11-28T04:05:06Z"


def pcie_facts(count, pairs=(), **extra):
    """count PCIe GPUs (no NVSwitch); pairs: {(a, b): direct NVLinks}."""
    facts = mock_h100_facts()
    facts["gpus"] = facts["gpus"][:count]
    for gpu in facts["gpus"]:
        gpu.update(extra)
    facts["links"] = [
        {"gpus": [a, b], "nvlinks": dict(pairs).get((a, b), 0), "nvswitch": False}
        for a in range(count)
        for b in range(a + 1, count)
    ]
    return facts


def devices_of(specs):
    return {d["name"]: d for spec in specs for d in spec["devices"]}


def build(facts=None, unhealthy=None):
    return slices.build_slices(facts or mock_h100_facts(), unhealthy or {}, NODE, now=NOW)


# Shape and attributes


def test_one_h100_device_carries_nvidias_attribute_names_and_value_forms():
    specs = build()
    assert len(specs) == 1
    assert {k: v for k, v in specs[0].items() if k != "devices"} == {
        "driver": "gpu.gpuops.k8s",
        "nodeName": NODE,
        "pool": {"name": NODE, "generation": 0, "resourceSliceCount": 1},
    }
    assert [d["name"] for d in specs[0]["devices"]] == ["gpu-%d" % i for i in range(8)]
    assert specs[0]["devices"][0] == {
        "name": "gpu-0",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": "GPU-20330507-055a-40f9-a4e7-4b442a53b091"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "architecture": {"string": "Hopper"},
            "cudaComputeCapability": {"version": "9.0.0"},
            "driverVersion": {"version": "550.163.1"},
            "cudaDriverVersion": {"version": "12.4.0"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:18:00.0"},
            "nvlinkDomain": {"string": "nvswitch-0"},
        },
        "capacity": {"memory": {"value": "81559Mi"}},
        # A claim asking for no memory takes all of it; claims asking for part share the GPU.
        "allowMultipleAllocations": True,
    }


def test_brand_and_pcie_root_are_published_when_discovery_carries_them():
    facts = mock_h100_facts()
    facts["gpus"][0].update(brand="Nvidia", pcie_root="pci0000:15")
    attributes = devices_of(build(facts))["gpu-0"]["attributes"]
    assert attributes["brand"] == {"string": "Nvidia"}
    assert attributes["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:15"}
    assert "brand" not in devices_of(build(facts))["gpu-1"]["attributes"]


def test_numa_node_is_the_standard_int_attribute_and_absent_without_affinity():
    facts = mock_h100_facts()
    for gpu in facts["gpus"]:
        gpu["numa_node"] = 0 if gpu["index"] < 4 else 1
    facts["gpus"][7]["numa_node"] = None  # sysfs said -1
    found = devices_of(build(facts))
    assert found["gpu-0"]["attributes"]["resource.kubernetes.io/numaNode"] == {"int": 0}
    assert found["gpu-4"]["attributes"]["resource.kubernetes.io/numaNode"] == {"int": 1}
    assert "resource.kubernetes.io/numaNode" not in found["gpu-7"]["attributes"]


def test_unknown_capability_architecture_and_cuda_version_are_left_out():
    facts = mock_h100_facts()
    facts["system"]["cuda_driver_version"] = None
    facts["gpus"][0].update(compute_capability={"major": 0, "minor": 0, "full": "0.0"}, family=None)
    facts["gpus"][1]["family"] = "fermi"  # GFD knows it, NVML names no such architecture
    found = devices_of(build(facts))
    for name in ("cudaComputeCapability", "architecture", "cudaDriverVersion"):
        assert name not in found["gpu-0"]["attributes"]
    assert "architecture" not in found["gpu-1"]["attributes"]
    assert found["gpu-1"]["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}


@pytest.mark.parametrize(
    ("mib", "quantity"),
    [(81559, "81559Mi"), (40960, "40Gi"), (1024, "1Gi"), (1536, "1536Mi"), (1024**2, "1Ti"), (0, "0")],
)
def test_memory_is_a_canonical_binary_quantity(mib, quantity):
    assert slices.memory_quantity(mib) == quantity


@pytest.mark.parametrize(
    ("text", "version"),
    [("550.163.01", "550.163.1"), ("580.159.04", "580.159.4"), ("12.4", "12.4.0"), ("9", "9.0.0")],
)
def test_versions_read_as_nvidias_driver_reads_them(text, version):
    facts = mock_h100_facts()
    facts["system"]["driver_version"] = text
    assert devices_of(build(facts))["gpu-0"]["attributes"]["driverVersion"] == {"version": version}


def test_no_gpu_no_slice():
    facts = mock_h100_facts()
    facts["gpus"], facts["links"] = [], []
    assert build(facts) == []


def test_the_facts_are_not_changed():
    facts = mock_h100_facts()
    before = copy.deepcopy(facts)
    build(facts, {H100_UUIDS[0]: "XID 79 on GPU x"})
    assert facts == before


# NVLink domains


def test_every_gpu_on_the_nvswitch_fabric_shares_one_domain():
    domains = slices.nvlink_domains(mock_h100_facts()["gpus"], mock_h100_facts()["links"])
    assert domains == dict.fromkeys(range(8), "nvswitch-0")


def test_a_lost_gpu_leaves_the_rest_of_the_fabric_one_domain():
    facts = mock_h100_facts()
    facts["gpus"] = facts["gpus"][1:]  # GPU 0 in lost_gpus: no device, no domain
    assert set(slices.nvlink_domains(facts["gpus"], facts["links"]).values()) == {"nvswitch-1"}


def test_nvlink_bridged_pairs_are_domains_of_their_own_and_unlinked_gpus_have_none():
    facts = pcie_facts(5, {(0, 1): 4, (2, 3): 4})
    found = devices_of(build(facts))
    assert found["gpu-0"]["attributes"]["nvlinkDomain"] == {"string": "nvlink-0"}
    assert found["gpu-1"]["attributes"]["nvlinkDomain"] == {"string": "nvlink-0"}
    assert found["gpu-2"]["attributes"]["nvlinkDomain"] == {"string": "nvlink-2"}
    assert found["gpu-3"]["attributes"]["nvlinkDomain"] == {"string": "nvlink-2"}
    assert "nvlinkDomain" not in found["gpu-4"]["attributes"]


def test_a_fully_linked_quad_is_one_domain():
    quad = {(a, b): 2 for a in range(4) for b in range(a + 1, 4)}
    facts = pcie_facts(4, quad)
    assert slices.nvlink_domains(facts["gpus"], facts["links"]) == dict.fromkeys(range(4), "nvlink-0")


def test_a_mesh_where_some_pairs_are_not_linked_is_no_domain():
    # DGX-1 hybrid cube mesh: quads fully linked inside, only 0-4, 1-5, 2-6, 3-7 across.
    mesh = {(a, b): 1 for q in (0, 4) for a in range(q, q + 4) for b in range(a + 1, q + 4)}
    mesh.update({(i, i + 4): 2 for i in range(4)})
    facts = pcie_facts(8, mesh)
    assert slices.nvlink_domains(facts["gpus"], facts["links"]) == {}


# Taints from health


class QuietNvml:
    """discovery.Nvml's health calls, for HealthWatcher to word its real reasons."""

    def __init__(self, down=None):
        self.down = dict(down or {})

    def watch(self, _uuids):
        return []

    def wait(self, _timeout_ms):
        return None

    def probe(self, uuid):
        return self.down.get(uuid)


def unhealthy_after(events=(), down=None):
    """The health state after the watcher heard these events and probed once."""
    state = HealthState()
    gpus = [{"index": i, "uuid": u, "mig": {"devices": []}} for i, u in enumerate(H100_UUIDS)]
    watcher = HealthWatcher(QuietNvml(down), gpus, state, Config(), clock=Clock())
    for event in events:
        watcher.on_event(event)
    watcher.probe_all()
    return state


def test_health_reasons_become_taints_on_the_devices_they_name():
    state = unhealthy_after(
        events=[Event(H100_UUIDS[1], "xid", 79, None), Event(H100_UUIDS[2], "ecc_double_bit", None, None)],
        down={H100_UUIDS[3]: ProbeError(LOST, "GPU is lost")},
    )
    found = devices_of(build(unhealthy=state.unhealthy()))
    assert found["gpu-1"]["taints"] == [
        {"key": "gpu.gpuops.k8s/xid", "value": "79", "effect": "NoSchedule", "timeAdded": NOW_TEXT}
    ]
    assert found["gpu-2"]["taints"] == [
        {"key": "gpu.gpuops.k8s/unhealthy", "effect": "NoSchedule", "timeAdded": NOW_TEXT}
    ]
    assert found["gpu-3"]["taints"] == [
        {"key": "gpu.gpuops.k8s/lost", "effect": "NoSchedule", "timeAdded": NOW_TEXT}
    ]
    assert [name for name, d in found.items() if "taints" in d] == ["gpu-1", "gpu-2", "gpu-3"]


def test_a_recovered_device_has_no_taint():
    state = unhealthy_after(events=[Event(H100_UUIDS[1], "xid", 79, None)])
    state.mark([H100_UUIDS[1]], True, "re-probe succeeded")
    assert all("taints" not in d for d in devices_of(build(unhealthy=state.unhealthy())).values())


@pytest.mark.parametrize(
    ("reason", "taint"),
    [
        ("xid 79", {"key": "gpu.gpuops.k8s/xid", "value": "79"}),
        ("lost", {"key": "gpu.gpuops.k8s/lost"}),
        ("GPU GPU-1 does not answer: GPU is lost", {"key": "gpu.gpuops.k8s/lost"}),
        ("NVML no longer lists GPU GPU-1: not found", {"key": "gpu.gpuops.k8s/lost"}),
        ("device node of GPU GPU-1: /dev/nvidia1 is missing", {"key": "gpu.gpuops.k8s/lost"}),
        ("double-bit ECC error", {"key": "gpu.gpuops.k8s/unhealthy"}),
        ("health watcher failed", {"key": "gpu.gpuops.k8s/unhealthy"}),
    ],
)
def test_short_reasons_read_the_same(reason, taint):
    assert slices.taint_for(reason, NOW) == dict(taint, effect="NoSchedule", timeAdded=NOW_TEXT)


def test_taint_time_is_utc_to_the_second():
    east = timezone(timedelta(hours=9))
    assert slices.timestamp(datetime(2026, 11, 28, 13, 5, 6, 999999, tzinfo=east)) == NOW_TEXT


# MIG


def mig_facts():
    facts = pcie_facts(2)
    facts["gpus"][0]["mig"] = {
        "capable": True,
        "current": "enabled",
        "pending": "enabled",
        "devices": [
            {"index": 1, "uuid": "MIG-b", "profile": "3g.40gb", "memory_total_mib": 40192,
             "gpu_instance_id": 2, "compute_instance_id": 0},
            {"index": 0, "uuid": "MIG-a", "profile": "1g.10gb", "memory_total_mib": 9984,
             "gpu_instance_id": 1, "compute_instance_id": 0},
        ],
    }  # fmt: skip
    return facts


def test_a_gpu_with_mig_offers_its_mig_devices_instead_of_itself():
    found = devices_of(build(mig_facts(), {"MIG-b": "XID 43 on GPU x"}))
    assert list(found) == ["gpu-0-mig-1-0", "gpu-0-mig-2-0", "gpu-1"]
    mig = found["gpu-0-mig-1-0"]
    assert mig["attributes"]["type"] == {"string": "mig"}
    assert mig["attributes"]["uuid"] == {"string": "MIG-a"}
    assert mig["attributes"]["parentUUID"] == {"string": H100_UUIDS[0]}
    assert mig["attributes"]["profile"] == {"string": "1g.10gb"}
    assert mig["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": "0000:18:00.0"}
    assert mig["capacity"] == {"memory": {"value": "9984Mi"}}
    assert "nvlinkDomain" not in mig["attributes"]
    assert "taints" not in mig
    assert "allowMultipleAllocations" not in mig  # a partition already: one claim
    assert found["gpu-1"]["allowMultipleAllocations"] is True
    assert found["gpu-0-mig-2-0"]["taints"][0]["value"] == "43"


def test_a_mig_device_is_tainted_with_its_gpu():
    """The health watcher records a GPU's XIDs and loss by the GPU's UUID."""
    found = devices_of(build(mig_facts(), {H100_UUIDS[0]: "GPU is lost"}))
    assert [name for name, device in found.items() if "taints" in device] == [
        "gpu-0-mig-1-0",
        "gpu-0-mig-2-0",
    ]


def test_a_mig_device_without_instance_ids_is_refused_by_name():
    facts = mig_facts()
    facts["gpus"][0]["mig"]["devices"][0]["compute_instance_id"] = None
    with pytest.raises(slices.SliceSpecError, match="MIG-b on gpu-0"):
        build(facts)


# Limits


def test_more_than_128_devices_split_into_slices_that_count_the_pool():
    specs = build(many_gpus(130))
    assert [len(s["devices"]) for s in specs] == [128, 2]
    assert {s["pool"]["resourceSliceCount"] for s in specs} == {2}
    assert [d["name"] for s in specs for d in s["devices"]] == ["gpu-%d" % i for i in range(130)]


def test_a_tainted_device_makes_the_limit_64_per_slice():
    specs = build(many_gpus(130), {"GPU-%036d" % 129: "XID 79"})
    assert [len(s["devices"]) for s in specs] == [64, 64, 2]
    assert {s["pool"]["resourceSliceCount"] for s in specs} == {3}


def test_the_most_attributes_a_device_can_have_stay_under_the_limit():
    facts = mig_facts()
    for gpu in facts["gpus"]:
        gpu.update(brand="Nvidia", pcie_root="pci0000:00", numa_node=0)
    facts["links"] = [{"gpus": [0, 1], "nvlinks": 4, "nvswitch": False}]
    counts = [len(d["attributes"]) + len(d["capacity"]) for d in devices_of(build(facts)).values()]
    assert max(counts) == 14 < slices.MAX_ATTRIBUTES_AND_CAPACITIES


def test_more_attributes_than_the_api_allows_is_an_error_naming_the_device(monkeypatch):
    monkeypatch.setattr(slices, "MAX_ATTRIBUTES_AND_CAPACITIES", 5)
    with pytest.raises(slices.TooManyAttributes, match="device gpu-0: attributes and capacity: 10 entries"):
        build()


def test_a_long_identifier_is_an_error_naming_device_and_attribute():
    facts = mock_h100_facts()
    facts["gpus"][2]["uuid"] = "GPU-" + "0" * 61
    with pytest.raises(slices.AttributeValueTooLong) as raised:
        build(facts)
    assert (raised.value.device, raised.value.field) == ("gpu-2", "uuid")
    assert "65 bytes, the API allows 64" in str(raised.value)


def test_a_long_product_name_is_cut_to_64_bytes_at_a_character_boundary():
    facts = mock_h100_facts()
    facts["gpus"][0]["name"] = "NVIDIA " + "X" * 56 + "é and more"  # é straddles byte 64
    name = devices_of(build(facts))["gpu-0"]["attributes"]["productName"]["string"]
    assert name == "NVIDIA " + "X" * 56
    assert len(name.encode()) <= 64


def test_a_driver_version_that_is_not_a_version_is_an_error():
    facts = mock_h100_facts()
    facts["system"]["driver_version"] = "550.163.01-custom"
    with pytest.raises(slices.InvalidVersion, match=r"device gpu-0: driverVersion: '550\.163\.01-custom'"):
        build(facts)
