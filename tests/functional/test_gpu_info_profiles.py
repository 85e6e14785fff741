# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_info on simulated nodes: a mock NVML with the profiles in lab/profiles.

Every test runs on NVIDIA's mock NVML (the `mocknvml` fixture, lab/mocknvml/build.sh)
except the four that need what it does not model: MIG instances, and a board that
answers NVML's MIG-mode query with NOT_SUPPORTED as a real T4 does (NVIDIA's mock answers
it on every board). Those use gpuops's MIG stand-in (the `mig_standin` fixture,
lab/mig-nvml-standin), which reads the same profiles. A library that cannot be built
fails its tests; nothing skips.
"""

import json
import re

import pytest
import yaml
from _mock import PROFILES, mock_env, run_python
from conftest import REPO, run_module

H100 = "h100-8x-nvswitch.yaml"
H100_LOST = "h100-lost-gpu.yaml"
H100_XID = "h100-xid-pending.yaml"
A100_MIG = "a100-8x-mig.yaml"
A100_MIG_TABLE = "a100-8x-mig.mig.yaml"
T4 = "t4-1x.yaml"
LOST_INDEX = 3
XID_INDEX = 5

UUID_FORM = re.compile(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
BUS_ID_FORM = re.compile(r"^[0-9A-F]{4}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$")

# Waits on the NVML event set for XID critical errors from every GPU; prints what arrived.
XID_EVENTS = """
import json
import pynvml

def text(value):
    return value.decode() if isinstance(value, bytes) else value

pynvml.nvmlInit()
try:
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    uuids = [text(pynvml.nvmlDeviceGetUUID(h)) for h in handles]
    events_set = pynvml.nvmlEventSetCreate()
    for handle in handles:
        pynvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, events_set)
    for handle in handles:
        pynvml.nvmlDeviceGetMemoryInfo(handle)
    events = []
    while len(events) < 16:
        try:
            data = pynvml.nvmlEventSetWait(events_set, 2000)
        except pynvml.NVMLError_Timeout:
            break
        events.append({"uuid": text(pynvml.nvmlDeviceGetUUID(data.device)),
                       "type": data.eventType, "xid": data.eventData})
    pynvml.nvmlEventSetFree(events_set)
finally:
    pynvml.nvmlShutdown()
print(json.dumps({"uuids": uuids, "events": events,
                  "xid_type": pynvml.nvmlEventTypeXidCriticalError}))
"""


def profile(name):
    with open(str(PROFILES / name)) as handle:
        return yaml.safe_load(handle)


def devices(name):
    return sorted(profile(name)["devices"], key=lambda device: device["index"])


def uuids(name):
    return [device["uuid"] for device in devices(name)]


def sysfs_bus_ids(name):
    return [device["pci"]["bus_id"].lower() for device in devices(name)]


@pytest.fixture
def sysfs(tmp_path):
    """An empty sysfs: NUMA, PCI class and machine type stay unknown whatever the host has."""
    return str(tmp_path)


def gpu_info(mocknvml, sysfs, profile_name, **args):
    """gpu_info on one profile; a profile's sibling MIG table is named explicitly too."""
    extra = {}
    table = PROFILES / profile_name.replace(".yaml", ".mig.yaml")
    if table.exists():
        extra["MOCK_MIG_PROFILES_CONFIG"] = table
    return run_module(dict(args, sysfs_root=sysfs), env=mock_env(mocknvml, profile_name, **extra))


# --- The profiles themselves (no mock needed) ------------------------------------------


@pytest.mark.parametrize("name", [H100, H100_LOST, H100_XID, A100_MIG, T4])
def test_profile_is_well_formed(name):
    doc = profile(name)
    assert doc["version"] == "1.0"
    assert doc["system"]["driver_version"]
    listed = devices(name)
    assert [device["index"] for device in listed] == list(range(len(listed)))
    assert all(UUID_FORM.match(device["uuid"]) for device in listed)
    assert all(BUS_ID_FORM.match(device["pci"]["bus_id"]) for device in listed)
    assert len(set(uuids(name))) == len(listed)
    assert len(set(sysfs_bus_ids(name))) == len(listed)


def test_profiles_use_distinct_gpus():
    every = uuids(H100) + uuids(A100_MIG) + uuids(T4)
    assert len(set(every)) == len(every)


@pytest.mark.parametrize(
    ("name", "index", "failure"),
    [
        (H100_LOST, LOST_INDEX, {"mode": "lost"}),
        (H100_XID, XID_INDEX, {"mode": "ecc_uncorrectable", "xid": {"code": 79}}),
    ],
)
def test_failure_profiles_differ_from_h100_only_by_their_failure(name, index, failure):
    derived, base = profile(name), profile(H100)
    assert derived["devices"][index].pop("failure") == failure
    assert derived == base


