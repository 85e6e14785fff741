# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_file_tree: the names it refuses, the plan it makes of a tree (pure), the diff it shows,
and apply() carrying a plan out on a real directory (tests/functional/test_file_tree.py
runs the module through the ansible CLI)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _file_tree as ft

WANT = ft.Want(0o644, 0o755)


def directory(mode=0o755, uid=0, gid=0):
    return ft.Entry(ft.DIRECTORY, mode=mode, uid=uid, gid=gid, size=4096)


def regular(content, mode=0o644, uid=0, gid=0):
    return ft.Entry(ft.FILE, mode=mode, uid=uid, gid=gid, size=len(content), content=content)


def tree(root=None, **entries):
    """A Tree: names with '/' given as '__' (a keyword's spelling), root a directory by default."""
    return ft.Tree(
        directory() if root is None else root, {k.replace("__", "/"): v for k, v in entries.items()}
    )


def lists(planned):
    return planned.added, planned.updated, planned.removed


# -- names -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("/etc/passwd", "is absolute"),
        ("../escape", "'..'"),
        ("a/../../b", "'..'"),
        ("a/..", "'..'"),
        ("", "is empty"),
        ("a/", "ends in '/'"),
        ("a//b", "empty part"),
        ("./a", "'.' part"),
        ("a\0b", "NUL"),
    ],
)
def test_a_name_that_is_no_file_inside_the_tree_is_refused(name, problem):
    with pytest.raises(ft.InvalidFiles) as error:
        ft.validate_files({name: "x", "fine.txt": "y"})
    message = str(error.value)
    assert repr(name) in message and problem in message
    assert "fine.txt" not in message  # only the bad names are named
    assert ft.VALID_NAME in message and "nothing was changed" in message


def test_every_bad_entry_is_named_at_once():
    with pytest.raises(ft.InvalidFiles) as error:
        ft.validate_files({"/abs": "", "../up": "", "ok": 3, "good": "text"})
    message = str(error.value)
    assert "'/abs' is absolute" in message
    assert "'../up' has a '..' part" in message
    assert "'ok': its content is a int, not text" in message
    assert "'good'" not in message


def test_a_file_that_is_also_a_directory_is_a_collision():
    with pytest.raises(ft.InvalidFiles) as error:
        ft.validate_files({"pkg": "a file", "pkg/mod.py": "", "pkg/sub/x.py": "", "other/y": ""})
    message = str(error.value)
    assert "'pkg' is a file and also the directory of 'pkg/mod.py'" in message
    assert message.count("is a file and also") == 1  # one line per colliding name


def test_valid_names_come_back_as_utf8_bytes():
    assert ft.validate_files({"a/b/c.txt": "grüße\n", "top": ""}) == {
        "a/b/c.txt": "grüße\n".encode(),
        "top": b"",
    }


def test_content_that_is_not_encodable_is_refused():
    with pytest.raises(ft.InvalidFiles, match="'bad': its content cannot be written as UTF-8"):
        ft.validate_files({"bad": "\udcff"})


@pytest.mark.parametrize(
    ("value", "mode"), [("0644", 0o644), ("644", 0o644), ("0o755", 0o755), (0o640, 0o640)]
)
def test_modes_are_octal(value, mode):
    assert ft.parse_mode(value, "mode") == mode


@pytest.mark.parametrize("value", ["u=rw,g=r", "0888", "rwxr-xr-x", "", True, None, 0o10000, "-1"])
def test_other_modes_are_refused_naming_the_option(value):
    with pytest.raises(ft.InvalidOption, match=r"^directory_mode=.*must be an octal mode such as '0644'"):
        ft.parse_mode(value, "directory_mode")


@pytest.mark.parametrize("path", ["relative/dir", "", "/", "//", "/.."])
def test_path_must_be_absolute_and_not_the_root(path):
    with pytest.raises(ft.InvalidOption, match="nothing was changed"):
        ft.check_path(path)


