# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""A directory kept equal to a set of text files (or, not exclusive, holding them among
others): validate, read, plan, then apply.

Private to the gpuops.k8s collection (the file_tree module). validate_files(),
parse_mode() and plan() are pure; read_tree() reads the node (lstat, and the contents a
plan compares); apply() writes a plan through the caller's io (ModuleIO: a temporary file
in the file's own directory, then AnsibleModule.atomic_move, as ansible.posix's sysctl
writes). Every input is validated and the whole plan made before anything is written, so
a bad input leaves the tree untouched.

Names are relative to the tree's root and "/"-separated; in the plan's lists a
directory's name ends in "/", and the root itself is "./".
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import grp
import hashlib
import os
import pwd
import re
import stat
import tempfile

# Files larger than this (either side) are summarised in the diff, not shown.
DIFF_LIMIT = 64 * 1024
ROOT = "./"

FILE = "file"
DIRECTORY = "directory"
OTHER = "other"  # a link, socket, FIFO or device: never followed, replaced or removed

VALID_NAME = (
    "a relative path inside path: names joined by single '/', none of them '.' or '..', "
    "no leading or trailing '/'"
)
_OCTAL = re.compile(r"^(0o)?[0-7]{1,5}$")


class FileTreeError(Exception):
    """The tree cannot be made as asked; changed: whether anything was written before."""

    changed = False


class InvalidFiles(FileTreeError):
    """The files option: a name that escapes the tree or collides, content that is not text."""


class InvalidOption(FileTreeError):
    """path, mode, directory_mode, owner or group cannot be used as given."""


class TreeError(FileTreeError):
    """The node's tree cannot be read, or path is not a directory."""


class ApplyError(FileTreeError):
    """A write failed part way; the message names the path and the operation."""

    def __init__(self, message, done):
        super(ApplyError, self).__init__(message)
        self.changed = done > 0


def parents(name):
    """The directories above a name, outermost first: 'a/b/c' -> ['a', 'a/b']."""
    parts = name.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


# What makes a key of files no file name inside the tree, checked in this order.
_NAME_PROBLEMS = (
    (lambda name, parts: not name, "is empty"),
    (lambda name, parts: "\0" in name, "holds a NUL character"),
    (lambda name, parts: name.startswith("/"), "is absolute"),
    (lambda name, parts: ".." in parts, "has a '..' part (it could escape path)"),
    (lambda name, parts: name.endswith("/"), "ends in '/' (a directory's name, not a file's)"),
    (lambda name, parts: "" in parts, "has an empty part ('//')"),
    (lambda name, parts: "." in parts, "has a '.' part"),
)


def name_problem(name):
    """Why a key of files is not a valid file name inside the tree, or None."""
    parts = name.split("/")
    for test, problem in _NAME_PROBLEMS:
        if test(name, parts):
            return problem
    return None


def validate_files(files):
    """{name: bytes} for the files option, or InvalidFiles naming every bad entry.

    Each key must be a file name inside the tree (VALID_NAME), each value text (a str,
    written as UTF-8), and no file may also be the directory of another.
    """
    if not isinstance(files, dict):
        raise InvalidFiles("files must be a dict of relative path -> text, not a %s" % type(files).__name__)
    problems = []
    wanted = {}
    for name in sorted(files, key=str):
        if not isinstance(name, str):
            problems.append("%r is a %s, not a path" % (name, type(name).__name__))
            continue
        problem = name_problem(name)
        if problem:
            problems.append("%r %s" % (name, problem))
            continue
        content = files[name]
        if not isinstance(content, str):
            problems.append("%r: its content is a %s, not text" % (name, type(content).__name__))
            continue
        try:
            wanted[name] = content.encode("utf-8")
        except UnicodeEncodeError as error:
            problems.append("%r: its content cannot be written as UTF-8 (%s)" % (name, error.reason))
    collided = {}
    for name in sorted(wanted):
        for parent in parents(name):
            if parent in wanted and parent not in collided:
                collided[parent] = name
    problems.extend(
        "%r is a file and also the directory of %r" % (parent, name)
        for parent, name in sorted(collided.items())
    )
    if problems:
        raise InvalidFiles(
            "files: %s. Each key must be %s, each value text, and no file may also be the directory of "
            "another; nothing was changed" % ("; ".join(problems), VALID_NAME)
        )
    return wanted


