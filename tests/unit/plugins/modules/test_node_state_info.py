# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""node_state_info's systemd part: every unit from one systemctl show, and a systemd that
is not there or does not answer said in the result, never a failure."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _node_state as ns
from ansible_collections.gpuops.k8s.plugins.modules import node_state_info
from ansible_collections.gpuops.k8s.tests.unit.plugins.module_utils.test_cdi_spec import (
    LIST_BROKEN_STDERR,
    LIST_STDOUT,
)
from ansible_collections.gpuops.k8s.tests.unit.plugins.module_utils.test_node_state import SHOW, UNITS
from ansible_collections.gpuops.k8s.tests.unit.plugins.module_utils.test_runtime_cdi import DUMP_17


class FakeTool:
    """What node_state_info's readers ask of AnsibleModule: one tool's path (None: not on
    PATH), and its runs, each answered alike."""

    def __init__(self, tool, out="", rc=0, err="", path=""):
        self.tool = tool
        self.path = "/usr/bin/" + tool if path == "" else path
        self.answer = (rc, out, err)
        self.calls = []

    def get_bin_path(self, name):
        assert name == self.tool
        return self.path

    def run_command(self, argv, environ_update=None):
        self.calls.append((argv, environ_update))
        return self.answer


@pytest.fixture
def booted(monkeypatch):
    monkeypatch.setattr(ns, "systemd_booted", lambda: True)


def test_every_unit_is_read_with_one_systemctl_show(booted):
    module = FakeTool("systemctl", out=SHOW)
    found = node_state_info.read_units(module, UNITS)
    assert found == {"available": True, "error": None, "units": ns.parse_unit_states(SHOW, UNITS)}
    ((argv, env),) = module.calls
    assert argv == [
        "/usr/bin/systemctl",
        "show",
        "--no-pager",
        "--property=" + ",".join(ns.UNIT_PROPERTIES),
        "--",
        *UNITS,
    ]
    assert env == {"LC_ALL": "C"}


@pytest.mark.parametrize(
    "module, error",
    [
        (
            FakeTool("systemctl", rc=1, err="Failed to connect to bus: No such file or directory\n"),
            "systemctl show failed (rc 1): Failed to connect to bus: No such file or directory",
        ),
        (FakeTool("systemctl", path=None), "systemctl is not installed"),
        (FakeTool("systemctl", out="LoadState=loaded\n"), "systemctl show answered 1 block(s) for 4 unit(s)"),
    ],
    ids=["fails", "no-systemctl", "short-answer"],
)
def test_a_systemd_that_does_not_answer_is_said_not_failed(booted, module, error):
    found = node_state_info.read_units(module, UNITS)
    assert not found["available"] and found["units"] == {}
    assert found["error"].startswith(error), found


def test_no_systemd_runs_nothing(monkeypatch):
    monkeypatch.setattr(ns, "systemd_booted", lambda: False)
    module = FakeTool("systemctl")
    assert node_state_info.read_units(module, UNITS) == {
        "available": False,
        "error": "systemd is not the init system here (no /run/systemd/system)",
        "units": {},
    }
    assert module.calls == []


def test_runtime_cdi_is_not_read_unless_asked():
    module = FakeTool("containerd")
    assert node_state_info.read_runtime_cdi(module, None, None) is None
    assert module.calls == []


def test_containerd_17s_cdi_is_read_from_its_config_dump():
    module = FakeTool("containerd", out=DUMP_17 % "true")
    found = node_state_info.read_runtime_cdi(module, "containerd://1.7.24", None)
    assert (found["cdi"], found["msg"]) == (True, None)
    assert module.calls == [(["/usr/bin/containerd", "config", "dump"], {"LC_ALL": "C"})]


@pytest.mark.parametrize("version", ["containerd://1.6.20~ds1", "cri-o://1.30.4", ""])
def test_no_config_dump_where_the_version_decides(version):
    module = FakeTool("containerd")
    node_state_info.read_runtime_cdi(module, version, None)
    assert module.calls == []


