# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dra.prepare over the lab's claims and toolkit spec (lab/daemon/dra_node.py), no gRPC:
idempotent Prepare, checks of the claim, Unprepare from the checkpoint alone, and the
kubernetes client's ResourceV1Api behind dra.claims.api_reader."""

import http.server
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
import yaml
from dp_harness import H100_UUIDS, PROFILES, ROOT, build_mock
from dra_node import Claims, claim, toolkit_spec
from kubernetes import client as kube

from gpuops_device_plugin.dra import claims as dra_claims
from gpuops_device_plugin.dra.cdi import ClaimSpecs
from gpuops_device_plugin.dra.checkpoint import COMPLETED, STARTED, Checkpoint
from gpuops_device_plugin.dra.devices import gpu_devices
from gpuops_device_plugin.dra.prepare import Claim, Preparer
from gpuops_device_plugin.dra.timeslice import TimeSliceError, TimeSlicer

POOL = "node-a"
GPUS = gpu_devices([{"index": i, "uuid": uuid} for i, uuid in enumerate(H100_UUIDS)])
TIME_SLICED = {
    "apiVersion": "gpu.gpuops.k8s/v1alpha1",
    "kind": "GpuConfig",
    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}},
}


class NvidiaSmi:
    """The nvidia-smi calls a Preparer makes, recorded; a GPU UUID in `refuse` makes them exit 6
    (what NVIDIA's nvidia-smi answers for a UUID its NVML does not know)."""

    def __init__(self):
        self.calls = []
        self.refuse = set()

    def __call__(self, argv):
        self.calls.append(list(argv[1:]))
        refused = argv[argv.index("-i") + 1] in self.refuse
        return subprocess.CompletedProcess(
            argv, 6 if refused else 0, "", "No devices were found" if refused else ""
        )

    def slices(self):
        """(uuid, --set-timeslice value) of each compute-policy call, in order."""
        return [(call[2], call[4]) for call in self.calls if call[0] == "compute-policy"]


class Node:
    """A node's DRA state in a temporary directory: checkpoint, CDI specs, the toolkit's spec."""

    def __init__(self, root):
        self.root = root
        self.checkpoint_path = str(root / "checkpoint.json")
        self.cdi_dir = str(root / "cdi")
        self.toolkit = root / "nvidia.yaml"
        self.toolkit.write_text(json.dumps(toolkit_spec(H100_UUIDS)))  # JSON is YAML
        self.nvidia_smi = NvidiaSmi()

    def preparer(self, reader, devices=None):
        """A Preparer as a fresh daemon makes one: the checkpoint read from disk (the GPUS
        unless devices are given)."""
        return Preparer(
            Checkpoint.load(self.checkpoint_path),
            ClaimSpecs(self.cdi_dir, str(self.toolkit)),
            GPUS if devices is None else devices,
            reader,
            pool=POOL,
            # Any executable for the lookup; the calls go to the recorder.
            slicer=TimeSlicer("/bin/true", runner=self.nvidia_smi),
        )

    def spec_path(self, uid):
        return os.path.join(self.cdi_dir, f"k8s.gpu.gpuops.k8s-claim_{uid}.json")

    def spec(self, uid):
        with open(self.spec_path(uid)) as handle:
            return json.load(handle)

    def specs(self):
        return sorted(os.listdir(self.cdi_dir)) if os.path.isdir(self.cdi_dir) else []


@pytest.fixture
def node(tmp_path):
    return Node(tmp_path)


def named(document):
    metadata = document["metadata"]
    return Claim(metadata["namespace"], metadata["uid"], metadata["name"])


def cdi_id(document, device):
    return f"k8s.gpu.gpuops.k8s/claim={document['metadata']['uid']}-{device}"


