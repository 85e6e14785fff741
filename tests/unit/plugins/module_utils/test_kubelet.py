# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""_kubelet: versions, the cgroup hierarchy and the kubelet configuration's settings, read
from the text kubelet_info finds on a node."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _kubelet as kl

# /proc/self/mounts on this project's lab host (Debian 12, hybrid: cgroup v1 controllers
# under a tmpfs, the unified hierarchy beside them) and on a cgroup v2 host.
HYBRID = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0
"""
UNIFIED = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0
"""


@pytest.mark.parametrize(
    "mounts, version", [(HYBRID, 1), (UNIFIED, 2), ("proc /proc proc rw 0 0\n", None), ("", None)]
)
def test_cgroup_version_is_the_mount_on_sys_fs_cgroup(mounts, version):
    assert kl.cgroup_version(mounts) == version


def test_the_last_mount_on_the_path_is_the_one_that_shows():
    assert kl.cgroup_version(HYBRID + "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n") == 2


@pytest.mark.parametrize(
    "text, version",
    [
        ("Kubernetes v1.37.2", (1, 37, 2)),
        ("v1.35.4", (1, 35, 4)),
        ("1.35", (1, 35, 0)),
        ("", None),
        (None, None),
        ("kubelet: command not found", None),
    ],
)
def test_parse_version(text, version):
    assert kl.parse_version(text) == version


KUBEADM_YAML = """\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous:
    enabled: false
cgroupDriver: systemd  # kubeadm's default since 1.22
failCgroupV1: false
evictionHard:
  failCgroupV1: true
"""


def test_yaml_top_level_settings_only():
    # The nested failCgroupV1 is not the kubelet's setting.
    assert kl.config_settings(KUBEADM_YAML) == {"cgroupDriver": "systemd", "failCgroupV1": False}


def test_yaml_quoted_and_capitalised_booleans():
    assert kl.config_settings("failCgroupV1: 'False'\ncgroupDriver: \"cgroupfs\"\n") == {
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
    }


def test_json_as_the_lab_writes_it():
    text = '{\n  "kind": "KubeletConfiguration",\n  "failCgroupV1": false,\n  "cgroupDriver": "cgroupfs"\n}'
    assert kl.config_settings(text) == {"failCgroupV1": False, "cgroupDriver": "cgroupfs"}


def test_a_setting_not_written_is_absent():
    assert kl.config_settings("kind: KubeletConfiguration\n") == {}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]"])
def test_json_that_is_not_an_object_is_an_error(text):
    with pytest.raises(ValueError):
        kl.config_settings(text)


@pytest.mark.parametrize(
    "version, setting, refuses",
    [
        ((1, 35, 0), None, True),
        ((1, 37, 2), None, True),
        ((1, 37, 2), False, False),
        ((1, 34, 10), None, False),
        ((1, 34, 10), True, True),
        ((1, 30, 9), True, False),
        (None, None, False),
    ],
)
def test_refuses_cgroup_v1(version, setting, refuses):
    assert kl.refuses_cgroup_v1(version, setting) is refuses
