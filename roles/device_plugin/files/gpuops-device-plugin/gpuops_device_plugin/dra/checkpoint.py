# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The DRA front end's checkpoint: which claims it began and finished preparing, on disk.

The kubelet may call NodePrepareResources again for a claim already prepared, and calls
NodeUnprepareResources with only the claim's UID, namespace and name (the claim may be gone
from the API), also after either side restarted: what was prepared, and with which devices,
must outlive the process. As NVIDIA's DRA driver does (checkpoint.json, PrepareStarted /
PrepareCompleted), a claim is recorded as started before any work and as completed with its
devices after it; a claim still started when the daemon starts again was cut off halfway
(`stale()`), and its partial work is the caller's to roll back or redo.

Every change is written before it is visible (files.write_atomically), so a crash leaves the
previous file or the new one, never half of one. A file that cannot be read back (not JSON,
another format version, a malformed record) is a CheckpointFileError naming the path, never
an empty checkpoint: forgetting prepared claims would leave their devices prepared with
nothing to unprepare them.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterable
from typing import Any

from .files import write_atomically

__all__ = [
    "COMPLETED",
    "STARTED",
    "VERSION",
    "Checkpoint",
    "CheckpointError",
    "CheckpointFileError",
    "ClaimStateError",
    "PreparedClaim",
    "PreparedDevice",
]

# The file's format; a file of another version is refused, not guessed at.
VERSION = 1
STARTED = "started"
COMPLETED = "completed"


class CheckpointError(Exception):
    """Anything the checkpoint refuses."""


class CheckpointFileError(CheckpointError):
    """The checkpoint file cannot be read back or written; the message names the path."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"DRA checkpoint {path}: {problem}")
        self.path = path


class ClaimStateError(CheckpointError):
    """An operation the claim's recorded state does not allow (a caller's bug, not the file's)."""

    def __init__(self, uid: str, problem: str):
        super().__init__(f"claim {uid}: {problem}")
        self.uid = uid


@dataclasses.dataclass(frozen=True)
class PreparedDevice:
    """One device prepared for a claim: what NodePrepareResources answers for it."""

    pool: str
    device: str
    request_names: tuple[str, ...]
    cdi_device_ids: tuple[str, ...]
    # The time-slice interval Prepare set on this GPU for the claim ("" for none), so that
    # Unprepare, which gets no claim, knows to set it back.
    time_slice: str = ""

    def __post_init__(self):
        # Tuples whatever the caller passed, so that a repeated complete() compares equal.
        object.__setattr__(self, "request_names", tuple(self.request_names))
        object.__setattr__(self, "cdi_device_ids", tuple(self.cdi_device_ids))


@dataclasses.dataclass(frozen=True)
class PreparedClaim:
    """A claim as the checkpoint holds it: STARTED (no devices yet) or COMPLETED."""

    uid: str
    namespace: str
    name: str
    state: str
    devices: tuple[PreparedDevice, ...] = ()


