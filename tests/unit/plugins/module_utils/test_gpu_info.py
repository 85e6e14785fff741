# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_gpu_info: which device plugin configuration the labels describe, and what a failure carries."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _gpu_info as gpu_info
from ansible_collections.gpuops.k8s.plugins.module_utils import _plugin_config as pc

TIME_SLICING = {
    "version": "v1",
    "flags": {"migStrategy": "mixed"},
    "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
}


def params(tmp_path, option=None, record=None):
    path = tmp_path / "served.json"
    if record is not None:
        path.write_text(json.dumps(record))
    return {"device_plugin": option, "device_plugin_record": str(path)}


def test_gpu_info_takes_the_option_over_the_record(tmp_path):
    option = {"mode": "nvidia", "config": {}, "environment": {"MIG_STRATEGY": "single"}}
    source, mode, config = gpu_info.device_plugin(
        params(tmp_path, option, {"mode": "gpuops", "config": TIME_SLICING})
    )
    assert (source, mode, config.mig_strategy, config.sharing()[0]) == ("option", "nvidia", "single", "none")


def test_gpu_info_reads_the_record_or_uses_the_defaults(tmp_path):
    source, mode, config = gpu_info.device_plugin(
        params(tmp_path, record={"mode": "gpuops", "config": TIME_SLICING})
    )
    assert (source, mode, config.mig_strategy, config.sharing()[0]) == (
        "record",
        "gpuops",
        "mixed",
        "time-slicing",
    )
    source, mode, config = gpu_info.device_plugin(params(tmp_path / "nothing"))
    assert (source, mode, config) == ("none", None, pc.Config())


def test_gpu_info_names_where_a_bad_configuration_came_from(tmp_path):
    with pytest.raises(pc.ConfigError, match=r"\(.*served\.json\): device_plugin\.mode: 'x' is not valid"):
        gpu_info.device_plugin(params(tmp_path, record={"mode": "x"}))
    with pytest.raises(pc.ConfigError, match=r"\(option device_plugin\): device_plugin\.config: version"):
        gpu_info.device_plugin(params(tmp_path, option={"mode": "gpuops", "config": {"version": "v2"}}))
    # A record that is not JSON at all: the record is named, with what rewrites it.
    (tmp_path / "served.json").write_text("{not json")
    with pytest.raises(
        pc.ConfigError, match=r"\(.*served\.json\): .*not valid JSON.*run it again on the node"
    ):
        gpu_info.device_plugin(params(tmp_path))


class Module:
    """What gpu_info.run reads of AnsibleModule; warnings are kept in order."""

    def __init__(self, **given):
        self.params = {
            "require_nvml": False,
            "fail_on_lost_gpu": False,
            "fail_on_plugin_error": True,
            "sysfs_root": "/sys",
            **given,
        }
        self.warnings = []

    def warn(self, message):
        self.warnings.append(message)


def test_without_nvidia_ml_py_nvml_is_reported_unusable_not_a_crash(tmp_path, monkeypatch):
    # A fresh node before the driver phase: no bindings yet, and require_nvml false.
    monkeypatch.setattr(gpu_info.nvml, "HAS_PYNVML", False)
    monkeypatch.setattr(gpu_info.nvml, "PYNVML_IMPORT_ERROR", "ModuleNotFoundError: No module named 'pynvml'")
    monkeypatch.setattr(gpu_info.nvml, "discover", lambda **_: pytest.fail("discover needs pynvml"))
    result = gpu_info.run(Module(**params(tmp_path)))
    assert result["nvml"]["available"] is False
    assert result["nvml"]["reason"] == "bindings_not_installed"
    assert "pynvml" in result["nvml"]["error"] and "python3-pynvml" in result["nvml"]["error"]
    assert result["gpu_count"] == 0
    # require_nvml: the module reports the missing library, with the import's traceback.
    with pytest.raises(gpu_info.MissingBindings) as missing:
        gpu_info.run(Module(require_nvml=True, **params(tmp_path)))
    assert missing.value.traceback == "ModuleNotFoundError: No module named 'pynvml'"


