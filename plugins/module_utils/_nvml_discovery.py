# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""NVML adapter: what GPUs a node has, read through nvidia-ml-py.

Private to the gpuops.k8s collection. Raises the typed errors below; only the module edge
turns them into fail_json. Optional GPU properties that a driver or GPU does not support
come back as None rather than failing the whole discovery.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import ctypes
import os
import traceback

try:
    from ansible_collections.gpuops.k8s.plugins.module_utils import _gpu_facts as facts
except ImportError:
    # Also shipped (with _gpu_facts) inside the device plugin daemon, which runs outside
    # Ansible: roles/device_plugin/files/gpuops-device-plugin links both files.
    from . import _gpu_facts as facts

try:
    import pynvml

    HAS_PYNVML = True
    PYNVML_IMPORT_ERROR = None
except ImportError:
    pynvml = None
    HAS_PYNVML = False
    PYNVML_IMPORT_ERROR = traceback.format_exc()

_REMOTE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "switch"}
# NVML return codes (nvmlReturn_t) that mean "this GPU stopped answering".
_LOST_CODES = frozenset([15, 17, 999])  # GPU_IS_LOST, IRQ_ISSUE (fell off the bus), UNKNOWN


class DiscoveryError(Exception):
    """Base class: discovery could not describe the node. `reason` is a stable keyword."""

    reason = "error"

    def __init__(self, message, nvml_code=None):
        super(DiscoveryError, self).__init__(message)
        self.nvml_code = nvml_code


class NvmlLibraryNotFound(DiscoveryError):
    reason = "library_not_found"


class NvmlInitFailed(DiscoveryError):
    reason = "init_failed"


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _code(error):
    return getattr(error, "value", None)


def _optional(call, *args):
    """Call an NVML getter whose absence is normal (old driver, unsupported GPU)."""
    try:
        return call(*args)
    except pynvml.NVMLError as error:
        if _code(error) in _LOST_CODES:
            raise
        return None


def _read_sysfs(sysfs_root, *parts):
    try:
        with open(os.path.join(sysfs_root, *parts)) as handle:
            return handle.read().strip()
    except OSError:
        return None


def _read_sysfs_bytes(sysfs_root, *parts):
    try:
        with open(os.path.join(sysfs_root, *parts), "rb") as handle:
            return handle.read()
    except OSError:
        return None


class NvmlSession:
    """nvmlInit / nvmlShutdown as a context manager with typed init errors."""

    def __enter__(self):
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            code = _code(error)
            if code == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
                raise NvmlLibraryNotFound(
                    "NVML library libnvidia-ml.so.1 was not found: the NVIDIA driver is not "
                    "installed (or its library is not on the loader path)",
                    code,
                ) from error
            if code == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
                raise NvmlInitFailed(
                    "NVML could not initialise: the NVIDIA kernel driver is not loaded "
                    "(check `lsmod | grep nvidia` and `dmesg` for the driver's load error)",
                    code,
                ) from error
            if code == pynvml.NVML_ERROR_NO_PERMISSION:
                raise NvmlInitFailed(
                    "NVML could not initialise: no permission to open /dev/nvidia* "
                    "(run as root or fix the device node modes)",
                    code,
                ) from error
            raise NvmlInitFailed("NVML could not initialise: %s" % error, code) from error
        return self

    def __exit__(self, *exc):
        # Shutting down after a failed query must not hide the query's error.
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
        return False


