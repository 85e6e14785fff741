# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A GPU node's local state, as the node_state_info module reads it in one call: the NVIDIA
kernel module, the /dev/nvidia* entries, systemd units, the kubelet's device plugin
directory (its sockets and the checkpoint's registered devices) and a few paths.

Private to the gpuops.k8s collection. The parsers (unit_name, parse_unit_states,
parse_checkpoint, driver_version, char_majors, base_id) are pure and shared with the doctor's
diagnosis (_doctor); the read_* functions read the node (stat, listdir, open) and never
write. Nothing here raises for what a node lacks: a missing file or directory is reported,
not an error.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import stat

DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
PROC_DEVICES = "/proc/devices"
# sd_booted(3): systemd is the init system where this directory exists.
SYSTEMD_RUNTIME_DIR = "/run/systemd/system"
CHECKPOINT = "kubelet_internal_checkpoint"
KUBELET_SOCKET = "kubelet.sock"

# What systemctl show is asked of each unit, and what each unit's entry holds (a property
# systemd does not have for that unit type, such as NRestarts of a timer, is absent).
UNIT_PROPERTIES = (
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "NRestarts",
    "ExecMainCode",
    "ExecMainStatus",
    # enabled, disabled, static... (empty for a unit systemd does not know): whether a role
    # that keeps a unit enabled has anything to do.
    "UnitFileState",
)
# systemd's unit types: a name ending in none of them is a service (systemctl adds .service).
UNIT_SUFFIXES = (
    ".service",
    ".socket",
    ".device",
    ".mount",
    ".automount",
    ".swap",
    ".target",
    ".path",
    ".timer",
    ".slice",
    ".scope",
)

CHAR = "char"
BLOCK = "block"
DIRECTORY = "directory"
FILE = "file"
SOCKET = "socket"
FIFO = "fifo"
MISSING = "missing"
_TYPES = (
    (stat.S_ISCHR, CHAR),
    (stat.S_ISBLK, BLOCK),
    (stat.S_ISDIR, DIRECTORY),
    (stat.S_ISREG, FILE),
    (stat.S_ISSOCK, SOCKET),
    (stat.S_ISFIFO, FIFO),
)


class UnitStatesError(ValueError):
    """systemctl show's output does not answer for the units asked."""


def unit_name(name):
    """The unit's full name, as systemctl reads it: kubelet -> kubelet.service."""
    name = (name or "").strip()
    return name if name.endswith(UNIT_SUFFIXES) else name + ".service"


def parse_unit_states(text, units):
    """{unit: {property: value}} from `systemctl show --property=...` of units, in order.

    systemctl prints one block of KEY=VALUE lines per unit, in the order asked, separated by
    an empty line (a unit systemd does not know is LoadState=not-found, not left out).
    Raises UnitStatesError when the blocks do not match the units one to one.
    """
    blocks = [block for block in (text or "").strip("\n").split("\n\n") if block.strip()]
    if len(blocks) != len(units):
        raise UnitStatesError(
            "systemctl show answered %d block(s) for %d unit(s): %r" % (len(blocks), len(units), text)
        )
    states = {}
    for unit, block in zip(units, blocks):
        entry = {}
        for line in block.splitlines():
            key, sep, value = line.partition("=")
            if sep and key in UNIT_PROPERTIES:
                entry[key] = value
        states[unit] = entry
    return states


def parse_checkpoint(text):
    """The kubelet's device checkpoint (kubelet_internal_checkpoint, JSON): {resource: [device
    IDs]} of its RegisteredDevices: the devices the kubelet held healthy when it last wrote
    it (on each device update from a plugin, each allocation, and when a resource goes; not
    when a plugin disconnects).

    Raises ValueError when the text is not that JSON object.
    """
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("Data", {}), (dict, type(None))):
        raise ValueError("not the kubelet's checkpoint (a JSON object with Data)")
    registered = (data.get("Data") or {}).get("RegisteredDevices") or {}
    if not isinstance(registered, dict):
        raise ValueError("RegisteredDevices is not a mapping")
    return {
        str(resource): [str(device) for device in devices or []] for resource, devices in registered.items()
    }


def checkpoint_allocations(text):
    """{resource: [pod UIDs]} of the kubelet's device checkpoint's PodDeviceEntries: the pods
    it has handed a plugin's devices to (entries of pods gone stay until the kubelet next
    allocates). Raises ValueError when the text is not the checkpoint's JSON."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("Data", {}), (dict, type(None))):
        raise ValueError("not the kubelet's checkpoint (a JSON object with Data)")
    allocated = {}
    for entry in (data.get("Data") or {}).get("PodDeviceEntries") or []:
        if isinstance(entry, dict) and entry.get("ResourceName"):
            pods = allocated.setdefault(str(entry["ResourceName"]), [])
            if str(entry.get("PodUID", "")) not in pods:
                pods.append(str(entry.get("PodUID", "")))
    return allocated


def base_id(device_id):
    """The device a plugin's ID names: time-sliced replicas are <UUID>::<n>."""
    return str(device_id).split("::", 1)[0]