def test_prepare_writes_the_claims_spec_and_answers_its_devices(node):
    train = claim("train", [("gpus", "gpu-2"), ("gpus", "gpu-5")])
    answer = node.preparer(Claims(train)).prepare([named(train)])

    (result,) = answer.values()
    assert list(answer) == [train["metadata"]["uid"]]
    assert result.error == ""
    assert [(d.pool, d.device, d.request_names, d.cdi_device_ids) for d in result.devices] == [
        (POOL, "gpu-2", ("gpus",), (cdi_id(train, "gpu-2"),)),
        (POOL, "gpu-5", ("gpus",), (cdi_id(train, "gpu-5"),)),
    ]
    spec = node.spec(train["metadata"]["uid"])
    nodes = [n["path"] for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]]
    assert nodes == ["/dev/nvidia2", "/dev/nvidia5"]


def test_prepare_twice_answers_the_same_from_the_checkpoint_without_get_or_write(node):
    train = claim("train", [("gpus", "gpu-0")])
    api = Claims(train)
    preparer = node.preparer(api)

    first = preparer.prepare([named(train)])
    written = os.stat(node.spec_path(train["metadata"]["uid"]))
    again = preparer.prepare([named(train)])
    after_restart = node.preparer(api).prepare([named(train)])

    assert again == first == after_restart
    assert api.reads == 1
    now = os.stat(node.spec_path(train["metadata"]["uid"]))
    assert (now.st_ino, now.st_mtime_ns) == (written.st_ino, written.st_mtime_ns)


def test_a_spec_lost_with_a_reboot_is_written_again_from_the_checkpoint(node):
    """/var/run is a tmpfs: after a reboot the checkpoint knows the claim, its spec is gone,
    and the restarted kubelet prepares the claim again (the claim may even be gone from the API)."""
    train = claim("train", [("gpus", "gpu-3"), ("gpus", "gpu-4")])
    first = node.preparer(Claims(train)).prepare([named(train)])
    spec = node.spec(train["metadata"]["uid"])
    os.unlink(node.spec_path(train["metadata"]["uid"]))

    api = Claims()
    assert node.preparer(api).prepare([named(train)]) == first
    assert node.spec(train["metadata"]["uid"]) == spec
    assert api.reads == 0


def test_one_device_serving_two_requests_is_answered_once_with_both(node):
    """Subrequests of a prioritized list come as <request>/<subrequest>: the kubelet knows <request>."""
    both = claim("both", [("big/h100", "gpu-3"), ("small", "gpu-3"), ("small", "gpu-4")])
    (result,) = node.preparer(Claims(both)).prepare([named(both)]).values()
    assert [(d.device, d.request_names) for d in result.devices] == [
        ("gpu-3", ("big", "small")),
        ("gpu-4", ("small",)),
    ]
    assert len(node.spec(both["metadata"]["uid"])["devices"]) == 2


def test_devices_of_other_drivers_in_the_claim_are_left_to_them(node):
    mixed = claim("mixed", [("gpus", "gpu-1")])
    mixed["status"]["allocation"]["devices"]["results"].append(
        {"request": "nic", "driver": "sriov.example.com", "pool": POOL, "device": "vf-0"}
    )
    mixed["status"]["allocation"]["devices"]["config"].append(
        {
            "source": "FromClaim",
            "requests": [],
            "opaque": {"driver": "sriov.example.com", "parameters": {"x": 1}},
        }
    )
    (result,) = node.preparer(Claims(mixed)).prepare([named(mixed)]).values()
    assert result.error == ""
    assert [d.device for d in result.devices] == ["gpu-1"]


def refused(node, document, api=None):
    """Prepare document's claim; return its error after checking nothing was prepared."""
    preparer = node.preparer(api or Claims(document))
    (result,) = preparer.prepare([named(document)]).values()
    assert result.devices == ()
    assert node.specs() == []
    assert preparer.checkpoint.get(document["metadata"]["uid"]) is None
    return result.error


def test_a_claim_gone_from_the_api_is_refused(node):
    gone = claim("gone", [("gpus", "gpu-0")], namespace="team-a")
    assert refused(node, gone, api=Claims()) == "claim team-a/gone: not found in the API"