@pytest.mark.parametrize(
    "module, error",
    [
        (
            FakeTool("containerd", rc=1, err="permission denied\n"),
            "containerd config dump failed (rc 1): permission denied",
        ),
        (FakeTool("containerd", path=None), "no containerd binary on this node's PATH"),
    ],
    ids=["fails", "no-binary"],
)
def test_a_config_dump_that_fails_is_a_refusal_that_says_why(module, error):
    found = node_state_info.read_runtime_cdi(module, "containerd://1.7.24", None)
    assert found["cdi"] is False and "(%s)" % error in found["msg"], found["msg"]


def test_the_planned_setting_reaches_the_verdict():
    """Check mode: containerd dumps enable_cdi = false, the container_runtime role sets it true."""
    module = FakeTool("containerd", out=DUMP_17 % "false")
    found = node_state_info.read_runtime_cdi(module, "containerd://1.7.24", True)
    assert (found["cdi"], found["planned"], found["msg"]) == (True, True, None)


def test_every_package_is_read_with_one_dpkg_query():
    listed = "containerd\t1.6.20~ds1-1+b1\tinstall ok installed\n"
    module = FakeTool("dpkg-query", out=listed, rc=1, err="not found")
    found = node_state_info.read_packages(module, ["containerd", "python3-tomlkit"])
    assert found["available"] is True
    assert found["by_name"]["containerd"]["installed"] is True
    assert found["by_name"]["python3-tomlkit"] == {"installed": False, "version": None, "selection": None}
    assert module.calls == [
        (
            [
                "/usr/bin/dpkg-query",
                "--show",
                "--showformat=${Package}\\t${Version}\\t${Status}\\n",
                "--",
                "containerd",
                "python3-tomlkit",
            ],
            {"LC_ALL": "C"},
        )
    ]


@pytest.mark.parametrize(
    "module, error",
    [
        (FakeTool("dpkg-query", path=None), "dpkg-query is not installed (not a Debian node)"),
        (
            FakeTool("dpkg-query", rc=2, err="dpkg-query: error: database locked\n"),
            "dpkg-query failed (rc 2): dpkg-query: error: database locked",
        ),
    ],
)
def test_no_dpkg_is_said_and_leaves_every_decision_to_the_modules(module, error):
    found = node_state_info.read_packages(module, ["containerd"])
    assert found["available"] is False
    assert found["error"] == error
    assert found["by_name"] == {}


def test_no_packages_asked_runs_nothing():
    module = FakeTool("dpkg-query")
    assert node_state_info.read_packages(module, []) == {"available": True, "error": None, "by_name": {}}
    assert module.calls == []


def test_cdi_is_read_only_where_nvidia_ctk_is_given():
    module = FakeTool("nvidia-ctk")
    assert node_state_info.read_cdi(module, None) is None
    assert module.calls == []


def test_cdi_list_answers_with_the_devices_and_the_specs_it_could_not_load(tmp_path):
    ctk = tmp_path / "nvidia-ctk"
    ctk.write_text("#!/bin/sh\n")
    ctk.chmod(0o755)
    module = FakeTool("nvidia-ctk", out=LIST_STDOUT, err=LIST_BROKEN_STDERR)
    found = node_state_info.read_cdi(module, str(ctk))
    assert module.calls == [([str(ctk), "cdi", "list"], {"LC_ALL": "C"})]
    assert found["available"] is True and found["error"] is None
    assert found["devices"] == ["nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=all"]
    assert list(found["spec_errors"]) == ["/var/run/cdi/nvidia.yaml"]


def test_no_nvidia_ctk_or_a_failing_one_is_said(tmp_path):
    missing = str(tmp_path / "nvidia-ctk")
    found = node_state_info.read_cdi(FakeTool("nvidia-ctk"), missing)
    assert (found["available"], found["error"]) == (False, "%s is not installed" % missing)
    ctk = tmp_path / "ctk"
    ctk.write_text("#!/bin/sh\n")
    ctk.chmod(0o755)
    failing = FakeTool(
        "nvidia-ctk",
        rc=1,
        err='level=error msg="at least one CDI specification directory must be specified"\n',
    )
    found = node_state_info.read_cdi(failing, str(ctk))
    assert found["available"] is False
    assert found["error"] == (
        "nvidia-ctk cdi list failed (rc 1): at least one CDI specification directory must be specified"
    )
