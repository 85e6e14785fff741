# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The daemon as a process with `frontEnd: dra`, over NVIDIA's mock NVML: the kubelet's side
played by lab/daemon/dra_kubelet_standin.py over the daemon's real sockets, the API by a
real kube-apiserver of the lab's release (lab/daemon/private_api.py: claims written as the
scheduler writes them, ResourceSlices read back as stored).

Registration, Prepare and Unprepare through the sockets, the checkpoint across a restart,
Unprepare without NVML, health into the stream and the slice, slices published again as
soon as the kubelet wipes them, a device plugin's leftover nvidia.com/gpu removed from the
Node's status, and a reload that would change the front end. The Node authorizer and the
real kubelet are the lab's (tests/integration).
"""

import itertools
import json
import os
import shutil
import signal
import socket

import pytest
from dp_harness import H100_UUIDS, Daemon, build_mock, short_tempdir
from dra_kubelet_standin import register
from dra_node import claim, toolkit_spec
from private_api import NodeApi, PrivateApi

DRIVER = "gpu.gpuops.k8s"
NODE_NAMES = (f"node-{n}" for n in itertools.count())
# The private API server's self-signed certificate: the test clients do not verify it.
pytestmark = pytest.mark.filterwarnings("ignore:Unverified HTTPS request")
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
  resyncSeconds: {resync}
  extendedResourceName: nvidia.com/gpu
"""


@pytest.fixture(scope="module")
def lib_dir():
    return build_mock()


@pytest.fixture(scope="module")
def api():
    server = PrivateApi(short_tempdir("api-")).start()
    yield server
    server.stop()


class DraNode:
    """One node's directories (short: unix socket paths), its Node in the private API."""

    def __init__(self, root, api, resync=0.5):
        self.root = root
        self.name = next(NODE_NAMES)
        self.resync = resync
        self.api = NodeApi(api, self.name, DRIVER)
        self.server = api
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
        kubeconfig = self.server.kubeconfig(os.path.join(self.root, "kubeconfig"))
        with open(path, "w") as handle:
            handle.write(
                text.format(node=self.name, kubeconfig=kubeconfig, root=self.root, resync=self.resync)
            )
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

    def our_slices(self, count=8, timeout=None):
        """The node's slices once published with count devices."""
        wait_for(
            lambda: sum(len(s["spec"]["devices"]) for s in self.api.slices().values()) == count,
            timeout or UP_WITHIN,
        )
        return list(self.api.slices().values())

    def close(self):
        for kubelet in self.clients:
            kubelet.close()
        for daemon in self.daemons:
            daemon.cleanup()


@pytest.fixture
def node(api):
    root = short_tempdir("dra-")
    made = DraNode(root, api)
    yield made
    made.close()
    shutil.rmtree(root, ignore_errors=True)


# How long a daemon may take to start and act. Idle it takes about 2 s; under make test's
# full load (this lane beside the lab's kubelets and molecule) one took over 15 s once.
UP_WITHIN = 30.0


def wait_for(predicate, timeout=UP_WITHIN):
    import time  # noqa: PLC0415

    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("not reached in %gs" % timeout)
        time.sleep(0.05)


def allocate(node, name, *devices):
    document = node.api.put_claim(
        claim(name, [("gpus", device) for device in devices], pool=node.name, namespace=node.api.namespace)
    )
    return document, (node.api.namespace, document["metadata"]["uid"], name)


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
        (device, node.name, [f"k8s.{DRIVER}/claim={uid}-{device}"]) for device in ("gpu-2", "gpu-5")
    ]
    assert node.spec_files() == [f"k8s.{DRIVER}-claim_{uid}.json"]
    assert node.checkpointed() == {uid: "completed"}

    assert client.unprepare(named) == {uid: ""}
    assert node.spec_files() == []
    assert node.checkpointed() == {}
    daemon.wait_log(f"unprepared claim {node.api.namespace}/train ({uid})")


