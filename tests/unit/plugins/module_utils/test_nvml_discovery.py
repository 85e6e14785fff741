# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_nvml_discovery._fabric over a fake pynvml: which NVML call it makes, and what each answer reads as.

The order is go-nvlib's IsFabricAttached (the check GFD's IMEX labeler calls):
nvmlDeviceGetGpuFabricInfo where the library has it, else nvmlDeviceGetGpuFabricInfoV with
the v2 struct; NOT_SUPPORTED is a GPU without a fabric.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import struct
import types

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _nvml_discovery as nvml

SUCCESS, NOT_SUPPORTED, NO_PERMISSION, FUNCTION_NOT_FOUND, GPU_IS_LOST = 0, 3, 4, 13, 15
CLUSTER = bytes.fromhex("6f1c2a4e58b04c3d9e210a7b5c9d3e12")


class NVMLError(Exception):
    def __init__(self, value):
        super(NVMLError, self).__init__("NVML error %d" % value)
        self.value = value


class FabricInfo(ctypes.Structure):  # nvmlGpuFabricInfo_t
    _fields_ = [
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
    ]


class FabricInfoV2(ctypes.Structure):  # nvmlGpuFabricInfo_v2_t
    _fields_ = [("version", ctypes.c_uint), *FabricInfo._fields_, ("healthMask", ctypes.c_uint32)]

    def __init__(self):
        super(FabricInfoV2, self).__init__(version=0x02000024)


def fake_pynvml(v1=None, v2=None, bindings=("v1", "v2")):
    """v1, v2: what each call answers, an NVML error code or (state, status, clique); None: absent."""
    calls = []

    def call(name, answer, versioned):
        def fabric_info(handle, ref):
            calls.append(name)
            info = ref._obj  # the struct byref() was given
            assert (info.version == 0x02000024) if versioned else not hasattr(info, "version")
            if answer is None:
                raise NVMLError(FUNCTION_NOT_FOUND)
            if isinstance(answer, int):
                raise NVMLError(answer)
            info.state, info.status, info.cliqueId = answer
            ctypes.memmove(info.clusterUuid, CLUSTER, 16)

        return fabric_info

    fake = types.SimpleNamespace(
        NVMLError=NVMLError,
        NVML_ERROR_NOT_SUPPORTED=NOT_SUPPORTED,
        NVML_ERROR_FUNCTION_NOT_FOUND=FUNCTION_NOT_FOUND,
        calls=calls,
    )
    if "v1" in bindings:
        fake.nvmlDeviceGetGpuFabricInfo = call("v1", v1, False)
        fake.c_nvmlGpuFabricInfo_t = FabricInfo
    if "v2" in bindings:
        fake.nvmlDeviceGetGpuFabricInfoV = call("v2", v2, True)
        fake.c_nvmlGpuFabricInfo_v2_t = FabricInfoV2
    return fake


def registered(clique=32766, state="completed", status=0):
    return {
        "state": state,
        "status": status,
        "cluster_uuid": "6f1c2a4e-58b0-4c3d-9e21-0a7b5c9d3e12",
        "clique_id": clique,
    }


NO_FABRIC = {"state": "not_supported", "status": None, "cluster_uuid": None, "clique_id": None}


@pytest.mark.parametrize(
    "case, fake, calls, fabric",
    [
        ("the first call answers", dict(v1=(3, 0, 32766), v2=(1, 0, 1)), ["v1"], registered()),
        ("a registration in progress", dict(v1=(2, 0, 0)), ["v1"], registered(0, "in_progress")),
        # go-nvlib's hasSymbol: a driver without the first call is asked the second.
        ("a driver without the first call", dict(v2=(3, 0, 7)), ["v1", "v2"], registered(7)),
        ("bindings without the first call", dict(v2=(3, 0, 7), bindings=("v2",)), ["v2"], registered(7)),
        # go-nvlib: NOT_SUPPORTED is "not attached", and the second call is not asked.
        ("a GPU without fabric", dict(v1=NOT_SUPPORTED, v2=(3, 0, 7)), ["v1"], NO_FABRIC),
        ("a driver without either call", dict(), ["v1", "v2"], None),
        ("bindings without either call", dict(bindings=()), [], None),
        # go-nvlib returns the error (GFD then writes no labels): NVML could not say.
        ("another error", dict(v1=NO_PERMISSION, v2=(3, 0, 7)), ["v1"], None),
    ],
)
def test_fabric(monkeypatch, case, fake, calls, fabric):
    fake = fake_pynvml(**fake)
    monkeypatch.setattr(nvml, "pynvml", fake)
    assert nvml._fabric("handle") == fabric
    assert fake.calls == calls


class DebianFabricInfo(ctypes.Structure):
    """nvmlGpuFabricInfo_t as Debian's python3-pynvml 11.525 declares it: 80 chars for the
    UUID, partitionId for cliqueId; NVML fills the 28 bytes nvml.h lays out."""

    _fields_ = [
        ("clusterUuid", ctypes.c_char * 80),
        ("status", ctypes.c_uint),
        ("partitionId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
    ]


def test_nvml_is_read_with_its_own_layout_not_the_bindings(monkeypatch):
    # Not UTF-8, and a NUL byte inside: neither may cut or break the UUID.
    cluster = bytes.fromhex("91002a4e58b04c3d9e210a7b5c9d3e12")

    def fabric_info(_handle, ref):
        layout = struct.pack("=16sIII", cluster, 0, 9, 3)  # uuid, status, cliqueId, state
        ctypes.memmove(ctypes.addressof(ref._obj), layout, len(layout))

    fake = fake_pynvml(bindings=())
    fake.nvmlDeviceGetGpuFabricInfo, fake.c_nvmlGpuFabricInfo_t = fabric_info, DebianFabricInfo
    monkeypatch.setattr(nvml, "pynvml", fake)
    assert nvml._fabric("handle") == dict(registered(9), cluster_uuid="91002a4e-58b0-4c3d-9e21-0a7b5c9d3e12")


def test_a_lost_gpu_is_lost_here_too(monkeypatch):
    monkeypatch.setattr(nvml, "pynvml", fake_pynvml(v1=GPU_IS_LOST))
    with pytest.raises(NVMLError):
        nvml._fabric("handle")
