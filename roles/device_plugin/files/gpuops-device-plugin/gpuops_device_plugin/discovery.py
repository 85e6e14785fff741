# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVML adapter for the daemon: the node's GPUs, and the calls the health watcher makes.

Discovery itself is gpu_info's (`_nvml_discovery.discover`, shared with the gpuops.k8s
collection), so the facts Ansible reports and the devices the kubelet gets cannot drift.
This module adds what only a long-running process needs: one NVML session for the
daemon's life, an event set, and a re-probe by UUID.
"""

from __future__ import annotations

import contextlib
import dataclasses

from . import _nvml_discovery as nvml_discovery
from ._nvml_discovery import DiscoveryError, NvmlInitFailed, NvmlLibraryNotFound

pynvml = nvml_discovery.pynvml

__all__ = [
    "LOST",
    "NOT_LISTED",
    "DiscoveryError",
    "Event",
    "Nvml",
    "NvmlInitFailed",
    "NvmlLibraryNotFound",
    "ProbeError",
]

NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId of an event on a whole GPU


# ProbeError kinds: NVML has no GPU with that UUID any more, or has it and it does not answer.
NOT_LISTED, LOST = "not_listed", "lost"


@dataclasses.dataclass(frozen=True)
class ProbeError:
    kind: str  # NOT_LISTED or LOST
    message: str  # NVML's error text


@dataclasses.dataclass(frozen=True)
class Event:
    gpu_uuid: str | None
    kind: str  # "xid" or "ecc_double_bit"
    xid: int | None
    gpu_instance_id: int | None


class Nvml:
    """One NVML session, opened by start() and closed by stop()."""

    def __init__(self, sysfs_root: str = "/sys"):
        self.sysfs_root = sysfs_root
        self._session = None
        self._event_set = None

    def start(self) -> None:
        if pynvml is None:
            raise NvmlLibraryNotFound(
                "nvidia-ml-py (pynvml) is not installed in the daemon's Python environment"
            )
        self._session = nvml_discovery.NvmlSession()
        self._session.__enter__()

    def stop(self) -> None:
        if self._event_set is not None:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(self._event_set)
            self._event_set = None
        if self._session is not None:
            self._session.__exit__(None, None, None)
            self._session = None

    def discover(self) -> dict:
        """gpu_info's view: {system, gpus, lost_gpus, links, nvswitch}."""
        return nvml_discovery.discover(self.sysfs_root)

    # Health watcher calls; all of them run on the health thread.

    def watch(self, uuids: list[str]) -> list[str]:
        """Register XID and double-bit ECC events for these GPUs; return those that could not be."""
        wanted = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
        self._event_set = pynvml.nvmlEventSetCreate()
        failed = []
        for uuid in uuids:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
                supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
                pynvml.nvmlDeviceRegisterEvents(handle, wanted & supported, self._event_set)
            except pynvml.NVMLError:
                failed.append(uuid)
        return failed

    def wait(self, timeout_ms: int) -> Event | None:
        """The next event, or None when the timeout passes first."""
        try:
            data = pynvml.nvmlEventSetWait_v2(self._event_set, timeout_ms)
        except pynvml.NVMLError as error:
            if getattr(error, "value", None) == pynvml.NVML_ERROR_TIMEOUT:
                return None
            raise
        try:
            uuid = nvml_discovery._text(pynvml.nvmlDeviceGetUUID(data.device))
        except pynvml.NVMLError:
            uuid = None  # The GPU that raised it no longer answers.
        kind = "xid" if data.eventType == pynvml.nvmlEventTypeXidCriticalError else "ecc_double_bit"
        instance = None if data.gpuInstanceId == NO_INSTANCE else data.gpuInstanceId
        return Event(uuid, kind, int(data.eventData) if kind == "xid" else None, instance)

    def probe(self, uuid: str) -> ProbeError | None:
        """None when the GPU answers; NOT_LISTED when NVML finds no GPU with this UUID; else LOST."""
        try:
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except pynvml.NVMLError as error:
            kind = NOT_LISTED if getattr(error, "value", None) == pynvml.NVML_ERROR_NOT_FOUND else LOST
            return ProbeError(kind, str(error))
        try:
            pynvml.nvmlDeviceGetPciInfo(handle)
            pynvml.nvmlDeviceGetMemoryInfo(handle)
        except pynvml.NVMLError as error:
            return ProbeError(LOST, str(error))
        return None
