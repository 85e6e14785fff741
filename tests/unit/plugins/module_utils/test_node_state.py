# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""_node_state: what node_state_info reads on a node, from the text systemctl, the kernel and
the kubelet write, and from a directory laid out like a node's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import socket
import stat

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _node_state as ns

# `systemctl show --property=LoadState,ActiveState,SubState,Result,NRestarts,ExecMainCode,
# ExecMainStatus,UnitFileState containerd.service kubelet.service nope.service
# gpuops-runtime-guard.timer` on a lab node with containerd stopped: systemd prints each
# unit's properties in its own order, a block per unit in the order asked, and a unit it
# does not know as not-found.
SHOW = """\
Result=success
NRestarts=0
ExecMainCode=1
ExecMainStatus=0
LoadState=loaded
ActiveState=inactive
SubState=dead
UnitFileState=enabled

Result=exit-code
NRestarts=12
ExecMainStatus=1
LoadState=loaded
ActiveState=activating
SubState=auto-restart

Result=success
NRestarts=0
ExecMainStatus=0
LoadState=not-found
ActiveState=inactive
SubState=dead
UnitFileState=

Result=success
LoadState=loaded
ActiveState=active
SubState=waiting
UnitFileState=disabled
"""
UNITS = ["containerd.service", "kubelet.service", "nope.service", "gpuops-runtime-guard.timer"]


def test_each_block_is_the_unit_asked_in_its_place():
    states = ns.parse_unit_states(SHOW, UNITS)
    assert list(states) == UNITS
    assert states["containerd.service"] == {
        "LoadState": "loaded",
        "ActiveState": "inactive",
        "SubState": "dead",
        "Result": "success",
        "NRestarts": "0",
        "ExecMainCode": "1",
        "ExecMainStatus": "0",
        "UnitFileState": "enabled",
    }
    assert states["kubelet.service"]["SubState"] == "auto-restart"
    assert states["kubelet.service"]["NRestarts"] == "12"
    assert states["nope.service"]["LoadState"] == "not-found"
    assert states["nope.service"]["UnitFileState"] == ""
    # A timer has no NRestarts: absent, not invented.
    assert states["gpuops-runtime-guard.timer"] == {
        "LoadState": "loaded",
        "ActiveState": "active",
        "SubState": "waiting",
        "Result": "success",
        "UnitFileState": "disabled",
    }


def test_properties_not_asked_are_left_out():
    assert ns.parse_unit_states("Id=a.service\nLoadState=loaded\nDescription=x=y\n", ["a.service"]) == {
        "a.service": {"LoadState": "loaded"}
    }


@pytest.mark.parametrize("text", ["", "LoadState=loaded\n", SHOW + "\nLoadState=loaded\n"])
def test_blocks_that_do_not_match_the_units_are_an_error(text):
    units = UNITS[:2]
    with pytest.raises(ns.UnitStatesError, match=r"^systemctl show answered \d block\(s\) for 2 unit\(s\)"):
        ns.parse_unit_states(text, units)


@pytest.mark.parametrize(
    "name, full",
    [
        ("kubelet", "kubelet.service"),
        ("containerd.service", "containerd.service"),
        ("gpuops-runtime-guard.path", "gpuops-runtime-guard.path"),
        ("snap.kubelet.daemon", "snap.kubelet.daemon.service"),
        (" crio ", "crio.service"),
    ],
)
def test_a_name_without_a_unit_type_is_a_service(name, full):
    assert ns.unit_name(name) == full


def checkpoint_text(registered):
    return json.dumps({"Data": {"PodDeviceEntries": None, "RegisteredDevices": registered}, "Checksum": 1})


def test_the_checkpoint_gives_the_registered_devices_by_resource():
    text = checkpoint_text({"nvidia.com/gpu": ["GPU-a::0", "GPU-a::1"], "example.com/fpga": ["f0"]})
    assert ns.parse_checkpoint(text) == {
        "nvidia.com/gpu": ["GPU-a::0", "GPU-a::1"],
        "example.com/fpga": ["f0"],
    }


