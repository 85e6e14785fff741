# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU doctor's rules for a node whose GPUs a DRA driver serves (device_plugin_mode dra, ours,
or nvidia_dra, NVIDIA's: settings' dra_mode words the fixes):
the driver's registration with the kubelet (plugin), its ResourceSlice against the GPUs NVML
lists and a device plugin's nvidia.com/gpu left in the Node's status (allocatable), the
DeviceClasses, the cluster's DRA API and gates, and whether the node's container runtime
injects CDI devices (dra).

Private to the gpuops.k8s collection. Pure, as _doctor_gpus: observations and settings in,
findings out. slices is k8s_info's of the driver's ResourceSlices, device_classes k8s_info's
of the DeviceClasses (its api_found says whether resource.k8s.io/v1 is served).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.k8s.plugins.module_utils import _dra_view as view
from ansible_collections.gpuops.k8s.plugins.module_utils._doctor_base import (
    FAIL,
    WARN,
    finding,
    gpu_count,
    listing,
    node_status,
    resources,
    to_int,
)
from ansible_collections.gpuops.k8s.plugins.module_utils._kubelet import parse_version

# The first release whose kubelet and API server serve DRA's v1 API on by default (GA).
DRA_GA = (1, 34)

_DAEMON_LOG = "systemctl status gpuops-device-plugin and journalctl -u gpuops-device-plugin"
# NVIDIA's DRA driver (device_plugin_mode nvidia_dra): its kubelet plugin pod, by its chart's label.
_NVIDIA_POD = "-l dra-driver-nvidia-gpu-component=kubelet-plugin --field-selector spec.nodeName=%s"


def _mode(settings):
    """The device_plugin role's mode that serves the node through DRA: dra, or nvidia_dra."""
    return settings["dra_mode"]


def _nvidia_pod(settings):
    """The namespace and the selector of NVIDIA's kubelet plugin pod on the node, for kubectl."""
    return settings["dra_namespace"], _NVIDIA_POD % settings.get("node_name", "<node>")


def _logs(settings):
    """Where the serving driver says why it does not serve."""
    if _mode(settings) == view.NVIDIA_DRA:
        return "kubectl -n %s logs %s (NVIDIA's kubelet plugin)" % _nvidia_pod(settings)
    return _DAEMON_LOG


def _restart(settings):
    """How the serving driver is started again on the node."""
    if _mode(settings) == view.NVIDIA_DRA:
        return (
            "delete NVIDIA's kubelet plugin pod on the node (kubectl -n %s delete pod %s; its DaemonSet "
            "starts it again)" % _nvidia_pod(settings)
        )
    return "restart gpuops-device-plugin"


def is_dra(obs, settings):
    """Whether the node is served by our DRA driver: the device_plugin role's record (gpu_info's
    device_plugin.mode), else the driver's registration socket (node_state_info's paths)."""
    socket = settings.get("dra_registration_socket")
    return view.serving_mode(obs.get("gpu"), obs.get("node_state"), socket) == view.DRA


def device_plugin_only(rule):
    """The device plugin's rule, silent on a node DRA serves (the rules below judge it there)."""

    def judge(obs, settings):
        return [] if is_dra(obs, settings) else rule(obs, settings)

    return judge


def plugin(obs, settings):
    """The DRA driver's registration socket, through which the kubelet finds it."""
    if not is_dra(obs, settings) or gpu_count(obs["gpu"]) == 0:
        return []
    path = settings["dra_registration_socket"]
    entry = (obs["node_state"].get("paths") or {}).get(path)
    if entry is None or entry.get("type") == "socket":  # not looked at, or there
        return []
    what = "no" if not entry.get("exists") else "a %s, not a" % entry.get("type")
    return [
        finding(
            "plugin",
            FAIL,
            "the DRA driver %s serves %s registration socket %s: the kubelet cannot prepare the node's "
            "ResourceClaims, so no pod gets its GPUs" % (settings["dra_driver"], what, path),
            "%s say why the driver does not serve (its credentials, NVIDIA's CDI spec, the driver's "
            "nvidia-smi and NVML); %s, or run role device_plugin (device_plugin_mode %s), which fails "
            "with its last warnings" % (_logs(settings), _restart(settings), _mode(settings)),
        )
    ]


