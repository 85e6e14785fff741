# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Behaviour of the runtime edits (module_utils/_runtime) over real-world configuration
shapes and small documents.

Tests named test_bug_* (any tomlkit) and test_tomlkit_0117_* (Debian's tomlkit 0.11.7) pin
bugs found while writing these tests, each with the smallest input that shows it; the ones
fixed since stay as regression tests.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import copy
import json
import os
import sys

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.containerd import (
    RUNC_TYPE,
    containerd_drop_in,
    containerd_in_place,
)
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.crio import crio_edit
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.docker import docker_edit
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.errors import (
    ConfigParseError,
    ConfigShapeError,
    RuntimeConfigError,
    UnsupportedOption,
)
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.plan import validate_spec
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.toml_text import parse_toml

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "runtime_configs")
NV = "/usr/bin/nvidia-container-runtime"
CONFIG = "/etc/containerd/config.toml"
DROP_IN = "/etc/containerd/conf.d/99-nvidia.toml"
CRIO_DROP_IN = "/etc/crio/crio.conf.d/99-nvidia.conf"
DAEMON = "/etc/docker/daemon.json"
V2 = "io.containerd.grpc.v1.cri"
V3 = "io.containerd.cri.v1.runtime"


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def spec(state="present", name="nvidia", path=NV, default=None, cdi=None):
    return {
        "state": state,
        "runtime_name": name,
        "runtime_path": path,
        "set_as_default": default,
        "enable_cdi": cdi,
    }


def in_place(text, default_version=2, **kwargs):
    return containerd_in_place(text, spec(**kwargs), CONFIG, default_version)


def drop_in(main_text, drop_text="", **kwargs):
    return containerd_drop_in(
        main_text, drop_text, spec(**kwargs), main_source=CONFIG, drop_in_source=DROP_IN, drop_in_path=DROP_IN
    )


def crio(text, **kwargs):
    return crio_edit(text, spec(**kwargs), CRIO_DROP_IN)


def docker(text, **kwargs):
    return docker_edit(text, spec(**kwargs), DAEMON)


def toml(text):
    return parse_toml(text, "test").unwrap()


def runtimes_of(data, cri):
    return data["plugins"][cri]["containerd"]["runtimes"]


def without(data, keys):
    """A copy of data with the item at keys removed."""
    data = copy.deepcopy(data)
    node = data
    for key in keys[:-1]:
        node = node[key]
    del node[keys[-1]]
    return data


def assert_lines_kept(original, new):
    """Every non-blank line of original is in new, unchanged and in the same order."""
    new_lines = iter(new.splitlines())
    for line in original.splitlines():
        if line.strip():
            assert any(candidate == line for candidate in new_lines), "line lost or moved: %r" % line


def runc_entry(systemd=True):
    return {"runtime_type": RUNC_TYPE, "options": {"SystemdCgroup": systemd, "BinaryName": NV}}


SMALL = """version = 2

# runc is what the kubelet gets unless a RuntimeClass says otherwise
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true # systemd cgroups
"""

V3_DEFAULT_RUNC = {
    "runtime_type": "io.containerd.runc.v2",
    "runtime_path": "",
    "pod_annotations": [],
    "container_annotations": [],
    "privileged_without_host_devices": False,
    "privileged_without_host_devices_all_devices_allowed": False,
    "base_runtime_spec": "",
    "cni_conf_dir": "",
    "cni_max_conf_num": 0,
    "snapshotter": "",
    "sandboxer": "podsandbox",
    "io_type": "",
    "options": {
        "BinaryName": NV,
        "CriuImagePath": "",
        "CriuWorkPath": "",
        "IoGid": 0,
        "IoUid": 0,
        "NoNewKeyring": False,
        "Root": "",
        "ShimCgroup": "",
        "SystemdCgroup": False,
    },
}

CONTAINERD_FIXTURES = [
    ("k3s-v2.toml", 2, V2, runc_entry()),
    ("eks-v2.toml", 2, V2, runc_entry()),
    ("containerd2-default-v3.toml", 3, V3, V3_DEFAULT_RUNC),
    (
        "v1-legacy.toml",
        1,
        "cri",
        {"runtime_type": "io.containerd.runc.v1", "options": {"SystemdCgroup": True, "BinaryName": NV}},
    ),
]
ALL_CONTAINERD = [case[0] for case in CONTAINERD_FIXTURES] + ["kubespray-v2.toml"]

# ------------------------------------------------------------------ containerd, in place


@pytest.mark.parametrize("name, version, cri, entry", CONTAINERD_FIXTURES)
def test_present_adds_the_runtime_from_runc(name, version, cri, entry):
    text = fixture(name)
    new_text, before, after, got_version = in_place(text)
    assert got_version == version
    assert before == toml(text)
    assert toml(new_text) == after
    assert runtimes_of(after, cri)["nvidia"] == entry
    assert without(after, ["plugins", cri, "containerd", "runtimes", "nvidia"]) == before
    assert_lines_kept(text, new_text)


def test_present_on_kubespray_keeps_everything_else():
    text = fixture("kubespray-v2.toml")
    new_text, before, after, version = in_place(text)
    assert version == 2
    entry = runtimes_of(after, V2)["nvidia"]
    assert entry["runtime_type"] == "io.containerd.runc.v2"
    assert entry["base_runtime_spec"] == "/etc/containerd/cri-base.json"
    assert entry["options"]["systemdCgroup"] is True
    assert entry["options"]["BinaryName"] == NV
    assert after["plugins"][V2]["containerd"]["default_runtime_name"] == "runc"
    assert without(after, ["plugins", V2, "containerd", "runtimes", "nvidia"]) == before
    assert_lines_kept(text, new_text)


