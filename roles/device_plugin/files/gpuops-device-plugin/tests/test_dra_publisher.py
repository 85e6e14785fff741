# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dra.publisher against a fake API server: the calls it makes, and what it reports."""

import copy
import itertools
import json
from datetime import datetime, timedelta, timezone

import pytest
import urllib3
from kubernetes.client import V1DeleteOptions, V1ResourceSlice
from kubernetes.client.exceptions import ApiException
from mock_facts import H100_UUIDS, many_gpus, mock_h100_facts

from gpuops_device_plugin.dra import publisher, slices

NODE = "gpu-node-1"
NODE_UID = "5b0e3a52-0000-4000-8000-00000000beef"
SELECTOR = "spec.nodeName=%s,spec.driver=gpu.gpuops.k8s" % NODE
T0 = datetime(2026, 11, 28, 4, 0, 0, tzinfo=timezone.utc)


class Response:
    """What the client returns with _preload_content=False: the body as bytes."""

    def __init__(self, obj):
        self.data = json.dumps(obj).encode()


def api_error(status, reason, message):
    error = ApiException(status=status, reason=reason)
    error.body = json.dumps({"kind": "Status", "status": "Failure", "reason": reason, "message": message})
    return error


class FakeApiServer:
    """The ResourceV1Api and CoreV1Api calls the publisher makes, over one store.

    Bodies are checked as the real client checks them (its pydantic models) and stored as
    JSON; names come from generateName, resourceVersion changes on every write, replace
    and delete honour it as the API server does. drop_taints: the API server of a cluster
    without DRADeviceTaints, which stores devices without their taints.
    """

    def __init__(self, drop_taints=False):
        self.drop_taints = drop_taints
        self.slices = {}
        self.nodes = {NODE: {"metadata": {"name": NODE, "uid": NODE_UID}}}
        self.calls = []
        self.fail = {}  # method -> exception to raise once
        self._serial = itertools.count(1)

    def _enter(self, method, name):
        self.calls.append((method, name))
        if method in self.fail:
            raise self.fail.pop(method)

    def _store(self, body, name):
        V1ResourceSlice.model_validate(body)  # what the real client does before sending
        stored = copy.deepcopy(body)
        stored["metadata"]["name"] = name
        stored["metadata"].setdefault("uid", "uid-%s" % name)
        stored["metadata"]["resourceVersion"] = str(next(self._serial))
        if self.drop_taints:
            for device in stored["spec"].get("devices", []):
                device.pop("taints", None)
        self.slices[name] = stored
        return Response(stored)

    # CoreV1Api

    def read_node(self, name, _preload_content=True):
        self._enter("read_node", name)
        if name not in self.nodes:
            raise api_error(404, "NotFound", 'nodes "%s" not found' % name)
        return Response(self.nodes[name])

    # ResourceV1Api

    def list_resource_slice(self, field_selector=None, _preload_content=True):
        self._enter("list_resource_slice", field_selector)
        wanted = dict(term.split("=", 1) for term in field_selector.split(","))
        items = [
            s
            for s in self.slices.values()
            if (s["spec"]["nodeName"], s["spec"]["driver"])
            == (wanted["spec.nodeName"], wanted["spec.driver"])
        ]
        return Response({"kind": "ResourceSliceList", "items": items})

    def create_resource_slice(self, body, _preload_content=True):
        self._enter("create_resource_slice", body["metadata"]["generateName"])
        return self._store(body, body["metadata"]["generateName"] + "x%04d" % next(self._serial))

    def replace_resource_slice(self, name, body, _preload_content=True):
        self._enter("replace_resource_slice", name)
        current = self.slices.get(name)
        if current is None:
            raise api_error(404, "NotFound", "not found")
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise api_error(409, "Conflict", "the object has been modified")
        body = copy.deepcopy(body)
        body["metadata"]["uid"] = current["metadata"]["uid"]
        return self._store(body, name)

    def delete_resource_slice(self, name, body=None, _preload_content=True):
        self._enter("delete_resource_slice", name)
        preconditions = V1DeleteOptions.model_validate(body).preconditions
        current = self.slices.get(name)
        if current is None:
            raise api_error(404, "NotFound", "not found")
        if preconditions.resource_version != current["metadata"]["resourceVersion"]:
            raise api_error(409, "Conflict", "precondition failed")
        del self.slices[name]
        return Response({"kind": "Status", "status": "Success"})

    # The kubelet, 30 s after the last plugin of the driver went away.

    def kubelet_cleanup(self):
        self.slices.clear()


class Health:
    def __init__(self):
        self.unhealthy = {}

    def __call__(self):
        return dict(self.unhealthy)


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


def make(facts=None, server=None):
    server = server or FakeApiServer()
    health, clock = Health(), Clock()
    pub = publisher.SlicePublisher(
        server, server, NODE, facts=facts or mock_h100_facts(), unhealthy=health, clock=clock
    )
    return pub, server, health, clock


