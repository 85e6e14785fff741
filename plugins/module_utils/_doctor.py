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

from ansible_collections.gpuops.k8s.plugins.module_utils import _doctor_dra as dra
from ansible_collections.gpuops.k8s.plugins.module_utils import _doctor_gpus as gpus
from ansible_collections.gpuops.k8s.plugins.module_utils import _doctor_running as running
from ansible_collections.gpuops.k8s.plugins.module_utils._doctor_base import (
    FAIL,
    WARN,
    finding,
    gpu_count,
    listing,
    resources,
)
from ansible_collections.gpuops.k8s.plugins.module_utils._kubelet import (
    FAIL_CGROUP_V1_DEFAULT_SINCE,
    parse_version,
    refuses_cgroup_v1,
)
from ansible_collections.gpuops.k8s.plugins.module_utils._node_state import unit_name

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
    "services",
    "node_ready",
    "plugin",
    "allocatable",
    "dra",
    "labels",
    "dcgm_exporter",
)

# Observations: the registered result each check reads, by name.
OBSERVATIONS = (
    "gpu",  # gpuops.k8s.gpu_info
    # gpuops.k8s.node_state_info: the kernel module, /dev/nvidia*, the systemd units (the
    # runtime's, the kubelet's, the device plugin's, the drift guard's), the device plugin
    # directory's sockets and the kubelet's checkpoint, the NVIDIA container runtime binary,
    # whether the runtime injects CDI devices (runtime_cdi: null where not asked)
    "node_state",
    "runtime_check",  # gpuops.k8s.nvidia_runtime in check mode (skipped: not checked)
    "runtime_class_info",  # k8s_info of the RuntimeClass
    "kubelet",  # gpuops.k8s.kubelet_info
    "node",  # k8s_info of the Node
    "labels",  # gpuops.k8s.gpu_node in check mode (skipped: not checked)
    "dcgm_pods",  # k8s_info of the dcgm-exporter pods on the node
    "dcgm_ds",  # k8s_info of the dcgm-exporter DaemonSet
    # Mode dra (the node's record says so, or the driver's registration socket is in
    # node_state's paths): the plugin, allocatable and dra checks read these instead.
    "slices",  # k8s_info of the DRA driver's ResourceSlices
    "device_classes",  # k8s_info of the DeviceClasses (api_found: resource.k8s.io/v1 served)
)


class DoctorInputError(ValueError):
    """A check was given its observations but not a setting it needs, or an unknown name."""


def _driver_module(obs, _settings):
    driver = obs["node_state"].get("driver")
    if driver is not None and not driver.get("loaded"):
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
    path = settings["runtime_path"]
    binary = (obs["node_state"].get("paths") or {}).get(path)
    if binary is None:  # not looked at
        return []
    if not binary.get("exists"):
        return [
            finding(
                "toolkit",
                FAIL,
                "%s is missing (NVIDIA Container Toolkit)" % path,
                "install it (role nvidia_container_toolkit)",
            )
        ]
    if not binary.get("executable"):
        return [
            finding(
                "toolkit",
                FAIL,
                "%s is not an executable file (it is a %s, or lacks its x bits): the runtime cannot run it"
                % (path, binary.get("type")),
                "reinstall it (role nvidia_container_toolkit)",
            )
        ]
    return _cdi_spec(obs, settings)


def _cdi_spec(obs, settings):
    """A spec the CDI cache cannot load (in any mode); in mode cdi, NVIDIA's spec missing: the
    runtime then injects GPUs only from that spec, which lives on tmpfs."""
    spec = settings.get("cdi_spec_path")
    found = _unloadable_specs(obs, spec)
    if settings.get("toolkit_runtime_mode") != "cdi" or not spec:
        return found
    stat = (obs["node_state"].get("paths") or {}).get(spec)
    if stat is None or stat.get("exists"):  # not looked at, or there
        return found
    return [
        finding(
            "toolkit",
            FAIL,
            "%s is missing: the NVIDIA runtime is in mode cdi and injects GPUs only from that spec, so "
            "every GPU container fails with unresolvable CDI devices" % spec,
            "generate it as root: nvidia-ctk cdi generate --output=%s (or systemctl start "
            "nvidia-cdi-refresh.service, or role nvidia_container_toolkit); /var/run is tmpfs, so a "
            "reboot removes it until the refresh unit runs" % spec,
        )
    ]


