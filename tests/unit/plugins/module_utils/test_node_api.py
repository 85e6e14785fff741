# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_node_api over a fake CoreV1Api: what gpu_node returns, and what each failure carries."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _node_api as node_api

LABELS = {"accelerator": "nvidia-h100"}
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


class Refused(Exception):
    """Stands in for kubernetes' ApiException (the unit tests run without the client)."""

    def __init__(self, status, reason):
        super(Refused, self).__init__(reason)
        self.status = status
        self.reason = reason
        self.body = json.dumps({"kind": "Status", "code": status})


class Response:
    def __init__(self, data):
        self.data = json.dumps(data).encode()


class FakeApi:
    """Nodes by name; patch_node raises patch_errors in turn, list_node list_error."""

    def __init__(self, *names, patch_errors=(), list_error=None):
        self.nodes = {
            name: {"metadata": {"name": name, "resourceVersion": "7", "labels": {"team": "ml"}}, "spec": {}}
            for name in names
        }
        self.patch_errors = list(patch_errors)
        self.list_error = list_error
        self.patched = []

    def read_node(self, name, _preload_content):
        if name not in self.nodes:
            raise Refused(404, "Not Found")
        return Response(self.nodes[name])

    def list_node(self, limit, _preload_content):
        if self.list_error is not None:
            raise self.list_error
        return Response({"items": [self.nodes[name] for name in sorted(self.nodes)], "metadata": {}})

    def patch_node(self, name, patch, _content_type, _preload_content):
        if self.patch_errors:
            raise self.patch_errors.pop(0)
        self.patched.append(name)
        return Response({})


class Module:
    """What node_api.run reads of AnsibleModule; warnings are kept in order."""

    def __init__(self, check_mode=False, diff=False, **params):
        self.params = dict(
            {
                "name": None,
                "labels": {},
                "taints": [],
                "nodes": None,
                "state": "present",
                "missing_node": "fail",
            },
            **params,
        )
        self.check_mode = check_mode
        self._diff = diff
        self.warnings = []

    def warn(self, message):
        self.warnings.append(message)


@pytest.fixture
def api(monkeypatch):
    """Make run() reach the fake API given; the libraries count as installed."""
    monkeypatch.setattr(node_api, "ApiException", Refused)
    monkeypatch.setattr(node_api, "K8S_CORE_ERROR", None)
    monkeypatch.setattr(node_api, "KUBERNETES_ERROR", None)

    def use(fake):
        monkeypatch.setattr(node_api, "connect", lambda params: fake)
        return fake

    return use


def failure(module):
    with pytest.raises(node_api.NodeApiError) as raised:
        node_api.run(module)
    return str(raised.value), raised.value.result


def report(name, labels_added=(), labels=None, taints_added=(), taints=()):
    return {
        "name": name,
        "changed": True,
        "skipped": False,
        "labels_added": list(labels_added),
        "labels_updated": [],
        "labels_removed": [],
        "taints_added": list(taints_added),
        "taints_removed": [],
        "adopted": [],
        "labels": labels,
        "taints": list(taints),
    }


GPU_1_LABELLED = report(
    "gpu-1",
    labels_added=["accelerator"],
    labels={"team": "ml", "accelerator": "nvidia-h100"},
    taints_added=["nvidia.com/gpu=present:NoSchedule"],
    taints=[GPU_TAINT],
)


def test_check_mode_patches_nothing_and_returns_the_diff(api):
    fake = api(FakeApi("gpu-1"))
    result = node_api.run(Module(check_mode=True, diff=True, name="gpu-1", labels=LABELS, taints=[GPU_TAINT]))
    assert fake.patched == []
    assert result == {
        "changed": True,
        "nodes": [GPU_1_LABELLED],
        "api_calls": 1,
        "diff": {
            "before": {"gpu-1": {"labels": {"team": "ml"}, "taints": []}},
            "after": {
                "gpu-1": {"labels": {"team": "ml", "accelerator": "nvidia-h100"}, "taints": [GPU_TAINT]}
            },
        },
    }


def test_a_missing_node_fails_with_the_nodes_done_before_it_or_is_skipped(api):
    nodes = [{"name": "gpu-1", "labels": LABELS, "taints": [GPU_TAINT]}, {"name": "gpu-9"}]
    api(FakeApi("gpu-1"))
    assert failure(Module(nodes=nodes)) == (
        "Node gpu-9 does not exist in the cluster (set missing_node=skip to pass over it)",
        {"nodes": [GPU_1_LABELLED], "api_calls": 3},
    )
    api(FakeApi("gpu-1"))
    result = node_api.run(Module(nodes=nodes, missing_node="skip"))
    assert result["nodes"][1] == {"name": "gpu-9", "changed": False, "skipped": True}


def test_a_refused_patch_fails_with_the_apis_body(api):
    api(FakeApi("gpu-1", patch_errors=[Refused(422, "Unprocessable Entity")]))
    assert failure(Module(name="gpu-1", labels=LABELS)) == (
        "Node gpu-1: the API answered 422 Unprocessable Entity",
        {"body": '{"kind": "Status", "code": 422}', "nodes": [], "api_calls": 2},
    )


def test_a_node_that_keeps_changing_fails_after_the_retries(api):
    conflicts = [Refused(409, "Conflict")] * node_api.CONFLICT_RETRIES
    api(FakeApi("gpu-1", patch_errors=conflicts))
    assert failure(Module(name="gpu-1", labels=LABELS)) == (
        "Node gpu-1 kept changing under us: 5 patches in a row met a newer resourceVersion",
        {"nodes": [], "api_calls": 2 * node_api.CONFLICT_RETRIES},
    )


def test_one_conflict_is_planned_again_and_patched(api):
    fake = api(FakeApi("gpu-1", patch_errors=[Refused(409, "Conflict")]))
    result = node_api.run(Module(name="gpu-1", labels=LABELS))
    assert (fake.patched, result["changed"], result["api_calls"]) == (["gpu-1"], True, 4)


def test_a_refused_fleet_listing_fails_with_the_apis_body_alone(api):
    names = ["gpu-%02d" % n for n in range(node_api.PREFETCH_FROM)]
    api(FakeApi(*names, list_error=Refused(403, "Forbidden")))
    assert failure(Module(nodes=[{"name": name} for name in names])) == (
        "Listing Nodes: the API answered 403 Forbidden",
        {"body": '{"kind": "Status", "code": 403}'},
    )


def test_an_unreachable_api_fails_with_its_message_alone(monkeypatch):
    def no_configuration(**auth):
        raise ValueError("Invalid kube-config file. No configuration found.")

    monkeypatch.setattr(node_api, "AUTH_ARG_SPEC", {"kubeconfig": {"type": "raw"}})
    monkeypatch.setattr(node_api, "get_api_client", no_configuration)
    with pytest.raises(node_api.NodeApiError) as raised:
        node_api.connect({"kubeconfig": "/nowhere"})
    assert (
        str(raised.value)
        == "Cannot reach the Kubernetes API: Invalid kube-config file. No configuration found."
    )
    assert raised.value.result == {}


def test_a_missing_library_is_named_with_its_import_traceback(monkeypatch):
    monkeypatch.setattr(node_api, "K8S_CORE_ERROR", "ModuleNotFoundError: kubernetes.core")
    with pytest.raises(node_api.MissingLibrary) as raised:
        node_api.run(Module(name="gpu-1"))
    assert (raised.value.library, raised.value.traceback) == (
        "the kubernetes.core collection",
        "ModuleNotFoundError: kubernetes.core",
    )
