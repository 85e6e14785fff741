# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The node labels NVIDIA's GPU feature discovery (GFD) writes, from gpu_info's facts.

Private to the gpuops.k8s collection; pure. The labels describe the GPUs and what the
device plugin offers from them: MIG strategy, sharing (time-slicing, MPS), renames. They
follow GFD v0.20.0 (NVIDIA/k8s-device-plugin internal/lm/), computed from the same
configuration the node's plugin serves with (_plugin_config) and the same resolution of
resources and replicas (_plugin_resources), so the labels and the plugin agree.

Where we differ from GFD, on purpose:
- GFD describes a node with GPUs of several models by whichever model its map yields
  last; we describe the model of the first GPU (gpu.count counts GPUs of that model, as
  GFD's does).
- Our plugin can give GPUs of one resource different replica counts (perDevice,
  devices); GFD's config cannot. gpu.replicas is then the largest count among the GPUs
  the labels describe (the most a GPU of the resource is shared); with one count for all
  of them, the common case, it is exactly GFD's value.
- MIG profile names are the gpuops plugin's, <GPU instance slices>g.<GiB>gb. NVIDIA's
  name a compute instance smaller than its GPU instance (<c>c.<g>g.<GiB>gb), carry the
  profile's attributes (.me, .me.all, .gfx, -me) and round the GiB from the GPU's memory
  fraction. mig-<profile>.* and gpu.product name the resources the plugin serves.
- A value GFD would write but Kubernetes refuses (over 63 characters, a trailing "." or
  "-") is cut and trimmed to a valid one (_gpu_facts.valid_label_value).
- Where one NVML query fails GFD writes no labels at all (driver or CUDA version, compute
  capability, MIG attributes, a vGPU record, a GPU's fabric); we leave out the labels
  that query gives (a MIG device without attributes keeps its memory; a GPU whose fabric
  could not be read leaves out nvidia.com/gpu.clique) and write the rest.
- A node without usable GPUs gets no labels; GFD there still writes vgpu.present from
  the PCI bus. Our vGPU labels read the GPUs NVML lists, GFD's every NVIDIA PCI function.
- No nvidia.com/gfd.timestamp: it would change the Node on every run.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.k8s.plugins.module_utils import _gpu_facts as facts
from ansible_collections.gpuops.k8s.plugins.module_utils import _plugin_config as plugin_config
from ansible_collections.gpuops.k8s.plugins.module_utils import _plugin_resources as plugin_resources

GFD_RELEASE = "v0.20.0"
FULL_GPU = plugin_resources.FULL_GPU
UNKNOWN = "unknown"

# A MIG device's attributes (gpu_info's `mig.devices[].attributes`) -> GFD's label suffix.
MIG_ATTRIBUTE_LABELS = (
    ("memory_mib", "memory"),
    ("multiprocessors", "multiprocessors"),
    ("gpu_instance_slices", "slices.gi"),
    ("compute_instance_slices", "slices.ci"),
    ("copy_engines", "engines.copy"),
    ("decoders", "engines.decoder"),
    ("encoders", "engines.encoder"),
    ("jpeg_engines", "engines.jpeg"),
    ("ofa_engines", "engines.ofa"),
)


class LabelError(ValueError):
    """The configuration asks for something GFD refuses to describe (MPS on MIG GPUs)."""


def render(system, gpus, machine=None, plugin=None):
    """The node labels for a set of usable GPUs (empty when there are none).

    system: gpu_info's `nvml` versions; gpus: gpu_info's `gpus`; machine: the DMI product
    name, None when it could not be read; plugin: the device plugin's Config
    (_plugin_config), None for the defaults (no MIG strategy, no sharing).
    Besides GFD's labels: `nvidia.com/gpu.present` (GPU Operator) and `accelerator`.
    """
    if not gpus:
        return {}
    plugin = plugin or plugin_config.Config()
    first = gpus[0]
    labels = {
        "nvidia.com/gpu.present": "true",
        "accelerator": facts.accelerator_model(first["name"]),
        "nvidia.com/gpu.machine": UNKNOWN if machine is None else facts.label_value(machine),
        "nvidia.com/gpu.mode": gpu_mode(gpus),
        "nvidia.com/mig.capable": str(any(g["mig"]["capable"] for g in gpus)).lower(),
        "nvidia.com/mps.capable": mps_capable(gpus, plugin),
    }
    labels.update(version_labels(system))
    labels.update(vgpu_labels(gpus))
    labels.update(clique_labels(gpus))
    labels.update(full_gpu_labels([g for g in gpus if g["name"] == first["name"]], plugin))
    if plugin.mig_strategy != "none":
        labels["nvidia.com/mig.strategy"] = plugin.mig_strategy
        labels.update(mig_labels(gpus, plugin))
    return labels


def gpu_mode(gpus):
    """compute or graphics when every GPU says the same; unknown when any is unknown or they differ."""
    modes = set(g.get("mode") for g in gpus)
    return modes.pop() if len(modes) == 1 and None not in modes else UNKNOWN


def mps_capable(gpus, plugin):
    strategy = plugin.sharing()[0]
    if strategy != plugin_config.SHARING_MPS:
        return "false"
    enabled = [str(g["index"]) for g in gpus if plugin_resources.mig_enabled(g)]
    if enabled:
        raise LabelError(
            "sharing.mps: MPS sharing is not supported on MIG-enabled GPUs (GPU %s); "
            "GPU feature discovery refuses to label such a node" % ", ".join(enabled)
        )
    return "true"


def vgpu_labels(gpus):
    """nvidia.com/vgpu.present, and the host's driver from the last vGPU's record.

    GFD writes the host driver of each vGPU in PCI address order over the one before (NVML
    numbers GPUs in that order too), so the last one's stays. No label at all when some
    GPU's PCI configuration could not be read, as GFD.
    """
    records = [g.get("vgpu") for g in gpus]
    if any(record is None for record in records):
        return {}
    present = [r for r in records if r["present"]]
    labels = {"nvidia.com/vgpu.present": str(bool(present)).lower()}
    if present:
        for key, field in (
            ("host-driver-version", "host_driver_version"),
            ("host-driver-branch", "host_driver_branch"),
        ):
            if present[-1][field] is not None:
                labels["nvidia.com/vgpu." + key] = facts.valid_label_value(present[-1][field])
    return labels


NO_CLUSTER = "00000000-0000-0000-0000-000000000000"


def fabric_attached(fabric):
    """go-nvlib's IsFabricAttached: the GPU's fabric registration completed, succeeded, and
    named a cluster."""
    return (
        fabric["state"] == "completed"
        and fabric["status"] == 0
        and fabric["cluster_uuid"] not in (None, NO_CLUSTER)
    )


def clique_labels(gpus):
    """nvidia.com/gpu.clique=<cluster UUID>.<clique ID>: the NVLink domain the GPUs are in.

    As GFD's IMEX labeler (internal/lm/imex.go): GPUs not attached to a fabric are left out;
    the attached ones must name one cluster and one clique, else no label; no label when
    none is attached. GFD fails the whole node where a GPU's fabric query fails (gpu_info's
    `fabric` null); we leave only this label out.
    """
    fabrics = [g.get("fabric") for g in gpus]
    if any(fabric is None for fabric in fabrics):
        return {}
    attached = [f for f in fabrics if fabric_attached(f)]
    clusters = set(f["cluster_uuid"] for f in attached)
    cliques = set(f["clique_id"] for f in attached)
    if len(clusters) != 1 or len(cliques) != 1:
        return {}
    return {"nvidia.com/gpu.clique": "%s.%d" % (clusters.pop(), cliques.pop())}


def version_labels(system):
    labels = {}
    driver = system.get("driver_version") or ""
    parts = driver.split(".")
    if 2 <= len(parts) <= 3:
        revision = parts[2] if len(parts) == 3 else ""
        labels.update(
            {
                "nvidia.com/cuda.driver-version.major": parts[0],
                "nvidia.com/cuda.driver-version.minor": parts[1],
                "nvidia.com/cuda.driver-version.revision": revision,
                "nvidia.com/cuda.driver-version.full": driver,
                # GFD still writes the deprecated names; selectors in the wild use them.
                "nvidia.com/cuda.driver.major": parts[0],
                "nvidia.com/cuda.driver.minor": parts[1],
                "nvidia.com/cuda.driver.rev": revision,
            }
        )
    cuda = system.get("cuda_driver_version")
    if cuda:
        major, minor = cuda.split(".")[:2]
        labels.update(
            {
                "nvidia.com/cuda.runtime-version.major": major,
                "nvidia.com/cuda.runtime-version.minor": minor,
                "nvidia.com/cuda.runtime-version.full": "%s.%s" % (major, minor),
                "nvidia.com/cuda.runtime.major": major,
                "nvidia.com/cuda.runtime.minor": minor,
            }
        )
    return labels


def sharing_of(resource, devices, plugin):
    """(replicas, sharing strategy, renamed) the labels give a resource made of devices.

    plugin None: GFD's "without sharing" (the full-GPU labels of MIG-enabled GPUs):
    replicas 0. Otherwise the sharing entry for the resource, each device's replicas as
    the plugin computes them, and whether the plugin offers the replicas under another
    name.
    """
    if plugin is None:
        return 0, plugin_config.SHARING_NONE, False
    strategy, resources, rename_by_default = plugin.sharing()
    entry = next((r for r in resources if r.name == resource), None)
    if entry is None:
        return 1, plugin_config.SHARING_NONE, False
    renamed = plugin_resources.shared_name(entry, rename_by_default) != resource
    most = max(plugin_resources.replicas(entry, d) for d in devices)
    if most <= 1:
        return most, plugin_config.SHARING_NONE, renamed
    return most, strategy, renamed


def resource_labels(resource, count, product_parts, devices, plugin):
    """<resource>.{product,count,replicas,sharing-strategy}, as GFD's baseLabeler."""
    replicas, strategy, renamed = sharing_of(resource, devices, plugin)
    parts = [facts.gfd_sanitise(p) for p in product_parts if p]
    if replicas > 1 and not renamed:
        parts.append("SHARED")
    return {
        resource + ".product": facts.valid_label_value("-".join(parts)),
        resource + ".count": str(count),
        resource + ".replicas": str(replicas),
        resource + ".sharing-strategy": strategy,
    }


def _whole_gpu_labels(gpus, count, plugin):
    # GFD keeps the last GPU of the model in its map (memory differs with ECC, for one).
    gpu = gpus[-1]
    labels = resource_labels(
        FULL_GPU, count, [gpu["name"]], [plugin_resources.whole_gpu(g) for g in gpus], plugin
    )
    if gpu.get("memory_total_mib"):
        labels[FULL_GPU + ".memory"] = str(gpu["memory_total_mib"])
    major, minor = gpu["compute_capability"]["major"], gpu["compute_capability"]["minor"]
    if major:
        labels.update(
            {
                FULL_GPU + ".family": facts.arch_family(major, minor),
                FULL_GPU + ".compute.major": str(major),
                FULL_GPU + ".compute.minor": str(minor),
            }
        )
    return labels


def full_gpu_labels(gpus, plugin):
    """nvidia.com/gpu.* for GPUs of one model, as GFD's newGPULabelers.

    gpu.count counts them all, MIG on or off. MIG-enabled GPUs are described without
    sharing (replicas 0); GPUs without MIG, when there are any, override that with the
    plugin's sharing.
    """
    labels = {}
    enabled = [g for g in gpus if plugin_resources.mig_enabled(g)]
    whole = [g for g in gpus if not plugin_resources.mig_enabled(g)]
    if enabled:
        labels.update(_whole_gpu_labels(enabled, len(gpus), None))
    if whole:
        labels.update(_whole_gpu_labels(whole, len(gpus), plugin))
    return labels


def _mig_slots(gpus):
    """{MIG device UUID: (parent GPU, gpu_info's MIG device)}."""
    return dict((slot["uuid"], (gpu, slot)) for gpu in gpus for slot in gpu["mig"]["devices"])


def mig_resource_labels(resource, devices, plugin, slots):
    """<resource>.* for MIG devices of one profile, described by the first of them."""
    gpu, slot = slots[devices[0].uuid]
    labels = resource_labels(resource, len(devices), [gpu["name"], "MIG", slot["profile"]], devices, plugin)
    attributes = slot.get("attributes")
    if attributes:
        for field, suffix in MIG_ATTRIBUTE_LABELS:
            labels["%s.%s" % (resource, suffix)] = str(attributes[field])
    elif slot.get("memory_total_mib"):
        # NVML gave no attributes (GFD fails the whole node there): the memory we know.
        labels[resource + ".memory"] = str(slot["memory_total_mib"])
    return labels


def invalid_single_labels(gpu):
    """GFD's labels for a MIG layout that migStrategy single cannot serve."""
    parts = [facts.gfd_sanitise(gpu["name"]), "MIG", "INVALID"]
    return {
        FULL_GPU + ".product": facts.valid_label_value("-".join(parts)),
        FULL_GPU + ".count": "0",
        FULL_GPU + ".replicas": "0",
        FULL_GPU + ".sharing-strategy": "",
        FULL_GPU + ".memory": "0",
    }


def mig_labels(gpus, plugin):
    """The MIG part for migStrategy single (nvidia.com/gpu.* from the MIG devices) or mixed
    (nvidia.com/mig-<profile>.* per profile); the resources are the plugin's own."""
    try:
        base = plugin_resources.base_resources(gpus, plugin.mig_strategy)
    except plugin_resources.MigLayoutError as error:
        return invalid_single_labels(error.gpu)
    slots = _mig_slots(gpus)
    labels = {}
    for resource, devices in sorted(base.items()):
        if devices and devices[0].mig_profile is not None:
            labels.update(mig_resource_labels(resource, devices, plugin, slots))
    return labels
