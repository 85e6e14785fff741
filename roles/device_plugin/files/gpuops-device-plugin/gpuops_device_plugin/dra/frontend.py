# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The DRA front end as the daemon runs it (`frontEnd: dra`): what daemon.Plugin is for the
device plugin, over the same discovery and health code.

One process serves one front end, chosen by configuration, never both. A GPU offered
through the device plugin (nvidia.com/gpu) and through DRA (a ResourceSlice of driver
gpu.gpuops.k8s) on one node would be handed to two pods at once: the kubelet's device
manager and its DRA manager keep separate books, and nothing reconciles them (KEP-5004 keeps
one mechanism per resource and node; NVIDIA says the same of its plugin and DRA driver).
A process serving both would have to split the node's GPUs between them, which no
configuration we know asks for, and the device_plugin role refuses a node configured for
both. One front end per process also keeps each lifecycle plain: the device plugin's
re-registration on kubelet.sock, DRA's checkpoint, slices and plugin-watcher sockets.

Started in this order: discovery (as the device plugin does), the health watcher into a
HealthState, the Preparer over the on-disk checkpoint and the CDI directory, the kubernetes
client from a kubeconfig (the kubelet's own by default: the Node authorizer lets a node
manage its own ResourceSlices and read its pods' claims, so the driver needs no RBAC), the
ResourceSlice sync, then the sockets: the plugin socket, the registration socket last.

Unprepare must work with the driver, NVML or the API gone (claims prepared before a driver
upgrade stay on the node until the kubelet unprepares them): when NVML is not usable the
front end still serves, offering no device, publishing no slice and answering Prepare with
an error per claim.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

from ..health import HealthState, HealthWatcher
from . import claims as claims_mod
from .cdi import ClaimSpecs
from .checkpoint import Checkpoint
from .devices import DRIVER, gpu_devices
from .endpoint import dra_endpoint
from .health import report
from .node_status import clear_stale
from .prepare import Preparer
from .server import HealthStreams
from .timeslice import TimeSlicer

__all__ = ["CHECKPOINT_NAME", "DraFrontEnd", "FrontEndError", "SliceSync", "SliceWatch", "node_name"]

LOG = logging.getLogger(__name__)
CHECKPOINT_NAME = "checkpoint.json"


class FrontEndError(Exception):
    """The DRA front end cannot start on this node (its configuration does not fit it)."""


def node_name(config) -> str:
    """The Node this daemon serves: configured, else the host name as the kubelet takes it."""
    return config.dra_node_name or socket.gethostname().lower()


def kube_clients(kubeconfig: str):
    """(ResourceV1Api, CoreV1Api) with the credentials of kubeconfig."""
    # Imported here: the device plugin front end never needs the client (about a second).
    from kubernetes import client, config  # noqa: PLC0415

    try:
        # persist_config False: never write a refreshed token back into the kubelet's file.
        api_client = config.new_client_from_config(config_file=kubeconfig, persist_config=False)
    except Exception as error:  # the loader raises ConfigException, OSError, yaml errors
        raise FrontEndError(f"kubeconfig {kubeconfig}: cannot be used: {error}") from error
    return client.ResourceV1Api(api_client), client.CoreV1Api(api_client)


class DraFrontEnd:
    """Everything a reload rebuilds in dra mode; the same shape as daemon.Plugin."""

    def __init__(self, config, nvml, metrics, *, nvml_usable: bool = True, clients=kube_clients):
        self.config = config
        self.nvml = nvml
        self.metrics = metrics
        self.nvml_usable = nvml_usable
        self.clients = clients
        self.node = node_name(config)
        self.health = HealthState()
        self.watcher = None
        self.sync = None
        self.slice_watch = None
        self.endpoint = None
        # The device plugin front end's: none here (the daemon's loop reads them).
        self.endpoints: list = []

    @property
    def plugin_dir(self) -> str:
        return os.path.join(self.config.dra_plugins_dir, DRIVER)

    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.plugin_dir, CHECKPOINT_NAME)

    def socket_names(self) -> set[str]:
        return set()

    def start(self) -> None:
        facts = self.nvml.discover() if self.nvml_usable else {"gpus": [], "lost_gpus": [], "links": []}
        for lost in facts["lost_gpus"]:
            LOG.warning("GPU %s does not answer and is not offered: %s", lost["index"], lost["error"])
        devices = gpu_devices(facts["gpus"])
        resource_api, core_api = self.clients(self.config.dra_kubeconfig)
        os.makedirs(self.plugin_dir, mode=0o750, exist_ok=True)
        checkpoint = Checkpoint.load(self.checkpoint_path)
        for claim in checkpoint.stale():
            # Prepared again (its spec replaced whole) when the kubelet asks, or forgotten
            # when it unprepares: nothing to roll back before either.
            LOG.warning(
                "claim %s/%s (%s) was cut off while being prepared", claim.namespace, claim.name, claim.uid
            )
        preparer = Preparer(
            checkpoint,
            ClaimSpecs(self.config.dra_cdi_dir, self.config.dra_toolkit_spec),
            devices,
            claims_mod.api_reader(resource_api),
            pool=self.node,
            slicer=TimeSlicer(self.config.dra_nvidia_smi),
        )
        LOG.info(
            "DRA driver %s on node %s: %s",
            DRIVER,
            self.node,
            ", ".join(f"{name} ({device.uuid})" for name, device in devices.items()) or "no GPU offered",
        )
        watched = self.config.health_enabled and bool(facts["gpus"])
        if watched:
            self.watcher = HealthWatcher(
                self.nvml, facts["gpus"], self.health, self.config, metrics=self.metrics
            )
            self.watcher.start()
        if self.nvml_usable:
            from .publisher import SlicePublisher  # noqa: PLC0415 - imports the kubernetes client

            publisher = SlicePublisher(
                resource_api, core_api, self.node, facts=facts, unhealthy=self.health.unhealthy
            )
            device_plugins_dir = os.path.join(os.path.dirname(self.config.dra_plugins_dir), "device-plugins")
            self.sync = SliceSync(
                publisher,
                self.health,
                self.config.dra_resync_seconds,
                chores=[
                    lambda: clear_stale(
                        core_api, self.node, self.config.dra_extended_resource, device_plugins_dir
                    )
                ],
            )
            self.sync.start()
            self.slice_watch = SliceWatch(
                resource_api, self.node, self.sync.wake.set, self.config.dra_resync_seconds
            )
            self.slice_watch.start()
        streams = HealthStreams(
            lambda: report(devices, self.node, self.health, time.time(), watched=watched), self.health
        )
        self.endpoint = dra_endpoint(
            preparer,
            streams,
            plugin_path=os.path.join(self.plugin_dir, "dra.sock"),
            registration_path=os.path.join(self.config.dra_registry_dir, f"{DRIVER}-reg.sock"),
        )
        self.endpoint.serve()

    def stop(self) -> None:
        # Registration socket first (endpoint.stop): the kubelet stops calling before the
        # rest goes. The slices stay: the kubelet deletes them 30 s after the last plugin
        # of the driver went, and a restart within that time keeps them.
        if self.endpoint is not None:
            self.endpoint.stop()
        if self.slice_watch is not None:
            self.slice_watch.stop()
        if self.sync is not None:
            self.sync.stop()
        if self.watcher is not None:
            self.watcher.stop()


