# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Our driver's opaque parameters in a claim or a DeviceClass: a GpuConfig, checked at Prepare.

    apiVersion: gpu.gpuops.k8s/v1alpha1
    kind: GpuConfig
    sharing:
      strategy: TimeSlicing
      timeSlicingConfig:
        interval: Default        # Default | Short | Medium | Long

The field names are those of NVIDIA's DRA driver (resource.nvidia.com/v1beta1 GpuConfig), so
a claim moves between the drivers by its apiVersion. Only time-slicing is accepted (MPS is
not served); Prepare sets it on the claim's GPUs (dra/timeslice.py). A claim whose
parameters are wrong is refused at Prepare with the field, the value and what is valid,
instead of running unshared unseen.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["API_VERSION", "INTERVALS", "KIND", "GpuConfig", "OpaqueConfigError", "parse"]

API_VERSION = "gpu.gpuops.k8s/v1alpha1"
KIND = "GpuConfig"
STRATEGIES = ("TimeSlicing",)
INTERVALS = ("Default", "Short", "Medium", "Long")


class OpaqueConfigError(ValueError):
    """Opaque parameters we refuse: the message names the field, the value and what is valid."""

    def __init__(self, field: str, value: Any, valid: str):
        super().__init__(f"{field}: {value!r} is not valid; {valid}")
        self.field = field


@dataclasses.dataclass(frozen=True)
class GpuConfig:
    sharing: str | None = None  # a strategy of STRATEGIES, or None: not shared
    interval: str = "Default"


def parse(parameters: Any, where: str) -> GpuConfig:
    """The GpuConfig in parameters; where is the field path that holds them, for errors."""
    document = _mapping(parameters, where, {"apiVersion", "kind", "sharing"})
    if document.get("apiVersion") != API_VERSION:
        raise OpaqueConfigError(f"{where}.apiVersion", document.get("apiVersion"), f"expected {API_VERSION}")
    if document.get("kind") != KIND:
        raise OpaqueConfigError(f"{where}.kind", document.get("kind"), f"expected {KIND}")
    if document.get("sharing") is None:
        return GpuConfig()
    sharing = _mapping(document["sharing"], f"{where}.sharing", {"strategy", "timeSlicingConfig"})
    strategy = sharing.get("strategy")
    if strategy not in STRATEGIES:
        raise OpaqueConfigError(
            f"{where}.sharing.strategy",
            strategy,
            f"expected one of {', '.join(STRATEGIES)} (MPS is not served)",
        )
    slicing = sharing.get("timeSlicingConfig")
    if slicing is None:
        return GpuConfig(strategy)
    slicing = _mapping(slicing, f"{where}.sharing.timeSlicingConfig", {"interval"})
    interval = slicing.get("interval", "Default")
    if interval not in INTERVALS:
        raise OpaqueConfigError(
            f"{where}.sharing.timeSlicingConfig.interval", interval, f"expected one of {', '.join(INTERVALS)}"
        )
    return GpuConfig(strategy, interval)


def _mapping(value: Any, field: str, known: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise OpaqueConfigError(field, value, "expected an object")
    unknown = sorted(set(value) - known)
    if unknown:
        raise OpaqueConfigError(
            f"{field}.{unknown[0]}", value[unknown[0]], f"known fields: {', '.join(sorted(known))}"
        )
    return value
