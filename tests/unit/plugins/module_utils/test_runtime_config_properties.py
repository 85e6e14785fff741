# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Property tests of the runtime edits (module_utils/_runtime): over generated containerd
(v1, v2, v3), CRI-O and Docker
configurations, and the real-world fixtures mutated, the edit keeps every other key, every
comment and the order of the user's tables, is idempotent, is undone by state=absent, and
fails only with typed errors.

Cases a previous attempt found, and what was decided (each has a test_case_* below):
- CRI-O runtimes split by another table ([crio.image] between [crio.runtime.runtimes.*]):
  valid TOML, edited (the new entry goes after the last runtime).
- Drop-in mode over an entry left by an earlier in-place run: the entry moves to the drop-in
  with all its settings; an entry already in the drop-in stays as it is.
- Dotted keys under [plugins] ("io.containerd.grpc.v1.cri".containerd.default_runtime_name):
  valid TOML, edited (the value in its own line, new tables as their own sections).
- A header's comment was copied onto the parent table headers the edit created: new tables
  are now written as text sections, so no comment is copied or moved.
- A nan float anywhere made every edit refuse (nan != nan): data is compared with NaN as one
  value.
- Debian's tomlkit 0.11.7 misreads some valid split-table files: the edit now reads with
  Python's own parser and changes the text itself, so 0.11.7 edits them like newer versions;
  tomlkit is only used inside inline tables and arrays, where a misreading 0.11.7 refuses
  with a typed ConfigParseError naming the file (asserted by edit_or_old_tomlkit_refusal).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import math
import os
import re
from unittest import mock

import pytest
import tomlkit

from ansible_collections.gpuops.k8s.plugins.module_utils._runtime import toml_edit
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.containerd import (
    RUNC_TYPE,
    containerd_drop_in,
    containerd_in_place,
    containerd_version,
)
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.crio import crio_edit
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.docker import docker_edit
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.errors import (
    ConfigParseError,
    RuntimeConfigError,
    UnsupportedOption,
)
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.plan import plan
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.toml_text import toml_path, value_text

try:
    import tomllib
except ImportError:  # Python < 3.11: tomlkit is the reference reader
    tomllib = None

hypothesis = pytest.importorskip("hypothesis")
st = pytest.importorskip("hypothesis.strategies")
given, settings, assume, HealthCheck = (
    hypothesis.given,
    hypothesis.settings,
    hypothesis.assume,
    hypothesis.HealthCheck,
)

