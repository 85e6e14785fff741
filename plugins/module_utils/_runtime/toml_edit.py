# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""TOML text edits: the difference between two datas applied to the user's text.

Private to the gpuops.k8s collection. Pure: text in, text out, typed errors.

tomlkit reads and writes back any file faithfully, but its structural inserts and deletes
misplace tables split into several sections (out-of-order tables, as in EKS's and CRI-O's
own files), tables defined with dotted keys, and copy header comments onto parent tables
it creates, differently in each version. So the edit is computed on plain data, and the
difference is applied to the text: new tables go in as sections with their full header
path next to their nearest relatives, new keys after the last key of their table, changed
scalars are replaced in their own line (its comment stays), removed tables lose only their
own lines. tomlkit still does what it does well: values inside inline tables and arrays.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from .errors import ConfigParseError, RuntimeConfigError
from .toml_data import diff, keypath, plain, pruned, same
from .toml_text import (
    ADDED,
    HAS_TOMLKIT,
    NOTE,
    TomlParseError,
    lex,
    note_text,
    parse_toml,
    read_toml,
    sections_text,
    toml_path,
    tomlkit,
    value_of,
    value_text,
)


def _glued_start(text, index):
    """Where the comment lines right above index (a header) begin: they belong to it."""
    start = index
    while start > 0:
        line_start = text.rfind("\n", 0, start - 1) + 1
        if not text[line_start:start].strip().startswith("#"):
            break
        start = line_start
    return start


class Mark:
    """A note nvidia_runtime left after a key: it added the key, or the value it replaced."""

    __slots__ = ("added", "raw", "value")

    def __init__(self, note):
        self.added = note == ADDED
        self.raw = note[len("was ") :] if note.startswith("was ") else None
        self.value = value_of(self.raw) if self.raw is not None else None


class _Unrendered:
    """The new text of a file that only tomlkit can write, where it is not installed."""

    def __repr__(self):
        return "UNRENDERED"


UNRENDERED = _Unrendered()


def _indent(text, index):
    line_start = text.rfind("\n", 0, index) + 1
    line = text[line_start:]
    return line[: len(line) - len(line.lstrip(" \t"))]