@pytest.mark.parametrize(
    "text",
    [json.dumps({"Data": {"PodDeviceEntries": []}}), json.dumps({"Data": None}), checkpoint_text(None)],
)
def test_a_checkpoint_without_registrations_has_none(text):
    assert ns.parse_checkpoint(text) == {}


@pytest.mark.parametrize("text", ["not json", "[]", json.dumps({"Data": []}), checkpoint_text(["GPU-a"])])
def test_a_checkpoint_that_is_not_the_kubelets_is_an_error(text):
    with pytest.raises(ValueError):
        ns.parse_checkpoint(text)


@pytest.mark.parametrize(
    "device_id, base", [("GPU-a::3", "GPU-a"), ("GPU-a", "GPU-a"), ("MIG-b", "MIG-b"), (0, "0")]
)
def test_a_replica_is_its_gpu(device_id, base):
    assert ns.base_id(device_id) == base


VERSION = """\
NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.163.01  Release Build  (dvs-builder@U16)
GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)
"""
PROC_DEVICES = """\
Character devices:
  1 mem
195 nvidia-frontend
195 nvidia
234 nvidia-nvlink
510 nvidia-uvm
511 nvidia-caps

Block devices:
  7 loop
259 nvidia-not-a-char
"""


def test_the_driver_version_is_its_nvrm_line():
    assert ns.driver_version(VERSION).startswith("NVRM version: NVIDIA UNIX Open Kernel Module")
    assert ns.driver_version("") is None


def test_char_majors_are_the_nvidia_drivers_character_devices():
    assert ns.char_majors(PROC_DEVICES) == {
        "nvidia-frontend": 195,
        "nvidia": 195,
        "nvidia-nvlink": 234,
        "nvidia-uvm": 510,
        "nvidia-caps": 511,
    }


def test_read_driver_where_the_module_is_not_loaded(tmp_path):
    devices = tmp_path / "devices"
    devices.write_text(PROC_DEVICES)
    assert ns.read_driver(str(tmp_path / "no-version"), str(devices)) == {
        "loaded": False,
        "version": None,
        "majors": ns.char_majors(PROC_DEVICES),
        "error": None,
    }
    version = tmp_path / "version"
    version.write_text(VERSION)
    found = ns.read_driver(str(version), str(tmp_path / "no-devices"))
    assert found["loaded"] and found["version"] == VERSION.splitlines()[0]
    assert found["error"].startswith("[Errno 2]")


@pytest.mark.parametrize(
    "mode, kind",
    [
        (stat.S_IFCHR | 0o666, "char"),
        (stat.S_IFBLK | 0o660, "block"),
        (stat.S_IFDIR | 0o755, "directory"),
        (stat.S_IFREG | 0o644, "file"),
        (stat.S_IFSOCK | 0o755, "socket"),
        (stat.S_IFIFO | 0o600, "fifo"),
    ],
)
def test_entry_types(mode, kind):
    assert ns.entry_type(mode) == kind


def test_devices_are_every_nvidia_entry_with_its_numbers(tmp_path):
    # /dev/null stands in for a device node (char 1:3) without mknod.
    os.symlink("/dev/null", str(tmp_path / "nvidia0"))
    (tmp_path / "nvidia-caps").mkdir()
    (tmp_path / "nvidia-uvm").write_text("")
    os.symlink(str(tmp_path / "gone"), str(tmp_path / "nvidiactl"))
    (tmp_path / "null").write_text("")
    assert ns.read_devices(str(tmp_path)) == {
        "nvidia-caps": {
            "path": str(tmp_path / "nvidia-caps"),
            "type": "directory",
            "major": None,
            "minor": None,
            "link": None,
        },
        "nvidia-uvm": {
            "path": str(tmp_path / "nvidia-uvm"),
            "type": "file",
            "major": None,
            "minor": None,
            "link": None,
        },
        "nvidia0": {
            "path": str(tmp_path / "nvidia0"),
            "type": "char",
            "major": 1,
            "minor": 3,
            "link": "/dev/null",
        },
        "nvidiactl": {
            "path": str(tmp_path / "nvidiactl"),
            "type": "missing",
            "major": None,
            "minor": None,
            "link": str(tmp_path / "gone"),
        },
    }