def test_a_claim_whose_uid_differs_is_refused_as_replaced(node):
    current = claim("train", [("gpus", "gpu-0")])
    asked = Claim("default", "11111111-2222-3333-4444-555555555555", "train")
    (result,) = node.preparer(Claims(current)).prepare([asked]).values()
    assert result.error == (
        f"claim default/train: has UID {current['metadata']['uid']}, the kubelet asked for {asked.uid}:"
        " it was replaced"
    )
    assert node.specs() == []


def test_a_claim_not_allocated_is_refused(node):
    pending = claim("pending", [("gpus", "gpu-0")], allocated=False)
    assert refused(node, pending) == "claim default/pending: is not allocated (status.allocation is empty)"


def test_a_claim_of_another_driver_is_refused(node):
    theirs = claim("theirs", [("gpus", "gpu-0")], driver="gpu.nvidia.com")
    assert refused(node, theirs) == (
        "claim default/theirs: allocates no device of driver gpu.gpuops.k8s (drivers: gpu.nvidia.com)"
    )


def test_a_claim_of_another_pool_is_refused(node):
    elsewhere = claim("elsewhere", [("gpus", "gpu-0")], pool="node-b")
    assert refused(node, elsewhere) == (
        "claim default/elsewhere: allocates gpu.gpuops.k8s devices of pool node-b, this node's is node-a"
    )


def test_a_device_this_node_does_not_have_is_refused(node):
    ninth = claim("ninth", [("gpus", "gpu-8")])
    assert refused(node, ninth) == (
        "claim default/ninth: allocates gpu-8 of pool node-a, unknown on this node"
        " (its GPUs: gpu-0, gpu-1, gpu-2, gpu-3, gpu-4, gpu-5, gpu-6, gpu-7)"
    )


def test_our_opaque_parameters_are_checked(node):
    good = claim("good", [("gpus", "gpu-0")], configs=[((), TIME_SLICED)])
    mps = {**TIME_SLICED, "sharing": {"strategy": "MPS"}}
    bad = claim("bad", [("gpus", "gpu-1")], configs=[(("gpus",), mps)])

    answer = node.preparer(Claims(good, bad)).prepare([named(good), named(bad)])

    assert answer[good["metadata"]["uid"]].error == ""
    assert answer[bad["metadata"]["uid"]].error == (
        "status.allocation.devices.config[0].opaque.parameters.sharing.strategy: 'MPS' is not valid;"
        " expected one of TimeSlicing (MPS is not served)"
    )
    assert node.specs() == [os.path.basename(node.spec_path(good["metadata"]["uid"]))]


def test_a_time_sliced_claim_sets_its_gpus_time_slice_and_unprepare_sets_it_back(node):
    train = claim("train", [("gpus", "gpu-0"), ("gpus", "gpu-3")], configs=[((), TIME_SLICED)])
    uid = train["metadata"]["uid"]

    (result,) = node.preparer(Claims(train)).prepare([named(train)]).values()

    assert result.error == ""
    # NVIDIA's driver's two commands per GPU: compute mode shared, then the interval (Short: 1).
    assert node.nvidia_smi.calls == [
        ["-i", H100_UUIDS[0], "-c", "DEFAULT"],
        ["compute-policy", "-i", H100_UUIDS[0], "--set-timeslice", "1"],
        ["-i", H100_UUIDS[3], "-c", "DEFAULT"],
        ["compute-policy", "-i", H100_UUIDS[3], "--set-timeslice", "1"],
    ]
    recorded = Checkpoint.load(node.checkpoint_path).get(uid)
    assert [(d.device, d.time_slice) for d in recorded.devices] == [("gpu-0", "Short"), ("gpu-3", "Short")]

    # Prepared again from the checkpoint: nothing set twice.
    node.preparer(Claims(train)).prepare([named(train)])
    assert len(node.nvidia_smi.calls) == 4

    # A restarted daemon, the claim gone from the API: Default (0) again on both.
    assert node.preparer(Claims()).unprepare([named(train)]) == {uid: ""}
    assert node.nvidia_smi.slices() == [
        (H100_UUIDS[0], "1"),
        (H100_UUIDS[3], "1"),
        (H100_UUIDS[0], "0"),
        (H100_UUIDS[3], "0"),
    ]


