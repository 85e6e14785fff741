# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A ResourceClaim as Prepare reads it: is it the claim the kubelet named, is it allocated,
and which devices of our driver in this node's pool did the scheduler give it.

The kubelet sends only a claim's namespace, name and UID; like the Go helper
(k8s.io/dynamic-resource-allocation/kubeletplugin), Prepare GETs the claim and refuses one
that is gone, not allocated, or replaced by another of the same name (its UID differs). The
claim is the API's JSON (camelCase keys, as `kubectl get -o json` prints it), from a
ClaimReader: `api_reader` makes one of the kubernetes client's ResourceV1Api.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

__all__ = [
    "AllocatedDevice",
    "ClaimError",
    "ClaimNotAllocated",
    "ClaimNotFound",
    "ClaimReadError",
    "ClaimReader",
    "ClaimReplaced",
    "NotOurClaim",
    "OpaqueConfig",
    "api_reader",
    "our_configs",
    "our_devices",
    "read_claim",
]

# The kubelet gives a Prepare call 45 s; one GET must leave room for the claims after it.
READ_TIMEOUT_S = 10


class ClaimReader(Protocol):
    def __call__(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim as API JSON, None when the API has no such claim; ClaimReadError otherwise."""


class ClaimError(Exception):
    """A claim Prepare refuses; the message names the claim and why."""

    def __init__(self, namespace: str, name: str, problem: str):
        super().__init__(f"claim {namespace}/{name}: {problem}")


class ClaimReadError(ClaimError):
    """The API could not be asked (down, forbidden, timed out)."""


class ClaimNotFound(ClaimError):
    pass


class ClaimNotAllocated(ClaimError):
    pass


class ClaimReplaced(ClaimError):
    """The claim of that name has another UID: the one the kubelet means is gone."""


class NotOurClaim(ClaimError):
    """The allocation holds no device of our driver in this node's pool."""


@dataclasses.dataclass(frozen=True)
class AllocatedDevice:
    """One allocation result of ours: the device and the claim request it serves."""

    request: str
    device: str


@dataclasses.dataclass(frozen=True)
class OpaqueConfig:
    """Our driver's opaque parameters in the allocation, and the field that holds them."""

    parameters: Any
    where: str
    # The requests it applies to; empty: every request of the claim.
    requests: tuple[str, ...] = ()


def read_claim(reader: ClaimReader, namespace: str, name: str, uid: str) -> dict[str, Any]:
    """GET the claim and check that it is the allocated claim of that UID."""
    claim = reader(namespace, name)
    if claim is None:
        raise ClaimNotFound(namespace, name, "not found in the API")
    found = (claim.get("metadata") or {}).get("uid")
    if found != uid:
        raise ClaimReplaced(namespace, name, f"has UID {found}, the kubelet asked for {uid}: it was replaced")
    if not _allocation(claim):
        raise ClaimNotAllocated(namespace, name, "is not allocated (status.allocation is empty)")
    return claim


def our_devices(claim: dict[str, Any], driver: str, pool: str) -> tuple[AllocatedDevice, ...]:
    """Results of our driver, which must all be in our pool (a claim may also hold other drivers')."""
    namespace, name = _names(claim)
    results = (_allocation(claim).get("devices") or {}).get("results") or []
    ours = [result for result in results if result.get("driver") == driver]
    if not ours:
        drivers = sorted({str(result.get("driver")) for result in results})
        raise NotOurClaim(
            namespace,
            name,
            f"allocates no device of driver {driver} (drivers: {', '.join(drivers) or 'none'})",
        )
    elsewhere = sorted({str(result.get("pool")) for result in ours if result.get("pool") != pool})
    if elsewhere:
        raise NotOurClaim(
            namespace,
            name,
            f"allocates {driver} devices of pool {', '.join(elsewhere)}, this node's is {pool}",
        )
    # A request of a prioritized list is reported as <request>/<subrequest>: the kubelet and
    # the pod know the request.
    return tuple(
        AllocatedDevice(str(result["request"]).split("/", 1)[0], str(result["device"])) for result in ours
    )


def our_configs(claim: dict[str, Any], driver: str) -> tuple[OpaqueConfig, ...]:
    """Our driver's opaque parameters, from the class and the claim, in the allocation's order."""
    configs = (_allocation(claim).get("devices") or {}).get("config") or []
    return tuple(
        OpaqueConfig(
            entry["opaque"].get("parameters"),
            f"status.allocation.devices.config[{position}].opaque.parameters",
            tuple(entry.get("requests") or ()),
        )
        for position, entry in enumerate(configs)
        if (entry.get("opaque") or {}).get("driver") == driver
    )


def api_reader(resource_api) -> ClaimReader:
    """A ClaimReader over a kubernetes.client.ResourceV1Api (kubernetes >= 34.1)."""
    serialize = resource_api.api_client.sanitize_for_serialization

    def read(namespace: str, name: str) -> dict[str, Any] | None:
        try:
            claim = resource_api.read_namespaced_resource_claim(
                name, namespace, _request_timeout=READ_TIMEOUT_S
            )
        # The client raises its ApiException, urllib3's errors and more: any of them fails
        # this one claim, never the whole Prepare call.
        except Exception as error:
            if getattr(error, "status", None) == 404:
                return None
            raise ClaimReadError(namespace, name, f"cannot be read from the API: {error}") from error
        return serialize(claim)

    return read


def _allocation(claim: dict[str, Any]) -> dict[str, Any]:
    return (claim.get("status") or {}).get("allocation") or {}


def _names(claim: dict[str, Any]) -> tuple[str, str]:
    metadata = claim.get("metadata") or {}
    return metadata.get("namespace", "?"), metadata.get("name", "?")
