# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Declare the NVIDIA runtime in containerd, Docker and CRI-O configuration, structurally.

Private to the gpuops.k8s collection. Pure: text in, text out, typed errors. The TOML
edits go through tomlkit so every other key, table, comment and the user's order stay;
each result is parsed back and must equal the intended data, or nothing is written.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import math
import re
import traceback

try:
    import tomlkit
    from tomlkit.exceptions import TOMLKitError as TomlParseError

    HAS_TOMLKIT = True
    TOMLKIT_IMPORT_ERROR = None
except ImportError:
    tomlkit = None
    TomlParseError = ValueError
    HAS_TOMLKIT = False
    TOMLKIT_IMPORT_ERROR = traceback.format_exc()

try:
    import tomllib  # Python >= 3.11: reads TOML, cannot write it
except ImportError:
    tomllib = None

# The CRI plugin's runtime table, by containerd config version (what nvidia-ctk uses).
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
RUNC_TYPE = "io.containerd.runc.v2"
DEFAULT_RUNTIME = "runc"  # what containerd, Docker and CRI-O fall back to


class RuntimeConfigError(Exception):
    """The configuration cannot be edited as asked; the file must stay untouched."""


class ConfigParseError(RuntimeConfigError):
    pass


class ConfigShapeError(RuntimeConfigError):
    pass


class UnsupportedOption(RuntimeConfigError):
    pass


# A RuntimeClass handler must be a DNS label, and the runtime name is its handler.
_RUNTIME_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def validate_spec(spec, paths):
    """Reject bad input before any file is read: name the field, the value, what is valid."""
    if not _RUNTIME_NAME.match(spec["runtime_name"] or ""):
        raise UnsupportedOption(
            "runtime_name=%r: must be a DNS label (lower-case letters, digits and '-', at most 63, "
            "starting and ending with a letter or digit), because it is the RuntimeClass handler"
            % spec["runtime_name"]
        )
    for field, value in sorted(paths.items()):
        if value is not None and not value.startswith("/"):
            raise UnsupportedOption("%s=%r: must be an absolute path" % (field, value))


def _keypath(keys):
    return ".".join('"%s"' % k if re.search(r"[^A-Za-z0-9_-]", k) else k for k in keys)


def _type_name(value):
    if isinstance(value, dict):
        return "table"
    return {str: "string", bool: "boolean", int: "integer", float: "float", list: "array"}.get(
        type(value.unwrap() if hasattr(value, "unwrap") else value), type(value).__name__
    )


def _walk(root, keys, source, new_table=None, base=()):
    """Return the table at keys; create missing ones with new_table, or return None.
    base: the keys that lead to root, so errors name the whole path."""
    node = root
    for depth, key in enumerate(keys):
        if key not in node:
            if new_table is None:
                return None
            node[key] = _inline({}) if _is_inline(node) else new_table()
        child = node[key]
        if not isinstance(child, dict):
            raise ConfigShapeError(
                "%s: %s is a %s; expected a table, so the file is left untouched"
                % (source, _keypath(list(base) + list(keys[: depth + 1])), _type_name(child))
            )
        node = child
    return node


def _apply_default(table, key, name, set_as_default, reset_value=DEFAULT_RUNTIME):
    """set_as_default: True makes name the default; False (or removing the runtime) puts
    a default naming it back to runc; None leaves the user's choice alone.
    reset_value None deletes the key instead (Docker's default needs no entry)."""
    current = _plain(table.get(key))
    if set_as_default is True and current != name:
        table[key] = name
    elif set_as_default is False and current == name:
        if reset_value is None:
            del table[key]
        else:
            table[key] = reset_value


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


def _plain(value):
    """tomlkit item or plain value -> plain Python data (a deep copy)."""
    return copy.deepcopy(value.unwrap() if hasattr(value, "unwrap") else value)


# ---------------------------------------------------------------------------- TOML


