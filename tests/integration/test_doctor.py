# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/doctor.yml on the lab node (the single-host inventory): healthy, and a driver
library that cannot be found. The faults on a GPU node (plugin stopped, runtime binary
removed, runtime dropped from containerd's config, GPU lost) are test_lab_nodes.py's, on
real Kubernetes nodes, each found on its node only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def doctor(lab, tmp_path, extra=None):
    report = tmp_path / "findings.json"
    proc = lab.inventory_playbook("playbooks/doctor.yml", dict(extra or {}, gpu_doctor_json_path=str(report)))
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc, json.loads(report.read_text())["gpuops-lab"]


def checks(findings, severity="fail"):
    return {f["check"]: f["message"] for f in findings if f["severity"] == severity}


@pytest.fixture(scope="module")
def healthy_lab(lab):
    if not lab.running("device-plugin"):
        lab.control("start", "device-plugin")
    baseline = ROOT / "tests" / "integration" / "playbooks" / "lab_baseline.yml"
    proc = lab.inventory_playbook(baseline)
    assert proc.returncode == 0, proc.stdout[-3000:]
    yield lab
    lab.inventory_playbook(baseline, {"baseline_state": "absent"})


def test_healthy_node_has_no_findings(healthy_lab, tmp_path):
    proc, findings = doctor(healthy_lab, tmp_path)
    assert proc.returncode == 0 and findings == [], findings


def test_driver_library_missing(healthy_lab, tmp_path):
    empty = tmp_path / "no-driver"
    empty.mkdir()
    no_library = {"gpuops_node_environment": {"LD_LIBRARY_PATH": str(empty)}}
    _proc, findings = doctor(healthy_lab, tmp_path, no_library)
    assert checks(findings)["nvml"].startswith("the driver library libnvidia-ml.so.1 is missing")
