# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Edits on a runtime configuration's plain data, shared by the engines: tables, defaults.

Private to the gpuops.k8s collection. Pure: data in, data changed in place, typed errors.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .errors import ConfigShapeError
from .toml_data import keypath, plain, type_name

DEFAULT_RUNTIME = "runc"  # what containerd, Docker and CRI-O fall back to


def walk(root, keys, source, new_table=None, base=()):
    """Return the table at keys; create missing ones with new_table, or return None.
    base: the keys that lead to root, so errors name the whole path."""
    node = root
    for depth, key in enumerate(keys):
        if key not in node:
            if new_table is None:
                return None
            node[key] = new_table()
        child = node[key]
        if not isinstance(child, dict):
            raise ConfigShapeError(
                "%s: %s is a %s; expected a table, so the file is left untouched"
                % (source, keypath(list(base) + list(keys[: depth + 1])), type_name(child))
            )
        node = child
    return node


def apply_default(table, key, name, set_as_default, *, reset_value=DEFAULT_RUNTIME, mark=None):
    """set_as_default: True makes name the default; False (or removing the runtime) gives
    back the default the file had before (mark: the note nvidia_runtime left on the key),
    else puts a default naming name back to reset_value (runc; None deletes the key, as
    for Docker, whose default needs no entry); None leaves the user's choice alone."""
    current = plain(table.get(key))
    if set_as_default is True and current != name:
        table[key] = name
    elif set_as_default is False and current == name:
        if mark is not None and (mark.added or mark.value is not None):
            if mark.added:
                del table[key]
            else:
                table[key] = mark.value
        elif reset_value is None:
            del table[key]
        else:
            table[key] = reset_value


def current_default(table, key, source, keys):
    """The default runtime's name, or None; anything but a string is an error."""
    value = plain(table.get(key))
    if value is not None and not isinstance(value, str):
        raise ConfigShapeError(
            "%s: %s is a %s; expected a string" % (source, keypath([*keys, key]), type_name(value))
        )
    return value


def copy_of_default(runtimes, default_name, name):
    """A plain copy of the runtime the engine uses now (its default, else runc), the
    starting point of a new runtime entry; {} when there is none to copy."""
    base = runtimes.get(default_name if default_name not in (None, name) else DEFAULT_RUNTIME)
    entry = plain(base) if isinstance(base, dict) else {}
    options = entry.get("options")
    if isinstance(options, dict):
        # The copied runtime's own binary must not survive in any spelling (Kubespray
        # writes binaryName): the new entry's BinaryName is the only one.
        entry["options"] = {k: v for k, v in options.items() if str(k).lower() != "binaryname"}
    return entry