NOTE = "# gpuops.k8s nvidia_runtime:"  # the note a default the edit set carries
# The dev line's units explore 500 examples a property. The matrix's older lines re-check
# that the properties hold on their ansible-core and Python, on 100: scripts/ansible-matrix.py
# marks its copies of the tree with MATRIX_MARK (ansible-test passes no variable through).
# RC_EXAMPLES, where pytest runs these directly, wins over both.
MATRIX_MARK = os.path.join(os.path.dirname(__file__), "..", "..", "matrix-line")
EXAMPLES = int(os.environ.get("RC_EXAMPLES", "100" if os.path.exists(MATRIX_MARK) else "500"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
OLD_TOMLKIT = tuple(int(part) for part in tomlkit.__version__.split(".")[:2]) < (0, 12)
FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "runtime_configs")
NV = "/usr/bin/nvidia-container-runtime"
CRI = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def loads(text):
    return tomllib.loads(text) if tomllib is not None else tomlkit.parse(text).unwrap()


def spec(state="present", default=None, cdi=None):
    return {
        "state": state,
        "runtime_name": "nvidia",
        "runtime_path": NV,
        "set_as_default": default,
        "enable_cdi": cdi,
    }


def canon(data):
    """NaN compares equal to NaN here, as it does for the module."""
    if isinstance(data, dict):
        return {key: canon(value) for key, value in data.items()}
    if isinstance(data, list):
        return [canon(value) for value in data]
    if isinstance(data, float) and math.isnan(data):
        return "<nan>"
    return data


def leaves(data, path=()):
    """{key path: value} of every non-table value."""
    out = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(leaves(value, (*path, key)))
        else:
            out[(*path, key)] = canon(value)
    return out


def pruned(data):
    if not isinstance(data, dict):
        return canon(data)
    inner = {key: pruned(value) for key, value in data.items()}
    return {key: value for key, value in inner.items() if value != {}}


def comments(text):
    return [line.strip() for line in text.splitlines() if line.strip().startswith("#")]


def headers(text):
    return [line.strip() for line in text.splitlines() if re.match(r"^\s*\[", line)]


def outside_entry(text):
    """text without the sections of an nvidia runtime entry (header to next header)."""
    kept, inside = [], False
    for line in text.splitlines():
        if re.match(r"^\s*\[", line):
            inside = ".runtimes.nvidia" in line
        if not inside:
            kept.append(line)
    return "\n".join(kept)


def assert_subsequence(items, within, what):
    rest = iter(within)
    for item in items:
        assert any(item == candidate for candidate in rest), "%s lost or moved: %r" % (what, item)


def assert_text_kept(text, new_text):
    """Every comment line kept, in order; the user's table headers kept, in order."""
    assert_subsequence(comments(text), comments(new_text), "comment")
    assert_subsequence(headers(text), headers(new_text), "table header")


def edit_or_old_tomlkit_refusal(call):
    """The edit's result; under Debian's tomlkit 0.11.7 a typed refusal naming its misreading
    (only possible when an inline table or array must change) is the accepted outcome."""
    try:
        return call()
    except ConfigParseError as error:
        if OLD_TOMLKIT and "reads this file differently" in str(error):
            return None
        raise


# ------------------------------------------------------------------ generators

NAMES = st.sampled_from(["alpha", "beta", "gamma", "delta", "x_1", "k-2", "dotted.key", "sp ace"])
SCALARS = st.one_of(
    st.integers(-(2**40), 2**40),
    st.booleans(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=8),
)
VALUES = st.one_of(
    SCALARS, st.lists(st.integers(0, 9), max_size=3), st.dictionaries(NAMES, st.integers(0, 9), max_size=2)
)
comment_ids = iter(range(10**9))


def key_text(key):
    if key.startswith("RAW:"):  # a dotted key, written as it is
        return key[4:]
    return toml_path([key])


@st.composite
def body(draw, keys=None, indent=""):
    """Key lines (some with comments) and comment lines, as text."""
    lines = []
    items = dict(keys or {})
    for key, value in draw(st.dictionaries(NAMES, VALUES, max_size=3)).items():
        items.setdefault(key, value)
    for key, value in items.items():
        if draw(st.booleans()):
            lines.append("%s# c%d before %s\n" % (indent, next(comment_ids), key))
        trailing = " # c%d" % next(comment_ids) if draw(st.booleans()) else ""
        lines.append("%s%s = %s%s\n" % (indent, key_text(key), value_text(value), trailing))
    if draw(st.booleans()):
        lines.append("%s# c%d at the end\n" % (indent, next(comment_ids)))
    return "".join(lines)


def header(path):
    return "[%s]" % toml_path(path)


@st.composite
def containerd_config(draw):  # noqa: PLR0912, PLR0915 - one generator, read top to bottom
    """A containerd config as text, from sections in any order (split tables included)."""
    version = draw(st.sampled_from([None, 1, 2, 3]))
    cri = ("plugins", CRI[version or 1])
    containerd = (*cri, "containerd")
    runtimes = (*containerd, "runtimes")
    sections = []  # (path, keys)
    root = {}
    if version is not None:
        root["version"] = version
    if draw(st.booleans()):
        root["imports"] = draw(
            st.lists(st.sampled_from(["/etc/containerd/a.toml", "/etc/containerd/b.toml"]), unique=True)
        )
    sections.append((("grpc",), {"address": "/run/containerd/containerd.sock"}))
    sections.extend((("user", "t%d" % i),) for i in range(draw(st.integers(0, 2))))
    if draw(st.booleans()):
        sections.append(((*cri, "cni"), {"bin_dir": "/opt/cni/bin"}))
    if draw(st.booleans()):
        sections.append((cri, {"sandbox_image": "pause:3.10"}))
    default = draw(st.sampled_from([None, "runc", "crun", "nvidia"]))
    dotted = draw(st.booleans()) and version != 1
    if dotted:
        # "io.containerd.grpc.v1.cri".containerd.snapshotter = ... under [plugins]
        keys = {"RAW:%s.containerd.snapshotter" % key_text(cri[1]): "overlayfs"}
        if default:
            keys["RAW:%s.containerd.default_runtime_name" % key_text(cri[1])] = default
        sections.append((("plugins",), keys))
    elif default or draw(st.booleans()):
        sections.append(
            (containerd, {"default_runtime_name": default} if default else {"snapshotter": "overlayfs"})
        )
    runc_style = draw(st.sampled_from(["none", "tables", "inline-options", "inline-entry"]))
    systemd = draw(st.booleans())
    if runc_style == "tables":
        sections.append(((*runtimes, "runc"), {"runtime_type": RUNC_TYPE}))
        sections.append(((*runtimes, "runc", "options"), {"SystemdCgroup": systemd}))
    elif runc_style == "inline-options":
        sections.append(
            ((*runtimes, "runc"), {"runtime_type": RUNC_TYPE, "options": {"SystemdCgroup": systemd}})
        )
    elif runc_style == "inline-entry":
        sections.append(
            (runtimes, {"runc": {"runtime_type": RUNC_TYPE, "options": {"SystemdCgroup": systemd}}})
        )
    if draw(st.booleans()) and runc_style != "inline-entry":
        extra = {"runtime_type": RUNC_TYPE, "privileged_without_host_devices": True}
        sections.append(((*runtimes, "nvidia"), extra))
        if draw(st.booleans()):
            sections.append(
                ((*runtimes, "nvidia", "options"), {"BinaryName": "/old/nvidia", "SystemdCgroup": True})
            )
    order = draw(st.permutations(range(len(sections))))
    text = ""
    if draw(st.booleans()):
        text += "# c%d file header\n" % next(comment_ids)
    text += draw(body(root))
    for index in order:
        path, keys = sections[index][0], sections[index][1] if len(sections[index]) > 1 else {}
        if draw(st.booleans()):
            text += "\n"
        if draw(st.booleans()):
            text += "# c%d about %s\n" % (next(comment_ids), path[-1])
        trailing = " # c%d" % next(comment_ids) if draw(st.booleans()) else ""
        text += header(path) + trailing + "\n"
        text += draw(body(keys, indent=draw(st.sampled_from(["", "  "]))))
    try:
        loads(text)
    except Exception:  # a generated combination TOML does not allow
        assume(False)
    return text


@st.composite
def mutated_fixture(draw, names):
    """A real-world file with comments, keys and tables inserted before its headers."""
    text = fixture(draw(st.sampled_from(names)))
    lines = text.splitlines(keepends=True)
    spots = [i for i, line in enumerate(lines) if line.lstrip().startswith("[")] + [len(lines)]
    for spot in sorted(draw(st.lists(st.sampled_from(spots), max_size=4)), reverse=True):
        kind = draw(st.sampled_from(["comment", "table", "blank"]))
        if kind == "comment":
            insert = "# c%d inserted\n" % next(comment_ids)
        elif kind == "table":
            insert = "%s\n%s" % (header(("user", "t%d" % next(comment_ids))), draw(body()))
        else:
            insert = "\n"
        lines.insert(spot, insert)
    text = "".join(lines)
    try:
        loads(text)
    except Exception:
        assume(False)
    return text


CONTAINERD_FIXTURES = [
    "k3s-v2.toml",
    "kubespray-v2.toml",
    "eks-v2.toml",
    "containerd2-default-v3.toml",
    "v1-legacy.toml",
]
CONTAINERD_TEXT = st.one_of(containerd_config(), mutated_fixture(CONTAINERD_FIXTURES))
SPECS = st.builds(
    lambda default, cdi: (default, cdi),
    st.sampled_from([None, True, False]),
    st.sampled_from([None, True, False]),
)


def cri_of(data):
    version = containerd_version(data, 2, "t")
    return version, ("plugins", CRI[version], "containerd")


def owned(path, containerd, version):
    """Key paths the edit may change: the nvidia entry, the default and enable_cdi."""
    runtimes = (*containerd, "runtimes", "nvidia")
    return (
        path[: len(runtimes)] == runtimes
        or path == (*containerd, "default_runtime_name")
        or path == (*containerd[:2], "enable_cdi")
        or (path == ("version",) and version != 1)
    )


# ------------------------------------------------------------------ containerd


@PROPERTY
@given(text=CONTAINERD_TEXT, options=SPECS)
def test_containerd_in_place_keeps_everything_else(text, options):
    default, cdi = options
    before_data = loads(text)
    version, containerd = cri_of(before_data)
    if version == 1 and cdi is not None:
        with pytest.raises(UnsupportedOption):
            containerd_in_place(text, spec(default=default, cdi=cdi), "config.toml")
        return
    result = edit_or_old_tomlkit_refusal(
        lambda: containerd_in_place(text, spec(default=default, cdi=cdi), "config.toml")
    )
    if result is None:
        return
    new_text, before, after, got_version = result
    assert got_version == version
    assert canon(before) == canon(before_data)
    assert canon(loads(new_text)) == canon(after)
    old, new = leaves(before), leaves(after)
    for path, value in old.items():
        if not owned(path, containerd, version):
            assert new.get(path, "<lost>") == value, path
    assert {p for p in new if p not in old and not owned(p, containerd, version)} == set()
    entry = after["plugins"][CRI[version]]["containerd"]["runtimes"]["nvidia"]
    assert entry["options"]["BinaryName"] == NV
    assert_text_kept(text, new_text)
    # a second run changes nothing
    assert containerd_in_place(new_text, spec(default=default, cdi=cdi), "config.toml")[0] == new_text
    # absent after present: the user's data back (no entry was there, the default was not it)
    had_entry = "nvidia" in before.get("plugins", {}).get(CRI[version], {}).get("containerd", {}).get(
        "runtimes", {}
    )
    if not had_entry and cdi is None:
        undone = containerd_in_place(new_text, spec(state="absent"), "config.toml")
        restored = leaves(undone[2])
        for path, value in old.items():
            if path != (*containerd, "default_runtime_name"):
                assert restored.get(path, "<lost>") == value, path
        key = (*containerd, "default_runtime_name")
        if old.get(key) == "nvidia" or (default is True and NOTE not in new_text):
            # named nvidia before, or in an inline table (no note): reset, not left naming nvidia
            assert restored[key] == "runc"
        else:
            assert pruned(undone[2]) == pruned(before)  # what was there, the default included
        assert_text_kept(text, undone[0])


@PROPERTY
@given(text=CONTAINERD_TEXT, default=st.sampled_from([None, True, False]))
def test_containerd_drop_in_only_adds_the_import(text, default):
    main_data = loads(text)
    version, containerd = cri_of(main_data)
    drop = "/etc/containerd/conf.d/99-nvidia.toml"

    def run(main, drop_text):
        return containerd_drop_in(
            main,
            drop_text,
            spec(default=default),
            main_source="config.toml",
            drop_in_source=drop,
            drop_in_path=drop,
        )

    try:
        result = edit_or_old_tomlkit_refusal(lambda: run(text, ""))
    except ConfigParseError as error:
        # Decided: an imports array with comments is changed by tomlkit (to keep them); where
        # tomlkit refuses the valid file (0.15 refuses [plugins] after its sub-tables), the
        # edit is refused, typed, naming the file and line.
        assert re.search(r"^imports = .*#", text, re.MULTILINE), error
        assert str(error).startswith("config.toml line ")
        return
    if result is None:
        return
    main_text, drop_text, (before, _drop_before), (after, drop_data), got_version = result
    assert got_version == version
    entry_path = (*containerd, "runtimes", "nvidia")
    old, new = leaves(before), leaves(after)
    for path, value in old.items():
        if path[: len(entry_path)] != entry_path and path != ("imports",):
            assert new.get(path, "<lost>") == value, path
    assert {p for p in new if p not in old} <= {("imports",), ("version",)}
    assert drop in after["imports"]
    assert canon(loads(main_text)) == canon(after)
    assert canon(loads(drop_text)) == canon(drop_data)
    entry = drop_data["plugins"][CRI[version]]["containerd"]["runtimes"]["nvidia"]
    assert entry["options"]["BinaryName"] == NV
    moved = (
        before.get("plugins", {})
        .get(CRI[version], {})
        .get("containerd", {})
        .get("runtimes", {})
        .get("nvidia")
    )
    if isinstance(moved, dict):  # an in-place entry moves with all its settings
        for path, value in leaves(moved).items():
            if path != ("options", "BinaryName"):
                assert leaves(entry)[path] == value
    # the comments stay; the headers too, but those of an in-place entry, which moved
    assert_subsequence(comments(outside_entry(text)), comments(main_text), "comment")
    assert_subsequence(
        [h for h in headers(text) if ".runtimes.nvidia" not in h], headers(main_text), "header"
    )
    again = run(main_text, drop_text)
    assert again[0] == main_text
    assert again[1] == drop_text


# ------------------------------------------------------------------ CRI-O


@st.composite
def crio_config(draw):
    sections = [
        (("crio",), {"root": "/var/lib/containers/storage"}),
        (("crio", "api"), {"listen": "/var/run/crio/crio.sock"}),
        (("crio", "image"), {"pause_image": "registry.k8s.io/pause:3.10"}),
        (("crio", "network"), {"plugin_dirs": ["/opt/cni/bin/"]}),
    ]
    default = draw(st.sampled_from([None, "crun", "runc", "nvidia"]))
    if default or draw(st.booleans()):
        sections.append(
            (("crio", "runtime"), {"default_runtime": default} if default else {"selinux": False})
        )
    for name in draw(st.lists(st.sampled_from(["crun", "runc", "nvidia"]), unique=True)):
        keys = {"runtime_path": "/usr/libexec/crio/%s" % name, "runtime_type": "oci"}
        if name == "nvidia" and draw(st.booleans()):
            keys = {"monitor_path": "/usr/libexec/crio/conmon"}
        sections.append((("crio", "runtime", "runtimes", name), keys))
    sections.extend((("user", "t%d" % i), {}) for i in range(draw(st.integers(0, 2))))
    text = draw(body())
    for index in draw(st.permutations(range(len(sections)))):
        path, keys = sections[index]
        if draw(st.booleans()):
            text += "# c%d about %s\n" % (next(comment_ids), path[-1])
        text += header(path) + "\n" + draw(body(keys))
    try:
        loads(text)
    except Exception:
        assume(False)
    return text


@PROPERTY
@given(
    text=st.one_of(crio_config(), mutated_fixture(["crio.conf"])),
    default=st.sampled_from([None, True, False]),
)
def test_crio_keeps_everything_else(text, default):
    result = edit_or_old_tomlkit_refusal(lambda: crio_edit(text, spec(default=default), "crio.conf"))
    if result is None:
        return
    new_text, before, after = result
    entry_path = ("crio", "runtime", "runtimes", "nvidia")
    old, new = leaves(before), leaves(after)
    for path, value in old.items():
        if path[:4] != entry_path and path != ("crio", "runtime", "default_runtime"):
            assert new.get(path, "<lost>") == value, path
    assert after["crio"]["runtime"]["runtimes"]["nvidia"]["runtime_path"] == NV
    assert canon(loads(new_text)) == canon(after)
    assert_text_kept(text, new_text)
    assert crio_edit(new_text, spec(default=default), "crio.conf")[0] == new_text
    if "nvidia" not in before.get("crio", {}).get("runtime", {}).get("runtimes", {}):
        undone = crio_edit(new_text, spec(state="absent"), "crio.conf")
        restored = leaves(undone[2])
        for path, value in old.items():
            if path != ("crio", "runtime", "default_runtime"):
                assert restored.get(path, "<lost>") == value, path
        key = ("crio", "runtime", "default_runtime")
        if old.get(key) == "nvidia" or (default is True and NOTE not in new_text):
            assert restored[key] == "runc"
        else:
            assert pruned(undone[2]) == pruned(before)  # what was there, the default included
        assert_text_kept(text, undone[0])


# ------------------------------------------------------------------ Docker

JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=6)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def daemon_json(draw):
    # Any other keys; the three the edit reads are drawn below, in the shapes Docker reads.
    # (Hypothesis draws literals from the loaded code too, "runtimes" among them: a null or
    # an array there is another test's case: test_docker_wrong_types.)
    read_keys = ("runtimes", "default-runtime", "features")
    other_keys = st.text(max_size=8).filter(lambda key: key not in read_keys)
    data = draw(st.dictionaries(other_keys, JSON, max_size=5))
    if draw(st.booleans()):
        data["runtimes"] = draw(
            st.dictionaries(st.sampled_from(["other", "nvidia", "crun"]), st.just({"path": "/x"}))
        )
    if draw(st.booleans()):
        data["default-runtime"] = draw(st.sampled_from(["runc", "other", "nvidia"]))
    if draw(st.booleans()):
        data["features"] = draw(st.dictionaries(st.sampled_from(["buildkit", "cdi"]), st.booleans()))
    return json.dumps(data, indent=draw(st.sampled_from([2, 4, "\t"])))


