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
from .toml_edit import edit_toml
from .toml_text import plain


def crio_edit_data(root, spec, source, new_table):
    name = spec["runtime_name"]
    present = spec["state"] == "present"
    if spec["enable_cdi"] is not None:
        raise UnsupportedOption("enable_cdi does not apply to CRI-O: CDI is always on since CRI-O 1.24")
    runtime = walk(root, ["crio", "runtime"], source, new_table if present else None)
    if runtime is None:
        return
    runtimes = walk(runtime, ["runtimes"], source, new_table if present else None, base=["crio", "runtime"])
    default_name = current_default(runtime, "default_runtime", source, ["crio", "runtime"])
    if not present:
        if runtimes is not None and name in runtimes:
            del runtimes[name]
        apply_default(runtime, "default_runtime", name, False)
        return
    if name not in runtimes:
        entry = copy_of_default(runtimes, default_name, name)
        entry.pop("runtime_path", None)
        entry.setdefault("runtime_type", "oci")
        runtimes[name] = entry
    entry = walk(runtimes, [name], source, base=["crio", "runtime", "runtimes"])
    if plain(entry.get("runtime_path")) != spec["runtime_path"]:
        entry["runtime_path"] = spec["runtime_path"]
    if "runtime_type" not in entry:
        entry["runtime_type"] = "oci"
    apply_default(runtime, "default_runtime", name, spec["set_as_default"])


def crio_edit(text, spec, source):
    """Return (new_text, before, after) for a CRI-O TOML file (crio.conf or a drop-in)."""
    return edit_toml(text, source, lambda root, new_table: crio_edit_data(root, spec, source, new_table))