# ------------------------------------------------------------- TOML text edits
#
# tomlkit reads and writes back any file faithfully, but its structural inserts and deletes
# misplace tables split into several sections (out-of-order tables, as in EKS's and CRI-O's
# own files), tables defined with dotted keys, and copy header comments onto parent tables
# it creates, differently in each version. So the edit is computed on plain data, and the
# difference is applied to the text: new tables go in as sections with their full header
# path next to their nearest relatives, new keys after the last key of their table, changed
# scalars are replaced in their own line (its comment stays), removed tables lose only their
# own lines. tomlkit still does what it does well: values inside inline tables and arrays.

_NAN = object()  # stands for any NaN float: NaN != NaN would make every file "changed"


def _canon(data):
    """data with NaN floats replaced by one marker, so equal data compares equal."""
    if isinstance(data, dict):
        return {key: _canon(value) for key, value in data.items()}
    if isinstance(data, list):
        return [_canon(value) for value in data]
    if isinstance(data, float) and math.isnan(data):
        return _NAN
    return data


def _same(left, right):
    return _canon(left) == _canon(right)


def _loads(text):
    """Plain data of a TOML snippet (a header or one statement)."""
    if tomllib is not None:
        return tomllib.loads(text)
    return tomlkit.parse(text).unwrap()


def _read(text, source):
    """Plain data of a TOML file: Python's parser where it exists (some tomlkit versions
    misread or refuse valid files with split tables), else tomlkit. Errors name the line."""
    if tomllib is None:
        return parse_toml(text, source).unwrap()
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        if HAS_TOMLKIT:
            parse_toml(text, source)  # tomlkit names line and column the same on every Python
        raise ConfigParseError("%s: %s; the file is left untouched" % (source, error)) from error


def _scan(text, start, stop_at_newline):  # noqa: PLR0912 - one state machine
    """Scan TOML text from start, outside strings and brackets. Returns (end, equals, comment):
    end: the index after the statement (its newline included), equals: the first '=' at depth
    0, comment: the index of the comment that ends the statement's last line, or None."""
    depth, mode, index, equals, comment = 0, None, start, None, None
    length = len(text)
    while index < length:
        char = text[index]
        if mode is None:
            if char == "#":
                comment = index
                newline = text.find("\n", index)
                index = length if newline < 0 else newline
                continue
            if char == "\n":
                if depth <= 0 or stop_at_newline:
                    return index + 1, equals, comment
                comment = None
            elif text.startswith('"""', index) or text.startswith("'''", index):
                mode = text[index] * 3
                index += 3
                continue
            elif char in "\"'":
                mode = char
            elif char in "[{":
                depth += 1
            elif char in "]}":
                depth -= 1
            elif char == "=" and equals is None and depth == 0:
                equals = index
        elif mode in ('"', '"""') and char == "\\":
            index += 2
            continue
        elif len(mode) == 3 and text.startswith(mode, index):
            index += 3
            while index < length and text[index] == mode[0]:
                index += 1  # up to two quotes right before the closing ones are content
            mode = None
            continue
        elif len(mode) == 1 and char == mode:
            mode = None
        index += 1
    return length, equals, comment


def _first_path(data):
    """The key path a header or a key alone defines: ('a', 'b') for [a.b], [[a.b]] or a.b = 0."""
    path = ()
    while isinstance(data, dict) and len(data) == 1:
        key = next(iter(data))
        path += (key,)
        data = data[key]
        if isinstance(data, list) and len(data) == 1:
            data = data[0]
    return path


class _Stmt:
    """One key = value statement: its span in the text, its key path relative to its section,
    the '=' and the comment that ends it (indexes into the text, or None), and its value."""

    __slots__ = ("comment", "end", "equals", "path", "start", "value")


