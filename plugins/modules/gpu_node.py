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

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.k8s.plugins.module_utils import _node_api as node_api
from ansible_collections.gpuops.k8s.plugins.module_utils._node_labels import TAINT_EFFECTS, NodeSpecError

ARGUMENT_SPEC = dict(
    name=dict(type="str"),
    labels=dict(type="dict", default={}),
    taints=dict(
        type="list",
        elements="dict",
        default=[],
        options=dict(
            key=dict(type="str", required=True, no_log=False),
            value=dict(type="str", default=""),
            effect=dict(type="str", required=True, choices=list(TAINT_EFFECTS)),
        ),
    ),
    nodes=dict(type="list", elements="dict"),
    state=dict(type="str", default="present", choices=["present", "absent"]),
    missing_node=dict(type="str", default="fail", choices=["fail", "skip"]),
)


def main():
    module = AnsibleModule(
        argument_spec=dict(ARGUMENT_SPEC, **node_api.AUTH_ARG_SPEC),
        mutually_exclusive=[("name", "nodes")],
        required_one_of=[("name", "nodes")],
        supports_check_mode=True,
    )
    try:
        result = node_api.run(module)
    except node_api.MissingLibrary as error:
        module.fail_json(msg=missing_required_lib(error.library), exception=error.traceback)
    except NodeSpecError as error:
        module.fail_json(msg=str(error))
    except node_api.NodeApiError as error:
        module.fail_json(msg=str(error), **error.result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
