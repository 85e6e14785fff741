# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Configuration: a YAML file, environment variables and flags (flag > env > file).

The file accepts NVIDIA's device plugin `version: v1` schema where it overlaps (`flags`,
`sharing.timeSlicing`), so an existing NVIDIA config keeps working, plus our extensions:
per-GPU replicas (`perDevice`), `health` and `metrics`. Every error names the field, the
value and what would be valid.

What the document means is `_plugin_config` (shared with gpu_info, whose node labels
describe what this daemon serves); this module adds where it comes from: the file and
the command line.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import yaml

from ._plugin_config import (
    DEFAULT_IGNORED_XIDS,
    DEFAULT_PLUGIN_DIR,
    DEVICE_ID_STRATEGIES,
    DEVICE_LIST_STRATEGIES,
    MIG_STRATEGIES,
    OPTIONS,
    Config,
    ConfigError,
    PerDevice,
    SharedResource,
    parse_option,
    refuse_unserved,
    validated,
    values_from_data,
    values_from_environment,
)

__all__ = [
    "DEFAULT_IGNORED_XIDS",
    "DEFAULT_PLUGIN_DIR",
    "DEVICE_ID_STRATEGIES",
    "DEVICE_LIST_STRATEGIES",
    "MIG_STRATEGIES",
    "Config",
    "ConfigError",
    "PerDevice",
    "SharedResource",
    "load",
    "parser",
]


def parser() -> argparse.ArgumentParser:
    result = argparse.ArgumentParser(
        prog="gpuops-device-plugin",
        description="NVIDIA GPU device plugin for the kubelet (gpuops.k8s).",
    )
    result.add_argument("--config-file", help="YAML config (env CONFIG_FILE)")
    for flag, (_field, _parse, envs) in OPTIONS.items():
        result.add_argument("--" + flag, dest=flag.replace("-", "_"), help="env " + ", ".join(envs))
    result.add_argument("--check-config", action="store_true", help="validate, print, exit")
    return result


def load(argv: list[str] | None = None, environ: dict[str, str] | None = None) -> Config:
    """Build the effective Config from flags, env and the file (in that precedence)."""
    environ = os.environ if environ is None else environ
    args = parser().parse_args(argv)
    path = args.config_file or environ.get("CONFIG_FILE")
    values: dict[str, Any] = _from_file(path) if path else {}
    values.update(values_from_environment(environ, values))
    for flag, (field, parse, _envs) in OPTIONS.items():
        raw = getattr(args, flag.replace("-", "_"))
        if raw is not None:
            values[field] = parse_option(field, parse, raw, "--" + flag)
    config = validated(values)
    refuse_unserved(config)
    return config


def _from_file(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = yaml.safe_load(handle)
    except OSError as error:
        raise ConfigError(f"config file {path}: cannot be read: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {path}: not valid YAML: {error}") from None
    return values_from_data(data, f"config file {path}")
