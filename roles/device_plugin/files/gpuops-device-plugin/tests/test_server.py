# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""server on its own: the DevicePlugin service's protobuf translation, called as gRPC would
call it, with fakes of health, the allocator, metrics and the RPC context (no server, no socket)."""

import grpc
import pytest
from fakes import FakeMetrics

from gpuops_device_plugin.api import api_pb2
from gpuops_device_plugin.config import Config
from gpuops_device_plugin.resources import Device, Resource
from gpuops_device_plugin.server import DevicePluginService

GPU0 = Device("GPU-0", "0", 0, 0, "H100", numa_node=1)
GPU1 = Device("GPU-1", "1", 1, 1, "H100")
RESOURCE = Resource("nvidia.com/gpu", {"GPU-0": GPU0, "GPU-1": GPU1})


class FakeHealth:
    """health.HealthState as the service uses it: healthy() and subscribe()."""

    def __init__(self):
        self.down = set()
        self.listeners = []

    def healthy(self, uuid):
        return uuid not in self.down

    def subscribe(self, listener):
        self.listeners.append(listener)
        return lambda: self.listeners.remove(listener)

    def change(self, uuid, healthy):
        (self.down.discard if healthy else self.down.add)(uuid)
        for listener in list(self.listeners):
            listener()


class FakeAllocator:
    def __init__(self, answer):
        self.answer = answer
        self.asked = []

    def preferred(self, available, must_include, size):
        self.asked.append((available, must_include, size))
        return self.answer


class Aborted(Exception):
    pass


class FakeContext:
    def __init__(self):
        self.active = True

    def is_active(self):
        return self.active

    def abort(self, code, details):
        raise Aborted(code, details)


def service(config=None, resource=RESOURCE, allocator=None):
    health, metrics = FakeHealth(), FakeMetrics()
    return DevicePluginService(resource, config or Config(), health, allocator, metrics), health, metrics


def devices(response):
    return {d.ID: (d.health, [n.ID for n in d.topology.nodes]) for d in response.devices}


def test_options_announce_preferred_allocation_and_no_prestart():
    svc = service()[0]
    options = svc.GetDevicePluginOptions(api_pb2.Empty(), FakeContext())
    assert options == svc.options()
    assert options.get_preferred_allocation_available
    assert not options.pre_start_required


def test_list_and_watch_sends_the_devices_then_each_health_change_once():
    svc, health, metrics = service()
    stream = svc.ListAndWatch(api_pb2.Empty(), FakeContext())
    assert devices(next(stream)) == {"GPU-0": ("Healthy", [1]), "GPU-1": ("Healthy", [])}
    assert metrics.devices == {"nvidia.com/gpu": (2, 0)}
    health.change("GPU-1", healthy=False)
    assert devices(next(stream)) == {"GPU-0": ("Healthy", [1]), "GPU-1": ("Unhealthy", [])}
    assert metrics.devices == {"nvidia.com/gpu": (1, 1)}
    # A change elsewhere (another resource's device) repeats nothing; stop_streams ends it.
    health.change("MIG-9", healthy=False)
    svc.stop_streams()
    assert list(stream) == []
    assert health.listeners == []  # the stream unsubscribed


def test_preferred_allocation_asks_the_allocator_per_container():
    allocator = FakeAllocator(["GPU-1"])
    svc, _health, metrics = service(allocator=allocator)
    request = api_pb2.PreferredAllocationRequest(
        container_requests=[
            api_pb2.ContainerPreferredAllocationRequest(
                available_deviceIDs=["GPU-0", "GPU-1"], must_include_deviceIDs=["GPU-1"], allocation_size=1
            )
        ]
    )
    response = svc.GetPreferredAllocation(request, FakeContext())
    assert [list(c.deviceIDs) for c in response.container_responses] == [["GPU-1"]]
    assert allocator.asked == [(["GPU-0", "GPU-1"], ["GPU-1"], 1)]
    assert metrics.rpcs == ["GetPreferredAllocation"]


def allocate(svc, *containers):
    request = api_pb2.AllocateRequest(
        container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids) for ids in containers]
    )
    return svc.Allocate(request, FakeContext())


def test_allocate_answers_each_container_and_counts_it():
    svc, _health, metrics = service(Config(device_list_strategy=("envvar", "cdi-cri")))
    response = allocate(svc, ["GPU-1"], ["GPU-0", "GPU-1"])
    first, second = response.container_responses
    assert dict(first.envs) == {"NVIDIA_VISIBLE_DEVICES": "GPU-1"}
    assert [d.name for d in first.cdi_devices] == ["k8s.device-plugin.nvidia.com/gpu=GPU-1"]
    assert dict(second.envs) == {"NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-1"}
    assert metrics.allocations.counts == {("nvidia.com/gpu",): 2}
    assert metrics.rpcs == ["Allocate"]


def test_allocate_translates_mounts():
    svc = service(Config(device_list_strategy=("volume-mounts",)))[0]
    (answer,) = allocate(svc, ["GPU-0"]).container_responses
    assert dict(answer.envs) == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [(m.container_path, m.host_path, m.read_only) for m in answer.mounts] == [
        ("/var/run/nvidia-container-devices/GPU-0", "/dev/null", False)
    ]


def test_allocate_refuses_an_unknown_device_with_invalid_argument():
    svc, _health, metrics = service()
    with pytest.raises(Aborted) as refused:
        allocate(svc, ["GPU-7"])
    code, details = refused.value.args
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details == "unknown device for nvidia.com/gpu: GPU-7"
    assert metrics.allocation_errors.counts == {("nvidia.com/gpu",): 1}
    assert metrics.allocations.counts == {}


def test_prestart_is_a_no_op():
    assert service()[0].PreStartContainer(api_pb2.PreStartContainerRequest(), FakeContext()) == (
        api_pb2.PreStartContainerResponse()
    )
