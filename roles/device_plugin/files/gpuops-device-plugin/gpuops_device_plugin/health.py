# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Device health: NVML events and re-probes on one thread, with recovery.

A critical XID that is not ignored, or a double-bit ECC error, makes the device
unhealthy; so does a GPU that stops answering (lost, fallen off the bus), one that NVML
no longer lists by its UUID, and one whose device node (/dev/nvidia<minor>) is gone or is
no longer that character device: on a real driver NVML may go on listing a GPU whose node
is gone, which no container can then use. Unlike NVIDIA's plugin, a device comes back:
once a re-probe finds nothing wrong and no fault was seen for the quiet period, it is
Healthy again. Every change is logged and counted.

Nothing here knows who serves the devices: the device plugin and the DRA driver both
read HealthState.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import stat as stat_mod
import threading
import time
from collections.abc import Callable

from .discovery import LOST, NOT_LISTED, ProbeError

LOG = logging.getLogger(__name__)
WAIT_MS = 250  # how long one event wait blocks; bounds how fast stop() takes effect
# A re-probe's fault kind besides NVML's (LOST, NOT_LISTED), as health_events counts them;
# events count as "xid" and "ecc_double_bit".
DEVICE_NODE = "device_node"


@dataclasses.dataclass(frozen=True)
class Fault:
    kind: str  # NOT_LISTED, LOST or DEVICE_NODE
    reason: str  # what HealthState records and the log says


def node_problem(path: str, minor: int, stat: Callable[[str], os.stat_result] = os.stat) -> str | None:
    """Why path is not the GPU's device node (character device, this minor), or None."""
    try:
        info = stat(path)
    except FileNotFoundError:
        return "%s is gone" % path
    except OSError as error:
        return "%s cannot be read: %s" % (path, error.strerror)
    if not stat_mod.S_ISCHR(info.st_mode):
        return "%s is not a character device" % path
    if os.minor(info.st_rdev) != minor:
        return "%s is character device %d:%d, not minor %d" % (
            path,
            os.major(info.st_rdev),
            os.minor(info.st_rdev),
            minor,
        )
    return None


def probe_fault(uuid: str, answer: ProbeError | None, node: str | None) -> Fault | None:
    """One re-probe's verdict on a GPU: NVML's answer (discovery.Nvml.probe) and the problem
    with its device node (node_problem, None when fine or not checked). NVML's answer wins:
    a GPU NVML cannot reach says more than its node does."""
    if answer is not None and answer.kind == NOT_LISTED:
        return Fault(NOT_LISTED, "NVML no longer lists GPU %s: %s" % (uuid, answer.message))
    if answer is not None:
        return Fault(LOST, "GPU %s does not answer: %s" % (uuid, answer.message))
    if node is not None:
        return Fault(DEVICE_NODE, "device node of GPU %s: %s" % (uuid, node))
    return None


def watched_nodes(
    gpus: list[dict], dev_dir: str, stat: Callable[[str], os.stat_result] = os.stat
) -> dict[str, tuple[str, int]]:
    """{GPU UUID: (device node path, minor)} for the nodes the re-probes check.

    Where none of the GPUs' nodes is under dev_dir, they live elsewhere (or nowhere, as on a
    test machine) and none is checked. Where some are, a GPU whose node is missing is
    broken already: it is checked, and its first re-probe makes it unhealthy (a daemon
    restarted or reloaded after the node went must not take the GPU back). A GPU whose
    minor number NVML did not give has no node to check. What is not checked is logged once.
    """
    nodes = {
        g["uuid"]: (os.path.join(dev_dir, "nvidia%d" % g["minor_number"]), g["minor_number"])
        for g in gpus
        if g.get("minor_number") is not None
    }
    unnumbered = [g["uuid"] for g in gpus if g.get("minor_number") is None]
    if unnumbered:
        LOG.warning(
            "NVML gave no minor number for GPU %s: their device nodes are not checked",
            ", ".join(unnumbered),
        )
    if nodes and not any(_exists(path, stat) for path, _minor in nodes.values()):
        LOG.warning(
            "none of the GPUs' device nodes (%s) exists: device nodes are not checked "
            "(nvidiaDevRoot says where the host's /dev is)",
            ", ".join(path for path, _minor in nodes.values()),
        )
        return {}
    return nodes


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
        self,
        nvml,
        gpus: list[dict],
        state: HealthState,
        config,
        *,
        dev_dir: str = "/dev",
        metrics=None,
        clock=time.monotonic,
        stat: Callable[[str], os.stat_result] = os.stat,
    ):
        """gpus: as discovered (gpu_info's shape); dev_dir: where their nvidia<minor> nodes are."""
        super().__init__(name="health", daemon=True)
        self.nvml = nvml
        self.gpus = {g["uuid"]: g for g in gpus}
        self.state = state
        self.config = config
        self.metrics = metrics
        self.clock = clock
        self.stat = stat
        self.nodes = watched_nodes(gpus, dev_dir, stat)
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
            node = self.nodes.get(uuid)
            problem = None if node is None else node_problem(*node, stat=self.stat)
            fault = probe_fault(uuid, self.nvml.probe(uuid), problem)
            devices = self._affected(gpu, None)  # MIG devices share their GPU's node
            if fault is not None:
                self.last_fault[uuid] = now
                if self.state.mark(devices, False, fault.reason) and self.metrics:
                    self.metrics.health_event(fault.kind, "", "unhealthy")
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


def _exists(path, stat):
    try:
        stat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # there, if unreadable: node_problem says what is wrong with it
    return True
