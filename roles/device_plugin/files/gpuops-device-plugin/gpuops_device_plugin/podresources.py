# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the kubelet assigned to a pod, from the node's pod-resources API (podresources/v1).

`gpuops-pod-resources --namespace NS --pod NAME` prints one JSON object:
{"namespace": NS, "pod": NAME, "containers": {container: {resource: [device IDs]}}}.
gpu_validation runs it on the node (as root: the socket is the kubelet's) and compares the
IDs with the GPU UUIDs NVML lists inside the test pod. It ships in the daemon's package
because that is where grpcio and the kubelet's protos already are on a GPU node.

With --wait SECONDS it asks again and again (every INTERVAL_S) until the kubelet lists the
pod with devices assigned, from before the pod exists: the kubelet assigns a pod's devices
as it admits it and answers for active pods only (Get and List alike: a pod that has
finished is "not found"), so a watch started before the pod is created reads it whatever
the test command does, where a read after the pod was seen running needs a command that
stays up. Get where the kubelet serves it (beta, on by default, from Kubernetes 1.34), else List.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import grpc

from .api import podresources_pb2, podresources_pb2_grpc

SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
TIMEOUT_S = 10.0
# How often --wait asks.
INTERVAL_S = 0.1
# The kubelet's words when the KubeletPodResourcesGet feature gate is off.
GET_DISABLED = "Get method disabled"


class PodResourcesError(Exception):
    """The pod-resources API could not be read, or does not know the pod."""


def _devices(pod) -> dict[str, dict[str, list[str]]]:
    containers: dict[str, dict[str, list[str]]] = {}
    for container in pod.containers:
        resources = containers.setdefault(container.name, {})
        for devices in container.devices:
            resources.setdefault(devices.resource_name, []).extend(devices.device_ids)
    return containers


def pod_devices(namespace: str, pod: str, socket: str = SOCKET, timeout: float = TIMEOUT_S):
    """container name -> resource name -> the device IDs the kubelet assigned."""
    with grpc.insecure_channel("unix://" + socket) as channel:
        lister = podresources_pb2_grpc.PodResourcesListerStub(channel)
        try:
            try:
                request = podresources_pb2.GetPodResourcesRequest(pod_name=pod, pod_namespace=namespace)
                return _devices(lister.Get(request, timeout=timeout).pod_resources)
            except grpc.RpcError as error:
                if GET_DISABLED not in (error.details() or ""):
                    raise
            listed = lister.List(podresources_pb2.ListPodResourcesRequest(), timeout=timeout)
        except grpc.RpcError as error:
            raise PodResourcesError(
                f"pod-resources API on {socket}: {error.code().name}: {error.details()}"
            ) from error
    for candidate in listed.pod_resources:
        if (candidate.namespace, candidate.name) == (namespace, pod):
            return _devices(candidate)
    raise PodResourcesError(
        f"pod-resources API on {socket} lists no running pod {namespace}/{pod} "
        "(Get is off on this kubelet: KubeletPodResourcesGet)"
    )


def wait_for_devices(
    namespace,
    pod,
    socket=SOCKET,
    timeout=TIMEOUT_S,
    wait=0.0,
    *,
    interval=INTERVAL_S,
    clock=time.monotonic,
    sleep=time.sleep,
):
    """pod_devices() once the kubelet lists the pod with at least one device, asking until
    WAIT seconds have passed; then the last answer's error (or the devices it had)."""
    deadline = clock() + wait
    while True:
        try:
            containers = pod_devices(namespace, pod, socket, timeout)
        except PodResourcesError:
            if clock() >= deadline:
                raise
        else:
            assigned = any(ids for resources in containers.values() for ids in resources.values())
            if assigned or clock() >= deadline:
                return containers
        sleep(interval)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="gpuops-pod-resources", description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--pod", required=True)
    parser.add_argument("--socket", default=SOCKET, help="the kubelet's pod-resources socket (%(default)s)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds per call (%(default)s)")
    parser.add_argument(
        "--wait",
        type=float,
        default=0.0,
        help="seconds to keep asking until the kubelet lists the pod with devices (%(default)s: ask once)",
    )
    options = parser.parse_args(argv)
    try:
        containers = wait_for_devices(
            options.namespace, options.pod, options.socket, options.timeout, options.wait
        )
    except PodResourcesError as error:
        print(f"gpuops-pod-resources: {error}", file=sys.stderr)
        return 1
    print(json.dumps({"namespace": options.namespace, "pod": options.pod, "containers": containers}))
    return 0