def _lex(text):
    """The sections of a TOML text, the root first: dicts with path (a tuple; () for the
    root), array ([[...]]), header (its index; None for the root), stmts, and end (where the
    section's last key ends; after the header when it has none)."""
    sections = [{"path": (), "array": False, "header": None, "stmts": [], "end": 0}]
    index, length = 0, len(text)
    while index < length:
        line_end = text.find("\n", index)
        line_end = length if line_end < 0 else line_end + 1
        stripped = text[index:line_end].strip()
        if not stripped or stripped.startswith("#"):
            index = line_end
            continue
        end, _equals, comment = _scan(text, index, stripped.startswith("["))
        if stripped.startswith("["):
            header = text[index : comment if comment is not None else end].strip()
            sections.append(
                {
                    "path": _first_path(_loads(header + "\n")),
                    "array": header.startswith("[["),
                    "header": index,
                    "stmts": [],
                    "end": end,
                }
            )
        else:
            stmt = _Stmt()
            stmt.start, stmt.end, stmt.equals, stmt.comment = index, end, _equals, comment
            stmt.path = _first_path(_loads(text[index:_equals] + "= 0\n"))
            value = _loads(text[index:end].rstrip("\n") + "\n")
            for key in stmt.path:
                value = value[key]
            stmt.value = value
            sections[-1]["stmts"].append(stmt)
            sections[-1]["end"] = end
        index = end
    return sections


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_string(value):
    # JSON's escapes are TOML's; DEL must be escaped in TOML too.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml_path(keys):
    return ".".join(key if _BARE_KEY.match(key) else _toml_string(key) for key in keys)


