# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU doctor's diagnosis: from what its read-only checks saw to findings with fixes.

Private to the gpuops.k8s collection. Pure: no I/O, no Ansible objects. The gpu_doctor
role gathers the observations (its tasks' registered results, as Ansible registers them)
and the gpuops.k8s.doctor_findings filter calls diagnose() on them.

A finding is {check, severity, message, fix}. Users read the messages and fixes, and
scripts match on them (the role writes them as JSON): change their wording deliberately.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import json

from ansible_collections.gpuops.k8s.plugins.module_utils._kubelet import (
    FAIL_CGROUP_V1_DEFAULT_SINCE,
    parse_version,
    refuses_cgroup_v1,
)

FAIL = "fail"
WARN = "warn"

# Every check, in the order its findings are reported (gpu_doctor_skip's choices).
CHECKS = (
    "driver_module",
    "device_nodes",
    "nvml",
    "toolkit",
    "runtime",
    "drift_guard",
    "runtime_class",
    "kubelet",
    "plugin",
    "allocatable",
    "labels",
    "dcgm_exporter",
)

# Observations: the registered result each check reads, by name.
OBSERVATIONS = (
    "gpu",  # gpuops.k8s.gpu_info
    "driver_module",  # stat of /proc/driver/nvidia/version
    "device_nodes",  # find of /dev/nvidia[0-9]*
    "toolkit",  # stat of the NVIDIA container runtime binary
    "runtime_check",  # gpuops.k8s.nvidia_runtime in check mode (skipped: not checked)
    "drift_guard",  # systemd_service (no state) looped over the drift guard's units
    "runtime_class_info",  # k8s_info of the RuntimeClass
    "kubelet",  # gpuops.k8s.kubelet_info
    "plugin_sockets",  # find of *.sock in the device plugin directory
    "checkpoint",  # slurp of the kubelet's device checkpoint (no content: unreadable)
    "node",  # k8s_info of the Node
    "labels",  # gpuops.k8s.gpu_node in check mode (skipped: not checked)
    "dcgm_pods",  # k8s_info of the dcgm-exporter pods on the node
    "dcgm_ds",  # k8s_info of the dcgm-exporter DaemonSet
)


class DoctorInputError(ValueError):
    """A check was given its observations but not a setting it needs, or an unknown name."""


def finding(check, severity, message, fix):
    return {"check": check, "severity": severity, "message": message, "fix": fix}


def _int(value):
    """As Jinja's int filter: an int, else int(float(value)), else 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def _resources(result):
    """k8s_info's resources (a failed or skipped read has none)."""
    return (result or {}).get("resources") or []


def gpu_count(gpu):
    return _int((gpu or {}).get("gpu_count"))


def registered_devices(checkpoint, resource):
    """Device IDs the kubelet's checkpoint (a slurp result) has registered for resource.

    An unreadable checkpoint (no content), or one that is not the kubelet's JSON, has none.
    """
    content = (checkpoint or {}).get("content")
    if not content:
        return []
    try:
        data = json.loads(base64.b64decode(content).decode("utf-8"))
    except (binascii.Error, ValueError):
        return []
    if not isinstance(data, dict):
        return []
    devices = ((data.get("Data") or {}).get("RegisteredDevices") or {}).get(resource)
    return list(devices or [])


def _driver_module(obs, _settings):
    if not obs["driver_module"].get("stat", {}).get("exists"):
        return [
            finding(
                "driver_module",
                FAIL,
                "the NVIDIA kernel module is not loaded (no /proc/driver/nvidia/version)",
                "install the driver (role nvidia_driver) and reboot, or load it with modprobe nvidia; "
                "check dmesg for NVRM errors and Secure Boot",
            )
        ]
    return []


def _device_nodes(obs, _settings):
    if _int(obs["device_nodes"].get("matched")) == 0:
        return [
            finding(
                "device_nodes",
                FAIL,
                "no /dev/nvidia[0-9]* device nodes",
                "load the driver; nvidia-persistenced or nvidia-modprobe creates the nodes "
                "(role nvidia_driver enables persistence)",
            )
        ]
    return []


# Why gpu_info could not use NVML (its nvml.reason): the finding's message and fix.
_NVML_UNUSABLE = {
    "bindings_not_installed": (
        "NVML cannot be asked: %s",
        "install nvidia-ml-py for the node's Python (nvidia_driver_python_bindings)",
    ),
    "library_not_found": (
        "the driver library libnvidia-ml.so.1 is missing: %s",
        "install the driver user-space libraries (role nvidia_driver; Debian package libnvidia-ml1)",
    ),
    None: (
        "NVML does not start: %s",
        "the library and the kernel module must be the same driver version; reboot after a driver upgrade",
    ),
}


def _nvml(obs, _settings):
    gpu = obs["gpu"]
    nvml = gpu.get("nvml") or {}
    lost_gpus = gpu.get("lost_gpus") or []
    found = []
    if not nvml.get("available"):
        message, fix = _NVML_UNUSABLE.get(nvml.get("reason"), _NVML_UNUSABLE[None])
        found.append(finding("nvml", FAIL, message % nvml.get("error"), fix))
    elif gpu_count(gpu) == 0 and not lost_gpus:
        found.append(
            finding(
                "nvml",
                FAIL,
                "NVML works but sees no GPU",
                "check that the GPUs are on the PCI bus (lspci -d 10de:) and not passed through to a VM",
            )
        )
    for lost in lost_gpus:
        found.append(
            finding(
                "nvml",
                FAIL,
                "GPU %s is lost (%s)" % (lost.get("index"), lost.get("error")),
                "drain the node, then reset the GPU (nvidia-smi -r) or reboot; "
                "replace it if it falls off the bus again",
            )
        )
    return found


def _toolkit(obs, settings):
    if not obs["toolkit"].get("stat", {}).get("exists"):
        return [
            finding(
                "toolkit",
                FAIL,
                "%s is missing (NVIDIA Container Toolkit)" % settings["runtime_path"],
                "install it (role nvidia_container_toolkit)",
            )
        ]
    return []


def _runtime(obs, settings):
    check = obs["runtime_check"]
    if check.get("skipped"):
        return []
    if check.get("failed"):
        return [
            finding(
                "runtime",
                FAIL,
                "the %s configuration cannot be read: %s" % (settings["runtime"], check.get("msg", "")),
                "fix the file named in the message, then run role container_runtime",
            )
        ]
    changed_files = check.get("changed_files") or []
    if changed_files:
        return [
            finding(
                "runtime",
                FAIL,
                "the %s runtime is missing from (or differs in) %s"
                % (settings["runtime_name"], ", ".join(changed_files)),
                "run role container_runtime (it restores the entry and restarts %s only on a real change); "
                "if another tool rewrote the file, that tool dropped it" % settings["runtime"],
            )
        ]
    return []


def _drift_guard(obs, _settings):
    # Only units the container_runtime role installed: a guard turned off
    # (container_runtime_drift_guard: false) or never installed is not found, and a node
    # without systemd gives no status; neither can be a stopped guard.
    stopped = []
    resources = False
    for unit in obs["drift_guard"].get("results") or []:
        status = unit.get("status") or {}
        if status.get("LoadState") in (None, "not-found") or status.get("ActiveState") == "active":
            continue
        state, result = status.get("ActiveState"), status.get("Result")
        stopped.append("%s %s (result %s)" % (unit.get("name"), state, result))
        resources = resources or result == "resources"
    if not stopped:
        return []
    fix = "start them (systemctl start, or run role container_runtime); journalctl -u says why they stopped"
    if resources:
        fix += "; result resources: systemd could not watch the files, raise fs.inotify.max_user_instances"
    return [
        finding(
            "drift_guard",
            WARN,
            "the runtime drift guard is not running, so another tool's rewrite of the runtime's "
            "configuration stays: " + ", ".join(stopped),
            fix,
        )
    ]


def _runtime_class(obs, settings):
    if not settings["runtime_is_default"] and not _resources(obs["runtime_class_info"]):
        return [
            finding(
                "runtime_class",
                WARN,
                "nvidia is not the default runtime and RuntimeClass %s does not exist: "
                "pods get no GPU libraries" % settings["runtime_class"],
                "run role cluster_addons (RuntimeClass), or set the runtime as default",
            )
        ]
    return []


def _kubelet(obs, settings):
    """A kubelet that exits at start on this cgroup v1 host (KEP-5573), or will once it is
    at the release the inventory names (settings kubelet_version)."""
    kubelet = obs["kubelet"]
    if kubelet.get("version") and kubelet.get("config_error"):
        # Not "failCgroupV1 unset": what the file says is unknown, and a kubelet whose
        # configuration does not parse exits at start on any host.
        return [
            finding(
                "kubelet",
                FAIL,
                "the kubelet (%s) cannot start: its configuration cannot be read (%s)"
                % (kubelet["version"], kubelet["config_error"]),
                "repair or restore the file (the kubelet logs the same parse error at start), "
                "then restart the kubelet",
            )
        ]
    if kubelet.get("cgroup_version") != 1:
        return []
    fail_cgroup_v1 = (kubelet.get("config") or {}).get("failCgroupV1")
    installed = parse_version(kubelet.get("version"))
    target = parse_version(settings["kubelet_version"])
    if refuses_cgroup_v1(installed, fail_cgroup_v1):
        severity, who = FAIL, "the kubelet (%s)" % kubelet.get("version")
    elif target and refuses_cgroup_v1(max(target, installed or target), fail_cgroup_v1):
        severity, who = WARN, "the kubelet at %s (gpuops_kubernetes_version)" % settings["kubelet_version"]
    else:
        return []
    config = kubelet.get("config_path") or "the kubelet configuration"
    says = "says failCgroupV1: true" if fail_cgroup_v1 is True else "does not set failCgroupV1"
    return [
        finding(
            "kubelet",
            severity,
            "this node is on cgroup v1 and %s refuses to start there: %s %s, which is true by default "
            "from Kubernetes %s (KEP-5573), so the kubelet exits at start and the Node goes NotReady"
            % (who, config, says, "%d.%d" % FAIL_CGROUP_V1_DEFAULT_SINCE),
            "move the node to cgroup v2 (boot with systemd.unified_cgroup_hierarchy=1; RHEL 8 and older "
            "images default to v1), or set failCgroupV1: false in %s and restart the kubelet "
            "(cgroup v1 is in maintenance mode upstream)" % config,
        )
    ]


def _plugin(obs, settings):
    if gpu_count(obs["gpu"]) == 0:
        return []
    if _int(obs["plugin_sockets"].get("matched")) == 0:
        return [
            finding(
                "plugin",
                FAIL,
                "no device plugin socket in %s: the device plugin is not running" % settings["plugin_dir"],
                "start it (role device_plugin; systemctl status gpuops-device-plugin, "
                "or the nvidia-device-plugin pod)",
            )
        ]
    if not registered_devices(obs["checkpoint"], settings["resource"]):
        return [
            finding(
                "plugin",
                FAIL,
                "a plugin socket exists but the kubelet has no %s devices registered" % settings["resource"],
                "check the plugin's log for its Register call; "
                "restart the kubelet if its kubelet.sock is stale",
            )
        ]
    return []


def _node_missing(obs, settings):
    if not _resources(obs["node"]):
        return [
            finding(
                "allocatable",
                FAIL,
                "Node %s does not exist in the cluster" % settings["node_name"],
                "join the node (kubeadm join), or set gpu_doctor_node_name to its Node name",
            )
        ]
    return []


def _allocatable(obs, settings):
    nodes = _resources(obs["node"])
    gpus = gpu_count(obs["gpu"])
    if not nodes or gpus == 0:
        return []
    allocatable = _int(((nodes[0].get("status") or {}).get("allocatable") or {}).get(settings["resource"], 0))
    expected = gpus * _int(settings["replicas"])
    if allocatable != expected:
        return [
            finding(
                "allocatable",
                FAIL,
                "allocatable %s is %d, expected %d (%d GPUs found x %s)"
                % (settings["resource"], allocatable, expected, gpus, settings["replicas"]),
                "fewer means GPUs marked Unhealthy (see the plugin log for XIDs) or a plugin not registered; "
                "more means stale sharing settings",
            )
        ]
    return []


def _first_keys(keys):
    return ", ".join(keys[:3]) + (", ..." if len(keys) > 3 else "")


def _labels(obs, _settings):
    labels = obs["labels"]
    nodes = labels.get("nodes") or []
    if labels.get("skipped") or not any(node.get("changed") for node in nodes):
        return []
    node = nodes[0]
    verbs = (
        ("to add", list(node.get("labels_added") or []) + list(node.get("taints_added") or [])),
        ("to update", list(node.get("labels_updated") or [])),
        ("to remove", list(node.get("labels_removed") or []) + list(node.get("taints_removed") or [])),
    )
    parts = ["%s %d: %s" % (verb, len(keys), _first_keys(keys)) for verb, keys in verbs if keys]
    return [
        finding(
            "labels",
            WARN,
            "GPU labels or taints are not current (%s)" % "; ".join(parts),
            "run role gpu_node_labels",
        )
    ]


def _is_ready(pod):
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _dcgm_exporter(obs, settings):
    if not _resources(obs["dcgm_ds"]):
        return []
    pods = _resources(obs["dcgm_pods"])
    if not pods:
        return [
            finding(
                "dcgm_exporter",
                WARN,
                "dcgm-exporter has no pod on the node",
                "the node lacks the nvidia.com/gpu.present label or the DaemonSet does not tolerate "
                "its taint (roles gpu_node_labels, cluster_addons)",
            )
        ]
    if not any(_is_ready(pod) for pod in pods):
        name = (pods[0].get("metadata") or {}).get("name")
        return [
            finding(
                "dcgm_exporter",
                WARN,
                "dcgm-exporter pod %s is not Ready" % name,
                "kubectl -n %s describe pod %s (image pull, SYS_ADMIN, the pod-resources mount)"
                % (settings["dcgm_exporter_namespace"], name),
            )
        ]
    return []


# (check, observations it reads, settings it reads, function, reported even when skipped)
_RULES = (
    ("driver_module", ("driver_module",), (), _driver_module, False),
    ("device_nodes", ("device_nodes",), (), _device_nodes, False),
    ("nvml", ("gpu",), (), _nvml, False),
    ("toolkit", ("toolkit",), ("runtime_path",), _toolkit, False),
    ("runtime", ("runtime_check",), ("runtime", "runtime_name"), _runtime, False),
    ("drift_guard", ("drift_guard",), (), _drift_guard, False),
    (
        "runtime_class",
        ("runtime_class_info",),
        ("runtime_is_default", "runtime_class"),
        _runtime_class,
        False,
    ),
    ("kubelet", ("kubelet",), ("kubelet_version",), _kubelet, False),
    ("plugin", ("gpu", "plugin_sockets", "checkpoint"), ("plugin_dir", "resource"), _plugin, False),
    # A Node missing from the cluster is reported even where allocatable is skipped.
    ("allocatable", ("node",), ("node_name",), _node_missing, True),
    ("allocatable", ("node", "gpu"), ("resource", "replicas"), _allocatable, False),
    ("labels", ("labels",), (), _labels, False),
    ("dcgm_exporter", ("dcgm_ds", "dcgm_pods"), ("dcgm_exporter_namespace",), _dcgm_exporter, False),
)

SETTINGS = tuple(sorted({name for rule in _RULES for name in rule[2]}))


def diagnose(observed, settings, skip=()):
    """The findings, in CHECKS order, of each check not in skip whose observations are given.

    observed: {observation: registered result}, names from OBSERVATIONS; a check runs only
    when all the observations it reads are there. settings: {setting: value}, names from
    SETTINGS; a check that runs needs its own. skip: check names (CHECKS) to leave out.
    """
    unknown = sorted(set(observed) - set(OBSERVATIONS))
    unknown += sorted(set(settings) - set(SETTINGS))
    unknown += sorted(set(skip) - set(CHECKS))
    if unknown:
        raise DoctorInputError("unknown observation, setting or check: %s" % ", ".join(unknown))
    found = []
    for check, reads, needs, rule, always in _RULES:
        if (check in skip and not always) or any(name not in observed for name in reads):
            continue
        missing = [name for name in needs if name not in settings]
        if missing:
            raise DoctorInputError("the %s check needs the setting(s) %s" % (check, ", ".join(missing)))
        obs = {name: observed[name] or {} for name in reads}
        found.extend(rule(obs, settings))
    return found