class SliceWatch(threading.Thread):
    """Wakes the SliceSync as soon as one of this node's slices of this driver is deleted
    (the kubelet wipes them when it restarts or loses the plugin for 30 s), instead of at
    the next resync. A broken watch is started again after retry_s."""

    # Short watches: stop() takes effect when the server ends one (the client blocks reading).
    WATCH_SECONDS = 60

    def __init__(self, resource_api, node: str, on_delete, retry_s: float):
        super().__init__(name="slice-watch", daemon=True)
        self.resource_api = resource_api
        self.selector = f"spec.nodeName={node},spec.driver={DRIVER}"
        self.on_delete = on_delete
        self.retry_s = retry_s
        self.stopping = threading.Event()
        self.watch = None

    def stop(self) -> None:
        self.stopping.set()
        if self.watch is not None:
            self.watch.stop()

    def run(self) -> None:
        from kubernetes import watch  # noqa: PLC0415 - the device plugin front end never needs it

        last_error = None
        while not self.stopping.is_set():
            self.watch = watch.Watch()
            try:
                for event in self.watch.stream(
                    self.resource_api.list_resource_slice,
                    field_selector=self.selector,
                    timeout_seconds=self.WATCH_SECONDS,
                ):
                    if event.get("type") == "DELETED" and not self.stopping.is_set():
                        LOG.info("a ResourceSlice of this node was deleted: publishing again")
                        self.on_delete()
                last_error = None
            except Exception as error:  # the client raises ApiException, urllib3 and socket errors
                if self.stopping.is_set():
                    return  # the daemon's stop closed the connection under the read
                if str(error) != last_error:
                    LOG.warning(
                        "cannot watch the node's ResourceSlices (tried again every %gs): %s",
                        self.retry_s,
                        error,
                    )
                last_error = str(error)
                self.stopping.wait(self.retry_s)


class SliceSync(threading.Thread):
    """Reconciles the node's ResourceSlices at start, on each health change, when the
    SliceWatch sees one deleted and every resync_s; an API that fails is logged and tried
    again at the next of those. chores run after each reconcile, their errors logged."""

    def __init__(self, publisher, health: HealthState, resync_s: float, chores=()):
        super().__init__(name="slices", daemon=True)
        self.publisher = publisher
        self.chores = list(chores)
        self.resync_s = resync_s
        self.stopping = threading.Event()
        self.wake = threading.Event()
        self.unsubscribe = health.subscribe(self.wake.set)
        self.last_error = None
        self.reported: set[str] = set()

    def stop(self) -> None:
        self.unsubscribe()
        self.stopping.set()
        self.wake.set()
        self.join(timeout=15)

    def run(self) -> None:
        while not self.stopping.is_set():
            self.wake.clear()
            self.reconcile()
            for chore in self.chores:
                try:
                    chore()
                except Exception as error:  # an API error: tried again at the next reconcile
                    LOG.warning("%s", error)
            self.wake.wait(self.resync_s)

    def reconcile(self) -> None:
        from .publisher import SliceApiError  # noqa: PLC0415 - imports the kubernetes client

        try:
            result = self.publisher.reconcile()
        except SliceApiError as error:
            # Logged once per distinct failure, not every resync while the API is away.
            if str(error) != self.last_error:
                LOG.error(
                    "cannot publish the node's ResourceSlices (tried again every %gs): %s",
                    self.resync_s,
                    error,
                )
            self.last_error = str(error)
            return
        except Exception:
            LOG.exception("publishing the node's ResourceSlices failed")
            return
        if self.last_error is not None:
            LOG.info("the API answers again: the node's ResourceSlices are published")
        self.last_error = None
        if result.changed:
            LOG.info(
                "ResourceSlices at generation %d: created %s, updated %s, deleted %s",
                result.generation,
                ", ".join(result.created) or "none",
                ", ".join(result.updated) or "none",
                ", ".join(result.deleted) or "none",
            )
        for missing in result.not_stored:
            if str(missing) not in self.reported:
                LOG.warning("%s", missing)
                self.reported.add(str(missing))
