# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure resource logic: which resources a node offers and what Allocate answers.

No NVML and no gRPC here: discovery hands in plain GPU dicts (gpu_info's shape), and the
server turns the plain results into protobuf messages. Which resources and replicas the
GPUs make is `_plugin_resources`, shared with gpu_info's node labels.

Device IDs the kubelet sees are UUIDs (GPU or MIG), with a `::<n>` suffix for time-sliced
replicas, as NVIDIA's plugin does; the device ID strategy only decides what a container is
told (UUIDs or indices), so users can switch plugins without changing their pods.
"""

from __future__ import annotations

import dataclasses
import os
import uuid as uuidlib
from collections.abc import Callable, Iterable

from ._plugin_resources import (
    REPLICA_SEPARATOR,
    VENDOR,
    Device,
    MigLayoutError,
    ResourceError,
    base_resources,
    offered,
)
from .config import Config

__all__ = [
    "REPLICA_SEPARATOR",
    "VENDOR",
    "ContainerResponse",
    "Device",
    "InvalidRequest",
    "MigLayoutError",
    "Resource",
    "ResourceError",
    "allocate",
    "base_resources",
    "build_resources",
    "strip_replica",
    "validate_request",
]

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
VOLUME_ROOT = "/var/run/nvidia-container-devices"
CDI_KIND = "k8s.device-plugin.nvidia.com/gpu"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/nvidia-device-plugin_"
CONTROL_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


class InvalidRequest(ValueError):
    """An Allocate request the plugin must refuse (unknown IDs, too many shared devices)."""


@dataclasses.dataclass(frozen=True)
class Resource:
    name: str
    devices: dict[str, Device]  # kubelet device ID -> device
    shared: bool = False
    fail_requests_greater_than_one: bool = False

    @property
    def socket_name(self) -> str:
        """Our socket in the plugin directory: gpuops-gpu.sock, gpuops-mig-1g.5gb.sock, ..."""
        return "gpuops-" + self.name.split("/", 1)[-1] + ".sock"

    def device_for(self, device_id: str) -> Device:
        return self.devices[device_id]


@dataclasses.dataclass
class ContainerResponse:
    envs: dict[str, str] = dataclasses.field(default_factory=dict)
    mounts: list[tuple[str, str, bool]] = dataclasses.field(default_factory=list)  # container, host, ro
    device_specs: list[tuple[str, str, str]] = dataclasses.field(
        default_factory=list
    )  # container, host, perms
    annotations: dict[str, str] = dataclasses.field(default_factory=dict)
    cdi_devices: list[str] = dataclasses.field(default_factory=list)


def build_resources(gpus: Iterable[dict], config: Config) -> list[Resource]:
    """The resources to serve, with time-slicing replicas applied (see _plugin_resources)."""
    return [
        Resource(name, devices, shared, shared and config.fail_requests_greater_than_one)
        for name, devices, shared in offered(gpus, config)
    ]


def strip_replica(device_id: str) -> str:
    return device_id.split(REPLICA_SEPARATOR, 1)[0]


def validate_request(resource: Resource, device_ids: list[str]) -> None:
    unknown = [i for i in device_ids if i not in resource.devices]
    if unknown:
        raise InvalidRequest(
            "unknown device%s for %s: %s"
            % ("s" if len(unknown) > 1 else "", resource.name, ", ".join(unknown))
        )
    if not device_ids:
        raise InvalidRequest("empty device list for %s" % resource.name)
    replicas = any(REPLICA_SEPARATOR in i for i in device_ids)
    if resource.fail_requests_greater_than_one and replicas and len(device_ids) > 1:
        raise InvalidRequest(
            "request for %d %s is too large: the maximum for a shared resource is 1 "
            "(failRequestsGreaterThanOne)" % (len(device_ids), resource.name)
        )


def allocate(
    resource: Resource,
    device_ids: list[str],
    config: Config,
    exists: Callable[[str], bool] = os.path.exists,
    response_id: Callable[[], str] = lambda: str(uuidlib.uuid4()),
) -> ContainerResponse:
    """Answer one container's Allocate request (NVIDIA's outputs per strategy)."""
    validate_request(resource, device_ids)
    devices = []
    for device_id in device_ids:
        device = resource.device_for(device_id)
        if device not in devices:
            devices.append(device)  # Replicas of one GPU collapse to the GPU.
    ids = [d.uuid if config.device_id_strategy == "uuid" else d.index for d in devices]
    response = ContainerResponse()
    strategies = set(config.device_list_strategy)
    cdi_names = ["%s=%s" % (CDI_KIND, i) for i in ids]
    if "cdi-annotations" in strategies:
        response.annotations[CDI_ANNOTATION_PREFIX + response_id()] = ",".join(cdi_names)
    if "cdi-cri" in strategies:
        response.cdi_devices.extend(cdi_names)
    if strategies <= {"cdi-annotations", "cdi-cri"}:
        return response
    if "envvar" in strategies:
        response.envs[VISIBLE_DEVICES] = ",".join(ids)
    if "volume-mounts" in strategies:
        response.envs[VISIBLE_DEVICES] = VOLUME_ROOT
        response.mounts.extend((os.path.join(VOLUME_ROOT, i), "/dev/null", False) for i in ids)
    if config.pass_device_specs:
        response.device_specs.extend(_device_specs(devices, config.nvidia_dev_root, exists))
    return response


def _device_specs(devices, dev_root, exists):
    paths = [
        p for p in CONTROL_DEVICES if p == "/dev/nvidiactl" or exists(os.path.join(dev_root, p.lstrip("/")))
    ]
    for device in devices:
        if device.minor is not None:
            path = "/dev/nvidia%d" % device.minor
            if path not in paths:
                paths.append(path)
    return [(p, os.path.join(dev_root, p.lstrip("/")), "rw") for p in paths]
