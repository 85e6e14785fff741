# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Serve a resource on its socket, register it with the kubelet, and watch for restarts.

Order matters: serve first, then Register, because the kubelet's Register handler dials
back and calls GetDevicePluginOptions before it answers. A new kubelet deletes every
socket in the plugin directory and re-creates kubelet.sock; we hear that through inotify
and serve and register again. We only ever remove our own socket.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
from concurrent import futures

import grpc
from inotify_simple import INotify
from inotify_simple import flags as inotify_flags

from .api import api_pb2, api_pb2_grpc

LOG = logging.getLogger(__name__)
KUBELET_SOCKET = "kubelet.sock"
API_VERSION = "v1beta1"
REGISTER_TIMEOUT_S = 10
# grpcio shares subchannels between channels to the same target by default; after a
# kubelet restart the shared one may sit in reconnect backoff (growing to minutes) and
# hold up a fresh Register. A channel per registration with its own pool dials at once.
CHANNEL_OPTIONS = (("grpc.use_local_subchannel_pool", 1),)


def socket_identity(path: str) -> tuple[int, int, int]:
    """Which file path names now: device, inode number and change time.

    The inode number alone is not enough: ext4 hands a deleted socket's number to the next
    file created, so a restarted kubelet's kubelet.sock often has its predecessor's number.
    Its change time, set when it was created, tells the two apart. Raises FileNotFoundError.
    """
    status = os.stat(path)
    return status.st_dev, status.st_ino, status.st_ctime_ns


class Endpoint:
    """One resource's gRPC server on <plugin dir>/<socket name>."""

    def __init__(self, service, plugin_dir: str, metrics):
        self.service = service
        self.plugin_dir = plugin_dir
        self.metrics = metrics
        self.server = None
        self.identity = None  # socket_identity() of the socket our server listens on
        self.generation = 0
        self.registered_with = None  # socket_identity() of the kubelet.sock we last registered with

    @property
    def socket_name(self) -> str:
        return self.service.resource.socket_name

    @property
    def path(self) -> str:
        return os.path.join(self.plugin_dir, self.socket_name)

    def serve(self) -> None:
        """(Re)start the server; the socket appears under its final name only when it answers.

        grpc unlinks a server's socket path some time after stop(), possibly after a new
        server bound the same path. So each server binds a unique temporary name and the
        socket is renamed into place: an old server's late unlink hits a name nobody uses.
        """
        self.stop()
        self.generation += 1
        temporary = os.path.join(
            self.plugin_dir, ".%s.%d.%d" % (self.socket_name, os.getpid(), self.generation)
        )
        self.service.stopping.clear()
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix=self.socket_name))
        api_pb2_grpc.add_DevicePluginServicer_to_server(self.service, server)
        server.add_insecure_port("unix://" + temporary)
        server.start()
        os.replace(temporary, self.path)  # also replaces a stale socket of ours
        self.server = server
        self.identity = socket_identity(self.path)
        LOG.info("serving %s on %s", self.service.resource.name, self.path)

    def serving(self) -> bool:
        """True while our server runs and the socket file is the one it listens on."""
        try:
            return self.server is not None and socket_identity(self.path) == self.identity
        except FileNotFoundError:
            return False

    def register(self) -> bool:
        kubelet = os.path.join(self.plugin_dir, KUBELET_SOCKET)
        request = api_pb2.RegisterRequest(
            version=API_VERSION,
            endpoint=self.socket_name,
            resource_name=self.service.resource.name,
            options=self.service.options(),
        )
        try:
            kubelet_identity = socket_identity(kubelet)
            with grpc.insecure_channel("unix://" + kubelet, options=CHANNEL_OPTIONS) as channel:
                api_pb2_grpc.RegistrationStub(channel).Register(request, timeout=REGISTER_TIMEOUT_S)
        except (grpc.RpcError, FileNotFoundError) as error:
            self.registered_with = None
            LOG.error(
                "registering %s with the kubelet at %s failed: %s", request.resource_name, kubelet, error
            )
            self.metrics.registrations.labels(request.resource_name, "failed").inc()
            return False
        LOG.info(
            "registered %s with the kubelet (%d devices)",
            request.resource_name,
            len(self.service.resource.devices),
        )
        self.metrics.registrations.labels(request.resource_name, "ok").inc()
        self.registered_with = kubelet_identity
        return True

    def registered_with_current_kubelet(self) -> bool:
        try:
            return self.registered_with == socket_identity(os.path.join(self.plugin_dir, KUBELET_SOCKET))
        except FileNotFoundError:
            return False

    def stop(self) -> None:
        # Stop fully before a new server binds the path: a stopping grpc server unlinks
        # its socket path even if a new server already bound it.
        if self.server is not None:
            ours = self.serving()
            self.service.stop_streams()
            self.server.stop(grace=0.5).wait()
            self.server = None
            if ours:
                # The server listened on the temporary name; the final one is ours to remove.
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)


class DirectoryWatcher(threading.Thread):
    """Posts ("kubelet",) when kubelet.sock appears and ("socket", name) when one of ours goes."""

    def __init__(self, plugin_dir: str, our_sockets, commands: queue.Queue):
        super().__init__(name="plugin-dir-watch", daemon=True)
        self.plugin_dir = plugin_dir
        self.our_sockets = our_sockets  # callable: the current socket names
        self.commands = commands
        self.stopping = threading.Event()
        self.inotify = INotify()
        mask = inotify_flags.CREATE | inotify_flags.MOVED_TO | inotify_flags.DELETE | inotify_flags.MOVED_FROM
        self.inotify.add_watch(plugin_dir, mask)

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=2)
        self.inotify.close()

    def run(self) -> None:
        gone = inotify_flags.DELETE | inotify_flags.MOVED_FROM
        while not self.stopping.is_set():
            for event in self.inotify.read(timeout=250):
                if event.name == KUBELET_SOCKET and not event.mask & gone:
                    self.commands.put(("kubelet",))
                elif event.mask & gone and event.name in self.our_sockets():
                    self.commands.put(("socket", event.name))