def test_bug_kubespray_binaryname_keeps_runc_as_the_nvidia_binary():
    """Kubespray writes runc's options in lowerCamelCase (binaryName = "/usr/local/bin/runc").
    Copying them leaves binaryName next to BinaryName in the nvidia runtime; containerd matches
    option names case-insensitively, so the nvidia runtime can end up running plain runc
    (NVIDIA/gpu-operator#1374, kubernetes-sigs/kubespray#12187). Only one spelling may remain."""
    after = in_place(fixture("kubespray-v2.toml"))[2]
    options = runtimes_of(after, V2)["nvidia"]["options"]
    assert {key: value for key, value in options.items() if key.lower() == "binaryname"} == {"BinaryName": NV}


def test_present_exact_text():
    new_text = in_place(SMALL)[0]
    assert new_text == SMALL + (
        "\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        'runtime_type = "io.containerd.runc.v2"\n'
        "\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        "SystemdCgroup = true\n"
        'BinaryName = "/usr/bin/nvidia-container-runtime"\n'
    )


@pytest.mark.parametrize(
    "header, version, cri",
    [("", 1, "cri"), ("version = 1\n", 1, "cri"), ("version = 2\n", 2, V2), ("version = 3\n", 3, V3)],
)
def test_version_picks_the_cri_plugin(header, version, cri):
    text = header + 'root = "/var/lib/containerd"\n'
    new_text, before, after, got_version = in_place(text)
    assert got_version == version
    expected = dict(before, plugins={cri: {"containerd": {"runtimes": {"nvidia": runc_entry()}}}})
    del expected["plugins"][cri]["containerd"]["runtimes"]["nvidia"]["options"]["SystemdCgroup"]
    assert after == expected
    assert toml(new_text) == expected


def test_version_line_is_not_added_to_a_version_1_file():
    after = in_place('root = "/var/lib/containerd"\n')[2]
    assert "version" not in after


@pytest.mark.parametrize("text", ["", "\n", "# written by cloud-init\n"])
@pytest.mark.parametrize("default_version, cri", [(1, "cri"), (2, V2), (3, V3)])
def test_empty_file_gets_the_default_version(text, default_version, cri):
    new_text, before, after, version = in_place(text, default_version=default_version)
    assert before == {}
    assert version == default_version
    expected = {
        "plugins": {
            cri: {
                "containerd": {
                    "runtimes": {"nvidia": {"runtime_type": RUNC_TYPE, "options": {"BinaryName": NV}}}
                }
            }
        }
    }
    if default_version != 1:
        expected["version"] = default_version
    assert after == expected
    assert toml(new_text) == expected
    assert new_text.startswith(text.strip())


def test_empty_file_exact_text():
    assert in_place("")[0] == (
        "version = 2\n"
        "\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        'runtime_type = "io.containerd.runc.v2"\n'
        "\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        'BinaryName = "/usr/bin/nvidia-container-runtime"\n'
    )


@pytest.mark.parametrize("text", ["", "\n", "# nothing here\n"])
def test_absent_on_an_empty_file_writes_nothing(text):
    new_text, before, after, version = in_place(text, state="absent")
    assert new_text == text
    assert after == before == {}
    assert version == 2


def default_doc(initial):
    lines = ["version = 2", '[plugins."io.containerd.grpc.v1.cri".containerd]']
    if initial is not None:
        lines.append('default_runtime_name = "%s" # chosen by the platform team' % initial)
    lines += [
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
        'runtime_type = "io.containerd.runc.v2"',
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]',
        "SystemdCgroup = true",
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]',
        'runtime_type = "io.containerd.runc.v2"',
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun.options]',
        'BinaryName = "/usr/bin/crun"',
    ]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "initial, set_as_default, final",
    [
        (None, None, None),
        (None, True, "nvidia"),
        (None, False, None),
        ("runc", None, "runc"),
        ("runc", True, "nvidia"),
        ("runc", False, "runc"),
        ("nvidia", None, "nvidia"),
        ("nvidia", True, "nvidia"),
        ("nvidia", False, "runc"),
        ("crun", None, "crun"),
        ("crun", False, "crun"),
        ("crun", True, "nvidia"),
    ],
)
def test_default_runtime_name(initial, set_as_default, final):
    new_text, _before, after, _version = in_place(default_doc(initial), default=set_as_default)
    assert after["plugins"][V2]["containerd"].get("default_runtime_name") == final
    if initial is not None:
        assert "# chosen by the platform team" in new_text
    assert in_place(new_text, default=set_as_default)[0] == new_text


def test_new_runtime_starts_from_the_current_default_runtime():
    """Like nvidia-ctk: the entry is a copy of the runtime containerd uses now, binary swapped."""
    after = in_place(default_doc("crun"))[2]
    assert runtimes_of(after, V2)["nvidia"] == {"runtime_type": RUNC_TYPE, "options": {"BinaryName": NV}}
    after = in_place(default_doc("runc"))[2]
    assert runtimes_of(after, V2)["nvidia"] == runc_entry()


def test_existing_runtime_entry_is_updated_not_replaced():
    text = (
        "version = 2\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        "privileged_without_host_devices = true # keep me\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        'BinaryName = "/usr/local/nvidia/toolkit/nvidia-container-runtime"\n'
        'Root = "/run/nvidia-runc"\n'
    )
    new_text, _before, after, _version = in_place(text)
    assert runtimes_of(after, V2)["nvidia"] == {
        "privileged_without_host_devices": True,
        "runtime_type": RUNC_TYPE,
        "options": {"BinaryName": NV, "Root": "/run/nvidia-runc"},
    }
    assert "# keep me" in new_text