def test_a_time_slice_applies_to_the_requests_its_config_names_and_the_claims_config_wins(node):
    long = {**TIME_SLICED, "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}
    unshared = {"apiVersion": "gpu.gpuops.k8s/v1alpha1", "kind": "GpuConfig"}
    train = claim(
        "train",
        [("big", "gpu-1"), ("small", "gpu-2"), ("other", "gpu-4")],
        configs=[(("big", "small"), TIME_SLICED), (("small",), long), (("other",), unshared)],
    )

    (result,) = node.preparer(Claims(train)).prepare([named(train)]).values()

    assert result.error == ""
    assert node.nvidia_smi.slices() == [(H100_UUIDS[1], "1"), (H100_UUIDS[2], "3")]
    recorded = Checkpoint.load(node.checkpoint_path).get(train["metadata"]["uid"])
    assert [(d.device, d.time_slice) for d in recorded.devices] == [
        ("gpu-1", "Short"),
        ("gpu-2", "Long"),
        ("gpu-4", ""),
    ]


def test_a_gpu_two_claims_time_slice_is_set_back_when_the_last_one_goes(node):
    first = claim("first", [("gpu", "gpu-5")], configs=[((), TIME_SLICED)])
    second = claim("second", [("gpu", "gpu-5")], configs=[((), TIME_SLICED)])
    preparer = node.preparer(Claims(first, second))
    preparer.prepare([named(first), named(second)])

    assert preparer.unprepare([named(first)]) == {first["metadata"]["uid"]: ""}
    assert node.nvidia_smi.slices() == [(H100_UUIDS[5], "1"), (H100_UUIDS[5], "1")]

    assert preparer.unprepare([named(second)]) == {second["metadata"]["uid"]: ""}
    assert node.nvidia_smi.slices()[-1] == (H100_UUIDS[5], "0")


def test_a_time_slice_nvidia_smi_refuses_fails_the_claim_before_its_spec(node):
    train = claim("train", [("gpus", "gpu-6")], configs=[((), TIME_SLICED)])
    node.nvidia_smi.refuse.add(H100_UUIDS[6])
    preparer = node.preparer(Claims(train))

    (failed,) = preparer.prepare([named(train)]).values()

    assert failed.error == (
        f"GPU {H100_UUIDS[6]}: time-slice Short: /bin/true -i {H100_UUIDS[6]} -c DEFAULT exited 6:"
        " No devices were found"
    )
    assert node.specs() == []
    assert preparer.checkpoint.get(train["metadata"]["uid"]).state == STARTED
    # The GPU answers again: the kubelet's next Prepare sets it and completes the claim.
    node.nvidia_smi.refuse.clear()
    (redone,) = node.preparer(Claims(train)).prepare([named(train)]).values()
    assert redone.error == ""
    assert node.nvidia_smi.slices() == [(H100_UUIDS[6], "1")]


def test_unprepare_succeeds_when_the_time_slice_cannot_be_set_back(node):
    """The driver or the GPU may be gone at Unprepare: the claim still goes, with a warning."""
    train = claim("train", [("gpus", "gpu-7")], configs=[((), TIME_SLICED)])
    node.preparer(Claims(train)).prepare([named(train)])
    node.nvidia_smi.refuse.add(H100_UUIDS[7])

    assert node.preparer(Claims()).unprepare([named(train)]) == {train["metadata"]["uid"]: ""}
    assert node.specs() == []
    assert Checkpoint.load(node.checkpoint_path).get(train["metadata"]["uid"]) is None


def test_a_reboot_sets_the_time_slice_again_with_the_lost_spec(node):
    train = claim("train", [("gpus", "gpu-2")], configs=[((), TIME_SLICED)])
    node.preparer(Claims(train)).prepare([named(train)])
    os.remove(node.spec_path(train["metadata"]["uid"]))  # /var/run emptied by the reboot

    (again,) = node.preparer(Claims()).prepare([named(train)]).values()

    assert again.error == ""
    assert node.nvidia_smi.slices() == [(H100_UUIDS[2], "1"), (H100_UUIDS[2], "1")]


def test_nvidias_own_nvidia_smi_sets_a_time_slice_on_nvidias_mock(monkeypatch):
    """Debian's build of NVIDIA's nvidia-smi 550.163.01 (lab/driver/nvidia-smi.sh) over NVIDIA's
    mock NVML: the commands TimeSlicer runs are ones NVIDIA's binary accepts, and a GPU its
    NVML does not know is refused with nvidia-smi's own words."""
    proc = subprocess.run(
        ["bash", str(ROOT / "lab" / "driver" / "nvidia-smi.sh")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    nvidia_smi = proc.stdout.strip().splitlines()[-1]
    monkeypatch.setenv("LD_LIBRARY_PATH", str(Path(build_mock())))
    monkeypatch.setenv("MOCK_NVML_CONFIG", str(PROFILES / "h100-8x-nvswitch.yaml"))
    slicer = TimeSlicer(nvidia_smi)

    slicer.apply(H100_UUIDS[1], "Medium")
    slicer.apply(H100_UUIDS[1], "Default")

    unknown = "GPU-00000000-0000-0000-0000-00000000dead"
    with pytest.raises(TimeSliceError) as refused:
        slicer.apply(unknown, "Short")
    assert f"GPU {unknown}: time-slice Short: {nvidia_smi} -i {unknown} -c DEFAULT exited 6" in str(
        refused.value
    )
    assert "No devices were found" in str(refused.value)


MIG_UUID = "MIG-3f1e0c1b-7d4a-5e2f-9a8b-1c2d3e4f5a6b"
# A GPU with MIG enabled, gpu-8: one MIG device (GPU instance 2, compute instance 0).
MIG_GPU = {
    "index": 8,
    "uuid": "GPU-8c2f4b1e-0000-4000-8000-00000000a100",
    "mig": {
        "current": "enabled",
        "devices": [{"uuid": MIG_UUID, "gpu_instance_id": 2, "compute_instance_id": 0}],
    },
}
# How nvidia-ctk's spec names a MIG device besides "<gpu>:<mig>": by its MIG UUID
# (pkg/nvcdi/namer.go, deviceNameUUID.GetMigDeviceName), with its own device nodes.
MIG_EDITS = {
    "deviceNodes": [
        {"path": "/dev/nvidia8"},
        {"path": "/dev/nvidia-caps/nvidia-cap21"},
        {"path": "/dev/nvidia-caps/nvidia-cap22"},
    ]
}


def with_mig_device(node):
    spec = json.loads(node.toolkit.read_text())
    spec["devices"].append({"name": MIG_UUID, "containerEdits": MIG_EDITS})
    node.toolkit.write_text(json.dumps(spec))
    return {**GPUS, **gpu_devices([MIG_GPU])}


def test_a_claim_on_a_mig_device_gets_the_toolkits_edits_of_that_mig_device(node):
    devices = with_mig_device(node)
    train = claim("train", [("gpu", "gpu-8-mig-2-0")])

    (result,) = node.preparer(Claims(train), devices=devices).prepare([named(train)]).values()

    assert result.error == ""
    assert result.devices[0].cdi_device_ids == (cdi_id(train, "gpu-8-mig-2-0"),)
    assert node.spec(train["metadata"]["uid"])["devices"] == [
        {"name": f"{train['metadata']['uid']}-gpu-8-mig-2-0", "containerEdits": MIG_EDITS}
    ]


def test_a_time_slice_on_a_mig_device_is_refused(node):
    devices = with_mig_device(node)
    train = claim("train", [("gpu", "gpu-8-mig-2-0")], configs=[(("gpu",), TIME_SLICED)])

    (result,) = node.preparer(Claims(train), devices=devices).prepare([named(train)]).values()

    assert result.error == (
        "status.allocation.devices.config[0].opaque.parameters.sharing: 'TimeSlicing' is not valid;"
        " time-slicing applies to whole GPUs, and gpu-8-mig-2-0 is a MIG device of gpu-8:"
        " leave this request's config without sharing"
    )
    assert node.nvidia_smi.calls == [] and node.specs() == []


def test_every_claim_is_answered_when_some_fail(node):
    good = claim("good", [("gpus", "gpu-0")])
    elsewhere = claim("elsewhere", [("gpus", "gpu-1")], pool="node-b")
    gone = claim("gone", [("gpus", "gpu-2")])

    def broken_api(namespace, name):
        if name == "gone":
            raise RuntimeError("connection reset")
        return Claims(good, elsewhere)(namespace, name)

    answer = node.preparer(broken_api).prepare([named(good), named(elsewhere), named(gone)])

    assert {uid: bool(result.error) for uid, result in answer.items()} == {
        good["metadata"]["uid"]: False,
        elsewhere["metadata"]["uid"]: True,
        gone["metadata"]["uid"]: True,
    }
    assert answer[gone["metadata"]["uid"]].error == (
        "internal error preparing the claim: RuntimeError('connection reset')"
    )


def test_a_missing_toolkit_spec_fails_the_claim_and_a_later_prepare_redoes_it(node):
    train = claim("train", [("gpus", "gpu-6")])
    toolkit = node.toolkit.read_text()
    node.toolkit.unlink()
    preparer = node.preparer(Claims(train))

    (failed,) = preparer.prepare([named(train)]).values()
    assert "systemctl start nvidia-cdi-refresh.service" in failed.error
    assert preparer.checkpoint.get(train["metadata"]["uid"]).state == STARTED

    node.toolkit.write_text(toolkit)
    (redone,) = node.preparer(Claims(train)).prepare([named(train)]).values()
    assert redone.error == ""
    assert [
        n["path"] for n in node.spec(train["metadata"]["uid"])["devices"][0]["containerEdits"]["deviceNodes"]
    ] == ["/dev/nvidia6"]


def test_a_prepare_cut_off_after_begin_is_redone(node):
    """A crash after checkpoint begin: the claim is STARTED, maybe with a spec half done."""
    train = claim("train", [("gpus", "gpu-1")])
    uid = train["metadata"]["uid"]
    Checkpoint.load(node.checkpoint_path).begin(uid, "default", "train")
    os.makedirs(node.cdi_dir)
    with open(node.spec_path(uid), "w") as handle:
        handle.write("{")
    api = Claims(train)

    preparer = node.preparer(api)
    assert [c.uid for c in preparer.checkpoint.stale()] == [uid]
    (result,) = preparer.prepare([named(train)]).values()

    assert result.error == ""
    assert api.reads == 1
    assert node.spec(uid)["devices"][0]["name"] == f"{uid}-gpu-1"
    assert Checkpoint.load(node.checkpoint_path).get(uid).state == COMPLETED


def test_unprepare_needs_neither_the_api_nor_nvml(node):
    train = claim("train", [("gpus", "gpu-0"), ("gpus", "gpu-7")])
    node.preparer(Claims(train)).prepare([named(train)])
    assert len(node.specs()) == 1

    api = Claims()  # the claim is gone from the API
    restarted = node.preparer(api, devices={})  # and NVML found no GPU
    assert restarted.unprepare([named(train)]) == {train["metadata"]["uid"]: ""}
    assert restarted.unprepare([named(train)]) == {train["metadata"]["uid"]: ""}

    assert api.reads == 0
    assert node.specs() == []
    assert Checkpoint.load(node.checkpoint_path).get(train["metadata"]["uid"]) is None


def test_unprepare_of_a_claim_never_prepared_succeeds(node):
    assert node.preparer(Claims()).unprepare([Claim("default", "a1b2", "never")]) == {"a1b2": ""}


class ClaimHandler(http.server.BaseHTTPRequestHandler):
    """GET /apis/resource.k8s.io/v1/namespaces/<namespace>/resourceclaims/<name> from ApiServer."""

    def do_GET(self):
        parts = self.path.split("?")[0].strip("/").split("/")
        found = self.server.claims.get((parts[4], parts[6])) if len(parts) == 7 else None
        status = self.server.status or (200 if found else 404)
        body = json.dumps(found if status == 200 else {"kind": "Status", "code": status}).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        """Quiet: the test says what went wrong."""


class ApiServer(http.server.ThreadingHTTPServer):
    """An API server that serves one call: GET a ResourceClaim."""

    def __init__(self, claims):
        self.claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
        self.status = None  # set to answer every GET with that status
        super().__init__(("127.0.0.1", 0), ClaimHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def resource_api(self):
        configuration = kube.Configuration(host="http://127.0.0.1:%d" % self.server_address[1])
        return kube.ResourceV1Api(kube.ApiClient(configuration))


def test_the_kubernetes_clients_claim_reads_as_the_apis_json():
    train = claim("train", [("big/h100", "gpu-3")], namespace="team-a", configs=[((), TIME_SLICED)])
    server = ApiServer([train])
    try:
        read = dra_claims.api_reader(server.resource_api())
        document = dra_claims.read_claim(read, "team-a", "train", train["metadata"]["uid"])
        assert dra_claims.our_devices(document, "gpu.gpuops.k8s", POOL) == (
            dra_claims.AllocatedDevice("big", "gpu-3"),
        )
        (config,) = dra_claims.our_configs(document, "gpu.gpuops.k8s")
        assert config.parameters == TIME_SLICED

        assert read("team-a", "gone") is None
        server.status = 403
        with pytest.raises(
            dra_claims.ClaimReadError, match="claim team-a/train: cannot be read from the API"
        ):
            read("team-a", "train")
    finally:
        server.shutdown()


REAL_GPU = os.path.join(os.path.dirname(__file__), "..", "fixtures", "real_gpu")
REAL_UUID = "GPU-00000000-0000-4000-8000-000000000000"
# Each recording's toolkit spec, and how many of the driver's files it mounts (its README).
REAL_MOUNTS = {"h100-80gb-hbm3": 35, "h200": 36}


@pytest.mark.parametrize("board", sorted(REAL_MOUNTS))
def test_a_claim_spec_on_the_toolkit_spec_of_a_real_gpu(tmp_path, board):
    """nvidia-ctk 1.20's spec on driver 580.159.04 (tests/fixtures/real_gpu/BOARD)."""
    toolkit = os.path.join(REAL_GPU, board, "nvidia.yaml")
    uid = "7d0c6b52-3f1e-4a8b-9c2d-5e6f7a8b9c0d"
    real = claim("train", [("gpu", "gpu-0")], uid=uid)
    preparer = Preparer(
        Checkpoint.load(str(tmp_path / "checkpoint.json")),
        ClaimSpecs(str(tmp_path / "cdi"), toolkit),
        gpu_devices([{"index": 0, "uuid": REAL_UUID}]),
        Claims(real),
        pool=POOL,
        slicer=TimeSlicer("/bin/true", runner=NvidiaSmi()),
    )

    (result,) = preparer.prepare([named(real)]).values()

    assert result.error == ""
    assert result.devices[0].cdi_device_ids == (f"k8s.gpu.gpuops.k8s/claim={uid}-gpu-0",)
    with open(toolkit) as handle:
        generated = yaml.safe_load(handle)
    with open(tmp_path / "cdi" / f"k8s.gpu.gpuops.k8s-claim_{uid}.json") as handle:
        spec = json.load(handle)
    (by_uuid,) = [d for d in generated["devices"] if d["name"] == REAL_UUID]
    assert spec == {
        "cdiVersion": "0.5.0",
        "kind": "k8s.gpu.gpuops.k8s/claim",
        "devices": [{"name": f"{uid}-gpu-0", "containerEdits": by_uuid["containerEdits"]}],
        "containerEdits": generated["containerEdits"],
    }
    (hook,) = spec["devices"][0]["containerEdits"]["hooks"]
    assert hook["args"][-2:] == ["--gpu-id", REAL_UUID]
    assert len(spec["containerEdits"]["mounts"]) == REAL_MOUNTS[board]
