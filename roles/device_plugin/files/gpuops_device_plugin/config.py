# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Configuration: a YAML file, environment variables and flags (flag > env > file).

The file accepts NVIDIA's device plugin `version: v1` schema where it overlaps (`flags`,
`sharing.timeSlicing`), so an existing NVIDIA config keeps working, plus our extensions:
per-GPU replicas (`perDevice`), `health` and `metrics`. Every error names the field, the
value and what would be valid.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from typing import Any

import yaml

MIG_STRATEGIES = ("none", "single", "mixed")
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
# NVIDIA's default: XIDs that an application causes, not the GPU (13 graphics engine
# exception, 31 MMU fault, 43 GPU stopped processing, 45 preemptive cleanup, 68 video
# processor exception, 109 context switch timeout).
DEFAULT_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"


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
    health_enabled: bool = True
    ignored_xids: frozenset[int] = frozenset(DEFAULT_IGNORED_XIDS)
    recovery_enabled: bool = True
    recovery_quiet_seconds: float = 60.0
    probe_interval_seconds: float = 5.0
    metrics_address: str = ":9402"
    log_level: str = "INFO"

    def describe(self) -> dict[str, Any]:
        """The effective configuration as plain data, for the one start-up log line."""
        data = dataclasses.asdict(self)
        data["ignored_xids"] = sorted(self.ignored_xids)
        return data


# Flag name -> (Config field, parser, env var(s)); env names are NVIDIA's where they exist.
def _bool(text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


_OPTIONS = {
    "mig-strategy": ("mig_strategy", str, ("MIG_STRATEGY",)),
    "fail-on-init-error": ("fail_on_init_error", _bool, ("FAIL_ON_INIT_ERROR",)),
    "pass-device-specs": ("pass_device_specs", _bool, ("PASS_DEVICE_SPECS",)),
    "device-list-strategy": ("device_list_strategy", str, ("DEVICE_LIST_STRATEGY",)),
    "device-id-strategy": ("device_id_strategy", str, ("DEVICE_ID_STRATEGY",)),
    "nvidia-dev-root": ("nvidia_dev_root", str, ("NVIDIA_DEV_ROOT",)),
    "device-plugin-path": ("plugin_dir", str, ("GPUOPS_DEVICE_PLUGIN_PATH",)),
    "metrics-address": ("metrics_address", str, ("GPUOPS_METRICS_ADDRESS",)),
    "log-level": ("log_level", str, ("GPUOPS_LOG_LEVEL",)),
}


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="gpuops-device-plugin",
        description="NVIDIA GPU device plugin for the kubelet (gpuops.k8s).",
    )
    result.add_argument("--config-file", help="YAML config (env CONFIG_FILE)")
    for flag, (_field, _parse, envs) in _OPTIONS.items():
        result.add_argument("--" + flag, dest=flag.replace("-", "_"), help="env " + ", ".join(envs))
    result.add_argument("--check-config", action="store_true", help="validate, print, exit")
    return result


def load(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> Config:
    """Build the effective Config from flags, env and the file (in that precedence)."""
    environ = os.environ if environ is None else environ
    args = parser().parse_args(argv)
    path = args.config_file or environ.get("CONFIG_FILE")
    values: dict[str, Any] = _from_file(path) if path else {}
    for source, lookup in (("env", _env_lookup(environ)), ("flag", _flag_lookup(args))):
        for flag, (field, parse, envs) in _OPTIONS.items():
            raw = lookup(flag, envs)
            if raw is None:
                continue
            where = "--" + flag if source == "flag" else "/".join(envs)
            values[field] = _parse_value(field, parse, raw, where)
    values.update(_health_env(environ, values))
    return _validated(values)


def _env_lookup(environ):
    def lookup(_flag, envs):
        return next((environ[name] for name in envs if environ.get(name) not in (None, "")), None)

    return lookup


def _flag_lookup(args):
    def lookup(flag, _envs):
        return getattr(args, flag.replace("-", "_"))

    return lookup


def _parse_value(field, parse, raw, where):
    if field == "device_list_strategy":
        return tuple(part.strip() for part in str(raw).split(",") if part.strip())
    try:
        return parse(raw)
    except ValueError as error:
        raise ConfigError(f"{where}: {raw!r} is not valid: {error}") from None


def _health_env(environ, values):
    """NVIDIA's DP_DISABLE_HEALTHCHECKS / DP_ENABLE_HEALTHCHECKS, same meanings."""
    updates: dict[str, Any] = {}
    ignored = set(values.get("ignored_xids", DEFAULT_IGNORED_XIDS))
    disable = environ.get("DP_DISABLE_HEALTHCHECKS", "").strip()
    if disable:
        words = [w.strip() for w in disable.split(",") if w.strip()]
        if "all" in words or "xids" in words:
            updates["health_enabled"] = False
        ignored.update(_xids("DP_DISABLE_HEALTHCHECKS", [w for w in words if w not in ("all", "xids")]))
    enable = environ.get("DP_ENABLE_HEALTHCHECKS", "").strip()
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


def _from_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as error:
        raise ConfigError(f"config file {path}: cannot be read: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {path}: not valid YAML: {error}") from None
    if data is None:
        return {}
    reader = _Reader(path)
    root = reader.mapping(data, "", {"version", "flags", "sharing", "health", "metrics", "resources"})
    version = root.get("version", "v1")
    if version != "v1":
        raise ConfigError(f"config file {path}: version: {version!r} is not supported; valid: v1")
    values: dict[str, Any] = {}
    values.update(reader.flags(root.get("flags")))
    values.update(reader.sharing(root.get("sharing")))
    values.update(reader.health(root.get("health")))
    metrics = reader.mapping(root.get("metrics"), "metrics", {"address"})
    if "address" in metrics:
        values["metrics_address"] = reader.string(metrics["address"], "metrics.address")
    return values


class _Reader:
    """Walks the YAML tree; every error carries the file and the dotted field path."""

    def __init__(self, path):
        self.path = path

    def fail(self, field, value, valid):
        raise ConfigError(
            f"config file {self.path}: {field or '(top level)'}: {value!r} is not valid; {valid}"
        )

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
        sharing = self.mapping(value, "sharing", {"timeSlicing"})
        slicing = self.mapping(
            sharing.get("timeSlicing"),
            "sharing.timeSlicing",
            {"renameByDefault", "failRequestsGreaterThanOne", "resources"},
        )
        values: dict[str, Any] = {}
        for key, field in (
            ("renameByDefault", "rename_by_default"),
            ("failRequestsGreaterThanOne", "fail_requests_greater_than_one"),
        ):
            if key in slicing:
                values[field] = self.boolean(slicing[key], "sharing.timeSlicing." + key)
        resources = slicing.get("resources") or []
        if not isinstance(resources, list):
            self.fail("sharing.timeSlicing.resources", resources, "expected a list")
        values["shared"] = tuple(
            self.shared(item, f"sharing.timeSlicing.resources[{n}]") for n, item in enumerate(resources)
        )
        return values

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


def _validated(values: dict[str, Any]) -> Config:
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
    names = [s.name for s in config.shared]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(
            f"sharing.timeSlicing.resources: {dupes[0]!r} is listed twice; list each resource once"
        )
    return dataclasses.replace(config, log_level=config.log_level.upper())
