# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU doctor's rules that follow each GPU from its device node to what the kubelet
offers: the device_nodes check, and the allocatable check's comparison of what the device
plugin advertises (the kubelet's checkpoint, the Node's capacity and allocatable) with the
GPUs NVML lists.

Private to the gpuops.k8s collection. Pure: each rule takes the observations it reads
({name: registered result}) and the settings, and returns findings (_doctor_base.finding).
gpu is gpuops.k8s.gpu_info's result, node_state gpuops.k8s.node_state_info's, node
kubernetes.core.k8s_info's of the Node.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import collections
import re

from ansible_collections.gpuops.k8s.plugins.module_utils._doctor_base import (
    FAIL,
    WARN,
    finding,
    gpu_count,
    listing,
    node_status,
    to_int,
)
from ansible_collections.gpuops.k8s.plugins.module_utils._node_state import base_id

# The NVIDIA driver's character devices: the GPUs' nodes and nvidiactl are major 195
# (nvidia-frontend), nvidiactl minor 255; nvidia-uvm's major is chosen when it loads
# (/proc/devices names it), minor 0.
NVIDIA_MAJOR = 195
CTL_MINOR = 255
_GPU_NODE = re.compile(r"^nvidia(\d+)$")
# A device plugin names devices by UUID (ours, and NVIDIA's by default) or by index
# (NVIDIA's DEVICE_ID_STRATEGY=index): only UUIDs can be matched with NVML's.
_UUID = re.compile(r"^(GPU|MIG)-")

_RECREATE_GPU_NODE = (
    "recreate it as root (nvidia-modprobe -c %d makes /dev/nvidia%d, char 195:%d), then make sure the "
    "device plugin lists the GPU again (restart it if not); find what removed it (a udev rule, a script "
    "cleaning /dev)"
)


def _gpu_nodes(devices):
    """{N: entry} of the /dev/nvidiaN entries."""
    found = {}
    for name, entry in devices.items():
        match = _GPU_NODE.match(name)
        if match:
            found[int(match.group(1))] = entry
    return found


def _is_device(entry, major, minor):
    return (
        (entry or {}).get("type") == "char"
        and (major is None or entry.get("major") == major)
        and entry.get("minor") == minor
    )


def _what(entry):
    if entry.get("type") in ("char", "block"):
        return "a %s device %s:%s" % (entry["type"], entry.get("major"), entry.get("minor"))
    return "a %s" % entry.get("type")


def _nvml_minors(gpu):
    """{minor: gpu entry} of the GPUs NVML lists with a minor number."""
    return {g["minor_number"]: g for g in (gpu.get("gpus") or []) if g.get("minor_number") is not None}


def _holes(devices, gpu):
    """The numbers N below the highest /dev/nvidiaN that have no node and are no NVML GPU's minor."""
    numbers = set(n for n, entry in _gpu_nodes(devices).items() if entry.get("type") != "missing")
    if not numbers:
        return []
    minors = _nvml_minors(gpu)
    return [n for n in range(max(numbers)) if n not in numbers and n not in minors]


def missing_gpu_nodes(gpu, node_state):
    """/dev paths of the GPU nodes that are missing: NVML's GPUs' and the holes among the others."""
    devices = node_state.get("devices") or {}
    nodes = _gpu_nodes(devices)
    if not nodes:
        return []
    missing = [
        minor for minor in _nvml_minors(gpu) if (nodes.get(minor) or {}).get("type", "missing") == "missing"
    ]
    return ["/dev/nvidia%d" % n for n in sorted(set(missing) | set(_holes(devices, gpu)))]


def _control_nodes(devices, majors):
    """(path, entry, major, minor, message, fix) of the control nodes every GPU container needs."""
    return (
        (
            "/dev/nvidiactl",
            devices.get("nvidiactl"),
            NVIDIA_MAJOR,
            CTL_MINOR,
            "NVML and CUDA open the driver through it, so no process or container can use a GPU",
            "recreate it as root: nvidia-modprobe -c 255, or nvidia-ctk system create-device-nodes "
            "--control-devices (NVIDIA Container Toolkit); find what removed it",
        ),
        (
            "/dev/nvidia-uvm",
            devices.get("nvidia-uvm"),
            majors.get("nvidia-uvm"),
            0,
            "CUDA needs it (unified memory), and the device plugin passes it to containers only where it "
            "exists",
            "as root: nvidia-modprobe -u -c=0 (loads nvidia-uvm and creates /dev/nvidia-uvm and "
            "/dev/nvidia-uvm-tools), or modprobe nvidia-uvm then nvidia-ctk system create-device-nodes "
            "--control-devices; then restart the device plugin so that new containers get it",
        ),
    )


