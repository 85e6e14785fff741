# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/validate.yml itself, with inventories/lab, against the lab cluster and its plugin."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def test_validate_playbook_passes_on_the_lab_node(lab, tmp_path):
    if not lab.running("device-plugin"):
        lab.control("start", "device-plugin")
    lab.wait(
        "8 GPUs allocatable",
        lambda: lab.node_object()["status"]["allocatable"].get("nvidia.com/gpu") == "8",
        30,
    )
    junit = tmp_path / "report.xml"
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOCK_NVML", "LD_LIBRARY_PATH"))
    }
    env.update(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            "inventories/lab",
            "playbooks/validate.yml",
            "-e",
            json.dumps(
                {"gpu_validation_junit_path": str(junit), "ansible_python_interpreter": sys.executable}
            ),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
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