def methods(server):
    calls = [method for method, _name in server.calls]
    server.calls.clear()
    return calls


def stored_devices(server):
    return {d["name"]: d for s in server.slices.values() for d in s["spec"].get("devices", [])}


# The calls per reconcile


def test_first_reconcile_creates_the_slice_owned_by_the_node():
    pub, server, _health, _clock = make()
    result = pub.reconcile()
    assert methods(server) == ["list_resource_slice", "read_node", "create_resource_slice"]
    assert server.calls == []
    (stored,) = server.slices.values()
    assert stored["metadata"]["name"].startswith("gpu-node-1-gpu.gpuops.k8s-")
    assert stored["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE_UID, "controller": True}
    ]
    assert stored["spec"] == dict(slices.build_slices(mock_h100_facts(), {}, NODE, now=T0)[0], pool={
        "name": NODE, "generation": 1, "resourceSliceCount": 1})  # fmt: skip
    assert result == publisher.ReconcileResult(1, created=(stored["metadata"]["name"],))


def test_the_list_uses_both_field_selectors():
    pub, server, _health, _clock = make()
    pub.reconcile()
    assert server.calls[0] == ("list_resource_slice", SELECTOR)


def test_a_converged_reconcile_is_one_list_and_no_write():
    pub, server, _health, clock = make()
    pub.reconcile()
    methods(server)
    clock.now += timedelta(minutes=5)
    result = pub.reconcile()
    assert methods(server) == ["list_resource_slice"]
    assert not result.changed
    assert result.generation == 1


def test_a_health_change_is_one_update_with_the_next_generation_and_a_taint():
    pub, server, health, clock = make()
    pub.reconcile()
    methods(server)
    clock.now = T0 + timedelta(seconds=42)
    health.unhealthy = {H100_UUIDS[3]: "XID 79 on GPU %s" % H100_UUIDS[3]}
    result = pub.reconcile()
    assert methods(server) == ["list_resource_slice", "replace_resource_slice"]
    assert result.generation == 2
    assert result.updated == tuple(server.slices)
    assert stored_devices(server)["gpu-3"]["taints"] == [
        {
            "key": "gpu.gpuops.k8s/xid",
            "value": "79",
            "effect": "NoSchedule",
            "timeAdded": "2026-11-28T04:00:42Z",
        }
    ]
    assert result.not_stored == ()


def test_a_taint_keeps_the_time_it_was_added():
    pub, server, health, clock = make()
    health.unhealthy = {H100_UUIDS[3]: "lost"}
    pub.reconcile()
    methods(server)
    clock.now += timedelta(hours=1)
    assert not pub.reconcile().changed
    health.unhealthy[H100_UUIDS[5]] = "XID 48"  # another device: the slice is written again
    pub.reconcile()
    found = stored_devices(server)
    assert found["gpu-3"]["taints"][0]["timeAdded"] == "2026-11-28T04:00:00Z"
    assert found["gpu-5"]["taints"][0]["timeAdded"] == "2026-11-28T05:00:00Z"


def test_recovery_removes_the_taint():
    pub, server, health, _clock = make()
    health.unhealthy = {H100_UUIDS[3]: "lost"}
    pub.reconcile()
    health.unhealthy = {}
    result = pub.reconcile()
    assert result.generation == 2
    assert all("taints" not in d for d in stored_devices(server).values())


def test_slices_the_kubelet_deleted_are_published_again():
    pub, server, _health, _clock = make()
    pub.reconcile()
    server.kubelet_cleanup()
    methods(server)
    result = pub.reconcile()
    assert methods(server) == ["list_resource_slice", "read_node", "create_resource_slice"]
    assert len(server.slices) == 1
    assert result.generation == 1


# Several slices


def test_a_pool_over_128_devices_is_two_slices_then_three_with_a_taint_then_two_again():
    pub, server, health, _clock = make(many_gpus(130))
    first = pub.reconcile()
    assert methods(server) == ["list_resource_slice", "read_node"] + ["create_resource_slice"] * 2
    assert sorted(len(s["spec"]["devices"]) for s in server.slices.values()) == [2, 128]

    health.unhealthy = {"GPU-%036d" % 0: "XID 79"}
    tainted = pub.reconcile()
    assert sorted(methods(server)) == sorted(
        ["list_resource_slice", "read_node", "create_resource_slice"] + ["replace_resource_slice"] * 2
    )
    assert sorted(len(s["spec"]["devices"]) for s in server.slices.values()) == [2, 64, 64]
    assert {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"])
            for s in server.slices.values()} == {(2, 3)}  # fmt: skip
    # Each slice went on holding as many of its devices as it could.
    assert set(tainted.updated) == set(first.created)

    health.unhealthy = {}
    healed = pub.reconcile()
    assert sorted(methods(server)) == sorted(
        ["list_resource_slice", "delete_resource_slice"] + ["replace_resource_slice"] * 2
    )
    assert len(healed.deleted) == 1
    assert {s["spec"]["pool"]["generation"] for s in server.slices.values()} == {3}
    assert len(stored_devices(server)) == 130


