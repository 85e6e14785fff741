# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""podresources on its own, against a PodResourcesLister server in this process (the
kubelet's side of the API, answering as kubelet 1.34 does). The lab's tests read a real
kubelet (tests/integration/test_lab_nodes.py)."""

import json
import os
import shutil
import tempfile
import threading
from concurrent import futures

import grpc
import pytest

from gpuops_device_plugin import podresources
from gpuops_device_plugin.api import podresources_pb2 as pb
from gpuops_device_plugin.api import podresources_pb2_grpc

POD = pb.PodResources(
    name="gpuops-validate-node-1",
    namespace="default",
    containers=[
        pb.ContainerResources(
            name="validate",
            devices=[
                pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-b"]),
                pb.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["GPU-a"]),
            ],
        ),
        pb.ContainerResources(name="sidecar"),
    ],
)


class Kubelet(podresources_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, get_enabled=True):
        self.get_enabled = get_enabled
        self.pods = [POD]

    def Get(self, request, context):
        if not self.get_enabled:
            context.abort(grpc.StatusCode.UNKNOWN, "PodResources API Get method disabled")
        for pod in self.pods:
            if (pod.namespace, pod.name) == (request.pod_namespace, request.pod_name):
                return pb.GetPodResourcesResponse(pod_resources=pod)
        missing = f"pod {request.pod_name} in namespace {request.pod_namespace} not found"
        context.abort(grpc.StatusCode.UNKNOWN, missing)
        return None

    def List(self, request, context):
        return pb.ListPodResourcesResponse(pod_resources=self.pods)


@pytest.fixture
def kubelet():
    directory = tempfile.mkdtemp(prefix="podres-")
    socket = os.path.join(directory, "kubelet.sock")
    servicer = Kubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    podresources_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    server.add_insecure_port("unix://" + socket)
    server.start()
    servicer.socket = socket
    yield servicer
    server.stop(None).wait()
    shutil.rmtree(directory)


def test_get_gives_each_containers_devices_per_resource(kubelet):
    devices = podresources.pod_devices("default", "gpuops-validate-node-1", kubelet.socket)
    assert devices == {"validate": {"nvidia.com/gpu": ["GPU-b", "GPU-a"]}, "sidecar": {}}


def test_a_kubelet_without_get_is_asked_with_list(kubelet):
    kubelet.get_enabled = False
    devices = podresources.pod_devices("default", "gpuops-validate-node-1", kubelet.socket)
    assert devices["validate"] == {"nvidia.com/gpu": ["GPU-b", "GPU-a"]}
    with pytest.raises(podresources.PodResourcesError, match=r"no running pod default/other .*Get"):
        podresources.pod_devices("default", "other", kubelet.socket)


def test_an_unknown_pod_is_an_error_naming_it(kubelet):
    with pytest.raises(podresources.PodResourcesError, match="UNKNOWN: pod other in namespace default not"):
        podresources.pod_devices("default", "other", kubelet.socket)


def test_no_kubelet_is_an_error_naming_the_socket(tmp_path):
    socket = str(tmp_path / "kubelet.sock")
    with pytest.raises(podresources.PodResourcesError, match=f"on {socket}: UNAVAILABLE"):
        podresources.pod_devices("default", "pod", socket, timeout=2)


def test_the_command_prints_json_or_says_why_not(kubelet, capsys, tmp_path):
    argv = ["--namespace", "default", "--pod", "gpuops-validate-node-1", "--socket", kubelet.socket]
    assert podresources.main(argv) == 0
    assert json.loads(capsys.readouterr().out) == {
        "namespace": "default",
        "pod": "gpuops-validate-node-1",
        "containers": {"validate": {"nvidia.com/gpu": ["GPU-b", "GPU-a"]}, "sidecar": {}},
    }
    missing = str(tmp_path / "none.sock")
    argv = ["--namespace", "default", "--pod", "x", "--socket", missing, "--timeout", "1"]
    assert podresources.main(argv) == 1
    assert capsys.readouterr().err.startswith(f"gpuops-pod-resources: pod-resources API on {missing}: ")


def test_wait_reads_a_pod_from_its_admission_on(kubelet):
    # The watch starts before the pod exists; the kubelet lists it first without devices
    # (added, not yet admitted), then with the devices it assigned.
    kubelet.pods = []
    answers = []
    unadmitted = [pb.ContainerResources(name="validate")]
    bare = pb.PodResources(name=POD.name, namespace=POD.namespace, containers=unadmitted)

    def sleep(_seconds):
        answers.append(len(answers))
        kubelet.pods = [bare] if len(answers) < 3 else [POD]

    devices = podresources.wait_for_devices("default", POD.name, kubelet.socket, wait=60, sleep=sleep)
    assert devices["validate"] == {"nvidia.com/gpu": ["GPU-b", "GPU-a"]}
    assert len(answers) == 3  # not found, then listed without devices twice


def test_wait_gives_the_last_error_once_its_time_is_up(kubelet):
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    with pytest.raises(podresources.PodResourcesError, match="pod other in namespace default not found"):
        podresources.wait_for_devices(
            "default", "other", kubelet.socket, wait=1.0, interval=0.25, clock=lambda: now[0], sleep=sleep
        )
    assert now[0] == 1.0


def test_the_command_waits_for_a_pod_created_after_it_started(kubelet, capsys):
    kubelet.pods = []
    threading.Timer(0.5, lambda: setattr(kubelet, "pods", [POD])).start()
    argv = ["--namespace", "default", "--pod", POD.name, "--socket", kubelet.socket, "--wait", "30"]
    assert podresources.main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["containers"]["validate"] == {"nvidia.com/gpu": ["GPU-b", "GPU-a"]}