def test_an_unknown_owner_is_refused_and_a_number_is_taken():
    with pytest.raises(ft.InvalidOption, match="owner='no-such-user-gpuops': no such user"):
        ft.resolve_owner("no-such-user-gpuops", None)
    assert ft.resolve_owner("root", "4242") == (0, 4242)
    assert ft.resolve_owner(None, None) == (None, None)


# -- the plan ----------------------------------------------------------------------------


def test_an_absent_tree_is_created_parents_first():
    planned = ft.plan({"b/c/d.txt": b"d", "a.txt": b"a"}, ft.Tree(None, {}), WANT)
    assert lists(planned) == (["./", "a.txt", "b/", "b/c/", "b/c/d.txt"], [], [])
    assert planned.create_root
    assert planned.make_dirs == ["b", "b/c"]
    assert planned.write == [("a.txt", b"a"), ("b/c/d.txt", b"d")]
    assert planned.changed


def test_a_tree_that_matches_is_not_changed():
    current = tree(a=directory(), a__x=regular(b"x"), top=regular(b"t"))
    planned = ft.plan({"a/x": b"x", "top": b"t"}, current, WANT)
    assert lists(planned) == ([], [], [])
    assert not planned.changed and planned.write == [] and planned.remove == []


def test_only_files_whose_content_differs_are_written():
    current = tree(same=regular(b"same"), longer=regular(b"old"), equal_size=regular(b"abc"))
    planned = ft.plan({"same": b"same", "longer": b"newer", "equal_size": b"xyz"}, current, WANT)
    assert lists(planned) == ([], ["equal_size", "longer"], [])
    assert [write[0] for write in planned.write] == ["equal_size", "longer"]


def test_a_file_whose_content_was_not_read_is_compared_by_size():
    # read_tree reads a file only when its size equals the wanted content's.
    big = ft.Entry(ft.FILE, mode=0o644, size=10**6)
    planned = ft.plan({"big": b"small"}, tree(big=big), WANT)
    assert planned.updated == ["big"]


def test_stale_files_and_emptied_directories_are_removed_deepest_first():
    current = tree(
        keep=regular(b"k"),
        old=directory(),
        old__sub=directory(),
        old__sub__x=regular(b"x"),
        old__y=regular(b"y"),
        pkg=directory(),
        pkg__gone=regular(b"g"),
        pkg__kept=regular(b"p"),
    )
    planned = ft.plan({"keep": b"k", "pkg/kept": b"p"}, current, WANT)
    assert lists(planned) == ([], [], ["old/", "old/sub/", "old/sub/x", "old/y", "pkg/gone"])
    assert planned.remove == [
        ("old/sub/x", False),
        ("old/sub", True),
        ("old/y", False),
        ("pkg/gone", False),
        ("old", True),
    ]


def test_an_empty_files_dict_empties_the_directory():
    planned = ft.plan({}, tree(a=regular(b"a"), d=directory()), WANT)
    assert lists(planned) == ([], [], ["a", "d/"])


def test_a_directory_where_a_file_is_wanted_goes_first():
    current = tree(name=directory(), name__inner=regular(b"i"))
    planned = ft.plan({"name": b"now a file"}, current, WANT)
    assert lists(planned) == (["name"], [], ["name/", "name/inner"])
    assert planned.remove == [("name/inner", False), ("name", True)]
    assert planned.write == [("name", b"now a file")]


def test_a_file_or_link_where_a_directory_is_wanted_is_replaced():
    link = ft.Entry(ft.OTHER, mode=0o777)
    planned = ft.plan({"d/x": b"x", "l/y": b"y"}, tree(d=regular(b"was a file"), l=link), WANT)
    assert lists(planned) == (["d/", "d/x", "l/", "l/y"], [], ["d", "l"])
    assert planned.make_dirs == ["d", "l"]


def test_a_link_where_a_file_is_wanted_is_written_over_not_followed():
    link = ft.Entry(ft.OTHER, mode=0o777)
    link.target = "/etc/passwd"
    planned = ft.plan({"f": b"content"}, tree(f=link), WANT)
    assert lists(planned) == ([], ["f"], [])
    assert planned.write == [("f", b"content")]