@pytest.mark.parametrize("version, cri", [(2, V2), (3, V3)])
@pytest.mark.parametrize(
    "initial, enable_cdi, final",
    [
        (None, True, True),
        (None, False, False),
        (False, True, True),
        (True, False, False),
        (True, None, True),
        (False, None, False),
        (None, None, None),
    ],
)
def test_enable_cdi(version, cri, initial, enable_cdi, final):
    text = "version = %d\n[plugins.%s]\n" % (version, '"%s"' % cri)
    if initial is not None:
        text += "enable_cdi = %s # CDI\n" % ("true" if initial else "false")
    text += 'sandbox_image = "registry.k8s.io/pause:3.10"\n'
    new_text, _before, after, _got_version = in_place(text, cdi=enable_cdi)
    assert after["plugins"][cri].get("enable_cdi") == final
    assert after["plugins"][cri]["sandbox_image"] == "registry.k8s.io/pause:3.10"
    if initial is not None:
        assert "# CDI" in new_text
    assert in_place(new_text, cdi=enable_cdi)[0] == new_text


@pytest.mark.parametrize("enable_cdi", [True, False])
@pytest.mark.parametrize("name", ["v1-legacy.toml", None])
def test_enable_cdi_on_version_1_is_refused(enable_cdi, name):
    text = fixture(name) if name else 'root = "/var/lib/containerd"\n'
    with pytest.raises(UnsupportedOption) as caught:
        in_place(text, cdi=enable_cdi)
    message = str(caught.value)
    assert message.startswith(CONFIG + ": enable_cdi needs containerd config version 2 or 3")
    assert "version 1" in message


def test_enable_cdi_is_ignored_by_absent_on_version_1():
    text = fixture("v1-legacy.toml")
    assert in_place(text, state="absent", cdi=True)[0] == text


def test_absent_removes_the_runtime_and_gives_back_the_default():
    text = fixture("k3s-v2.toml")  # no default_runtime_name: containerd's default, runc
    configured = in_place(text, default=True, cdi=True)[0]
    assert toml(configured)["plugins"][V2]["containerd"]["default_runtime_name"] == "nvidia"
    assert 'default_runtime_name = "nvidia" # gpuops.k8s nvidia_runtime: added\n' in configured
    new_text, _before, after, _version = in_place(configured, state="absent")
    assert "nvidia" not in runtimes_of(after, V2)
    assert "default_runtime_name" not in after["plugins"][V2]["containerd"]
    # enable_cdi belongs to the CRI plugin, not to the runtime entry: absent leaves it
    assert after["plugins"][V2]["enable_cdi"] is True
    expected = toml(text)
    expected["plugins"][V2]["enable_cdi"] = True
    assert after == expected
    assert_lines_kept(text, new_text)


def test_absent_without_a_note_resets_a_default_naming_the_runtime_to_runc():
    # A default set by hand, or by a version that left no note: what was there is unknown.
    configured = in_place(fixture("k3s-v2.toml"), default=True)[0].replace(
        " # gpuops.k8s nvidia_runtime: added", ""
    )
    after = in_place(configured, state="absent")[2]
    assert after["plugins"][V2]["containerd"]["default_runtime_name"] == "runc"


@pytest.mark.parametrize("name", ["containerd2-default-v3.toml", "eks-v2.toml"])
def test_absent_gives_back_the_default_as_it_was_written(name):
    """default_runtime_name = 'runc' in single quotes (containerd 2's own default file) comes
    back in single quotes."""
    text = fixture(name)
    assert in_place(in_place(text, default=True)[0], state="absent")[0] == text
    # set_as_default=false gives the default back the same way; the runtime stays
    assert in_place(in_place(text, default=True)[0], default=False)[0] == in_place(text)[0]


# Where a new runtime block went between two tables written without a blank line, absent
# leaves one blank line there: the text cannot tell an inserted blank line from the user's.
ONE_BLANK_LINE_LEFT = {"kubespray-v2.toml", "v1-legacy.toml"}


@pytest.mark.parametrize("default", [None, True])
@pytest.mark.parametrize("name", ALL_CONTAINERD)
def test_absent_after_present_gives_back_the_text(name, default):
    text = fixture(name)
    main, drop = drop_in(text, default=default)[:2]
    assert drop_in(main, drop, state="absent")[0] == text
    back = in_place(in_place(text, default=default)[0], state="absent")[0]
    if name in ONE_BLANK_LINE_LEFT:
        assert (
            back.replace("\n\n", "\n") == text.replace("\n\n", "\n")
            and back.count("\n") == text.count("\n") + 1
        )
    else:
        assert back == text


def test_the_imports_line_nvidia_runtime_added_is_noted_and_goes_with_absent():
    text = fixture("kubespray-v2.toml")
    main = drop_in(text)[0]
    assert 'imports = ["%s"] # gpuops.k8s nvidia_runtime: added\n' % DROP_IN in main
    assert drop_in(drop_in(main)[0])[0] == main  # a second run: one note, nothing changes


def test_notes_do_not_pile_up_and_go_when_the_value_comes_back():
    text = fixture("eks-v2.toml")  # default_runtime_name = "runc"
    noted = in_place(text, default=True)[0]
    assert noted.count('# gpuops.k8s nvidia_runtime: was "runc"') == 1
    assert in_place(noted, default=True)[0] == noted
    back = in_place(noted, default=False)[0]
    assert "gpuops.k8s nvidia_runtime" not in back
    assert in_place(back, default=True)[0] == noted