def _gone_fix(settings):
    return (
        "NVML leaves out a GPU whose device node is gone (see device_nodes) or that fell off the bus: "
        "recreate the node (nvidia-modprobe -c <minor>), or drain the node and reset or replace the GPU; "
        "%s if its slice keeps offering it" % _restart(settings)
    )


def _tainted_fix(settings):
    if _mode(settings) == view.NVIDIA_DRA:
        lifted = "NVIDIA's driver never lifts its taints: once the GPU is sound again, %s" % _restart(
            settings
        )
    else:
        lifted = "the daemon lifts the taint once the GPU answers again for its quiet period"
    return (
        "the driver taints a device it finds unhealthy (the key says why; see nvml and device_nodes); "
        "%s; drain the node and reset (nvidia-smi -r) or replace a GPU that stays tainted; a GPU not "
        "published at all: %s (%s)" % (lifted, _restart(settings), _logs(settings))
    )


def allocatable(obs, settings):
    """The driver's published, untainted devices against the GPUs NVML lists."""
    if not is_dra(obs, settings) or gpu_count(obs["gpu"]) == 0:
        return []
    driver, node = settings["dra_driver"], settings["node_name"]
    offer = view.Offer(obs["gpu"], obs["slices"], driver, node)
    if offer.devices is None:
        return [
            finding(
                "allocatable",
                FAIL,
                "the DRA driver %s publishes no ResourceSlice for node %s: no claim can be allocated its GPUs"
                % (driver, node),
                "the driver publishes its slice at start and again whenever the kubelet deletes it: %s "
                "(credentials the API server refuses; the driver finding no GPU through NVML); see plugin "
                "and services" % _logs(settings),
            )
        ]
    found = []
    if offer.unlisted:
        names = ("%s (%s)" % (d["name"], d["uuid"]) for d in offer.unlisted)
        found.append(
            finding(
                "allocatable",
                FAIL,
                "the ResourceSlice of %s offers GPUs that NVML no longer lists: %s"
                % (driver, listing(names, 4)),
                _gone_fix(settings),
            )
        )
    if offer.not_offered:
        parts = []
        if offer.tainted:
            parts.append("tainted: " + listing((view.taint_text(d) for d in offer.tainted), 4))
        unpublished = [
            card
            for card in offer.not_offered
            if not any(d["uuid"] == card["uuid"] or d["parent"] == card["uuid"] for d in offer.tainted)
        ]
        if unpublished:
            gone = ("%s (GPU %s)" % (card["uuid"], card.get("index")) for card in unpublished)
            parts.append("not published: " + listing(gone, 4))
        found.append(
            finding(
                "allocatable",
                FAIL,
                "the ResourceSlice of %s for node %s offers %d of the %d GPUs NVML lists untainted: %s"
                % (driver, node, offer.offered, len(offer.gpus), "; ".join(parts)),
                _tainted_fix(settings),
            )
        )
    return found


def stale_resource(obs, settings):
    """A device plugin's resource still in the Node's status of a node DRA serves."""
    if not is_dra(obs, settings):
        return []
    status, resource = node_status(obs["node"]), settings["resource"]
    capacity = to_int((status.get("capacity") or {}).get(resource, 0))
    if capacity == 0:
        return []
    held = to_int((status.get("allocatable") or {}).get(resource, 0))
    return [
        finding(
            "allocatable",
            FAIL,
            "Node %s still lists %s from a device plugin (capacity %d, allocatable %d), though the DRA "
            "driver %s serves its GPUs: the scheduler places %s pods by that count and the kubelet may start "
            "them without a GPU"
            % (settings["node_name"], resource, capacity, held, settings["dra_driver"], resource),
            "one mechanism per node: remove any device plugin on the node (NVIDIA's or the GPU Operator's "
            "DaemonSet), then restart gpuops-device-plugin, which removes %s from its Node's status when no "
            "device plugin is registered" % resource,
        )
    ]


def _class_named(classes, name):
    return next((c for c in classes if (c.get("metadata") or {}).get("name") == name), None)