def validate_absent(absent, wanted, exclusive):
    """The absent option's names, or InvalidOption naming every bad one."""
    if not absent:
        return []
    if exclusive:
        raise InvalidOption(
            "absent=%r: only with exclusive=false (an exclusive tree already removes every file that "
            "files does not hold); nothing was changed" % (absent,)
        )
    problems = []
    for name in absent:
        problem = name_problem(name) if isinstance(name, str) else "is not a path"
        if problem:
            problems.append("%r %s" % (name, problem))
        elif name in wanted or any(name in parents(other) for other in wanted):
            problems.append("%r is also wanted by files" % (name,))
    if problems:
        raise InvalidOption(
            "absent: %s. Each entry must be %s, and none a file or a directory that files holds; "
            "nothing was changed" % ("; ".join(problems), VALID_NAME)
        )
    return sorted(set(absent))


def parse_mode(value, option):
    """A mode option as an int: an octal string ('0644', '644', '0o644'), or an int (what
    YAML makes of an unquoted 0644)."""
    if isinstance(value, bool):
        mode = None
    elif isinstance(value, int):
        mode = value
    elif isinstance(value, str) and _OCTAL.match(value):
        mode = int(value[2:] if value.startswith("0o") else value, 8)
    else:
        mode = None
    if mode is None or not 0 <= mode <= 0o7777:
        raise InvalidOption(
            "%s=%r: must be an octal mode such as '0644' (quoted, at most 07777); symbolic modes "
            "(u=rw,g=r) are not supported; nothing was changed" % (option, value)
        )
    return mode


def _resolve_id(value, lookup, option, what):
    if value is None:
        return None
    try:
        return lookup(value)
    except KeyError:
        if value.isdigit():
            return int(value)
    raise InvalidOption(
        "%s=%r: no such %s on this node; give a name it knows or a numeric id; nothing was changed"
        % (option, value, what)
    )


def resolve_owner(owner, group):
    """(uid, gid) for the owner and group options (names or numeric ids); None: unset."""
    uid = _resolve_id(owner, lambda name: pwd.getpwnam(name).pw_uid, "owner", "user")
    gid = _resolve_id(group, lambda name: grp.getgrnam(name).gr_gid, "group", "group")
    return uid, gid


class Want:
    """The attributes every file and every directory of the tree must have."""

    def __init__(self, mode, directory_mode, uid=None, gid=None):
        self.mode = mode
        self.directory_mode = directory_mode
        self.uid = uid
        self.gid = gid


class Entry:
    """One entry of the node's tree, as lstat saw it; content: its bytes where read."""

    def __init__(self, kind, *, mode=0, uid=0, gid=0, size=0, content=None):
        self.kind = kind
        self.mode = mode
        self.uid = uid
        self.gid = gid
        self.size = size
        self.content = content
        self.target = None  # a link's target, for the diff

    @classmethod
    def from_stat(cls, st):
        if stat.S_ISREG(st.st_mode):
            kind = FILE
        elif stat.S_ISDIR(st.st_mode):
            kind = DIRECTORY
        else:
            kind = OTHER
        return cls(kind, mode=stat.S_IMODE(st.st_mode), uid=st.st_uid, gid=st.st_gid, size=st.st_size)


class Tree:
    """The node's tree: root (an Entry, None where path does not exist) and its entries."""

    def __init__(self, root, entries):
        self.root = root
        self.entries = entries