def _value_text(value):  # noqa: PLR0911 - one return per TOML type
    """Plain data -> a TOML value, on one line."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, dict):
        return "{%s}" % ", ".join("%s = %s" % (_toml_path([k]), _value_text(v)) for k, v in value.items())
    if isinstance(value, list):
        return "[%s]" % ", ".join(_value_text(item) for item in value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)  # int


def _sections_text(path, table):
    """A new table as header sections with full paths: [path] with its keys, then its tables."""
    keys = [(k, v) for k, v in table.items() if not isinstance(v, dict)]
    tables = [(k, v) for k, v in table.items() if isinstance(v, dict)]
    out = []
    if keys or not tables:
        out.append(
            "[%s]\n" % _toml_path(path)
            + "".join("%s = %s\n" % (_toml_path([k]), _value_text(v)) for k, v in keys)
        )
    for key, value in tables:
        out.extend(_sections_text((*path, key), value))
    return out


def _diff(old, new, path=()):
    """The changes from old to new data: (op, key path, new value), op in add, set, del."""
    ops = [("del", (*path, key), None) for key in old if key not in new]
    for key, value in new.items():
        if key not in old:
            ops.append(("add", (*path, key), value))
        elif isinstance(value, dict) and isinstance(old[key], dict):
            ops.extend(_diff(old[key], value, (*path, key)))
        elif not _same(old[key], value):
            ops.append(("set", (*path, key), value))
    return ops


def _glued_start(text, index):
    """Where the comment lines right above index (a header) begin: they belong to it."""
    start = index
    while start > 0:
        line_start = text.rfind("\n", 0, start - 1) + 1
        if not text[line_start:start].strip().startswith("#"):
            break
        start = line_start
    return start


def _indent(text, index):
    line_start = text.rfind("\n", 0, index) + 1
    line = text[line_start:]
    return line[: len(line) - len(line.lstrip(" \t"))]


class _TextEdit:
    """Text edits of one TOML document, planned on its sections and applied at once."""

    def __init__(self, text, source):
        self.text, self.source = text, source
        self.sections = _lex(text)
        self.stmts = [(s, stmt, s["path"] + stmt.path) for s in self.sections for stmt in s["stmts"]]
        self.cuts = []  # (start, end, replacement)
        self.inserts = {}  # index -> [("key" | "block", text)]

    def fail(self, path, why):
        raise RuntimeConfigError(
            "%s: %s %s; the file is left untouched (please report this with the file)"
            % (self.source, _keypath(list(path)), why)
        )

    def stmt_over(self, path):
        """The statement whose key is path or holds it (in an inline table or array)."""
        for _section, stmt, full in self.stmts:
            if full == path[: len(full)]:
                return stmt, full
        return None, None

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

    def add_key(self, section, rel_path, value):
        if section["stmts"]:
            where = section["stmts"][-1]
            index, indent = section["end"], _indent(self.text, where.start)
        elif section["header"] is not None:
            index, indent = section["end"], _indent(self.text, section["header"])
        else:
            index, indent = self.tail(section), ""
        self.insert(index, "key", "%s%s = %s\n" % (indent, _toml_path(rel_path), _value_text(value)))

    def add_block(self, path, table):
        """New sections for the table at path, next to their nearest relatives."""
        block = "\n".join(_sections_text(path, table))
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

    def add(self, path, value):
        parent, key = path[:-1], path[-1]
        if isinstance(value, dict):
            self.add_block(path, value)
            return
        section = self.section(parent) if parent else self.sections[0]
        if section is not None:
            self.add_key(section, (key,), value)
            return
        # The parent is implicit (made by its sub-tables' headers) or made by dotted keys in
        # the section of its nearest ancestor with a header.
        for depth in range(len(parent) - 1, -1, -1):
            ancestor = self.section(parent[:depth]) if depth else self.sections[0]
            if ancestor is None:
                continue
            rel = parent[depth:]
            if any(stmt.path[: len(rel)] == rel and len(stmt.path) > len(rel) for stmt in ancestor["stmts"]):
                self.add_key(ancestor, (*rel, key), value)
                return
            break
        self.add_block(parent, {key: value})

    def set(self, path, value):
        stmt, full = self.stmt_over(path)
        if stmt is None or full != path:
            self.fail(path, "was not found where expected")
        start = stmt.equals + 1
        end = stmt.comment if stmt.comment is not None else stmt.end
        segment = self.text[start:end]
        lead = segment[: len(segment) - len(segment.lstrip())]
        trail = segment[len(segment.rstrip()) :]
        self.cuts.append((start, end, lead + _value_text(value) + trail))

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


def _needs_tomlkit(plan, op):
    """Changes inside an inline table, and arrays (their comments and layout), go through
    tomlkit, which edits those in place well."""
    kind, path, value = op
    stmt, full = plan.stmt_over(path)
    if stmt is None:
        return False
    if len(full) < len(path):
        return True
    return kind == "set" and isinstance(value, list) and isinstance(stmt.value, list)


def _plain_array(plan, op):
    stmt, full = plan.stmt_over(op[1])
    return op[0] == "set" and full == op[1] and "#" not in plan.text[stmt.equals : stmt.end]


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
        old = _plain(node.get(key)) if kind == "set" else None
        if isinstance(old, list) and isinstance(value, list) and hasattr(node[key], "append"):
            array = node[key]
            if _same(value[: len(old)], old):
                for item in value[len(old) :]:
                    array.append(item)
                return
            if len(value) < len(old):
                keep, drop = 0, []
                for index, item in enumerate(old):
                    if keep < len(value) and _same(item, value[keep]):
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
            % (source, _keypath(list(path)), getattr(tomlkit, "__version__", "?"), error)
        ) from error


def parse_toml(text, source):
    if not HAS_TOMLKIT:
        raise RuntimeConfigError("tomlkit is required to edit %s" % source)
    try:
        doc = tomlkit.parse(text)
    except TomlParseError as error:
        line, col = getattr(error, "line", None), getattr(error, "col", None)
        reason = re.sub(r" at line \d+ col \d+$", "", str(error))
        raise ConfigParseError(
            "%s line %s, column %s: %s; the file is left untouched" % (source, line, col, reason)
        ) from error
    if tomllib is not None:
        # Some tomlkit versions (Debian 12's 0.11.7 among them) misread valid files whose
        # tables are split into several sections; editing such a reading would silently
        # drop settings. Python's own parser is the reference: refuse when they disagree.
        try:
            reference = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ConfigParseError("%s: %s; the file is left untouched" % (source, error)) from error
        if not _same(doc.unwrap(), reference):
            raise ConfigParseError(
                "%s: tomlkit %s reads this file differently from Python's TOML parser (a table "
                "split into several sections?); the file is left untouched: merge the split "
                "sections or use a newer tomlkit" % (source, getattr(tomlkit, "__version__", "?"))
            )
    return doc


def containerd_version(data, default, source):
    """The config version containerd will read: explicit, else 1, or `default` if empty."""
    if "version" not in data:
        return default if not data else 1
    version = _plain(data["version"])
    if isinstance(version, bool) or not isinstance(version, int) or version not in CRI_PLUGIN:
        raise ConfigShapeError(
            "%s: version = %r; containerd config versions are 1, 2 and 3" % (source, version)
        )
    return version


def _containerd_edit(root, version, spec, source, new_table):
    """Apply spec to a containerd config (tomlkit document or plain dict)."""
    name = spec["runtime_name"]
    present = spec["state"] == "present"
    cri_keys = ["plugins", CRI_PLUGIN[version]]
    cri = _walk(root, cri_keys, source, new_table if present else None)
    if cri is None:
        return
    containerd = _walk(cri, ["containerd"], source, new_table if present else None, base=cri_keys)
    if containerd is None:
        return
    containerd_keys = [*cri_keys, "containerd"]
    runtimes = _walk(containerd, ["runtimes"], source, new_table if present else None, base=containerd_keys)
    if spec["enable_cdi"] is not None and present:
        if version == 1:
            raise UnsupportedOption(
                "%s: enable_cdi needs containerd config version 2 or 3 (this file is version 1)" % source
            )
        if _plain(cri.get("enable_cdi")) is not spec["enable_cdi"]:
            cri["enable_cdi"] = spec["enable_cdi"]
    default_name = _default_name(containerd, "default_runtime_name", source, containerd_keys)
    if not present:
        if runtimes is not None and name in runtimes:
            del runtimes[name]
        _apply_default(containerd, "default_runtime_name", name, False)
        return
    if name in runtimes:
        entry = _walk(runtimes, [name], source, base=[*containerd_keys, "runtimes"])
        if "runtime_type" not in entry:
            entry["runtime_type"] = RUNC_TYPE
        options = _walk(entry, ["options"], source, new_table, base=[*containerd_keys, "runtimes", name])
        if _plain(options.get("BinaryName")) != spec["runtime_path"]:
            options["BinaryName"] = spec["runtime_path"]
    else:
        # Like nvidia-ctk: start from the runtime containerd uses now (runc's cgroup and
        # other options carry over, SystemdCgroup above all) and swap the binary.
        entry = _copy_of_default(runtimes, default_name, name)
        entry.setdefault("runtime_type", RUNC_TYPE)
        options = entry.get("options")
        entry["options"] = dict(options) if isinstance(options, dict) else {}
        entry["options"]["BinaryName"] = spec["runtime_path"]
        _set_table(runtimes, name, entry)
    _apply_default(containerd, "default_runtime_name", name, spec["set_as_default"])


def _default_name(table, key, source, keys):
    """The default runtime's name, or None; anything but a string is an error."""
    value = _plain(table.get(key))
    if value is not None and not isinstance(value, str):
        raise ConfigShapeError(
            "%s: %s is a %s; expected a string" % (source, _keypath([*keys, key]), _type_name(value))
        )
    return value


