# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""site.yml's per-node summary (playbooks/templates/site_summary.txt.j2), rendered by the
real ansible-playbook from what gpu_doctor and gpu_validation leave on a node."""

import pytest
from resolve import REPO, resolve

TEMPLATE = REPO / "playbooks" / "templates" / "site_summary.txt.j2"
H100 = {
    "gpu_count": 8,
    "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 8,
    "nvml": {"available": True, "driver_version": "550.163.01"},
}
FRESH = {"gpu_count": 0, "gpus": [], "nvml": {"available": False, "reason": "library_not_found"}}
PLUGIN_FINDING = {
    "check": "plugin",
    "severity": "fail",
    "message": "no device plugin socket",
    "fix": "start it",
}


def summary_row(tmp_path, gpu, findings=(), skip=(), **doctor):
    extra = {
        "gpu_doctor_gpu": gpu,
        "gpu_doctor_findings": list(findings),
        "gpu_doctor_skip": list(skip),
        "gpu_doctor_allocatable": str(gpu["gpu_count"]),
        "gpu_doctor_runtime_check": {"changed": False},
    }
    extra.update({"gpu_doctor_" + name: value for name, value in doctor.items()})
    exprs = {"summary": "{{ lookup('ansible.builtin.template', '%s') }}" % TEMPLATE}
    result = resolve("gpuops-node-1,", [], exprs=exprs, extra=extra, tmp_path=tmp_path)
    header, row = result["gpuops-node-1"]["summary"].splitlines()[:2]
    # Cells hold spaces ("8 H100 80GB HBM3"): cut the row where the header's columns start.
    names = header.split()
    starts = [header.index(name) for name in names]
    return {name: row[a:b].strip() for name, a, b in zip(names, starts, [*starts[1:], None])}


@pytest.mark.parametrize(
    ("gpu", "findings", "skip", "plugin"),
    [
        (H100, [], [], "registered"),
        (
            {**H100, "device_plugin": {"source": "record", "mode": "gpuops"}},
            [],
            [],
            "registered (gpuops daemon)",
        ),
        (
            {**H100, "device_plugin": {"source": "record", "mode": "nvidia"}},
            [],
            [],
            "registered (NVIDIA DaemonSet)",
        ),
        ({**H100, "device_plugin": {"source": "none", "mode": None}}, [], [], "registered"),
        (H100, [PLUGIN_FINDING], [], "NOT REGISTERED"),
        # A fresh node in check mode: no driver yet, so no GPUs, so no plugin check.
        (FRESH, [], [], "not checked"),
        (H100, [], ["plugin"], "not checked"),
    ],
    ids=["registered", "gpuops", "nvidia", "mode-unknown", "not-registered", "no-gpus", "skipped"],
)
def test_the_plugin_column_says_registered_only_when_the_doctor_checked_it(
    tmp_path, gpu, findings, skip, plugin
):
    row = summary_row(tmp_path, gpu, findings, skip)
    assert row["PLUGIN"] == plugin, row


def test_a_node_of_nvidias_dra_driver_says_so(tmp_path):
    # The record says nvidia_dra; the doctor found it a DRA node (gpu_serving_mode).
    gpu = {**H100, "device_plugin": {"source": "record", "mode": "nvidia_dra"}}
    row = summary_row(tmp_path, gpu, mode="dra", allocatable="8 (DRA)")
    assert (row["PLUGIN"], row["ALLOCATABLE"]) == ("registered (NVIDIA DRA driver)", "8 (DRA)"), row


def test_a_dra_node_says_its_driver_and_the_gpus_its_slice_offers(tmp_path):
    # Mode dra as the doctor found it (here by the socket: no record), its allocatable as the doctor
    # counts it (roles/gpu_doctor/tasks/main.yml: GPUs an untainted device offers).
    gpu = {**H100, "device_plugin": {"source": "none", "mode": None}}
    row = summary_row(tmp_path, gpu, mode="dra", allocatable="7 (DRA, 1 tainted)")
    assert (row["PLUGIN"], row["ALLOCATABLE"]) == ("registered (gpuops DRA driver)", "7 (DRA, 1 tainted)"), (
        row
    )
