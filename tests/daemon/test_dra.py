# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The DRA front end over gRPC: its two sockets served in this process, the kubelet's side
played by lab/daemon/dra_kubelet_standin.py over real unix sockets, claims and the toolkit's
CDI spec from lab/daemon/dra_node.py.

Registration and the versions a kubelet chooses, Prepare (idempotent, per-claim errors),
Unprepare without the API and NVML and after a restart, and the health stream.
"""

import json
import logging
import os
import shutil
import time

import pytest
from dp_harness import H100_UUIDS, short_tempdir
from dra_kubelet_standin import KUBELET_1_35, KUBELET_1_37, Kubelet, register
from dra_node import Claims, claim, toolkit_spec

from gpuops_device_plugin._plugin_config import DEFAULT_DRA_NVIDIA_SMI
from gpuops_device_plugin.dra.cdi import ClaimSpecs
from gpuops_device_plugin.dra.checkpoint import Checkpoint
from gpuops_device_plugin.dra.devices import gpu_devices
from gpuops_device_plugin.dra.endpoint import dra_endpoint
from gpuops_device_plugin.dra.health import report
from gpuops_device_plugin.dra.prepare import Preparer
from gpuops_device_plugin.dra.server import SUPPORTED_VERSIONS, HealthStreams
from gpuops_device_plugin.dra.timeslice import TimeSlicer
from gpuops_device_plugin.health import HealthState

POOL = "node-a"
GPUS = gpu_devices([{"index": i, "uuid": uuid} for i, uuid in enumerate(H100_UUIDS)])
KUBELET_V1BETA1 = Kubelet(("v1beta1.DRAPlugin",), ())


class Node:
    """One node: the kubelet's directories (short: unix socket paths), our state, the driver."""

    def __init__(self, root):
        self.registration = os.path.join(root, "plugins_registry", "gpu.gpuops.k8s-reg.sock")
        self.plugin = os.path.join(root, "plugins", "gpu.gpuops.k8s", "dra.sock")
        self.checkpoint = os.path.join(root, "plugins", "gpu.gpuops.k8s", "checkpoint.json")
        self.cdi_dir = os.path.join(root, "cdi")
        self.toolkit = os.path.join(root, "nvidia.yaml")
        with open(self.toolkit, "w") as handle:
            json.dump(toolkit_spec(H100_UUIDS), handle)  # JSON is YAML
        self.health = HealthState()
        self.endpoint = None
        self.clients = []

    def start(self, api, devices=None, refresh_s=10.0):
        """Serve as a daemon starting now would: the checkpoint read from disk (GPUS unless
        devices are given)."""
        devices = GPUS if devices is None else devices
        os.makedirs(os.path.dirname(self.checkpoint), exist_ok=True)
        preparer = Preparer(
            Checkpoint.load(self.checkpoint),
            ClaimSpecs(self.cdi_dir, self.toolkit),
            devices,
            api,
            pool=POOL,
            # These claims ask for no time-slice: the daemon's own default, never run.
            slicer=TimeSlicer(DEFAULT_DRA_NVIDIA_SMI),
        )
        streams = HealthStreams(
            lambda: report(devices, POOL, self.health, time.time()), self.health, refresh_s
        )
        self.endpoint = dra_endpoint(preparer, streams, self.plugin, self.registration)
        self.endpoint.serve()
        return self

    def register(self, kubelet=KUBELET_1_37):
        client = register(self.registration, kubelet)
        self.clients.append(client)
        return client

    def stop(self):
        for client in self.clients:
            client.close()
        self.clients = []
        if self.endpoint is not None:
            self.endpoint.stop()

    def spec_files(self):
        return sorted(os.listdir(self.cdi_dir)) if os.path.isdir(self.cdi_dir) else []


@pytest.fixture
def node():
    root = short_tempdir("dra-")
    node = Node(root)
    yield node
    node.stop()
    shutil.rmtree(root, ignore_errors=True)


def ids(document):
    metadata = document["metadata"]
    return metadata["namespace"], metadata["uid"], metadata["name"]


def test_registration_names_the_driver_and_a_1_37_kubelet_chooses_v1(node, caplog):
    caplog.set_level(logging.INFO, logger="gpuops_device_plugin.dra")
    client = node.start(Claims()).register()

    assert client.info.type == "DRAPlugin"
    assert client.info.name == "gpu.gpuops.k8s"
    assert client.info.endpoint == node.plugin
    assert tuple(client.info.supported_versions) == SUPPORTED_VERSIONS
    assert (client.plugin_service, client.health_service) == ("v1.DRAPlugin", "v1.DRAResourceHealth")
    assert "the kubelet registered DRA driver gpu.gpuops.k8s at " + node.plugin in caplog.text


@pytest.mark.parametrize(
    ("kubelet", "chosen"),
    [
        (KUBELET_1_35, ("v1.DRAPlugin", "v1alpha1.DRAResourceHealth")),
        (KUBELET_V1BETA1, ("v1beta1.DRAPlugin", "")),
    ],
)
def test_older_kubelets_get_the_versions_they_know(node, kubelet, chosen):
    train = claim("train", [("gpus", "gpu-1")])
    client = node.start(Claims(train)).register(kubelet)

    assert (client.plugin_service, client.health_service) == chosen
    answer = client.prepare(ids(train))
    assert answer[train["metadata"]["uid"]]["devices"][0]["device_name"] == "gpu-1"
    assert client.unprepare(ids(train)) == {train["metadata"]["uid"]: ""}