def device_nodes(obs, _settings):
    state, gpu = obs["node_state"], obs["gpu"]
    devices = state.get("devices")
    if devices is None:  # not read
        return []
    nodes = _gpu_nodes(devices)
    if not nodes:
        return [
            finding(
                "device_nodes",
                FAIL,
                "no /dev/nvidia[0-9]* device nodes",
                "load the driver; nvidia-persistenced or nvidia-modprobe creates the nodes "
                "(role nvidia_driver enables persistence)",
            )
        ]
    found = []
    for minor, card in sorted(_nvml_minors(gpu).items()):
        entry = nodes.get(minor)
        who = "GPU %s (%s)" % (card.get("index"), card.get("uuid"))
        if entry is None or entry.get("type") == "missing":
            found.append(
                finding(
                    "device_nodes",
                    FAIL,
                    "%s has no device node /dev/nvidia%d: no container can open it" % (who, minor),
                    _RECREATE_GPU_NODE % (minor, minor, minor),
                )
            )
        elif not _is_device(entry, NVIDIA_MAJOR, minor):
            found.append(
                finding(
                    "device_nodes",
                    FAIL,
                    "/dev/nvidia%d is %s, not %s's device node (char %d:%d)"
                    % (minor, _what(entry), who, NVIDIA_MAJOR, minor),
                    "remove it, then " + _RECREATE_GPU_NODE % (minor, minor, minor),
                )
            )
    majors = (state.get("driver") or {}).get("majors") or {}
    for path, entry, major, minor, needed, fix in _control_nodes(devices, majors):
        if entry is None or entry.get("type") == "missing":
            found.append(finding("device_nodes", FAIL, "%s is missing: %s" % (path, needed), fix))
        elif not _is_device(entry, major, minor):
            expected = "char %s:%d" % (major if major is not None else "*", minor)
            message = "%s is %s, not the driver's (%s): %s" % (path, _what(entry), expected, needed)
            found.append(finding("device_nodes", FAIL, message, "remove it, then " + fix))
    holes = _holes(devices, gpu)
    if holes:
        paths = ", ".join("/dev/nvidia%d" % n for n in holes)
        found.append(
            finding(
                "device_nodes",
                WARN,
                "%s missing among /dev/nvidia0-%d: probably the device node of a GPU, which NVML then "
                "leaves out or cannot open" % (paths + (" is" if len(holes) == 1 else " are"), max(nodes)),
                "recreate it as root (nvidia-modprobe -c %d), then look again: the GPU is listed once its "
                "node is back; find what removed it (a udev rule, a script cleaning /dev)" % holes[0],
            )
        )
    return found


def _mig_uuids(card):
    return set(d["uuid"] for d in ((card.get("mig") or {}).get("devices") or []) if d.get("uuid"))


class _Advertised:
    """What the device plugin advertises for resource against the GPUs NVML lists."""

    def __init__(self, gpu, node_state, resource):
        self.resource = resource
        self.gpus = [g for g in (gpu.get("gpus") or []) if g.get("uuid")]
        self.count = gpu_count(gpu)
        self.lost = len(gpu.get("lost_gpus") or [])
        checkpoint = ((node_state.get("device_plugins") or {}).get("checkpoint")) or {}
        # None: not known (no checkpoint, or one that could not be read).
        self.registered = None
        if checkpoint.get("exists") and not checkpoint.get("error"):
            self.registered = list((checkpoint.get("registered") or {}).get(resource) or [])
        listed = set()
        for card in self.gpus:
            listed.add(card["uuid"])
            listed.update(_mig_uuids(card))
        bases = collections.Counter(base_id(device) for device in self.registered or [])
        # Only UUIDs can be matched with NVML's; a plugin naming devices by index is compared by count.
        self.by_uuid = bool(bases) and all(_UUID.match(name) for name in bases)
        self.per_device = bases if self.by_uuid else collections.Counter()
        self.unlisted = sorted(name for name in self.per_device if name not in listed)
        self.missing_nodes = missing_gpu_nodes(gpu, node_state)

    def gone_nodes(self):
        """'; /dev/nvidia3 is missing (see device_nodes)', or '' where no GPU node is missing."""
        paths = self.missing_nodes
        if not paths:
            return ""
        return "; %s %s missing (see device_nodes)" % (", ".join(paths), "is" if len(paths) == 1 else "are")

    def not_advertised(self):
        """The GPUs NVML lists of which the kubelet holds no device (nor of their MIG devices) healthy."""
        held = set(self.per_device)
        return [card for card in self.gpus if card["uuid"] not in held and not held & _mig_uuids(card)]

    def replicas(self):
        """Devices the plugin advertises per GPU (or MIG device), where it is one number for all."""
        counts = set(self.per_device.values())
        return counts.pop() if len(counts) == 1 and not self.unlisted else None