def system_info():
    """Driver, CUDA driver API and NVML versions (call inside an NvmlSession)."""
    cuda = _optional(pynvml.nvmlSystemGetCudaDriverVersion)
    return {
        "driver_version": _text(pynvml.nvmlSystemGetDriverVersion()),
        "cuda_driver_version": ("%d.%d" % (cuda // 1000, (cuda % 1000) // 10) if cuda else None),
        "nvml_version": _text(_optional(pynvml.nvmlSystemGetNVMLVersion)),
    }


def _mig_info(handle):
    modes = _optional(pynvml.nvmlDeviceGetMigMode, handle)
    if modes is None:
        return {"capable": False, "current": None, "pending": None, "devices": []}
    current, pending = modes
    info = {
        "capable": True,
        "current": "enabled" if current == pynvml.NVML_DEVICE_MIG_ENABLE else "disabled",
        "pending": "enabled" if pending == pynvml.NVML_DEVICE_MIG_ENABLE else "disabled",
        "devices": [],
    }
    if current != pynvml.NVML_DEVICE_MIG_ENABLE:
        return info
    for slot in range(_optional(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
        mig = _optional(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
        if mig is None:
            continue  # Empty slot: MIG layouts rarely fill every slot.
        attrs = _optional(pynvml.nvmlDeviceGetAttributes, mig)
        memory_mib = pynvml.nvmlDeviceGetMemoryInfo(mig).total // (1024 * 1024)
        info["devices"].append(
            {
                "index": slot,
                "uuid": _text(pynvml.nvmlDeviceGetUUID(mig)),
                "profile": (
                    facts.mig_profile_name(attrs.gpuInstanceSliceCount, attrs.memorySizeMB)
                    if attrs is not None
                    else None
                ),
                "memory_total_mib": memory_mib,
                "gpu_instance_id": _optional(pynvml.nvmlDeviceGetGpuInstanceId, mig),
                "compute_instance_id": _optional(pynvml.nvmlDeviceGetComputeInstanceId, mig),
                "attributes": _mig_attributes(attrs),
            }
        )
    return info


def _mig_attributes(attrs):
    """nvmlDeviceGetAttributes of a MIG device (what GFD labels it with); None if unsupported."""
    if attrs is None:
        return None
    return {
        "memory_mib": attrs.memorySizeMB,
        "multiprocessors": attrs.multiprocessorCount,
        "gpu_instance_slices": attrs.gpuInstanceSliceCount,
        "compute_instance_slices": attrs.computeInstanceSliceCount,
        "copy_engines": attrs.sharedCopyEngineCount,
        "decoders": attrs.sharedDecoderCount,
        "encoders": attrs.sharedEncoderCount,
        "jpeg_engines": attrs.sharedJpegCount,
        "ofa_engines": attrs.sharedOfaCount,
    }


def _nvlink_remotes(handle):
    remotes = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            state = pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError as error:
            if _code(error) in _LOST_CODES:
                raise
            # NOT_SUPPORTED: no NVLink at all; INVALID_ARGUMENT: past this GPU's last link.
            break
        if state != pynvml.NVML_FEATURE_ENABLED:
            continue
        kind = _optional(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
        pci = _optional(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
        remotes.append(
            {
                "link": link,
                "type": _REMOTE_TYPES.get(kind, "unknown"),
                "pci_bus_id": _text(pci.busId) if pci is not None else None,
            }
        )
    return remotes


# go-nvlib's IsFabricAttached: nvmlDeviceGetGpuFabricInfo where the driver's library has
# it, else nvmlDeviceGetGpuFabricInfoV with the v2 struct (same fields, and a version).
class _FabricInfo(ctypes.Structure):
    """nvmlGpuFabricInfo_t as nvml.h lays it out. Not the bindings' own: Debian's
    python3-pynvml 11.525 and 12.550 declare clusterUuid as 80 chars (11.525 also names
    cliqueId partitionId), so NVML's answer would be read at the wrong offsets."""

    _fields_ = [
        ("clusterUuid", ctypes.c_uint8 * 16),  # NVML_GPU_FABRIC_UUID_LEN
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint),
    ]


class _FabricInfoV2(ctypes.Structure):
    """nvmlGpuFabricInfo_v2_t, with its version word (nvmlGpuFabricInfo_v2)."""

    _fields_ = [("version", ctypes.c_uint), *_FabricInfo._fields_, ("healthMask", ctypes.c_uint32)]

    def __init__(self):
        super(_FabricInfoV2, self).__init__(version=ctypes.sizeof(_FabricInfoV2) | 2 << 24)


# The bindings' calls, in the order go-nvlib tries them, and the struct each fills.
_FABRIC_CALLS = (
    ("nvmlDeviceGetGpuFabricInfo", _FabricInfo),
    ("nvmlDeviceGetGpuFabricInfoV", _FabricInfoV2),
)


def _fabric(handle):
    """The GPU's NVLink fabric registration (_gpu_facts.gpu_fabric), as GFD's IMEX labeler reads it.

    A driver or GPU without fabric support reads as state not_supported. None when NVML
    cannot say: neither call is in the bindings or the driver, or the query failed.
    """
    for call, struct in _FABRIC_CALLS:
        if not hasattr(pynvml, call):
            continue  # bindings older than the call
        info = struct()
        try:
            getattr(pynvml, call)(handle, ctypes.byref(info))
        except pynvml.NVMLError as error:
            code = _code(error)
            if code in _LOST_CODES:
                raise
            if code == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                continue  # a driver older than the call
            if code == pynvml.NVML_ERROR_NOT_SUPPORTED:
                return facts.gpu_fabric(facts.FABRIC_NOT_SUPPORTED)
            return None
        return facts.gpu_fabric(info.state, info.status, bytes(info.clusterUuid), info.cliqueId)
    return None


def _gpu(index, handle, sysfs_root):
    pci_bus_id = _text(pynvml.nvmlDeviceGetPciInfo(handle).busId)
    sysfs_id = facts.sysfs_bus_id(pci_bus_id)
    numa = _read_sysfs(sysfs_root, "bus", "pci", "devices", sysfs_id, "numa_node")
    pci_class = _read_sysfs(sysfs_root, "bus", "pci", "devices", sysfs_id, "class")
    capability = _optional(pynvml.nvmlDeviceGetCudaComputeCapability, handle) or (0, 0)
    persistence = _optional(pynvml.nvmlDeviceGetPersistenceMode, handle)
    return {
        "index": index,
        "minor_number": _optional(pynvml.nvmlDeviceGetMinorNumber, handle),
        "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
        "name": _text(pynvml.nvmlDeviceGetName(handle)),
        "memory_total_mib": pynvml.nvmlDeviceGetMemoryInfo(handle).total // (1024 * 1024),
        "pci_bus_id": pci_bus_id,
        "pci_bus_id_sysfs": sysfs_id,
        "numa_node": int(numa) if numa not in (None, "", "-1") else None,
        "mode": {"0x030000": "graphics", "0x030200": "compute"}.get(pci_class),
        "compute_capability": {
            "major": capability[0],
            "minor": capability[1],
            "full": "%d.%d" % capability,
        },
        "family": facts.arch_family(*capability) if capability[0] else None,
        "persistence_mode": None if persistence is None else persistence == 1,
        "mig": _mig_info(handle),
        "fabric": _fabric(handle),
        "vgpu": facts.vgpu_from_pci_config(
            _read_sysfs_bytes(sysfs_root, "bus", "pci", "devices", sysfs_id, "config")
        ),
    }


def discover(sysfs_root="/sys"):
    """Describe the node's GPUs.

    Returns {system, gpus, lost_gpus, links, nvswitch, nvlinks}. A GPU that stops
    answering during the query lands in lost_gpus with its error instead of failing the
    rest. Raises NvmlLibraryNotFound or NvmlInitFailed when NVML itself is unusable.
    """
    with NvmlSession():
        system = system_info()
        gpus, lost, handles, remotes = [], [], {}, {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            try:
                handle = pynvml.nvmlDeviceGetHandleByIndex(index)
                gpu = _gpu(index, handle, sysfs_root)
                remotes[index] = _nvlink_remotes(handle)
            except pynvml.NVMLError as error:
                lost.append({"index": index, "error": str(error), "nvml_code": _code(error)})
                continue
            gpus.append(gpu)
            handles[index] = handle
        levels = {}
        indexes = sorted(handles)
        for pos, a in enumerate(indexes):
            for b in indexes[pos + 1 :]:
                levels[(a, b)] = _optional(pynvml.nvmlDeviceGetTopologyCommonAncestor, handles[a], handles[b])
    for gpu in gpus:
        links = remotes[gpu["index"]]
        gpu["nvlinks"] = {
            "active": len(links),
            "to_switch": sum(1 for r in links if r["type"] == "switch"),
            "to_gpu": sum(1 for r in links if r["type"] == "gpu"),
        }
    links = facts.link_matrix(gpus, remotes, levels)
    return {
        "system": system,
        "gpus": gpus,
        "lost_gpus": lost,
        "links": links,
        "nvswitch": any(g["nvlinks"]["to_switch"] for g in gpus),
    }


def read_machine_type(sysfs_root="/sys"):
    """The machine's product name from DMI (GFD's `nvidia.com/gpu.machine`).

    None when the file cannot be read (GFD then labels "unknown"); "" when it is empty.
    """
    return _read_sysfs(sysfs_root, "class", "dmi", "id", "product_name")