class Checkpoint:
    """Prepared claims by UID, kept in one JSON file; safe to share between gRPC threads."""

    def __init__(self, path: str, claims: dict[str, PreparedClaim]):
        self.path = path
        self._claims = dict(claims)
        # One lock over the claims and the write, so concurrent Prepare and Unprepare
        # calls cannot write an older state over a newer one.
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str) -> Checkpoint:
        """Read the checkpoint at path; a missing file is an empty checkpoint (a first start)."""
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except FileNotFoundError:
            return cls(path, {})
        except (OSError, UnicodeDecodeError) as error:
            raise CheckpointFileError(path, f"cannot be read: {error}") from error
        return cls(path, _parse(path, text))

    def get(self, uid: str) -> PreparedClaim | None:
        with self._lock:
            return self._claims.get(uid)

    def completed(self) -> list[PreparedClaim]:
        """Every claim prepared and not yet unprepared."""
        with self._lock:
            return [claim for claim in self._claims.values() if claim.state == COMPLETED]

    def stale(self) -> list[PreparedClaim]:
        """Claims begun but never completed: a prepare cut off by a crash or a restart."""
        with self._lock:
            return [self._claims[uid] for uid in sorted(self._claims) if self._claims[uid].state == STARTED]

    def begin(self, uid: str, namespace: str, name: str) -> PreparedClaim:
        """Record that preparing the claim starts, before any work is done.

        A claim already recorded is returned as it is: a completed one so that a repeated
        Prepare answers the devices it was given, a started one so that it is prepared again.
        """
        with self._lock:
            known = self._claims.get(uid)
            if known is not None:
                return known
            claim = PreparedClaim(uid=uid, namespace=namespace, name=name, state=STARTED)
            self._write({**self._claims, uid: claim})
            return claim

    def complete(self, uid: str, devices: Iterable[PreparedDevice]) -> PreparedClaim:
        """Record the claim as prepared with these devices; again with the same ones is a no-op."""
        with self._lock:
            known = self._claims.get(uid)
            if known is None:
                raise ClaimStateError(uid, "completed without begin()")
            done = dataclasses.replace(known, state=COMPLETED, devices=tuple(devices))
            if known.state == COMPLETED:
                if known != done:
                    raise ClaimStateError(uid, "already completed with other devices")
                return known
            self._write({**self._claims, uid: done})
            return done

    def forget(self, uid: str) -> None:
        """Drop the claim once unprepared; an unknown UID is not an error (Unprepare repeats)."""
        with self._lock:
            if uid not in self._claims:
                return
            self._write({key: claim for key, claim in self._claims.items() if key != uid})

    def _write(self, claims: dict[str, PreparedClaim]) -> None:
        """Replace the file with claims, then adopt them; after a failed write the old ones stay."""
        document = {
            "version": VERSION,
            "claims": {uid: _record(claim) for uid, claim in claims.items()},
        }
        text = json.dumps(document, indent=2, sort_keys=True) + "\n"
        try:
            write_atomically(self.path, text)
        except OSError as error:
            raise CheckpointFileError(self.path, f"cannot be written: {error}") from error
        self._claims = claims


def _record(claim: PreparedClaim) -> dict[str, Any]:
    return {
        "namespace": claim.namespace,
        "name": claim.name,
        "state": claim.state,
        "devices": [_device_record(device) for device in claim.devices],
    }


def _device_record(device: PreparedDevice) -> dict[str, Any]:
    record = {
        "pool": device.pool,
        "device": device.device,
        "request_names": list(device.request_names),
        "cdi_device_ids": list(device.cdi_device_ids),
    }
    # Only where set: a file without time-slices reads the same in a daemon that knows none.
    if device.time_slice:
        record["time_slice"] = device.time_slice
    return record


def _parse(path: str, text: str) -> dict[str, PreparedClaim]:
    try:
        document = json.loads(text)
    except ValueError as error:
        raise CheckpointFileError(path, f"is not JSON: {error}") from error
    if not isinstance(document, dict) or "version" not in document:
        raise CheckpointFileError(path, "has no format version")
    if document["version"] != VERSION:
        raise CheckpointFileError(
            path, f"has format version {document['version']!r}; this daemon reads version {VERSION}"
        )
    claims = document.get("claims")
    if not isinstance(claims, dict):
        raise CheckpointFileError(path, "has no claims object")
    try:
        return {uid: _claim(uid, record) for uid, record in claims.items()}
    except (KeyError, TypeError, ValueError) as error:
        raise CheckpointFileError(path, f"has a malformed claim: {error!r}") from error


def _claim(uid: str, record: dict[str, Any]) -> PreparedClaim:
    state = record["state"]
    if state not in (STARTED, COMPLETED):
        raise ValueError(f"claim {uid}: state {state!r}")
    return PreparedClaim(
        uid=uid,
        namespace=_text(record["namespace"]),
        name=_text(record["name"]),
        state=state,
        devices=tuple(
            PreparedDevice(
                pool=_text(device["pool"]),
                device=_text(device["device"]),
                request_names=_texts(device["request_names"]),
                cdi_device_ids=_texts(device["cdi_device_ids"]),
                time_slice=_text(device.get("time_slice", "")),
            )
            for device in record["devices"]
        ),
    )


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{value!r} is not a string")
    return value


def _texts(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise TypeError(f"{value!r} is not a list")
    return tuple(_text(item) for item in value)
