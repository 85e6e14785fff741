# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_node's side of the Kubernetes API: read, list and patch Nodes, and the module's run.

Private to the gpuops.k8s collection. What to change on a Node is planned by _node_labels;
this reads the Nodes, patches them guarded by their resourceVersion and reports. Raises
MissingLibrary and NodeApiError (carrying the result so far); the module turns them into
fail_json.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import traceback

from ansible_collections.gpuops.k8s.plugins.module_utils import _node_labels as plan_lib

try:
    from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
except ImportError:  # kubernetes.core is a declared dependency; say so clearly if absent
    AUTH_ARG_SPEC = {}
    get_api_client = None
    K8S_CORE_ERROR = traceback.format_exc()
else:
    K8S_CORE_ERROR = None

try:
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException
except ImportError:
    CoreV1Api = None
    ApiException = Exception
    KUBERNETES_ERROR = traceback.format_exc()
else:
    KUBERNETES_ERROR = None

CONFLICT_RETRIES = 5
# From this many Nodes on, list them all (paged) rather than GET each one.
PREFETCH_FROM = 20
LIST_PAGE = 500


class MissingLibrary(Exception):
    """A library gpu_node imports is not installed; library: its name, traceback: the import's."""

    def __init__(self, library, traceback):
        super(MissingLibrary, self).__init__("%s is required" % library)
        self.library = library
        self.traceback = traceback


class NodeApiError(Exception):
    """The Nodes cannot be read or patched; result: the return values the failure carries."""

    def __init__(self, message, result=None):
        super(NodeApiError, self).__init__(message)
        self.result = result or {}


def api_refused(what, error):
    """NodeApiError for an ApiException: its status and reason in the message, its body in the result."""
    message = "%s: the API answered %s %s" % (what, error.status, error.reason)
    return NodeApiError(message, {"body": error.body})


class NodeLabeler:
    """Reads and patches Nodes through a CoreV1Api; calls counts the requests made."""

    def __init__(self, api, check_mode):
        self.api = api
        self.check_mode = check_mode
        self.calls = 0
        self.prefetched = {}

    def read(self, name):
        cached = self.prefetched.pop(name, None)
        if cached is not None:
            return cached
        self.calls += 1
        # The raw JSON: cheaper than the client's models, and in the API's own field names.
        return json.loads(self.api.read_node(name, _preload_content=False).data)

    def prefetch(self):
        """One paged LIST instead of a GET per Node, for fleets (a conflict still re-reads one)."""
        token = None
        while True:
            self.calls += 1
            kwargs = {"limit": LIST_PAGE, "_preload_content": False}
            if token:
                kwargs["_continue"] = token
            try:
                page = json.loads(self.api.list_node(**kwargs).data)
            except ApiException as exc:
                raise api_refused("Listing Nodes", exc) from exc
            for item in page.get("items", []):
                item.setdefault("apiVersion", "v1")
                self.prefetched[item["metadata"]["name"]] = item
            token = page.get("metadata", {}).get("continue")
            if not token:
                return

    def apply(self, name, labels, taints, state, missing_node):
        """Plan and patch one Node: its report; NodeApiError (without the run's result) if refused."""
        for _attempt in range(CONFLICT_RETRIES):
            try:
                node = self.read(name)
            except ApiException as exc:
                if getattr(exc, "status", None) == 404 and missing_node == "skip":
                    return {"name": name, "changed": False, "skipped": True}
                if getattr(exc, "status", None) == 404:
                    raise NodeApiError(
                        "Node %s does not exist in the cluster (set missing_node=skip to pass over it)" % name
                    ) from exc
                raise api_refused("Node %s" % name, exc) from exc
            result = plan_lib.plan(node, labels, taints, state)
            if not result["patch"] or self.check_mode:
                return self._report(name, result)
            patch = result["patch"]
            patch.setdefault("metadata", {})["resourceVersion"] = node["metadata"]["resourceVersion"]
            try:
                self.calls += 1
                # A JSON merge patch: `null` removes a label, and the taints list is
                # replaced whole (a strategic merge would merge it by key and keep ours).
                self.api.patch_node(
                    name, patch, _content_type="application/merge-patch+json", _preload_content=False
                )
                return self._report(name, result)
            except ApiException as exc:
                if getattr(exc, "status", None) != 409:
                    raise api_refused("Node %s" % name, exc) from exc
        raise NodeApiError(
            "Node %s kept changing under us: %d patches in a row met a newer resourceVersion"
            % (name, CONFLICT_RETRIES)
        )

    @staticmethod
    def _report(name, result):
        report = {"name": name, "changed": result["changed"], "skipped": False}
        for key in (
            "labels_added",
            "labels_updated",
            "labels_removed",
            "taints_added",
            "taints_removed",
            "adopted",
        ):
            report[key] = result[key]
        report["labels"] = result["after"]["labels"]
        report["taints"] = result["after"]["taints"]
        report["_before"] = result["before"]
        return report


def connect(params):
    """The CoreV1Api for the kubernetes.core auth options in params."""
    auth = dict((key, params[key]) for key in AUTH_ARG_SPEC)
    try:
        return CoreV1Api(get_api_client(**auth).client.client)
    except Exception as exc:  # kubeconfig or in-cluster configuration errors
        raise NodeApiError("Cannot reach the Kubernetes API: %s" % exc) from exc


def apply_all(labeler, requests, params, warn):
    """(reports, diff): each request applied in order; a NodeApiError carries the Nodes done so far."""
    reports = []
    diff = {"before": {}, "after": {}}
    for name, labels, taints in requests:
        try:
            report = labeler.apply(name, labels, taints, params["state"], params["missing_node"])
        except NodeApiError as error:
            partial = dict(error.result, nodes=reports, api_calls=labeler.calls)
            raise NodeApiError(str(error), partial) from error
        before = report.pop("_before", None)
        if report["changed"]:
            diff["before"][name] = before
            diff["after"][name] = {"labels": report["labels"], "taints": report["taints"]}
        for adopted in report.get("adopted", []):
            warn("Node %s: took over %s, which gpu_node had not set" % (name, adopted))
        reports.append(report)
    return reports, diff


def run(module):
    """gpu_node's result for module.params; patches only outside check mode.

    Raises MissingLibrary, plan_lib.NodeSpecError for a request that is not valid (before
    the API is reached) and NodeApiError.
    """
    if K8S_CORE_ERROR:
        raise MissingLibrary("the kubernetes.core collection", K8S_CORE_ERROR)
    if KUBERNETES_ERROR:
        raise MissingLibrary("kubernetes", KUBERNETES_ERROR)
    requests = plan_lib.requests_from(module.params)
    labeler = NodeLabeler(connect(module.params), module.check_mode)
    if len(requests) >= PREFETCH_FROM:
        labeler.prefetch()
    reports, diff = apply_all(labeler, requests, module.params, module.warn)
    changed = any(r["changed"] for r in reports)
    result = dict(changed=changed, nodes=reports, api_calls=labeler.calls)
    if module._diff and changed:
        result["diff"] = diff
    return result
