# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_info.device_plugin: which device plugin configuration the labels describe."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _plugin_config as pc
from ansible_collections.gpuops.k8s.plugins.modules import gpu_info

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


class Module:
    """What gpu_info.run reads of AnsibleModule; fail_json raises."""

    def __init__(self, **given):
        self.params = {"require_nvml": False, "fail_on_lost_gpu": False, "sysfs_root": "/sys", **given}

    def fail_json(self, **result):
        raise AssertionError(result)


def test_without_nvidia_ml_py_nvml_is_reported_unusable_not_a_crash(tmp_path, monkeypatch):
    # A fresh node before the driver phase: no bindings yet, and require_nvml false.
    monkeypatch.setattr(gpu_info.nvml, "HAS_PYNVML", False)
    monkeypatch.setattr(gpu_info.nvml, "discover", lambda **_: pytest.fail("discover needs pynvml"))
    result = gpu_info.run(Module(**params(tmp_path)))
    assert result["nvml"]["available"] is False
    assert result["nvml"]["reason"] == "bindings_not_installed"
    assert "pynvml" in result["nvml"]["error"] and "python3-pynvml" in result["nvml"]["error"]
    assert result["gpu_count"] == 0
    with pytest.raises(AssertionError, match="bindings_not_installed"):
        gpu_info.run(Module(require_nvml=True, **params(tmp_path)))
