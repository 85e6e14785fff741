# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The committed gRPC stubs are what the generator makes from the committed api.proto."""

import subprocess
import sys

from dp_harness import ROOT


def test_stubs_are_current():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen-deviceplugin-stubs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_stubs_serve_the_kubelet_method_names():
    from gpuops_device_plugin.api import api_pb2  # noqa: PLC0415

    services = api_pb2.DESCRIPTOR.services_by_name
    assert sorted(services) == ["DevicePlugin", "Registration"]
    assert api_pb2.DESCRIPTOR.package == "v1beta1"
    assert sorted(m.name for m in services["DevicePlugin"].methods) == [
        "Allocate",
        "GetDevicePluginOptions",
        "GetPreferredAllocation",
        "ListAndWatch",
        "PreStartContainer",
    ]
