# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Device health: NVML events and re-probes on one thread, with recovery.

A critical XID that is not ignored, or a double-bit ECC error, makes the device
unhealthy; so does a GPU that stops answering (lost, fallen off the bus). Unlike NVIDIA's
plugin, a device comes back: once a re-probe succeeds and no fault was seen for the quiet
period, it is Healthy again. Every change is logged and counted.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

LOG = logging.getLogger(__name__)
WAIT_MS = 250  # how long one event wait blocks; bounds how fast stop() takes effect


class HealthState:
    """Unhealthy physical devices (GPU or MIG UUIDs) by reason; listeners hear of changes.

    State lives under one lock that is never held while a listener runs (a listener sends
    on a gRPC stream).
    """

    def __init__(self):
        self._lock = threading.Lock()
        self._unhealthy: dict[str, str] = {}
        self._listeners: list[Callable[[], None]] = []

    def healthy(self, uuid: str) -> bool:
        with self._lock:
            return uuid not in self._unhealthy

    def unhealthy(self) -> dict[str, str]:
        with self._lock:
            return dict(self._unhealthy)

    def mark(self, uuids: list[str], healthy: bool, reason: str) -> list[str]:
        """Set health; return the UUIDs that changed (listeners run only if any did)."""
        with self._lock:
            changed = [u for u in uuids if (u in self._unhealthy) == healthy]
            for uuid in changed:
                if healthy:
                    del self._unhealthy[uuid]
                else:
                    self._unhealthy[uuid] = reason
            listeners = list(self._listeners)
        for uuid in changed:
            LOG.warning("device %s is now %s: %s", uuid, "Healthy" if healthy else "Unhealthy", reason)
        if changed:
            for listener in listeners:
                listener()
        return changed

    def subscribe(self, listener: Callable[[], None]) -> Callable[[], None]:
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe():
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe


class HealthWatcher(threading.Thread):
    """Waits on the NVML event set and re-probes every GPU each probe interval."""

    def __init__(
        self, nvml, gpus: list[dict], state: HealthState, config, *, metrics=None, clock=time.monotonic
    ):
        super().__init__(name="health", daemon=True)
        self.nvml = nvml
        self.gpus = {g["uuid"]: g for g in gpus}
        self.state = state
        self.config = config
        self.metrics = metrics
        self.clock = clock
        self.stopping = threading.Event()
        self.last_fault: dict[str, float] = {}

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=5)

    def run(self) -> None:
        try:
            for uuid in self.nvml.watch(list(self.gpus)):
                LOG.warning("GPU %s does not deliver NVML events; its health comes from re-probes only", uuid)
            next_probe = self.clock()
            while not self.stopping.is_set():
                event = self.nvml.wait(WAIT_MS)
                if event is not None:
                    self.on_event(event)
                if self.clock() >= next_probe:
                    self.probe_all()
                    next_probe = self.clock() + self.config.probe_interval_seconds
        except Exception:
            LOG.exception("health watcher stopped on an error; marking every GPU unhealthy")
            self.state.mark(self._all_uuids(), False, "health watcher failed")

    def on_event(self, event) -> None:
        label = "XID %s" % event.xid if event.kind == "xid" else "double-bit ECC error"
        if event.kind == "xid" and event.xid in self.config.ignored_xids:
            LOG.info(
                "%s on GPU %s ignored (ignored XIDs: %s)",
                label,
                event.gpu_uuid,
                sorted(self.config.ignored_xids),
            )
            self._count(event, "ignored")
            return
        gpu = self.gpus.get(event.gpu_uuid)
        targets = [gpu] if gpu is not None else list(self.gpus.values())
        uuids = []
        for target in targets:
            self.last_fault[target["uuid"]] = self.clock()
            uuids.extend(self._affected(target, event.gpu_instance_id))
        self.state.mark(uuids, False, "%s on GPU %s" % (label, event.gpu_uuid or "unknown"))
        self._count(event, "unhealthy")

    def probe_all(self) -> None:
        now = self.clock()
        for uuid, gpu in self.gpus.items():
            error = self.nvml.probe(uuid)
            devices = self._affected(gpu, None)
            if error is not None:
                self.last_fault[uuid] = now
                if (
                    self.state.mark(devices, False, "GPU %s does not answer: %s" % (uuid, error))
                    and self.metrics
                ):
                    self.metrics.health_event("lost", "", "unhealthy")
                continue
            if not self.config.recovery_enabled or uuid not in self.last_fault:
                continue
            if now - self.last_fault[uuid] >= self.config.recovery_quiet_seconds:
                del self.last_fault[uuid]
                quiet = self.config.recovery_quiet_seconds
                recovered = self.state.mark(
                    devices, True, "re-probe succeeded after %.1f s without faults" % quiet
                )
                if recovered and self.metrics:
                    self.metrics.health_event("recovery", "", "healthy")

    def _affected(self, gpu, gpu_instance_id):
        migs = gpu.get("mig", {}).get("devices") or []
        if gpu_instance_id is not None and migs:
            hit = [m["uuid"] for m in migs if m.get("gpu_instance_id") == gpu_instance_id]
            if hit:
                return hit
        return [gpu["uuid"]] + [m["uuid"] for m in migs]

    def _all_uuids(self):
        return [u for gpu in self.gpus.values() for u in self._affected(gpu, None)]

    def _count(self, event, action):
        if self.metrics:
            self.metrics.health_event(event.kind, "" if event.xid is None else str(event.xid), action)
