# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""TOML text: reading (Python's tomllib, else tomlkit), a lexer, and one-line rendering.

Private to the gpuops.k8s collection. Pure: text in, data or text out, typed errors.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re
import traceback

from .errors import ConfigParseError, RuntimeConfigError
from .toml_data import same

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


def _loads(text):
    """Plain data of a TOML snippet (a header or one statement)."""
    if tomllib is not None:
        return tomllib.loads(text)
    return tomlkit.parse(text).unwrap()


def read_toml(text, source):
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


def lex(text):
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


def toml_path(keys):
    return ".".join(key if _BARE_KEY.match(key) else _toml_string(key) for key in keys)


def value_text(value):  # noqa: PLR0911 - one return per TOML type
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
        return "{%s}" % ", ".join("%s = %s" % (toml_path([k]), value_text(v)) for k, v in value.items())
    if isinstance(value, list):
        return "[%s]" % ", ".join(value_text(item) for item in value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)  # int


def sections_text(path, table, notes=None):
    """A new table as header sections with full paths: [path] with its keys, then its tables.
    notes: {key path: note} written as a comment after those keys (see NOTE)."""
    notes = notes or {}
    keys = [(k, v) for k, v in table.items() if not isinstance(v, dict)]
    tables = [(k, v) for k, v in table.items() if isinstance(v, dict)]
    out = []
    if keys or not tables:
        out.append(
            "[%s]\n" % toml_path(path)
            + "".join(
                "%s = %s%s\n" % (toml_path([k]), value_text(v), note_text(notes.get((*path, k))))
                for k, v in keys
            )
        )
    for key, value in tables:
        out.extend(sections_text((*path, key), value, notes))
    return out


# What nvidia_runtime notes after a key it added or changed, so that state=absent gives back
# what was there: "added" (absent deletes the key) or "was <the old value's text>".
NOTE = " # gpuops.k8s nvidia_runtime: "
ADDED = "added"


def note_text(note):
    return NOTE + note if note else ""


def value_of(raw):
    """The data of a value's TOML text, or None when it is not one value."""
    try:
        return _loads("v = %s\n" % raw)["v"]
    except (ValueError, KeyError, TypeError, TomlParseError):
        return None


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
        if not same(doc.unwrap(), reference):
            raise ConfigParseError(
                "%s: tomlkit %s reads this file differently from Python's TOML parser (a table "
                "split into several sections?); the file is left untouched: merge the split "
                "sections or use a newer tomlkit" % (source, getattr(tomlkit, "__version__", "?"))
            )
    return doc
