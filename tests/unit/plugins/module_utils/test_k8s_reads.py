# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""k8s_objects_info's queries: checked before the API is reached, each answered as k8s_info would be."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils._k8s_reads import QueryError, check_queries, read_all


def test_each_query_gets_k8s_infos_defaults():
    checked = check_queries(
        {"node": {"kind": "Node", "name": "gpu-1"}, "ds": {"kind": "DaemonSet", "api_version": "apps/v1"}}
    )
    assert checked == {
        "node": dict(
            kind="Node",
            api_version="v1",
            name="gpu-1",
            namespace=None,
            label_selectors=[],
            field_selectors=[],
        ),
        "ds": dict(
            kind="DaemonSet",
            api_version="apps/v1",
            name=None,
            namespace=None,
            label_selectors=[],
            field_selectors=[],
        ),
    }


def test_an_omitted_field_passed_as_none_takes_its_default():
    # What a role's "{{ ... | default(omit) }}" or a null in YAML gives.
    assert check_queries({"pods": {"kind": "Pod", "label_selectors": None}})["pods"]["label_selectors"] == []


@pytest.mark.parametrize(
    "queries, message",
    [
        ({}, "queries is empty"),
        (
            {"node": "Node"},
            "queries.node is 'Node': each query is a dict of api_version, field_selectors, kind",
        ),
        ({"node": {"knd": "Node"}}, "queries.node has knd, which k8s_info does not take: valid fields are"),
        ({"node": {"name": "gpu-1"}}, "queries.node has no kind: name the kind to read"),
        (
            {"pods": {"kind": "Pod", "label_selectors": "app=x"}},
            "queries.pods.label_selectors is 'app=x': it must be a list of strings",
        ),
        (
            {"pods": {"kind": "Pod", "field_selectors": [1]}},
            "queries.pods.field_selectors is [1]: it must be a list of strings",
        ),
        ({"node": {"kind": "Node", "name": 7}}, "queries.node.name is 7: it must be a string"),
    ],
)
def test_a_query_that_is_not_valid_names_its_field_and_what_is_valid(queries, message):
    with pytest.raises(QueryError) as raised:
        check_queries(queries)
    assert str(raised.value).startswith(message)


def test_each_result_is_finds_under_the_querys_name():
    asked = []

    def find(kind, api_version, **selection):
        asked.append((kind, api_version, selection))
        if kind == "Widget":
            return {"resources": [], "api_found": False, "msg": "Failed to find API"}
        return {
            "resources": [{"kind": kind, "metadata": {"name": selection["name"] or "any"}}],
            "api_found": True,
        }

    queries = check_queries(
        {
            "node": {"kind": "Node", "name": "gpu-1"},
            "pods": {"kind": "Pod", "namespace": "gpu-operator", "field_selectors": ["spec.nodeName=gpu-1"]},
            "widgets": {"kind": "Widget", "api_version": "example.com/v9"},
        }
    )
    objects = read_all(find, queries)
    assert objects["node"]["resources"] == [{"kind": "Node", "metadata": {"name": "gpu-1"}}]
    assert objects["widgets"]["api_found"] is False
    assert asked[1] == (
        "Pod",
        "v1",
        dict(
            name=None, namespace="gpu-operator", label_selectors=[], field_selectors=["spec.nodeName=gpu-1"]
        ),
    )


def test_a_query_asked_under_several_names_reaches_the_api_once():
    asked = []

    def find(kind, api_version, **selection):
        asked.append((kind, selection["name"]))
        return {"resources": [{"kind": kind, "metadata": {"name": selection["name"]}}], "api_found": True}

    queries = check_queries(
        {
            "gpu-1:node": {"kind": "Node", "name": "gpu-1"},
            "gpu-1:runtime_class": {
                "api_version": "node.k8s.io/v1",
                "kind": "RuntimeClass",
                "name": "nvidia",
            },
            "gpu-2:node": {"kind": "Node", "name": "gpu-2"},
            "gpu-2:runtime_class": {
                "kind": "RuntimeClass",
                "name": "nvidia",
                "api_version": "node.k8s.io/v1",
            },
        }
    )
    objects = read_all(find, queries)
    assert sorted(asked) == [("Node", "gpu-1"), ("Node", "gpu-2"), ("RuntimeClass", "nvidia")]
    assert objects["gpu-2:runtime_class"] == objects["gpu-1:runtime_class"]
    assert objects["gpu-2:node"]["resources"][0]["metadata"]["name"] == "gpu-2"