def prune_empty(data):
    """data without empty tables (containerd and CRI-O read an empty table as no table)."""
    if not isinstance(data, dict):
        return data
    pruned = {key: prune_empty(value) for key, value in data.items()}
    return {key: value for key, value in pruned.items() if value != {}}


@pytest.mark.parametrize(
    "text",
    [
        "",
        'version = 2\n[grpc]\naddress = "/run/containerd/containerd.sock" # the default\n',
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "registry.k8s.io/pause:3.10"\n',
        'version = 3\n[plugins."io.containerd.cri.v1.runtime".containerd]\ndefault_runtime_name = "runc"\n',
    ],
)
def test_bug_absent_undoes_present_when_no_other_runtime_is_declared(text):
    """state=absent cannot undo the module's own present when the new entry was the only
    table under implicit (header-less) parents: tomlkit drops the emptied parents on render,
    the data then lacks the empty tables the plain-data edit kept, and the self-check refuses
    (RuntimeConfigError "the structural edit would not give the intended configuration").
    Minimal: present on "" then absent. Empty tables mean nothing to containerd."""
    configured = in_place(text)[0]
    new_text, _before, after, version = in_place(configured, state="absent")
    expected = toml(text)
    if not text:
        expected["version"] = version
    assert prune_empty(after) == prune_empty(expected)
    assert prune_empty(toml(new_text)) == prune_empty(expected)


def test_bug_drop_in_absent_with_an_in_place_entry_as_the_only_runtime():
    """Same as above in drop-in mode: the main file's nvidia entry (from an earlier in-place
    run) is the only runtime, so removing it is refused. The imports line has no note (not
    added by nvidia_runtime): the user's imports = [] stays."""
    text = (
        'version = 2\nimports = ["%s"]\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        'runtime_type = "io.containerd.runc.v2"\n'
    ) % DROP_IN
    new_main, new_drop = drop_in(text, "", state="absent")[:2]
    assert new_drop is None
    assert prune_empty(toml(new_main)) == {"version": 2, "imports": []}


def test_absent_after_present_restores_the_data():
    for name in ALL_CONTAINERD:
        text = fixture(name)
        configured = in_place(text)[0]
        assert in_place(configured, state="absent")[2] == toml(text), name


@pytest.mark.parametrize("name", ALL_CONTAINERD)
def test_absent_without_the_runtime_keeps_the_bytes(name):
    text = fixture(name)
    new_text, before, after, _version = in_place(text, state="absent")
    assert new_text == text
    assert after == before


def test_absent_keeps_other_runtimes_and_a_default_naming_them():
    text = default_doc("crun").replace(
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]',
        (
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
            'runtime_type = "io.containerd.runc.v2"\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]'
        ),
    )
    after = in_place(text, state="absent")[2]
    assert sorted(runtimes_of(after, V2)) == ["crun", "runc"]
    assert after["plugins"][V2]["containerd"]["default_runtime_name"] == "crun"


@pytest.mark.parametrize("name", ALL_CONTAINERD)
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"default": True}, {"default": False}, {"state": "absent"}, {"name": "nvidia-cdi", "default": True}],
)
def test_second_run_returns_identical_text(name, kwargs):
    first = in_place(fixture(name), **kwargs)[0]
    new_text, before, after, _version = in_place(first, **kwargs)
    assert new_text == first
    assert after == before


@pytest.mark.parametrize(
    "text, line, column",
    [
        ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\nsandbox_image = "pause\n', 3, 22),
        ("version = 2\nversion = 3\n", 2, 0),
        ("version = 2\n[grpc]\n[grpc]\n", 3, 0),
        ("version = 2\n[plugins\n", 2, 8),
    ],
)
def test_unparsable_toml_names_the_file_and_line(text, line, column):
    with pytest.raises(ConfigParseError) as caught:
        in_place(text)
    message = str(caught.value)
    assert message.startswith("%s line %d, column %d: " % (CONFIG, line, column))
    assert message.endswith("; the file is left untouched")


SHAPES = [
    ('version = 2\nplugins = "x"\n', "plugins", "string"),
    (
        'version = 2\n[plugins]\n"io.containerd.grpc.v1.cri" = 5\n',
        'plugins."io.containerd.grpc.v1.cri"',
        "integer",
    ),
    (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncontainerd = []\n',
        'plugins."io.containerd.grpc.v1.cri".containerd',
        "array",
    ),
    (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\nruntimes = "runc"\n',
        'plugins."io.containerd.grpc.v1.cri".containerd.runtimes',
        "string",
    ),
    (
        "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\nruntimes = true\n",
        'plugins."io.containerd.cri.v1.runtime".containerd.runtimes',
        "boolean",
    ),
    ("[plugins.cri.containerd]\nruntimes = 1.5\n", "plugins.cri.containerd.runtimes", "float"),
]


@pytest.mark.parametrize("state", ["present", "absent"])
@pytest.mark.parametrize("text, path, kind", SHAPES)
def test_wrong_table_type_names_the_key_path(text, path, kind, state):
    with pytest.raises(ConfigShapeError) as caught:
        in_place(text, state=state)
    assert str(caught.value) == "%s: %s is a %s; expected a table, so the file is left untouched" % (
        CONFIG,
        path,
        kind,
    )


@pytest.mark.parametrize(
    "text, path, kind",
    [
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n'
            'runc = {}\nnvidia = "yes"\n',
            'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia',
            "string",
        ),
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\noptions = ["x"]\n',
            'plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options',
            "array",
        ),
    ],
)
def test_wrong_runtime_entry_type_names_the_key_path(text, path, kind):
    with pytest.raises(ConfigShapeError) as caught:
        in_place(text)
    assert str(caught.value) == "%s: %s is a %s; expected a table, so the file is left untouched" % (
        CONFIG,
        path,
        kind,
    )
    # absent removes whatever the entry is
    assert "nvidia" not in toml(in_place(text, state="absent")[0])["plugins"][V2]["containerd"]["runtimes"]


