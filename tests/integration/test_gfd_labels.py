# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""GPU feature discovery's labels for what the node's device plugin offers, through
site.yml's labels phase (the single-host inventory) on the lab Node: time-slicing with and without a
rename, MIG mixed and single over the A100 MIG profile, and each label gone again when the
plugin stops offering it."""

from __future__ import annotations

import json

from dp_harness import Daemon

PLUGIN_DIR = "/var/lib/kubelet/device-plugins"

SLICED = {
    "version": "v1",
    "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
}
RENAMED = {
    "version": "v1",
    "sharing": {
        "timeSlicing": {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}
    },
}


def labels_phase(lab, device_plugin):
    """Run site.yml's labels phase with the plugin's offer; the Node's nvidia.com labels."""
    proc = lab.inventory_playbook(
        "playbooks/site.yml", {"gpu_node_labels_device_plugin": device_plugin}, args=["--tags", "labels"]
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    labels = lab.node_object()["metadata"]["labels"]
    return {key: value for key, value in labels.items() if key.startswith("nvidia.com/")}


def allocatable(lab):
    return lab.node_object()["status"]["allocatable"].get("nvidia.com/gpu")


def test_time_slicing_labels_follow_the_plugin(lab, mock_lib, tmp_path):
    # The node's plugin really time-slices: our daemon with the same configuration takes the
    # lab plugin's place, and the kubelet offers 8 GPUs x 4 replicas.
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps(SLICED))
    lab.control("stop", "device-plugin")
    daemon = Daemon(mock_lib, PLUGIN_DIR, config=config).start()
    try:
        daemon.wait_log("registered ", timeout=30)
        lab.wait("32 nvidia.com/gpu allocatable", lambda: allocatable(lab) == "32", 60)
        sliced = labels_phase(lab, {"mode": "gpuops", "config": SLICED})
        assert sliced["nvidia.com/gpu.count"] == "8"
        assert sliced["nvidia.com/gpu.replicas"] == "4"
        assert sliced["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
        assert sliced["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"

        # A renamed resource (nvidia.com/gpu.shared) says so itself: no -SHARED suffix.
        renamed = labels_phase(lab, {"mode": "gpuops", "config": RENAMED})
        assert renamed["nvidia.com/gpu.replicas"] == "4"
        assert renamed["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"

        # Back to the lab's own plugin (no configuration, whole GPUs): the sharing labels go.
        daemon.cleanup()
        lab.control("start", "device-plugin")
        lab.wait("8 nvidia.com/gpu allocatable", lambda: allocatable(lab) == "8", 60)
        whole = labels_phase(lab, {})
        assert whole["nvidia.com/gpu.replicas"] == "1"
        assert whole["nvidia.com/gpu.sharing-strategy"] == "none"
        assert whole["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    finally:
        daemon.cleanup()
        if not lab.running("device-plugin"):
            lab.control("start", "device-plugin")
        lab.reset_node()


def test_mig_labels_follow_the_strategy_and_go_with_it(lab):
    lab.control("profile", "a100-8x-mig.yaml")
    try:
        mixed = labels_phase(lab, {"mode": "gpuops", "environment": {"MIG_STRATEGY": "mixed"}})
        assert mixed["nvidia.com/mig.strategy"] == "mixed"
        assert mixed["nvidia.com/mig-1g.5gb.count"] == "8"  # 7 on GPU 2, 1 on GPU 0
        assert mixed["nvidia.com/mig-3g.20gb.count"] == "2"
        assert mixed["nvidia.com/mig-4g.20gb.count"] == "1"
        assert mixed["nvidia.com/mig-2g.10gb.count"] == "1"
        assert mixed["nvidia.com/mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"

        # Single: MIG on 3 of 8 GPUs with mixed profiles is no valid single layout.
        single = labels_phase(lab, {"mode": "gpuops", "environment": {"MIG_STRATEGY": "single"}})
        assert single["nvidia.com/mig.strategy"] == "single"
        assert single["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
        assert single["nvidia.com/gpu.count"] == "0"
        assert not [key for key in single if key.startswith("nvidia.com/mig-")], single

        # MIG no longer offered: the labels that described it are gone.
        none = labels_phase(lab, {})
        assert "nvidia.com/mig.strategy" not in none
        assert not [key for key in none if key.startswith("nvidia.com/mig-")], none
        assert none["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    finally:
        lab.control("profile", "h100-8x-nvswitch.yaml")
        lab.reset_node()
