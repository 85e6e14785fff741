# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The DRA front end's names: the driver, and one device per whole GPU, gpu-<index>.

The scheduler writes these names into a claim's allocation from the ResourceSlices, and the
kubelet keys its health cache on them: the slices, Prepare and the health stream must say
them alike, so they are made here only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

__all__ = ["DRIVER", "GpuDevice", "device_name", "gpu_devices"]

# The driver's name: a DNS subdomain, ResourceSlice.spec.driver and the kubelet plugin's name.
DRIVER = "gpu.gpuops.k8s"


def device_name(index: int) -> str:
    return f"gpu-{index}"


@dataclasses.dataclass(frozen=True)
class GpuDevice:
    """One device of our pool: the GPU it is, by index (its name) and by UUID (its identity)."""

    name: str
    index: int
    uuid: str


def gpu_devices(gpus: Iterable[dict]) -> dict[str, GpuDevice]:
    """Device name -> device, in index order, for GPUs in gpu_info's shape (index, uuid, mig).

    A GPU with MIG enabled is no device of its own: the slices offer its MIG devices
    instead (as NVIDIA's driver does), which Prepare does not serve yet.
    """
    whole = [gpu for gpu in gpus if (gpu.get("mig") or {}).get("current") != "enabled"]
    return {
        device_name(gpu["index"]): GpuDevice(device_name(gpu["index"]), gpu["index"], gpu["uuid"])
        for gpu in sorted(whole, key=lambda gpu: gpu["index"])
    }