def check_path(path):
    """InvalidOption for a path the module must not manage."""
    if not path or not os.path.isabs(path):
        raise InvalidOption("path=%r: must be an absolute path; nothing was changed" % (path,))
    if not os.path.normpath(path).strip("/"):
        raise InvalidOption(
            "path=%r: the root directory cannot be a managed tree; nothing was changed" % (path,)
        )


def read_tree(path, wanted, read_small=False):
    """The tree at path (links inside it not followed; path itself may be one).

    Contents are read where a plan compares them (a wanted file of the wanted size) and,
    with read_small (for the diff), of every regular file up to DIFF_LIMIT.
    """
    try:
        root = _read_root(path)
        entries = {}
        if root is not None:
            for name, full, st in _walk(path):
                entries[name] = _read_entry(name, full, st, wanted, read_small)
    except OSError as error:
        raise TreeError("cannot read the tree at %s: %s; nothing was changed" % (path, error)) from error
    return Tree(root, entries)


def _read_entry(name, full, st, wanted, read_small):
    """The Entry for lstat st of name: with its content where a plan or the diff compares
    it, a link's target for the diff."""
    entry = Entry.from_stat(st)
    if entry.kind == FILE and (
        (name in wanted and entry.size == len(wanted[name])) or (read_small and entry.size <= DIFF_LIMIT)
    ):
        with open(full, "rb") as handle:
            entry.content = handle.read()
    elif entry.kind == OTHER and stat.S_ISLNK(st.st_mode):
        entry.target = os.readlink(full)
    return entry


def read_named(path, wanted, absent, read_small=False):
    """Like read_tree, but only the entries a non-exclusive tree manages: the wanted files,
    the directories above them and the absent names (each where every directory above it
    is one: nothing is read through a link or a file)."""
    names = set(wanted) | set(absent)
    for name in wanted:
        names.update(parents(name))
    try:
        root = _read_root(path)
        entries = {}
        if root is not None:
            for name in sorted(names, key=lambda n: (_depth(n), n)):
                if any(entries.get(parent, Entry(OTHER)).kind != DIRECTORY for parent in parents(name)):
                    continue
                full = os.path.join(path, name)
                try:
                    st = os.lstat(full)
                except FileNotFoundError:
                    continue
                entries[name] = _read_entry(name, full, st, wanted, read_small)
    except OSError as error:
        raise TreeError("cannot read the tree at %s: %s; nothing was changed" % (path, error)) from error
    return Tree(root, entries)


def _read_root(path):
    """path's Entry (links followed), None where it does not exist yet; TreeError where it,
    or the nearest existing directory above it, is not a directory."""
    existing = path
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise TreeError(
            "path=%s: %s exists and is not a directory (file_tree manages the files of a directory and "
            "replaces nothing above it); nothing was changed" % (path, existing)
        )
    return Entry.from_stat(os.stat(path)) if existing == path else None


def _walk(path):
    """(name, full path, lstat) of every entry below path, directories before their contents."""
    pending = [("", path)]
    while pending:
        prefix, directory = pending.pop()
        for entry_name in sorted(os.listdir(directory)):
            name = prefix + entry_name
            full = os.path.join(directory, entry_name)
            st = os.lstat(full)
            yield name, full, st
            if stat.S_ISDIR(st.st_mode):
                pending.append((name + "/", full))


class Plan:
    """What to change, in the order apply() does it, and what to report."""

    def __init__(self):
        self.create_root = False
        self.remove = []  # (name, is a directory), the deepest first
        self.make_dirs = []  # names, parents first
        self.dir_attrs = []  # existing directories whose mode or owner differ ("" the root)
        self.write = []  # (name, bytes): new or different content, or not a regular file yet
        self.file_attrs = []  # files whose content is right and mode or owner not
        self.added = []
        self.updated = []
        self.removed = []
        self.diff = []

    @property
    def changed(self):
        return bool(self.added or self.updated or self.removed)