_GONE_FIX = (
    "NVML leaves out a GPU whose device node is gone (see device_nodes) or that fell off the bus: recreate "
    "the node (nvidia-modprobe -c <minor>), or drain the node and reset or replace the GPU. "
)
_OFFERED_FIX = _GONE_FIX + (
    "Pods given it fail meanwhile: restart a plugin that keeps offering it "
    "(systemctl restart gpuops-device-plugin, or delete NVIDIA's plugin pod on the node)"
)
_HELD_FIX = _GONE_FIX + "The kubelet keeps it in capacity, unhealthy, until the plugin stops listing it"
_MORE_FIX = (
    "the plugin's time-slicing replicas may differ from those expected (set gpu_doctor_replicas or "
    "gpu_validation_replicas to the plugin's, or apply the sharing settings with role device_plugin and "
    "restart the plugin), or it offers GPUs NVML no longer lists (restart it)"
)
_FEWER_FIX = (
    "the plugin marks GPUs Unhealthy (its log says why: XIDs, a GPU or its device node gone; see nvml and "
    "device_nodes) or is not registered (see plugin and services)"
)
_REPLICAS_FIX = (
    "the plugin's time-slicing replicas differ from those expected: set gpu_doctor_replicas "
    "(gpu_validation_replicas) to the plugin's, or apply the sharing settings (role device_plugin) "
    "and restart the plugin"
)


def _lost(view):
    return "; NVML has lost %d GPU(s) (see nvml)" % view.lost if view.lost else ""


def unlisted(obs, settings):
    """Devices the kubelet holds healthy for GPUs NVML does not list (checkpoint against NVML)."""
    gpu, state = obs["gpu"], obs["node_state"]
    if gpu_count(gpu) == 0:  # nothing to compare with (the nvml check says why)
        return []
    view = _Advertised(gpu, state, settings["resource"])
    if not view.unlisted:
        return []
    return [
        finding(
            "allocatable",
            FAIL,
            "the plugin advertises GPUs that NVML no longer lists: %s, held healthy by the kubelet "
            "(%d %s devices registered, NVML lists %d GPUs)%s%s"
            % (
                ", ".join(view.unlisted),
                len(view.registered),
                settings["resource"],
                view.count,
                view.gone_nodes(),
                _lost(view),
            ),
            _OFFERED_FIX,
        )
    ]


def _count(status, key, resource):
    return to_int((status.get(key) or {}).get(resource, 0))


def allocatable(obs, settings):
    """The Node's capacity and allocatable against NVML's GPUs x replicas, each case said."""
    gpu, state, resource = obs["gpu"], obs["node_state"], settings["resource"]
    status = node_status(obs["node"])
    gpus, replicas = gpu_count(gpu), to_int(settings["replicas"])
    if not status or gpus == 0:
        return []
    view = _Advertised(gpu, state, resource)
    if view.unlisted:  # unlisted() says so, and it explains the counts
        return []
    held, capacity = _count(status, "allocatable", resource), _count(status, "capacity", resource)
    expected = gpus * replicas
    found = []
    # Capacity counts the unhealthy devices too, and a lost GPU's (gpu_info leaves it out).
    if capacity > (gpus + view.lost) * replicas and held <= expected:
        found.append(
            finding(
                "allocatable",
                FAIL,
                "the plugin advertises GPUs that NVML no longer lists: capacity %s is %d, NVML lists "
                "%d GPUs%s x %s; the kubelet holds the %d more unhealthy (allocatable %d)%s"
                % (
                    resource,
                    capacity,
                    gpus,
                    " and has lost %d" % view.lost if view.lost else "",
                    replicas,
                    capacity - (gpus + view.lost) * replicas,
                    held,
                    view.gone_nodes(),
                ),
                _HELD_FIX,
            )
        )
    if held != expected:
        found.append(_counts_differ(view, held, capacity, replicas))
    return found


def _counts_differ(view, held, capacity, replicas):
    """The allocatable finding where the Node holds more or fewer devices than GPUs x replicas."""
    resource, gpus = view.resource, view.count
    expected = gpus * replicas
    counts = "allocatable %s is %d, expected %d (%d GPUs found x %s)" % (
        resource,
        held,
        expected,
        gpus,
        replicas,
    )
    per_gpu = view.replicas()
    if per_gpu is not None and per_gpu != replicas and not view.not_advertised():
        return finding(
            "allocatable", FAIL, "%s: the plugin advertises %d per GPU" % (counts, per_gpu), _REPLICAS_FIX
        )
    if held > expected:
        return finding("allocatable", FAIL, counts + ": more devices than NVML's GPUs x replicas", _MORE_FIX)
    parts = []
    if view.registered is not None and not view.registered:
        parts.append("the kubelet holds no %s device healthy" % resource)
    elif view.by_uuid and view.not_advertised():
        gone = ("%s (GPU %s)" % (card["uuid"], card.get("index")) for card in view.not_advertised())
        parts.append("not advertised healthy: " + listing(gone, 4))
    if capacity > held:
        parts.append("%d held unhealthy (capacity %d)" % (capacity - held, capacity))
    message = counts + (": " + "; ".join(parts) if parts else "") + view.gone_nodes()
    return finding("allocatable", FAIL, message, _FEWER_FIX)
