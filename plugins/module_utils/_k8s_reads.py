# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""k8s_objects_info's reads: several k8s_info queries over one API client.

Private to the gpuops.k8s collection. Each query is checked before the API is reached
(QueryError names the query, the field and what would be valid); each is then answered by
kubernetes.core's own K8sService.find, the call behind kubernetes.core.k8s_info, so a
result is shaped exactly as that module returns it (resources, api_found).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

# A query's fields, as kubernetes.core.k8s_info names them, and each one's type.
QUERY_FIELDS = {
    "api_version": str,
    "kind": str,
    "name": str,
    "namespace": str,
    "label_selectors": list,
    "field_selectors": list,
}
DEFAULT_API_VERSION = "v1"


class QueryError(Exception):
    """A query that is not valid; raised before the API is reached."""


def check_queries(queries):
    """{name: query with every field}, or QueryError naming what is wrong and what is valid."""
    if not queries:
        raise QueryError("queries is empty: give at least one, for example {node: {kind: Node, name: gpu-1}}")
    checked = {}
    for label, query in queries.items():
        where = "queries.%s" % label
        if not isinstance(query, dict):
            raise QueryError(
                "%s is %r: each query is a dict of %s" % (where, query, ", ".join(sorted(QUERY_FIELDS)))
            )
        unknown = sorted(set(query) - set(QUERY_FIELDS))
        if unknown:
            raise QueryError(
                "%s has %s, which k8s_info does not take: valid fields are %s"
                % (where, ", ".join(unknown), ", ".join(sorted(QUERY_FIELDS)))
            )
        if not query.get("kind"):
            raise QueryError("%s has no kind: name the kind to read, for example Node or DaemonSet" % where)
        full = dict(
            api_version=DEFAULT_API_VERSION, name=None, namespace=None, label_selectors=[], field_selectors=[]
        )
        full.update((key, value) for key, value in query.items() if value is not None)
        for key, kind in QUERY_FIELDS.items():
            value = full[key]
            if value is None:
                continue
            if not isinstance(value, kind) or (kind is list and not all(isinstance(v, str) for v in value)):
                raise QueryError(
                    "%s.%s is %r: it must be %s"
                    % (where, key, value, "a list of strings" if kind is list else "a string")
                )
        checked[label] = full
    return checked


def read_all(find, queries):
    """{name: find's result} for each checked query; find is K8sService.find.

    Queries that are the same are asked once: a task that reads for every host of a play
    names the objects they share (a RuntimeClass, a DaemonSet) once per host.
    """
    answers = {}
    objects = {}
    for label, query in queries.items():
        key = json.dumps(query, sort_keys=True)
        if key not in answers:
            answers[key] = find(
                query["kind"],
                query["api_version"],
                name=query["name"],
                namespace=query["namespace"],
                label_selectors=query["label_selectors"],
                field_selectors=query["field_selectors"],
            )
        objects[label] = answers[key]
    return objects
