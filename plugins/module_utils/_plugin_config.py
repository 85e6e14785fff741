# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The device plugin's configuration as data: NVIDIA's `version: v1` schema plus ours.

Private to the gpuops.k8s collection. One reader for two users: the gpuops device plugin
daemon (roles/device_plugin/files/gpuops-device-plugin links this file; its config.py
adds the YAML file and the command line) and gpu_info, whose labels describe what the
plugin serves (MIG strategy, sharing). Pure: plain data and environment mappings in, a
validated Config out; every error names the field, the value and what would be valid.
"""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import dataclasses
import json
import os
import re
from typing import Any

MIG_STRATEGIES = ("none", "single", "mixed")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
# NVIDIA's default: XIDs that an application causes, not the GPU (13 graphics engine
# exception, 31 MMU fault, 43 GPU stopped processing, 45 preemptive cleanup, 68 video
# processor exception, 109 context switch timeout).
DEFAULT_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
# What the plugin's `sharing` section can ask for (NVIDIA's names, as GFD writes them).
SHARING_TIME_SLICING = "time-slicing"
SHARING_MPS = "mps"
SHARING_NONE = "none"
# Which kubelet API the daemon serves the GPUs through: the device plugin (nvidia.com/gpu)
# or Dynamic Resource Allocation (driver gpu.gpuops.k8s). One per process and node: see
# gpuops_device_plugin/frontends.py for why.
FRONT_END_DEVICE_PLUGIN = "devicePlugin"
FRONT_END_DRA = "dra"
FRONT_ENDS = (FRONT_END_DEVICE_PLUGIN, FRONT_END_DRA)
# The DRA front end's defaults: the kubelet's directories (its plugin watcher's registry and
# the drivers' sockets), CDI's runtime directory with nvidia-ctk's spec, and the kubelet's
# own credentials (the Node authorizer lets a node manage its own ResourceSlices and read
# the claims of its pods, so the driver needs no RBAC of its own).
DEFAULT_DRA_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_DRA_PLUGINS_DIR = "/var/lib/kubelet/plugins"
DEFAULT_DRA_CDI_DIR = "/var/run/cdi"
DEFAULT_DRA_TOOLKIT_SPEC = "/var/run/cdi/nvidia.yaml"
DEFAULT_DRA_KUBECONFIG = "/etc/kubernetes/kubelet.conf"
# The driver's nvidia-smi, which sets a claim's time-slice (dra/timeslice.py): a name is
# looked up on PATH when a claim asks for one.
DEFAULT_DRA_NVIDIA_SMI = "nvidia-smi"


class ConfigError(ValueError):
    """The configuration is invalid; the message names the field, the value, what is valid."""


@dataclasses.dataclass(frozen=True)
class PerDevice:
    """Replicas for the GPUs that match: by `uuid`, `index` or `model` (product name)."""

    replicas: int
    uuid: str | None = None
    index: str | None = None
    model: str | None = None

    def matches(self, uuid: str, index: str, model: str) -> bool:
        return (self.uuid, self.index, self.model) != (None, None, None) and all(
            want is None or want == have
            for want, have in ((self.uuid, uuid), (self.index, index), (self.model, model))
        )


@dataclasses.dataclass(frozen=True)
class SharedResource:
    name: str
    replicas: int
    rename: str | None = None
    devices: tuple[str, ...] | None = None  # None: all GPUs; else indices or UUIDs
    per_device: tuple[PerDevice, ...] = ()


@dataclasses.dataclass(frozen=True)
class Config:
    mig_strategy: str = "none"
    fail_on_init_error: bool = True
    pass_device_specs: bool = False
    device_list_strategy: tuple[str, ...] = ("envvar",)
    device_id_strategy: str = "uuid"
    nvidia_dev_root: str = "/"
    plugin_dir: str = DEFAULT_PLUGIN_DIR
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    shared: tuple[SharedResource, ...] = ()
    # NVIDIA's sharing.mps (None: no such section). The gpuops daemon does not serve MPS
    # (refuse_unserved); the labels describe it for NVIDIA's plugin.
    mps_shared: tuple[SharedResource, ...] | None = None
    mps_rename_by_default: bool = False
    health_enabled: bool = True
    ignored_xids: frozenset[int] = frozenset(DEFAULT_IGNORED_XIDS)
    recovery_enabled: bool = True
    recovery_quiet_seconds: float = 60.0
    probe_interval_seconds: float = 5.0
    metrics_address: str = ":9402"
    log_level: str = "INFO"
    front_end: str = FRONT_END_DEVICE_PLUGIN
    # The DRA front end's (`dra:` in the file); the device plugin front end reads none.
    # "": the host name in lower case, as the kubelet names its Node without an override.
    dra_node_name: str = ""
    dra_kubeconfig: str = DEFAULT_DRA_KUBECONFIG
    dra_registry_dir: str = DEFAULT_DRA_REGISTRY_DIR
    dra_plugins_dir: str = DEFAULT_DRA_PLUGINS_DIR
    dra_cdi_dir: str = DEFAULT_DRA_CDI_DIR
    dra_toolkit_spec: str = DEFAULT_DRA_TOOLKIT_SPEC
    dra_nvidia_smi: str = DEFAULT_DRA_NVIDIA_SMI
    # The extended resource a DeviceClass of this driver serves (extendedResourceName); a
    # device plugin's leftover of it is removed from the Node's status (dra/node_status.py).
    dra_extended_resource: str = ""
    # How often the node's ResourceSlices are checked (and published again after the
    # kubelet deleted them); a health change publishes at once.
    dra_resync_seconds: float = 30.0

    def describe(self) -> dict[str, Any]:
        """The effective configuration as plain data, for the one start-up log line."""
        data = dataclasses.asdict(self)
        data["ignored_xids"] = sorted(self.ignored_xids)
        return data

    def sharing(self) -> tuple[str, tuple[SharedResource, ...], bool]:
        """(strategy, the replicated resources, rename by default) as NVIDIA reads them.

        An `mps` section wins over `timeSlicing` (NVIDIA's Sharing.ReplicatedResources);
        the strategy is "none" unless some resource there has more than one replica.
        """
        if self.mps_shared is not None:
            strategy = SHARING_MPS if any(r.replicas > 1 for r in self.mps_shared) else SHARING_NONE
            return strategy, self.mps_shared, self.mps_rename_by_default
        strategy = SHARING_TIME_SLICING if any(r.replicas > 1 for r in self.shared) else SHARING_NONE
        return strategy, self.shared, self.rename_by_default


def parse_bool(text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


# Flag name -> (Config field, parser, env var(s)); env names are NVIDIA's where they exist.
OPTIONS = {
    "mig-strategy": ("mig_strategy", str, ("MIG_STRATEGY",)),
    "fail-on-init-error": ("fail_on_init_error", parse_bool, ("FAIL_ON_INIT_ERROR",)),
    "pass-device-specs": ("pass_device_specs", parse_bool, ("PASS_DEVICE_SPECS",)),
    "device-list-strategy": ("device_list_strategy", str, ("DEVICE_LIST_STRATEGY",)),
    "device-id-strategy": ("device_id_strategy", str, ("DEVICE_ID_STRATEGY",)),
    "nvidia-dev-root": ("nvidia_dev_root", str, ("NVIDIA_DEV_ROOT",)),
    "device-plugin-path": ("plugin_dir", str, ("GPUOPS_DEVICE_PLUGIN_PATH",)),
    "metrics-address": ("metrics_address", str, ("GPUOPS_METRICS_ADDRESS",)),
    "log-level": ("log_level", str, ("GPUOPS_LOG_LEVEL",)),
    "front-end": ("front_end", str, ("GPUOPS_FRONT_END",)),
    # NODE_NAME: what NVIDIA's DRA driver reads (the downward API's spec.nodeName).
    "node-name": ("dra_node_name", str, ("NODE_NAME",)),
    "kubeconfig": ("dra_kubeconfig", str, ("GPUOPS_KUBECONFIG",)),
    "kubelet-registry-path": ("dra_registry_dir", str, ("GPUOPS_KUBELET_REGISTRY_PATH",)),
    "kubelet-plugins-path": ("dra_plugins_dir", str, ("GPUOPS_KUBELET_PLUGINS_PATH",)),
    "cdi-root": ("dra_cdi_dir", str, ("GPUOPS_CDI_ROOT",)),
}


def parse_option(field, parse, raw, where):
    """One flag or environment value, parsed for its Config field."""
    if field == "device_list_strategy":
        return tuple(part.strip() for part in str(raw).split(",") if part.strip())
    try:
        return parse(raw)
    except ValueError as error:
        raise ConfigError(f"{where}: {raw!r} is not valid: {error}") from None


def values_from_environment(environ: dict[str, str], values: dict[str, Any]) -> dict[str, Any]:
    """The values the environment sets over `values` (NVIDIA's variable names and meanings)."""
    updates: dict[str, Any] = {}
    for field, parse, envs in OPTIONS.values():
        raw = next((environ[name] for name in envs if environ.get(name) not in (None, "")), None)
        if raw is not None:
            updates[field] = parse_option(field, parse, raw, "/".join(envs))
    updates.update(_health_env(environ, values))
    return updates


def _health_env(environ, values):
    """NVIDIA's DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS, same meanings."""
    updates: dict[str, Any] = {}
    ignored = set(values.get("ignored_xids", DEFAULT_IGNORED_XIDS))
    disable = str(environ.get("DP_DISABLE_HEALTHCHECKS") or "").strip()
    if disable:
        words = [w.strip() for w in disable.split(",") if w.strip()]
        if "all" in words or "xids" in words:
            updates["health_enabled"] = False
        ignored.update(_xids("DP_DISABLE_HEALTHCHECKS", [w for w in words if w not in ("all", "xids")]))
    enable = str(environ.get("DP_ENABLE_HEALTHCHECKS") or "").strip()
    if enable:
        ignored.difference_update(_xids("DP_ENABLE_HEALTHCHECKS", enable.split(",")))
    if disable or enable:
        updates["ignored_xids"] = frozenset(ignored)
    return updates


def _xids(where, words):
    result = []
    for raw in words:
        word = str(raw).strip()
        if not word:
            continue
        try:
            xid = int(word)
        except ValueError:
            raise ConfigError(
                f"{where}: {word!r} is not an XID (a positive integer), 'all' or 'xids'"
            ) from None
        if xid <= 0:
            raise ConfigError(f"{where}: {xid} is not an XID (a positive integer)")
        result.append(xid)
    return result


def values_from_data(data: Any, where: str) -> dict[str, Any]:
    """The values a configuration document sets (the file's YAML, or the same as data).

    `where` starts every error message: "config file /etc/...yaml", "device_plugin.config".
    """
    if data is None:
        return {}
    reader = _Reader(where)
    root = reader.mapping(
        data, "", {"version", "flags", "sharing", "health", "metrics", "resources", "frontEnd", "dra"}
    )
    version = root.get("version", "v1")
    if version != "v1":
        raise ConfigError(f"{where}: version: {version!r} is not supported; valid: v1")
    values: dict[str, Any] = {}
    values.update(reader.flags(root.get("flags")))
    values.update(reader.sharing(root.get("sharing")))
    values.update(reader.health(root.get("health")))
    metrics = reader.mapping(root.get("metrics"), "metrics", {"address"})
    if "address" in metrics:
        values["metrics_address"] = reader.string(metrics["address"], "metrics.address")
    if "frontEnd" in root:
        values["front_end"] = reader.string(root["frontEnd"], "frontEnd")
    values.update(reader.dra(root.get("dra")))
    return values


# An extended resource's name: <DNS subdomain>/<name> (as a DeviceClass's extendedResourceName).
EXTENDED_RESOURCE = re.compile(
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)

# The `dra:` section's keys -> Config fields (strings; resyncSeconds is read apart).
DRA_KEYS = {
    "nodeName": "dra_node_name",
    "kubeconfig": "dra_kubeconfig",
    "kubeletRegistryDir": "dra_registry_dir",
    "kubeletPluginsDir": "dra_plugins_dir",
    "cdiDir": "dra_cdi_dir",
    "toolkitSpec": "dra_toolkit_spec",
    "nvidiaSmi": "dra_nvidia_smi",
    "extendedResourceName": "dra_extended_resource",
}


class _Reader:
    """Walks the data tree; every error carries `where` and the dotted field path."""

    def __init__(self, where):
        self.where = where

    def fail(self, field, value, valid):
        raise ConfigError(f"{self.where}: {field or '(top level)'}: {value!r} is not valid; {valid}")

    def mapping(self, value, field, allowed):
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(field, value, "expected a mapping")
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            where = f"{field}.{unknown[0]}" if field else unknown[0]
            self.fail(where, value[unknown[0]], "unknown key; valid keys here: " + ", ".join(sorted(allowed)))
        return value

    def boolean(self, value, field):
        if not isinstance(value, bool):
            self.fail(field, value, "expected true or false")
        return value

    def string(self, value, field):
        if not isinstance(value, str):
            self.fail(field, value, "expected a string")
        return value

    def count(self, value, field, minimum):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            self.fail(field, value, f"expected an integer >= {minimum}")
        return value

    def flags(self, value):
        flags = self.mapping(
            value,
            "flags",
            {"migStrategy", "failOnInitError", "nvidiaDriverRoot", "nvidiaDevRoot", "plugin", "gfd"},
        )
        values: dict[str, Any] = {}
        if "migStrategy" in flags:
            values["mig_strategy"] = self.string(flags["migStrategy"], "flags.migStrategy")
        if "failOnInitError" in flags:
            values["fail_on_init_error"] = self.boolean(flags["failOnInitError"], "flags.failOnInitError")
        if "nvidiaDevRoot" in flags:
            values["nvidia_dev_root"] = self.string(flags["nvidiaDevRoot"], "flags.nvidiaDevRoot")
        plugin = self.mapping(
            flags.get("plugin"),
            "flags.plugin",
            {"passDeviceSpecs", "deviceListStrategy", "deviceIDStrategy", "containerDriverRoot"},
        )
        if "passDeviceSpecs" in plugin:
            values["pass_device_specs"] = self.boolean(
                plugin["passDeviceSpecs"], "flags.plugin.passDeviceSpecs"
            )
        if "deviceListStrategy" in plugin:
            raw = plugin["deviceListStrategy"]
            items = raw if isinstance(raw, list) else [raw]
            values["device_list_strategy"] = tuple(
                self.string(item, "flags.plugin.deviceListStrategy") for item in items
            )
        if "deviceIDStrategy" in plugin:
            values["device_id_strategy"] = self.string(
                plugin["deviceIDStrategy"], "flags.plugin.deviceIDStrategy"
            )
        return values

    def sharing(self, value):
        sharing = self.mapping(value, "sharing", {"timeSlicing", "mps"})
        values: dict[str, Any] = {}
        slicing = self.replicated(sharing.get("timeSlicing"), "sharing.timeSlicing")
        for key, field in (
            ("renameByDefault", "rename_by_default"),
            ("failRequestsGreaterThanOne", "fail_requests_greater_than_one"),
            ("resources", "shared"),
        ):
            if key in slicing:
                values[field] = slicing[key]
        if "mps" in sharing:
            mps = self.replicated(sharing["mps"], "sharing.mps")
            values["mps_shared"] = mps.get("resources", ())
            values["mps_rename_by_default"] = mps.get("renameByDefault", False)
        return values

    def replicated(self, value, field):
        """One sharing section (timeSlicing or mps), its keys checked and read."""
        section = self.mapping(value, field, {"renameByDefault", "failRequestsGreaterThanOne", "resources"})
        result: dict[str, Any] = {}
        for key in ("renameByDefault", "failRequestsGreaterThanOne"):
            if key in section:
                result[key] = self.boolean(section[key], f"{field}.{key}")
        resources = section.get("resources") or []
        if not isinstance(resources, list):
            self.fail(f"{field}.resources", resources, "expected a list")
        result["resources"] = tuple(
            self.shared(item, f"{field}.resources[{n}]") for n, item in enumerate(resources)
        )
        return result

    def shared(self, value, field):
        item = self.mapping(value, field, {"name", "rename", "replicas", "devices", "perDevice"})
        if "name" not in item or "replicas" not in item:
            self.fail(field, value, "needs `name` and `replicas`")
        name = self.string(item["name"], field + ".name")
        replicas = self.count(item["replicas"], field + ".replicas", 1)
        devices = item.get("devices", "all")
        if devices == "all":
            chosen = None
        elif isinstance(devices, list) and devices:
            chosen = tuple(str(d) for d in devices)
        else:
            self.fail(field + ".devices", devices, "expected 'all' or a list of GPU indices or UUIDs")
        per_device = []
        for n, raw in enumerate(item.get("perDevice") or []):
            where = f"{field}.perDevice[{n}]"
            entry = self.mapping(raw, where, {"uuid", "index", "model", "replicas"})
            if "replicas" not in entry or not ({"uuid", "index", "model"} & set(entry)):
                self.fail(where, entry, "needs `replicas` and at least one of uuid, index, model")
            per_device.append(
                PerDevice(
                    replicas=self.count(entry["replicas"], where + ".replicas", 1),
                    uuid=None if "uuid" not in entry else self.string(entry["uuid"], where + ".uuid"),
                    index=None if "index" not in entry else str(entry["index"]),
                    model=None if "model" not in entry else self.string(entry["model"], where + ".model"),
                )
            )
        rename = item.get("rename")
        if rename is not None:
            rename = self.string(rename, field + ".rename")
        return SharedResource(name, replicas, rename, chosen, tuple(per_device))

    def health(self, value):
        health = self.mapping(
            value,
            "health",
            {
                "enabled",
                "ignoredXids",
                "additionalIgnoredXids",
                "criticalXids",
                "recovery",
                "probeIntervalSeconds",
            },
        )
        values: dict[str, Any] = {}
        if "enabled" in health:
            values["health_enabled"] = self.boolean(health["enabled"], "health.enabled")
        ignored = set(DEFAULT_IGNORED_XIDS)
        if "ignoredXids" in health:
            ignored = set(self.xid_list(health["ignoredXids"], "health.ignoredXids"))
        ignored.update(self.xid_list(health.get("additionalIgnoredXids", []), "health.additionalIgnoredXids"))
        ignored.difference_update(self.xid_list(health.get("criticalXids", []), "health.criticalXids"))
        values["ignored_xids"] = frozenset(ignored)
        if "probeIntervalSeconds" in health:
            values["probe_interval_seconds"] = self.seconds(
                health["probeIntervalSeconds"], "health.probeIntervalSeconds"
            )
        recovery = self.mapping(health.get("recovery"), "health.recovery", {"enabled", "quietPeriodSeconds"})
        if "enabled" in recovery:
            values["recovery_enabled"] = self.boolean(recovery["enabled"], "health.recovery.enabled")
        if "quietPeriodSeconds" in recovery:
            values["recovery_quiet_seconds"] = self.seconds(
                recovery["quietPeriodSeconds"], "health.recovery.quietPeriodSeconds"
            )
        return values

    def dra(self, value):
        dra = self.mapping(value, "dra", {*DRA_KEYS, "resyncSeconds"})
        values: dict[str, Any] = {
            field: self.string(dra[key], "dra." + key) for key, field in DRA_KEYS.items() if key in dra
        }
        if "resyncSeconds" in dra:
            values["dra_resync_seconds"] = self.seconds(dra["resyncSeconds"], "dra.resyncSeconds")
        return values

    def xid_list(self, value, field):
        if not isinstance(value, list):
            self.fail(field, value, "expected a list of XIDs (positive integers)")
        for item in value:
            self.count(item, field, 1)
        return value

    def seconds(self, value, field):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            self.fail(field, value, "expected a number of seconds > 0")
        return float(value)


def validated(values: dict[str, Any]) -> Config:
    """The Config for these values, or ConfigError naming the first invalid one."""
    config = Config(**values)
    if config.mig_strategy not in MIG_STRATEGIES:
        raise ConfigError(
            f"migStrategy: {config.mig_strategy!r} is not valid; valid: {', '.join(MIG_STRATEGIES)}"
        )
    bad = [s for s in config.device_list_strategy if s not in DEVICE_LIST_STRATEGIES]
    if bad or not config.device_list_strategy:
        raise ConfigError(
            f"deviceListStrategy: {bad[0] if bad else ''!r} is not valid; valid: one or more of "
            + ", ".join(DEVICE_LIST_STRATEGIES)
        )
    if config.device_id_strategy not in DEVICE_ID_STRATEGIES:
        raise ConfigError(
            f"deviceIDStrategy: {config.device_id_strategy!r} is not valid; "
            f"valid: {', '.join(DEVICE_ID_STRATEGIES)}"
        )
    if not os.path.isabs(config.plugin_dir):
        raise ConfigError(
            f"device-plugin-path: {config.plugin_dir!r} is not valid; expected an absolute path"
        )
    if config.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ConfigError(f"log-level: {config.log_level!r} is not valid; valid: DEBUG, INFO, WARNING, ERROR")
    if config.metrics_address:
        _host, sep, port = config.metrics_address.rpartition(":")
        if not sep or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"metrics.address: {config.metrics_address!r} is not valid; "
                "expected [host]:port, or '' to disable"
            )
    _check_front_end(config)
    for section, resources in (("timeSlicing", config.shared), ("mps", config.mps_shared or ())):
        names = [s.name for s in resources]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ConfigError(
                f"sharing.{section}.resources: {dupes[0]!r} is listed twice; list each resource once"
            )
    return dataclasses.replace(config, log_level=config.log_level.upper())


def _check_front_end(config: Config) -> None:
    if config.front_end not in FRONT_ENDS:
        raise ConfigError(f"frontEnd: {config.front_end!r} is not valid; valid: {', '.join(FRONT_ENDS)}")
    extended = config.dra_extended_resource
    if extended and not EXTENDED_RESOURCE.match(extended):
        raise ConfigError(
            f"dra.extendedResourceName: {extended!r} is not valid; expected an extended resource "
            "name like nvidia.com/gpu (a domain, a slash, a name), or empty for none"
        )
    for key, field in DRA_KEYS.items():
        path = getattr(config, field)
        if key in ("nodeName", "extendedResourceName", "nvidiaSmi"):
            continue
        if not os.path.isabs(path):
            raise ConfigError(f"dra.{key}: {path!r} is not valid; expected an absolute path")
    smi = config.dra_nvidia_smi
    if not smi or ("/" in smi and not os.path.isabs(smi)):
        raise ConfigError(
            f"dra.nvidiaSmi: {smi!r} is not valid; expected an absolute path or a command name"
            " looked up on PATH (nvidia-smi)"
        )
    if config.front_end == FRONT_END_DRA and any(r.replicas > 1 for r in config.shared):
        # DRA shares a GPU per claim, not per node: two pods on one claim, or a claim's
        # opaque GpuConfig (sharing.strategy TimeSlicing). Replicas would never be served.
        raise ConfigError(
            "sharing.timeSlicing.resources: replicas are not valid with frontEnd dra; valid: none "
            "(DRA shares a GPU through a shared claim, or a claim's GpuConfig with "
            "sharing.strategy TimeSlicing)"
        )


def refuse_unserved(config: Config) -> None:
    """Raise ConfigError for what NVIDIA's schema has and the gpuops daemon does not serve."""
    if config.mps_shared is not None:
        raise ConfigError(
            "sharing.mps: the gpuops device plugin does not serve MPS; valid: sharing.timeSlicing "
            "(NVIDIA's plugin, device_plugin_mode nvidia, serves MPS)"
        )


# The modes of the device_plugin role and what each one's plugin reads.
# dra: the gpuops daemon's DRA front end (it offers no nvidia.com/gpu through a device plugin);
# nvidia_dra: NVIDIA's DRA driver (its chart; no configuration document of NVIDIA's plugin).
PLUGIN_MODES = ("gpuops", "nvidia", "operator", "dra", "nvidia_dra")


def served(record: dict[str, Any], where: str = "device_plugin") -> Config:
    """The configuration a node's device plugin serves with, from the device_plugin role's record.

    record: {"mode": gpuops|nvidia|operator|dra|nvidia_dra, "config": the plugin's configuration document
    as data (NVIDIA's v1 schema), "environment": the plugin's environment}. Both plugins
    take an environment variable over the file (MIG_STRATEGY over flags.migStrategy). The
    gpuops daemon refuses what it does not serve (MPS); NVIDIA's plugin may be given it.
    """
    if not isinstance(record, dict):
        raise ConfigError(f"{where}: {record!r} is not valid; expected a mapping (mode, config, environment)")
    unknown = sorted(set(record) - {"mode", "config", "environment"})
    if unknown:
        raise ConfigError(
            f"{where}.{unknown[0]}: {record[unknown[0]]!r} is not valid; unknown key; "
            "valid keys here: config, environment, mode"
        )
    mode = record.get("mode") or "gpuops"
    if mode not in PLUGIN_MODES:
        raise ConfigError(f"{where}.mode: {mode!r} is not valid; valid: {', '.join(PLUGIN_MODES)}")
    environment = record.get("environment") or {}
    if not isinstance(environment, dict):
        raise ConfigError(f"{where}.environment: {environment!r} is not valid; expected a mapping")
    values = values_from_data(record.get("config") or None, f"{where}.config")
    values.update(values_from_environment({str(k): str(v) for k, v in environment.items()}, values))
    config = validated(values)
    if mode in ("gpuops", "dra"):
        refuse_unserved(config)
        return config
    return as_nvidia_reads(config)


def as_nvidia_reads(config: Config) -> Config:
    """config as NVIDIA's plugin and GFD v0.20.0 serve it: without per-resource choices.

    Their DisableResourceNamingInConfig (api/config/v1/config.go) drops each shared
    resource's `rename` (renameByDefault still renames to <name>.shared) and `devices`
    (every GPU is replicated); their reader has no `perDevice` and passes over it.
    """

    def plain(resources):
        return tuple(dataclasses.replace(r, rename=None, devices=None, per_device=()) for r in resources)

    return dataclasses.replace(
        config,
        shared=plain(config.shared),
        mps_shared=None if config.mps_shared is None else plain(config.mps_shared),
    )


# Where the device_plugin role records, on each node, what the node's plugin serves.
RECORD_PATH = "/etc/gpuops-device-plugin/served.json"


def read_record(path=RECORD_PATH):
    """The device_plugin role's record on this node (JSON), or None when there is none."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read: {error.strerror}") from None
    except ValueError as error:
        raise ConfigError(
            f"{path}: not valid JSON: {error}; the device_plugin role writes this record: run it "
            "again on the node to rewrite it"
        ) from None