def test_mig_table_covers_the_layouts():
    table = yaml.safe_load((PROFILES / A100_MIG_TABLE).read_text())
    names = {row["name"] for row in table["supported_profiles"]}
    for device in devices(A100_MIG):
        layout = device.get("mig", {})
        declared = layout.get("gpu_instances", []) + layout.get("instances", [])
        assert {entry["profile"] for entry in declared} <= names


# --- gpu_info on the mock -----------------------------------------------------------------


# What each profile should read as: count, product name, compute capability, GFD family,
# accelerator label, and nvidia.com/mig.capable (None: no claim here. NVIDIA's mock
# answers the MIG-mode query on every board, so its T4 reads as MIG-capable, as GFD would
# label it on that mock; test_t4_is_not_mig_capable checks a real T4's answer on the
# stand-in. The H100 profile declares no MIG block.)
IDENTITY = {
    H100: (8, "NVIDIA H100 80GB HBM3", "9.0", "hopper", "nvidia-h100", None),
    A100_MIG: (8, "NVIDIA A100-SXM4-40GB", "8.0", "ampere", "nvidia-a100", "true"),
    T4: (1, "Tesla T4", "7.5", "turing", "nvidia-tesla-t4", None),
}


@pytest.mark.parametrize("name", sorted(IDENTITY))
def test_identity_and_labels(mocknvml, sysfs, name):
    count, product, compute, family, accelerator, mig_capable = IDENTITY[name]
    result = gpu_info(mocknvml, sysfs, name)
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    assert result["nvml"]["available"] is True
    assert result["nvml"]["driver_version"] == "550.163.01"
    assert result["gpu_count"] == count
    assert result["lost_gpus"] == []
    gpus = result["gpus"]
    assert [gpu["index"] for gpu in gpus] == list(range(count))
    assert [gpu["uuid"] for gpu in gpus] == uuids(name)
    assert [gpu["pci_bus_id_sysfs"] for gpu in gpus] == sysfs_bus_ids(name)
    assert {gpu["name"] for gpu in gpus} == {product}
    assert {gpu["compute_capability"]["full"] for gpu in gpus} == {compute}
    assert {gpu["family"] for gpu in gpus} == {family}
    labels = result["labels"]
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.count"] == str(count)
    assert labels["nvidia.com/gpu.family"] == family
    assert labels["accelerator"] == accelerator
    assert labels["nvidia.com/gpu.compute.major"] + "." + labels["nvidia.com/gpu.compute.minor"] == compute
    if mig_capable is not None:
        assert labels["nvidia.com/mig.capable"] == mig_capable
    assert labels["nvidia.com/cuda.driver-version.full"] == "550.163.01"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.4"


REAL_H100 = REPO / "tests" / "fixtures" / "real_gpu" / "h100-80gb-hbm3"
# What a board decides, as opposed to the driver, the host or the fleet around it.
BOARD_FACTS = ("name", "memory_total_mib", "compute_capability", "family", "mig", "persistence_mode")
BOARD_LABELS = (
    "accelerator",
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.family",
    "nvidia.com/gpu.compute.major",
    "nvidia.com/gpu.compute.minor",
    "nvidia.com/mig.capable",
    "nvidia.com/mps.capable",
)


def test_the_h100_profile_answers_as_the_real_h100_did(mocknvml, sysfs):
    """The lab's H100 stands for the one lab/real-gpu/record.py met (its README.md)."""
    real = json.loads((REAL_H100 / "gpu_info.json").read_text())
    result = gpu_info(mocknvml, sysfs, H100)
    for gpu in result["gpus"]:
        assert {key: gpu[key] for key in BOARD_FACTS} == {key: real["gpus"][0][key] for key in BOARD_FACTS}
    assert {key: result["labels"][key] for key in BOARD_LABELS} == {
        key: real["labels"][key] for key in BOARD_LABELS
    }


def test_h100_gpus_all_reach_each_other_through_nvswitch(mocknvml, sysfs):
    result = gpu_info(mocknvml, sysfs, H100)
    assert result["nvswitch"] is True
    for gpu in result["gpus"]:
        assert gpu["nvlinks"] == {"active": 18, "to_switch": 18, "to_gpu": 0}, gpu["index"]
    pairs = result["links"]
    assert sorted(tuple(pair["gpus"]) for pair in pairs) == [
        (a, b) for a in range(8) for b in range(a + 1, 8)
    ]
    assert all(pair["nvswitch"] is True for pair in pairs)
    assert all(pair["nvlinks"] == 0 for pair in pairs)  # no direct GPU-to-GPU links on HGX


def test_t4_has_no_links(mocknvml, sysfs):
    result = gpu_info(mocknvml, sysfs, T4)
    assert result["links"] == []
    assert result["nvswitch"] is False
    assert result["gpus"][0]["nvlinks"] == {"active": 0, "to_switch": 0, "to_gpu": 0}


