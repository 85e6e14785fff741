# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_node against the lab's real API server, with labels from gpu_info over mock GPUs."""

from __future__ import annotations

import pytest
from dp_harness import PROFILES

TASK = "Own the node's GPU labels and taint"
FOREIGN_TAINT = {"key": "dedicated", "value": "ml", "effect": "PreferNoSchedule"}


@pytest.fixture
def node(lab):
    """The lab node with one foreign label and one foreign taint; both must survive."""
    lab.kubectl("label", "node", lab.node, "team=ml", "--overwrite")
    taints = lab.add_taint(FOREIGN_TAINT)
    yield lab
    lab.playbook("gpu_node.yml", {"gpu_node_state": "absent"})
    lab.kubectl("label", "node", lab.node, "team-")
    lab.set_taints(taints)


def run(lab, mock_lib, profile, **kwargs):
    env = {"LD_LIBRARY_PATH": mock_lib, "MOCK_NVML_CONFIG": str(PROFILES / profile)}
    results = lab.playbook("gpu_node.yml", env=env, **kwargs)
    assert results["_rc"] == 0, results
    return results["Describe the GPUs"], results[TASK]


def owned_view(lab):
    node = lab.node_object()
    return node["metadata"]["labels"], node["spec"].get("taints", [])


def test_labels_taint_idempotence_and_stale_removal(node, mock_lib, tmp_path):
    # Check mode on the untouched node predicts exactly what the real run then does.
    _plan, predicted = run(node, mock_lib, "h100-8x-nvswitch.yaml", check=True, diff=True)
    assert owned_view(node)[0].get("nvidia.com/gpu.count") is None, "check mode wrote to the node"
    gpu, applied = run(node, mock_lib, "h100-8x-nvswitch.yaml")
    assert predicted["changed"] and applied["changed"]
    for key in ("labels_added", "taints_added", "labels_removed"):
        assert predicted["nodes"][0][key] == applied["nodes"][0][key], key
    labels, taints = owned_view(node)
    # What check mode predicted is what the node now carries.
    assert predicted["nodes"][0]["labels"] == labels
    assert predicted["nodes"][0]["taints"] == applied["nodes"][0]["taints"]
    for key, value in gpu["labels"].items():
        assert labels[key] == value, key
    assert labels["nvidia.com/gpu.count"] == "8"
    assert labels["accelerator"] == "nvidia-h100"
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in taints
    assert labels["team"] == "ml" and FOREIGN_TAINT in taints

    # Second run: nothing to do, one read.
    _plan, again = run(node, mock_lib, "h100-8x-nvswitch.yaml")
    assert again["changed"] is False and again["api_calls"] == 1

    # Fewer, different GPUs: the values follow.
    t4_gpu, t4 = run(node, mock_lib, "t4-1x.yaml")
    labels, taints = owned_view(node)
    assert labels["nvidia.com/gpu.count"] == "1" and labels["accelerator"] == t4_gpu["labels"]["accelerator"]
    assert {"nvidia.com/gpu.count", "nvidia.com/gpu.product", "nvidia.com/gpu.family"} <= set(
        t4["nodes"][0]["labels_updated"]
    )
    assert labels["team"] == "ml" and FOREIGN_TAINT in taints

    # The GPUs gone (no NVML library at all): every owned label is stale and removed.
    gone_gpu, gone = run(node, str(tmp_path), "t4-1x.yaml")
    assert gone_gpu["gpu_count"] == 0 and gone_gpu["labels"] == {}
    assert gone["nodes"][0]["labels_removed"] == sorted(t4_gpu["labels"])
    labels, taints = owned_view(node)
    assert not set(t4_gpu["labels"]) & set(labels)
    assert labels["team"] == "ml" and FOREIGN_TAINT in taints

    # state=absent: our taint goes too, foreign ones stay.
    _plan, none = run(node, mock_lib, "h100-8x-nvswitch.yaml", extra_vars={"gpu_node_state": "absent"})
    labels, taints = owned_view(node)
    assert none["nodes"][0]["taints_removed"] == ["nvidia.com/gpu=present:NoSchedule"]
    assert [t for t in taints if t["key"] == "nvidia.com/gpu"] == []
    assert labels["team"] == "ml" and FOREIGN_TAINT in taints
    assert "gpuops.k8s/managed" not in node.node_object()["metadata"].get("annotations", {})


def test_bad_label_fails_clearly_and_changes_nothing(node, mock_lib):
    before = node.node_object()["metadata"]
    results = node.playbook(
        "gpu_node.yml",
        env={"LD_LIBRARY_PATH": mock_lib, "MOCK_NVML_CONFIG": str(PROFILES / "t4-1x.yaml")},
        extra_vars={"gpu": {"labels": {"kubernetes.io/hostname": "x"}}},
    )
    assert results["_rc"] != 0
    assert "reserved prefix 'kubernetes.io'" in results[TASK]["msg"]
    assert node.node_object()["metadata"]["resourceVersion"] == before["resourceVersion"]


@pytest.mark.parametrize("batch", [True, False])
def test_role_labels_then_converges_then_removes(lab, mock_lib, batch):
    env = {"LD_LIBRARY_PATH": mock_lib, "MOCK_NVML_CONFIG": str(PROFILES / "h100-8x-nvswitch.yaml")}
    task = (
        "Apply the labels and taints of every host in the play"
        if batch
        else "Apply this host's labels and taints"
    )
    try:
        first = lab.playbook("gpu_node_labels.yml", {"gpu_node_labels_batch": batch}, env=env)
        assert first["_rc"] == 0, first
        assert first[task]["changed"] is True
        labels = lab.node_object()["metadata"]["labels"]
        assert labels["nvidia.com/gpu.count"] == "8" and labels["example.com/pool"] == "training"
        second = lab.playbook("gpu_node_labels.yml", {"gpu_node_labels_batch": batch}, env=env)
        assert second["_rc"] == 0 and second[task]["changed"] is False
    finally:
        gone = lab.playbook(
            "gpu_node_labels.yml", {"gpu_node_labels_batch": batch, "gpu_node_labels_state": "absent"}
        )
        assert gone["_rc"] == 0, gone
    labels = lab.node_object()["metadata"]["labels"]
    assert "example.com/pool" not in labels and "nvidia.com/gpu.count" not in labels
    assert not [t for t in lab.node_object()["spec"].get("taints", []) if t["key"] == "nvidia.com/gpu"]


def test_missing_node_fails_clearly_or_is_skipped(lab, mock_lib):
    env = {"LD_LIBRARY_PATH": mock_lib, "MOCK_NVML_CONFIG": str(PROFILES / "t4-1x.yaml")}
    failed = lab.playbook("gpu_node.yml", {"lab_node": "gpu-that-never-joined"}, env=env)
    assert failed["_rc"] != 0
    assert failed[TASK]["msg"] == (
        "Node gpu-that-never-joined does not exist in the cluster (set missing_node=skip to pass over it)"
    )
    skipped = lab.playbook(
        "gpu_node.yml", {"lab_node": "gpu-that-never-joined", "gpu_node_missing": "skip"}, env=env
    )
    assert skipped["_rc"] == 0 and skipped[TASK]["changed"] is False
    assert skipped[TASK]["nodes"] == [{"name": "gpu-that-never-joined", "changed": False, "skipped": True}]
