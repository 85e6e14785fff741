# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The plan: the one path from nvidia_runtime's options to the files it writes, for the
module, its check mode with or without tomlkit, and the drift guard. Files are read through
a reader over a dict, so each case states the node's files."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
from unittest import mock

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils._runtime import toml_edit
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.defaults import ENGINES, OPTIONS
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.errors import (
    RuntimeConfigError,
    UnsupportedOption,
)
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.plan import NodeFiles, apply, plan
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.toml_edit import UNRENDERED

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "runtime_configs")
NV = "/usr/bin/nvidia-container-runtime"
CONFIG = ENGINES["containerd"]["path"]
DROP_IN = ENGINES["containerd"]["drop_in_path"]


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


class Files(dict):
    """plan()'s reader over {path: text}."""

    def read(self, path):
        return self.get(path)

    def listdir(self, directory):
        return sorted(os.path.basename(path) for path in self if os.path.dirname(path) == directory)


def options(**given):
    return {"runtime": "containerd", **OPTIONS, **given}


def applied(files, planned):
    """The node's files after a real run of planned."""
    after = Files(files)
    for path, text in planned.changes().items():
        if text is None:
            after.pop(path, None)
        else:
            after[path] = text
    return after


# ------------------------------------------------------------------ one table of defaults


@pytest.mark.parametrize("runtime", sorted(ENGINES))
def test_an_empty_option_takes_the_engine_default_from_the_one_table(runtime):
    planned = plan(options(runtime=runtime), Files())
    engine = ENGINES[runtime]
    assert planned.config_mode == engine["config_mode"]
    managed = engine["drop_in_path"] if engine["config_mode"] == "drop_in" else engine["path"]
    assert planned.planned_files == [managed]
    assert planned.changes() and planned.restart_required()
    assert planned.existed == {managed: False}


def test_docker_drop_in_is_refused_naming_the_field_and_what_is_valid():
    with pytest.raises(
        UnsupportedOption,
        match=re.escape("config_mode=drop_in: Docker reads a single daemon.json; use in_place"),
    ):
        plan(options(runtime="docker", config_mode="drop_in"), Files())


def test_a_relative_path_is_refused_before_anything_is_read():
    class Unread(Files):
        def read(self, path):
            raise AssertionError("read %s" % path)

    with pytest.raises(
        UnsupportedOption, match=re.escape("drop_in_path='conf.d/x.toml': must be an absolute path")
    ):
        plan(options(config_mode="drop_in", drop_in_path="conf.d/x.toml"), Unread())


def test_an_unreadable_file_is_a_typed_error_naming_it(tmp_path):
    with pytest.raises(RuntimeConfigError, match=re.escape("%s: cannot be read" % tmp_path)):
        plan(options(path=str(tmp_path)), NodeFiles())


# ------------------------------------------------------------------ check mode without tomlkit

PLANS = [
    (name, mode, kwargs)
    for name in [
        "containerd2-default-v3.toml",
        "eks-v2.toml",
        "k3s-v2.toml",
        "kubespray-v2.toml",
        "v1-legacy.toml",
    ]
    for mode in ["in_place", "drop_in"]
    for kwargs in [{}, {"set_as_default": True}, {"state": "absent"}, {"enable_cdi": True}]
    if not (name == "v1-legacy.toml" and "enable_cdi" in kwargs)
]


@pytest.mark.parametrize(("name", "mode", "kwargs"), PLANS)
def test_check_mode_without_tomlkit_is_the_same_plan(name, mode, kwargs):
    files = Files({CONFIG: fixture(name)})
    if kwargs.get("state") == "absent":  # after a present run: something to take away
        files = applied(files, plan(options(config_mode=mode, set_as_default=True), files))
    real = plan(options(config_mode=mode, **kwargs), files)
    with mock.patch.object(toml_edit, "HAS_TOMLKIT", False):
        predicted = plan(options(config_mode=mode, **kwargs), files)
    assert predicted.planned_files == real.planned_files
    assert sorted(predicted.changes()) == sorted(real.changes())
    assert predicted.restart_required() == real.restart_required()
    for path, text in predicted.changes().items():
        assert text is UNRENDERED or text == real.changes()[path], path


def test_without_tomlkit_only_an_array_edit_is_left_unrendered():
    # The user's imports = [] is edited inside the array, which only tomlkit writes.
    files = Files({CONFIG: "version = 2\nimports = []\n"})
    with mock.patch.object(toml_edit, "HAS_TOMLKIT", False):
        predicted = plan(options(config_mode="drop_in"), files)
    changes = predicted.changes()
    assert changes[CONFIG] is UNRENDERED
    assert changes[DROP_IN] == plan(options(config_mode="drop_in"), files).changes()[DROP_IN]


def test_containerd_drop_in_plans_the_drop_in_and_the_imports_line():
    files = Files({CONFIG: fixture("kubespray-v2.toml")})
    planned = plan(options(config_mode="drop_in"), files)
    assert planned.planned_files == sorted([CONFIG, DROP_IN])
    assert sorted(planned.changes()) == sorted([CONFIG, DROP_IN])
    assert planned.existed == {CONFIG: True, DROP_IN: False}
    assert plan(options(config_mode="drop_in"), applied(files, planned)).changes() == {}


def test_a_rewritten_drop_in_with_the_same_data_changes_but_needs_no_restart():
    files = Files({CONFIG: fixture("kubespray-v2.toml")})
    files = applied(files, plan(options(config_mode="drop_in"), files))
    files[DROP_IN] = files[DROP_IN].replace("# Managed by", "# (edited by hand) Managed by")
    planned = plan(options(config_mode="drop_in"), files)
    assert list(planned.changes()) == [DROP_IN]
    assert not planned.restart_required()


# ------------------------------------------------------------------ apply


class RecordingIO:
    def __init__(self):
        self.calls = []

    def backup(self, path):
        self.calls.append(("backup", path))
        return path + "~"

    def write(self, path, text):
        self.calls.append(("write", path, text))

    def remove(self, path):
        self.calls.append(("remove", path))


def test_apply_backs_up_an_existing_file_before_changing_it(tmp_path):
    existing, new = str(tmp_path / "a.toml"), str(tmp_path / "b.toml")
    (tmp_path / "a.toml").write_text("old\n")
    io = RecordingIO()
    assert apply({existing: None, new: "x = 1\n"}, True, io) == {existing: existing + "~"}
    assert io.calls == [("backup", existing), ("remove", existing), ("write", new, "x = 1\n")]
    io = RecordingIO()
    assert apply({existing: "y = 2\n"}, False, io) == {}
    assert io.calls == [("write", existing, "y = 2\n")]


def test_apply_refuses_a_text_it_could_not_render():
    io = RecordingIO()
    with pytest.raises(RuntimeConfigError, match="tomlkit is required to write it"):
        apply({"/etc/containerd/config.toml": UNRENDERED}, True, io)
    assert io.calls == []