def device_classes(obs, settings):
    """resource.k8s.io/v1 served, the driver's DeviceClasses there, the extended resource's kept."""
    if not is_dra(obs, settings):
        return []
    result = obs["device_classes"]
    if result.get("api_found") is False:
        return [
            finding(
                "dra",
                FAIL,
                "the API server does not serve resource.k8s.io/v1 (DeviceClass): DRA is off in the cluster, "
                "so no ResourceClaim is allocated and the driver cannot publish its slice",
                "Kubernetes 1.34 or later serves it by default; where it is turned off, enable it on the API "
                "server (--runtime-config=resource.k8s.io/v1=true and the DynamicResourceAllocation feature "
                "gate on kube-apiserver, kube-scheduler, kube-controller-manager and the kubelets)",
            )
        ]
    classes = resources(result)
    found = []
    name = settings["dra_device_class"]
    if _class_named(classes, name) is None:
        found.append(
            finding(
                "dra",
                FAIL,
                "DeviceClass %s does not exist: claims for the driver's GPUs name it, and none can be "
                "allocated" % name,
                "run role device_plugin (device_plugin_mode %s), which applies the driver's DeviceClasses"
                % _mode(settings),
            )
        )
    extended = settings["dra_extended_class"]
    if extended:
        stored = _class_named(classes, extended)
        if stored is None:
            found.append(
                finding(
                    "dra",
                    WARN,
                    "DeviceClass %s does not exist: pods asking for nvidia.com/gpu without a claim get no "
                    "GPU on this node" % extended,
                    "run role device_plugin (device_plugin_mode %s)"
                    % (
                        "nvidia_dra"
                        if _mode(settings) == view.NVIDIA_DRA
                        else "dra, device_plugin_dra_extended_resource true"
                    ),
                )
            )
        elif not (stored.get("spec") or {}).get("extendedResourceName"):
            found.append(
                finding(
                    "dra",
                    WARN,
                    "DeviceClass %s has no extendedResourceName: the API server dropped it, its "
                    "DRAExtendedResource feature gate is off, so pods asking for nvidia.com/gpu without a "
                    "claim get no GPU on this node" % extended,
                    "turn the DRAExtendedResource feature gate on for kube-apiserver, kube-scheduler and the "
                    "kubelets (on by default from Kubernetes 1.36), then run role device_plugin again to "
                    "write the class anew",
                )
            )
    return found


def kubelet_gates(obs, settings):
    """A kubelet that cannot serve DRA claims: older than DRA's GA, or its gate turned off."""
    if not is_dra(obs, settings):
        return []
    kubelet = obs["kubelet"]
    version = parse_version(kubelet.get("version"))
    gates = (kubelet.get("config") or {}).get("featureGates") or {}
    if gates.get("DynamicResourceAllocation") is False:
        why = "its configuration (%s) sets the feature gate DynamicResourceAllocation: false" % (
            kubelet.get("config_path") or "the kubelet configuration"
        )
        fix = "remove that setting (or set it true) and restart the kubelet"
    elif version is not None and version[:2] < DRA_GA:
        why = "it is %s, older than Kubernetes %d.%d, where DRA's v1 API became GA" % (
            kubelet.get("version"),
            DRA_GA[0],
            DRA_GA[1],
        )
        fix = (
            "upgrade the node to Kubernetes %d.%d or later, or use a device plugin "
            "(device_plugin_mode gpuops)" % DRA_GA
        )
    else:
        return []
    return [
        finding(
            "dra",
            FAIL,
            "the kubelet cannot prepare the DRA driver %s's claims: %s" % (settings["dra_driver"], why),
            fix,
        )
    ]


def runtime_cdi(obs, settings):
    """A container runtime that does not inject CDI devices: the driver prepares each claim as
    CDI devices, so without them every claimed GPU reaches its pod without its device. The
    verdict is node_state_info's runtime_cdi (_runtime_cdi.py), absent where the caller gave
    no container_runtime_version."""
    if not is_dra(obs, settings):
        return []
    verdict = obs["node_state"].get("runtime_cdi") or {}
    if verdict.get("msg") is None:
        return []
    return [
        finding(
            "dra",
            FAIL,
            "Node %s: the DRA driver %s prepares each claim as CDI devices, which its container runtime "
            "must inject, but %s. Every claimed GPU reaches its pod without its device"
            % (settings["node_name"], settings["dra_driver"], verdict["msg"]),
            "containerd 1.7 (or 2.x with CDI turned off): set container_runtime_enable_cdi: true and run "
            "role container_runtime (it sets enable_cdi and restarts containerd), then run role "
            "device_plugin (device_plugin_mode %s) again; containerd 1.6, CRI-O before 1.23 or another "
            "runtime: upgrade it to one the message names as valid. Then delete the pods that started on a "
            "claim meanwhile, so that they start again with their GPUs" % _mode(settings),
        )
    ]
