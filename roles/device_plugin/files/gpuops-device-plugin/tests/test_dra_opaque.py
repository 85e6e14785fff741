# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dra.opaque: a GpuConfig is read, and a wrong one names the field, the value and what is valid."""

import pytest

from gpuops_device_plugin.dra import opaque

WHERE = "status.allocation.devices.config[0].opaque.parameters"


def config(sharing=None, **extra):
    document = {"apiVersion": "gpu.gpuops.k8s/v1alpha1", "kind": "GpuConfig", **extra}
    if sharing is not None:
        document["sharing"] = sharing
    return document


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        (config(), opaque.GpuConfig()),
        (config({"strategy": "TimeSlicing"}), opaque.GpuConfig("TimeSlicing", "Default")),
        (
            config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}),
            opaque.GpuConfig("TimeSlicing", "Long"),
        ),
    ],
)
def test_a_gpu_config_is_read(parameters, expected):
    assert opaque.parse(parameters, WHERE) == expected


@pytest.mark.parametrize(
    ("parameters", "field", "message"),
    [
        ("TimeSlicing", "", "'TimeSlicing' is not valid; expected an object"),
        (
            {**config(), "apiVersion": "resource.nvidia.com/v1beta1"},
            ".apiVersion",
            "'resource.nvidia.com/v1beta1' is not valid; expected gpu.gpuops.k8s/v1alpha1",
        ),
        ({**config(), "kind": "MigConfig"}, ".kind", "'MigConfig' is not valid; expected GpuConfig"),
        (
            config({"strategy": "MPS"}),
            ".sharing.strategy",
            "'MPS' is not valid; expected one of TimeSlicing (MPS is not served)",
        ),
        (
            config({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Forever"}}),
            ".sharing.timeSlicingConfig.interval",
            "'Forever' is not valid; expected one of Default, Short, Medium, Long",
        ),
        (
            config({"strategy": "TimeSlicing", "replicas": 4}),
            ".sharing.replicas",
            "4 is not valid; known fields: strategy, timeSlicingConfig",
        ),
        (config(mps=True), ".mps", "True is not valid; known fields: apiVersion, kind, sharing"),
    ],
)
def test_a_wrong_gpu_config_names_the_field_the_value_and_what_is_valid(parameters, field, message):
    with pytest.raises(opaque.OpaqueConfigError) as raised:
        opaque.parse(parameters, WHERE)
    assert raised.value.field == WHERE + field
    assert str(raised.value) == f"{WHERE}{field}: {message}"