class _TextEdit:
    """Text edits of one TOML document, planned on its sections and applied at once."""

    def __init__(self, text, source):
        self.text, self.source = text, source
        self.sections = lex(text)
        self.stmts = [(s, stmt, s["path"] + stmt.path) for s in self.sections for stmt in s["stmts"]]
        self.cuts = []  # (start, end, replacement)
        self.inserts = {}  # index -> [("key" | "block", text)]

    def fail(self, path, why):
        raise RuntimeConfigError(
            "%s: %s %s; the file is left untouched (please report this with the file)"
            % (self.source, keypath(list(path)), why)
        )

    def stmt_over(self, path):
        """The statement whose key is path or holds it (in an inline table or array)."""
        for _section, stmt, full in self.stmts:
            if full == path[: len(full)]:
                return stmt, full
        return None, None

    def needs_tomlkit(self, op):
        """Changes inside an inline table, and arrays (their comments and layout), go through
        tomlkit, which edits those in place well."""
        kind, path, value = op
        stmt, full = self.stmt_over(path)
        if stmt is None:
            return False
        if len(full) < len(path):
            return True
        return kind == "set" and isinstance(value, list) and isinstance(stmt.value, list)

    def plain_array(self, op):
        stmt, full = self.stmt_over(op[1])
        return op[0] == "set" and full == op[1] and "#" not in self.text[stmt.equals : stmt.end]

    def section(self, path):
        for section in self.sections:
            if section["path"] == path and not section["array"]:
                return section
        return None

    def tail(self, section):
        """Where text after a section goes: past its keys and the lines that follow them,
        but before the comment lines that sit right above the next header."""
        later = [
            s["header"]
            for s in self.sections
            if s is not section and s["header"] is not None and s["header"] >= section["end"]
        ]
        if not later:
            return len(self.text)
        return max(_glued_start(self.text, min(later)), section["end"])

    def insert(self, index, kind, text):
        self.inserts.setdefault(index, []).append((kind, text))

    def line_end(self, stmt):
        """Where a statement's last line ends, before its line break."""
        end = stmt.end
        while end > stmt.start and self.text[end - 1] in "\r\n":
            end -= 1
        return end

    def marks(self):
        """{key path: Mark} for the statements that end with nvidia_runtime's note."""
        found = {}
        for _section, stmt, full in self.stmts:
            if stmt.comment is not None:
                line = self.text[stmt.comment : self.line_end(stmt)]
                at = line.rfind(NOTE.lstrip())
                if at >= 0:
                    found[full] = Mark(line[at + len(NOTE.lstrip()) :])
        return found

    def add_key(self, section, rel_path, value, note=None):
        if section["stmts"]:
            where = section["stmts"][-1]
            index, indent = section["end"], _indent(self.text, where.start)
        elif section["header"] is not None:
            index, indent = section["end"], _indent(self.text, section["header"])
        else:
            index, indent = self.tail(section), ""
        self.insert(
            index,
            "key",
            "%s%s = %s%s\n" % (indent, toml_path(rel_path), value_text(value), note_text(note)),
        )

    def add_block(self, path, table, notes=None):
        """New sections for the table at path, next to their nearest relatives."""
        block = "\n".join(sections_text(path, table, notes))
        headers = [s for s in self.sections if s["header"] is not None]
        below = [s for s in headers if s["path"][: len(path)] == path]
        if below:
            self.insert(_glued_start(self.text, below[0]["header"]), "block", block)
            return
        best, near = 0, None
        for section in headers:
            common = 0
            while common < min(len(path), len(section["path"])) and path[common] == section["path"][common]:
                common += 1
            if common and common >= best:
                best, near = common, section
        self.insert(self.tail(near) if near else len(self.text), "block", block)

    def add(self, path, value, notes):
        """Add the key at path; notes: {key path: note} for the keys to note (see NOTE)."""
        parent, key = path[:-1], path[-1]
        if isinstance(value, dict):
            self.add_block(path, value, notes)
            return
        note = notes.get(path)
        section = self.section(parent) if parent else self.sections[0]
        if section is not None:
            self.add_key(section, (key,), value, note)
            return
        # The parent is implicit (made by its sub-tables' headers) or made by dotted keys in
        # the section of its nearest ancestor with a header.
        for depth in range(len(parent) - 1, -1, -1):
            ancestor = self.section(parent[:depth]) if depth else self.sections[0]
            if ancestor is None:
                continue
            rel = parent[depth:]
            if any(stmt.path[: len(rel)] == rel and len(stmt.path) > len(rel) for stmt in ancestor["stmts"]):
                self.add_key(ancestor, (*rel, key), value, note)
                return
            break
        self.add_block(parent, {key: value}, notes)

    def set(self, path, value, remember=False):
        """Replace the value at path in its line (its comment stays). remember: note the old
        value after it, unless a note is there; a value set back to the one a note holds is
        written as it was, and the note goes."""
        stmt, full = self.stmt_over(path)
        if stmt is None or full != path:
            self.fail(path, "was not found where expected")
        start, line_end = stmt.equals + 1, self.line_end(stmt)
        value_end = stmt.comment if stmt.comment is not None else line_end
        segment = self.text[start:value_end]
        lead = segment[: len(segment) - len(segment.lstrip())]
        old = segment.strip()
        rest = segment[len(lead) + len(old) :] + self.text[value_end:line_end]
        new = value_text(value)
        mark = self.marks().get(path) if NOTE in rest else None
        if mark is not None and not mark.added and mark.value is not None and same(value, mark.value):
            new, rest = mark.raw, rest[: rest.rfind(NOTE)]
        elif remember and mark is None and "\n" not in old:
            rest += note_text("was " + old)
        self.cuts.append((start, line_end, lead + new + rest))

    def delete(self, path):
        for section, stmt, full in self.stmts:
            if full[: len(path)] == path and section["path"][: len(path)] != path:
                self.cuts.append((stmt.start, stmt.end, ""))
        for section in self.sections:
            if section["header"] is None or section["path"][: len(path)] != path:
                continue
            start, end = section["header"], section["end"]
            after = self.text[end:]
            if not after.strip() or after.startswith(("\n", "\r\n")):
                while start > 0 and self.text[self.text.rfind("\n", 0, start - 1) + 1 : start].strip() == "":
                    start = self.text.rfind("\n", 0, start - 1) + 1
            self.cuts.append((start, end, ""))

    def render(self):
        edits = list(self.cuts)
        for index, items in self.inserts.items():
            before = self.text[:index]
            chunk = "" if not before or before.endswith("\n") else "\n"
            chunk += "".join(text for kind, text in items if kind == "key")
            blocks = [text for kind, text in items if kind == "block"]
            if blocks:
                if (before + chunk) and not (before + chunk).endswith("\n\n"):
                    chunk += "\n"
                chunk += "\n".join(blocks)
                if self.text[index : index + 1] not in ("", "\n", "\r"):
                    chunk += "\n"
            edits.append((index, index, chunk))
        edits.sort(key=lambda edit: (edit[0], edit[1]))
        for (_s1, e1, _r1), (s2, _e2, _r2) in zip(edits, edits[1:]):
            if s2 < e1:
                raise RuntimeConfigError(
                    "%s: overlapping edits; the file is left untouched (please report this with the file)"
                    % self.source
                )
        text = self.text
        for start, end, replacement in reversed(edits):
            text = text[:start] + replacement + text[end:]
        return text


