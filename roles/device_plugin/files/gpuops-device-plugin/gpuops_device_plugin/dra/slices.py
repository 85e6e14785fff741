# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node's ResourceSlice specs, from discovery's facts and the health state. Pure.

Input: what `_nvml_discovery.discover` returns ({system, gpus, links, ...}) and the
unhealthy devices ({uuid: reason}, `HealthState.unhealthy()`). Output: plain dicts in the
resource.k8s.io/v1 JSON shape (camelCase), one spec per slice, ready for the publisher.

One pool per node, named for the node. A GPU is `gpu-<index>`; a GPU with MIG enabled
offers its MIG devices instead, `gpu-<index>-mig-<gi>-<ci>` (as NVIDIA's driver, which
announces MIG devices and not their parent). Attributes carry NVIDIA's DRA driver names
(v0.5.0, cmd/gpu-kubelet-plugin/deviceinfo.go and mig.go) and values in its form, so a
selector written for one reads the same here: type, uuid, productName, architecture
("Hopper", NVML's words), cudaComputeCapability / driverVersion / cudaDriverVersion as
semver versions (NVIDIA's Masterminds parse: "550.163.01" -> "550.163.1", "12.4" ->
"12.4.0"), and the standard `resource.kubernetes.io/` pciBusID ("0000:18:00.0"), pcieRoot
("pci0000:00") and numaNode (int; left out without NUMA affinity, as upstream's
deviceattribute package requires). brand and pcieRoot are published when the GPU's facts
carry them (`brand`, `pcie_root`): discovery does not read them yet, and NVIDIA too leaves
pcieRoot out when sysfs cannot tell. Capacity `memory` is the GPU's memory as a canonical
quantity ("81559Mi"), so that what the API server stores compares equal.

A whole GPU allows multiple allocations (DRAConsumableCapacity, beta and on in 1.36 and
1.37; an API server with the gate off drops the field, and the publisher says so): a claim
that asks for no memory consumes all of it, so a GPU stays one claim's as before, while
claims asking for part of its memory (`capacity.requests.memory`) share it, as many as fit.
That is the scheduler's accounting, not isolation: the claims' containers share the GPU as
CUDA processes do (time-sliced), none is limited to its part. MIG devices are partitions
already and allow one allocation.

Ours, for placement: `nvlinkDomain`, a string shared by GPUs that all reach each other over
NVLink in one hop (see nvlink_domains). Health becomes taints (see taint_for).

API limits (k8s.io/api v0.37.2 resource/v1): a value that breaks one is a typed error
naming the device and the field, never silently cut, except productName (see
_string_attribute). Per slice at most 128 devices, 64 once any device has taints: the pool
is split into as many slices as needed, each saying how many the pool has. Per device at
most 32 attributes and capacities. The API allows 16 taints per device; we write at most
one (one health reason per device), so no count check.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timezone

from .devices import DRIVER, device_name, mig_device_name, mig_ids

STANDARD_DOMAIN = "resource.kubernetes.io/"  # upstream's standard attributes (deviceattribute)

MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_TAINTS = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_VALUE_BYTES = 64

TAINT_XID = DRIVER + "/xid"
TAINT_LOST = DRIVER + "/lost"
# Any other reason a device is unhealthy (a double-bit ECC error, the health watcher
# failing): an unhealthy device is never published untainted.
TAINT_UNHEALTHY = DRIVER + "/unhealthy"
TAINT_EFFECT = "NoSchedule"

# GPU feature discovery's family (discovery's `family`, from the compute capability) in
# NVML's words (go-nvlib GetArchitectureAsString); families NVML does not name are left out.
ARCHITECTURES = {
    "kepler": "Kepler",
    "maxwell": "Maxwell",
    "pascal": "Pascal",
    "volta": "Volta",
    "turing": "Turing",
    "ampere": "Ampere",
    "ada-lovelace": "Ada Lovelace",
    "hopper": "Hopper",
    "blackwell": "Blackwell",
    "rubin": "Rubin",
}

# health.py's reasons: "XID 79 on GPU ...", "GPU ... does not answer: ...".
_XID = re.compile(r"\bxid (\d+)\b", re.IGNORECASE)
# health.probe_fault's reasons for a GPU gone from the node: it does not answer, NVML no
# longer lists it (fallen off the bus), or its device node is gone.
_LOST = re.compile(
    r"\bdoes not answer\b|^lost\b|^NVML no longer lists\b|^device node of GPU\b", re.IGNORECASE
)
_VERSION = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?$")
_LARGER_SUFFIXES = ("Gi", "Ti", "Pi", "Ei")  # after Mi, each 1024 times the one before


class SliceSpecError(ValueError):
    """A device cannot be published as the API requires; names the device and the field."""

    def __init__(self, device: str, field: str, problem: str):
        super().__init__(f"device {device}: {field}: {problem}")
        self.device = device
        self.field = field


class AttributeValueTooLong(SliceSpecError):
    """A string attribute longer than the API's 64 bytes (productName is cut instead)."""


class InvalidVersion(SliceSpecError):
    """A version attribute that does not read as a semantic version."""


class TooManyAttributes(SliceSpecError):
    """More attributes and capacities on one device than the API's 32."""


def build_slices(facts: Mapping, unhealthy: Mapping[str, str], node: str, *, now: datetime) -> list[dict]:
    """The specs of the node's ResourceSlices, in order; none when it offers no device.

    now: when a taint is added (the publisher keeps an earlier time for a taint it already
    published). The pool's generation is 0 here: the publisher sets it when it writes.
    """
    devices = build_devices(facts, unhealthy, now)
    tainted = any("taints" in device for device in devices)
    per_slice = MAX_DEVICES_PER_SLICE_WITH_TAINTS if tainted else MAX_DEVICES_PER_SLICE
    chunks = [devices[i : i + per_slice] for i in range(0, len(devices), per_slice)]
    return [
        {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 0, "resourceSliceCount": len(chunks)},
            "devices": chunk,
        }
        for chunk in chunks
    ]