@PROPERTY
@given(
    text=daemon_json(), default=st.sampled_from([None, True, False]), cdi=st.sampled_from([None, True, False])
)
def test_docker_keeps_every_other_key(text, default, cdi):
    new_text, before, after = docker_edit(text, spec(default=default, cdi=cdi), "daemon.json")
    assert json.loads(new_text) == after
    for key, value in before.items():
        if key not in ("runtimes", "default-runtime", "features"):
            assert after[key] == value
    for name, value in (before.get("runtimes") or {}).items():
        if name != "nvidia":
            assert after["runtimes"][name] == value
    for name, value in (before.get("features") or {}).items():
        if name != "cdi":
            assert after["features"][name] == value
    kept = [key for key in before if key in after]
    assert list(after)[: len(kept)] == kept  # order kept, new keys last
    assert after["runtimes"]["nvidia"]["path"] == NV
    assert docker_edit(new_text, spec(default=default, cdi=cdi), "daemon.json")[0] == new_text
    if (
        "nvidia" not in (before.get("runtimes") or {})
        and cdi is None
        and before.get("default-runtime") != "nvidia"
    ):
        undone = docker_edit(new_text, spec(state="absent"), "daemon.json")[2]
        expected = copy.deepcopy(before)
        if expected.get("runtimes") == {}:
            del expected["runtimes"]
        if default is True:
            # present replaced the default with nvidia; absent removes it (Docker's runc)
            expected.pop("default-runtime", None)
        assert undone == expected


