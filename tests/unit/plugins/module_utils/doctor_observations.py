# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""What the gpu_doctor role registers on a healthy node, and pieces to break it with: the
observations the doctor's unit tests (test_doctor*.py) hand to _doctor.diagnose."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

RESOURCE = "nvidia.com/gpu"
GUARD_UNITS = ["gpuops-runtime-guard.path", "gpuops-runtime-guard.timer"]
SETTINGS = {
    "runtime": "containerd",
    "runtime_name": "nvidia",
    "runtime_path": "/usr/bin/nvidia-container-runtime",
    "toolkit_runtime_mode": "auto",
    "cdi_spec_path": "/var/run/cdi/nvidia.yaml",
    "runtime_is_default": False,
    "runtime_class": "nvidia",
    "kubelet_version": "",
    "plugin_dir": "/var/lib/kubelet/device-plugins",
    "resource": RESOURCE,
    "node_name": "gpu-01",
    "replicas": 1,
    "dcgm_exporter_namespace": "gpuops-system",
    "runtime_service": "containerd",
    "kubelet_service": "kubelet",
    "plugin_service": "gpuops-device-plugin",
    "drift_guard_units": GUARD_UNITS,
    "dra_mode": "dra",
    "dra_namespace": "dra-driver-nvidia-gpu",
    "dra_driver": "gpu.gpuops.k8s",
    "dra_registration_socket": "/var/lib/kubelet/plugins_registry/gpu.gpuops.k8s-reg.sock",
    "dra_device_class": "gpu.gpuops.k8s",
    "dra_extended_class": "nvidia-gpu.gpu.gpuops.k8s",
}


def uuid(index):
    return "GPU-%08d-0000-0000-0000-000000000000" % index


def gpu_info(minors=range(4), lost=(), mode="gpuops"):
    """gpu_info's result: a GPU per minor number, NVML indexes in order (as NVML renumbers)."""
    gpus = [{"index": i, "minor_number": minor, "uuid": uuid(minor)} for i, minor in enumerate(minors)]
    return {
        "gpu_count": len(gpus),
        "gpus": gpus,
        "nvml": {"available": True, "reason": None, "error": None},
        "lost_gpus": list(lost),
        "device_plugin": {"source": "record", "mode": mode},
    }


def char(major, minor):
    return {"type": "char", "major": major, "minor": minor, "link": None}


def dev_nodes(minors=range(4), ctl=True, uvm=True):
    """node_state_info's devices: /dev/nvidia<minor> (195:minor), nvidiactl, nvidia-uvm(-tools)."""
    devices = {"nvidia%d" % m: char(195, m) for m in minors}
    if ctl:
        devices["nvidiactl"] = char(195, 255)
    if uvm:
        devices["nvidia-uvm"] = char(510, 0)
        devices["nvidia-uvm-tools"] = char(510, 1)
    devices["nvidia-caps"] = {"type": "directory", "major": None, "minor": None, "link": None}
    return devices


def unit(active="active", sub="running", load="loaded", result="success", **more):
    return dict({"LoadState": load, "ActiveState": active, "SubState": sub, "Result": result}, **more)


def units(**changes):
    """node_state_info's systemd units: every one the role asks about, running, but for changes."""
    found = {
        "containerd.service": unit(),
        "kubelet.service": unit(),
        "gpuops-device-plugin.service": unit(),
        "gpuops-runtime-guard.path": unit(sub="waiting"),
        "gpuops-runtime-guard.timer": unit(sub="waiting"),
    }
    found.update(changes)
    return {"available": True, "error": None, "units": found}


def guard_units(path_state, timer_state, load="loaded", result="success"):
    """The drift guard's units as node_state_info reads them."""
    return units(
        **{
            "gpuops-runtime-guard.path": unit(path_state, "dead", load, result),
            "gpuops-runtime-guard.timer": unit(timer_state, "dead", load, result),
        }
    )


def state(
    *, devices=None, systemd=None, sockets=("gpuops-gpu.sock",), registered=None, checkpoint=None, paths=None
):
    """node_state_info's result: by default a healthy node with 4 GPUs (minors 0-3)."""
    return {
        "changed": False,
        "driver": {"loaded": True, "version": "NVRM version: 550.163.01", "majors": {"nvidia-uvm": 510}},
        "devices": dev_nodes() if devices is None else devices,
        "systemd": units() if systemd is None else systemd,
        "device_plugins": {
            "dir": "/var/lib/kubelet/device-plugins",
            "exists": True,
            "sockets": list(sockets),
            "kubelet_socket": True,
            "checkpoint": checkpoint
            or {
                "path": "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
                "exists": True,
                "registered": {RESOURCE: [uuid(i) for i in range(4)]} if registered is None else registered,
                "error": None,
            },
        },
        "paths": paths
        or {"/usr/bin/nvidia-container-runtime": {"exists": True, "type": "file", "executable": True}},
    }


def ready_pod(name, ready="True"):
    return {"metadata": {"name": name}, "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def node(allocatable=4, capacity=None, ready=None):
    """k8s_info of the Node: nvidia.com/gpu allocatable and capacity, and its Ready condition."""
    condition = ready or {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
    }
    return {
        "resources": [
            {
                "status": {
                    "allocatable": {RESOURCE: str(allocatable), "cpu": "16"},
                    "capacity": {RESOURCE: str(allocatable if capacity is None else capacity), "cpu": "16"},
                    "conditions": [{"type": "MemoryPressure", "status": "False"}, condition],
                }
            }
        ]
    }


def kubelet(version="v1.37.2", cgroup=1, config=None, path="/var/lib/kubelet/config.yaml"):
    """gpuops.k8s.kubelet_info's result: by default a 1.37 kubelet on a cgroup v1 host whose
    configuration allows it (failCgroupV1: false)."""
    return {
        "changed": False,
        "binary": "/usr/bin/kubelet",
        "version": version,
        "running": True,
        "config_path": path,
        "config": {"failCgroupV1": False, "cgroupDriver": "systemd"} if config is None else config,
        "config_error": None,
        "cgroup_version": cgroup,
    }


def healthy(gpus=4):
    """Every observation of a healthy node with gpus GPUs, as the role registers them."""
    return {
        "gpu": gpu_info(range(gpus)),
        "node_state": state(
            devices=dev_nodes(range(gpus)), registered={RESOURCE: [uuid(i) for i in range(gpus)]}
        ),
        "runtime_check": {"changed": False, "failed": False, "changed_files": [], "restart_required": False},
        "runtime_class_info": {"resources": [{"metadata": {"name": "nvidia"}, "handler": "nvidia"}]},
        "kubelet": kubelet(),
        "node": node(gpus),
        "labels": {"changed": False, "nodes": [{"name": "gpu-01", "changed": False}]},
        "dcgm_pods": {"resources": [ready_pod("dcgm-exporter-7x2kq")]},
        "dcgm_ds": {"resources": [{"metadata": {"name": "dcgm-exporter"}}]},
    }
