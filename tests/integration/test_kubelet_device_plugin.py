# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Device plugins against the lab's real kubelet and API server (H100 profile, mock NVML):
ours, and NVIDIA's (v0.20.0, the release the role pins, built from its source) as the reference that the
same kubelet accepts the same way."""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from dp_harness import H100_UUIDS, Daemon

RESOURCE = "nvidia.com/gpu"
PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
ROOT = Path(__file__).resolve().parents[2]
# What each plugin logs once per successful Register call.
REGISTERED = {"gpuops": "registered ", "nvidia": "Registered device plugin for"}


def nvidia_plugin_command():
    build = subprocess.run(
        ["bash", str(ROOT / "lab" / "peer" / "build-nvidia-plugin.sh")],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    # No skip when it cannot be built (exit 3): the peer is part of what this suite proves.
    assert build.returncode == 0, build.stderr
    binary = os.path.join(build.stdout.strip().splitlines()[-1], "nvidia-device-plugin")
    return [binary, "--kubelet-socket", os.path.join(PLUGIN_DIR, "kubelet.sock")]


def allocatable(lab):
    return lab.node_object()["status"].get("allocatable", {}).get(RESOURCE)


def allocations(plugin):
    if plugin.kind != "gpuops":  # NVIDIA's plugin has no metrics of its own
        return None
    found = re.search(
        r'^gpuops_device_plugin_allocations_total\{resource="nvidia.com/gpu"\} (\S+)$', plugin.metrics(), re.M
    )
    return float(found.group(1)) if found else 0.0


def pod_manifest(name, gpus, command):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": "localhost/gpuops-lab/tools:1",
                    "imagePullPolicy": "Never",
                    "command": command,
                    "resources": {"limits": {RESOURCE: str(gpus)}},
                }
            ],
        },
    }


@pytest.fixture(scope="module", params=["gpuops", "nvidia"])
def plugin(request, lab, mock_lib):
    # A lab brought up with `--device-plugin gpuops` runs one already: this test's own
    # daemon (its log and metrics in reach) takes its place for the module.
    lab_plugin = lab.running("device-plugin")
    if lab_plugin:
        lab.control("stop", "device-plugin")
    daemon = Daemon(mock_lib, PLUGIN_DIR)
    daemon.kind = request.param
    if daemon.kind == "nvidia":
        daemon.command = nvidia_plugin_command()
    daemon.start()
    try:
        daemon.wait_log(REGISTERED[daemon.kind], timeout=30)
        yield daemon
    finally:
        daemon.cleanup()
        # The kubelet keeps the resource with 0 allocatable once the plugin is gone.
        lab.wait("allocatable %s back to 0" % RESOURCE, lambda: allocatable(lab) in (None, "0"), 60)
        if lab_plugin:
            lab.control("start", "device-plugin")


def test_registration_makes_eight_gpus_allocatable(lab, plugin):
    lab.wait("allocatable %s = 8" % RESOURCE, lambda: allocatable(lab) == "8", 30)
    capacity = lab.node_object()["status"]["capacity"]
    assert capacity[RESOURCE] == "8"
    # The kubelet's own record of what the plugin registered: the profile's 8 UUIDs.
    checkpoint = json.loads(Path(PLUGIN_DIR, "kubelet_internal_checkpoint").read_text())
    assert sorted(checkpoint["Data"]["RegisteredDevices"][RESOURCE]) == sorted(H100_UUIDS)


def test_pod_with_two_gpus_gets_two_profile_uuids(lab, plugin):
    lab.wait("allocatable %s = 8" % RESOURCE, lambda: allocatable(lab) == "8", 30)
    name = "gpuops-two-gpus"
    allocations_before = allocations(plugin)
    lab.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true")
    manifest = pod_manifest(name, 2, ["sh", "-c", 'echo "$NVIDIA_VISIBLE_DEVICES"'])
    lab.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    try:
        phase = lab.wait(
            "pod %s to finish" % name,
            lambda: (
                lab.get("pod", name)["status"].get("phase") in ("Succeeded", "Failed")
                and lab.get("pod", name)["status"]["phase"]
            ),
            120,
        )
        logs = lab.kubectl("logs", name).stdout.strip()
        assert phase == "Succeeded", (phase, logs, lab.get("pod", name)["status"])
        uuids = logs.split(",")
        assert len(uuids) == 2 and len(set(uuids)) == 2, logs
        assert set(uuids) <= set(H100_UUIDS), logs
        # The kubelet asked our plugin (not some other source of the variable).
        if plugin.kind == "gpuops":
            assert allocations(plugin) == allocations_before + 1
    finally:
        lab.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true")


def test_more_gpus_than_the_node_has_stays_pending(lab, plugin):
    lab.wait("allocatable %s = 8" % RESOURCE, lambda: allocatable(lab) == "8", 30)
    name = "gpuops-nine-gpus"
    lab.kubectl("apply", "-f", "-", stdin=json.dumps(pod_manifest(name, 9, ["true"])))
    try:

        def unschedulable():
            for condition in lab.get("pod", name)["status"].get("conditions", []):
                if condition["type"] == "PodScheduled" and condition["status"] == "False":
                    return condition.get("message", "")
            return None

        message = lab.wait("the scheduler to refuse pod %s" % name, unschedulable, 60)
        assert "Insufficient %s" % RESOURCE in message, message
    finally:
        lab.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true")


def test_kubelet_restart_reregisters_and_allocatable_returns(lab, plugin):
    lab.wait("allocatable %s = 8" % RESOURCE, lambda: allocatable(lab) == "8", 30)
    registrations = plugin.text().count(REGISTERED[plugin.kind])
    restarted = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    t0 = time.monotonic()
    lab.control("restart", "kubelet")

    def eight_from_new_kubelet():
        node = lab.node_object()
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        beat = datetime.datetime.fromisoformat(ready["lastHeartbeatTime"].replace("Z", "+00:00"))
        return beat >= restarted and node["status"]["allocatable"].get(RESOURCE) == "8"

    # The behaviour, not its speed: the restarted kubelet reports the 8 GPUs again once the
    # plugin registered anew. Ours usually does before the kubelet's first status update and
    # NVIDIA's one update later (nodeStatusUpdateFrequency, 10 s); a bound of a few updates
    # holds on a loaded machine too (5 s failed once beside make test's other lanes). The
    # time is printed; bench/device_plugin.py measures it.
    lab.wait("allocatable 8 reported by the restarted kubelet", eight_from_new_kubelet, 60)
    back_after = time.monotonic() - t0
    assert plugin.text().count(REGISTERED[plugin.kind]) > registrations, plugin.text()[-2000:]
    print("%s: allocatable back to 8 %.2f s after the kubelet restart began" % (plugin.kind, back_after))
