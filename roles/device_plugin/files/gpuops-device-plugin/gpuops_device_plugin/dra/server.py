# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The DRA front end's gRPC services: protobuf translation only.

Registration (pluginregistration, on the registration socket) tells the kubelet's plugin
watcher our type, name, endpoint and services. The kubelet 1.37 (pkg/kubelet/cm/dra/plugin)
takes for Prepare the first entry of our list it knows (v1.DRAPlugin; 1.35 and 1.36 too),
and for health the newest DRAResourceHealth it knows that we list (v1; 1.35 and 1.36 open
v1alpha1 whatever we list). On the plugin socket: DRAPlugin v1 and v1beta1, and
DRAResourceHealth v1 and v1alpha1. Each pair is one servicer over the pair's messages, which
have the same names and fields (v1 only adds Device.share_id, which we never set).
Decisions live in prepare (claims) and health (what a device's health is).
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Iterator

from ..api import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from ..health import HealthState
from .health import REFRESH_S, DeviceHealth
from .prepare import Claim, Preparer

__all__ = [
    "PLUGIN_TYPE",
    "SUPPORTED_VERSIONS",
    "HealthStreams",
    "add_plugin_services",
    "add_registration_service",
]

LOG = logging.getLogger(__name__)
PLUGIN_TYPE = "DRAPlugin"
# gRPC services as "<proto package>.<service>", newest first: the kubelet takes the first
# DRAPlugin it knows in our order, and the first DRAResourceHealth of its own order we list.
SUPPORTED_VERSIONS = (
    "v1.DRAPlugin",
    "v1beta1.DRAPlugin",
    "v1.DRAResourceHealth",
    "v1alpha1.DRAResourceHealth",
)


class RegistrationService(pluginregistration_pb2_grpc.RegistrationServicer):
    def __init__(self, driver: str, endpoint: str):
        self.driver = driver
        self.endpoint = endpoint

    def GetInfo(self, request, context):
        return pluginregistration_pb2.PluginInfo(
            type=PLUGIN_TYPE, name=self.driver, endpoint=self.endpoint, supported_versions=SUPPORTED_VERSIONS
        )

    def NotifyRegistrationStatus(self, request, context):
        if request.plugin_registered:
            LOG.info("the kubelet registered DRA driver %s at %s", self.driver, self.endpoint)
        else:
            LOG.error("the kubelet refused DRA driver %s: %s", self.driver, request.error)
        return pluginregistration_pb2.RegistrationStatusResponse()


class DraPluginService:
    """NodePrepareResources and NodeUnprepareResources over one version's messages (pb2)."""

    def __init__(self, preparer: Preparer, pb2):
        self.preparer = preparer
        self.pb2 = pb2

    def NodePrepareResources(self, request, context):
        results = self.preparer.prepare(Claim(c.namespace, c.uid, c.name) for c in request.claims)
        response = self.pb2.NodePrepareResourcesResponse()
        for uid, result in results.items():
            answer = response.claims[uid]  # reading a map entry makes it: every claim is answered
            answer.error = result.error
            for device in result.devices:
                answer.devices.add(
                    request_names=device.request_names,
                    pool_name=device.pool,
                    device_name=device.device,
                    cdi_device_ids=device.cdi_device_ids,
                )
        return response

    def NodeUnprepareResources(self, request, context):
        errors = self.preparer.unprepare(Claim(c.namespace, c.uid, c.name) for c in request.claims)
        response = self.pb2.NodeUnprepareResourcesResponse()
        for uid, error in errors.items():
            response.claims[uid].error = error
        return response


class HealthStreams:
    """Open NodeWatchResources streams: the full list at once, on every change, every refresh_s.

    As the grpc health servicer does: a callback per open stream, removed when it closes;
    HealthState calls it outside its lock, and nothing here holds a lock over a send.
    """

    def __init__(
        self,
        reports: Callable[[], tuple[DeviceHealth, ...]],
        state: HealthState,
        refresh_s: float = REFRESH_S,
    ):
        self.reports = reports
        self.state = state
        self.refresh_s = refresh_s

    def watch(self, context) -> Iterator[tuple[DeviceHealth, ...]]:
        events: queue.Queue = queue.Queue()
        unsubscribe = self.state.subscribe(lambda: events.put(True))
        # Called when the kubelet cancels or the server stops: wakes the wait below at once.
        context.add_callback(lambda: events.put(False))
        try:
            yield self.reports()
            while context.is_active():
                try:
                    if not _drain(events, self.refresh_s):
                        return
                except queue.Empty:
                    pass  # nothing changed: the refresh that keeps devices known
                yield self.reports()
        finally:
            unsubscribe()


class HealthService:
    """DRAResourceHealth over one version's messages (pb2)."""

    def __init__(self, streams: HealthStreams, pb2):
        self.streams = streams
        self.pb2 = pb2

    def NodeWatchResources(self, request, context):
        for reports in self.streams.watch(context):
            yield self.pb2.NodeWatchResourcesResponse(
                devices=[
                    self.pb2.DeviceHealth(
                        device=self.pb2.DeviceIdentifier(pool_name=report.pool, device_name=report.device),
                        health=self.pb2.HealthStatus.Value(report.status),
                        last_updated_time=report.updated,
                        message=report.message,
                    )
                    for report in reports
                ]
            )


def add_registration_service(server, driver: str, endpoint: str) -> None:
    """Serve Registration on server (the registration socket's)."""
    pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(
        RegistrationService(driver, endpoint), server
    )


def add_plugin_services(server, preparer: Preparer, streams: HealthStreams) -> None:
    """Serve every version of DRAPlugin and DRAResourceHealth on server (the plugin socket's)."""
    dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(DraPluginService(preparer, dra_v1_pb2), server)
    dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(DraPluginService(preparer, dra_v1beta1_pb2), server)
    dra_health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(
        HealthService(streams, dra_health_v1_pb2), server
    )
    dra_health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(
        HealthService(streams, dra_health_v1alpha1_pb2), server
    )


def _drain(events: queue.Queue, timeout: float) -> bool:
    """Wait for an event, then take every one queued: False if the stream must end.

    Raises queue.Empty when none came within timeout. Changes that came together are
    answered by one list, which holds them all.
    """
    keep = events.get(timeout=timeout)
    while keep:
        try:
            keep = events.get_nowait()
        except queue.Empty:
            return True
    return False