def _unloadable_specs(obs, toolkit_spec):
    """Each spec nvidia-ctk cdi list says the CDI cache cannot load (node_state's cdi)."""
    cdi = obs["node_state"].get("cdi") or {}
    return [
        finding(
            "toolkit",
            FAIL,
            "the CDI spec %s cannot be loaded (%s): the container runtime reads it with the same CDI "
            "code, so every container that asks for its devices fails with unresolvable CDI devices"
            % (path, why),
            "regenerate it: role nvidia_container_toolkit, or as root nvidia-ctk cdi generate --output=%s"
            % path
            if path == toolkit_spec
            else "repair or remove it (nvidia-ctk cdi list names what is wrong)",
        )
        for path, why in sorted((cdi.get("spec_errors") or {}).items())
    ]


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


def _drift_guard(obs, settings):
    # Only units the container_runtime role installed: a guard turned off
    # (container_runtime_drift_guard: false) or never installed is not found, and a node
    # without systemd gives no status; neither can be a stopped guard.
    units = (obs["node_state"].get("systemd") or {}).get("units") or {}
    stopped = []
    resources = False
    for name in settings["drift_guard_units"]:
        status = units.get(unit_name(name)) or {}
        if status.get("LoadState") in (None, "not-found") or status.get("ActiveState") == "active":
            continue
        state, result = status.get("ActiveState"), status.get("Result")
        stopped.append("%s %s (result %s)" % (unit_name(name), state, result))
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
    if not settings["runtime_is_default"] and not resources(obs["runtime_class_info"]):
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
    plugins = obs["node_state"].get("device_plugins")
    if gpu_count(obs["gpu"]) == 0 or plugins is None:
        return []
    if not plugins.get("sockets"):
        return [
            finding(
                "plugin",
                FAIL,
                "no device plugin socket in %s: the device plugin is not running" % settings["plugin_dir"],
                "start it (role device_plugin; systemctl status gpuops-device-plugin, "
                "or the nvidia-device-plugin pod)",
            )
        ]
    checkpoint = plugins.get("checkpoint") or {}
    if not (checkpoint.get("registered") or {}).get(settings["resource"]):
        # The checkpoint lists the devices the kubelet holds healthy: none is no registration,
        # or a plugin that marked every GPU unhealthy.
        why = " (%s)" % checkpoint["error"] if checkpoint.get("error") else ""
        return [
            finding(
                "plugin",
                FAIL,
                "a plugin socket exists but the kubelet has no %s devices registered%s"
                % (settings["resource"], why),
                "check the plugin's log for its Register call (and for GPUs it marks unhealthy); "
                "restart the kubelet if its kubelet.sock is stale",
            )
        ]
    return []


def _plugin_record(obs, _settings):
    """What the plugin serves, as the device_plugin role recorded it, cannot be taken
    (gpu_info's device_plugin.error): the labels and the plugin's offer cannot be judged."""
    error = ((obs["gpu"] or {}).get("device_plugin") or {}).get("error")
    if not error:
        return []
    return [
        finding(
            "plugin",
            FAIL,
            error,
            "run role device_plugin on the node again: it writes the record of what its plugin "
            "serves (the labels are judged once it can be read)",
        )
    ]


