# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The DRA front end's two sockets: the plugin's services, then the registration socket.

The kubelet's plugin watcher registers whatever socket appears in its registry directory
(it skips names starting with "."), calls GetInfo, then dials the endpoint it names: the
plugin socket serves first, the registration socket appears last, and goes first on stop
(the watcher deregisters the driver when it goes). A new kubelet registers the sockets it
finds, so nothing has to be re-announced after a kubelet restart.

Each server binds a hidden temporary name that is renamed into place once it answers, as
registrar.Endpoint does: the watcher never sees a socket that does not answer yet, and a
stopped grpc server's late unlink of its path cannot remove a newer server's socket.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import Callable
from concurrent import futures

import grpc

from .devices import DRIVER
from .prepare import Preparer
from .server import HealthStreams, add_plugin_services, add_registration_service

__all__ = ["PLUGIN_PATH", "REGISTRATION_PATH", "DraEndpoint", "dra_endpoint"]

LOG = logging.getLogger(__name__)
# Each open health stream holds a worker for its life; Prepare calls of several pods may
# come at once.
WORKERS = 8
STOP_GRACE_S = 0.5
_serial = itertools.count(1)
# Where the kubelet's plugin watcher looks, and where the Go helper puts a driver's socket.
REGISTRATION_PATH = f"/var/lib/kubelet/plugins_registry/{DRIVER}-reg.sock"
PLUGIN_PATH = f"/var/lib/kubelet/plugins/{DRIVER}/dra.sock"


class DraEndpoint:
    """Serve add_plugin's services on plugin_path and add_registration's on registration_path."""

    def __init__(
        self,
        plugin_path: str,
        registration_path: str,
        add_plugin: Callable[[grpc.Server], None],
        add_registration: Callable[[grpc.Server], None],
    ):
        self.sockets = ((plugin_path, add_plugin), (registration_path, add_registration))
        self.servers: list[tuple[str, grpc.Server, int]] = []  # path, server, the socket's inode

    def serve(self) -> None:
        self.stop()
        for path, add in self.sockets:
            self.servers.append(_serve(path, add))
            LOG.info("serving %s", path)

    def stop(self) -> None:
        while self.servers:
            path, server, inode = self.servers.pop()  # registration first
            server.stop(grace=STOP_GRACE_S).wait()
            with contextlib.suppress(FileNotFoundError):
                if os.stat(path).st_ino == inode:  # only ever our own socket
                    os.unlink(path)


def dra_endpoint(
    preparer: Preparer,
    streams: HealthStreams,
    plugin_path: str = PLUGIN_PATH,
    registration_path: str = REGISTRATION_PATH,
    driver: str = DRIVER,
) -> DraEndpoint:
    """The front end's endpoint: every DRA service on plugin_path, a registration that names it."""
    return DraEndpoint(
        plugin_path,
        registration_path,
        lambda server: add_plugin_services(server, preparer, streams),
        lambda server: add_registration_service(server, driver, plugin_path),
    )


def _serve(path: str, add: Callable[[grpc.Server], None]) -> tuple[str, grpc.Server, int]:
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{next(_serial)}")
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix=os.path.basename(path))
    )
    add(server)
    server.add_insecure_port("unix://" + temporary)
    server.start()
    os.replace(temporary, path)  # also replaces a stale socket of an earlier run
    return path, server, os.stat(path).st_ino
