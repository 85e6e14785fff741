# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/site.yml with the single-host inventory (tests/integration/inventories/single-host:
the host's kubelet, its node phases left out) against the lab cluster: the cluster phases,
from a node without our labels and add-ons to validated, with the per-node
summary; check mode predicts the run; the second run changes nothing; then
playbooks/uninstall.yml takes it all away, once."""

from __future__ import annotations

import json

SITE = "playbooks/site.yml"
UNINSTALL = "playbooks/uninstall.yml"


DEPRECATIONS = []  # every deprecation any run in this module printed


def site(lab, extra=None, args=(), playbook=SITE):
    proc = lab.inventory_playbook(playbook, extra, json_output=True, args=args)
    DEPRECATIONS.extend(line for line in proc.stderr.splitlines() if "DEPRECATION WARNING" in line)
    try:
        report = json.loads(proc.stdout)
    except ValueError as exc:
        raise AssertionError("no JSON (rc %d): %s %s" % (proc.returncode, proc.stdout, proc.stderr)) from exc
    changed, summary = [], None
    for play in report["plays"]:
        for task in play["tasks"]:
            result = task["hosts"].get("gpuops-lab", {})
            name = task["task"]["name"]
            if result.get("changed"):
                changed.append(name)
            DEPRECATIONS.extend("%s: %s" % (name, d.get("msg", d)) for d in result.get("deprecations", []))
            if name == "Per-node summary" and "msg" in result:
                summary = result["msg"]
    return proc.returncode, changed, summary


def test_site_converges_the_lab_node_and_prints_the_summary(lab):
    if not lab.running("device-plugin"):
        lab.control("start", "device-plugin")
    rc, _changed, _summary = site(lab, playbook=UNINSTALL)
    assert rc == 0
    assert "nvidia.com/gpu.product" not in lab.node_object()["metadata"].get("labels", {})
    try:
        rc, predicted, summary = site(lab, args=["--check"])
        assert rc == 0 and predicted, predicted
        assert "not run (check mode)" in summary[1]
        # Nothing written in check mode.
        assert "nvidia.com/gpu.product" not in lab.node_object()["metadata"].get("labels", {})

        rc, changed, summary = site(lab)
        assert rc == 0, summary
        assert changed == predicted
        header, row = summary[0].split(), summary[1].split()
        assert header == [
            "NODE",
            "GPUS",
            "DRIVER",
            "RUNTIME",
            "PLUGIN",
            "ALLOCATABLE",
            "VALIDATION",
            "FINDINGS",
        ]
        assert row[:3] == ["gpuops-lab", "8", "H100"], row
        assert "registered" in row and "PASS" in row and row[-1] == "none", summary
        labels = lab.node_object()["metadata"]["labels"]
        assert (
            labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
            and labels["nvidia.com/gpu.count"] == "8"
        )
        assert lab.get("runtimeclass", "nvidia")["handler"] == "nvidia"

        rc, again, _summary = site(lab)
        assert rc == 0 and again == [], again
    finally:
        rc, removed, _summary = site(lab, playbook=UNINSTALL)
    assert rc == 0 and removed, removed
    labels = lab.node_object()["metadata"].get("labels", {})
    assert not [k for k in labels if k.startswith("nvidia.com/gpu.")], labels
    assert lab.kubectl("get", "runtimeclass", "nvidia", check=False).returncode != 0
    rc, removed_again, _summary = site(lab, playbook=UNINSTALL)
    assert rc == 0 and removed_again == [], removed_again
    # Today's ansible-core deprecates nothing these plays use (check, real, again, uninstall).
    assert DEPRECATIONS == []