def _copy_of_default(runtimes, default_name, name):
    """A plain copy of the runtime the engine uses now (its default, else runc), the
    starting point of a new runtime entry; {} when there is none to copy."""
    base = runtimes.get(default_name if default_name not in (None, name) else DEFAULT_RUNTIME)
    entry = _plain(base) if isinstance(base, dict) else {}
    options = entry.get("options")
    if isinstance(options, dict):
        # The copied runtime's own binary must not survive in any spelling (Kubespray
        # writes binaryName): the new entry's BinaryName is the only one.
        entry["options"] = {k: v for k, v in options.items() if str(k).lower() != "binaryname"}
    return entry


def _crio_edit(root, spec, source, new_table):
    name = spec["runtime_name"]
    present = spec["state"] == "present"
    if spec["enable_cdi"] is not None:
        raise UnsupportedOption("enable_cdi does not apply to CRI-O: CDI is always on since CRI-O 1.24")
    runtime = _walk(root, ["crio", "runtime"], source, new_table if present else None)
    if runtime is None:
        return
    runtimes = _walk(runtime, ["runtimes"], source, new_table if present else None, base=["crio", "runtime"])
    default_name = _default_name(runtime, "default_runtime", source, ["crio", "runtime"])
    if not present:
        if runtimes is not None and name in runtimes:
            del runtimes[name]
        _apply_default(runtime, "default_runtime", name, False)
        return
    if name not in runtimes:
        entry = _copy_of_default(runtimes, default_name, name)
        entry.pop("runtime_path", None)
        entry.setdefault("runtime_type", "oci")
        _set_table(runtimes, name, entry)
    entry = _walk(runtimes, [name], source, base=["crio", "runtime", "runtimes"])
    if _plain(entry.get("runtime_path")) != spec["runtime_path"]:
        entry["runtime_path"] = spec["runtime_path"]
    if "runtime_type" not in entry:
        entry["runtime_type"] = "oci"
    _apply_default(runtime, "default_runtime", name, spec["set_as_default"])