def test_the_h100_nodes_nvlink_clique(mocknvml, sysfs):
    # The profile registers every GPU with the fabric manager (device_defaults.fabric); GFD's
    # IMEX labeler writes nvidia.com/gpu.clique=<cluster UUID>.<clique ID> from the same call.
    fabric = profile(H100)["device_defaults"]["fabric"]
    result = gpu_info(mocknvml, sysfs, H100)
    for gpu in result["gpus"]:
        assert gpu["fabric"] == {
            "state": "completed",
            "status": 0,
            "cluster_uuid": fabric["cluster_uuid"],
            "clique_id": fabric["clique_id"],
        }, gpu["index"]
    clique = "%s.%d" % (fabric["cluster_uuid"], fabric["clique_id"])
    assert result["labels"]["nvidia.com/gpu.clique"] == clique


def test_a_board_without_the_fabric_api_has_no_clique(mocknvml, sysfs):
    # No fabric block in the profile: the mock answers NOT_SUPPORTED, as a T4 does.
    result = gpu_info(mocknvml, sysfs, T4)
    assert result["gpus"][0]["fabric"]["state"] == "not_supported"
    assert "nvidia.com/gpu.clique" not in result["labels"]


def test_t4_is_not_mig_capable(mig_standin, sysfs):
    """A board whose NVML answers the MIG-mode query with NOT_SUPPORTED (a real T4) is not
    MIG-capable. On the stand-in: NVIDIA's mock answers that query on every board."""
    result = gpu_info(mig_standin, sysfs, T4)
    assert result["gpus"][0]["mig"]["capable"] is False
    assert result["labels"]["nvidia.com/mig.capable"] == "false"


def test_a100_mig_layout(mig_standin, sysfs):
    result = gpu_info(mig_standin, sysfs, A100_MIG)
    assert not result.get("failed"), result.get("msg")
    assert result["labels"]["nvidia.com/mig.capable"] == "true"
    assert result["nvswitch"] is True
    expected = {
        0: ["1g.5gb", "2g.10gb", "4g.20gb"],
        1: ["3g.20gb", "3g.20gb"],
        2: ["1g.5gb"] * 7,
    }
    for gpu in result["gpus"]:
        mig = gpu["mig"]
        assert mig["capable"] is True, gpu["index"]
        if gpu["index"] in expected:
            assert (mig["current"], mig["pending"]) == ("enabled", "enabled"), gpu["index"]
            assert sorted(d["profile"] for d in mig["devices"]) == expected[gpu["index"]]
            assert all(d["uuid"].startswith("MIG-") for d in mig["devices"])
        else:
            assert (mig["current"], mig["pending"]) == ("disabled", "disabled"), gpu["index"]
            assert mig["devices"] == [], gpu["index"]
    explicit = result["gpus"][0]["mig"]["devices"]
    assert sorted(d["gpu_instance_id"] for d in explicit) == [1, 5, 13]
    every_mig_uuid = [d["uuid"] for gpu in result["gpus"] for d in gpu["mig"]["devices"]]
    assert len(set(every_mig_uuid)) == len(every_mig_uuid) == 12


# What the stand-in's MIG table (a100-8x-mig.mig.yaml) gives each profile through
# nvmlDeviceGetAttributes: memory MiB, multiprocessors, GPU instance slices.
A100_MIG_ATTRIBUTES = {"1g.5gb": ("4864", "14", "1"), "3g.20gb": ("19968", "42", "3")}


