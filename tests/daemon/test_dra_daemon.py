# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The daemon as a process with `frontEnd: dra`, over NVIDIA's mock NVML: the kubelet's side
played by lab/daemon/dra_kubelet_standin.py over the daemon's real sockets, the API's by
lab/daemon/dra_api_standin.py (claims, the Node, ResourceSlices in memory).

Registration, Prepare and Unprepare through the sockets, the checkpoint across a restart,
Unprepare without NVML, health into the stream and the slice, slices published again after
the kubelet wiped them, and a reload that would change the front end. What only a real API
server shows (fields dropped by a feature gate, the Node authorizer) is the lab's.
"""

import json
import os
import shutil
import signal

import pytest
from dp_harness import H100_UUIDS, Daemon, build_mock, short_tempdir
from dra_api_standin import NODE_UID, ApiStandin
from dra_kubelet_standin import register
from dra_node import Claims, claim, toolkit_spec

DRIVER = "gpu.gpuops.k8s"
NODE = "node-a"
CONFIG = """\
version: v1
frontEnd: dra
health:
  probeIntervalSeconds: 0.2
  recovery:
    quietPeriodSeconds: 1
dra:
  nodeName: {node}
  kubeconfig: {kubeconfig}
  kubeletRegistryDir: {root}/registry
  kubeletPluginsDir: {root}/plugins
  cdiDir: {root}/cdi
  toolkitSpec: {root}/nvidia.yaml
  resyncSeconds: 0.5
"""


@pytest.fixture(scope="module")
def lib_dir():
    return build_mock()


class DraNode:
    """One node's directories (short: unix socket paths), its claims in the API stand-in."""

    def __init__(self, root):
        self.root = root
        self.claims = Claims()
        self.api = ApiStandin(self.claims, NODE)
        self.registration = os.path.join(root, "registry", f"{DRIVER}-reg.sock")
        self.plugin_socket = os.path.join(root, "plugins", DRIVER, "dra.sock")
        self.checkpoint = os.path.join(root, "plugins", DRIVER, "checkpoint.json")
        self.cdi_dir = os.path.join(root, "cdi")
        self.device_plugin_dir = os.path.join(root, "device-plugins")
        os.makedirs(self.device_plugin_dir)
        with open(os.path.join(root, "nvidia.yaml"), "w") as handle:
            json.dump(toolkit_spec(H100_UUIDS), handle)  # JSON is YAML
        self.config = self.write_config(CONFIG)
        self.daemons = []
        self.clients = []

    def write_config(self, text):
        path = os.path.join(self.root, "config.yaml")
        kubeconfig = self.api.kubeconfig(os.path.join(self.root, "kubeconfig"))
        with open(path, "w") as handle:
            handle.write(text.format(node=NODE, kubeconfig=kubeconfig, root=self.root))
        return path

    def start(self, lib_dir):
        daemon = Daemon(lib_dir, self.device_plugin_dir, config=self.config).start()
        self.daemons.append(daemon)
        return daemon

    def register(self):
        client = register(self.registration, wait_s=30)
        self.clients.append(client)
        return client

    def spec_files(self):
        return sorted(os.listdir(self.cdi_dir)) if os.path.isdir(self.cdi_dir) else []

    def checkpointed(self):
        with open(self.checkpoint) as handle:
            return {uid: c["state"] for uid, c in json.load(handle)["claims"].items()}

    def our_slices(self, count=8):
        """The node's slices once published with count devices."""
        wait_for(lambda: sum(len(s["spec"]["devices"]) for s in self.api.slices().values()) == count)
        return list(self.api.slices().values())

    def close(self):
        for client in self.clients:
            client.close()
        for daemon in self.daemons:
            daemon.cleanup()
        self.api.shutdown()


@pytest.fixture
def node():
    root = short_tempdir("dra-")
    made = DraNode(root)
    yield made
    made.close()
    shutil.rmtree(root, ignore_errors=True)


def wait_for(predicate, timeout=15.0):
    import time  # noqa: PLC0415

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("not reached in %gs" % timeout)
        time.sleep(0.05)


def allocate(node, name, *devices):
    document = claim(name, [("gpus", device) for device in devices], pool=NODE)
    node.claims.put(document)
    return document, ("default", document["metadata"]["uid"], name)


def test_dra_mode_registers_prepares_and_unprepares_through_its_sockets(node, lib_dir):
    daemon = node.start(lib_dir)
    client = node.register()
    assert (client.info.name, client.info.endpoint) == (DRIVER, node.plugin_socket)
    assert client.plugin_service == "v1.DRAPlugin"
    # One front end: nothing is offered through the device plugin API.
    assert os.listdir(node.device_plugin_dir) == []

    train, named = allocate(node, "train", "gpu-2", "gpu-5")
    uid = train["metadata"]["uid"]
    answer = client.prepare(named)[uid]
    assert answer["error"] == ""
    assert [(d["device_name"], d["pool_name"], d["cdi_device_ids"]) for d in answer["devices"]] == [
        (device, NODE, [f"k8s.{DRIVER}/claim={uid}-{device}"]) for device in ("gpu-2", "gpu-5")
    ]
    assert node.spec_files() == [f"k8s.{DRIVER}-claim_{uid}.json"]
    assert node.checkpointed() == {uid: "completed"}

    assert client.unprepare(named) == {uid: ""}
    assert node.spec_files() == []
    assert node.checkpointed() == {}
    daemon.wait_log(f"unprepared claim default/train ({uid})")