@pytest.mark.parametrize("value", ["4", "0", '"2"', "-1"])
def test_unknown_version_is_a_shape_error(value):
    with pytest.raises(ConfigShapeError) as caught:
        in_place("version = %s\n" % value)
    assert str(caught.value).startswith("%s: version = " % CONFIG)
    assert str(caught.value).endswith("; containerd config versions are 1, 2 and 3")


@pytest.mark.parametrize(
    "text",
    [
        "version = [2]\n",
        "[version]\nnumber = 2\n",
        "version = true\n",
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\ndefault_runtime_name = ["runc"]\n',
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'default_runtime_name = { name = "runc" }\n',
    ],
)
def test_bug_wrong_typed_version_or_default_is_a_shape_error(text):
    """An array or table version, or an array/table default_runtime_name, raises TypeError
    (unhashable) from `version not in CRI_PLUGIN` / `runtimes.get(default_name)`; `version = true`
    passes as 1 (True == 1) and gets a version 1 edit. Each must be a ConfigShapeError."""
    with pytest.raises(ConfigShapeError):
        in_place(text)


def test_bug_inline_runtime_entry_without_options():
    """An existing entry written as an inline table without options: the code adds a
    super-table inside the inline table. tomlkit 0.15 raises ValueError ("Inline tables cannot
    contain a table"), 0.11.7 renders invalid TOML (refused as unparsable). Expected: the
    options land in the inline table."""
    text = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n'
        'nvidia = { runtime_type = "io.containerd.runc.v2" }\n'
    )
    after = in_place(text)[2]
    assert runtimes_of(after, V2)["nvidia"] == {"runtime_type": RUNC_TYPE, "options": {"BinaryName": NV}}


def test_inline_runtime_entry_with_options_is_edited_in_place():
    text = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n'
        'nvidia = { runtime_type = "io.containerd.runc.v2", options = { BinaryName = "/old" } }\n'
    )
    new_text = in_place(text)[0]
    assert new_text == text.replace("/old", NV)


@pytest.mark.parametrize(
    "text",
    [
        'version = 2\n[plugins]\n"io.containerd.grpc.v1.cri" = { sandbox_image = "pause:3.10" }\n',
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\ncontainerd = { snapshotter = "overlayfs" }\n',
    ],
)
def test_bug_inline_cri_tables_are_edited(text):
    """A CRI or containerd table written inline: tomlkit 0.15 raises ValueError out of the
    module (not a RuntimeConfigError), 0.11.7 writes invalid TOML and refuses it."""
    after = in_place(text)[2]
    assert runtimes_of(after, V2)["nvidia"] == {"runtime_type": RUNC_TYPE, "options": {"BinaryName": NV}}


def test_bug_parser_exceptions_are_typed():
    """Valid TOML that tomlkit 0.15 cannot read raises KeyAlreadyPresent, which is not a
    tomlkit ParseError, so parse_toml lets it out of the module untyped."""
    text = (
        "[plugins]\n"
        "[plugins.cri.containerd.runtimes.runc]\n"
        "[plugins.cri.containerd.runtimes]\n"
        "[plugins.cri.containerd]\n"
        "[plugins.cri.containerd.runtimes.nvidia.options]\n"
    )
    with contextlib.suppress(RuntimeConfigError):
        in_place(text)


# ------------------------------------------------------------------ containerd, drop-in


def test_drop_in_present_on_kubespray():
    text = fixture("kubespray-v2.toml")
    main_text, drop_text, befores, afters, version = drop_in(text)
    assert version == 2
    main = toml(main_text)
    assert main["imports"] == [DROP_IN]
    assert without(main, ["imports"]) == toml(text)
    assert_lines_kept(text, main_text)
    drop = toml(drop_text)
    cri = copy.deepcopy(toml(text)["plugins"][V2])
    cri["containerd"]["runtimes"]["nvidia"] = runtimes_of(in_place(text)[2], V2)["nvidia"]
    assert drop == {"version": 2, "plugins": {V2: cri}}
    assert drop["plugins"][V2]["sandbox_image"] == "registry.k8s.io/pause:3.9"
    assert drop["plugins"][V2]["registry"] == {"config_path": "/etc/containerd/certs.d"}
    assert drop_text.startswith("# Managed by gpuops.k8s nvidia_runtime")
    assert befores == (toml(text), {})
    assert afters == (main, drop)


@pytest.mark.parametrize(
    "name, version, cri",
    [("k3s-v2.toml", 2, V2), ("eks-v2.toml", 2, V2), ("containerd2-default-v3.toml", 3, V3)],
)
def test_drop_in_holds_the_whole_cri_table(name, version, cri):
    text = fixture(name)
    main_text, drop_text, _befores, _afters, got_version = drop_in(text, default=True, cdi=True)
    assert got_version == version
    main = toml(main_text)
    assert main["imports"] == [DROP_IN]
    original = toml(text)
    assert without(main, ["imports"]) == (
        without(original, ["imports"]) if "imports" in original else original
    )
    expected = copy.deepcopy(toml(text)["plugins"][cri])
    expected["containerd"]["runtimes"]["nvidia"] = runtimes_of(in_place(text)[2], cri)["nvidia"]
    expected["containerd"]["default_runtime_name"] = "nvidia"
    expected["enable_cdi"] = True
    assert toml(drop_text) == {"version": version, "plugins": {cri: expected}}
    again = drop_in(main_text, drop_text, default=True, cdi=True)
    assert again[0] == main_text
    assert again[1] == drop_text


