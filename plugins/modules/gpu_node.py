#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_node
short_description: Own the GPU labels and taints of Kubernetes Nodes
version_added: 0.1.0
description:
  - Sets labels and taints on one Node (O(name)) or many (O(nodes)) through the Kubernetes
    API, typically the labels M(gpuops.k8s.gpu_info) computed for the node.
  - It owns only what it set. The keys it manages are recorded on each Node in the
    annotation C(gpuops.k8s/managed); a key it set before and is no longer asked for is
    removed (for example the labels of a GPU model the node no longer has). Labels and
    taints it never set are left exactly as they are, in place and order.
  - A requested key that already exists with another value is taken over and reported in
    RV(nodes[].adopted) and as a warning.
  - Each Node is read, planned and patched with its C(resourceVersion), so a concurrent
    change (the node controller adding a taint) makes the patch fail and the module plan
    again from the new state instead of overwriting it.
  - Runs where the API is reachable (usually the controller, with C(delegate_to) or
    C(run_once)); with O(nodes) one task labels a whole fleet over one connection.
author:
  - gpuops.k8s maintainers (@gpuops)
requirements:
  - kubernetes (Python client) >= 24.2.0
extends_documentation_fragment:
  - gpuops.k8s.attributes
  - kubernetes.core.k8s_auth_options
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
options:
  name:
    description: The Node to change. Mutually exclusive with O(nodes).
    type: str
  labels:
    description:
      - Labels the Node should carry, for example RV(gpuops.k8s.gpu_info#module:labels).
      - Values are strings. Keys under C(kubernetes.io) and C(k8s.io) are refused.
    type: dict
    default: {}
  taints:
    description: Taints the Node should carry.
    type: list
    elements: dict
    default: []
    suboptions:
      key:
        description: Taint key.
        type: str
        required: true
      value:
        description: Taint value (may be empty).
        type: str
        default: ""
      effect:
        description: What the taint does to pods without a matching toleration.
        type: str
        required: true
        choices: [NoSchedule, PreferNoSchedule, NoExecute]
  nodes:
    description:
      - Many Nodes in one task; each item has C(name), C(labels) and C(taints) like the
        options of the same names. Mutually exclusive with O(name).
    type: list
    elements: dict
  state:
    description:
      - V(present) makes each Node carry exactly the requested owned labels and taints.
      - V(absent) removes every label and taint this module owns on the Node (and its
        record), and nothing else.
    type: str
    default: present
    choices: [present, absent]
  missing_node:
    description: What to do when a Node does not exist.
    type: str
    default: fail
    choices: [fail, skip]
notes:
  - Needs RBAC C(get) and C(patch) on C(nodes).
seealso:
  - module: gpuops.k8s.gpu_info
  - name: NVIDIA GPU feature discovery labels
    description: The label keys gpu_info computes and this module applies.
    link: https://github.com/NVIDIA/k8s-device-plugin/tree/main/docs/gpu-feature-discovery
"""

EXAMPLES = r"""
- name: Describe the GPUs
  gpuops.k8s.gpu_info:
  register: gpu

- name: Label and taint this node from its GPUs
  gpuops.k8s.gpu_node:
    name: "{{ inventory_hostname }}"
    labels: "{{ gpu.labels }}"
    taints:
      - key: nvidia.com/gpu
        value: present
        effect: NoSchedule
  delegate_to: localhost

- name: Each host says what it wants
  ansible.builtin.set_fact:
    gpu_node_request:
      name: "{{ inventory_hostname }}"
      labels: "{{ gpu.labels }}"
      taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]

- name: The whole fleet in one task and one API connection
  gpuops.k8s.gpu_node:
    kubeconfig: ~/.kube/config
    nodes: "{{ ansible_play_hosts | map('extract', hostvars, 'gpu_node_request') | list }}"
  run_once: true
  delegate_to: localhost

- name: Remove everything gpu_node set on a node (uninstall)
  gpuops.k8s.gpu_node:
    name: gpu-07
    state: absent
"""

RETURN = r"""
nodes:
  description: One entry per Node, in request order.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The Node.
      type: str
    changed:
      description: Whether the Node was (or, in check mode, would be) patched.
      type: bool
    skipped:
      description: The Node does not exist and O(missing_node=skip).
      type: bool
    labels_added:
      description: Label keys added.
      type: list
      elements: str
    labels_updated:
      description: Label keys whose value changed.
      type: list
      elements: str
    labels_removed:
      description: Owned label keys removed because they are no longer requested.
      type: list
      elements: str
    taints_added:
      description: Taints added, as C(key=value:effect).
      type: list
      elements: str
    taints_removed:
      description: Taints removed, as C(key=value:effect).
      type: list
      elements: str
    adopted:
      description: Requested keys that existed with another value, set by someone else.
      type: list
      elements: str
    labels:
      description: The Node's labels after the change.
      type: dict
    taints:
      description: The Node's taints after the change.
      type: list
      elements: dict
api_calls:
  description: Kubernetes API requests made (reads and patches), for sizing large fleets.
  returned: always
  type: int
  sample: 2