def _pruned(data):
    """data without empty tables, recursively."""
    if not isinstance(data, dict):
        return data
    pruned = {key: _pruned(value) for key, value in data.items()}
    return {key: value for key, value in pruned.items() if value != {}}


def _super_table():
    return tomlkit.table(is_super_table=True)


def _edit_toml(text, source, edit):
    """Run edit(root, new_table) on a plain copy of the file's data, apply the difference to
    the text, and check that the new text parses to exactly the intended data."""
    if not HAS_TOMLKIT:
        raise RuntimeConfigError("tomlkit is required to edit %s" % source)
    before = _read(text, source)
    expected = copy.deepcopy(before)
    edit(expected, dict)
    if _same(expected, before):
        return text, before, before  # nothing to change: keep the user's bytes
    ops = _diff(before, expected)
    plan = _TextEdit(text, source)
    structural = [op for op in ops if _needs_tomlkit(plan, op)]
    if structural:
        try:
            doc = parse_toml(text, source)
        except ConfigParseError:
            # This tomlkit refuses or misreads the file: an array without comments can be
            # written anew in its line; anything else is refused, the file untouched.
            if not all(_plain_array(plan, op) for op in structural):
                raise
            structural = []
    if structural:
        for op in structural:
            _tomlkit_op(doc, op, source)
        plan = _TextEdit(tomlkit.dumps(doc), source)
    for op in ops:
        if not any(op is done for done in structural):
            {"add": plan.add, "set": plan.set, "del": lambda path, _value: plan.delete(path)}[op[0]](
                op[1], op[2]
            )
    after_text = plan.render()
    after = _read(after_text, source + " (as rewritten)")
    # An edit can leave a table empty, and a new table with nothing in it is not written;
    # to the runtimes an empty table and no table read the same.
    if not _same(_pruned(after), _pruned(expected)):
        raise RuntimeConfigError(
            "%s: the structural edit would not give the intended configuration; the file is left "
            "untouched (please report this with the file)" % source
        )
    return after_text, before, after


def containerd_in_place(text, spec, source, default_version=2):
    """Return (new_text, before_data, after_data, version) for an in-place edit."""
    data = _read(text, source)
    version = containerd_version(data, default_version, source)

    def edit(root, new_table):
        # An empty or new file gets the version it is written for; absent adds nothing.
        if spec["state"] == "present" and "version" not in root and version != 1:
            root["version"] = version
        _containerd_edit(root, version, spec, source, new_table)

    new_text, before, after = _edit_toml(text, source, edit)
    return new_text, before, after, version