def _is_inline(node):
    return HAS_TOMLKIT and isinstance(node, tomlkit.items.InlineTable)


def _inline(value):
    """A tomlkit inline table of plain data: what a child of an inline table must be."""
    table = tomlkit.inline_table()
    for key, item in value.items():
        table[key] = _inline(item) if isinstance(item, dict) else item
    return table


def _set_table(parent, key, value):
    """parent[key] = value (plain dict), inline when parent is an inline table."""
    parent[key] = _inline(value) if _is_inline(parent) else value


def _tomlkit_op(doc, op, source):
    kind, path, value = op
    try:
        node = doc
        for key in path[:-1]:
            node = node[key]
        key = path[-1]
        if kind == "del":
            del node[key]
            return
        old = plain(node.get(key)) if kind == "set" else None
        if isinstance(old, list) and isinstance(value, list) and hasattr(node[key], "append"):
            array = node[key]
            if same(value[: len(old)], old):
                for item in value[len(old) :]:
                    array.append(item)
                return
            if len(value) < len(old):
                keep, drop = 0, []
                for index, item in enumerate(old):
                    if keep < len(value) and same(item, value[keep]):
                        keep += 1
                    else:
                        drop.append(index)
                if keep == len(value):
                    for index in reversed(drop):
                        del array[index]
                    return
        _set_table(node, key, value) if isinstance(value, dict) else node.__setitem__(key, value)
    except (KeyError, TypeError, ValueError, AttributeError, TomlParseError) as error:
        raise RuntimeConfigError(
            "%s: cannot edit %s with tomlkit %s (%s); the file is left untouched"
            % (source, keypath(list(path)), getattr(tomlkit, "__version__", "?"), error)
        ) from error


def edit_toml(text, source, edit, remember=()):
    """Run edit(root, new_table, marks) on a plain copy of the file's data, apply the
    difference to the text, and check that the new text parses to exactly the intended data.

    remember: the key paths whose previous state state=absent must give back (a default
    runtime, an imports line): a key this edit adds is noted "added", a value it changes
    "was <the old text>"; marks ({key path: Mark}) are the notes the text holds. Returns
    (new text, data before, data after); the new text is UNRENDERED where only tomlkit can
    write it and it is not installed (check mode on a fresh node; the data are exact).
    """
    before = read_toml(text, source)
    plan = _TextEdit(text, source) if NOTE.strip() in text else None
    expected = copy.deepcopy(before)
    edit(expected, dict, plan.marks() if plan else {})
    if same(expected, before):
        return text, before, before  # nothing to change: keep the user's bytes
    ops = diff(before, expected)
    plan = plan or _TextEdit(text, source)
    structural = [op for op in ops if plan.needs_tomlkit(op)]
    if structural and not HAS_TOMLKIT:
        return UNRENDERED, before, expected
    if structural:
        try:
            doc = parse_toml(text, source)
        except ConfigParseError:
            # This tomlkit refuses or misreads the file: an array without comments can be
            # written anew in its line; anything else is refused, the file untouched.
            if not all(plan.plain_array(op) for op in structural):
                raise
            structural = []
    if structural:
        for op in structural:
            _tomlkit_op(doc, op, source)
        plan = _TextEdit(tomlkit.dumps(doc), source)
    for kind, path, value in (op for op in ops if not any(op is done for done in structural)):
        if kind == "add":
            plan.add(path, value, {p: ADDED for p in remember if p[: len(path)] == path})
        elif kind == "set":
            plan.set(path, value, path in remember)
        else:
            plan.delete(path)
    after_text = plan.render()
    after = read_toml(after_text, source + " (as rewritten)")
    # An edit can leave a table empty, and a new table with nothing in it is not written;
    # to the runtimes an empty table and no table read the same.
    if not same(pruned(after), pruned(expected)):
        raise RuntimeConfigError(
            "%s: the structural edit would not give the intended configuration; the file is left "
            "untouched (please report this with the file)" % source
        )
    return after_text, before, after