def test_a_mode_change_alone_sets_attributes_and_writes_nothing():
    current = tree(sub=directory(mode=0o700), sub__f=regular(b"f", mode=0o600))
    planned = ft.plan({"sub/f": b"f"}, current, WANT)
    assert lists(planned) == ([], ["sub/", "sub/f"], [])
    assert planned.write == [] and planned.file_attrs == ["sub/f"] and planned.dir_attrs == ["sub"]


def test_the_roots_mode_is_kept_too():
    planned = ft.plan({"f": b"f"}, tree(root=directory(mode=0o777), f=regular(b"f")), WANT)
    assert lists(planned) == ([], ["./"], [])
    assert planned.dir_attrs == [""]


def test_owner_and_group_count_only_when_given():
    current = tree(f=regular(b"f", uid=1000, gid=1000))
    assert not ft.plan({"f": b"f"}, current, WANT).changed
    planned = ft.plan({"f": b"f"}, current, ft.Want(0o644, 0o755, uid=1000, gid=0))
    assert lists(planned) == ([], ["./", "f"], [])  # the root is owned by gid 0 already, uid 0 not
    assert planned.file_attrs == ["f"]


# -- the diff ----------------------------------------------------------------------------


def test_the_diff_shows_each_files_text_and_mode():
    current = tree(
        changed=regular(b"old\n", mode=0o600),
        stale=regular(b"bye\n"),
        mode_only=regular(b"m", mode=0o640),
    )
    wanted = {"changed": b"new\n", "added": b"hello\n", "mode_only": b"m"}
    diff = ft.plan(wanted, current, WANT, diff=True).diff
    assert diff == [
        {
            "before_header": "added (absent)",
            "after_header": "added (mode 0644)",
            "before": "",
            "after": "hello\n",
        },
        {
            "before_header": "changed (mode 0600)",
            "after_header": "changed (mode 0644)",
            "before": "old\n",
            "after": "new\n",
        },
        {"before": {"path": "mode_only", "mode": "0640"}, "after": {"path": "mode_only", "mode": "0644"}},
        {
            "before_header": "stale (mode 0644)",
            "after_header": "stale (removed)",
            "before": "bye\n",
            "after": "",
        },
    ]


def test_the_diff_shows_directories_as_states():
    diff = ft.plan({"d/f": b""}, ft.Tree(None, {}), WANT, diff=True).diff
    assert diff[:2] == [
        {
            "before": {"path": "./", "state": "absent"},
            "after": {"path": "./", "state": "directory", "mode": "0755"},
        },
        {
            "before": {"path": "d/", "state": "absent"},
            "after": {"path": "d/", "state": "directory", "mode": "0755"},
        },
    ]


def test_large_and_binary_files_are_summarised():
    big = b"x" * (ft.DIFF_LIMIT + 1)
    current = tree(binary=regular(b"\xff\xfe"), big=regular(big))
    diff = ft.plan({"binary": b"text\n", "big": big + b"y"}, current, WANT, diff=True).diff
    by_name = {d["after_header"].split(" ")[0]: d for d in diff}
    assert by_name["big"]["before"].startswith("(%d bytes, sha256 " % len(big))
    assert "over 64 KiB, not shown" in by_name["big"]["before"]
    assert "over 64 KiB, not shown" in by_name["big"]["after"]
    assert "not UTF-8 text, not shown" in by_name["binary"]["before"]
    assert by_name["binary"]["after"] == "text\n"


def test_the_diff_names_a_links_target():
    link = ft.Entry(ft.OTHER, mode=0o777)
    link.target = "../elsewhere"
    (entry,) = ft.plan({"f": b"x\n"}, tree(f=link), WANT, diff=True).diff
    assert entry["before"] == "(a symbolic link to ../elsewhere)\n"


# -- reading and applying, on a real directory --------------------------------------------