def build_devices(facts: Mapping, unhealthy: Mapping[str, str], now: datetime) -> list[dict]:
    """Every device the node offers, by GPU index (a GPU's MIG devices by their instance IDs)."""
    gpus = sorted(facts["gpus"], key=lambda g: g["index"])
    domains = nvlink_domains(gpus, facts.get("links") or [])
    system = facts["system"]
    offered = []  # (uuids whose health is the device's: its own, and its GPU's; device)
    for gpu in gpus:
        migs = gpu.get("mig") or {}
        if migs.get("current") == "enabled":
            parts = sorted(migs.get("devices") or [], key=lambda mig, gpu=gpu: _mig_ids(gpu, mig))
            offered.extend(((mig["uuid"], gpu["uuid"]), _mig_device(gpu, mig, system)) for mig in parts)
        else:
            offered.append(((gpu["uuid"],), _gpu_device(gpu, system, domains.get(gpu["index"]))))
    for uuids, device in offered:
        reasons = [unhealthy[uuid] for uuid in uuids if uuid in unhealthy]
        if reasons:
            device["taints"] = [taint_for(reasons[0], now)]
        count = len(device["attributes"]) + len(device["capacity"])
        if count > MAX_ATTRIBUTES_AND_CAPACITIES:
            raise TooManyAttributes(
                device["name"],
                "attributes and capacity",
                f"{count} entries, the API allows {MAX_ATTRIBUTES_AND_CAPACITIES}",
            )
    return [device for _uuid, device in offered]


def nvlink_domains(gpus: list[dict], links: list[dict]) -> dict[int, str]:
    """GPU index -> NVLink domain, for GPUs that share one with another GPU.

    The rule, from discovery's link matrix: two GPUs are linked when their pair has direct
    NVLinks or both reach the NVSwitch fabric. A connected group of linked GPUs is a
    domain when every pair in it is linked (on an NVSwitch board that is all its GPUs; an
    NVLink bridge's pair; a fully linked quad). A group in which some pairs are not linked
    (a DGX-1 hybrid cube mesh) gets no domain: `matchAttribute` on it would promise
    one-hop NVLink between GPUs that have none. The value names the fabric and the group's
    lowest GPU index ("nvswitch-0", "nvlink-2"): unique on the node, which is all a claim
    needs (its devices are on one node).
    """
    present = {g["index"] for g in gpus}
    linked: dict[int, set[int]] = {index: set() for index in present}
    via_switch: set[int] = set()
    for pair in links:
        a, b = pair["gpus"]
        if a in present and b in present and (pair.get("nvswitch") or pair.get("nvlinks")):
            linked[a].add(b)
            linked[b].add(a)
            if pair.get("nvswitch"):
                via_switch.update((a, b))
    domains = {}
    seen: set[int] = set()
    for start in sorted(present):
        if start in seen or not linked[start]:
            continue
        group = _connected(start, linked)
        seen |= group
        if all(linked[member] >= group - {member} for member in group):
            fabric = "nvswitch" if group & via_switch else "nvlink"
            domains.update(dict.fromkeys(group, f"{fabric}-{min(group)}"))
    return domains


def taint_for(reason: str, now: datetime) -> dict:
    """The taint of an unhealthy device: XID (with its number), lost, or unhealthy."""
    xid = _XID.search(reason)
    if xid:
        taint = {"key": TAINT_XID, "value": xid.group(1)}
    elif _LOST.search(reason):
        taint = {"key": TAINT_LOST}
    else:
        taint = {"key": TAINT_UNHEALTHY}
    taint["effect"] = TAINT_EFFECT
    taint["timeAdded"] = timestamp(now)
    return taint


