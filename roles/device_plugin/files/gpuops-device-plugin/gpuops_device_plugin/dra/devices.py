# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The DRA front end's names: the driver, and its devices: a whole GPU, gpu-<index>, or one of a
MIG-enabled GPU's MIG devices, gpu-<index>-mig-<GPU instance>-<compute instance>.

The scheduler writes these names into a claim's allocation from the ResourceSlices, and the
kubelet keys its health cache on them: the slices, Prepare and the health stream must say
them alike, so they are made here only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

__all__ = ["DRIVER", "GpuDevice", "device_name", "gpu_devices", "mig_device_name", "mig_ids"]

# The driver's name: a DNS subdomain, ResourceSlice.spec.driver and the kubelet plugin's name.
DRIVER = "gpu.gpuops.k8s"


def device_name(index: int) -> str:
    return f"gpu-{index}"


def mig_device_name(index: int, gpu_instance: int, compute_instance: int) -> str:
    return f"{device_name(index)}-mig-{gpu_instance}-{compute_instance}"


def mig_ids(mig: dict) -> tuple[int, int] | None:
    """A MIG device's GPU and compute instance IDs, which make its name; None if NVML gave none."""
    gi, ci = mig.get("gpu_instance_id"), mig.get("compute_instance_id")
    return None if gi is None or ci is None else (gi, ci)


@dataclasses.dataclass(frozen=True)
class GpuDevice:
    """One device of our pool, by name: the GPU (its index) it is or is part of, and its UUID
    (a MIG device's own MIG-... UUID, by which the toolkit's CDI spec also names it)."""

    name: str
    index: int
    uuid: str
    # A MIG device's GPU ("" for a whole GPU): its health is the GPU's.
    parent_uuid: str = ""

    @property
    def gpu_uuid(self) -> str:
        """The UUID of the whole GPU this device is or is part of."""
        return self.parent_uuid or self.uuid


def gpu_devices(gpus: Iterable[dict]) -> dict[str, GpuDevice]:
    """Device name -> device, in index order, for GPUs in gpu_info's shape (index, uuid, mig).

    A GPU with MIG enabled is no device of its own: its MIG devices are, in instance order
    (as NVIDIA's driver offers them). One whose instance IDs NVML did not give is left out
    (the slices refuse it too).
    """
    devices = {}
    for gpu in sorted(gpus, key=lambda gpu: gpu["index"]):
        migs = gpu.get("mig") or {}
        if migs.get("current") != "enabled":
            devices[device_name(gpu["index"])] = GpuDevice(
                device_name(gpu["index"]), gpu["index"], gpu["uuid"]
            )
            continue
        found = [(ids, mig) for mig in migs.get("devices") or [] if (ids := mig_ids(mig)) is not None]
        parts = sorted(found, key=lambda pair: pair[0])
        for (gi, ci), mig in parts:
            name = mig_device_name(gpu["index"], gi, ci)
            devices[name] = GpuDevice(name, gpu["index"], mig["uuid"], gpu["uuid"])
    return devices
