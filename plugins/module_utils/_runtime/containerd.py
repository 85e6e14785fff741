# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""containerd: the NVIDIA runtime in config.toml (versions 1, 2 and 3), in place or as a drop-in.

Private to the gpuops.k8s collection. Pure: text in, text out, typed errors.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

from .errors import ConfigShapeError, UnsupportedOption
from .tables import apply_default, copy_of_default, current_default, walk
from .toml_data import plain, type_name
from .toml_edit import edit_toml
from .toml_text import read_toml

# The CRI plugin's runtime table, by containerd config version (what nvidia-ctk uses).
CRI_PLUGIN = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
RUNC_TYPE = "io.containerd.runc.v2"


def containerd_version(data, default, source):
    """The config version containerd will read: explicit, else 1, or `default` if empty."""
    if "version" not in data:
        return default if not data else 1
    version = plain(data["version"])
    if isinstance(version, bool) or not isinstance(version, int) or version not in CRI_PLUGIN:
        raise ConfigShapeError(
            "%s: version = %r; containerd config versions are 1, 2 and 3" % (source, version)
        )
    return version


def default_key(version):
    """The key path of containerd's default runtime name in a config of this version."""
    return ("plugins", CRI_PLUGIN[version], "containerd", "default_runtime_name")


def containerd_edit_data(root, version, spec, source, new_table, *, marks=None):
    """Apply spec to a containerd config's plain data; marks: the notes its text holds."""
    mark = (marks or {}).get(default_key(version))
    name = spec["runtime_name"]
    present = spec["state"] == "present"
    cri_keys = ["plugins", CRI_PLUGIN[version]]
    cri = walk(root, cri_keys, source, new_table if present else None)
    if cri is None:
        return
    containerd = walk(cri, ["containerd"], source, new_table if present else None, base=cri_keys)
    if containerd is None:
        return
    containerd_keys = [*cri_keys, "containerd"]
    runtimes = walk(containerd, ["runtimes"], source, new_table if present else None, base=containerd_keys)
    if spec["enable_cdi"] is not None and present:
        if version == 1:
            raise UnsupportedOption(
                "%s: enable_cdi needs containerd config version 2 or 3 (this file is version 1)" % source
            )
        if plain(cri.get("enable_cdi")) is not spec["enable_cdi"]:
            cri["enable_cdi"] = spec["enable_cdi"]
    default_name = current_default(containerd, "default_runtime_name", source, containerd_keys)
    if not present:
        if runtimes is not None and name in runtimes:
            del runtimes[name]
        apply_default(containerd, "default_runtime_name", name, False, mark=mark)
        return
    if name in runtimes:
        entry = walk(runtimes, [name], source, base=[*containerd_keys, "runtimes"])
        if "runtime_type" not in entry:
            entry["runtime_type"] = RUNC_TYPE
        options = walk(entry, ["options"], source, new_table, base=[*containerd_keys, "runtimes", name])
        if plain(options.get("BinaryName")) != spec["runtime_path"]:
            options["BinaryName"] = spec["runtime_path"]
    else:
        # Like nvidia-ctk: start from the runtime containerd uses now (runc's cgroup and
        # other options carry over, SystemdCgroup above all) and swap the binary.
        entry = copy_of_default(runtimes, default_name, name)
        entry.setdefault("runtime_type", RUNC_TYPE)
        options = entry.get("options")
        entry["options"] = dict(options) if isinstance(options, dict) else {}
        entry["options"]["BinaryName"] = spec["runtime_path"]
        runtimes[name] = entry
    apply_default(containerd, "default_runtime_name", name, spec["set_as_default"], mark=mark)


def containerd_in_place(text, spec, source, default_version=2):
    """Return (new_text, before_data, after_data, version) for an in-place edit."""
    data = read_toml(text, source)
    version = containerd_version(data, default_version, source)

    def edit(root, new_table, marks):
        # An empty or new file gets the version it is written for; absent adds nothing.
        if spec["state"] == "present" and "version" not in root and version != 1:
            root["version"] = version
        containerd_edit_data(root, version, spec, source, new_table, marks=marks)

    new_text, before, after = edit_toml(text, source, edit, remember=[default_key(version)])
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
    main = read_toml(main_text, main_source)
    version = containerd_version(main, default_version, main_source)
    drop_before = read_toml(drop_in_text, drop_in_source)  # an unparsable drop-in is reported, not replaced
    present = spec["state"] == "present"

    def main_edit(root, new_table, marks):
        if present:
            # The runtime lives in the drop-in: an entry left by an earlier in-place run
            # moves there; the main file's default_runtime_name is the user's to keep.
            runtimes = walk(root, ["plugins", CRI_PLUGIN[version], "containerd", "runtimes"], main_source)
            if runtimes is not None and spec["runtime_name"] in runtimes:
                del runtimes[spec["runtime_name"]]
        else:
            containerd_edit_data(root, version, dict(spec, enable_cdi=None), main_source, None, marks=marks)
        imports = root.get("imports")
        if imports is not None and not isinstance(imports, list):
            raise ConfigShapeError(
                "%s: imports is a %s; expected an array" % (main_source, type_name(imports))
            )
        listed = [str(i) for i in (imports or [])]
        if present and drop_in_path not in listed:
            if imports is None:
                root["imports"] = [drop_in_path]
            else:
                imports.append(drop_in_path)
        elif not present and drop_in_path in listed:
            imports.remove(drop_in_path)
            mark = marks.get(("imports",))
            if not imports and mark is not None and mark.added:
                del root["imports"]  # the line nvidia_runtime added; an imports = [] of the user's stays
        if present and "version" not in root and version != 1:
            root["version"] = version

    main_after_text, main_before, main_after = edit_toml(
        main_text, main_source, main_edit, remember=[("imports",), default_key(version)]
    )
    if not present:
        return main_after_text, None, (main_before, drop_before), (main_after, {}), version
    cri_name = CRI_PLUGIN[version]
    drop = {"version": version} if version != 1 else {}
    cri = plain(main_after.get("plugins", {}).get(cri_name, {}))
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
    containerd_edit_data(drop, version, spec, drop_in_source, dict)
    header = (
        "# Managed by gpuops.k8s nvidia_runtime: the NVIDIA runtime, over a copy\n"
        "# of %s's CRI plugin table (containerd < 2 merges imports per plugin).\n"
        "# Edit %s instead: this file is rewritten from it.\n" % (main_source, main_source)
    )
    drop_text = edit_toml(header, drop_in_source, lambda root, _new_table, _marks: root.update(drop))[0]
    return main_after_text, drop_text, (main_before, drop_before), (main_after, drop), version
