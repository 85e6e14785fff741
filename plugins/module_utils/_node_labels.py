# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure planning for the labels and taints gpu_node owns on a Kubernetes Node.

Ownership is recorded on the Node itself, in the annotation OWNER_ANNOTATION (JSON: the
label keys and taint key/effect pairs we set last time). A key we set before and no
longer want is removed; anything not in that record is someone else's and is never
changed, except a key the caller explicitly asks for (then it becomes ours).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

OWNER_ANNOTATION = "gpuops.k8s/managed"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# Prefixes the kubelet and the NodeRestriction admission plugin reserve.
RESERVED_PREFIXES = ("kubernetes.io", "k8s.io")

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class NodeSpecError(ValueError):
    """A requested label or taint is not valid; the message names the field and value."""


def _check_qualified_name(field, key):
    prefix, _sep, name = key.rpartition("/")
    if not name or len(name) > 63 or not _NAME.match(name):
        raise NodeSpecError(
            "%s: %r is not a valid key: the name part must be 1-63 characters of "
            "[A-Za-z0-9-_.], starting and ending with a letter or digit" % (field, key)
        )
    if _sep:
        if len(prefix) > 253 or not all(_DNS_LABEL.match(part) for part in prefix.split(".")):
            raise NodeSpecError(
                "%s: %r is not a valid key: the prefix %r must be a lower-case DNS subdomain "
                "(like example.com)" % (field, key, prefix)
            )
        if any(prefix == p or prefix.endswith("." + p) for p in RESERVED_PREFIXES):
            raise NodeSpecError(
                "%s: %r uses the reserved prefix %r (kubernetes.io and k8s.io belong to Kubernetes; "
                "the NodeRestriction admission plugin refuses most of them)" % (field, key, prefix)
            )


def _check_value(field, key, value):
    if not isinstance(value, str):
        raise NodeSpecError(
            "%s[%r]: %r is a %s; values are strings (quote it)" % (field, key, value, type(value).__name__)
        )
    if value and (len(value) > 63 or not _NAME.match(value)):
        raise NodeSpecError(
            "%s[%r]: %r is not a valid value: empty, or 1-63 characters of [A-Za-z0-9-_.] "
            "starting and ending with a letter or digit" % (field, key, value)
        )


def normalize_labels(labels, field="labels"):
    labels = dict(labels or {})
    for key, value in labels.items():
        _check_qualified_name(field, key)
        _check_value(field, key, value)
    return labels


def normalize_taints(taints, field="taints"):
    """Taints as dicts with key, value ('' when absent) and effect; one per key and effect."""
    result = []
    seen = set()
    for index, taint in enumerate(taints or []):
        where = "%s[%d]" % (field, index)
        if not isinstance(taint, dict) or not taint.get("key"):
            raise NodeSpecError("%s: %r needs at least a key and an effect" % (where, taint))
        unknown = sorted(set(taint) - {"key", "value", "effect"})
        if unknown:
            valid = "key, value, effect"
            raise NodeSpecError("%s: unknown field(s) %s; valid: %s" % (where, ", ".join(unknown), valid))
        key, value, effect = taint["key"], taint.get("value") or "", taint.get("effect")
        _check_qualified_name(where + ".key", key)
        _check_value(where, "value", value)
        if effect not in TAINT_EFFECTS:
            raise NodeSpecError("%s.effect: %r is not one of %s" % (where, effect, ", ".join(TAINT_EFFECTS)))
        if (key, effect) in seen:
            raise NodeSpecError("%s: %s:%s is listed twice" % (where, key, effect))
        seen.add((key, effect))
        result.append({"key": key, "value": value, "effect": effect})
    return result


def requests_from(params):
    """[(name, labels, taints)] from gpu_node's params, checked before anything is read or written."""
    if params["nodes"] is None:
        items = [{"name": params["name"], "labels": params["labels"], "taints": params["taints"]}]
        prefix = ""
    else:
        items = params["nodes"]
        prefix = "nodes"
    requests = []
    for index, item in enumerate(items):
        where = "%s[%d]." % (prefix, index) if prefix else ""
        if not isinstance(item, dict) or not item.get("name"):
            raise NodeSpecError("%sname: every item needs the Node's name (got %r)" % (where, item))
        unknown = sorted(set(item) - {"name", "labels", "taints"})
        if unknown:
            raise NodeSpecError(
                "%s%s: unknown field(s); valid: name, labels, taints" % (where, ", ".join(unknown))
            )
        requests.append(
            (
                item["name"],
                normalize_labels(item.get("labels"), where + "labels"),
                normalize_taints(item.get("taints"), where + "taints"),
            )
        )
    names = [r[0] for r in requests]
    duplicates = sorted(set(n for n in names if names.count(n) > 1))
    if duplicates:
        raise NodeSpecError("nodes: %s listed more than once" % ", ".join(duplicates))
    return requests