def test_drop_in_moves_an_in_place_entry_out_of_the_main_file():
    text = fixture("k3s-v2.toml")
    configured = in_place(text, default=True)[0]
    main_text, drop_text = drop_in(configured)[:2]
    main = toml(main_text)
    assert "nvidia" not in runtimes_of(main, V2)
    assert "runc" in runtimes_of(main, V2)
    # the main file's default_runtime_name is the user's: kept, and copied
    assert main["plugins"][V2]["containerd"]["default_runtime_name"] == "nvidia"
    drop = toml(drop_text)
    assert runtimes_of(drop, V2)["nvidia"] == runc_entry()
    assert drop["plugins"][V2]["containerd"]["default_runtime_name"] == "nvidia"


def test_drop_in_appends_to_existing_imports():
    text = 'version = 2\nimports = ["/etc/containerd/certs.toml"] # site settings\n'
    main_text = drop_in(text)[0]
    assert toml(main_text)["imports"] == ["/etc/containerd/certs.toml", DROP_IN]
    assert "# site settings" in main_text
    fixture_main = drop_in(fixture("containerd2-default-v3.toml"))[0]
    assert toml(fixture_main)["imports"] == [DROP_IN]


def test_drop_in_on_an_empty_main_file():
    main_text, drop_text, _befores, _afters, _version = drop_in("")
    assert toml(main_text) == {"imports": [DROP_IN], "version": 2}
    assert toml(drop_text) == {
        "version": 2,
        "plugins": {
            V2: {
                "containerd": {
                    "runtimes": {"nvidia": {"runtime_type": RUNC_TYPE, "options": {"BinaryName": NV}}}
                }
            }
        },
    }


def test_drop_in_absent_removes_the_import_and_the_file():
    text = fixture("kubespray-v2.toml")
    main_text, drop_text = drop_in(text)[:2]
    new_main, new_drop, _befores, afters, _version = drop_in(main_text, drop_text, state="absent")
    assert new_drop is None
    assert toml(new_main) == toml(text)
    assert afters == (toml(text), {})
    assert_lines_kept(text, new_main)


def test_drop_in_absent_keeps_other_imports_and_resets_the_default():
    text = (
        "version = 2\n"
        'imports = ["/etc/containerd/certs.toml", "%s"]\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'default_runtime_name = "nvidia"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        'runtime_type = "io.containerd.runc.v2"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        'runtime_type = "io.containerd.runc.v2"\n'
    ) % DROP_IN
    new_main, new_drop = drop_in(text, "", state="absent")[:2]
    assert new_drop is None
    assert toml(new_main) == {
        "version": 2,
        "imports": ["/etc/containerd/certs.toml"],
        "plugins": {
            V2: {
                "containerd": {
                    "default_runtime_name": "runc",
                    "runtimes": {"runc": {"runtime_type": RUNC_TYPE}},
                }
            }
        },
    }


def test_drop_in_absent_without_an_import_keeps_the_bytes():
    text = fixture("k3s-v2.toml")
    assert drop_in(text, state="absent")[0] == text


def test_drop_in_unparsable_drop_in_is_reported():
    with pytest.raises(ConfigParseError) as caught:
        drop_in(fixture("k3s-v2.toml"), "version = \n")
    assert str(caught.value).startswith(DROP_IN + " line 1, column ")


def test_drop_in_imports_of_the_wrong_type():
    with pytest.raises(ConfigShapeError) as caught:
        drop_in('version = 2\nimports = "/etc/containerd/other.toml"\n')
    assert str(caught.value) == CONFIG + ": imports is a string; expected an array"


# ------------------------------------------------------------------ CRI-O

CRIO_NVIDIA = {
    "runtime_type": "oci",
    "runtime_root": "/run/crun",
    "monitor_path": "/usr/libexec/crio/conmon",
    "allowed_annotations": ["io.containers.trace-syscall"],
    "runtime_path": NV,
}


def test_crio_present_copies_the_default_runtime():
    text = fixture("crio.conf")
    new_text, before, after = crio(text)
    runtime = after["crio"]["runtime"]
    assert runtime["runtimes"]["nvidia"] == CRIO_NVIDIA
    assert runtime["default_runtime"] == "crun"
    assert without(after, ["crio", "runtime", "runtimes", "nvidia"]) == before == toml(text)
    assert_lines_kept(text, new_text)
    assert crio(new_text)[0] == new_text


@pytest.mark.parametrize(
    "initial, set_as_default, final",
    [
        ("crun", True, "nvidia"),
        ("crun", False, "crun"),
        ("crun", None, "crun"),
        ("nvidia", False, "runc"),
        ("nvidia", None, "nvidia"),
    ],
)
def test_crio_default_runtime(initial, set_as_default, final):
    text = fixture("crio.conf").replace('default_runtime = "crun"', 'default_runtime = "%s"' % initial)
    new_text, _before, after = crio(text, default=set_as_default)
    assert after["crio"]["runtime"]["default_runtime"] == final
    assert "# crun is the default since CRI-O 1.31" in new_text
    assert crio(new_text, default=set_as_default)[0] == new_text


def test_crio_absent_removes_the_runtime_and_gives_back_the_default():
    text = fixture("crio.conf")
    configured = crio(text, default=True)[0]
    note = ' # gpuops.k8s nvidia_runtime: was "crun"'
    assert 'default_runtime = "nvidia" # crun is the default since CRI-O 1.31' + note in configured
    new_text, _before, after = crio(configured, state="absent")
    assert "nvidia" not in after["crio"]["runtime"]["runtimes"]
    assert after["crio"]["runtime"]["default_runtime"] == "crun"
    assert after == toml(text)
    assert new_text == text
    assert crio(text, state="absent")[0] == text