def test_the_nodes_slice_is_published_owned_by_its_node_and_again_after_a_wipe(node, lib_dir):
    node.start(lib_dir)
    (published,) = node.our_slices()
    assert published["spec"]["driver"] == DRIVER
    assert published["spec"]["nodeName"] == node.name
    assert published["spec"]["pool"]["name"] == node.name
    assert [d["name"] for d in published["spec"]["devices"]] == [f"gpu-{i}" for i in range(8)]
    assert published["metadata"]["ownerReferences"][0]["uid"] == node.api.uid
    assert published["metadata"]["name"].startswith(f"{node.name}-{DRIVER}-")
    assert published["spec"]["devices"][0]["capacity"]["memory"]["value"] == "81559Mi"
    # Stored by 1.37's API server (DRAConsumableCapacity on): claims asking for part of the
    # memory can share a GPU.
    assert published["spec"]["devices"][0]["allowMultipleAllocations"] is True


def test_a_wiped_slice_is_published_again_at_once_not_at_the_next_resync(api):
    root = short_tempdir("dra-")
    node = DraNode(root, api, resync=300)  # the watch, not the resync, must bring it back
    try:
        daemon = node.start(build_mock())
        (published,) = node.our_slices()
        node.api.wipe()  # the kubelet's cleanup when no plugin of the driver is connected
        (again,) = node.our_slices(timeout=10)
        assert again["metadata"]["name"] != published["metadata"]["name"]
        daemon.wait_log("a ResourceSlice of this node was deleted: publishing again")
    finally:
        node.close()
        shutil.rmtree(root, ignore_errors=True)


def test_a_device_plugins_leftover_extended_resource_leaves_the_nodes_status(node, lib_dir):
    """A node moved from a device plugin: its Node still says nvidia.com/gpu 8, and the
    scheduler would place nvidia.com/gpu pods by it and the kubelet start them without a GPU."""
    node.api.set_status_resources({"cpu": "2", "nvidia.com/gpu": "8"})
    daemon = node.start(lib_dir)
    # Logged once patched; a timeout shows the daemon's log.
    daemon.wait_log(
        f"Node {node.name} advertised nvidia.com/gpu 8 from a device plugin no longer on it", UP_WITHIN
    )
    assert node.api.status_resources() == ({"cpu": "2"}, {"cpu": "2"})


def test_a_registered_device_plugin_keeps_its_resource_in_the_nodes_status(node, lib_dir):
    node.api.set_status_resources({"cpu": "2", "nvidia.com/gpu": "8"})
    # A device plugin serving beside the kubelet: its socket accepts connections (a file
    # of that name alone is what a killed plugin leaves, and does not count).
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as serving:
        serving.bind(os.path.join(node.device_plugin_dir, "nvidia-gpu.sock"))
        serving.listen()
        node.start(lib_dir)
        node.our_slices()
        versions = node.api.versions()
        wait_for(
            lambda: node.api.versions() == versions and node.daemons[0].text().count("ResourceSlices") >= 1
        )
        assert node.api.status_resources()[0]["nvidia.com/gpu"] == "8"


def test_prepared_claims_survive_a_restart_of_the_daemon(node, lib_dir):
    first = node.start(lib_dir)
    train, named = allocate(node, "train", "gpu-0")
    uid = train["metadata"]["uid"]
    before = node.register().prepare(named)[uid]
    assert before["error"] == ""
    first.signal(signal.SIGTERM)
    assert first.proc.wait(timeout=15) == 0
    assert not os.path.exists(node.registration)
    # Its own stop ends the slice watch's read: not a failure to warn of.
    assert "cannot watch" not in first.text(), first.text()
    assert node.checkpointed() == {uid: "completed"}

    # Gone from the API: reading it would fail the claim; the answer is the checkpoint's.
    node.api.delete_claim(node.api.namespace, "train")
    node.start(lib_dir)
    kubelet = node.register()
    assert kubelet.prepare(named)[uid] == before
    assert kubelet.unprepare(named) == {uid: ""}
    assert node.spec_files() == []


