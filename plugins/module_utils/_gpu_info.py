# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_info's run: the device plugin's configuration, NVML's view of the node, the labels.

Private to the gpuops.k8s collection. Raises the typed errors below, each carrying the
result so far; the module turns them into fail_json. Not shipped with the device plugin
daemon, which shares _nvml_discovery and the label logic but not this.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import sys

from ansible_collections.gpuops.k8s.plugins.module_utils import _gfd_labels as gfd
from ansible_collections.gpuops.k8s.plugins.module_utils import _nvml_discovery as nvml
from ansible_collections.gpuops.k8s.plugins.module_utils import _plugin_config as plugin_config
from ansible_collections.gpuops.k8s.plugins.module_utils import _plugin_resources as plugin_resources


class GpuInfoError(Exception):
    """gpu_info cannot answer as asked; result: the return values the failure carries."""

    def __init__(self, message, result=None):
        super(GpuInfoError, self).__init__(message)
        self.result = result or {}


class MissingBindings(GpuInfoError):
    """require_nvml and no nvidia-ml-py on the node; traceback: the import's."""

    def __init__(self, traceback):
        super(MissingBindings, self).__init__("nvidia-ml-py is required")
        self.traceback = traceback


class BindingsNotInstalled(nvml.DiscoveryError):
    """No nvidia-ml-py on the node: NVML is there or not, but nothing can ask it."""

    reason = "bindings_not_installed"


def discover(params):
    """NVML's view of the node; a node without nvidia-ml-py raises BindingsNotInstalled."""
    if not nvml.HAS_PYNVML:
        raise BindingsNotInstalled(
            "nvidia-ml-py (the Python module pynvml) is not installed for %s (Debian contrib and "
            "Ubuntu: python3-pynvml; role nvidia_driver installs it)" % sys.executable
        )
    return nvml.discover(sysfs_root=params["sysfs_root"])


def device_plugin(params):
    """(source, mode, Config): what the node's plugin serves, from the option or the record.

    Raises plugin_config.ConfigError with the origin in front of the message.
    """
    record, source = params["device_plugin"], "option"
    try:
        if record is None:
            # Named first: a record that cannot be read is the record's fault, not the option's.
            source = "record"
            record = plugin_config.read_record(params["device_plugin_record"])
        if record is None:
            return "none", None, plugin_config.Config()
        config = plugin_config.served(record)  # checks that record is a mapping
        return source, record.get("mode") or "gpuops", config
    except plugin_config.ConfigError as error:
        origin = "option device_plugin" if source == "option" else params["device_plugin_record"]
        raise plugin_config.ConfigError(
            "the device plugin's configuration (%s): %s" % (origin, error)
        ) from None


def unusable(error):
    """The result's `nvml` when discovery raised error (a DiscoveryError)."""
    return {
        "available": False,
        "reason": error.reason,
        "error": str(error),
        "driver_version": None,
        "cuda_driver_version": None,
        "nvml_version": None,
    }


def warn_or_fail_on_lost(module, found, result):
    """Each GPU that stopped answering: a warning, or GpuInfoError with fail_on_lost_gpu."""
    for gone in found["lost_gpus"]:
        message = "GPU %d did not answer NVML: %s" % (gone["index"], gone["error"])
        if module.params["fail_on_lost_gpu"]:
            raise GpuInfoError(message, dict(result, gpus=found["gpus"], lost_gpus=found["lost_gpus"]))
        module.warn(message + "; it is left out of gpu_count and the labels")


def warn_on_mixed_models(module, gpus):
    models = sorted(set(g["name"] for g in gpus))
    if len(models) > 1:
        module.warn(
            "GPUs of different models (%s): labels describe the model of GPU %d (GPU feature "
            "discovery describes one model too)" % (", ".join(models), gpus[0]["index"])
        )


def warn_if_unserved(module, gpus, plugin):
    """The labels still follow GFD (MIG-INVALID, or a shared resource ignored); say why."""
    try:
        plugin_resources.offered(gpus, plugin)
    except plugin_resources.ResourceError as error:
        module.warn("the gpuops device plugin refuses to serve these GPUs with its configuration: %s" % error)


def run(module):
    """gpu_info's result for module.params; warnings through module.warn.

    Raises MissingBindings, and GpuInfoError with the result so far where NVML is unusable
    and required, a GPU is lost and fail_on_lost_gpu is set, or the labels are refused.
    """
    params = module.params
    if params["require_nvml"] and not nvml.HAS_PYNVML:
        raise MissingBindings(nvml.PYNVML_IMPORT_ERROR)
    plugin_error = None
    try:
        source, mode, plugin = device_plugin(params)
    except plugin_config.ConfigError as error:
        if params["fail_on_plugin_error"]:
            raise GpuInfoError(str(error)) from error
        # Described without labels: they depend on what the plugin serves, unknown here.
        plugin_error = str(error)
        source = "option" if params["device_plugin"] is not None else "record"
        mode, plugin = None, plugin_config.Config()
    result = {
        "changed": False,
        "gpus": [],
        "gpu_count": 0,
        "lost_gpus": [],
        "links": [],
        "nvswitch": False,
        "labels": {},
        "device_plugin": {
            "source": source,
            "mode": mode,
            "mig_strategy": plugin.mig_strategy,
            "sharing_strategy": plugin.sharing()[0],
            "error": plugin_error,
        },
    }
    try:
        found = discover(params)
    except nvml.DiscoveryError as error:
        result["nvml"] = unusable(error)
        if params["require_nvml"]:
            raise GpuInfoError(str(error), result) from error
        return result
    result["nvml"] = dict(found["system"], available=True, reason=None, error=None)
    warn_or_fail_on_lost(module, found, result)
    gpus = found["gpus"]
    warn_on_mixed_models(module, gpus)
    result.update(gpus=gpus, gpu_count=len(gpus), lost_gpus=found["lost_gpus"])
    if plugin_error is not None:
        result.update(links=found["links"], nvswitch=found["nvswitch"])
        return result
    machine = nvml.read_machine_type(params["sysfs_root"])
    try:
        labels = gfd.render(found["system"], gpus, machine=machine, plugin=plugin)
    except gfd.LabelError as error:
        raise GpuInfoError(str(error), result) from error
    if mode == "gpuops" and gpus:
        warn_if_unserved(module, gpus, plugin)
    result.update(links=found["links"], nvswitch=found["nvswitch"], labels=labels)
    return result
