# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/validate.yml itself, with the single-host inventory, against the lab cluster and its plugin."""

from __future__ import annotations

import json


def test_validate_playbook_passes_on_the_lab_node(lab, tmp_path):
    if not lab.running("device-plugin"):
        lab.control("start", "device-plugin")
    lab.wait(
        "8 GPUs allocatable",
        lambda: lab.node_object()["status"]["allocatable"].get("nvidia.com/gpu") == "8",
        30,
    )
    junit = tmp_path / "report.xml"
    proc = lab.inventory_playbook(
        "playbooks/validate.yml", {"gpu_validation_junit_path": str(junit)}, json_output=True
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    tasks = {
        t["task"]["name"].rpartition(" : ")[2]: t["hosts"]
        for t in json.loads(proc.stdout)["plays"][0]["tasks"]
    }
    result = tasks["Record this node's result"]["gpuops-lab"]["ansible_facts"]["gpu_validation_result"]
    assert result["passed"] and result["gpus"] == 8 and result["allocatable"] == 8, result
    assert "PASS" in "\n".join(tasks["Per-node summary"]["gpuops-lab"]["msg"])
    assert junit.read_text().count("<testcase") == 1