# ------------------------------------------------------------------ errors


class OneFile:
    """plan()'s reader over one config.toml's text."""

    def __init__(self, text):
        self.text = text

    def read(self, path):
        return self.text if path == "/etc/containerd/config.toml" else None

    def listdir(self, _directory):
        return []


def plan_without_tomlkit(text):
    """Check mode on a node without tomlkit: the plan, reading with tomllib."""
    with mock.patch.object(toml_edit, "HAS_TOMLKIT", False):
        return plan({"runtime": "containerd", "config_version": 2, **spec()}, OneFile(text))


GARBAGE = st.one_of(
    st.text(max_size=200),
    st.text(alphabet="[]{}=\"'.#\n ab0-", max_size=120),
    st.builds(
        lambda text, cut, junk: text[:cut] + junk + text[cut:],
        st.sampled_from([fixture(name) for name in [*CONTAINERD_FIXTURES, "crio.conf", "daemon.json"]]),
        st.integers(0, 3000),
        st.text(alphabet="[]{}=\"'.#\n x1", max_size=6),
    ),
)


@PROPERTY
@given(text=GARBAGE, which=st.sampled_from(["in_place", "drop_in", "crio", "docker", "plan_without_tomlkit"]))
def test_errors_are_typed(text, which):
    calls = {
        "in_place": lambda: containerd_in_place(text, spec(default=True), "config.toml"),
        "drop_in": lambda: containerd_drop_in(
            text, text, spec(), main_source="c", drop_in_source="d", drop_in_path="/d"
        ),
        "crio": lambda: crio_edit(text, spec(default=True), "crio.conf"),
        "docker": lambda: docker_edit(text, spec(default=True, cdi=True), "daemon.json"),
        "plan_without_tomlkit": lambda: plan_without_tomlkit(text),
    }
    try:
        calls[which]()
    except RuntimeConfigError as error:
        assert str(error)