def test_prepare_twice_gives_the_same_answer_and_writes_the_spec_once(node):
    train = claim("train", [("gpus", "gpu-2"), ("gpus", "gpu-5")], namespace="team-a")
    api = Claims(train)
    client = node.start(api).register()
    uid = train["metadata"]["uid"]

    first = client.prepare(ids(train))
    (spec,) = node.spec_files()
    written = os.stat(os.path.join(node.cdi_dir, spec))
    again = client.prepare(ids(train))

    assert (
        first
        == again
        == {
            uid: {
                "devices": [
                    {
                        "request_names": ["gpus"],
                        "pool_name": POOL,
                        "device_name": device,
                        "cdi_device_ids": [f"k8s.gpu.gpuops.k8s/claim={uid}-{device}"],
                    }
                    for device in ("gpu-2", "gpu-5")
                ],
                "error": "",
            }
        }
    )
    assert api.reads == 1
    assert node.spec_files() == [f"k8s.gpu.gpuops.k8s-claim_{uid}.json"]
    now = os.stat(os.path.join(node.cdi_dir, spec))
    assert (now.st_ino, now.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)


def test_claims_of_another_pool_driver_or_uid_fail_alone(node):
    good = claim("good", [("gpus", "gpu-0")])
    elsewhere = claim("elsewhere", [("gpus", "gpu-1")], pool="node-b")
    theirs = claim("theirs", [("gpus", "gpu-2")], driver="gpu.nvidia.com")
    replaced = claim("replaced", [("gpus", "gpu-3")])
    client = node.start(Claims(good, elsewhere, theirs, replaced)).register()
    stale_uid = "11111111-2222-3333-4444-555555555555"

    answer = client.prepare(ids(good), ids(elsewhere), ids(theirs), ("default", stale_uid, "replaced"))

    assert {uid: result["error"] for uid, result in answer.items()} == {
        good["metadata"]["uid"]: "",
        elsewhere["metadata"]["uid"]: (
            "claim default/elsewhere: allocates gpu.gpuops.k8s devices of pool node-b, this node's is node-a"
        ),
        theirs["metadata"]["uid"]: (
            "claim default/theirs: allocates no device of driver gpu.gpuops.k8s (drivers: gpu.nvidia.com)"
        ),
        stale_uid: (
            f"claim default/replaced: has UID {replaced['metadata']['uid']}, the kubelet asked for"
            f" {stale_uid}: it was replaced"
        ),
    }
    assert all(not answer[uid]["devices"] for uid in answer if uid != good["metadata"]["uid"])
    assert node.spec_files() == [f"k8s.gpu.gpuops.k8s-claim_{good['metadata']['uid']}.json"]


def test_unprepare_once_the_claim_is_gone_from_the_api(node):
    train = claim("train", [("gpus", "gpu-4")])
    api = Claims(train)
    client = node.start(api).register()
    client.prepare(ids(train))

    api.delete("default", "train")
    assert client.unprepare(ids(train)) == {train["metadata"]["uid"]: ""}
    assert client.unprepare(ids(train)) == {train["metadata"]["uid"]: ""}
    assert node.spec_files() == []
    assert api.reads == 1


def test_a_restarted_server_without_api_or_nvml_unprepares_from_the_checkpoint(node):
    train = claim("train", [("gpus", "gpu-6"), ("gpus", "gpu-7")])
    node.start(Claims(train)).register().prepare(ids(train))
    node.stop()
    assert len(node.spec_files()) == 1

    api = Claims()
    client = node.start(api, devices={}).register()  # no claim in the API, no GPU found
    assert client.unprepare(ids(train)) == {train["metadata"]["uid"]: ""}

    assert api.reads == 0
    assert node.spec_files() == []
    assert Checkpoint.load(node.checkpoint).get(train["metadata"]["uid"]) is None


def all_are(status):
    return lambda watch: (
        len(watch.devices) == 8 and {health for health, _message in watch.devices.values()} == {status}
    )


@pytest.mark.parametrize("kubelet", [KUBELET_1_37, KUBELET_1_35], ids=["v1", "v1alpha1"])
def test_the_health_stream_follows_a_device_down_and_back(node, kubelet):
    client = node.start(Claims()).register(kubelet)
    watch = client.watch_health()

    devices = watch.wait(lambda w: w.messages >= 1)
    assert sorted(devices) == sorted((POOL, f"gpu-{i}") for i in range(8))
    assert set(devices.values()) == {("HEALTHY", "")}

    node.health.mark([H100_UUIDS[3]], False, "XID 79 on GPU %s" % H100_UUIDS[3])
    devices = watch.wait(lambda w: w.devices[POOL, "gpu-3"][0] == "UNHEALTHY")
    assert devices[POOL, "gpu-3"] == ("UNHEALTHY", "XID 79 on GPU %s" % H100_UUIDS[3])
    assert {health for key, (health, _message) in devices.items() if key != (POOL, "gpu-3")} == {"HEALTHY"}

    node.health.mark([H100_UUIDS[3]], True, "re-probe succeeded")
    watch.wait(all_are("HEALTHY"))


def test_the_health_stream_repeats_the_list_and_ends_when_the_server_stops(node):
    client = node.start(Claims(), refresh_s=0.1).register()
    watch = client.watch_health()

    watch.wait(lambda w: w.messages >= 3 and all_are("HEALTHY")(w), timeout=5)
    started = time.monotonic()
    node.endpoint.stop()
    watch.wait(lambda w: w.ended, timeout=5)
    assert time.monotonic() - started < 2
    assert not os.path.exists(node.registration)
    assert not os.path.exists(node.plugin)
