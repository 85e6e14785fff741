# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NodePrepareResources and NodeUnprepareResources, pure of gRPC.

Prepare, per claim: a claim the checkpoint holds as completed is answered from it (no GET,
no write: the kubelet repeats calls), its spec written again only where it is gone (a reboot
empties /var/run, and a restarted kubelet prepares every claim again); otherwise GET it
(claims.read_claim: found, allocated, same UID), take the results of our driver in this
node's pool, check our opaque parameters, map each device name to its GPU, then checkpoint
begin -> the time-slice a GpuConfig asks for, on each of its GPUs (dra/timeslice.py) -> the
claim's CDI spec -> checkpoint complete (with each GPU's time-slice). A claim left started by a crash is
prepared again the same way (the spec is replaced whole). Unprepare works from the
checkpoint and the file system alone, because the claim may be gone from the API and the
driver or NVML from the node: remove the claim's spec, set a time-slice the claim set back to
Default unless another prepared claim set one on that GPU (a failure there is logged, never
the claim's: the GPU may be gone), forget the claim. Every claim gets an
answer; one that fails carries its error, and the call itself never fails for it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterable, Mapping

from . import opaque
from .cdi import CdiError, ClaimSpecs
from .checkpoint import COMPLETED, Checkpoint, CheckpointError, PreparedClaim, PreparedDevice
from .claims import (
    AllocatedDevice,
    ClaimError,
    ClaimReader,
    OpaqueConfig,
    our_configs,
    our_devices,
    read_claim,
)
from .devices import DRIVER, GpuDevice, device_name
from .timeslice import DEFAULT, TimeSliceError, TimeSlicer

__all__ = ["Claim", "PrepareResult", "Preparer", "UnknownDevice"]

LOG = logging.getLogger(__name__)
# What one claim's failure can be; anything else is a bug, still answered for that claim only.
CLAIM_FAILURES = (ClaimError, opaque.OpaqueConfigError, CdiError, CheckpointError, TimeSliceError)


class UnknownDevice(ClaimError):
    """The allocation names a device that is no GPU of this node (any more)."""


@dataclasses.dataclass(frozen=True)
class Claim:
    """A claim as the kubelet names it."""

    namespace: str
    uid: str
    name: str


@dataclasses.dataclass(frozen=True)
class PrepareResult:
    """One claim's answer: its devices, or an error."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


class Preparer:
    """Prepares and unprepares claims on one node; safe to share between gRPC threads."""

    def __init__(
        self,
        checkpoint: Checkpoint,
        specs: ClaimSpecs,
        devices: Mapping[str, GpuDevice],
        reader: ClaimReader,
        *,
        pool: str,
        slicer: TimeSlicer,
        driver: str = DRIVER,
    ):
        self.checkpoint = checkpoint
        self.specs = specs
        self.devices = dict(devices)
        self.reader = reader
        self.pool = pool
        self.slicer = slicer
        self.driver = driver
        # Held over every read and write of the checkpoint and the specs: a claim is never
        # prepared and unprepared at once. Never held over the API GET.
        self._lock = threading.Lock()

    def prepare(self, claims: Iterable[Claim]) -> dict[str, PrepareResult]:
        """Claim UID -> its devices or its error, for every claim."""
        return {claim.uid: self._answer(claim) for claim in claims}

    def unprepare(self, claims: Iterable[Claim]) -> dict[str, str]:
        """Claim UID -> "" once unprepared (also when it never was prepared), else the error."""
        return {claim.uid: self._unprepare(claim) for claim in claims}

    def _answer(self, claim: Claim) -> PrepareResult:
        try:
            return PrepareResult(self._prepare(claim))
        except CLAIM_FAILURES as error:
            LOG.warning(
                "preparing claim %s/%s (%s) failed: %s", claim.namespace, claim.name, claim.uid, error
            )
            return PrepareResult(error=str(error))
        except Exception as error:
            LOG.exception("preparing claim %s/%s (%s) failed", claim.namespace, claim.name, claim.uid)
            return PrepareResult(error=f"internal error preparing the claim: {error!r}")

    def _prepare(self, claim: Claim) -> tuple[PreparedDevice, ...]:
        prepared = self._prepared(claim)
        if prepared is not None:
            return prepared
        document = read_claim(self.reader, claim.namespace, claim.name, claim.uid)
        allocated = our_devices(document, self.driver, self.pool)
        configs = [
            (config, opaque.parse(config.parameters, config.where))
            for config in our_configs(document, self.driver)
        ]
        gpus = self._gpus(claim, [device.device for device in allocated])
        slices = _time_slices(allocated, configs, gpus)
        with self._lock:
            started = self.checkpoint.begin(claim.uid, claim.namespace, claim.name)
            if started.state == COMPLETED:  # another call prepared it since the check above
                return started.devices
            for gpu in gpus:
                if slices.get(gpu.name):
                    self.slicer.apply(gpu.uuid, slices[gpu.name])
            ids = self.specs.write(claim.uid, gpus)
            devices = [
                PreparedDevice(
                    self.pool,
                    gpu.name,
                    _requests(allocated, gpu.name),
                    (ids[gpu.name],),
                    slices.get(gpu.name, ""),
                )
                for gpu in gpus
            ]
            done = self.checkpoint.complete(claim.uid, devices)
        LOG.info(
            "prepared claim %s/%s (%s): %s",
            claim.namespace,
            claim.name,
            claim.uid,
            ", ".join(f"{gpu.name} ({gpu.uuid}{_sliced(slices.get(gpu.name))})" for gpu in gpus),
        )
        return done.devices

    def _prepared(self, claim: Claim) -> tuple[PreparedDevice, ...] | None:
        """The devices of a claim the checkpoint holds as completed; None for any other."""
        with self._lock:
            known = self.checkpoint.get(claim.uid)
            if known is None or known.state != COMPLETED:
                return None
            if not self.specs.exists(claim.uid):
                # CDI specs live on a tmpfs (/var/run) and the checkpoint does not: after a
                # reboot the kubelet prepares its claims again, and finds their specs gone
                # (and the GPUs' time-slices back at the driver's default).
                gpus = self._gpus(claim, [device.device for device in known.devices])
                for device in known.devices:
                    if device.time_slice:
                        self.slicer.apply(self.devices[device.device].uuid, device.time_slice)
                self.specs.write(claim.uid, gpus)
                LOG.info(
                    "wrote the lost CDI spec of claim %s/%s (%s)", claim.namespace, claim.name, claim.uid
                )
            return known.devices

    def _gpus(self, claim: Claim, names: list[str]) -> list[GpuDevice]:
        """The GPUs of these device names, each once, in their order."""
        names = list(dict.fromkeys(names))
        unknown = [name for name in names if name not in self.devices]
        if unknown:
            raise UnknownDevice(
                claim.namespace,
                claim.name,
                f"allocates {', '.join(unknown)} of pool {self.pool}, unknown on this node"
                f" (its GPUs: {', '.join(self.devices) or 'none found'})",
            )
        return [self.devices[name] for name in names]

    def _unprepare(self, claim: Claim) -> str:
        try:
            with self._lock:
                # The spec goes even if the checkpoint lost the claim: nothing else removes it.
                self.specs.remove(claim.uid)
                known = self.checkpoint.get(claim.uid)
                if known is not None:
                    self._reset_time_slices(known)
                self.checkpoint.forget(claim.uid)
        except (CdiError, CheckpointError) as error:
            LOG.warning(
                "unpreparing claim %s/%s (%s) failed: %s", claim.namespace, claim.name, claim.uid, error
            )
            return str(error)
        LOG.info("unprepared claim %s/%s (%s)", claim.namespace, claim.name, claim.uid)
        return ""

    def _reset_time_slices(self, leaving: PreparedClaim) -> None:
        """Default again on the GPUs where this claim set a time-slice and no other claim did."""
        kept = {
            device.device
            for other in self.checkpoint.completed()
            if other.uid != leaving.uid
            for device in other.devices
            if device.time_slice
        }
        for device in leaving.devices:
            if not device.time_slice or device.device in kept:
                continue
            gpu = self.devices.get(device.device)
            if gpu is None:  # NVML found it no more: nothing to set back
                LOG.warning(
                    "claim %s: %s is gone, its time-slice is not set back", leaving.uid, device.device
                )
                continue
            try:
                self.slicer.apply(gpu.uuid, DEFAULT)
            except TimeSliceError as error:
                LOG.warning("claim %s: setting the time-slice back failed: %s", leaving.uid, error)


def _time_slices(
    allocated: tuple[AllocatedDevice, ...],
    configs: list[tuple[OpaqueConfig, opaque.GpuConfig]],
    gpus: list[GpuDevice],
) -> dict[str, str]:
    """Device name -> the time-slice interval its configuration asks for (time-sliced ones only).

    A device takes the last configuration in the allocation's order (the class's, then the
    claim's) that names one of its requests or names none, as NVIDIA's driver does. A MIG
    device's is refused: nvidia-smi sets a time-slice per GPU (NVIDIA's API has none for MIG
    devices either).
    """
    slices: dict[str, str] = {}
    for gpu in gpus:
        chosen = _config_for(allocated, configs, gpu.name)
        if chosen is None or chosen.parsed.sharing != "TimeSlicing":
            continue
        if gpu.parent_uuid:
            raise opaque.OpaqueConfigError(
                chosen.where + ".sharing",
                "TimeSlicing",
                f"time-slicing applies to whole GPUs, and {gpu.name} is a MIG device of"
                f" {device_name(gpu.index)}: leave this request's config without sharing",
            )
        slices[gpu.name] = chosen.parsed.interval
    return slices


@dataclasses.dataclass(frozen=True)
class _Chosen:
    where: str
    parsed: opaque.GpuConfig


def _config_for(
    allocated: tuple[AllocatedDevice, ...], configs: list[tuple[OpaqueConfig, opaque.GpuConfig]], device: str
) -> _Chosen | None:
    """The configuration a device takes: the last that names one of its requests or names none."""
    requests = set(_requests(allocated, device))
    chosen = None
    for config, parsed in configs:
        if not config.requests or requests & set(config.requests):
            chosen = _Chosen(config.where, parsed)
    return chosen


def _sliced(interval: str | None) -> str:
    return f", time-slice {interval}" if interval else ""


def _requests(allocated: tuple[AllocatedDevice, ...], device: str) -> tuple[str, ...]:
    """The requests a device serves, each once (one device may serve several requests)."""
    return tuple(dict.fromkeys(result.request for result in allocated if result.device == device))