# ------------------------------------------------------------------ the cases


def test_case_crio_runtimes_split_by_another_table_are_edited():
    text = (
        '[crio.runtime.runtimes.runc]\nruntime_path = "/r"\n[crio.image]\npause_image = "p"\n'
        '[crio.runtime.runtimes.crun]\nruntime_path = "/c"\n'
    )
    new_text, _before, after = crio_edit(text, spec(), "crio.conf")
    assert set(after["crio"]["runtime"]["runtimes"]) == {"runc", "crun", "nvidia"}
    assert new_text.startswith(text)


def test_case_drop_in_moves_an_in_place_entry_with_its_settings():
    text = (
        "version = 2\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n'
        'runtime_type = "io.containerd.runc.v2"\nprivileged_without_host_devices = true\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]\n'
        'BinaryName = "/old"\nSystemdCgroup = true\n'
    )
    main_text, drop_text, _before, (_main, drop), _version = containerd_drop_in(
        text, "", spec(), main_source="c", drop_in_source="d", drop_in_path="/d"
    )
    entry = drop["plugins"][CRI[2]]["containerd"]["runtimes"]["nvidia"]
    assert entry["privileged_without_host_devices"] is True
    assert entry["options"] == {"BinaryName": NV, "SystemdCgroup": True}
    again = containerd_drop_in(
        main_text, drop_text, spec(), main_source="c", drop_in_source="d", drop_in_path="/d"
    )
    assert again[:2] == (main_text, drop_text)