def _node_missing(obs, settings):
    if not resources(obs["node"]):
        return [
            finding(
                "allocatable",
                FAIL,
                "Node %s does not exist in the cluster" % settings["node_name"],
                "join the node (kubeadm join), or set gpu_doctor_node_name to its Node name",
            )
        ]
    return []


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
    parts = ["%s %d: %s" % (verb, len(keys), listing(keys, 3)) for verb, keys in verbs if keys]
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
    if not resources(obs["dcgm_ds"]):
        return []
    pods = resources(obs["dcgm_pods"])
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
    ("driver_module", ("node_state",), (), _driver_module, False),
    ("device_nodes", ("gpu", "node_state"), (), gpus.device_nodes, False),
    ("nvml", ("gpu",), (), _nvml, False),
    ("toolkit", ("node_state",), ("runtime_path", "toolkit_runtime_mode", "cdi_spec_path"), _toolkit, False),
    ("runtime", ("runtime_check",), ("runtime", "runtime_name"), _runtime, False),
    ("drift_guard", ("node_state",), ("drift_guard_units",), _drift_guard, False),
    (
        "runtime_class",
        ("runtime_class_info",),
        ("runtime_is_default", "runtime_class"),
        _runtime_class,
        False,
    ),
    ("kubelet", ("kubelet",), ("kubelet_version",), _kubelet, False),
    (
        "services",
        ("gpu", "node_state"),
        ("runtime_service", "kubelet_service", "plugin_service"),
        running.services,
        False,
    ),
    ("node_ready", ("node",), ("node_name", "runtime_service", "kubelet_service"), running.node_ready, False),
    ("plugin", ("gpu",), (), _plugin_record, False),
    # The device plugin's rules are silent on a node our DRA driver serves; the DRA rules on the others.
    ("plugin", ("gpu", "node_state"), ("plugin_dir", "resource"), dra.device_plugin_only(_plugin), False),
    (
        "plugin",
        ("gpu", "node_state"),
        ("dra_driver", "dra_registration_socket", "dra_mode", "dra_namespace"),
        dra.plugin,
        False,
    ),
    # A Node missing from the cluster is reported even where allocatable is skipped.
    ("allocatable", ("node",), ("node_name",), _node_missing, True),
    # Node-local: what the kubelet's checkpoint holds for GPUs NVML does not list (no Node needed).
    ("allocatable", ("gpu", "node_state"), ("resource",), dra.device_plugin_only(gpus.unlisted), False),
    (
        "allocatable",
        ("node", "gpu", "node_state"),
        ("resource", "replicas"),
        dra.device_plugin_only(gpus.allocatable),
        False,
    ),
    (
        "allocatable",
        ("gpu", "node_state", "slices"),
        ("node_name", "dra_driver", "dra_registration_socket", "dra_mode", "dra_namespace"),
        dra.allocatable,
        False,
    ),
    (
        "allocatable",
        ("node", "gpu", "node_state"),
        ("node_name", "resource", "dra_driver", "dra_registration_socket"),
        dra.stale_resource,
        False,
    ),
    (
        "dra",
        ("gpu", "node_state", "device_classes"),
        ("dra_device_class", "dra_extended_class", "dra_registration_socket", "dra_mode"),
        dra.device_classes,
        False,
    ),
    (
        "dra",
        ("gpu", "node_state", "kubelet"),
        ("dra_driver", "dra_registration_socket"),
        dra.kubelet_gates,
        False,
    ),
    (
        "dra",
        ("gpu", "node_state"),
        ("node_name", "dra_driver", "dra_registration_socket", "dra_mode"),
        dra.runtime_cdi,
        False,
    ),
    ("labels", ("labels",), (), _labels, False),
    ("dcgm_exporter", ("dcgm_ds", "dcgm_pods"), ("dcgm_exporter_namespace",), _dcgm_exporter, False),
)

SETTINGS = tuple(sorted({name for rule in _RULES for name in rule[2]}))

# The DRA rules' settings where a caller gives none (a playbook written before mode dra): our
# driver's names and the kubelet's default registry (device_plugin's vars/main.yml), and the
# namespace NVIDIA's driver goes to in mode nvidia_dra (device_plugin_nvidia_dra_namespace).
DRA_DEFAULTS = {
    "dra_mode": "dra",
    "dra_namespace": "dra-driver-nvidia-gpu",
    "dra_driver": "gpu.gpuops.k8s",
    "dra_registration_socket": "/var/lib/kubelet/plugins_registry/gpu.gpuops.k8s-reg.sock",
    "dra_device_class": "gpu.gpuops.k8s",
    "dra_extended_class": "nvidia-gpu.gpu.gpuops.k8s",
}


def diagnose(observed, settings, skip=(), only=None):
    """The findings, in CHECKS order, of each check not in skip whose observations are given.

    observed: {observation: registered result}, names from OBSERVATIONS; a check runs only
    when all the observations it reads are there. settings: {setting: value}, names from
    SETTINGS; a check that runs needs its own. skip: check names (CHECKS) to leave out;
    only: the check names to run (None: all), the others as if skipped.
    """
    unknown = sorted(set(observed) - set(OBSERVATIONS))
    unknown += sorted(set(settings) - set(SETTINGS))
    unknown += sorted(set(skip) - set(CHECKS))
    unknown += sorted(set(only or ()) - set(CHECKS))
    if unknown:
        raise DoctorInputError("unknown observation, setting or check: %s" % ", ".join(unknown))
    if only is not None:
        skip = set(skip) | (set(CHECKS) - set(only))
    settings = dict(DRA_DEFAULTS, **settings)
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
