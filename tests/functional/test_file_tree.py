# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""file_tree through the real `ansible` CLI on localhost, in a temporary directory: the
first run creates, the second changes nothing, check mode predicts the real run and writes
nothing, --diff shows each file, stale files go, and bad input leaves the tree untouched.
(The planning itself: tests/unit/plugins/module_utils/test_file_tree.py.)"""

import json
import os
import stat
import subprocess

import pytest
from conftest import VENV_BIN, ansible_env, run_module

MODULE = "gpuops.k8s.file_tree"

SOURCE = {
    "pyproject.toml": '[project]\nname = "demo"\n',
    "demo/__init__.py": '__version__ = "1.0"\n',
    "demo/api/service.py": "def serve():\n    return 1\n",
    "demo/api/service.proto": 'syntax = "proto3";\n',
}


def file_tree(path, files, *, check=False, diff=False, **options):
    return run_module({"path": str(path), "files": files, **options}, module=MODULE, check=check, diff=diff)


def snapshot(path):
    """{relative name: (type, mode, content)} of everything below path, links not followed."""
    found = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(root, name)
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode):
                with open(full, "rb") as handle:
                    found[os.path.relpath(full, path)] = ("file", stat.S_IMODE(st.st_mode), handle.read())
            elif stat.S_ISDIR(st.st_mode):
                found[os.path.relpath(full, path)] = ("dir", stat.S_IMODE(st.st_mode), None)
            else:
                found[os.path.relpath(full, path)] = ("other", None, os.readlink(full))
    return found


def lists(result):
    return {key: result[key] for key in ("added", "updated", "removed")}


def expected_tree(files, mode=0o644, directory_mode=0o755):
    found = {}
    for name, content in files.items():
        found[name] = ("file", mode, content.encode())
        parts = name.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            found["/".join(parts[:depth])] = ("dir", directory_mode, None)
    return found


def test_first_run_creates_the_tree_and_the_second_changes_nothing(tmp_path):
    tree = tmp_path / "opt" / "src"
    predicted = file_tree(tree, SOURCE, check=True)
    assert predicted["changed"] is True, predicted
    assert not (tmp_path / "opt").exists()  # check mode wrote nothing
    first = file_tree(tree, SOURCE)
    assert first["changed"] is True, first
    assert (
        lists(first)
        == lists(predicted)
        == {
            "added": [
                "./",
                "demo/",
                "demo/__init__.py",
                "demo/api/",
                "demo/api/service.proto",
                "demo/api/service.py",
                "pyproject.toml",
            ],
            "updated": [],
            "removed": [],
        }
    )
    assert snapshot(tree) == expected_tree(SOURCE)
    assert stat.S_IMODE(os.stat(tree).st_mode) == stat.S_IMODE(os.stat(tmp_path / "opt").st_mode) == 0o755
    second = file_tree(tree, SOURCE)
    assert second["changed"] is False, second
    assert lists(second) == {"added": [], "updated": [], "removed": []}
    assert file_tree(tree, SOURCE, check=True)["changed"] is False


def drift(tree):
    """A tree as a newer release and a person left it: one file edited, one mode changed, a
    stale file and directory, a link where a file belongs, a file where a directory does."""
    file_tree(tree, SOURCE)
    (tree / "pyproject.toml").write_text("edited by hand\n")
    os.chmod(tree / "demo" / "__init__.py", 0o600)
    (tree / "demo" / "dropped.py").write_text("old = True\n")
    (tree / "demo" / "__pycache__").mkdir()
    (tree / "demo" / "__pycache__" / "dropped.cpython-313.pyc").write_bytes(b"\x00\x01")
    (tree / "demo" / "api" / "service.proto").unlink()
    (tree.parent / "outside.txt").write_text("not the tree's\n")
    (tree / "demo" / "api" / "service.proto").symlink_to(tree.parent / "outside.txt")


DRIFT_LISTS = {
    "added": [],
    "updated": ["demo/__init__.py", "demo/api/service.proto", "pyproject.toml"],
    "removed": ["demo/__pycache__/", "demo/__pycache__/dropped.cpython-313.pyc", "demo/dropped.py"],
}


def test_check_mode_predicts_the_real_run_exactly_and_writes_nothing(tmp_path):
    tree = tmp_path / "src"
    drift(tree)
    before = snapshot(tree)
    predicted = file_tree(tree, SOURCE, check=True, diff=True)
    assert snapshot(tree) == before
    real = file_tree(tree, SOURCE, diff=True)
    assert predicted["changed"] is real["changed"] is True
    assert lists(predicted) == lists(real) == DRIFT_LISTS
    assert predicted["diff"] == real["diff"]
    assert snapshot(tree) == expected_tree(SOURCE)
    assert (tmp_path / "outside.txt").read_text() == "not the tree's\n"  # the link replaced, never followed
    assert file_tree(tree, SOURCE)["changed"] is False


def test_stale_files_and_their_directories_are_removed(tmp_path):
    tree = tmp_path / "src"
    file_tree(tree, SOURCE)
    smaller = {name: text for name, text in SOURCE.items() if not name.startswith("demo/api/")}
    result = file_tree(tree, smaller)
    assert lists(result) == {
        "added": [],
        "updated": [],
        "removed": ["demo/api/", "demo/api/service.proto", "demo/api/service.py"],
    }
    assert snapshot(tree) == expected_tree(smaller)


def test_diff_shows_each_changed_file(tmp_path):
    tree = tmp_path / "src"
    file_tree(tree, SOURCE)
    changed = dict(SOURCE, **{"demo/__init__.py": '__version__ = "2.0"\n', "demo/new.py": "NEW = 1\n"})
    result = file_tree(tree, changed, check=True, diff=True)
    assert result["diff"] == [
        {
            "before_header": "demo/__init__.py (mode 0644)",
            "after_header": "demo/__init__.py (mode 0644)",
            "before": '__version__ = "1.0"\n',
            "after": '__version__ = "2.0"\n',
        },
        {
            "before_header": "demo/new.py (absent)",
            "after_header": "demo/new.py (mode 0644)",
            "before": "",
            "after": "NEW = 1\n",
        },
    ]
    # As a person reads it: the default callback's unified diff.
    command = [str(VENV_BIN / "ansible"), "localhost", "-m", MODULE, "--check", "--diff"]
    command += ["-e", json.dumps({"ansible_python_interpreter": str(VENV_BIN / "python")})]
    command += ["-a", json.dumps({"path": str(tree), "files": changed})]
    env = dict(ansible_env(), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_NOCOLOR="1")
    text = subprocess.run(command, check=True, capture_output=True, text=True, env=env, timeout=120).stdout
    assert "--- before: demo/__init__.py (mode 0644)\n+++ after: demo/__init__.py (mode 0644)\n" in text
    assert '-__version__ = "1.0"\n+__version__ = "2.0"\n' in text
    assert "+++ after: demo/new.py (mode 0644)\n@@ -0,0 +1 @@\n+NEW = 1\n" in text
    assert snapshot(tree) == expected_tree(SOURCE)


def test_a_large_file_is_summarised_in_the_diff(tmp_path):
    big = "x" * (64 * 1024) + "\n"
    result = file_tree(tmp_path / "t", {"big.txt": big}, check=True, diff=True)
    (entry,) = [d for d in result["diff"] if d.get("after_header", "").startswith("big.txt")]
    assert (
        entry["after"].startswith("(%d bytes, sha256 " % len(big))
        and "over 64 KiB, not shown" in entry["after"]
    )


@pytest.mark.parametrize(
    ("files", "options", "message"),
    [
        ({"../escape.py": "x"}, {}, "'../escape.py' has a '..' part (it could escape path)"),
        ({"/etc/cron.d/x": "x"}, {}, "'/etc/cron.d/x' is absolute"),
        (
            {"demo": "a file", "demo/x.py": ""},
            {},
            "'demo' is a file and also the directory of 'demo/__init__.py'",
        ),
        ({}, {"mode": "u=rw"}, "mode='u=rw': must be an octal mode such as '0644'"),
        ({}, {"owner": "no-such-user-gpuops"}, "owner='no-such-user-gpuops': no such user on this node"),
    ],
)
def test_bad_input_fails_naming_it_and_leaves_the_tree_untouched(tmp_path, files, options, message):
    tree = tmp_path / "src"
    drift(tree)  # a tree a good run would change in every way
    before = snapshot(tree)
    # Valid changes beside the bad one: none of them may be made either.
    result = file_tree(tree, dict(SOURCE, **{"demo/new.py": "NEW = 1\n"}, **files), **options)
    assert result.get("failed") is True, result
    assert message in result["msg"] and "nothing was changed" in result["msg"]
    assert result["changed"] is False
    assert snapshot(tree) == before


def test_a_file_at_path_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    result = file_tree(tmp_path / "file", SOURCE)
    assert result.get("failed") is True and "exists and is not a directory" in result["msg"], result
    assert (tmp_path / "file").read_text() == "x"


def test_a_shared_directory_keeps_the_others_files_and_check_mode_predicts_the_run(tmp_path):
    # exclusive=false, as the roles write into /etc/apt and /etc/systemd/system.
    shared = tmp_path / "etc"
    (shared / "sources.list.d").mkdir(parents=True)
    (shared / "sources.list.d" / "debian.sources").write_text("theirs\n")
    (shared / "sources.list.d" / "nvidia.list").write_text("deb old one-line source\n")
    files = {"keyrings/nvidia.asc": "KEY\n", "sources.list.d/nvidia.sources": "Types: deb\n"}
    options = {"exclusive": False, "absent": ["sources.list.d/nvidia.list"]}
    before = snapshot(shared)
    predicted = file_tree(shared, files, check=True, diff=True, **options)
    assert snapshot(shared) == before
    real = file_tree(shared, files, diff=True, **options)
    assert (
        lists(predicted)
        == lists(real)
        == {
            "added": ["keyrings/", "keyrings/nvidia.asc", "sources.list.d/nvidia.sources"],
            "updated": [],
            "removed": ["sources.list.d/nvidia.list"],
        }
    )
    assert predicted["diff"] == real["diff"]
    assert snapshot(shared) == dict(
        expected_tree(files), **{"sources.list.d/debian.sources": ("file", 0o644, b"theirs\n")}
    )
    assert file_tree(shared, files, **options)["changed"] is False


def test_absent_is_refused_on_an_exclusive_tree(tmp_path):
    (tmp_path / "t").mkdir()
    result = file_tree(tmp_path / "t", {"a": "a"}, absent=["b"])
    assert result["failed"] and "only with exclusive=false" in result["msg"], result
    assert snapshot(tmp_path / "t") == {}
