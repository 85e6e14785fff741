# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The committed gRPC stubs are what the generator makes from the committed protos."""

import importlib
import subprocess
import sys

import pytest
from dp_harness import ROOT

# Stub module -> the gRPC methods its client stub calls: the paths the kubelet serves or calls
# (for DRA, Kubernetes 1.37's pkg/kubelet/cm/dra/plugin), which only upstream's package lines give.
KUBELET_METHODS = {
    "api": {
        "/v1beta1.Registration/Register",
        "/v1beta1.DevicePlugin/GetDevicePluginOptions",
        "/v1beta1.DevicePlugin/ListAndWatch",
        "/v1beta1.DevicePlugin/GetPreferredAllocation",
        "/v1beta1.DevicePlugin/Allocate",
        "/v1beta1.DevicePlugin/PreStartContainer",
    },
    "dra_v1": {
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
    },
    "dra_v1beta1": {
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
        "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources",
    },
    "pluginregistration": {
        "/pluginregistration.Registration/GetInfo",
        "/pluginregistration.Registration/NotifyRegistrationStatus",
    },
    "dra_health_v1alpha1": {"/v1alpha1.DRAResourceHealth/NodeWatchResources"},
    "dra_health_v1": {"/v1.DRAResourceHealth/NodeWatchResources"},
}


class RecordingChannel:
    """Stands in for grpc.Channel: a stub's constructor names each method path it will call."""

    def __init__(self):
        self.paths = set()

    def _record(self, path, **_):
        self.paths.add(path)

    unary_unary = unary_stream = stream_unary = stream_stream = _record


def test_stubs_are_current():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-deviceplugin-stubs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("module", sorted(KUBELET_METHODS))
def test_stubs_serve_the_kubelet_method_names(module):
    pb2 = importlib.import_module(f"gpuops_device_plugin.api.{module}_pb2")
    grpc_module = importlib.import_module(f"gpuops_device_plugin.api.{module}_pb2_grpc")
    described = {
        f"/{service.full_name}/{method.name}"
        for service in pb2.DESCRIPTOR.services_by_name.values()
        for method in service.methods
    }
    channel = RecordingChannel()
    for service in pb2.DESCRIPTOR.services_by_name:
        getattr(grpc_module, f"{service}Stub")(channel)
    assert described == KUBELET_METHODS[module]
    assert channel.paths == KUBELET_METHODS[module]


@pytest.mark.parametrize("module", ["dra_health_v1", "dra_health_v1alpha1"])
def test_health_stream_is_server_streaming(module):
    pb2 = importlib.import_module(f"gpuops_device_plugin.api.{module}_pb2")
    watch = pb2.DESCRIPTOR.services_by_name["DRAResourceHealth"].methods_by_name["NodeWatchResources"]
    assert watch.server_streaming
    assert not watch.client_streaming


def test_health_v1_and_v1alpha1_messages_are_one_wire_format():
    """The health servicer answers v1alpha1 by re-reading its v1 bytes: same fields, same numbers."""
    from gpuops_device_plugin.api import dra_health_v1_pb2, dra_health_v1alpha1_pb2  # noqa: PLC0415

    def shape(pb2):
        return {
            name: sorted((f.number, f.name, f.type, f.is_repeated) for f in message.fields)
            for name, message in pb2.DESCRIPTOR.message_types_by_name.items()
        }

    assert shape(dra_health_v1_pb2) == shape(dra_health_v1alpha1_pb2)
    enum = "HealthStatus"
    assert [(v.name, v.number) for v in dra_health_v1_pb2.DESCRIPTOR.enum_types_by_name[enum].values] == [
        (v.name, v.number) for v in dra_health_v1alpha1_pb2.DESCRIPTOR.enum_types_by_name[enum].values
    ]


def test_dra_v1beta1_messages_are_v1_without_share_id():
    """DRAPlugin v1beta1 is served by re-reading v1 bytes: v1 only adds Device.share_id (5)."""
    from gpuops_device_plugin.api import dra_v1_pb2, dra_v1beta1_pb2  # noqa: PLC0415

    def fields(pb2):
        return {
            (name, f.number, f.name, f.type)
            for name, message in pb2.DESCRIPTOR.message_types_by_name.items()
            for f in message.fields
        }

    assert fields(dra_v1_pb2) - fields(dra_v1beta1_pb2) == {("Device", 5, "share_id", 9)}
    assert fields(dra_v1beta1_pb2) <= fields(dra_v1_pb2)