def test_no_dev_dir_has_no_devices(tmp_path):
    assert ns.read_devices(str(tmp_path / "none")) == {}


def listening(path):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    return server


def test_device_plugins_sockets_and_registrations(tmp_path):
    plugin_dir = tmp_path / "dp"
    plugin_dir.mkdir()
    servers = [listening(plugin_dir / name) for name in ("kubelet.sock", "nvidia-gpu.sock")]
    (plugin_dir / "stale.sock").write_text("")  # not a socket: no plugin listens there
    (plugin_dir / ns.CHECKPOINT).write_text(checkpoint_text({"nvidia.com/gpu": ["GPU-a"]}))
    try:
        found = ns.read_device_plugins(str(plugin_dir))
    finally:
        for server in servers:
            server.close()
    assert found == {
        "dir": str(plugin_dir),
        "exists": True,
        "sockets": ["nvidia-gpu.sock"],
        "kubelet_socket": True,
        "checkpoint": {
            "path": str(plugin_dir / ns.CHECKPOINT),
            "exists": True,
            "registered": {"nvidia.com/gpu": ["GPU-a"]},
            "allocated": {},
            "error": None,
        },
    }


def test_an_unreadable_checkpoint_says_why(tmp_path):
    (tmp_path / ns.CHECKPOINT).write_text("{")
    checkpoint = ns.read_device_plugins(str(tmp_path))["checkpoint"]
    assert checkpoint["exists"] and checkpoint["registered"] == {}
    assert checkpoint["error"].startswith(str(tmp_path / ns.CHECKPOINT) + ": Expecting"), checkpoint


def test_no_plugin_dir(tmp_path):
    found = ns.read_device_plugins(str(tmp_path / "none"))
    assert not found["exists"] and found["sockets"] == [] and not found["checkpoint"]["exists"]


def test_paths_are_stat_ed_links_followed(tmp_path):
    binary = tmp_path / "nvidia-container-runtime"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    os.symlink(str(binary), str(tmp_path / "link"))
    plain = tmp_path / "plain"
    plain.write_text("")
    plain.chmod(0o640)
    directory = tmp_path / "dir"
    directory.mkdir()
    directory.chmod(0o750)
    paths = [str(binary), str(tmp_path / "link"), str(plain), str(directory), str(tmp_path / "none")]
    me = {"uid": os.getuid(), "gid": os.getgid()}
    assert ns.read_paths(paths) == {
        str(binary): dict(me, exists=True, type="file", executable=True, mode="0755"),
        str(tmp_path / "link"): dict(me, exists=True, type="file", executable=True, mode="0755"),
        str(plain): dict(me, exists=True, type="file", executable=False, mode="0640"),
        str(directory): dict(me, exists=True, type="directory", executable=False, mode="0750"),
        str(tmp_path / "none"): {
            "exists": False,
            "type": "missing",
            "executable": False,
            "mode": None,
            "uid": None,
            "gid": None,
        },
    }


def test_the_checkpoint_gives_the_pods_each_resource_was_handed_to():
    entry = {"ContainerName": "c", "DeviceIDs": {"-1": ["GPU-a"]}, "AllocResp": ""}
    text = json.dumps(
        {
            "Data": {
                "PodDeviceEntries": [
                    dict(entry, PodUID="p1", ResourceName="nvidia.com/gpu"),
                    dict(entry, PodUID="p1", ResourceName="nvidia.com/gpu", ContainerName="d"),
                    dict(entry, PodUID="p2", ResourceName="example.com/fpga"),
                ],
                "RegisteredDevices": {},
            },
            "Checksum": 1,
        }
    )
    assert ns.checkpoint_allocations(text) == {"nvidia.com/gpu": ["p1"], "example.com/fpga": ["p2"]}
    assert ns.checkpoint_allocations(json.dumps({"Data": None})) == {}