def test_the_nodes_slice_is_published_owned_by_its_node_and_again_after_a_wipe(node, lib_dir):
    node.start(lib_dir)
    (published,) = node.our_slices()
    assert published["spec"]["driver"] == DRIVER
    assert published["spec"]["nodeName"] == NODE
    assert published["spec"]["pool"]["name"] == NODE
    assert [d["name"] for d in published["spec"]["devices"]] == [f"gpu-{i}" for i in range(8)]
    assert published["metadata"]["ownerReferences"][0]["uid"] == NODE_UID
    assert published["metadata"]["name"].startswith(f"{NODE}-{DRIVER}-")

    node.api.wipe()  # the kubelet's cleanup when no plugin of the driver is connected
    (again,) = node.our_slices()
    assert again["metadata"]["name"] != published["metadata"]["name"]


def test_prepared_claims_survive_a_restart_of_the_daemon(node, lib_dir):
    first = node.start(lib_dir)
    train, named = allocate(node, "train", "gpu-0")
    uid = train["metadata"]["uid"]
    before = node.register().prepare(named)[uid]
    assert before["error"] == ""
    first.signal(signal.SIGTERM)
    assert first.proc.wait(timeout=15) == 0
    assert not os.path.exists(node.registration)
    assert node.checkpointed() == {uid: "completed"}

    node.claims.delete("default", "train")  # gone from the API: the answer is the checkpoint's
    reads = node.claims.reads
    node.start(lib_dir)
    client = node.register()
    assert client.prepare(named)[uid] == before
    assert node.claims.reads == reads
    assert client.unprepare(named) == {uid: ""}
    assert node.spec_files() == []


def test_without_nvml_it_still_unprepares_and_offers_nothing(node, lib_dir):
    first = node.start(lib_dir)
    train, named = allocate(node, "train", "gpu-4")
    uid = train["metadata"]["uid"]
    assert node.register().prepare(named)[uid]["error"] == ""
    node.our_slices()
    first.stop()
    writes = node.api.writes

    no_driver = short_tempdir("no-nvml-")  # no libnvidia-ml.so.1: the driver is gone
    try:
        daemon = node.start(no_driver)
        client = node.register()
        daemon.wait_log("NVML is not usable")
        later, other = allocate(node, "later", "gpu-1")
        assert "unknown on this node" in client.prepare(other)[later["metadata"]["uid"]]["error"]
        assert client.unprepare(named) == {uid: ""}
        assert node.spec_files() == []
        assert node.api.writes == writes  # no slice published or deleted without NVML
    finally:
        shutil.rmtree(no_driver, ignore_errors=True)


def test_an_xid_taints_the_slice_and_reaches_the_health_stream_until_recovery(node, lib_dir):
    daemon = node.start(lib_dir)
    node.our_slices()
    watch = node.register().watch_health()
    watch.wait(lambda w: len(w.state) == 8 and all(h == "HEALTHY" for h, _m in w.state.values()))

    daemon.inject("xid-3-79")
    devices = watch.wait(lambda w: w.state.get((NODE, "gpu-3"), ("",))[0] == "UNHEALTHY")
    assert "79" in devices[NODE, "gpu-3"][1]

    def taints():
        (current,) = node.api.slices().values()
        return {d["name"]: [t["key"] for t in d.get("taints", [])] for d in current["spec"]["devices"]}

    wait_for(lambda: taints()["gpu-3"] == [f"{DRIVER}/xid"])
    assert [name for name, keys in taints().items() if keys] == ["gpu-3"]

    daemon.clear("xid-3-79")
    watch.wait(lambda w: w.state.get((NODE, "gpu-3"), ("",))[0] == "HEALTHY", timeout=15)
    wait_for(lambda: taints()["gpu-3"] == [])


def test_a_reload_keeps_dra_and_refuses_to_change_the_front_end(node, lib_dir):
    daemon = node.start(lib_dir)
    node.register()
    node.write_config(CONFIG.replace("frontEnd: dra", "frontEnd: devicePlugin"))
    daemon.signal(signal.SIGHUP)
    daemon.wait_log("reload refused, keeping the running configuration: frontEnd 'devicePlugin'")
    train, named = allocate(node, "train", "gpu-6")
    assert node.register().prepare(named)[train["metadata"]["uid"]]["error"] == ""

    node.write_config(CONFIG)
    daemon.signal(signal.SIGHUP)
    daemon.wait_log("SIGHUP: reloading the configuration")
    # Served again: the second start's sockets (the first one's line came at start).
    wait_for(lambda: daemon.text().count("serving " + node.registration) == 2)
    assert node.register().unprepare(named) == {train["metadata"]["uid"]: ""}


def test_a_kubeconfig_that_cannot_be_read_stops_the_start_with_its_path(node, lib_dir):
    missing = os.path.join(node.root, "no-such-kubeconfig")
    node.config = node.write_config(CONFIG.replace("kubeconfig: {kubeconfig}", "kubeconfig: " + missing))
    rc, log = Daemon(lib_dir, node.device_plugin_dir, config=node.config).run()
    assert rc == 2
    assert f"kubeconfig {missing}: cannot be used" in log
    assert not os.path.exists(node.registration)