def timestamp(moment: datetime) -> str:
    """RFC 3339 in UTC to the second: metav1.Time's form, so the stored value reads back equal."""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def memory_quantity(mib: int) -> str:
    """MiB as Kubernetes writes the quantity back: the largest binary suffix that is exact."""
    if mib == 0:
        return "0"
    value, suffix = mib, "Mi"
    for larger in _LARGER_SUFFIXES:
        if value % 1024:
            break
        value, suffix = value // 1024, larger
    return f"{value}{suffix}"


def _gpu_device(gpu: dict, system: Mapping, domain: str | None) -> dict:
    name = device_name(gpu["index"])
    attributes = _common_attributes(name, gpu, system)
    attributes["type"] = {"string": "gpu"}
    attributes["uuid"] = _string_attribute(name, "uuid", gpu["uuid"])
    if domain is not None:
        attributes["nvlinkDomain"] = _string_attribute(name, "nvlinkDomain", domain)
    return {
        "name": name,
        "attributes": attributes,
        "capacity": {"memory": {"value": memory_quantity(gpu["memory_total_mib"])}},
        "allowMultipleAllocations": True,
    }


def _mig_device(gpu: dict, mig: dict, system: Mapping) -> dict:
    name = mig_device_name(gpu["index"], *_mig_ids(gpu, mig))
    attributes = _common_attributes(name, gpu, system)
    attributes["type"] = {"string": "mig"}
    attributes["uuid"] = _string_attribute(name, "uuid", mig["uuid"])
    attributes["parentUUID"] = _string_attribute(name, "parentUUID", gpu["uuid"])
    if mig.get("profile"):
        attributes["profile"] = _string_attribute(name, "profile", mig["profile"])
    return {
        "name": name,
        "attributes": attributes,
        "capacity": {"memory": {"value": memory_quantity(mig["memory_total_mib"])}},
    }


def _mig_ids(gpu: dict, mig: dict) -> tuple[int, int]:
    """The MIG device's GPU and compute instance IDs, which make its name."""
    ids = mig_ids(mig)
    if ids is None:
        where = f"MIG {mig['uuid']} on {device_name(gpu['index'])}"
        raise SliceSpecError(where, "name", "NVML gave no GPU or compute instance ID")
    return ids


def _common_attributes(name: str, gpu: dict, system: Mapping) -> dict:
    """What a GPU and its MIG devices share: the board, the driver, where it sits."""
    attributes = {"productName": _string_attribute(name, "productName", gpu["name"])}
    optional_strings = {
        "brand": gpu.get("brand"),
        "architecture": ARCHITECTURES.get(gpu.get("family") or ""),
        STANDARD_DOMAIN + "pciBusID": gpu["pci_bus_id_sysfs"],
        STANDARD_DOMAIN + "pcieRoot": gpu.get("pcie_root"),
    }
    for attribute, value in optional_strings.items():
        if value:
            attributes[attribute] = _string_attribute(name, attribute, value)
    capability = gpu.get("compute_capability") or {}
    versions = {
        "cudaComputeCapability": capability.get("full") if capability.get("major") else None,
        "driverVersion": system.get("driver_version"),
        "cudaDriverVersion": system.get("cuda_driver_version"),
    }
    for attribute, value in versions.items():
        if value:
            attributes[attribute] = {"version": _version(name, attribute, value)}
    if gpu.get("numa_node") is not None:
        attributes[STANDARD_DOMAIN + "numaNode"] = {"int": gpu["numa_node"]}
    return attributes


def _string_attribute(device: str, attribute: str, value: str) -> dict:
    """A string attribute within the API's 64 bytes.

    productName is cut to 64 bytes (at a character boundary): it describes the board, real
    names are under 30 characters, and refusing the whole node for a longer one would cost
    more than a selector on the full name could gain. Every other string identifies
    something (a UUID, a bus address, a domain) and a cut one would match the wrong thing
    or nothing: AttributeValueTooLong.
    """
    encoded = value.encode("utf-8")
    if len(encoded) <= MAX_VALUE_BYTES:
        return {"string": value}
    if attribute == "productName":
        return {"string": encoded[:MAX_VALUE_BYTES].decode("utf-8", "ignore")}
    raise AttributeValueTooLong(
        device, attribute, f"{len(encoded)} bytes, the API allows {MAX_VALUE_BYTES}: {value!r}"
    )


def _version(device: str, attribute: str, text: str) -> str:
    """text as a semantic version, the way NVIDIA's driver reads it (missing parts are 0,
    leading zeros dropped); the API refuses anything else."""
    match = _VERSION.match(text.strip())
    if not match:
        raise InvalidVersion(device, attribute, f"{text!r} is not a version of up to three numbers")
    return ".".join(str(int(part or 0)) for part in match.groups())


def _connected(start: int, linked: dict[int, set[int]]) -> set[int]:
    group, todo = {start}, [start]
    while todo:
        for peer in linked[todo.pop()] - group:
            group.add(peer)
            todo.append(peer)
    return group