def _runtime_entry(data, cri_name, name):
    """A copy of the runtime entry name in a containerd config's data, or None."""
    node = data
    for key in ("plugins", cri_name, "containerd", "runtimes", name):
        node = node.get(key) if isinstance(node, dict) else None
    return copy.deepcopy(node) if isinstance(node, dict) else None


def containerd_drop_in(
    main_text, drop_in_text, spec, *, main_source, drop_in_source, drop_in_path, default_version=2
):
    """Drop-in mode: the main file imports drop_in_path, and the drop-in holds the CRI table.

    containerd 1.6 and 1.7 merge imports per plugin (the drop-in's CRI table replaces the
    main file's whole CRI table), so the drop-in carries a copy of the main file's CRI
    table plus the runtime; 2.x merges deeply and reads the same file the same way. The
    copy is recomputed from the main file on every run, so edits there carry over.
    Returns (main_text, drop_in_text or None to remove it, before, after, version).
    """
    main = _read(main_text, main_source)
    version = containerd_version(main, default_version, main_source)
    drop_before = _read(drop_in_text, drop_in_source)  # an unparsable drop-in is reported, not replaced
    present = spec["state"] == "present"

    def main_edit(root, new_table):
        if present:
            # The runtime lives in the drop-in: an entry left by an earlier in-place run
            # moves there; the main file's default_runtime_name is the user's to keep.
            runtimes = _walk(root, ["plugins", CRI_PLUGIN[version], "containerd", "runtimes"], main_source)
            if runtimes is not None and spec["runtime_name"] in runtimes:
                del runtimes[spec["runtime_name"]]
        else:
            _containerd_edit(root, version, dict(spec, enable_cdi=None), main_source, None)
        imports = root.get("imports")
        if imports is not None and not isinstance(imports, list):
            raise ConfigShapeError(
                "%s: imports is a %s; expected an array" % (main_source, _type_name(imports))
            )
        listed = [str(i) for i in (imports or [])]
        if present and drop_in_path not in listed:
            if imports is None:
                root["imports"] = [drop_in_path]
            else:
                imports.append(drop_in_path)
        elif not present and drop_in_path in listed:
            imports.remove(drop_in_path)
            if not imports:
                del root["imports"]
        if present and "version" not in root and version != 1:
            root["version"] = version

    main_after_text, main_before, main_after = _edit_toml(main_text, main_source, main_edit)
    if not present:
        return main_after_text, None, (main_before, drop_before), (main_after, {}), version
    cri_name = CRI_PLUGIN[version]
    drop = {"version": version} if version != 1 else {}
    cri = _plain(main_after.get("plugins", {}).get(cri_name, {}))
    drop["plugins"] = {cri_name: cri}
    # An entry made by an earlier in-place run moves here with all its settings, and one
    # already in the drop-in stays as it is (like an in-place entry): only its binary and
    # type are ensured. Only a new entry starts from a copy of the default runtime.
    entry = _runtime_entry(main, cri_name, spec["runtime_name"])
    if entry is None:
        entry = _runtime_entry(drop_before, cri_name, spec["runtime_name"])
    runtimes = cri
    for key in ("containerd", "runtimes"):
        runtimes = runtimes.setdefault(key, {}) if isinstance(runtimes, dict) else None
    if entry is not None and isinstance(runtimes, dict):
        runtimes[spec["runtime_name"]] = entry
    _containerd_edit(drop, version, spec, drop_in_source, dict)
    drop_doc = tomlkit.document()
    drop_doc.add(tomlkit.comment("Managed by gpuops.k8s nvidia_runtime: the NVIDIA runtime, over a copy"))
    drop_doc.add(
        tomlkit.comment("of %s's CRI plugin table (containerd < 2 merges imports per plugin)." % main_source)
    )
    drop_doc.add(tomlkit.comment("Edit %s instead: this file is rewritten from it." % main_source))
    for key, value in drop.items():
        drop_doc[key] = value
    drop_text = tomlkit.dumps(drop_doc)
    if not _same(_read(drop_text, drop_in_source), drop):
        raise RuntimeConfigError("%s: rendering the drop-in lost data; nothing written" % drop_in_source)
    return main_after_text, drop_text, (main_before, drop_before), (main_after, drop), version


