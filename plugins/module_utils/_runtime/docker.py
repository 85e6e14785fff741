# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Docker: the NVIDIA runtime in daemon.json, key order and indent kept.

Private to the gpuops.k8s collection. Pure: text in, text out, typed errors.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json
import re

from .errors import ConfigParseError, ConfigShapeError
from .tables import apply_default
from .toml_data import type_name


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
        raise ConfigShapeError("%s: the top level is a %s; expected an object" % (source, type_name(data)))
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
        raise ConfigShapeError("%s: runtimes is a %s; expected an object" % (source, type_name(runtimes)))
    if present:
        entry = runtimes.get(name)
        if not isinstance(entry, dict):
            entry = {}
        # Docker's key for extra arguments is runtimeArgs; anything the user set stays.
        entry["path"] = spec["runtime_path"]
        runtimes[name] = entry
        data["runtimes"] = runtimes
        apply_default(data, "default-runtime", name, spec["set_as_default"], reset_value=None)
        if spec["enable_cdi"] is not None:
            features = data.get("features", {})
            if not isinstance(features, dict):
                raise ConfigShapeError(
                    "%s: features is a %s; expected an object" % (source, type_name(features))
                )
            features["cdi"] = spec["enable_cdi"]
            data["features"] = features
    else:
        if runtimes is not None and name in runtimes:
            del runtimes[name]
            if not runtimes:
                del data["runtimes"]
        apply_default(data, "default-runtime", name, False, reset_value=None)
    if data == before:
        return text, before, before
    return json.dumps(data, indent=_json_indent(text)) + "\n", before, data
