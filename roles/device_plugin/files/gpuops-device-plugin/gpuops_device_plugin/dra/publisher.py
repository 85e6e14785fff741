# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Keeps the node's ResourceSlices in the API equal to what slices.py builds.

The daemon calls reconcile() at start, when health changes and periodically: the kubelet
deletes a driver's slices once no plugin of it has been connected for 30 s, and the next
reconcile publishes them again. One reconcile is one LIST of this driver's slices on this
node (field selectors spec.nodeName and spec.driver) and, only where something differs,
the writes: obsolete slices deleted first (devices the node no longer has go before new
ones appear), the others updated, missing ones created with generateName
`<node>-gpu.gpuops.k8s-` and the Node as their controller (one GET of the Node, for its
UID, per reconcile that creates). Any change bumps the pool's generation in every slice,
as consumers only trust the slices of a pool's highest generation.

Every write is compared with what the API server stored: a field it dropped (its feature
gate off, e.g. taints without DRADeviceTaints) or changed comes back in the result as
FieldNotStored, for the caller to log, never silently. What was stored for what we sent
is remembered, so a dropped field does not cause a write on every reconcile.

Responses are read as the server's JSON (`_preload_content=False`), not the client's
models: a model may not know a field the server keeps, and would re-render timestamps.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

import urllib3
from kubernetes.client.exceptions import ApiException

from . import slices

API_VERSION = "resource.k8s.io/v1"
KIND = "ResourceSlice"
NOT_FOUND = 404
# Metadata a replace (PUT) sends back: the rest is the server's, and a PUT without these
# would remove them.
KEPT_METADATA = ("name", "resourceVersion", "labels", "annotations", "ownerReferences", "finalizers")


class SliceApiError(Exception):
    """An API call failed: status and reason as the API server gave them (None, "Unreachable"
    when it could not be reached)."""

    def __init__(self, action: str, name: str, status: int | None, reason: str, message: str):
        super().__init__(f"{action} {name}: {status or 'no answer'} {reason}: {message}")
        self.action = action
        self.name = name
        self.status = status
        self.reason = reason
        self.message = message


@dataclasses.dataclass(frozen=True)
class FieldNotStored:
    """A field of a slice we wrote that the API server did not store as sent."""

    slice_name: str
    path: str  # in the spec, e.g. "devices[3].taints"
    sent: Any
    stored: Any  # None when dropped
    dropped: bool

    @property
    def feature_gate(self) -> str | None:
        """The gate that likely dropped it (the only gated field we write is taints)."""
        return "DRADeviceTaints" if self.dropped and ".taints" in self.path else None

    def __str__(self) -> str:
        what = "dropped" if self.dropped else f"stored {self.stored!r} for"
        gate = f" (feature gate {self.feature_gate} off?)" if self.feature_gate else ""
        field = f"spec.{self.path} = {self.sent!r}"
        return f"ResourceSlice {self.slice_name}: the API server {what} {field}{gate}"


@dataclasses.dataclass(frozen=True)
class ReconcileResult:
    """What one reconcile did; names of the slices written."""

    generation: int
    created: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    not_stored: tuple[FieldNotStored, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class SlicePublisher:
    """The node's slices for one set of discovered facts (a reload makes a new publisher)."""

    def __init__(
        self,
        resource_api,
        core_api,
        node: str,
        *,
        facts: Mapping,
        unhealthy: Callable[[], Mapping[str, str]],
        clock: Callable[[], datetime] = utc_now,
    ):
        """resource_api: kubernetes.client.ResourceV1Api; core_api: CoreV1Api;
        unhealthy: the health state's reader ({uuid: reason})."""
        self.resource_api = resource_api
        self.core_api = core_api
        self.node = node
        self.facts = facts
        self.unhealthy = unhealthy
        self.clock = clock
        self._lock = threading.Lock()  # start, health and the timer may call at once
        self._stored_for: dict[str, dict] = {}  # what we sent (as _sent_key) -> spec stored

    def reconcile(self) -> ReconcileResult:
        with self._lock:
            existing = self._list()
            desired = slices.build_slices(self.facts, self.unhealthy(), self.node, now=self.clock())
            _keep_taint_times(desired, existing)
            generation = max((s["spec"]["pool"]["generation"] for s in existing), default=0)
            pairs, obsolete = _pair(desired, existing, self.node)
            if not obsolete and all(
                current is not None and self._converged(spec, current, generation) for spec, current in pairs
            ):
                return ReconcileResult(generation)
            return self._write(pairs, obsolete, generation + 1)

    def _converged(self, spec: dict, current: dict, generation: int) -> bool:
        # want carries the pool's generation: a slice left behind at an older one (it would
        # hide the whole pool) is not converged either.
        want = _with_generation(spec, generation)
        stored = current["spec"]
        return stored == want or self._stored_for.get(_sent_key(want)) == stored

    def _write(self, pairs, obsolete, generation: int) -> ReconcileResult:
        deleted, updated, created, not_stored = [], [], [], []
        stored_for: dict[str, dict] = {}
        for current in obsolete:
            self._delete(current)
            deleted.append(current["metadata"]["name"])
        owner = None
        for spec, current in pairs:
            want = _with_generation(spec, generation)
            if current is None:
                owner = owner or self._node_owner()
                stored = self._create(want, owner)
                created.append(stored["metadata"]["name"])
            else:
                stored = self._replace(want, current)
                updated.append(stored["metadata"]["name"])
            not_stored.extend(differences(stored["metadata"]["name"], want, stored["spec"]))
            stored_for[_sent_key(want)] = stored["spec"]
        self._stored_for = stored_for
        return ReconcileResult(generation, tuple(created), tuple(updated), tuple(deleted), tuple(not_stored))

    # API calls

    def _list(self) -> list[dict]:
        selector = f"spec.nodeName={self.node},spec.driver={slices.DRIVER}"
        answer = _call(
            "list ResourceSlices", selector, self.resource_api.list_resource_slice, field_selector=selector
        )
        return answer.get("items") or []

    def _node_owner(self) -> dict:
        node = _call("get Node", self.node, self.core_api.read_node, self.node)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "name": self.node,
            "uid": node["metadata"]["uid"],
            "controller": True,
        }

    def _create(self, spec: dict, owner: dict) -> dict:
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"generateName": f"{self.node}-{slices.DRIVER}-", "ownerReferences": [owner]},
            "spec": spec,
        }
        name = body["metadata"]["generateName"]
        return _call("create ResourceSlice", name, self.resource_api.create_resource_slice, body)

    def _replace(self, spec: dict, current: dict) -> dict:
        name = current["metadata"]["name"]
        metadata = {key: current["metadata"][key] for key in KEPT_METADATA if key in current["metadata"]}
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}
        return _call("replace ResourceSlice", name, self.resource_api.replace_resource_slice, name, body)

    def _delete(self, current: dict) -> None:
        metadata = current["metadata"]
        # Only the slice we listed: one changed or replaced since is not ours to delete blindly.
        preconditions = {"uid": metadata["uid"], "resourceVersion": metadata["resourceVersion"]}
        try:
            _call(
                "delete ResourceSlice",
                metadata["name"],
                self.resource_api.delete_resource_slice,
                metadata["name"],
                body={"preconditions": preconditions},
            )
        except SliceApiError as error:
            if error.status != NOT_FOUND:  # already gone (the kubelet's cleanup): done
                raise