def predict_without_tomlkit(runtime, text, spec, source, default_version=2):
    """Check mode on a node where tomlkit is not installed yet (the role installs it in
    the same run): read with the standard library and apply the same edit to plain data.
    Returns (changed, config_version); the new text itself cannot be rendered."""
    if tomllib is None:
        raise RuntimeConfigError("%s: tomlkit (or Python >= 3.11) is needed to read TOML" % source)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ConfigParseError("%s: %s; the file is left untouched" % (source, error)) from error
    before = copy.deepcopy(data)
    if runtime == "crio":
        _crio_edit(data, spec, source, dict)
        return not _same(data, before), None
    version = containerd_version(data, default_version, source)
    if spec["state"] == "present" and "version" not in data and version != 1:
        data["version"] = version
    _containerd_edit(data, version, spec, source, dict)
    return not _same(data, before), version


def crio_edit(text, spec, source):
    """Return (new_text, before, after) for a CRI-O TOML file (crio.conf or a drop-in)."""
    return _edit_toml(text, source, lambda root, new_table: _crio_edit(root, spec, source, new_table))


# ---------------------------------------------------------------------------- Docker


def _json_indent(text):
    match = re.search(r"^[{\[][^\S\n]*\n([ \t]+)\S", text, re.MULTILINE)
    if not match:
        return 2
    indent = match.group(1)
    return "\t" if indent.startswith("\t") else len(indent)


def parse_json(text, source):
    """daemon.json -> dict ({} for an empty or missing file), with errors naming the line."""
    try:
        data = json.loads(text) if text.strip() else {}
    except ValueError as error:
        raise ConfigParseError(
            "%s line %s, column %s: %s; the file is left untouched"
            % (
                source,
                getattr(error, "lineno", "?"),
                getattr(error, "colno", "?"),
                getattr(error, "msg", error),
            )
        ) from error
    if not isinstance(data, dict):
        raise ConfigShapeError("%s: the top level is a %s; expected an object" % (source, _type_name(data)))
    return data


def docker_edit(text, spec, source):
    """Return (new_text, before, after) for Docker's daemon.json; key order is kept."""
    data = parse_json(text, source)
    before = copy.deepcopy(data)
    name = spec["runtime_name"]
    present = spec["state"] == "present"
    # A missing key or JSON null both mean "no runtimes".
    runtimes = data.get("runtimes")
    if runtimes is None and present:
        runtimes = {}
    if runtimes is not None and not isinstance(runtimes, dict):
        raise ConfigShapeError("%s: runtimes is a %s; expected an object" % (source, _type_name(runtimes)))
    if present:
        entry = runtimes.get(name)
        if not isinstance(entry, dict):
            entry = {}
        # Docker's key for extra arguments is runtimeArgs; anything the user set stays.
        entry["path"] = spec["runtime_path"]
        runtimes[name] = entry
        data["runtimes"] = runtimes
        _apply_default(data, "default-runtime", name, spec["set_as_default"], reset_value=None)
        if spec["enable_cdi"] is not None:
            features = data.get("features", {})
            if not isinstance(features, dict):
                raise ConfigShapeError(
                    "%s: features is a %s; expected an object" % (source, _type_name(features))
                )
            features["cdi"] = spec["enable_cdi"]
            data["features"] = features
    else:
        if runtimes is not None and name in runtimes:
            del runtimes[name]
            if not runtimes:
                del data["runtimes"]
        _apply_default(data, "default-runtime", name, False, reset_value=None)
    if data == before:
        return text, before, before
    return json.dumps(data, indent=_json_indent(text)) + "\n", before, data
