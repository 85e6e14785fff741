# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""TOML data: parsed values (plain data or tomlkit items) named, copied, compared and diffed.

Private to the gpuops.k8s collection. Pure: data in, data out; no TOML text.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import math
import re


def keypath(keys):
    return ".".join('"%s"' % k if re.search(r"[^A-Za-z0-9_-]", k) else k for k in keys)


def type_name(value):
    if isinstance(value, dict):
        return "table"
    return {str: "string", bool: "boolean", int: "integer", float: "float", list: "array"}.get(
        type(value.unwrap() if hasattr(value, "unwrap") else value), type(value).__name__
    )


def plain(value):
    """tomlkit item or plain value -> plain Python data (a deep copy)."""
    return copy.deepcopy(value.unwrap() if hasattr(value, "unwrap") else value)


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


def same(left, right):
    return _canon(left) == _canon(right)


def diff(old, new, path=()):
    """The changes from old to new data: (op, key path, new value), op in add, set, del."""
    ops = [("del", (*path, key), None) for key in old if key not in new]
    for key, value in new.items():
        if key not in old:
            ops.append(("add", (*path, key), value))
        elif isinstance(value, dict) and isinstance(old[key], dict):
            ops.extend(diff(old[key], value, (*path, key)))
        elif not same(old[key], value):
            ops.append(("set", (*path, key), value))
    return ops


def pruned(data):
    """data without empty tables, recursively."""
    if not isinstance(data, dict):
        return data
    kept = {key: pruned(value) for key, value in data.items()}
    return {key: value for key, value in kept.items() if value != {}}
