# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the DRA health stream reports: every device of our pool, HEALTHY, UNHEALTHY with the
reason the health watcher recorded, or UNKNOWN where nobody watches.

The kubelet (feature ResourceHealthStatus) takes each message as the driver's complete list,
keyed by pool and device, stamps it with its own receive time, and turns a device Unknown
30 s after the last message that named it: the list is sent again unchanged every REFRESH_S
to keep healthy devices known, and at once on every change. The kubelet puts the status and
the message in the pod's status (allocatedResourcesStatus).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ..health import HealthState
from .devices import GpuDevice

__all__ = ["HEALTHY", "REFRESH_S", "UNHEALTHY", "UNKNOWN", "DeviceHealth", "report"]

REFRESH_S = 10.0
HEALTHY, UNHEALTHY, UNKNOWN = "HEALTHY", "UNHEALTHY", "UNKNOWN"
# The kubelet cuts a longer message to 1021 characters and "...": cut it ourselves, where
# the end of the reason can be chosen.
MESSAGE_MAX = 1024
NOT_WATCHED = "device health is not watched (health checks are off or NVML is not usable)"


@dataclasses.dataclass(frozen=True)
class DeviceHealth:
    pool: str
    device: str
    status: str
    message: str
    updated: int  # Unix seconds when this status was determined


def report(
    devices: Mapping[str, GpuDevice], pool: str, state: HealthState, now: float, *, watched: bool = True
) -> tuple[DeviceHealth, ...]:
    """Every device's health now; watched is False when no health watcher runs."""
    unhealthy = state.unhealthy()
    reports = []
    for name, device in devices.items():
        if not watched:
            status, message = UNKNOWN, NOT_WATCHED
        elif device.uuid in unhealthy or device.gpu_uuid in unhealthy:
            # A MIG device is as healthy as its GPU, whose XIDs and loss the watcher records.
            status, message = UNHEALTHY, unhealthy.get(device.uuid) or unhealthy[device.gpu_uuid]
        else:
            status, message = HEALTHY, ""
        reports.append(DeviceHealth(pool, name, status, _cut(message), int(now)))
    return tuple(reports)


def _cut(message: str) -> str:
    return message if len(message) <= MESSAGE_MAX else message[: MESSAGE_MAX - 3] + "..."
