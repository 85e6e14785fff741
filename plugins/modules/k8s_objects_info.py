#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: k8s_objects_info
short_description: Read several kinds of Kubernetes objects in one call
version_added: 0.1.0
description:
  - Answers several M(kubernetes.core.k8s_info) queries over one API client, in one module
    run, and returns each query's result under the name the caller gave it, shaped exactly
    as M(kubernetes.core.k8s_info) returns it (the same code, C(K8sService.find), answers it).
  - For roles that read many objects at once (the C(gpu_doctor) role reads a node's Node,
    its RuntimeClass, the DRA driver's objects and dcgm-exporter's) in one task instead of one
    per object, each of which would start Python and import the kubernetes client again.
  - Every query is checked before the API is reached; one that is not valid fails the task
    with its name, the field and what would be valid.
  - Queries that are the same are asked of the API once, so a task that reads for every host
    of a play may name the objects the hosts share once per host.
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
    support: none
options:
  queries:
    description:
      - The reads, each under a name of the caller's choosing, which names its result in
        RV(objects).
      - Each is a dict of the M(kubernetes.core.k8s_info) options C(kind) (required),
        C(api_version) (default V(v1)), C(name), C(namespace), C(label_selectors) and
        C(field_selectors).
    type: dict
    required: true
seealso:
  - module: kubernetes.core.k8s_info
"""

EXAMPLES = r"""
- name: Read a GPU node's Node, its RuntimeClass and dcgm-exporter's pod on it
  gpuops.k8s.k8s_objects_info:
    queries:
      node:
        kind: Node
        name: gpu-node-1
      runtime_class:
        api_version: node.k8s.io/v1
        kind: RuntimeClass
        name: nvidia
      dcgm_pods:
        kind: Pod
        namespace: gpu-operator
        label_selectors: [app.kubernetes.io/name=dcgm-exporter]
        field_selectors: [spec.nodeName=gpu-node-1]
  delegate_to: localhost
  register: api

- name: Say whether the Node is Ready
  ansible.builtin.debug:
    msg: >-
      {{ api.objects.node.resources[0].status.conditions
         | selectattr('type', 'equalto', 'Ready') | list }}
  when: api.objects.node.resources | length > 0
"""

RETURN = r"""
objects:
  description: Each query's result, under its name, as M(kubernetes.core.k8s_info) returns it.
  returned: success
  type: dict
  sample:
    runtime_class:
      api_found: true
      resources: [{apiVersion: node.k8s.io/v1, kind: RuntimeClass, handler: nvidia, metadata: {name: nvidia}}]
  contains:
    resources:
      description: The objects found; empty where none matches.
      type: list
      elements: dict
    api_found:
      description: Whether the API server serves the query's kind at its C(api_version).
      type: bool
"""

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuops.k8s.plugins.module_utils._k8s_reads import QueryError, check_queries, read_all

try:
    from ansible_collections.kubernetes.core.plugins.module_utils.args_common import AUTH_ARG_SPEC
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.client import get_api_client
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.core import AnsibleK8SModule
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.exceptions import CoreException
    from ansible_collections.kubernetes.core.plugins.module_utils.k8s.service import K8sService
except ImportError:  # kubernetes.core is a declared dependency; say so clearly if absent
    AUTH_ARG_SPEC = {}
    K8S_CORE_ERROR = traceback.format_exc()
else:
    K8S_CORE_ERROR = None


def main():
    if K8S_CORE_ERROR:
        module = AnsibleModule(
            argument_spec=dict(queries=dict(type="dict", required=True)), supports_check_mode=True
        )
        module.fail_json(msg=missing_required_lib("the kubernetes.core collection"), exception=K8S_CORE_ERROR)
    # kubernetes.core's wrapper, as k8s_info has it: it checks the kubernetes client is
    # there, and get_api_client asks it for the client's version.
    module = AnsibleK8SModule(
        module_class=AnsibleModule,
        argument_spec=dict(AUTH_ARG_SPEC, queries=dict(type="dict", required=True)),
        supports_check_mode=True,
    )
    try:
        queries = check_queries(module.params["queries"])
    except QueryError as error:
        module.fail_json(msg=str(error))
    try:
        service = K8sService(get_api_client(module), module)
        objects = read_all(service.find, queries)
    except CoreException as error:
        module.fail_from_exception(error)
    module.exit_json(changed=False, objects=objects)


if __name__ == "__main__":
    main()