def read_owned(annotations):
    """(label keys, set of (taint key, effect)) from the ownership annotation; empty if unreadable."""
    raw = (annotations or {}).get(OWNER_ANNOTATION)
    if not raw:
        return [], set()
    try:
        record = json.loads(raw)
        labels = [k for k in record.get("labels", []) if isinstance(k, str)]
        taints = set((t.split(":", 1)[0], t.split(":", 1)[1]) for t in record.get("taints", []) if ":" in t)
        return labels, taints
    except (ValueError, AttributeError):
        return [], set()


def _owner_record(labels, taints):
    return json.dumps(
        {"labels": sorted(labels), "taints": sorted("%s:%s" % (t["key"], t["effect"]) for t in taints)},
        separators=(",", ":"),
        sort_keys=True,
    )


def _taint_view(taint):
    view = {"key": taint["key"], "effect": taint["effect"]}
    if taint.get("value"):
        view["value"] = taint["value"]
    return view


def _plan_labels(current, wanted, owned, result):
    """The labels part of a merge patch ({key: value or None}); fills result's lists."""
    patch = {}
    for key, value in sorted(wanted.items()):
        if key not in current:
            result["labels_added"].append(key)
            patch[key] = value
        elif current[key] != value:
            result["labels_updated"].append(key)
            patch[key] = value
            if key not in owned:
                result["adopted"].append("label %s=%s" % (key, current[key]))
    for key in sorted(owned):
        if key not in wanted and key in current:
            result["labels_removed"].append(key)
            patch[key] = None
    return patch


def _plan_taints(current, wanted, owned, result):
    """The new taints list: foreign taints kept in place and order, ours updated or dropped."""
    wanted_by_id = dict(((t["key"], t["effect"]), t) for t in wanted)
    new_taints = []
    for taint in current:
        ident = (taint.get("key"), taint.get("effect"))
        if ident in wanted_by_id:
            value = wanted_by_id.pop(ident)["value"]
            if (taint.get("value") or "") != value and ident not in owned:
                result["adopted"].append("taint %s=%s:%s" % (ident[0], taint.get("value") or "", ident[1]))
            kept = dict(taint, value=value)
            if not value:
                kept.pop("value")
            new_taints.append(kept)
        elif ident not in owned:
            new_taints.append(taint)
    # What is left was not on the node: appended in the order asked.
    new_taints.extend(_taint_view(t) for t in wanted if (t["key"], t["effect"]) in wanted_by_id)
    return new_taints


def _taint_ids(taints):
    return [(t.get("key"), t.get("effect"), t.get("value") or "") for t in taints]


def plan(node, labels, taints, state="present"):
    """What to change on one Node (a dict as the API returns it) to own exactly labels/taints.

    Returns a dict: changed, patch (a JSON merge patch, or None), before/after (labels and
    taints, for --diff), and the keys added, updated and removed, plus `adopted`: requested
    keys that existed with another value and no owner record (someone else set them).
    """
    metadata = node.get("metadata") or {}
    current_labels = dict(metadata.get("labels") or {})
    current_taints = list((node.get("spec") or {}).get("taints") or [])
    owned_labels, owned_taints = read_owned(metadata.get("annotations"))
    if state == "absent":
        labels, taints = {}, []

    result = {"labels_added": [], "labels_updated": [], "labels_removed": [], "adopted": []}
    label_patch = _plan_labels(current_labels, labels, owned_labels, result)
    new_taints = _plan_taints(current_taints, taints, owned_taints, result)
    before_ids, after_ids = _taint_ids(current_taints), _taint_ids(new_taints)
    result["taints_added"] = ["%s=%s:%s" % (k, v, e) for k, e, v in after_ids if (k, e, v) not in before_ids]
    removed = [ident for ident in before_ids if ident not in after_ids]
    result["taints_removed"] = ["%s=%s:%s" % (k, v, e) for k, e, v in removed]

    new_record = _owner_record(labels, taints) if (labels or taints) else None
    patch = {}
    if label_patch:
        patch.setdefault("metadata", {})["labels"] = label_patch
    if new_record != (metadata.get("annotations") or {}).get(OWNER_ANNOTATION):
        patch.setdefault("metadata", {})["annotations"] = {OWNER_ANNOTATION: new_record}
    if after_ids != before_ids:
        patch["spec"] = {"taints": new_taints}

    after_labels = dict((k, v) for k, v in current_labels.items() if label_patch.get(k, v) is not None)
    after_labels.update((k, v) for k, v in label_patch.items() if v is not None)
    # Writing only the ownership record (labels already right, first run) is a change too:
    # the Node object is modified, and check mode must say so.
    result["changed"] = bool(patch)
    result["patch"] = patch or None
    result["before"] = {"labels": current_labels, "taints": [_taint_view(t) for t in current_taints]}
    result["after"] = {"labels": after_labels, "taints": [_taint_view(t) for t in new_taints]}
    return result