def differences(slice_name: str, sent: Any, stored: Any, path: str = "") -> list[FieldNotStored]:
    """Where stored differs from sent, for what we sent (fields the server adds are its own)."""
    if isinstance(sent, dict) and isinstance(stored, dict):
        found = []
        for key, value in sent.items():
            where = f"{path}.{key}" if path else key
            if key not in stored:
                found.append(FieldNotStored(slice_name, where, value, None, dropped=True))
            else:
                found.extend(differences(slice_name, value, stored[key], where))
        return found
    if isinstance(sent, list) and isinstance(stored, list) and len(sent) == len(stored):
        found = []
        for index, (one, other) in enumerate(zip(sent, stored)):
            found.extend(differences(slice_name, one, other, f"{path}[{index}]"))
        return found
    if sent == stored:
        return []
    return [FieldNotStored(slice_name, path, sent, stored, dropped=False)]


def _call(action: str, name: str, method, *args, **kwargs) -> dict:
    """One API call, its answer as the server's JSON; failures as SliceApiError."""
    try:
        response = method(*args, _preload_content=False, **kwargs)
    except ApiException as error:
        status = _status_of(error)
        raise SliceApiError(
            action,
            name,
            error.status,
            status.get("reason") or error.reason or "",
            status.get("message") or str(error.body or ""),
        ) from error
    except urllib3.exceptions.HTTPError as error:
        raise SliceApiError(action, name, None, "Unreachable", str(error)) from error
    return json.loads(response.data) if response.data else {}


def _status_of(error: ApiException) -> dict:
    """The metav1.Status the API server answered with, when it did."""
    try:
        status = json.loads(error.body or "")
    except ValueError:
        return {}
    return status if isinstance(status, dict) else {}


def _pair(desired: list[dict], existing: list[dict], pool: str):
    """Each desired spec with the listed slice to reuse for it (None: create one), and the
    listed slices left over (to delete). A slice is reused for the desired one it shares
    most devices with (pool names cannot change, so only slices of our pool qualify)."""
    candidates = sorted(
        (s for s in existing if s["spec"]["pool"]["name"] == pool), key=lambda s: s["metadata"]["name"]
    )
    pairs = []
    for spec in desired:
        names = {device["name"] for device in spec["devices"]}
        best = max(candidates, key=lambda s: len(names & _device_names(s)), default=None)
        if best is not None:
            candidates.remove(best)
        pairs.append((spec, best))
    reused = {id(current) for _spec, current in pairs if current is not None}
    return pairs, [s for s in existing if id(s) not in reused]


def _device_names(current: dict) -> set[str]:
    return {device["name"] for device in current["spec"].get("devices") or []}


def _keep_taint_times(desired: list[dict], existing: list[dict]) -> None:
    """A taint already published keeps the time it was first added (the device may have
    moved to another slice); only new taints carry this reconcile's time."""
    earlier = {
        (device["name"], taint["key"], taint.get("value", ""), taint["effect"]): taint["timeAdded"]
        for current in existing
        for device in current["spec"].get("devices") or []
        for taint in device.get("taints") or []
        if taint.get("timeAdded")
    }
    for spec in desired:
        for device in spec["devices"]:
            for taint in device.get("taints") or []:
                key = (device["name"], taint["key"], taint.get("value", ""), taint["effect"])
                taint["timeAdded"] = earlier.get(key, taint["timeAdded"])


def _with_generation(spec: dict, generation: int) -> dict:
    return {**spec, "pool": {**spec["pool"], "generation": generation}}


def _sent_key(spec: dict) -> str:
    """A spec as the memory of what was stored knows it: without taint times, which are
    new on every reconcile where the server dropped the taints they belong to."""
    plain = {
        **spec,
        "devices": [
            {**device, "taints": [{k: v for k, v in t.items() if k != "timeAdded"} for t in device["taints"]]}
            if "taints" in device
            else device
            for device in spec["devices"]
        ],
    }
    return json.dumps(plain, sort_keys=True)
