# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A CDI spec per prepared claim, made from the one NVIDIA's Container Toolkit generated.

`nvidia-ctk cdi generate` (run again by the toolkit's nvidia-cdi-refresh units when the
driver changes) writes /var/run/cdi/nvidia.yaml, kind nvidia.com/gpu: a device per GPU, by
index and again by UUID (its device node, a hook bound to its UUID), `all`, and the
containerEdits every GPU container needs (driver libraries, control device nodes, hooks). A
claim's spec takes from it, by UUID, the device edits of exactly the claimed GPUs, and the
common edits, under kind k8s.gpu.gpuops.k8s/claim with devices <claim UID>-gpu-<index>: the
runtime injects these GPUs and no other. As NVIDIA's DRA driver names its own
(k8s.gpu.nvidia.com/claim), the file is CDI's transient spec name for the claim,
<vendor>-<class>_<UID>, so that removing it needs the UID only.

Written as JSON (.json), not YAML: CDI reads both (one strict parser; its cache watches
both extensions), and JSON needs no dumper options, where PyYAML's would write anchors
for objects that repeat. The toolkit's YAML is read with PyYAML, which the daemon already
depends on for its configuration file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable
from typing import Any

import yaml

from .devices import DRIVER, GpuDevice
from .files import write_atomically

__all__ = [
    "KIND",
    "SPEC_DIR",
    "TOOLKIT_SPEC",
    "CdiError",
    "ClaimSpecError",
    "ClaimSpecs",
    "ToolkitSpecError",
    "device_id",
]

VENDOR = "k8s." + DRIVER
CLASS = "claim"
KIND = f"{VENDOR}/{CLASS}"
SPEC_DIR = "/var/run/cdi"
TOOLKIT_SPEC = os.path.join(SPEC_DIR, "nvidia.yaml")
# Our device names begin with the claim's UID, which may begin with a digit: CDI allows that
# from spec version 0.5.0 on. A newer toolkit spec keeps its own version (its edits may need it).
MIN_VERSION = (0, 5, 0)
# A Kubernetes UID is an RFC 4122 UUID; anything else must not name a file or a CDI device.
_UID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z-]*$")
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
# The C loader where PyYAML has it: the toolkit's spec is read on every Prepare.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CdiError(Exception):
    """A claim's CDI spec cannot be made, written or removed."""


class ToolkitSpecError(CdiError):
    """The toolkit's spec is missing, unreadable or lacks a GPU; the message says how to make it."""

    def __init__(self, path: str, problem: str):
        super().__init__(
            f"CDI spec of the NVIDIA Container Toolkit {path} {problem}; generate it again: "
            f"systemctl start nvidia-cdi-refresh.service, or nvidia-ctk cdi generate --output={path}"
        )
        self.path = path


class ClaimSpecError(CdiError):
    """A claim's own spec cannot be written or removed; the message names the path."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"CDI spec {path}: {problem}")
        self.path = path


def device_id(uid: str, device: str) -> str:
    """The fully qualified CDI device the kubelet hands the runtime: <kind>=<UID>-<device>."""
    return f"{KIND}={uid}-{device}"


class ClaimSpecs:
    """Claims' CDI specs in spec_dir, each made from the toolkit's spec at toolkit_spec."""

    def __init__(self, spec_dir: str = SPEC_DIR, toolkit_spec: str = TOOLKIT_SPEC):
        self.spec_dir = spec_dir
        self.toolkit_spec = toolkit_spec

    def path(self, uid: str) -> str:
        if not _UID.match(uid):
            raise ClaimSpecError(
                os.path.join(self.spec_dir, f"{VENDOR}-{CLASS}_?.json"),
                f"claim UID {uid!r} cannot name a CDI spec: letters, digits and '-' only",
            )
        return os.path.join(self.spec_dir, f"{VENDOR}-{CLASS}_{uid}.json")

    def write(self, uid: str, devices: Iterable[GpuDevice]) -> dict[str, str]:
        """Write the claim's spec for these GPUs; return device name -> CDI device ID."""
        path = self.path(uid)
        devices = tuple(devices)
        spec = self.spec(uid, devices)
        try:
            os.makedirs(self.spec_dir, exist_ok=True)
            write_atomically(path, json.dumps(spec, indent=2, sort_keys=True) + "\n", mode=0o644)
        except OSError as error:
            raise ClaimSpecError(path, f"cannot be written: {error}") from error
        return {device.name: device_id(uid, device.name) for device in devices}

    def spec(self, uid: str, devices: Iterable[GpuDevice]) -> dict[str, Any]:
        """The claim's spec as a document: the claimed GPUs' edits and the common edits."""
        toolkit = self._toolkit()
        by_name = {entry.get("name"): entry for entry in toolkit["devices"] if isinstance(entry, dict)}
        claimed = []
        for device in devices:
            entry = by_name.get(device.uuid)
            if entry is None:
                raise ToolkitSpecError(self.toolkit_spec, f"has no device {device.uuid} ({device.name})")
            claimed.append(
                {"name": f"{uid}-{device.name}", "containerEdits": entry.get("containerEdits", {})}
            )
        return {
            "cdiVersion": _version(self.toolkit_spec, toolkit.get("cdiVersion")),
            "kind": KIND,
            "devices": claimed,
            "containerEdits": toolkit.get("containerEdits") or {},
        }

    def exists(self, uid: str) -> bool:
        return os.path.exists(self.path(uid))

    def remove(self, uid: str) -> None:
        """Remove the claim's spec; one already gone is not an error (Unprepare repeats)."""
        path = self.path(uid)
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        except OSError as error:
            raise ClaimSpecError(path, f"cannot be removed: {error}") from error

    def _toolkit(self) -> dict[str, Any]:
        # Read on every write: the refresh units rewrite it when the driver changes.
        try:
            with open(self.toolkit_spec, encoding="utf-8") as handle:
                document = yaml.load(handle, Loader=_LOADER)
        except FileNotFoundError:
            raise ToolkitSpecError(self.toolkit_spec, "does not exist") from None
        except (OSError, UnicodeDecodeError) as error:
            raise ToolkitSpecError(self.toolkit_spec, f"cannot be read: {error}") from error
        except yaml.YAMLError as error:
            raise ToolkitSpecError(self.toolkit_spec, f"is not YAML: {error}") from error
        if not isinstance(document, dict) or not isinstance(document.get("devices"), list):
            raise ToolkitSpecError(self.toolkit_spec, "has no devices list")
        return document


def _version(path: str, version: Any) -> str:
    match = _VERSION.match(str(version))
    if match is None:
        raise ToolkitSpecError(path, f"has cdiVersion {version!r}, not <major>.<minor>.<patch>")
    ours = tuple(int(part) for part in match.groups())
    return ".".join(str(part) for part in max(ours, MIN_VERSION))
