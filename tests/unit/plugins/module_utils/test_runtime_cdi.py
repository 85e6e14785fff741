# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""_runtime_cdi: whether a node's container runtime injects CDI devices, the verdict the
device_plugin role's mode dra refuses a node by."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _runtime_cdi as rc

# `containerd config dump` as containerd 1.7 prints it (its CRI plugin cut to the keys that
# matter here), with enable_cdi as the container_runtime role leaves it.
DUMP_17 = """\
version = 2
root = "/var/lib/containerd"

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
    enable_cdi = %s
    sandbox_image = "registry.k8s.io/pause:3.8"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
"""
# containerd 2.x: config version 3, CDI in the CRI runtime plugin.
DUMP_2 = """\
version = 3
root = "/var/lib/containerd"

[plugins]
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.runtime"]
    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
    %s
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
"""
# A 1.7 dump without the key at all (containerd's default: off).
DUMP_17_UNSET = DUMP_17.replace("    enable_cdi = %s\n", "")


def test_containerd_16_is_refused_whatever_its_configuration():
    found = rc.verdict("containerd://1.6.20~ds1", DUMP_17 % "true")
    assert (found["runtime"], found["version"], found["cdi"]) == ("containerd", "1.6.20~ds1", False)
    assert found["msg"].startswith("containerd 1.6.20~ds1 has no CDI support"), found["msg"]
    assert "upgrade containerd" in found["msg"] and "container_runtime_enable_cdi: true" in found["msg"]
    assert 'plugins."io.containerd.grpc.v1.cri"' in found["msg"]
    assert rc.VALID in found["msg"]
    assert not rc.needs_config("containerd://1.6.20~ds1")


@pytest.mark.parametrize("dump", [DUMP_17 % "false", DUMP_17_UNSET], ids=["false", "unset"])
def test_containerd_17_without_enable_cdi_is_refused(dump):
    found = rc.verdict("containerd://1.7.24", dump)
    assert found["cdi"] is False
    assert found["setting"] == 'plugins."io.containerd.grpc.v1.cri".enable_cdi'
    msg = found["msg"]
    assert msg.startswith(
        'containerd 1.7.24 has CDI off: plugins."io.containerd.grpc.v1.cri".enable_cdi = false'
    )
    assert "container_runtime_enable_cdi: true" in msg and rc.VALID in msg, msg
    assert ("containerd's default" in msg) is (dump == DUMP_17_UNSET), msg


def test_containerd_17_with_enable_cdi_is_accepted():
    found = rc.verdict("containerd://1.7.24", DUMP_17 % "true")
    assert (found["cdi"], found["msg"]) == (True, None)
    assert rc.needs_config("containerd://1.7.24")


@pytest.mark.parametrize("setting", ["", "enable_cdi = true"], ids=["default", "set"])
def test_containerd_2_is_accepted_unless_turned_off(setting):
    found = rc.verdict("containerd://2.1.4", DUMP_2 % setting)
    assert (found["cdi"], found["msg"]) == (True, None)
    assert found["setting"] == 'plugins."io.containerd.cri.v1.runtime".enable_cdi'


def test_containerd_2_with_cdi_turned_off_is_refused():
    found = rc.verdict("containerd://2.1.4", DUMP_2 % "enable_cdi = false")
    assert found["cdi"] is False
    assert found["msg"].startswith(
        'containerd 2.1.4 has CDI off: plugins."io.containerd.cri.v1.runtime".enable_cdi = false '
        "(as its configuration sets it)"
    ), found["msg"]


def test_containerd_2_reads_its_own_plugin_not_17s():
    """A 1.7-style CRI table saying true does not turn 2.x's CDI back on."""
    dump = DUMP_2 % "enable_cdi = false" + '\n[plugins."io.containerd.grpc.v1.cri"]\nenable_cdi = true\n'
    assert rc.verdict("containerd://2.0.0", dump)["cdi"] is False


@pytest.mark.parametrize("version", ["cri-o://1.30.4", "cri-o://1.23.0"])
def test_crio_is_accepted(version):
    found = rc.verdict(version)
    assert (found["runtime"], found["cdi"], found["msg"]) == ("cri-o", True, None)
    assert not rc.needs_config(version)


def test_crio_before_cdi_is_refused():
    found = rc.verdict("cri-o://1.22.5")
    assert found["cdi"] is False and found["msg"].startswith("cri-o 1.22.5 has no CDI"), found


@pytest.mark.parametrize(
    "version, start",
    [
        # cri-dockerd: Docker's CDI goes through its own feature flag, not checked here.
        ("docker://26.1.0", "docker 26.1.0 is not a runtime this role knows"),
        ("", "the Node reports no container runtime"),
        ("containerd://devel", "containerd: its version 'devel' cannot be read"),
    ],
    ids=["docker", "none", "unreadable"],
)
def test_an_unknown_runtime_is_refused(version, start):
    """Decided: refused, like a runtime known to lack CDI. DRA there would fail only when a
    pod starts without its GPU; an unknown runtime is named, with what is valid."""
    found = rc.verdict(version)
    assert found["cdi"] is False
    assert found["msg"].startswith(start) and rc.VALID in found["msg"], found["msg"]


@pytest.mark.parametrize(
    "text, error, why",
    [
        (None, "no containerd binary on this node's PATH", "no containerd binary"),
        ("version = = 2", None, "containerd config dump"),
    ],
    ids=["no-binary", "not-toml"],
)
def test_containerd_17_whose_configuration_cannot_be_read_is_refused(text, error, why):
    found = rc.verdict("containerd://1.7.24", text, error)
    assert found["cdi"] is False
    msg = found["msg"]
    assert msg.startswith("containerd 1.7.24: its configuration cannot be read (") and why in msg, msg
    assert "left untouched" not in msg


@pytest.mark.parametrize(
    "version, dump, planned, cdi",
    [
        # Check mode before the container_runtime role's change: its value stands in.
        ("containerd://1.7.24", DUMP_17 % "false", True, True),
        ("containerd://2.1.4", DUMP_2 % "", False, False),
        # Planned or not, 1.6 has no CDI and CRI-O has it.
        ("containerd://1.6.20~ds1", DUMP_17 % "false", True, False),
        ("cri-o://1.30.4", None, False, True),
    ],
)
def test_the_container_runtime_roles_planned_setting_stands_in_for_containerds(version, dump, planned, cdi):
    found = rc.verdict(version, dump, planned=planned)
    assert found["cdi"] is cdi and (found["msg"] is None) is cdi, found
    if version == "containerd://2.1.4":
        assert "the container_runtime role sets it to false" in found["msg"], found["msg"]


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("containerd://1.7.24", ("containerd", (1, 7), "1.7.24")),
        ("containerd://1.7.23-k3s2", ("containerd", (1, 7), "1.7.23-k3s2")),
        ("containerd://v2.0.0", ("containerd", (2, 0), "v2.0.0")),
        ("CRI-O://1.30.4", ("cri-o", (1, 30), "1.30.4")),
        (" ", ("", None, "")),
        (None, ("", None, "")),
    ],
)
def test_runtime_versions_as_nodes_report_them(text, parsed):
    assert rc.parse_runtime_version(text) == parsed