def test_a100_mig_labels_under_each_strategy(mig_standin, sysfs, tmp_path):
    # The labels say what the device plugin offers; the record is the device_plugin role's.
    record = tmp_path / "served.json"
    record.write_text(
        json.dumps(
            {
                "mode": "gpuops",
                "config": {
                    "version": "v1",
                    "flags": {"migStrategy": "mixed"},
                    "sharing": {
                        "timeSlicing": {"resources": [{"name": "nvidia.com/mig-1g.5gb", "replicas": 2}]}
                    },
                },
                "environment": {},
            }
        )
    )
    result = gpu_info(mig_standin, sysfs, A100_MIG, device_plugin_record=str(record))
    assert not result.get("failed"), result.get("msg")
    assert result["device_plugin"] == {
        "source": "record",
        "mode": "gpuops",
        "mig_strategy": "mixed",
        "sharing_strategy": "time-slicing",
        "error": None,
    }
    labels = result["labels"]
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig-1g.5gb.count"] == "8"
    assert labels["nvidia.com/mig-1g.5gb.replicas"] == "2"
    assert labels["nvidia.com/mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"
    assert labels["nvidia.com/mig-3g.20gb.count"] == "2"
    for profile_name, (memory, sms, slices) in A100_MIG_ATTRIBUTES.items():
        prefix = "nvidia.com/mig-%s." % profile_name
        assert (labels[prefix + "memory"], labels[prefix + "multiprocessors"]) == (memory, sms)
        assert labels[prefix + "slices.gi"] == slices
    # The stand-in's sysfs is empty: machine type and PCI class unknown, vGPU unreadable.
    assert (labels["nvidia.com/gpu.machine"], labels["nvidia.com/gpu.mode"]) == ("unknown", "unknown")
    assert "nvidia.com/vgpu.present" not in labels

    single = gpu_info(mig_standin, sysfs, A100_MIG, device_plugin={"environment": {"MIG_STRATEGY": "single"}})
    assert single["device_plugin"]["source"] == "option"
    assert single["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
    assert single["labels"]["nvidia.com/gpu.count"] == "0"
    assert any(
        "the gpuops device plugin refuses to serve these GPUs" in w and "enabled on 3 of 8" in w
        for w in single.get("warnings", [])
    ), single.get("warnings")


def test_a_bad_device_plugin_configuration_fails_naming_the_field(mocknvml, sysfs):
    config = {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": "4"}]}}}
    result = gpu_info(mocknvml, sysfs, T4, device_plugin={"config": config})
    assert result["failed"] is True
    assert (
        "sharing.timeSlicing.resources[0].replicas: '4' is not valid; expected an integer >= 1"
        in result["msg"]
    )


def test_mps_on_mig_gpus_fails_like_gfd(mig_standin, sysfs):
    # NVIDIA's plugin with MPS on a node with MIG enabled: GFD refuses to label it.
    config = {"sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}
    result = gpu_info(mig_standin, sysfs, A100_MIG, device_plugin={"mode": "nvidia", "config": config})
    assert result["failed"] is True
    assert "MPS sharing is not supported on MIG-enabled GPUs (GPU 0, 1, 2)" in result["msg"]
    assert result["gpu_count"] == len(result["gpus"]) == 8
    assert "Traceback" not in str(result)


def test_no_gpu(mocknvml, sysfs):
    # YAML cannot describe zero GPUs (an empty device list means 8): use the env path.
    env = mock_env(mocknvml, MOCK_NVML_NUM_DEVICES=0)
    result = run_module({"sysfs_root": sysfs}, env=env)
    assert not result.get("failed"), result.get("msg")
    assert result["nvml"]["available"] is True
    assert result["gpu_count"] == 0
    assert result["gpus"] == [] and result["links"] == [] and result["lost_gpus"] == []
    assert result["labels"] == {}
    assert result["nvswitch"] is False


def test_lost_gpu_is_reported_and_left_out(mocknvml, sysfs):
    result = gpu_info(mocknvml, sysfs, H100_LOST)
    assert not result.get("failed"), result.get("msg")
    assert [gone["index"] for gone in result["lost_gpus"]] == [LOST_INDEX]
    assert result["lost_gpus"][0]["nvml_code"] == 15  # NVML_ERROR_GPU_IS_LOST
    assert result["gpu_count"] == 7
    survivors = [uuid for index, uuid in enumerate(uuids(H100_LOST)) if index != LOST_INDEX]
    assert [gpu["uuid"] for gpu in result["gpus"]] == survivors
    assert result["labels"]["nvidia.com/gpu.count"] == "7"
    assert all(LOST_INDEX not in pair["gpus"] for pair in result["links"])
    assert any("GPU %d did not answer NVML" % LOST_INDEX in w for w in result.get("warnings", []))


def test_fail_on_lost_gpu_names_the_gpu(mocknvml, sysfs):
    result = gpu_info(mocknvml, sysfs, H100_LOST, fail_on_lost_gpu=True)
    assert result["failed"] is True
    assert "GPU %d" % LOST_INDEX in result["msg"]
    assert [gone["index"] for gone in result["lost_gpus"]] == [LOST_INDEX]
    assert "Traceback" not in str(result)


def test_pending_xid_leaves_the_gpu_enumerated(mocknvml, sysfs):
    result = gpu_info(mocknvml, sysfs, H100_XID)
    assert not result.get("failed"), result.get("msg")
    assert result["gpu_count"] == 8
    assert result["lost_gpus"] == []
    assert [gpu["uuid"] for gpu in result["gpus"]] == uuids(H100_XID)


def test_pending_xid_arrives_through_the_event_set(mocknvml):
    seen = run_python(XID_EVENTS, env=mock_env(mocknvml, H100_XID))
    assert seen["uuids"] == uuids(H100_XID)
    assert [(e["uuid"], e["xid"]) for e in seen["events"]] == [(uuids(H100_XID)[XID_INDEX], 79)]
    assert seen["events"][0]["type"] == seen["xid_type"]