def _depth(name):
    return name.count("/")


def _attrs_differ(entry, mode, want):
    return (
        entry.mode != mode
        or (want.uid is not None and entry.uid != want.uid)
        or (want.gid is not None and entry.gid != want.gid)
    )


def plan(wanted, tree, want, diff=False, *, exclusive=True, absent=()):
    """The Plan that makes tree hold exactly the files wanted ({name: bytes}) with want's
    attributes; with diff, each change's before/after for Ansible's diff output.

    Not exclusive: the files wanted and the directories above them, the names in absent
    removed, nothing else touched (path itself, where it exists, keeps its attributes);
    TreeError where that would replace or remove a directory, or a file above a wanted one.
    """
    planned = Plan()
    directories = set()
    for name in wanted:
        directories.update(parents(name))
    if tree.root is None:
        planned.create_root = True
        planned.added.append(ROOT)
    elif exclusive and _attrs_differ(tree.root, want.directory_mode, want):
        planned.dir_attrs.append("")
        planned.updated.append(ROOT)
    if exclusive:
        _plan_removals(planned, wanted, directories, tree.entries)
    else:
        _plan_named_removals(planned, wanted, directories, absent, tree.entries)
    _plan_directories(planned, directories, tree.entries, want)
    _plan_files(planned, wanted, tree.entries, want)
    planned.added.sort()
    planned.updated.sort()
    planned.removed.sort()
    if diff:
        planned.diff = plan_diff(planned, wanted, tree, want)
    return planned


def _plan_removals(planned, wanted, directories, entries):
    """Entries that go: not wanted at all, a directory where a file is wanted, anything but
    a directory where one is wanted. Nothing wanted lies below any of them (no file is
    another's directory), so the deepest go first."""
    for name in sorted(entries, key=lambda n: (-_depth(n), n)):
        entry = entries[name]
        if name in wanted:
            gone = entry.kind == DIRECTORY
        elif name in directories:
            gone = entry.kind != DIRECTORY
        else:
            gone = True
        if gone:
            planned.remove.append((name, entry.kind == DIRECTORY))
            planned.removed.append(name + "/" if entry.kind == DIRECTORY else name)


def _plan_named_removals(planned, wanted, directories, absent, entries):
    """Non-exclusive: the absent names that exist go; an entry of another kind where a file
    or a directory is wanted is an error, not replaced, as the tree's other entries are not
    this module's."""
    problems = []
    for name in sorted(set(wanted) | directories | set(absent)):
        entry = entries.get(name)
        if entry is None:
            continue
        if name in absent and entry.kind == DIRECTORY:
            problems.append("%s (in absent) is a directory" % name)
        elif name in absent:
            planned.remove.append((name, False))
            planned.removed.append(name)
        elif name in wanted and entry.kind == DIRECTORY:
            problems.append("%s is a directory where a file is wanted" % name)
        elif name in directories and entry.kind != DIRECTORY:
            problems.append("%s is not a directory, and files has a file below it" % name)
    if problems:
        raise TreeError(
            "%s: with exclusive=false, file_tree replaces and removes no directory and nothing above a "
            "wanted file; nothing was changed" % "; ".join(problems)
        )


def _plan_directories(planned, directories, entries, want):
    for name in sorted(directories, key=lambda n: (_depth(n), n)):
        entry = entries.get(name)
        if entry is None or entry.kind != DIRECTORY:
            planned.make_dirs.append(name)
            planned.added.append(name + "/")
        elif _attrs_differ(entry, want.directory_mode, want):
            planned.dir_attrs.append(name)
            planned.updated.append(name + "/")


