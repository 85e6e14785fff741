# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dra.node_status: a gone device plugin's nvidia.com/gpu leaves the Node's status, only
where no device plugin is registered on the node."""

import socket

import pytest
from kubernetes.client import V1Node, V1NodeStatus
from kubernetes.client.exceptions import ApiException

from gpuops_device_plugin.dra import node_status

NODE = "gpu-node-1"
LEFT_OVER = {"cpu": "2", "nvidia.com/gpu": "8"}


class CoreApi:
    """The two CoreV1Api calls clear_stale makes, recorded."""

    def __init__(self, capacity, allocatable):
        self.node = V1Node(status=V1NodeStatus(capacity=dict(capacity), allocatable=dict(allocatable)))
        self.patches = []

    def read_node(self, name):
        assert name == NODE
        return self.node

    def patch_node_status(self, name, body):
        assert name == NODE
        self.patches.append(body)


@pytest.fixture
def device_plugins(tmp_path):
    (tmp_path / "kubelet.sock").touch()
    return tmp_path


def test_a_left_over_resource_is_removed_from_capacity_and_allocatable(device_plugins):
    api = CoreApi(LEFT_OVER, LEFT_OVER)
    assert node_status.clear_stale(api, NODE, "nvidia.com/gpu", str(device_plugins))
    assert api.patches == [
        [
            {"op": "remove", "path": "/status/capacity/nvidia.com~1gpu"},
            {"op": "remove", "path": "/status/allocatable/nvidia.com~1gpu"},
        ]
    ]


def test_nothing_is_patched_while_a_device_plugin_serves(device_plugins):
    serving = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    serving.bind(str(device_plugins / "nvidia-gpu.sock"))
    serving.listen(1)
    try:
        api = CoreApi(LEFT_OVER, LEFT_OVER)
        assert not node_status.clear_stale(api, NODE, "nvidia.com/gpu", str(device_plugins))
        assert api.patches == []
    finally:
        serving.close()


def test_a_socket_file_nothing_serves_on_is_no_device_plugin(device_plugins):
    """What a plugin killed without cleaning up leaves: the file, refusing connections."""
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(str(device_plugins / "nvidia-gpu.sock"))
    left.close()
    (device_plugins / "not-a-socket.sock").touch()
    api = CoreApi(LEFT_OVER, LEFT_OVER)
    assert node_status.clear_stale(api, NODE, "nvidia.com/gpu", str(device_plugins))


def test_nothing_is_patched_where_the_node_has_no_such_resource(device_plugins):
    api = CoreApi({"cpu": "2"}, {"cpu": "2"})
    assert not node_status.clear_stale(api, NODE, "nvidia.com/gpu", str(device_plugins))
    assert api.patches == []


def test_no_extended_resource_configured_means_no_call(device_plugins):
    api = CoreApi(LEFT_OVER, LEFT_OVER)
    assert not node_status.clear_stale(api, NODE, "", str(device_plugins))
    assert api.patches == []


def test_only_the_fields_that_have_it_are_patched():
    assert node_status.stale_patch({"capacity": {"a~b/c": "0"}, "allocatable": {}}, "a~b/c") == [
        {"op": "remove", "path": "/status/capacity/a~0b~1c"}
    ]


def test_an_api_error_is_one_line_naming_the_node_and_the_resource(device_plugins):
    class Refusing(CoreApi):
        def patch_node_status(self, name, body):
            raise ApiException(status=403, reason="Forbidden")

    with pytest.raises(node_status.NodeStatusError) as caught:
        node_status.clear_stale(Refusing(LEFT_OVER, LEFT_OVER), NODE, "nvidia.com/gpu", str(device_plugins))
    assert str(caught.value) == (
        "cannot remove a gone device plugin's nvidia.com/gpu from Node gpu-node-1's status: 403 Forbidden"
    )


def test_a_missing_device_plugins_directory_has_no_sockets(tmp_path):
    assert node_status.device_plugin_sockets(str(tmp_path / "absent")) == []