class RecordingIO(ft.ModuleIO):
    """ModuleIO with os.replace for atomic_move, and every call recorded."""

    class _Module:
        @staticmethod
        def atomic_move(src, dest):
            os.replace(src, dest)

    def __init__(self):
        super(RecordingIO, self).__init__(self._Module())
        self.calls = []

    def __getattribute__(self, name):
        attribute = object.__getattribute__(self, name)
        if name in ("write", "remove", "remove_dir", "make_dir", "make_dirs", "set_attrs"):

            def recorded(path, *args):
                object.__getattribute__(self, "calls").append((name, path))
                return attribute(path, *args)

            return recorded
        return attribute


def run_plan(path, files, want=WANT):
    wanted = ft.validate_files(files)
    planned = ft.plan(wanted, ft.read_tree(str(path), wanted), want)
    io = RecordingIO()
    ft.apply(planned, str(path), want, io)
    return planned, io.calls


def snapshot(path):
    found = {}
    for root, dirs, files in os.walk(str(path)):
        for name in dirs + files:
            full = os.path.join(root, name)
            st = os.lstat(full)
            content = None
            if stat.S_ISREG(st.st_mode):
                with open(full, "rb") as handle:
                    content = handle.read()
            found[os.path.relpath(full, str(path))] = (stat.S_IMODE(st.st_mode), content)
    return found


def test_apply_makes_the_tree_and_a_second_plan_is_empty(tmp_path):
    root = tmp_path / "a" / "tree"
    planned = run_plan(root, {"pkg/mod.py": "x = 1\n", "README": "r"})[0]
    assert planned.added == ["./", "README", "pkg/", "pkg/mod.py"]
    assert snapshot(tmp_path) == {
        "a": (0o755, None),
        "a/tree": (0o755, None),
        "a/tree/README": (0o644, b"r"),
        "a/tree/pkg": (0o755, None),
        "a/tree/pkg/mod.py": (0o644, b"x = 1\n"),
    }
    again, calls = run_plan(root, {"pkg/mod.py": "x = 1\n", "README": "r"})
    assert not again.changed and calls == []


def test_apply_removes_stale_entries_and_never_follows_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    root = tmp_path / "tree"
    (root / "old" / "deep").mkdir(parents=True)
    (root / "old" / "deep" / "f").write_text("stale")
    (root / "link").symlink_to(outside)
    (root / "file.txt").symlink_to(outside / "precious")
    planned = run_plan(root, {"file.txt": "now mine\n"})[0]
    assert planned.removed == ["link", "old/", "old/deep/", "old/deep/f"]
    assert planned.updated == ["file.txt"]
    assert snapshot(root) == {"file.txt": (0o644, b"now mine\n")}
    assert (outside / "precious").read_text() == "keep me"


def test_apply_writes_only_what_differs(tmp_path):
    run_plan(tmp_path / "t", {"a": "a", "b": "b", "c": "c"})
    os.chmod(str(tmp_path / "t" / "c"), 0o600)
    planned, calls = run_plan(tmp_path / "t", {"a": "a", "b": "B", "c": "c"})
    assert planned.updated == ["b", "c"]
    b, c = str(tmp_path / "t" / "b"), str(tmp_path / "t" / "c")
    assert calls == [("write", b), ("set_attrs", b), ("set_attrs", c)]  # write sets b's mode itself
    assert snapshot(tmp_path / "t")["c"] == (0o644, b"c")


def test_a_file_above_path_is_an_error_before_anything_is_written(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ft.TreeError, match="exists and is not a directory"):
        ft.read_tree(str(tmp_path / "file" / "tree"), {})
    assert snapshot(tmp_path) == {"file": (0o644, b"x")}


def test_a_failed_step_is_named(tmp_path):
    class Failing(RecordingIO):
        def write(self, path, *args):
            raise OSError(28, "No space left on device")

    wanted = ft.validate_files({"a": "a", "b": "b"})
    planned = ft.plan(wanted, ft.Tree(None, {}), WANT)
    with pytest.raises(
        ft.ApplyError, match=r"could not write .*/t/a: \[Errno 28\].*\(1 of the plan's 3 steps"
    ) as error:
        ft.apply(planned, str(tmp_path / "t"), WANT, Failing())
    assert error.value.changed  # the directory was made


