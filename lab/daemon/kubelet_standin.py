# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The kubelet's side of the device plugin API, built from the same v1beta1 api.proto.

A stand-in until the lab has a real kubelet (issue 5), doing what the kubelet's device
manager does: serve Registration on <dir>/kubelet.sock; on Register, dial the plugin's
endpoint back (10 s timeout), call GetDevicePluginOptions, check it matches the options
sent in Register, answer, then follow ListAndWatch (every message replaces the device
list). restart() does what a new kubelet does: delete every socket in the directory (no
other file) and create kubelet.sock again; a Register still answering is let finish
first (REGISTER_GRACE), as it would be by a kubelet restarted seconds later rather than
milliseconds after accepting it.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from concurrent import futures

import grpc
from followed_stream import FollowedStream

from gpuops_device_plugin.api import api_pb2, api_pb2_grpc

KUBELET_SOCKET = "kubelet.sock"
# How long restart() lets a Register in flight finish: the handler dials the plugin back
# (10 s) and asks its options (10 s). Cancelling it instead fails the plugin's Register
# after the stand-in has counted it: NVIDIA's plugin (v0.19.1 and v0.20.0) then arms a 30 s restart
# timer that no later successful registration disarms, and restarts 30 s on, mid-run.
REGISTER_GRACE = 20.0
# How long a plugin may take to register: under make test's load the daemon's first Register
# after a restart can time out (its own 10 s bound) and be retried 5 s later, so two
# attempts fit. A plugin that never registers still fails the wait.
REGISTER_WAIT = 30.0


class PluginClient:
    """What the kubelet holds for one registered resource."""

    def __init__(self, plugin_dir, request):
        self.resource = request.resource_name
        self.endpoint = os.path.join(plugin_dir, request.endpoint)
        self.registered_options = request.options
        # Like the kubelet (a Go ClientConn per plugin), no subchannel shared with an
        # earlier connection to the same socket that may sit in reconnect backoff.
        self.channel = grpc.insecure_channel(
            "unix://" + self.endpoint, options=(("grpc.use_local_subchannel_pool", 1),)
        )
        grpc.channel_ready_future(self.channel).result(timeout=10)
        self.stub = api_pb2_grpc.DevicePluginStub(self.channel)
        self.options = self.stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=10)
        self._devices = FollowedStream(
            self.stub.ListAndWatch(api_pb2.Empty()),
            lambda message: {d.ID: d.health for d in message.devices},
            {},
            self.resource,
        )

    @property
    def devices(self) -> dict[str, str]:
        """The last device list: device ID -> Healthy or Unhealthy."""
        return self._devices.state

    def wait(self, predicate, timeout=10.0):
        """Wait until predicate(devices) holds; return the devices or raise TimeoutError."""
        return self._devices.wait(lambda followed: predicate(followed.state), timeout)

    def healthy(self):
        return sorted(i for i, h in self.devices.items() if h == "Healthy")

    def allocate(self, *containers):
        request = api_pb2.AllocateRequest()
        for ids in containers:
            request.container_requests.add(devices_ids=list(ids))
        return self.stub.Allocate(request, timeout=10)

    def preferred(self, available, must_include, size):
        request = api_pb2.PreferredAllocationRequest()
        request.container_requests.add(
            available_deviceIDs=list(available),
            must_include_deviceIDs=list(must_include),
            allocation_size=size,
        )
        response = self.stub.GetPreferredAllocation(request, timeout=10)
        return list(response.container_responses[0].deviceIDs)

    def close(self):
        self._devices.close()
        self.channel.close()


class _Registration(api_pb2_grpc.RegistrationServicer):
    def __init__(self, kubelet):
        self.kubelet = kubelet

    def Register(self, request, context):
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unsupported version %r" % request.version)
        try:
            client = PluginClient(self.kubelet.plugin_dir, request)
        except grpc.FutureTimeoutError:
            context.abort(grpc.StatusCode.UNAVAILABLE, "cannot dial %s" % request.endpoint)
        if client.options != request.options:
            client.close()
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                "options in Register (%s) differ from GetDevicePluginOptions (%s)"
                % (request.options, client.options),
            )
        self.kubelet.add(client)
        return api_pb2.Empty()


class KubeletStandin:
    def __init__(self, plugin_dir):
        self.plugin_dir = plugin_dir
        self.server = None
        self.clients: dict[str, PluginClient] = {}
        self.registrations = 0
        self.registered = threading.Condition()
        self.started_at = self.registered_at = None  # perf_counter() of the last start / Register

    def start(self):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port("unix://" + os.path.join(self.plugin_dir, KUBELET_SOCKET))
        server.start()
        self.server = server
        self.started_at = time.perf_counter()

    def add(self, client):
        with self.registered:
            old = self.clients.get(client.resource)
            self.clients[client.resource] = client
            self.registrations += 1
            self.registered_at = time.perf_counter()
            self.registered.notify_all()
        if old is not None:
            old.close()

    def wait_registered(self, resource, after=0, timeout=REGISTER_WAIT) -> PluginClient:
        """Wait for a registration of resource numbered above `after` (see .registrations)."""
        deadline = time.monotonic() + timeout
        with self.registered:
            while resource not in self.clients or self.registrations <= after:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        "%s did not register (registered: %s)" % (resource, sorted(self.clients))
                    )
                self.registered.wait(remaining)
            return self.clients[resource]

    def stop(self, grace=0):
        """Stop serving; Register calls still running get `grace` seconds, then are cancelled."""
        if self.server is not None:
            self.server.stop(grace=grace).wait()
            self.server = None
        for client in self.clients.values():
            client.close()
        self.clients = {}

    def restart(self, while_down=None):
        """What a kubelet restart looks like to plugins: sockets deleted, kubelet.sock re-created.

        while_down(), if given, runs between the two: a test waits there for what a plugin
        does while no kubelet answers.
        """
        self.stop(grace=REGISTER_GRACE)
        for name in os.listdir(self.plugin_dir):
            path = os.path.join(self.plugin_dir, name)
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        if while_down is not None:
            while_down()
        self.start()
