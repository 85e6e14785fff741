# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Which resources a node's GPUs make, and how time-slicing replicates them.

Private to the gpuops.k8s collection. The gpuops device plugin daemon serves exactly what
`offered` returns (roles/device_plugin/files/gpuops-device-plugin links this file), and
gpu_info's labels describe the same resources with the same functions, so the labels and
the plugin cannot disagree. Pure: GPU dicts in gpu_info's shape and a Config (see
_plugin_config) in, plain data out.
"""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import dataclasses

VENDOR = "nvidia.com"
FULL_GPU = VENDOR + "/gpu"
REPLICA_SEPARATOR = "::"
SHARED_SUFFIX = ".shared"  # NVIDIA's default rename (renameByDefault)


class ResourceError(ValueError):
    """The GPUs cannot be offered under this configuration (e.g. MIG strategy mismatch)."""


class MigLayoutError(ResourceError):
    """The MIG layout does not fit migStrategy 'single'.

    reason: "empty" (a MIG-enabled GPU without MIG devices), "partial" (MIG enabled on
    some GPUs only) or "profiles" (more than one MIG profile); gpu: the first MIG-enabled
    GPU, which GPU feature discovery names in its INVALID product label.
    """

    def __init__(self, message, reason, gpu):
        super(MigLayoutError, self).__init__(message)
        self.reason = reason
        self.gpu = gpu


@dataclasses.dataclass(frozen=True)
class Device:
    """A unit a container can get: a whole GPU or a MIG device."""

    uuid: str
    index: str  # NVIDIA's form: "3" for a GPU, "3:1" for MIG device 1 on GPU 3
    gpu_index: int
    minor: int | None
    model: str
    numa_node: int | None = None
    mig_profile: str | None = None


def mig_enabled(gpu):
    return gpu["mig"].get("current") == "enabled"


def whole_gpu(gpu):
    return Device(
        uuid=gpu["uuid"],
        index=str(gpu["index"]),
        gpu_index=gpu["index"],
        minor=gpu.get("minor_number"),
        model=gpu["name"],
        numa_node=gpu.get("numa_node"),
    )


def mig_device(gpu, slot):
    """A MIG device (a slot of gpu_info's `mig.devices`) of its parent GPU."""
    return dataclasses.replace(
        whole_gpu(gpu),
        uuid=slot["uuid"],
        index="%d:%d" % (gpu["index"], slot["index"]),
        mig_profile=slot["profile"],
    )


def check_single_layout(gpus):
    """Raise MigLayoutError unless the MIG layout suits migStrategy 'single'.

    Like NVIDIA's plugin: MIG on every GPU or on none, no MIG-enabled GPU without MIG
    devices, one profile everywhere. Checked in GPU feature discovery's order.
    """
    enabled = [g for g in gpus if mig_enabled(g)]
    if not enabled:
        return
    empty = [g for g in enabled if not g["mig"]["devices"]]
    if empty:
        raise MigLayoutError(
            "migStrategy 'single' needs MIG devices on every MIG-enabled GPU; GPU%s %s ha%s none"
            % (
                "s" if len(empty) > 1 else "",
                ", ".join(str(g["index"]) for g in empty),
                "ve" if len(empty) > 1 else "s",
            ),
            "empty",
            enabled[0],
        )
    if len(enabled) != len(gpus):
        raise MigLayoutError(
            "migStrategy 'single' needs MIG enabled on every GPU or on none; "
            "enabled on %s of %d (GPUs %s)"
            % (len(enabled), len(gpus), ", ".join(str(g["index"]) for g in enabled)),
            "partial",
            enabled[0],
        )
    profiles = sorted(set(slot["profile"] for g in enabled for slot in g["mig"]["devices"]))
    if len(profiles) != 1:
        raise MigLayoutError(
            "migStrategy 'single' needs one MIG profile on every GPU; found %s (use 'mixed')"
            % ", ".join(profiles),
            "profiles",
            enabled[0],
        )


def base_resources(gpus, mig_strategy):
    """The node's resources before sharing: {resource name: [Device, ...]}.

    none: every GPU whole (MIG-enabled ones too); single: the MIG devices as nvidia.com/gpu
    when MIG is on (see check_single_layout), whole GPUs when it is off everywhere; mixed:
    whole GPUs without MIG plus nvidia.com/mig-<profile> per profile (a MIG-enabled GPU
    without MIG devices offers nothing).
    """
    gpus = list(gpus)
    if mig_strategy == "single":
        check_single_layout(gpus)
    full, mig = [], {}
    for gpu in gpus:
        if mig_strategy == "none" or not mig_enabled(gpu):
            full.append(whole_gpu(gpu))
            continue
        for slot in gpu["mig"]["devices"]:
            mig.setdefault(slot["profile"], []).append(mig_device(gpu, slot))
    if mig_strategy == "single" and mig:
        return {FULL_GPU: next(iter(mig.values()))}
    result = {FULL_GPU: full} if full else {}
    for profile in sorted(mig):
        result["%s/mig-%s" % (VENDOR, profile)] = mig[profile]
    return result


def replicas(sharing, device):
    """How many replicas of device a sharing entry (a SharedResource) asks for; 1: not shared."""
    if (
        sharing.devices is not None
        and device.uuid not in sharing.devices
        and device.index not in sharing.devices
    ):
        return 1
    for rule in sharing.per_device:
        if rule.matches(device.uuid, device.index, device.model):
            return rule.replicas
    return sharing.replicas


def shared_name(sharing, rename_by_default):
    """The resource the replicas of sharing.name are offered under."""
    return sharing.rename or (sharing.name + SHARED_SUFFIX if rename_by_default else sharing.name)


def offered(gpus, config):
    """What the plugin serves: [(resource name, {kubelet device ID: Device}, shared)], by name.

    Time-slicing replicas get `<uuid>::<n>` IDs; a GPU with one replica stays a whole
    device of the base resource; replicas go to the renamed resource when there is one.
    """
    shared_by_name = dict((s.name, s) for s in config.shared)
    base = base_resources(gpus, config.mig_strategy)
    unknown = sorted(set(shared_by_name) - set(base))
    if unknown:
        raise ResourceError(
            "sharing.timeSlicing.resources: %r is not a resource this node offers; it offers %s"
            % (unknown[0], ", ".join(sorted(base)) or "none")
        )
    result = {}
    for name, devices in base.items():
        sharing = shared_by_name.get(name)
        plain = dict((d.uuid, d) for d in devices if sharing is None or replicas(sharing, d) == 1)
        if plain:
            result[name] = (plain, False)
        if sharing is None:
            continue
        replicated = {}
        for device in devices:
            count = replicas(sharing, device)
            if count > 1:
                for n in range(count):
                    replicated["%s%s%d" % (device.uuid, REPLICA_SEPARATOR, n)] = device
        if not replicated:
            continue
        renamed = shared_name(sharing, config.rename_by_default)
        merged = dict(result[renamed][0]) if renamed in result else {}
        merged.update(replicated)
        result[renamed] = (merged, True)
    return [(name, result[name][0], result[name][1]) for name in sorted(result)]