"""

import json
import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

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


class NodeMissing(Exception):
    """A requested Node does not exist (and missing_node is fail)."""


class NodeLabeler:
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
            page = json.loads(self.api.list_node(**kwargs).data)
            for item in page.get("items", []):
                item.setdefault("apiVersion", "v1")
                self.prefetched[item["metadata"]["name"]] = item
            token = page.get("metadata", {}).get("continue")
            if not token:
                return

    def apply(self, name, labels, taints, state, missing_node):
        for _attempt in range(CONFLICT_RETRIES):
            try:
                node = self.read(name)
            except ApiException as exc:
                if getattr(exc, "status", None) == 404 and missing_node == "skip":
                    return {"name": name, "changed": False, "skipped": True}
                if getattr(exc, "status", None) == 404:
                    raise NodeMissing(name) from exc
                raise
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
                    raise
        raise RuntimeError(
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


def requests_from(params):
    """[(name, labels, taints)] with every field checked before anything is read or written."""
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
            raise plan_lib.NodeSpecError("%sname: every item needs the Node's name (got %r)" % (where, item))
        unknown = sorted(set(item) - {"name", "labels", "taints"})
        if unknown:
            raise plan_lib.NodeSpecError(
                "%s%s: unknown field(s); valid: name, labels, taints" % (where, ", ".join(unknown))
            )
        requests.append(
            (
                item["name"],
                plan_lib.normalize_labels(item.get("labels"), where + "labels"),
                plan_lib.normalize_taints(item.get("taints"), where + "taints"),
            )
        )
    names = [r[0] for r in requests]
    duplicates = sorted(set(n for n in names if names.count(n) > 1))
    if duplicates:
        raise plan_lib.NodeSpecError("nodes: %s listed more than once" % ", ".join(duplicates))
    return requests


def apply_all(module, labeler, requests):
    """Apply each request in order; fail the module (with what was done so far) on an error."""
    reports = []
    diff = {"before": {}, "after": {}}
    for name, labels, taints in requests:
        try:
            report = labeler.apply(
                name, labels, taints, module.params["state"], module.params["missing_node"]
            )
        except NodeMissing:
            module.fail_json(
                msg="Node %s does not exist in the cluster (set missing_node=skip to pass over it)" % name,
                nodes=reports,
                api_calls=labeler.calls,
            )
        except RuntimeError as exc:
            module.fail_json(msg=str(exc), nodes=reports, api_calls=labeler.calls)
        except ApiException as exc:
            module.fail_json(
                msg="Node %s: the API answered %s %s" % (name, exc.status, exc.reason),
                body=exc.body,
                nodes=reports,
                api_calls=labeler.calls,
            )
        before = report.pop("_before", None)
        if report["changed"]:
            diff["before"][name] = before
            diff["after"][name] = {"labels": report["labels"], "taints": report["taints"]}
        for adopted in report.get("adopted", []):
            module.warn("Node %s: took over %s, which gpu_node had not set" % (name, adopted))
        reports.append(report)

    return reports, diff


def main():
    argument_spec = dict(
        name=dict(type="str"),
        labels=dict(type="dict", default={}),
        taints=dict(
            type="list",
            elements="dict",
            default=[],
            options=dict(
                key=dict(type="str", required=True, no_log=False),
                value=dict(type="str", default=""),
                effect=dict(type="str", required=True, choices=list(plan_lib.TAINT_EFFECTS)),
            ),
        ),
        nodes=dict(type="list", elements="dict"),
        state=dict(type="str", default="present", choices=["present", "absent"]),
        missing_node=dict(type="str", default="fail", choices=["fail", "skip"]),
    )
    argument_spec.update(AUTH_ARG_SPEC)
    module = AnsibleModule(
        argument_spec=argument_spec,
        mutually_exclusive=[("name", "nodes")],
        required_one_of=[("name", "nodes")],
        supports_check_mode=True,
    )
    if K8S_CORE_ERROR:
        module.fail_json(msg=missing_required_lib("the kubernetes.core collection"), exception=K8S_CORE_ERROR)
    if KUBERNETES_ERROR:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_ERROR)
    try:
        requests = requests_from(module.params)
    except plan_lib.NodeSpecError as exc:
        module.fail_json(msg=str(exc))

    auth = dict((key, module.params[key]) for key in AUTH_ARG_SPEC)
    try:
        api = CoreV1Api(get_api_client(**auth).client.client)
    except Exception as exc:  # kubeconfig or in-cluster configuration errors
        module.fail_json(msg="Cannot reach the Kubernetes API: %s" % exc)
    labeler = NodeLabeler(api, module.check_mode)
    if len(requests) >= PREFETCH_FROM:
        try:
            labeler.prefetch()
        except ApiException as exc:
            module.fail_json(
                msg="Listing Nodes: the API answered %s %s" % (exc.status, exc.reason), body=exc.body
            )

    reports, diff = apply_all(module, labeler, requests)
    changed = any(r["changed"] for r in reports)
    result = dict(changed=changed, nodes=reports, api_calls=labeler.calls)
    if module._diff and changed:
        result["diff"] = diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