def driver_version(text):
    """The NVRM line of /proc/driver/nvidia/version (the kernel module's version), or None."""
    for line in (text or "").splitlines():
        if line.startswith("NVRM"):
            return line.strip()
    return None


def char_majors(text):
    """{driver: major} of the NVIDIA drivers in /proc/devices' character devices (nvidia-frontend,
    nvidia-uvm, nvidia-nvlink, ...): the major numbers their device nodes must carry."""
    majors = {}
    section = None
    for line in (text or "").splitlines():
        if line.endswith(":"):
            section = line[:-1].strip()
            continue
        fields = line.split()
        named = len(fields) == 2 and fields[0].isdigit() and fields[1].startswith("nvidia")
        if section == "Character devices" and named:
            majors[fields[1]] = int(fields[0])
    return majors


def entry_type(mode):
    for test, name in _TYPES:
        if test(mode):
            return name
    return "other"


def describe(path):
    """{type, major, minor, link} of path, following a link (link: its target, else None);
    type missing where nothing (or a dangling link) is there."""
    try:
        link = os.readlink(path) if os.path.islink(path) else None
    except OSError:
        link = None
    try:
        info = os.stat(path)
    except OSError:
        return {"type": MISSING, "major": None, "minor": None, "link": link}
    kind = entry_type(info.st_mode)
    device = kind in (CHAR, BLOCK)
    return {
        "type": kind,
        "major": os.major(info.st_rdev) if device else None,
        "minor": os.minor(info.st_rdev) if device else None,
        "link": link,
    }


def _read(path):
    with open(path) as handle:
        return handle.read()


def read_driver(version_file=DRIVER_VERSION_FILE, proc_devices=PROC_DEVICES):
    """{loaded, version, majors, error}: the kernel module is loaded where its version file exists."""
    result = {"loaded": os.path.exists(version_file), "version": None, "majors": {}, "error": None}
    try:
        if result["loaded"]:
            result["version"] = driver_version(_read(version_file))
        result["majors"] = char_majors(_read(proc_devices))
    except OSError as error:
        result["error"] = str(error)
    return result


def read_devices(dev_dir="/dev"):
    """{name: describe()} of every entry of dev_dir whose name starts with nvidia."""
    try:
        names = sorted(name for name in os.listdir(dev_dir) if name.startswith("nvidia"))
    except OSError:
        return {}
    return {
        name: dict(describe(os.path.join(dev_dir, name)), path=os.path.join(dev_dir, name)) for name in names
    }


def read_device_plugins(plugin_dir):
    """{dir, exists, sockets, kubelet_socket, checkpoint}: the plugins' sockets (not the
    kubelet's own) and what the kubelet's checkpoint says it has registered."""
    result = {
        "dir": plugin_dir,
        "exists": os.path.isdir(plugin_dir),
        "sockets": [],
        "kubelet_socket": False,
        "checkpoint": {
            "path": os.path.join(plugin_dir, CHECKPOINT),
            "exists": False,
            "registered": {},
            "allocated": {},
            "error": None,
        },
    }
    if not result["exists"]:
        return result
    try:
        names = sorted(os.listdir(plugin_dir))
    except OSError as error:
        result["checkpoint"]["error"] = str(error)
        return result
    for name in names:
        if name.endswith(".sock") and describe(os.path.join(plugin_dir, name))["type"] == SOCKET:
            if name == KUBELET_SOCKET:
                result["kubelet_socket"] = True
            else:
                result["sockets"].append(name)
    checkpoint = result["checkpoint"]
    checkpoint["exists"] = CHECKPOINT in names
    if checkpoint["exists"]:
        try:
            text = _read(checkpoint["path"])
            checkpoint["registered"] = parse_checkpoint(text)
            checkpoint["allocated"] = checkpoint_allocations(text)
        except (OSError, ValueError) as error:
            checkpoint["error"] = "%s: %s" % (checkpoint["path"], error)
    return result


def read_paths(paths):
    """{path: {exists, type, executable, mode, uid, gid}} of each path, links followed; mode
    (an octal string such as "0755"), uid and gid are None where nothing is there."""
    found = {}
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            info = None
        kind = entry_type(info.st_mode) if info else MISSING
        found[path] = {
            "exists": kind != MISSING,
            "type": kind,
            "executable": kind == FILE and os.access(path, os.X_OK),
            "mode": "%04o" % stat.S_IMODE(info.st_mode) if info else None,
            "uid": info.st_uid if info else None,
            "gid": info.st_gid if info else None,
        }
    return found


def systemd_booted(runtime_dir=SYSTEMD_RUNTIME_DIR):
    return os.path.isdir(runtime_dir)
