# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpuops.k8s.plugins.module_utils import _node_labels as nl

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def node(labels=None, taints=None, owned=None):
    metadata = {"name": "gpu-01", "resourceVersion": "7", "labels": dict(labels or {})}
    if owned is not None:
        metadata["annotations"] = {nl.OWNER_ANNOTATION: owned}
    return {"metadata": metadata, "spec": {"taints": list(taints or [])}}


def apply_merge_patch(obj, patch):
    """RFC 7386, as the API server applies application/merge-patch+json."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(obj) if isinstance(obj, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def converge(current, labels, taints, state="present"):
    result = nl.plan(current, labels, nl.normalize_taints(taints), state)
    return result, apply_merge_patch(current, result["patch"] or {})


def test_first_run_adds_labels_taint_and_record():
    result, after = converge(
        node({"kubernetes.io/hostname": "gpu-01"}), {"accelerator": "nvidia-h100"}, [GPU_TAINT]
    )
    assert result["changed"]
    assert result["labels_added"] == ["accelerator"]
    assert result["taints_added"] == ["nvidia.com/gpu=present:NoSchedule"]
    assert after["metadata"]["labels"] == {"kubernetes.io/hostname": "gpu-01", "accelerator": "nvidia-h100"}
    record = json.loads(after["metadata"]["annotations"][nl.OWNER_ANNOTATION])
    assert record == {"labels": ["accelerator"], "taints": ["nvidia.com/gpu:NoSchedule"]}


def test_second_run_is_a_no_op():
    _plan, after = converge(node(), {"accelerator": "nvidia-h100"}, [GPU_TAINT])
    again = nl.plan(after, {"accelerator": "nvidia-h100"}, [GPU_TAINT])
    assert not again["changed"] and again["patch"] is None


def test_stale_owned_label_is_removed_and_foreign_labels_stay():
    _plan, after = converge(
        node({"team": "ml"}), {"nvidia.com/gpu.count": "8", "nvidia.com/mig.capable": "true"}, []
    )
    result, after = converge(after, {"nvidia.com/gpu.count": "1"}, [])
    assert result["labels_updated"] == ["nvidia.com/gpu.count"]
    assert result["labels_removed"] == ["nvidia.com/mig.capable"]
    assert after["metadata"]["labels"] == {"team": "ml", "nvidia.com/gpu.count": "1"}


def test_a_foreign_label_with_an_owned_prefix_is_never_removed():
    # GFD (or a person) set it; we never did, so it is not ours to remove.
    current = node({"nvidia.com/gpu.product": "Tesla-T4"}, owned=json.dumps({"labels": [], "taints": []}))
    result, after = converge(current, {}, [])
    assert result["labels_removed"] == []
    assert after["metadata"]["labels"] == {"nvidia.com/gpu.product": "Tesla-T4"}


def test_foreign_taints_keep_place_order_and_time_added():
    foreign = [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-11-22T10:00:00Z"},
        {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
    ]
    _plan, after = converge(node(taints=foreign), {}, [GPU_TAINT])
    assert after["spec"]["taints"] == [
        *foreign,
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
    ]
    result, after = converge(after, {}, [])
    assert result["taints_removed"] == ["nvidia.com/gpu=present:NoSchedule"]
    assert after["spec"]["taints"] == foreign


def test_owned_taint_value_change_updates_in_place():
    _plan, after = converge(node(taints=[{"key": "a", "effect": "NoSchedule"}]), {}, [GPU_TAINT])
    result, after = converge(after, {}, [dict(GPU_TAINT, value="h100")])
    assert after["spec"]["taints"] == [
        {"key": "a", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "value": "h100", "effect": "NoSchedule"},
    ]
    assert result["adopted"] == []


def test_taking_over_a_foreign_value_is_reported():
    current = node({"accelerator": "nvidia-tesla-p100"}, [dict(GPU_TAINT, value="yes")])
    result, after = converge(current, {"accelerator": "nvidia-h100"}, [GPU_TAINT])
    assert result["adopted"] == ["label accelerator=nvidia-tesla-p100", "taint nvidia.com/gpu=yes:NoSchedule"]
    assert after["metadata"]["labels"]["accelerator"] == "nvidia-h100"


def test_adopting_a_key_that_already_matches_only_writes_the_record():
    result, after = converge(node({"accelerator": "nvidia-h100"}), {"accelerator": "nvidia-h100"}, [])
    assert result["changed"] and result["labels_added"] == [] and result["labels_updated"] == []
    assert result["patch"] == {
        "metadata": {"annotations": {nl.OWNER_ANNOTATION: '{"labels":["accelerator"],"taints":[]}'}}
    }
    assert not nl.plan(after, {"accelerator": "nvidia-h100"}, [])["changed"]


def test_absent_removes_only_what_it_owns_and_its_record():
    _plan, after = converge(
        node({"team": "ml"}, [{"key": "x", "effect": "NoExecute"}]), {"accelerator": "a"}, [GPU_TAINT]
    )
    _result, after = converge(after, {"accelerator": "a"}, [GPU_TAINT], state="absent")
    assert after["metadata"]["labels"] == {"team": "ml"}
    assert after["spec"]["taints"] == [{"key": "x", "effect": "NoExecute"}]
    assert nl.OWNER_ANNOTATION not in after["metadata"].get("annotations", {})
    assert not nl.plan(after, {}, [], state="absent")["changed"]


def test_an_unreadable_record_owns_nothing():
    current = node({"accelerator": "x"}, owned="{not json")
    result = nl.plan(current, {}, [])
    assert result["labels_removed"] == []


@pytest.mark.parametrize(
    "labels, message",
    [
        ({"kubernetes.io/hostname": "x"}, "reserved prefix 'kubernetes.io'"),
        ({"node.k8s.io/x": "y"}, "reserved prefix 'node.k8s.io'"),
        ({"Bad_Prefix/x": "y"}, "must be a lower-case DNS subdomain"),
        ({"-x": "y"}, "name part must be 1-63 characters"),
        ({"a" * 64: "y"}, "name part must be 1-63 characters"),
        ({"ok": "has space"}, "labels['ok']: 'has space' is not a valid value"),
        ({"ok": 8}, "labels['ok']: 8 is a int; values are strings"),
    ],
)
def test_invalid_labels_name_field_and_value(labels, message):
    with pytest.raises(nl.NodeSpecError, match=None) as err:
        nl.normalize_labels(labels)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "taints, message",
    [
        ([{"key": "a", "effect": "NoRun"}], "taints[0].effect: 'NoRun' is not one of NoSchedule"),
        ([{"effect": "NoSchedule"}], "taints[0]: {'effect': 'NoSchedule'} needs at least a key"),
        ([{"key": "a", "effect": "NoSchedule", "operator": "Exists"}], "unknown field(s) operator"),
        (
            [{"key": "a", "effect": "NoSchedule"}, {"key": "a", "effect": "NoSchedule"}],
            "a:NoSchedule is listed twice",
        ),
    ],
)
def test_invalid_taints_name_field_and_value(taints, message):
    with pytest.raises(nl.NodeSpecError) as err:
        nl.normalize_taints(taints)
    assert message in str(err.value)


# --- properties: whatever the node holds, only what we own moves ---------------------

_names = st.from_regex(r"\A[a-z][a-z0-9]{0,6}\Z")
_keys = st.builds(
    lambda p, n: "%s/%s" % (p, n) if p else n, st.sampled_from(["", "nvidia.com", "example.org"]), _names
)
_values = st.from_regex(r"\A([a-z0-9]{1,5})?\Z")
_effects = st.sampled_from(nl.TAINT_EFFECTS)
# As the API returns them: no "value" when it is empty.
_taints = st.lists(
    st.builds(
        lambda k, v, e: dict({"key": k, "effect": e}, **({"value": v} if v else {})), _keys, _values, _effects
    ),
    max_size=4,
    unique_by=lambda t: (t["key"], t["effect"]),
)
_cases = st.fixed_dictionaries(
    {
        "foreign_labels": st.dictionaries(_keys, _values, max_size=6),
        "foreign_taints": _taints,
        "first_labels": st.dictionaries(_keys, _values, max_size=5),
        "first_taints": _taints,
        "second_labels": st.dictionaries(_keys, _values, max_size=5),
        "second_taints": _taints,
    }
)


@settings(max_examples=200, deadline=None)
@given(case=_cases)
def test_property_only_owned_keys_change(case):
    start = node(case["foreign_labels"], case["foreign_taints"])
    _plan, after_first = converge(start, case["first_labels"], case["first_taints"])
    _plan, after = converge(after_first, case["second_labels"], case["second_taints"])
    labels = after["metadata"]["labels"]
    taints = after["spec"]["taints"]
    # Everything asked for is there, with the asked value.
    assert all(labels[k] == v for k, v in case["second_labels"].items())
    for taint in case["second_taints"]:
        ident = (taint["key"], taint["effect"])
        assert [t for t in taints if (t["key"], t["effect"]) == ident] == [taint]
    # A foreign label we were never asked for is untouched.
    touched = set(case["first_labels"]) | set(case["second_labels"])
    assert {k: v for k, v in labels.items() if k not in touched} == {
        k: v for k, v in case["foreign_labels"].items() if k not in touched
    }
    # Foreign taints we were never asked for keep their relative order.
    asked = set((t["key"], t["effect"]) for t in case["first_taints"] + case["second_taints"])
    untouched = [t for t in case["foreign_taints"] if (t["key"], t["effect"]) not in asked]
    assert [t for t in taints if (t["key"], t["effect"]) not in asked] == untouched
    # Keys owned after the first run and not asked for in the second are gone.
    for key in set(case["first_labels"]) - set(case["second_labels"]):
        assert key not in labels
    # Converged: a third plan changes nothing.
    again = nl.plan(after, case["second_labels"], nl.normalize_taints(case["second_taints"]))
    assert again["patch"] is None