def test_crio_empty_drop_in():
    new_text, _before, after = crio("")
    assert new_text == '[crio.runtime.runtimes.nvidia]\nruntime_type = "oci"\nruntime_path = "%s"\n' % NV
    assert after == {
        "crio": {"runtime": {"runtimes": {"nvidia": {"runtime_type": "oci", "runtime_path": NV}}}}
    }
    assert crio("", state="absent")[0] == ""


def test_bug_crio_absent_on_its_own_drop_in():
    """The CRI-O drop-in holds nothing but the runtime, so state=absent on it (config_mode
    drop_in) is always refused: same cause as the containerd case above."""
    configured = crio("")[0]
    _new_text, _before, after = crio(configured, state="absent")
    assert prune_empty(after) == {}


def test_crio_existing_entry_gets_the_path():
    text = (
        "[crio.runtime.runtimes.nvidia]\n"
        'runtime_path = "/usr/local/bin/old" # from the old role\n'
        'monitor_env = ["A=1"]\n'
    )
    new_text, _before, after = crio(text)
    assert after["crio"]["runtime"]["runtimes"]["nvidia"] == {
        "runtime_path": NV,
        "monitor_env": ["A=1"],
        "runtime_type": "oci",
    }
    assert "# from the old role" in new_text


@pytest.mark.parametrize("state", ["present", "absent"])
@pytest.mark.parametrize("enable_cdi", [True, False])
def test_crio_enable_cdi_is_refused(state, enable_cdi):
    with pytest.raises(UnsupportedOption) as caught:
        crio(fixture("crio.conf"), state=state, cdi=enable_cdi)
    assert "enable_cdi does not apply to CRI-O" in str(caught.value)


@pytest.mark.parametrize(
    "text, path, kind",
    [
        ('crio = "x"\n', "crio", "string"),
        ("[crio]\nruntime = 1\n", "crio.runtime", "integer"),
        ("[crio.runtime]\nruntimes = []\n", "crio.runtime.runtimes", "array"),
    ],
)
def test_crio_wrong_table_type_names_the_key_path(text, path, kind):
    for state in ("present", "absent"):
        with pytest.raises(ConfigShapeError) as caught:
            crio(text, state=state)
        assert str(caught.value) == "%s: %s is a %s; expected a table, so the file is left untouched" % (
            CRIO_DROP_IN,
            path,
            kind,
        )


def test_bug_crio_wrong_typed_default_runtime_is_a_shape_error():
    """default_runtime = [] raises TypeError (unhashable) from runtimes.get(default_name)."""
    with pytest.raises(ConfigShapeError):
        crio('[crio.runtime]\ndefault_runtime = ["crun"]\n')


# ------------------------------------------------------------------ Docker


def test_docker_present_keeps_order_indent_and_other_runtimes():
    text = fixture("daemon.json")
    new_text, before, after = docker(text, default=True)
    assert before == json.loads(text)
    expected = json.loads(text)
    expected["runtimes"]["nvidia"] = {"path": NV}
    expected["default-runtime"] = "nvidia"
    assert after == expected
    assert list(after) == [*list(before), "default-runtime"]
    assert list(after["runtimes"]) == ["other", "nvidia"]
    assert after["runtimes"]["other"] == {"path": "/usr/local/bin/other-runtime", "runtimeArgs": ["--debug"]}
    assert new_text == json.dumps(expected, indent=4) + "\n"
    assert docker(new_text, default=True)[0] == new_text


@pytest.mark.parametrize(
    "indent, expected",
    [(4, 4), ("\t", "\t"), (2, 2), (None, 2), (3, 3)],
)
def test_docker_indent_is_detected(indent, expected):
    data = {"log-driver": "journald", "exec-opts": ["native.cgroupdriver=systemd"]}
    new_text = docker(json.dumps(data, indent=indent))[0]
    assert new_text == json.dumps(dict(data, runtimes={"nvidia": {"path": NV}}), indent=expected) + "\n"


def test_docker_existing_entry_keeps_the_user_keys():
    text = (
        '{\n\t"runtimes": {\n\t\t"nvidia": {\n'
        '\t\t\t"runtimeArgs": ["--log-level=debug"],\n'
        '\t\t\t"path": "nvidia-container-runtime"\n'
        "\t\t}\n\t}\n}\n"
    )
    new_text, _before, after = docker(text)
    assert after == {"runtimes": {"nvidia": {"runtimeArgs": ["--log-level=debug"], "path": NV}}}
    assert list(after["runtimes"]["nvidia"]) == ["runtimeArgs", "path"]
    assert new_text == json.dumps(after, indent="\t") + "\n"


def test_docker_entry_of_the_wrong_type_is_replaced():
    after = docker('{"runtimes": {"nvidia": "nvidia-container-runtime"}}')[2]
    assert after == {"runtimes": {"nvidia": {"path": NV}}}


@pytest.mark.parametrize(
    "initial, set_as_default, final",
    [
        (None, None, None),
        (None, True, "nvidia"),
        (None, False, None),
        ("runc", True, "nvidia"),
        ("runc", False, "runc"),
        ("nvidia", False, None),
        ("nvidia", None, "nvidia"),
    ],
)
def test_docker_default_runtime(initial, set_as_default, final):
    data = {"log-level": "warn"}
    if initial is not None:
        data["default-runtime"] = initial
    after = docker(json.dumps(data, indent=2), default=set_as_default)[2]
    assert after.get("default-runtime") == final