# -- exclusive=false: a shared directory -----------------------------------------------------


def run_shared(path, files, absent=(), want=WANT):
    wanted = ft.validate_files(files)
    absent = ft.validate_absent(list(absent), wanted, exclusive=False)
    planned = ft.plan(wanted, ft.read_named(str(path), wanted, absent), want, exclusive=False, absent=absent)
    io = RecordingIO()
    ft.apply(planned, str(path), want, io)
    return planned, io.calls


def test_a_shared_directory_keeps_what_is_not_named(tmp_path):
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list.d" / "debian.sources").write_text("theirs")
    (etc / "sources.list.d" / "example.list").write_text("old one-line source")
    (etc / "apt.conf").write_text("theirs too")
    os.chmod(str(etc), 0o700)  # path's own mode is not the module's to set
    files = {"keyrings/example.asc": "KEY", "sources.list.d/example.sources": "Types: deb\n"}
    absent = ["sources.list.d/example.list", "sources.list.d/gone.list"]
    planned, calls = run_shared(etc, files, absent=absent)
    assert lists(planned) == (
        ["keyrings/", "keyrings/example.asc", "sources.list.d/example.sources"],
        [],
        ["sources.list.d/example.list"],
    )
    assert snapshot(etc) == {
        "apt.conf": (0o644, b"theirs too"),
        "keyrings": (0o755, None),
        "keyrings/example.asc": (0o644, b"KEY"),
        "sources.list.d": (0o755, None),
        "sources.list.d/debian.sources": (0o644, b"theirs"),
        "sources.list.d/example.sources": (0o644, b"Types: deb\n"),
    }
    assert stat.S_IMODE(os.stat(str(etc)).st_mode) == 0o700
    again, calls = run_shared(etc, files, absent=["sources.list.d/example.list"])
    assert not again.changed and calls == []


def test_a_shared_directory_replaces_no_directory_and_nothing_above_a_file(tmp_path):
    (tmp_path / "unit.service").mkdir()
    (tmp_path / "conf").write_text("a file where a directory is wanted")
    (tmp_path / "old").mkdir()
    wanted = ft.validate_files({"unit.service": "x", "conf/a.conf": "y"})
    absent = ft.validate_absent(["old"], wanted, exclusive=False)
    with pytest.raises(ft.TreeError) as error:
        ft.plan(wanted, ft.read_named(str(tmp_path), wanted, absent), WANT, exclusive=False, absent=absent)
    assert str(error.value) == (
        "conf is not a directory, and files has a file below it; old (in absent) is a directory; "
        "unit.service is a directory where a file is wanted: with exclusive=false, file_tree replaces and "
        "removes no directory and nothing above a wanted file; nothing was changed"
    )


def test_a_shared_directory_reads_nothing_through_a_link(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.conf").write_text("y")
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "conf").symlink_to(outside)
    wanted = ft.validate_files({"conf/a.conf": "y"})
    named = ft.read_named(str(tmp_path / "shared"), wanted, [])
    assert sorted(named.entries) == ["conf"] and named.entries["conf"].kind == ft.OTHER


@pytest.mark.parametrize(
    ("absent", "exclusive", "message"),
    [
        (["a"], True, "only with exclusive=false"),
        (["/etc/x"], False, "'/etc/x' is absolute"),
        (["keep"], False, "'keep' is also wanted by files"),
        (["dir"], False, "'dir' is also wanted by files"),
    ],
)
def test_bad_absent_names_are_refused(absent, exclusive, message):
    wanted = ft.validate_files({"keep": "k", "dir/f": "f"})
    with pytest.raises(ft.InvalidOption, match=message):
        ft.validate_absent(absent, wanted, exclusive)