SYSTEM = {"driver_version": "550.54.15", "cuda_driver_version": "12.4", "nvml_version": "12.550.54.15"}
NVML_AVAILABLE = dict(SYSTEM, available=True, reason=None, error=None)
# A result before any GPU is described: what each failure after the configuration starts from.
UNDESCRIBED = {"changed": False, "gpus": [], "gpu_count": 0, "lost_gpus": [], "links": [], "nvswitch": False}
NO_PLUGIN = {
    "source": "none",
    "mode": None,
    "mig_strategy": "none",
    "sharing_strategy": "none",
    "error": None,
}
LOST = {"index": 1, "error": "GPU is lost", "nvml_code": 15}
MPS = {"version": "v1", "sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}


def gpu(index, mig_enabled=False):
    mig_devices = [{"index": 0, "uuid": "MIG-%d-0" % index, "profile": "1g.10gb", "attributes": None}]
    return {
        "index": index,
        "uuid": "GPU-%08d-0000-0000-0000-000000000000" % index,
        "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559,
        "compute_capability": {"major": 9, "minor": 0, "full": "9.0"},
        "mode": "compute",
        "mig": {
            "capable": True,
            "current": "enabled" if mig_enabled else "disabled",
            "devices": mig_devices if mig_enabled else [],
        },
        "vgpu": None,
    }


def discovering(monkeypatch, gpus=(), lost=(), error=None):
    """NVML answers with gpus and lost (or raises error); the host's sysfs is not read."""

    def discover(sysfs_root):
        if error is not None:
            raise error
        return {
            "system": dict(SYSTEM),
            "gpus": list(gpus),
            "lost_gpus": list(lost),
            "links": [],
            "nvswitch": False,
        }

    monkeypatch.setattr(gpu_info.nvml, "HAS_PYNVML", True)
    monkeypatch.setattr(gpu_info.nvml, "discover", discover)
    monkeypatch.setattr(gpu_info.nvml, "read_machine_type", lambda sysfs_root: None)


def failure(module):
    with pytest.raises(gpu_info.GpuInfoError) as raised:
        gpu_info.run(module)
    return str(raised.value), raised.value.result


def test_unusable_nvml_when_required_fails_with_the_result_that_says_why(tmp_path, monkeypatch):
    error = gpu_info.nvml.NvmlLibraryNotFound("NVML library libnvidia-ml.so.1 was not found", 12)
    discovering(monkeypatch, error=error)
    unusable = {
        "available": False,
        "reason": "library_not_found",
        "error": "NVML library libnvidia-ml.so.1 was not found",
        "driver_version": None,
        "cuda_driver_version": None,
        "nvml_version": None,
    }
    assert failure(Module(require_nvml=True, **params(tmp_path))) == (
        "NVML library libnvidia-ml.so.1 was not found",
        dict(UNDESCRIBED, labels={}, device_plugin=NO_PLUGIN, nvml=unusable),
    )


def test_a_lost_gpu_fails_with_fail_on_lost_gpu_else_warns_and_is_left_out(tmp_path, monkeypatch):
    discovering(monkeypatch, gpus=[gpu(0), gpu(2)], lost=[LOST])
    module = Module(fail_on_lost_gpu=True, **params(tmp_path))
    # The failure lists the GPUs that answered; gpu_count and the labels are not computed yet.
    assert failure(module) == (
        "GPU 1 did not answer NVML: GPU is lost",
        dict(
            UNDESCRIBED,
            gpus=[gpu(0), gpu(2)],
            lost_gpus=[LOST],
            labels={},
            device_plugin=NO_PLUGIN,
            nvml=NVML_AVAILABLE,
        ),
    )
    assert module.warnings == []
    module = Module(**params(tmp_path))
    result = gpu_info.run(module)
    assert (result["gpu_count"], result["lost_gpus"], result["labels"]["nvidia.com/gpu.count"]) == (
        2,
        [LOST],
        "2",
    )
    assert module.warnings == [
        "GPU 1 did not answer NVML: GPU is lost; it is left out of gpu_count and the labels"
    ]


def test_labels_gfd_refuses_fail_with_the_gpus_counted(tmp_path, monkeypatch):
    discovering(monkeypatch, gpus=[gpu(0, mig_enabled=True), gpu(1)])
    option = {"mode": "nvidia", "config": MPS, "environment": {}}
    message, result = failure(Module(**params(tmp_path, option)))
    assert message.startswith("sharing.mps: MPS sharing is not supported on MIG-enabled GPUs (GPU 0)")
    assert result == dict(
        UNDESCRIBED,
        gpus=[gpu(0, mig_enabled=True), gpu(1)],
        gpu_count=2,
        labels={},
        device_plugin={
            "source": "option",
            "mode": "nvidia",
            "mig_strategy": "none",
            "sharing_strategy": "mps",
            "error": None,
        },
        nvml=NVML_AVAILABLE,
    )


def test_a_bad_configuration_fails_with_its_message_alone(tmp_path, monkeypatch):
    discovering(monkeypatch, error=AssertionError("the configuration is checked before NVML is asked"))
    message, result = failure(Module(require_nvml=True, **params(tmp_path, record={"mode": "x"})))
    assert message.startswith(
        "the device plugin's configuration (%s): device_plugin.mode" % (tmp_path / "served.json")
    )
    assert result == {}


def test_a_record_that_cannot_be_read_is_reported_without_labels_when_told_not_to_fail(tmp_path, monkeypatch):
    """A diagnosis must still describe the node: its GPUs, and what is wrong with the record."""
    discovering(monkeypatch, gpus=[gpu(0), gpu(1)])
    (tmp_path / "served.json").write_text('{"mode": "gpuops", "con')  # cut short
    result = gpu_info.run(Module(fail_on_plugin_error=False, **params(tmp_path)))
    error = result["device_plugin"].pop("error")
    assert error.startswith("the device plugin's configuration (%s): " % (tmp_path / "served.json"))
    assert "not valid JSON" in error and "run it again on the node" in error
    assert result == dict(
        UNDESCRIBED,
        gpus=[gpu(0), gpu(1)],
        gpu_count=2,
        labels={},
        device_plugin={"source": "record", "mode": None, "mig_strategy": "none", "sharing_strategy": "none"},
        nvml=NVML_AVAILABLE,
    )
    # Told to fail (the default), the same record stops the module with the same message.
    assert failure(Module(**params(tmp_path)))[0] == error