def _plan_files(planned, wanted, entries, want):
    """A file is written where it is missing, not a regular file or of other content (a
    rename replaces a link or a FIFO, never following it); else only its attributes set."""
    for name in sorted(wanted):
        entry = entries.get(name)
        if entry is None or entry.kind == DIRECTORY:
            planned.write.append((name, wanted[name]))
            planned.added.append(name)
        elif entry.kind == OTHER or entry.size != len(wanted[name]) or entry.content != wanted[name]:
            planned.write.append((name, wanted[name]))
            planned.updated.append(name)
        elif _attrs_differ(entry, want.mode, want):
            planned.file_attrs.append(name)
            planned.updated.append(name)


# The diff: a file's text before and after (a summary over DIFF_LIMIT or not UTF-8), its
# mode and owner in the headers; a directory, or a file whose only change is its mode or
# owner, as ansible.builtin.file shows one: path, state and attributes.


def _summary(data, size=None):
    if data is None:
        return "(%d bytes, not read: over %d KiB)\n" % (size, DIFF_LIMIT // 1024)
    digest = hashlib.sha256(data).hexdigest()
    if len(data) > DIFF_LIMIT:
        return "(%d bytes, sha256 %s: over %d KiB, not shown)\n" % (len(data), digest, DIFF_LIMIT // 1024)
    return "(%d bytes, sha256 %s: not UTF-8 text, not shown)\n" % (len(data), digest)


def _text(data, size=None):
    if data is not None and len(data) <= DIFF_LIMIT:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return _summary(data, size)


def _before_text(entry):
    if entry is None or entry.kind == DIRECTORY:
        return ""
    if entry.kind == OTHER:
        if entry.target is not None:
            return "(a symbolic link to %s)\n" % entry.target
        return "(not a regular file)\n"
    return _text(entry.content, entry.size)


def _attributes(mode, uid, gid, want):
    """The attributes a header or a dict shows: mode, and owner and group where managed."""
    shown = {"mode": "%04o" % mode}
    if want.uid is not None:
        shown["owner"] = uid
    if want.gid is not None:
        shown["group"] = gid
    return shown


def _header(name, attributes):
    return "%s (%s)" % (name, ", ".join("%s %s" % item for item in sorted(attributes.items())))


def _state_diff(name, before, after):
    return {"before": dict(before, path=name), "after": dict(after, path=name)}


def plan_diff(planned, wanted, tree, want):
    """One diff entry per added, updated or removed name, in name order."""
    entries = tree.entries
    wanted_attrs = _attributes(want.mode, want.uid, want.gid, want)
    dir_attrs = dict(_attributes(want.directory_mode, want.uid, want.gid, want), state="directory")
    diffs = {}

    def old_attrs(entry):
        return _attributes(entry.mode, entry.uid, entry.gid, want)

    for name in planned.removed:
        entry = entries[name.rstrip("/")]
        if entry.kind == DIRECTORY:
            diffs[(name, 0)] = _state_diff(
                name, dict(old_attrs(entry), state="directory"), {"state": "absent"}
            )
        else:
            diffs[(name, 0)] = {
                "before_header": name if entry.kind == OTHER else _header(name, old_attrs(entry)),
                "after_header": "%s (removed)" % name,
                "before": _before_text(entry),
                "after": "",
            }
    for name in planned.added + planned.updated:
        if name.endswith("/"):
            entry = tree.root if name == ROOT else entries.get(name[:-1])
            if entry is not None and entry.kind == DIRECTORY:
                before = dict(old_attrs(entry), state="directory")
            else:
                before = {"state": "absent"}
            diffs[(name, 1)] = _state_diff(name, before, dir_attrs)
            continue
        entry = entries.get(name)
        if name in planned.file_attrs:
            diffs[(name, 1)] = _state_diff(name, old_attrs(entry), wanted_attrs)
            continue
        if entry is None or entry.kind == DIRECTORY:
            before_header = "%s (absent)" % name
        elif entry.kind == OTHER:
            before_header = name
        else:
            before_header = _header(name, old_attrs(entry))
        diffs[(name, 1)] = {
            "before_header": before_header,
            "after_header": _header(name, wanted_attrs),
            "before": _before_text(entry),
            "after": _text(wanted[name]),
        }
    return [diffs[key] for key in sorted(diffs)]


def apply(planned, path, want, io):
    """Make the plan so under path through io; ApplyError names the step that failed."""
    files = (want.mode, want.uid, want.gid)
    directories = (want.directory_mode, want.uid, want.gid)
    steps = []
    if planned.create_root:
        steps.append(("create the directory", io.make_dirs, path, directories))
    for name, is_dir in planned.remove:
        steps.append(("remove", io.remove_dir if is_dir else io.remove, os.path.join(path, name), ()))
    steps.extend(
        ("create the directory", io.make_dir, os.path.join(path, name), directories)
        for name in planned.make_dirs
    )
    steps.extend(
        ("set the mode and owner of", io.set_attrs, os.path.join(path, name) if name else path, directories)
        for name in planned.dir_attrs
    )
    steps.extend(
        ("write", io.write, os.path.join(path, name), (data, *files)) for name, data in planned.write
    )
    steps.extend(
        ("set the mode and owner of", io.set_attrs, os.path.join(path, name), files)
        for name in planned.file_attrs
    )
    for number, (what, operation, full, args) in enumerate(steps):
        try:
            operation(full, *args)
        except OSError as error:
            raise ApplyError(
                "could not %s %s: %s (%d of the plan's %d steps were done)"
                % (what, full, error, number, len(steps)),
                number,
            ) from error


class ModuleIO:
    """apply()'s io through AnsibleModule: each file through a temporary file in its own
    directory and atomic_move; modes set explicitly (umask plays no part)."""

    def __init__(self, module):
        self.module = module

    def set_attrs(self, path, mode, uid, gid):
        if uid is not None or gid is not None:
            os.lchown(path, -1 if uid is None else uid, -1 if gid is None else gid)
        os.chmod(path, mode)

    def make_dir(self, path, mode, uid, gid):
        os.mkdir(path, mode)
        self.set_attrs(path, mode, uid, gid)

    def make_dirs(self, path, mode, uid, gid):
        """path and every missing directory above it, each with the same mode and owner."""
        missing = []
        while not os.path.lexists(path):
            missing.append(path)
            path = os.path.dirname(path)
        for directory in reversed(missing):
            self.make_dir(directory, mode, uid, gid)

    def write(self, path, data, mode, uid, gid):
        directory, base = os.path.split(path)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % base, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            # atomic_move keeps the attributes of a file it replaces: set them after.
            self.module.atomic_move(tmp, path)
        finally:
            if os.path.lexists(tmp):
                os.remove(tmp)
        self.set_attrs(path, mode, uid, gid)

    def remove(self, path):
        os.remove(path)

    def remove_dir(self, path):
        os.rmdir(path)


def run(module):
    """The module's result for module.params; writes only outside check mode."""
    params = module.params
    check_path(params["path"])
    wanted = validate_files(params["files"])
    exclusive = params["exclusive"]
    absent = validate_absent(params["absent"], wanted, exclusive)
    uid, gid = resolve_owner(params["owner"], params["group"])
    want = Want(
        parse_mode(params["mode"], "mode"), parse_mode(params["directory_mode"], "directory_mode"), uid, gid
    )
    if exclusive:
        tree = read_tree(params["path"], wanted, read_small=module._diff)
    else:
        tree = read_named(params["path"], wanted, absent, read_small=module._diff)
    planned = plan(wanted, tree, want, diff=module._diff, exclusive=exclusive, absent=absent)
    if planned.changed and not module.check_mode:
        apply(planned, params["path"], want, ModuleIO(module))
    result = {
        "changed": planned.changed,
        "added": planned.added,
        "updated": planned.updated,
        "removed": planned.removed,
    }
    if module._diff:
        result["diff"] = planned.diff
    return result