def test_case_dotted_keys_under_plugins_are_edited():
    text = (
        'version = 2\n[plugins]\n"io.containerd.grpc.v1.cri".containerd.default_runtime_name = "runc"'
        " # mine\n"
    )
    new_text, _before, after, _version = containerd_in_place(text, spec(default=True), "c")
    note = ' # gpuops.k8s nvidia_runtime: was "runc"'
    assert '"io.containerd.grpc.v1.cri".containerd.default_runtime_name = "nvidia" # mine' + note in new_text
    assert containerd_in_place(new_text, spec(state="absent"), "c")[0].startswith(text)
    assert after["plugins"][CRI[2]]["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == NV


def test_case_header_comments_stay_on_their_header():
    text = (
        'version = 2\n# the runc runtime\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]'
        ' # trailing\nruntime_type = "x"\n'
    )
    new_text = containerd_in_place(text, spec(default=True, cdi=True), "c")[0]
    assert new_text.count("# trailing") == 1
    assert new_text.count("# the runc runtime") == 1
    assert "# the runc runtime\n[plugins" in new_text


def test_case_nan_anywhere_is_kept_and_edited():
    text = "version = 2\n[metrics]\nx = nan\ny = [nan, 1.0]\n"
    new_text, _before, after, _version = containerd_in_place(text, spec(), "c")
    assert new_text.startswith(text)
    assert "nvidia" in after["plugins"][CRI[2]]["containerd"]["runtimes"]
    assert containerd_in_place(new_text, spec(), "c")[0] == new_text


@pytest.mark.parametrize("cdi", [None, True])
def test_case_split_tables_edit_with_any_tomlkit(cdi):
    """EKS's file (the CRI table after its containerd sub-table) with enable_cdi, and runtimes
    split by another CRI table: edited the same under Debian's tomlkit 0.11.7."""
    for text in [
        fixture("eks-v2.toml"),
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\nruntime_type = "r"\n'
        '[plugins."io.containerd.grpc.v1.cri".cni]\nbin_dir = "/b"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.crun]\nruntime_type = "c"\n',
    ]:
        new_text, _before, after, _version = containerd_in_place(text, spec(cdi=cdi), "c")
        assert loads(new_text) == after
        assert after["plugins"][CRI[2]].get("enable_cdi") is cdi
        assert_text_kept(text, new_text)
        drop = containerd_drop_in(
            text, "", spec(cdi=cdi), main_source="c", drop_in_source="d", drop_in_path="/d"
        )
        assert loads(drop[1]) == drop[3][1]