def test_without_nvml_it_still_unprepares_and_offers_nothing(node, lib_dir):
    first = node.start(lib_dir)
    train, named = allocate(node, "train", "gpu-4")
    uid = train["metadata"]["uid"]
    assert node.register().prepare(named)[uid]["error"] == ""
    node.our_slices()
    first.stop()
    versions = node.api.versions()

    no_driver = short_tempdir("no-nvml-")  # no libnvidia-ml.so.1: the driver is gone
    try:
        daemon = node.start(no_driver)
        client = node.register()
        daemon.wait_log("NVML is not usable")
        later, other = allocate(node, "later", "gpu-1")
        assert "unknown on this node" in client.prepare(other)[later["metadata"]["uid"]]["error"]
        assert client.unprepare(named) == {uid: ""}
        assert node.spec_files() == []
        assert node.api.versions() == versions  # no slice published or deleted without NVML
    finally:
        shutil.rmtree(no_driver, ignore_errors=True)


def test_an_xid_taints_the_slice_and_reaches_the_health_stream_until_recovery(node, lib_dir):
    daemon = node.start(lib_dir)
    node.our_slices()
    watch = node.register().watch_health()
    watch.wait(lambda w: len(w.state) == 8 and all(h == "HEALTHY" for h, _m in w.state.values()))

    daemon.inject("xid-3-79")
    devices = watch.wait(lambda w: w.state.get((node.name, "gpu-3"), ("",))[0] == "UNHEALTHY")
    assert "79" in devices[node.name, "gpu-3"][1]

    def taints():
        (current,) = node.api.slices().values()
        return {d["name"]: [t["key"] for t in d.get("taints", [])] for d in current["spec"]["devices"]}

    wait_for(lambda: taints()["gpu-3"] == [f"{DRIVER}/xid"])
    assert [name for name, keys in taints().items() if keys] == ["gpu-3"]

    daemon.clear("xid-3-79")
    watch.wait(lambda w: w.state.get((node.name, "gpu-3"), ("",))[0] == "HEALTHY", timeout=15)
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


REAL_H200 = os.path.join(os.path.dirname(__file__), "..", "fixtures", "real_gpu", "h200")


def test_the_slice_and_the_prepare_are_shaped_as_on_a_real_h200(node, lib_dir):
    """lab/real-gpu/record.py ran this front end on a real H200 (tests/fixtures/real_gpu/h200,
    dra.json), nvidia-smi -q beside it as the witness. Over the mock the slice has the same
    attributes, capacity and sharing (nvlinkDomain aside: the H200 stood alone, the mock's
    H100s sit on an NVSwitch), and a prepared claim the same CDI device name."""
    with open(os.path.join(REAL_H200, "dra.json")) as handle:
        real = json.load(handle)
    with open(os.path.join(REAL_H200, "nvidia-smi.txt")) as handle:
        smi = handle.read()
    (real_device,) = real["slice_spec"]["devices"]
    assert real_device["attributes"]["productName"] == {"string": "NVIDIA H200"}
    assert "Product Name                                       : NVIDIA H200" in smi
    total = smi.split("FB Memory Usage")[1].split("Total")[1].split(":")[1].split()[0]
    assert real_device["capacity"]["memory"]["value"] == f"{total}Mi"
    assert real["health_stream_after_10s"] == {"real-gpu-host/gpu-0": ["HEALTHY", ""]}
    assert real["prepare"]["error"] == "" and real["spec_files_after_unprepare"] == []

    node.start(lib_dir)
    (published,) = node.our_slices()
    device = published["spec"]["devices"][0]

    def shape(attributes):
        return {name: sorted(value) for name, value in attributes.items() if name != "nvlinkDomain"}

    assert shape(device["attributes"]) == shape(real_device["attributes"])
    assert sorted(device["capacity"]) == sorted(real_device["capacity"])
    assert device["allowMultipleAllocations"] is real_device["allowMultipleAllocations"]
    train, named = allocate(node, "train", "gpu-0")
    uid = train["metadata"]["uid"]
    (prepared,) = node.register().prepare(named)[uid]["devices"]
    (real_prepared,) = real["prepare"]["devices"]
    real_uid = real_prepared["cdi_device_ids"][0].split("claim=")[1][: len(uid)]
    assert prepared["cdi_device_ids"] == [i.replace(real_uid, uid) for i in real_prepared["cdi_device_ids"]]
