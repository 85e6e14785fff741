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
        if doc.unwrap() != reference:
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
    """Run edit(root, new_table) on both the tomlkit document and a plain copy of its data;
    the rendered document must parse back to exactly the plain result."""
    doc = parse_toml(text, source)
    before = doc.unwrap()
    expected = copy.deepcopy(before)
    edit(expected, dict)
    if expected == before:
        # Nothing to change: keep the user's bytes. (Walking out-of-order tables can make
        # some tomlkit versions, Debian's 0.11.7 among them, re-indent on render.)
        return text, before, before
    edit(doc, _super_table)
    after_text = tomlkit.dumps(doc)
    after = parse_toml(after_text, source + " (as rewritten)").unwrap()
    # tomlkit does not write a table that an edit emptied; to the runtimes an empty table
    # and no table read the same.
    if _pruned(after) != _pruned(expected):
        raise RuntimeConfigError(
            "%s: the structural edit would not give the intended configuration; the file is left "
            "untouched (please report this with the file)" % source
        )
    return after_text, before, after


def containerd_in_place(text, spec, source, default_version=2):
    """Return (new_text, before_data, after_data, version) for an in-place edit."""
    data = parse_toml(text, source).unwrap()
    version = containerd_version(data, default_version, source)

    def edit(root, new_table):
        # An empty or new file gets the version it is written for; absent adds nothing.
        if spec["state"] == "present" and "version" not in root and version != 1:
            root["version"] = version
        _containerd_edit(root, version, spec, source, new_table)

    new_text, before, after = _edit_toml(text, source, edit)
    return new_text, before, after, version


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
    main = parse_toml(main_text, main_source).unwrap()
    version = containerd_version(main, default_version, main_source)
    parse_toml(drop_in_text, drop_in_source)  # an unparsable drop-in is reported, not replaced
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
    drop_before = parse_toml(drop_in_text, drop_in_source).unwrap()
    if not present:
        return main_after_text, None, (main_before, drop_before), (main_after, {}), version
    cri_name = CRI_PLUGIN[version]
    drop = {"version": version} if version != 1 else {}
    cri = _plain(main_after.get("plugins", {}).get(cri_name, {}))
    drop["plugins"] = {cri_name: cri}
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
    if parse_toml(drop_text, drop_in_source).unwrap() != drop:
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
        return data != before, None
    version = containerd_version(data, default_version, source)
    if spec["state"] == "present" and "version" not in data and version != 1:
        data["version"] = version
    _containerd_edit(data, version, spec, source, dict)
    return data != before, version


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
