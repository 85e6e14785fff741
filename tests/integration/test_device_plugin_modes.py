# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""device_plugin's cluster modes against the lab: NVIDIA's DaemonSet, and the GPU Operator's
values and Helm calls (the chart itself cannot be downloaded here)."""

from __future__ import annotations

APPLY = "Apply NVIDIA's device plugin DaemonSet"


def test_nvidia_mode_applies_the_pinned_daemonset(lab):
    try:
        first = lab.playbook("device_plugin_cluster.yml", {"device_plugin_mode": "nvidia"})
        assert first["_rc"] == 0 and first[APPLY]["changed"] is True, first
        again = lab.playbook("device_plugin_cluster.yml", {"device_plugin_mode": "nvidia"})
        assert again["_rc"] == 0 and again[APPLY]["changed"] is False

        daemonset = lab.get("daemonset", "nvidia-device-plugin-daemonset", "-n", "kube-system")
        pod = daemonset["spec"]["template"]["spec"]
        assert pod["containers"][0]["image"] == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
        assert pod["priorityClassName"] == "system-node-critical"
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        assert pod["volumes"][0]["hostPath"]["path"] == "/var/lib/kubelet/device-plugins"
        # Scheduled on the lab node; its image cannot be pulled here (no registry), so the
        # pod waits on the pull and never serves. Our daemon is what registers in the lab.
        lab.wait(
            "the DaemonSet's pod on the lab node",
            lambda: (
                lab.get("daemonset", "nvidia-device-plugin-daemonset", "-n", "kube-system")["status"].get(
                    "desiredNumberScheduled"
                )
                == 1
            ),
            30,
        )
    finally:
        lab.kubectl(
            "delete", "daemonset", "nvidia-device-plugin-daemonset", "-n", "kube-system", "--wait=true"
        )


def test_operator_mode_maps_values_and_calls_helm(lab):
    results = lab.playbook(
        "device_plugin_cluster.yml",
        {
            "device_plugin_mode": "operator",
            "device_plugin_operator_mig_strategy": "mixed",
            "device_plugin_operator_values": {"driver": {"version": "550.127.08"}, "cdi": {"enabled": True}},
        },
    )
    values = results["Map the role's variables to chart values"]["ansible_facts"][
        "device_plugin_operator_rendered_values"
    ]
    # The host roles own the driver and the toolkit; cluster_addons owns dcgm-exporter.
    assert values["driver"] == {"enabled": False, "version": "550.127.08"}
    assert values["toolkit"] == {"enabled": False}
    assert values["devicePlugin"] == {"enabled": True}
    assert values["dcgmExporter"] == {"enabled": False}
    assert values["mig"] == {"strategy": "mixed"}
    assert values["cdi"] == {"enabled": True}
    assert values["daemonsets"]["priorityClassName"] == "system-node-critical"
    # The Helm repository call is made with NVIDIA's repository; it cannot succeed here
    # (no helm binary, no route to the chart repository), and the run says so.
    repo = results["NVIDIA's chart repository"]
    assert results["_rc"] != 0 and repo.get("failed") is True
    assert repo["invocation"]["module_args"]["repo_url"] == "https://helm.ngc.nvidia.com/nvidia"
    assert repo["invocation"]["module_args"]["name"] == "nvidia"
