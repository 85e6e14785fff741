# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cluster_addons role against the lab's real API server and scheduler."""

from __future__ import annotations

import json

QUOTA_NS = "gpuops-quota-test"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def changed_tasks(results):
    return sorted(name for name, result in results.items() if name != "_rc" and result.get("changed"))


def test_addons_exist_converge_and_go(lab):
    # A namespace from an earlier run may still be terminating: wait until it can be had.
    lab.wait(
        "namespace %s" % QUOTA_NS,
        lambda: (
            lab.kubectl("create", "namespace", QUOTA_NS, check=False).returncode == 0
            or lab.kubectl("get", "namespace", QUOTA_NS, "-o", "jsonpath={.status.phase}", check=False).stdout
            == "Active"
        ),
        120,
    )
    variables = {"cluster_addons_gpu_quotas": [{"namespace": QUOTA_NS, "gpus": 4}]}
    # The lab node as a GPU node: the label and taint gpu_node_labels would set.
    lab.kubectl("label", "node", lab.node, "nvidia.com/gpu.present=true", "--overwrite")
    taints = lab.add_taint(GPU_TAINT)
    try:
        first = lab.playbook("cluster_addons.yml", variables)
        assert first["_rc"] == 0, first
        again = lab.playbook("cluster_addons.yml", variables)
        assert again["_rc"] == 0 and changed_tasks(again) == [], changed_tasks(again)

        runtime_class = lab.get("runtimeclass", "nvidia")
        assert runtime_class["handler"] == "nvidia"
        assert runtime_class["scheduling"]["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
        priority = lab.get("priorityclass", "gpu-workload")
        assert priority["value"] == 100000 and not priority.get("globalDefault", False)
        assert priority["preemptionPolicy"] == "PreemptLowerPriority"
        quota = lab.get("resourcequota", "gpu-quota", "-n", QUOTA_NS)
        assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "4"}

        daemonset = lab.get("daemonset", "dcgm-exporter", "-n", "gpuops-system")
        pod = daemonset["spec"]["template"]["spec"]
        container = pod["containers"][0]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["DCGM_EXPORTER_KUBERNETES"] == "true"
        assert "SYS_ADMIN" in container["securityContext"]["capabilities"]["add"]
        assert {
            "name": "pod-resources",
            "mountPath": "/var/lib/kubelet/pod-resources",
            "readOnly": True,
        } in container["volumeMounts"]
        # 8 GPUs: 128 MiB + 8 x 64 MiB requested, twice that as the limit.
        assert container["resources"]["requests"]["memory"] == "640Mi"
        assert container["resources"]["limits"]["memory"] == "1280Mi"
        counters = lab.get("configmap", "dcgm-exporter-counters", "-n", "gpuops-system")["data"][
            "counters.csv"
        ]
        assert "DCGM_FI_DEV_XID_ERRORS, gauge," in counters
        service = lab.get("service", "dcgm-exporter", "-n", "gpuops-system")
        assert service["spec"]["ports"][0]["port"] == 9400
        # The scheduler places the exporter on the tainted GPU node (selector and toleration
        # match). Its image cannot be pulled here (no registry), so it never runs.
        lab.wait(
            "dcgm-exporter scheduled on the GPU node",
            lambda: (
                lab.get("daemonset", "dcgm-exporter", "-n", "gpuops-system")["status"].get(
                    "desiredNumberScheduled"
                )
                == 1
            ),
            30,
        )
        # No Prometheus operator in the lab: no ServiceMonitor task ran.
        assert first["ServiceMonitor for dcgm-exporter"].get("skipped") is True
    finally:
        gone = lab.playbook("cluster_addons.yml", dict(variables, cluster_addons_state="absent"))
        lab.kubectl("delete", "namespace", QUOTA_NS, "--wait=true", check=False)
        lab.kubectl("label", "node", lab.node, "nvidia.com/gpu.present-")
        lab.set_taints(taints)
    assert gone["_rc"] == 0, gone
    assert lab.kubectl("get", "runtimeclass", "nvidia", check=False).returncode != 0
    assert lab.kubectl("get", "priorityclass", "gpu-workload", check=False).returncode != 0


def addon_objects(lab):
    """The add-ons' cluster-wide objects as they stand (absent ones as None)."""
    found = {}
    for kind, name in (("runtimeclass", "nvidia"), ("priorityclass", "gpu-workload")):
        proc = lab.kubectl("get", kind, name, "-o", "json", check=False)
        found[kind] = json.loads(proc.stdout)["metadata"]["resourceVersion"] if proc.returncode == 0 else None
    return found


def test_bad_quota_entry_names_the_field(lab):
    before = addon_objects(lab)
    results = lab.playbook(
        "cluster_addons.yml", {"cluster_addons_gpu_quotas": [{"namespace": "ml", "gpus": "lots"}]}
    )
    assert results["_rc"] != 0
    message = json.dumps(results["Check the quota entries"])
    assert "cluster_addons_gpu_quotas[0]" in message and "gpus (a whole number >= 0)" in message
    # The bad entry is refused before anything is written: no add-on created or changed.
    assert addon_objects(lab) == before
