# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The kubelet's side of a DRA driver, built from the same protos, over real unix sockets.

What Kubernetes 1.37's plugin watcher (pkg/kubelet/pluginmanager) and DRA manager
(pkg/kubelet/cm/dra) do with a driver's sockets: register() dials the registration socket,
calls GetInfo (1 s), checks the type, chooses the services as the kubelet does (KUBELET_1_37
or KUBELET_1_35: DRAPlugin, the first of the driver's list the kubelet knows;
DRAResourceHealth, the first of the kubelet's list the driver names), dials the endpoint and
calls NotifyRegistrationStatus (5 s). The returned DraPluginClient calls
NodePrepareResources / NodeUnprepareResources (45 s) on the chosen DRAPlugin version and
follows NodeWatchResources on the chosen health version.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import time

import grpc
from followed_stream import FollowedStream

from gpuops_device_plugin.api import pluginregistration_pb2, pluginregistration_pb2_grpc

GET_INFO_TIMEOUT_S = 1
NOTIFY_TIMEOUT_S = 5
CALL_TIMEOUT_S = 45
# Like the kubelet (a Go ClientConn per plugin), no subchannel shared with an earlier
# connection to the same socket that may sit in reconnect backoff.
CHANNEL_OPTIONS = (("grpc.use_local_subchannel_pool", 1),)

# Service as the kubelet names it -> the stub modules generated from its proto
# (scripts/gen-deviceplugin-stubs.py), and the service's name in them.
SERVICES = {
    "v1.DRAPlugin": ("dra_v1", "DRAPlugin"),
    "v1beta1.DRAPlugin": ("dra_v1beta1", "DRAPlugin"),
    "v1.DRAResourceHealth": ("dra_health_v1", "DRAResourceHealth"),
    "v1alpha1.DRAResourceHealth": ("dra_health_v1alpha1", "DRAResourceHealth"),
}


def client_of(service, channel):
    """(the service's pb2 module, a client stub of it on channel)."""
    module, name = SERVICES[service]
    pb2 = importlib.import_module(f"gpuops_device_plugin.api.{module}_pb2")
    grpc_module = importlib.import_module(f"gpuops_device_plugin.api.{module}_pb2_grpc")
    return pb2, getattr(grpc_module, f"{name}Stub")(channel)


@dataclasses.dataclass(frozen=True)
class Kubelet:
    """The services a kubelet release knows, newest first."""

    plugin: tuple[str, ...]
    health: tuple[str, ...]


# pkg/kubelet/cm/dra/plugin/dra_plugin.go: servicesSupportedByKubelet, healthServicesSupportedByKubelet.
KUBELET_1_37 = Kubelet(
    ("v1.DRAPlugin", "v1beta1.DRAPlugin"), ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
)
KUBELET_1_35 = Kubelet(("v1.DRAPlugin", "v1beta1.DRAPlugin"), ("v1alpha1.DRAResourceHealth",))


class RegistrationRefused(Exception):
    """What the kubelet would refuse, with what it would tell the driver."""


def choose(kubelet: Kubelet, supported) -> tuple[str, str]:
    """(DRAPlugin service, DRAResourceHealth service or "") as validateSupportedServices and
    pickHealthService choose them."""
    plugin = next((service for service in supported if service in kubelet.plugin), None)
    if plugin is None:
        raise RegistrationRefused(
            f"none of services supported by the plugin ({list(supported)}) are supported by the kubelet"
        )
    health = next((service for service in kubelet.health if service in supported), "")
    return plugin, health


def register(registration_path, kubelet: Kubelet = KUBELET_1_37, wait_s=10.0) -> DraPluginClient:
    """Register the driver whose registration socket is registration_path, as the watcher does."""
    _wait_for(registration_path, wait_s)
    with grpc.insecure_channel("unix://" + registration_path, options=CHANNEL_OPTIONS) as channel:
        grpc.channel_ready_future(channel).result(timeout=wait_s)
        registration = pluginregistration_pb2_grpc.RegistrationStub(channel)
        info = registration.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=GET_INFO_TIMEOUT_S)
        try:
            if info.type != "DRAPlugin":
                raise RegistrationRefused(f"no handler registered for plugin type: {info.type}")
            plugin, health = choose(kubelet, info.supported_versions)
            client = DraPluginClient(info, plugin, health)
        except RegistrationRefused as refused:
            registration.NotifyRegistrationStatus(
                pluginregistration_pb2.RegistrationStatus(plugin_registered=False, error=str(refused)),
                timeout=NOTIFY_TIMEOUT_S,
            )
            raise
        registration.NotifyRegistrationStatus(
            pluginregistration_pb2.RegistrationStatus(plugin_registered=True), timeout=NOTIFY_TIMEOUT_S
        )
    return client


class DraPluginClient:
    """What the kubelet holds for one registered driver: a connection and its chosen services."""

    def __init__(self, info, plugin_service: str, health_service: str):
        self.info = info
        self.plugin_service = plugin_service
        self.health_service = health_service
        self.channel = grpc.insecure_channel("unix://" + info.endpoint, options=CHANNEL_OPTIONS)
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.pb2, self.stub = client_of(plugin_service, self.channel)
        self.watches: list[HealthWatch] = []

    def prepare(self, *claims):
        """claims: (namespace, uid, name); returns UID -> {"devices": [...], "error": str}."""
        request = self.pb2.NodePrepareResourcesRequest(claims=[self._claim(*claim) for claim in claims])
        response = self.stub.NodePrepareResources(request, timeout=CALL_TIMEOUT_S)
        return {
            uid: {
                "devices": [
                    {
                        "request_names": list(device.request_names),
                        "pool_name": device.pool_name,
                        "device_name": device.device_name,
                        "cdi_device_ids": list(device.cdi_device_ids),
                    }
                    for device in answer.devices
                ],
                "error": answer.error,
            }
            for uid, answer in response.claims.items()
        }

    def unprepare(self, *claims):
        """claims: (namespace, uid, name); returns UID -> error ("" when unprepared)."""
        request = self.pb2.NodeUnprepareResourcesRequest(claims=[self._claim(*claim) for claim in claims])
        response = self.stub.NodeUnprepareResources(request, timeout=CALL_TIMEOUT_S)
        return {uid: answer.error for uid, answer in response.claims.items()}

    def watch_health(self) -> HealthWatch:
        if not self.health_service:
            raise RuntimeError(f"{self.info.name} offers no DRAResourceHealth this kubelet knows")
        watch = HealthWatch(*client_of(self.health_service, self.channel))
        self.watches.append(watch)
        return watch

    def close(self):
        for watch in self.watches:
            watch.close()
        self.channel.close()

    def _claim(self, namespace, uid, name):
        return self.pb2.Claim(namespace=namespace, uid=uid, name=name)


class HealthWatch(FollowedStream):
    """One NodeWatchResources stream; every message replaces the list (as the kubelet's cache)."""

    def __init__(self, pb2, stub):
        def read(message):
            return {
                (d.device.pool_name, d.device.device_name): (pb2.HealthStatus.Name(d.health), d.message)
                for d in message.devices
            }

        super().__init__(
            stub.NodeWatchResources(pb2.NodeWatchResourcesRequest()), read, {}, "NodeWatchResources"
        )

    @property
    def devices(self) -> dict[tuple[str, str], tuple[str, str]]:
        """(pool, device) -> (health, message) of the last list."""
        return self.state


def _wait_for(path, timeout):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no registration socket at {path}")
        time.sleep(0.02)
