# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The DevicePlugin gRPC service for one resource: protobuf translation only.

Decisions live in resources (Allocate), allocation (preferred allocation) and health.
"""

from __future__ import annotations

import logging
import queue
import threading

import grpc

from . import resources
from .api import api_pb2, api_pb2_grpc

LOG = logging.getLogger(__name__)
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"


class DevicePluginService(api_pb2_grpc.DevicePluginServicer):
    def __init__(self, resource, config, health, allocator, metrics):
        self.resource = resource
        self.config = config
        self.health = health
        self.allocator = allocator
        self.metrics = metrics
        self.stopping = threading.Event()
        self._streams: set[queue.Queue] = set()
        self._streams_lock = threading.Lock()

    def stop_streams(self) -> None:
        """End every ListAndWatch now, so that a server stop does not wait out its grace."""
        self.stopping.set()
        with self._streams_lock:
            for stream in self._streams:
                stream.put(False)

    def options(self) -> api_pb2.DevicePluginOptions:
        """The same options go into Register and GetDevicePluginOptions."""
        return api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def device_list(self) -> api_pb2.ListAndWatchResponse:
        devices, unhealthy = [], 0
        for device_id, device in self.resource.devices.items():
            healthy = self.health.healthy(device.uuid)
            unhealthy += not healthy
            message = api_pb2.Device(ID=device_id, health=HEALTHY if healthy else UNHEALTHY)
            if device.numa_node is not None:
                message.topology.nodes.add(ID=device.numa_node)
            devices.append(message)
        self.metrics.set_devices(self.resource.name, len(devices) - unhealthy, unhealthy)
        return api_pb2.ListAndWatchResponse(devices=devices)

    def GetDevicePluginOptions(self, request, context):
        return self.options()

    def ListAndWatch(self, request, context):
        changes: queue.Queue = queue.Queue()
        unsubscribe = self.health.subscribe(lambda: changes.put(True))
        with self._streams_lock:
            self._streams.add(changes)
        try:
            last = self.device_list()
            yield last
            while context.is_active() and not self.stopping.is_set():
                try:
                    if not changes.get(timeout=5):
                        break  # stop_streams()
                except queue.Empty:
                    continue
                current = self.device_list()
                if current != last:
                    last = current
                    yield current
        finally:
            unsubscribe()
            with self._streams_lock:
                self._streams.discard(changes)

    def GetPreferredAllocation(self, request, context):
        with self.metrics.rpc("GetPreferredAllocation"):
            response = api_pb2.PreferredAllocationResponse()
            for req in request.container_requests:
                chosen = self.allocator.preferred(
                    list(req.available_deviceIDs), list(req.must_include_deviceIDs), req.allocation_size
                )
                response.container_responses.add(deviceIDs=chosen)
            return response

    def Allocate(self, request, context):
        with self.metrics.rpc("Allocate"):
            response = api_pb2.AllocateResponse()
            for req in request.container_requests:
                try:
                    answer = resources.allocate(self.resource, list(req.devices_ids), self.config)
                except resources.InvalidRequest as error:
                    self.metrics.allocation_errors.labels(self.resource.name).inc()
                    LOG.warning("Allocate refused: %s", error)
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
                response.container_responses.append(_container_response(answer))
                self.metrics.allocations.labels(self.resource.name).inc()
            return response

    def PreStartContainer(self, request, context):
        return api_pb2.PreStartContainerResponse()


def _container_response(answer: resources.ContainerResponse) -> api_pb2.ContainerAllocateResponse:
    message = api_pb2.ContainerAllocateResponse(envs=answer.envs, annotations=answer.annotations)
    for container_path, host_path, read_only in answer.mounts:
        message.mounts.add(container_path=container_path, host_path=host_path, read_only=read_only)
    for container_path, host_path, permissions in answer.device_specs:
        message.devices.add(container_path=container_path, host_path=host_path, permissions=permissions)
    for name in answer.cdi_devices:
        message.cdi_devices.add(name=name)
    return message
