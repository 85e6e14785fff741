# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""CRI-O: the NVIDIA runtime in crio.conf or a drop-in in crio.conf.d.

Private to the gpuops.k8s collection. Pure: text in, text out, typed errors.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .errors import UnsupportedOption
from .tables import apply_default, copy_of_default, current_default, walk
from .toml_data import plain
from .toml_edit import edit_toml

DEFAULT_KEY = ("crio", "runtime", "default_runtime")


def crio_edit_data(root, spec, source, new_table, *, marks=None, context=None):
    """Apply spec to a CRI-O file's plain data; marks: the notes its text holds.

    context: for a drop-in, what CRI-O reads besides it (crio.conf and the other drop-ins,
    merged): a new entry copies the default runtime found there, as one in crio.conf
    copies crio.conf's (like nvidia-ctk: runtime_root, monitor_path, allowed_annotations,
    ...), and taking the runtime away deletes the drop-in's default instead of naming runc.
    """
    name = spec["runtime_name"]
    present = spec["state"] == "present"
    mark = (marks or {}).get(DEFAULT_KEY)
    reset = "runc" if context is None else None
    if spec["enable_cdi"] is not None:
        raise UnsupportedOption("enable_cdi does not apply to CRI-O: CDI is always on since CRI-O 1.24")
    runtime = walk(root, ["crio", "runtime"], source, new_table if present else None)
    if runtime is None:
        return
    runtimes = walk(runtime, ["runtimes"], source, new_table if present else None, base=["crio", "runtime"])
    if not present:
        if runtimes is not None and name in runtimes:
            del runtimes[name]
        apply_default(runtime, "default_runtime", name, False, reset_value=reset, mark=mark)
        return
    if name not in runtimes:
        base, base_source = (runtime, source) if context is None else context
        if base is not runtime:
            base = walk(base, ["crio", "runtime"], base_source) or {}
        default_name = current_default(base, "default_runtime", base_source, ["crio", "runtime"])
        others = walk(base, ["runtimes"], base_source, base=["crio", "runtime"]) or {}
        entry = copy_of_default(others, default_name, name)
        entry.pop("runtime_path", None)
        entry.setdefault("runtime_type", "oci")
        runtimes[name] = entry
    entry = walk(runtimes, [name], source, base=["crio", "runtime", "runtimes"])
    if plain(entry.get("runtime_path")) != spec["runtime_path"]:
        entry["runtime_path"] = spec["runtime_path"]
    if "runtime_type" not in entry:
        entry["runtime_type"] = "oci"
    apply_default(runtime, "default_runtime", name, spec["set_as_default"], reset_value=reset, mark=mark)


def crio_edit(text, spec, source, context=None):
    """Return (new_text, before, after) for a CRI-O TOML file: crio.conf, or a drop-in with
    context (data, its source for errors): what CRI-O reads besides it (crio_edit_data)."""

    def edit(root, new_table, marks):
        crio_edit_data(root, spec, source, new_table, marks=marks, context=context)

    return edit_toml(text, source, edit, remember=[DEFAULT_KEY])
