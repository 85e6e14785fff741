# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/validate.yml's role against the lab node, with and without a device plugin."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from dp_harness import H100_UUIDS, PROFILES, Daemon

PLUGIN_DIR = "/var/lib/kubelet/device-plugins"


@pytest.fixture(scope="module")
def no_lab_plugin(lab):
    """The lab's own device plugin (if `up --device-plugin` started one) is stopped here."""
    running = lab.running("device-plugin")
    if running:
        lab.control("stop", "device-plugin")
    yield
    if running:
        lab.control("start", "device-plugin")


@pytest.fixture
def plugin(lab, mock_lib, no_lab_plugin):
    daemon = Daemon(mock_lib, PLUGIN_DIR).start()
    daemon.wait_log("registered ", timeout=30)
    lab.wait(
        "8 GPUs allocatable",
        lambda: lab.node_object()["status"]["allocatable"].get("nvidia.com/gpu") == "8",
        30,
    )
    yield daemon
    daemon.cleanup()


def validate(lab, mock_lib, tmp_path, **extra):
    env = {"LD_LIBRARY_PATH": mock_lib, "MOCK_NVML_CONFIG": str(PROFILES / "h100-8x-nvswitch.yaml")}
    junit = tmp_path / "validation.xml"
    results = lab.playbook("validate.yml", dict({"gpu_validation_junit_path": str(junit)}, **extra), env=env)
    return results, junit


def test_passes_with_the_plugin_and_reports(lab, mock_lib, tmp_path, plugin):
    results, junit = validate(lab, mock_lib, tmp_path)
    assert results["_rc"] == 0, results
    result = results["Record this node's result"]["ansible_facts"]["gpu_validation_result"]
    assert result["passed"] and result["gpus"] == 8 and result["allocatable"] == 8
    assert result["pod"]["phase"] == "Succeeded" and result["pod"]["exit_code"] == 0
    assert result["pod"]["log_tail"].split("GPUs: ")[1].split()[0] in H100_UUIDS
    summary = "\n".join(results["Per-node summary"]["msg"])
    assert "gpuops-lab" in summary and "8/8" in summary and "PASS" in summary
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "1" and suite.get("failures") == "0"
    # The test pod is cleaned up.
    pods = lab.kubectl("get", "pods", "-n", "default", "-o", "name").stdout.split()
    assert not [pod for pod in pods if pod.startswith("pod/gpuops-validate-")], pods


def test_fails_with_a_reason_when_the_plugin_is_stopped(lab, mock_lib, tmp_path, no_lab_plugin):
    lab.wait(
        "allocatable 0",
        lambda: lab.node_object()["status"]["allocatable"].get("nvidia.com/gpu") in (None, "0"),
        60,
    )
    # No waiting for a plugin that is not coming (gpu_validation_allocatable_wait).
    results, junit = validate(lab, mock_lib, tmp_path, gpu_validation_allocatable_wait=0)
    assert results["_rc"] != 0
    message = results["Fail when a node did not pass"]["msg"]
    assert (
        "gpuops-lab: allocatable nvidia.com/gpu is 0, expected 8: the device plugin is not running" in message
    )
    failure = ET.parse(junit).getroot().find("./testsuite/testcase/failure")
    assert failure is not None and "device plugin is not running" in failure.get("message")


def test_fails_when_allocatable_is_short(lab, mock_lib, tmp_path, plugin):
    # Time-slicing with 2 replicas expected, but the plugin advertises each GPU once: the
    # wait for allocatable ends, and the result says what is short.
    results, _junit = validate(
        lab, mock_lib, tmp_path, gpu_validation_replicas=2, gpu_validation_allocatable_wait=4
    )
    assert results["_rc"] != 0
    assert (
        "allocatable nvidia.com/gpu is 8, expected 16 (8 GPUs x 2 replicas)"
        in (results["Fail when a node did not pass"]["msg"])
    )
