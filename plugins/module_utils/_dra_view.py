# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a node whose GPUs a DRA driver serves offers (device_plugin_mode dra, gpuops's driver,
or nvidia_dra, NVIDIA's), read from registered results: which mechanism serves the node, the
devices its driver publishes in its ResourceSlices, and the GPUs a ResourceClaim was allocated.

Private to the gpuops.k8s collection. Pure: no I/O, no Ansible objects. The gpu_doctor rules
(_doctor_dra) and the gpuops.k8s.dra_* filters (gpu_validation) read the same view.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.k8s.plugins.module_utils._doctor_base import resources

DRA = "dra"
DEVICE_PLUGIN = "device_plugin"
NVIDIA_DRA = "nvidia_dra"
# The device_plugin role's modes that serve the node's GPUs through a DRA driver.
DRA_MODES = (DRA, NVIDIA_DRA)
# NVIDIA's DRA driver's name (mode nvidia_dra); its chart names its class of whole GPUs after it.
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"


def serving_mode(gpu, node_state, registration_socket):
    """V(dra) or V(device_plugin): what the device_plugin role recorded it serves on the node
    (gpu_info's device_plugin.mode; V(dra) for either DRA mode), else, on a node without a
    record, whether the DRA driver's registration socket is there (node_state_info's paths)."""
    mode = ((gpu or {}).get("device_plugin") or {}).get("mode")
    if mode is not None:
        return DRA if mode in DRA_MODES else DEVICE_PLUGIN
    entry = ((node_state or {}).get("paths") or {}).get(registration_socket) or {}
    return DRA if entry.get("type") == "socket" else DEVICE_PLUGIN


def recorded_dra(gpu, own_driver):
    """{mode, driver}: the DRA driver the device_plugin role recorded serving the node (gpu_info's
    device_plugin.mode): NVIDIA's in mode nvidia_dra, else ours, named own_driver, in mode dra
    (also where nothing is recorded: which mechanism serves the node is serving_mode's question)."""
    mode = ((gpu or {}).get("device_plugin") or {}).get("mode")
    if mode == NVIDIA_DRA:
        return {"mode": NVIDIA_DRA, "driver": NVIDIA_DRA_DRIVER}
    return {"mode": DRA, "driver": own_driver}


def _attribute(device, driver, name):
    """A device attribute's value, its name unqualified (the driver's domain) or qualified."""
    attributes = device.get("attributes") or {}
    value = attributes.get(name) or attributes.get("%s/%s" % (driver, name)) or {}
    for kind in ("string", "int", "bool", "version"):
        if kind in value:
            return value[kind]
    return None


def published(slices, driver, node_name):
    """The devices driver publishes for node_name (k8s_info's ResourceSlices), those of the pool's
    newest generation, as [{name, uuid, parent, taints}]; None where it publishes no slice there."""
    mine = []
    for item in resources(slices):
        spec = item.get("spec") or {}
        pool = spec.get("pool") or {}
        if spec.get("driver") == driver and node_name in (spec.get("nodeName"), pool.get("name")):
            mine.append(spec)
    if not mine:
        return None
    newest = max(int((spec.get("pool") or {}).get("generation") or 0) for spec in mine)
    devices = []
    for spec in mine:
        if int((spec.get("pool") or {}).get("generation") or 0) != newest:
            continue
        for device in spec.get("devices") or []:
            devices.append(
                {
                    "name": device.get("name"),
                    "uuid": _attribute(device, driver, "uuid"),
                    "parent": _attribute(device, driver, "parentUUID"),
                    "taints": list(device.get("taints") or []),
                }
            )
    return devices


def _uuids(card):
    return set([card["uuid"]]) | set(
        d["uuid"] for d in ((card.get("mig") or {}).get("devices") or []) if d.get("uuid")
    )


class Offer:
    """What the driver's slice offers for the node against the GPUs NVML lists (gpu_info)."""

    def __init__(self, gpu, slices, driver, node_name):
        self.gpus = [card for card in ((gpu or {}).get("gpus") or []) if card.get("uuid")]
        self.devices = published(slices, driver, node_name)
        devices = self.devices or []
        self.tainted = [d for d in devices if d["taints"]]
        untainted = [d for d in devices if not d["taints"]]
        listed = set()
        for card in self.gpus:
            listed |= _uuids(card)
        # Devices offered for GPUs NVML does not list (a GPU gone since the daemon last published).
        self.unlisted = [d for d in untainted if d["uuid"] not in listed and d["parent"] not in listed]
        offered = set(d["uuid"] for d in untainted) | set(d["parent"] for d in untainted if d["parent"])
        # NVML's GPUs no untainted device stands for (the GPU itself or one of its MIG devices).
        self.not_offered = [card for card in self.gpus if not offered & _uuids(card)]
        # NVML's GPUs some untainted device offers: what a DRA node offers, in GPUs.
        self.offered = len(self.gpus) - len(self.not_offered)

    def summary(self):
        """{offered, devices, tainted}: for the doctor's and validation's summaries."""
        devices = self.devices or []
        return {"offered": self.offered, "devices": len(devices), "tainted": len(self.tainted)}


def taint_text(device):
    """'gpu-1 (GPU-..., gpu.gpuops.k8s/xid=79)'."""
    taints = ", ".join(
        "%s=%s" % (t.get("key"), t["value"]) if t.get("value") else str(t.get("key"))
        for t in device["taints"]
    )
    return "%s (%s, %s)" % (device["name"], device["uuid"], taints)


def claim_uuids(claim, slices, driver):
    """The UUIDs of the devices a ResourceClaim (k8s_info's first resource) was allocated, from
    the `uuid` attribute of each allocated device in the driver's slices: {uuids, note}, note
    saying why they could not be had (then uuids is empty)."""
    claims = resources(claim)
    if not claims:
        return {"uuids": [], "note": "the test pod's ResourceClaim could not be read"}
    results = (((claims[0].get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results")
    if not results:
        return {"uuids": [], "note": "the test pod's ResourceClaim has no allocated device"}
    by_device = {}
    for item in resources(slices):
        spec = item.get("spec") or {}
        pool = (spec.get("pool") or {}).get("name")
        for device in spec.get("devices") or []:
            by_device[(spec.get("driver"), pool, device.get("name"))] = device
    uuids, unknown = [], []
    for result in results:
        key = (result.get("driver"), result.get("pool"), result.get("device"))
        device = by_device.get(key)
        uuid = _attribute(device, driver, "uuid") if device is not None else None
        if uuid is None:
            unknown.append("%s/%s/%s" % key)
        else:
            uuids.append(uuid)
    if unknown:
        return {
            "uuids": [],
            "note": "the claim's allocated device(s) %s are not in the driver's ResourceSlices with a uuid "
            "attribute" % ", ".join(unknown),
        }
    return {"uuids": sorted(set(uuids)), "note": None}
