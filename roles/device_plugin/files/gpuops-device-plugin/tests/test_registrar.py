# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""registrar on its own: an Endpoint serving a fake service, registering with a fake kubelet
(a Registration server in this process), and the plugin directory watcher, in a temporary
directory. No daemon process, no NVML."""

import contextlib
import os
import queue
import shutil
import tempfile
import threading
import time
from concurrent import futures

import grpc
import pytest
from fakes import FakeMetrics

from gpuops_device_plugin.api import api_pb2, api_pb2_grpc
from gpuops_device_plugin.registrar import KUBELET_SOCKET, DirectoryWatcher, Endpoint
from gpuops_device_plugin.resources import Device, Resource

RESOURCE = Resource("nvidia.com/gpu", {"GPU-0": Device("GPU-0", "0", 0, 0, "H100")})


class FakeService(api_pb2_grpc.DevicePluginServicer):
    """server.DevicePluginService as the endpoint uses it."""

    def __init__(self):
        self.resource = RESOURCE
        self.stopping = threading.Event()
        self.streams_stopped = 0

    def options(self):
        return api_pb2.DevicePluginOptions(get_preferred_allocation_available=True)

    def stop_streams(self):
        self.stopping.set()
        self.streams_stopped += 1

    def GetDevicePluginOptions(self, request, context):
        return self.options()


class FakeKubelet(api_pb2_grpc.RegistrationServicer):
    def __init__(self, plugin_dir):
        self.requests = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port("unix://" + os.path.join(plugin_dir, KUBELET_SOCKET))
        self.server.start()

    def Register(self, request, context):
        self.requests.append(request)
        return api_pb2.Empty()

    def stop(self):
        self.server.stop(grace=None).wait()


@pytest.fixture
def plugin_dir():
    # Unix socket paths are limited to 107 bytes: pytest's tmp_path is too deep.
    path = tempfile.mkdtemp(prefix="dp-reg-", dir="/tmp")
    yield path
    shutil.rmtree(path)


@pytest.fixture
def endpoint(plugin_dir):
    result = Endpoint(FakeService(), plugin_dir, FakeMetrics())
    yield result
    result.stop()


def test_serve_puts_an_answering_socket_under_its_final_name_only(endpoint, plugin_dir):
    endpoint.serve()
    assert os.listdir(plugin_dir) == ["gpuops-gpu.sock"]  # no temporary name left behind
    assert endpoint.serving()
    with grpc.insecure_channel("unix://" + endpoint.path) as channel:
        options = api_pb2_grpc.DevicePluginStub(channel).GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
    assert options.get_preferred_allocation_available


def test_serving_again_replaces_the_server_and_its_socket(endpoint, plugin_dir):
    endpoint.serve()
    first = endpoint.server
    endpoint.serve()
    assert endpoint.service.streams_stopped == 1  # the old server's streams were ended
    assert endpoint.server is not first
    assert endpoint.generation == 2  # bound under a fresh temporary name
    assert endpoint.serving()
    assert os.listdir(plugin_dir) == ["gpuops-gpu.sock"]


def test_a_deleted_socket_is_no_longer_served(endpoint):
    endpoint.serve()
    os.unlink(endpoint.path)  # what a new kubelet does to every socket in the directory
    assert not endpoint.serving()


def test_stop_removes_our_socket(endpoint, plugin_dir):
    endpoint.serve()
    endpoint.stop()
    assert not endpoint.serving()
    assert os.listdir(plugin_dir) == []


def test_stop_leaves_a_socket_that_is_not_ours(endpoint):
    endpoint.serve()
    os.unlink(endpoint.path)
    with open(endpoint.path, "w"):  # someone else's file under our name now
        pass
    endpoint.stop()
    assert os.path.exists(endpoint.path)


def test_register_without_a_kubelet_fails_and_is_counted(endpoint):
    assert endpoint.register() is False
    assert endpoint.registered_with is None
    assert not endpoint.registered_with_current_kubelet()
    assert endpoint.metrics.registrations.counts == {("nvidia.com/gpu", "failed"): 1}


def test_register_tells_the_kubelet_our_socket_resource_and_options(endpoint, plugin_dir):
    kubelet = FakeKubelet(plugin_dir)
    try:
        endpoint.serve()
        assert endpoint.register() is True
        assert endpoint.registered_with_current_kubelet()
    finally:
        kubelet.stop()
    (request,) = kubelet.requests
    assert request.version == "v1beta1"
    assert request.endpoint == "gpuops-gpu.sock"  # a name in the directory, not a path
    assert request.resource_name == "nvidia.com/gpu"
    assert request.options.get_preferred_allocation_available
    assert endpoint.metrics.registrations.counts == {("nvidia.com/gpu", "ok"): 1}


def test_a_new_kubelet_socket_means_registering_again(endpoint, plugin_dir):
    kubelet = FakeKubelet(plugin_dir)
    try:
        assert endpoint.register()
        # A restarted kubelet: the same name, another file (the old one is still bound, so
        # its inode number cannot be reused).
        fresh = os.path.join(plugin_dir, "fresh")
        with open(fresh, "w"):
            pass
        os.replace(fresh, os.path.join(plugin_dir, KUBELET_SOCKET))
        assert not endpoint.registered_with_current_kubelet()
    finally:
        kubelet.stop()


def test_a_restarted_kubelet_is_told_apart_even_with_its_predecessors_inode_number(
    endpoint, plugin_dir, monkeypatch
):
    path = os.path.join(plugin_dir, KUBELET_SOCKET)
    kubelet = FakeKubelet(plugin_dir)
    try:
        assert endpoint.register()
        old = os.stat(path)
    finally:
        kubelet.stop()
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # what the kubelet's restart does
    time.sleep(0.02)  # a real restart takes seconds; more than a coarse clock tick in any case
    kubelet = FakeKubelet(plugin_dir)
    try:
        # On ext4 the new kubelet.sock usually gets the old inode number back (30 times out
        # of 30 here); pinned, so that the case is tested on any file system.
        real_stat = os.stat

        def stat_reusing_the_number(name, *args, **kwargs):
            status = real_stat(name, *args, **kwargs)
            if name != path:
                return status
            fields = list(status)
            fields[1] = old.st_ino
            return os.stat_result(
                fields, {k: getattr(status, k) for k in ("st_atime_ns", "st_mtime_ns", "st_ctime_ns")}
            )

        monkeypatch.setattr(os, "stat", stat_reusing_the_number)
        assert os.stat(path).st_ino == old.st_ino
        assert not endpoint.registered_with_current_kubelet()
    finally:
        monkeypatch.undo()
        kubelet.stop()


def events(commands, count, timeout=5.0):
    return [commands.get(timeout=timeout) for _event in range(count)]


def test_the_watcher_hears_the_kubelet_and_the_loss_of_our_sockets_only(plugin_dir):
    ours = {"gpuops-gpu.sock"}
    for name in ("gpuops-gpu.sock", "other-vendor.sock"):
        with open(os.path.join(plugin_dir, name), "w"):
            pass
    commands = queue.Queue()
    watcher = DirectoryWatcher(plugin_dir, lambda: ours, commands)
    watcher.start()
    try:
        os.unlink(os.path.join(plugin_dir, "other-vendor.sock"))  # not ours: no command
        with open(os.path.join(plugin_dir, KUBELET_SOCKET), "w"):
            pass
        os.unlink(os.path.join(plugin_dir, "gpuops-gpu.sock"))
        os.unlink(os.path.join(plugin_dir, KUBELET_SOCKET))  # kubelet.sock going: no command
        assert events(commands, 2) == [("kubelet",), ("socket", "gpuops-gpu.sock")]
        with pytest.raises(queue.Empty):
            commands.get(timeout=0.5)
    finally:
        watcher.stop()
