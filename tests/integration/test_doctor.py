# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/doctor.yml on the lab node (the single-host inventory): healthy, then one
injected fault at a time, each found with its own message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dp_harness import MockFaults

ROOT = Path(__file__).resolve().parents[2]
CONTAINERD_TOML = Path("/var/lib/gpuops-lab/containerd.toml")
# NVIDIA's mock NVML's runtime overrides on the lab node (lab/cluster.py MOCK_OVERRIDES).
MOCK_OVERRIDES = Path("/run/gpuops-lab/mocknvml-overrides.yaml")


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


def test_plugin_stopped(healthy_lab, tmp_path):
    healthy_lab.control("stop", "device-plugin")
    try:
        proc, findings = doctor(healthy_lab, tmp_path)
    finally:
        healthy_lab.control("start", "device-plugin")
    assert proc.returncode != 0
    assert checks(findings)["plugin"].startswith("no device plugin socket in /var/lib/kubelet/device-plugins")
    assert "gpuops-lab [plugin] no device plugin socket" in proc.stdout


def test_nvidia_runtime_removed_from_the_config(healthy_lab, tmp_path):
    original = CONTAINERD_TOML.read_text()
    # As a tool that rewrites the file without our entry would: every runtimes.nvidia table
    # goes, with its lines, wherever it stands and however it is indented.
    kept, in_nvidia = [], False
    for line in original.splitlines():
        if line.lstrip().startswith("["):
            in_nvidia = "runtimes.nvidia" in line
        if not in_nvidia:
            kept.append(line)
    kept = "\n".join(kept) + "\n"
    assert "runtimes.nvidia" not in kept and "restrict_oom_score_adj" in kept
    CONTAINERD_TOML.write_text(kept)
    try:
        _proc, findings = doctor(healthy_lab, tmp_path)
    finally:
        CONTAINERD_TOML.write_text(original)
    assert (
        checks(findings)["runtime"]
        == "the nvidia runtime is missing from (or differs in) %s" % CONTAINERD_TOML
    )


def test_gpu_lost(healthy_lab, tmp_path):
    faults = MockFaults(MOCK_OVERRIDES)
    faults.inject("lost-3")
    try:
        _proc, findings = doctor(healthy_lab, tmp_path)
    finally:
        faults.clear()
    assert checks(findings)["nvml"].startswith("GPU 3 is lost")


def test_driver_library_missing(healthy_lab, tmp_path):
    empty = tmp_path / "no-driver"
    empty.mkdir()
    no_library = {"gpuops_node_environment": {"LD_LIBRARY_PATH": str(empty)}}
    _proc, findings = doctor(healthy_lab, tmp_path, no_library)
    assert checks(findings)["nvml"].startswith("the driver library libnvidia-ml.so.1 is missing")