@pytest.mark.parametrize(
    "features, enable_cdi, expected",
    [
        (None, True, {"cdi": True}),
        (None, False, {"cdi": False}),
        ({"buildkit": True}, True, {"buildkit": True, "cdi": True}),
        ({"cdi": True, "buildkit": False}, False, {"cdi": False, "buildkit": False}),
        ({"cdi": True}, None, {"cdi": True}),
    ],
)
def test_docker_features_cdi(features, enable_cdi, expected):
    data = {"log-level": "warn"}
    if features is not None:
        data["features"] = features
    new_text, _before, after = docker(json.dumps(data, indent=2), cdi=enable_cdi)
    assert after["features"] == expected
    assert list(after["features"]) == list(expected)
    assert docker(new_text, cdi=enable_cdi)[0] == new_text


def test_docker_absent():
    text = fixture("daemon.json")
    configured = docker(text, default=True)[0]
    new_text, _before, after = docker(configured, state="absent")
    assert after == json.loads(text)
    assert new_text == text
    assert docker(text, state="absent")[0] == text


def test_docker_absent_removes_runtimes_when_it_becomes_empty():
    text = json.dumps(
        {"runtimes": {"nvidia": {"path": NV}}, "default-runtime": "nvidia", "debug": True}, indent=2
    )
    new_text, _before, after = docker(text, state="absent")
    assert after == {"debug": True}
    assert new_text == '{\n  "debug": true\n}\n'


def test_docker_empty_file():
    assert docker("")[0] == '{\n  "runtimes": {\n    "nvidia": {\n      "path": "%s"\n    }\n  }\n}\n' % NV
    assert docker("", state="absent")[0] == ""
    assert docker("\n")[2] == {"runtimes": {"nvidia": {"path": NV}}}


@pytest.mark.parametrize(
    "text, line, column",
    [
        # Python 3.13's json names the trailing comma itself, older ones the brace after it.
        ('{\n    "log-driver": "json-file",\n}\n', *((2, 30) if sys.version_info >= (3, 13) else (3, 1))),
        ('{"log-driver": "json-file"', 1, 27),
        ('{\n  "a": 1\n  "b": 2\n}\n', 3, 3),
    ],
)
def test_docker_bad_json_names_line_and_column(text, line, column):
    with pytest.raises(ConfigParseError) as caught:
        docker(text)
    message = str(caught.value)
    assert message.startswith("%s line %d, column %d: " % (DAEMON, line, column))
    assert message.endswith("; the file is left untouched")


@pytest.mark.parametrize(
    "text, message",
    [
        ("[]", "the top level is a array; expected an object"),
        ('"runtimes"', "the top level is a string; expected an object"),
        ('{"runtimes": "nvidia"}', "runtimes is a string; expected an object"),
        ('{"runtimes": ["nvidia"]}', "runtimes is a array; expected an object"),
    ],
)
def test_docker_wrong_types(text, message):
    with pytest.raises(ConfigShapeError) as caught:
        docker(text)
    assert str(caught.value) == "%s: %s" % (DAEMON, message)


def test_docker_features_of_the_wrong_type():
    with pytest.raises(ConfigShapeError) as caught:
        docker('{"features": ["cdi"]}', cdi=True)
    assert str(caught.value) == DAEMON + ": features is a array; expected an object"
    assert docker('{"features": ["cdi"]}')[2] == {"features": ["cdi"], "runtimes": {"nvidia": {"path": NV}}}


def test_bug_docker_null_runtimes_is_not_a_crash():
    """ "runtimes": null makes docker_edit call None.get (AttributeError). A typed
    ConfigShapeError, or treating null as no runtimes, would both do."""
    try:
        after = docker('{"runtimes": null}')[2]
    except ConfigShapeError:
        return
    assert after == {"runtimes": {"nvidia": {"path": NV}}}


# ------------------------------------------------------------------ validate_spec


@pytest.mark.parametrize("name", ["nvidia", "nvidia-cdi", "gpu0", "0", "a" * 63])
def test_validate_spec_accepts_dns_labels(name):
    assert validate_spec(spec(name=name), {"path": CONFIG, "drop_in_path": None, "runtime_path": NV}) is None


@pytest.mark.parametrize(
    "name", ["NVIDIA", "", None, "-nvidia", "nvidia-", "nvidia_cdi", "nvidia.com", "a" * 64, "nvídia"]
)
def test_validate_spec_rejects_runtime_names(name):
    with pytest.raises(UnsupportedOption) as caught:
        validate_spec(spec(name=name), {"path": CONFIG})
    assert str(caught.value).startswith("runtime_name=%r: must be a DNS label" % name)
    assert "RuntimeClass handler" in str(caught.value)


@pytest.mark.parametrize(
    "paths, message",
    [
        (
            {"path": "etc/containerd/config.toml"},
            "path='etc/containerd/config.toml': must be an absolute path",
        ),
        (
            {"path": CONFIG, "drop_in_path": "conf.d/99-nvidia.toml"},
            "drop_in_path='conf.d/99-nvidia.toml': must be an absolute path",
        ),
        (
            {"runtime_path": "nvidia-container-runtime"},
            "runtime_path='nvidia-container-runtime': must be an absolute path",
        ),
        ({"runtime_path": ""}, "runtime_path='': must be an absolute path"),
        (
            {"path": "./daemon.json", "runtime_path": "nvidia"},
            "path='./daemon.json': must be an absolute path",
        ),
    ],
)
def test_validate_spec_rejects_relative_paths(paths, message):
    with pytest.raises(UnsupportedOption) as caught:
        validate_spec(spec(), paths)
    assert str(caught.value) == message