def test_a_pool_left_at_mixed_generations_is_written_again_at_the_next():
    pub, server, _health, _clock = make(many_gpus(130))
    pub.reconcile()
    behind = sorted(server.slices)[0]  # a write of the last round that did not happen
    server.slices[behind]["spec"]["pool"]["generation"] = 0
    methods(server)
    result = pub.reconcile()
    assert methods(server) == ["list_resource_slice"] + ["replace_resource_slice"] * 2
    assert result.generation == 2
    assert {s["spec"]["pool"]["generation"] for s in server.slices.values()} == {2}


def test_a_slice_of_another_pool_is_deleted_with_preconditions():
    pub, server, _health, _clock = make()
    pub.reconcile()
    stray = copy.deepcopy(next(iter(server.slices.values())))
    stray["metadata"].update(name="stray", uid="uid-stray", resourceVersion="77")
    stray["spec"]["pool"]["name"] = "old-pool-name"
    server.slices["stray"] = stray
    methods(server)
    result = pub.reconcile()
    assert result.deleted == ("stray",)
    assert sorted(methods(server)) == [
        "delete_resource_slice",
        "list_resource_slice",
        "replace_resource_slice",
    ]
    assert "stray" not in server.slices


# What the API server did not store


def test_taints_the_server_dropped_are_reported_once_and_not_written_again():
    pub, server, health, clock = make(server=FakeApiServer(drop_taints=True))
    pub.reconcile()
    health.unhealthy = {H100_UUIDS[3]: "XID 79"}
    result = pub.reconcile()
    (lost,) = result.not_stored
    assert (lost.slice_name, lost.path, lost.dropped) == (result.updated[0], "devices[3].taints", True)
    assert lost.feature_gate == "DRADeviceTaints"
    assert "dropped spec.devices[3].taints" in str(lost)
    assert "DRADeviceTaints" in str(lost)
    methods(server)
    clock.now += timedelta(minutes=1)  # the taint's time would be new: still nothing to write
    assert not pub.reconcile().changed
    assert methods(server) == ["list_resource_slice"]


def test_a_value_the_server_stored_otherwise_is_reported():
    found = publisher.differences("s", {"capacity": {"memory": {"value": "1024Mi"}}}, {
        "capacity": {"memory": {"value": "1Gi"}}})  # fmt: skip
    assert found == [publisher.FieldNotStored("s", "capacity.memory.value", "1024Mi", "1Gi", dropped=False)]
    assert "stored '1Gi' for spec.capacity.memory.value = '1024Mi'" in str(found[0])


def test_fields_the_server_adds_are_not_differences():
    assert publisher.differences("s", {"a": [{"b": 1}]}, {"a": [{"b": 1, "c": 2}], "d": 3}) == []


# API failures


def test_an_api_error_carries_status_and_reason():
    pub, server, health, _clock = make()
    pub.reconcile()
    server.fail["replace_resource_slice"] = api_error(409, "Conflict", "the object has been modified")
    health.unhealthy = {H100_UUIDS[0]: "lost"}
    with pytest.raises(publisher.SliceApiError) as raised:
        pub.reconcile()
    assert (raised.value.status, raised.value.reason) == (409, "Conflict")
    assert raised.value.name in server.slices
    assert str(raised.value).startswith("replace ResourceSlice gpu-node-1-gpu.gpuops.k8s-")
    pub.reconcile()  # the next one (the timer's) gets there
    assert "taints" in stored_devices(server)["gpu-0"]


def test_an_unreachable_api_server_is_a_typed_error():
    pub, server, _health, _clock = make()
    server.fail["list_resource_slice"] = urllib3.exceptions.MaxRetryError(None, "/apis", "refused")
    with pytest.raises(publisher.SliceApiError) as raised:
        pub.reconcile()
    assert (raised.value.status, raised.value.reason) == (None, "Unreachable")


def test_a_missing_node_is_a_typed_error():
    pub, server, _health, _clock = make()
    del server.nodes[NODE]
    with pytest.raises(publisher.SliceApiError, match="get Node gpu-node-1: 404 NotFound"):
        pub.reconcile()


def test_a_slice_already_deleted_is_not_an_error():
    pub, server, _health, _clock = make()
    pub.reconcile()
    stray = copy.deepcopy(next(iter(server.slices.values())))
    stray["metadata"].update(name="stray", uid="uid-stray")
    server.slices["stray"] = stray
    server.fail["delete_resource_slice"] = api_error(404, "NotFound", "gone")
    assert pub.reconcile().deleted == ("stray",)
