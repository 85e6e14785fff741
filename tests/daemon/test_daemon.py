# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The daemon as a process: nvidia-ml-py over the mock NVML, a kubelet stand-in over gRPC.

Every RPC, registration order, kubelet restarts, health with recovery (XIDs, lost GPUs,
device nodes), SIGHUP, SIGTERM, bad configurations, MIG and metrics.
"""

import json
import os
import random
import re
import shutil
import signal
import stat
import statistics
import subprocess
import sys
import time

import grpc
import pytest
from dp_harness import H100_UUIDS, TWO_REPLICAS_CONFIG, Daemon, build_mig_standin, build_mock, short_tempdir
from kubelet_standin import KubeletStandin

from gpuops_device_plugin.api import api_pb2

GPU = "nvidia.com/gpu"
# The daemon on a real H100's NVML, recorded by lab/real-gpu/record.py (its README.md).
REAL_H100 = os.path.join(
    os.path.dirname(__file__), "..", "fixtures", "real_gpu", "h100-80gb-hbm3", "daemon.json"
)


@pytest.fixture(scope="module")
def lib_dir():
    """NVIDIA's mock NVML: every test here runs on it but the MIG one."""
    return build_mock()


@pytest.fixture(scope="module")
def mig_lib_dir():
    """gpuops's MIG stand-in: NVIDIA's mock models no MIG instances."""
    return build_mig_standin()


@pytest.fixture
def plugin_dir():
    path = short_tempdir("dp-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(plugin_dir):
    standin = KubeletStandin(plugin_dir)
    standin.start()
    yield standin
    standin.stop()


@pytest.fixture
def start(lib_dir, plugin_dir):
    started = []

    def _start(library=None, **kwargs):
        daemon = Daemon(library or lib_dir, plugin_dir, **kwargs).start()
        started.append(daemon)
        return daemon

    yield _start
    for daemon in started:
        daemon.cleanup()


def ready(kubelet, resource=GPU, count=8):
    """The kubelet's view of resource once it registered with count healthy devices."""
    client = kubelet.wait_registered(resource)
    client.wait(all_healthy(count))
    return client


def all_healthy(count):
    return lambda devices: len(devices) == count and all(h == "Healthy" for h in devices.values())


def write_config(plugin_dir, text):
    path = os.path.join(plugin_dir, "..", os.path.basename(plugin_dir) + ".yaml")
    with open(path, "w") as handle:
        handle.write(text)
    return os.path.abspath(path)


def test_registers_and_lists_the_eight_h100s(kubelet, start):
    start()
    client = kubelet.wait_registered(GPU)
    devices = client.wait(all_healthy(8))
    assert sorted(devices) == sorted(H100_UUIDS)
    assert client.options.get_preferred_allocation_available is True
    assert client.options.pre_start_required is False
    assert client.endpoint.endswith("/gpuops-gpu.sock")


def test_serves_first_and_registers_when_the_kubelet_appears(lib_dir, plugin_dir, start):
    daemon = start()
    daemon.wait_log("waiting for the kubelet", timeout=30)
    assert os.path.exists(os.path.join(plugin_dir, "gpuops-gpu.sock"))
    kubelet = KubeletStandin(plugin_dir)
    kubelet.start()
    try:
        kubelet.wait_registered(GPU).wait(all_healthy(8))
    finally:
        kubelet.stop()


def test_allocate_and_the_other_rpcs(kubelet, start):
    start()
    client = ready(kubelet)
    response = client.allocate([H100_UUIDS[1], H100_UUIDS[4]], [H100_UUIDS[7]])
    envs = [dict(r.envs) for r in response.container_responses]
    assert envs == [
        {"NVIDIA_VISIBLE_DEVICES": "%s,%s" % (H100_UUIDS[1], H100_UUIDS[4])},
        {"NVIDIA_VISIBLE_DEVICES": H100_UUIDS[7]},
    ]
    with pytest.raises(grpc.RpcError) as refused:
        client.allocate([H100_UUIDS[0], "GPU-not-here"])
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown device for nvidia.com/gpu: GPU-not-here" in refused.value.details()
    chosen = client.preferred(H100_UUIDS, [H100_UUIDS[6]], 4)
    assert len(set(chosen)) == 4
    assert H100_UUIDS[6] in chosen
    assert set(chosen) <= set(H100_UUIDS)
    assert client.stub.PreStartContainer(api_pb2.PreStartContainerRequest(devices_ids=chosen), timeout=5) == (
        api_pb2.PreStartContainerResponse()
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--device-id-strategy", "index"), {"envs": {"NVIDIA_VISIBLE_DEVICES": "2"}}),
        (
            ("--device-list-strategy", "volume-mounts"),
            {
                "envs": {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"},
                "mounts": [
                    {
                        "container_path": "/var/run/nvidia-container-devices/" + H100_UUIDS[2],
                        "host_path": "/dev/null",
                    }
                ],
            },
        ),
        (
            ("--device-list-strategy", "cdi-cri", "--device-id-strategy", "index"),
            {"cdi_devices": [{"name": "k8s.device-plugin.nvidia.com/gpu=2"}]},
        ),
        (
            ("--pass-device-specs", "true"),
            {
                "envs": {"NVIDIA_VISIBLE_DEVICES": H100_UUIDS[2]},
                "devices": [
                    {"container_path": "/dev/nvidiactl", "host_path": "/dev/nvidiactl", "permissions": "rw"},
                    {"container_path": "/dev/nvidia2", "host_path": "/dev/nvidia2", "permissions": "rw"},
                ],
            },
        ),
    ],
    ids=["index", "volume-mounts", "cdi-cri", "pass-device-specs"],
)
def test_allocate_strategies_over_grpc(kubelet, start, args, expected):
    from google.protobuf.json_format import MessageToDict  # noqa: PLC0415

    start(args=args)
    client = ready(kubelet)
    answer = MessageToDict(
        client.allocate([H100_UUIDS[2]]).container_responses[0], preserving_proto_field_name=True
    )
    assert answer == expected


def test_cdi_annotations_over_grpc(kubelet, start):
    start(args=("--device-list-strategy", "cdi-annotations"))
    client = kubelet.wait_registered(GPU)
    annotations = dict(client.allocate([H100_UUIDS[0]]).container_responses[0].annotations)
    ((key, value),) = annotations.items()
    assert re.fullmatch(r"cdi\.k8s\.io/nvidia-device-plugin_[0-9a-f-]{36}", key)
    assert value == "k8s.device-plugin.nvidia.com/gpu=" + H100_UUIDS[0]


def test_twenty_kubelet_restarts_in_a_row(kubelet, start, plugin_dir):
    checkpoint = os.path.join(plugin_dir, "kubelet_internal_checkpoint")
    with open(checkpoint, "w") as handle:
        handle.write("{}")
    start()
    kubelet.wait_registered(GPU).wait(all_healthy(8))
    for _restart in range(20):
        before = kubelet.registrations
        kubelet.restart()
        kubelet.wait_registered(GPU, after=before).wait(all_healthy(8))
    with open(checkpoint) as handle:
        assert handle.read() == "{}"  # never touches the kubelet's own files


def test_registers_again_when_the_kubelet_comes_back_after_it_saw_its_socket_go(kubelet, start):
    # The order a real kubelet restart often has: our socket deleted and seen gone, then the
    # new kubelet.sock, which on ext4 may carry the old one's inode number (about every
    # other round here). Six rounds, so that telling sockets apart by inode number alone
    # fails this almost always.
    daemon = start()
    kubelet.wait_registered(GPU).wait(all_healthy(8))
    for _round in range(6):
        before, seen = kubelet.registrations, daemon.text().count("waiting for the kubelet")

        def until_the_daemon_waits(seen=seen):
            deadline = time.monotonic() + 10
            while daemon.text().count("waiting for the kubelet") == seen:
                assert time.monotonic() < deadline, daemon.text()
                time.sleep(0.02)

        kubelet.restart(while_down=until_the_daemon_waits)
        kubelet.wait_registered(GPU, after=before, timeout=10).wait(all_healthy(8))


def test_re_registers_when_its_own_socket_is_deleted(kubelet, start, plugin_dir):
    daemon = start()
    kubelet.wait_registered(GPU).wait(all_healthy(8))
    before = kubelet.registrations
    os.unlink(os.path.join(plugin_dir, "gpuops-gpu.sock"))
    kubelet.wait_registered(GPU, after=before).wait(all_healthy(8))
    daemon.wait_log("our socket %s was removed" % os.path.join(plugin_dir, "gpuops-gpu.sock"))


HEALTH_CONFIG = """\
version: v1
health:
  probeIntervalSeconds: 0.2
  recovery:
    quietPeriodSeconds: 1
"""


def test_xid_79_marks_the_gpu_unhealthy_and_xid_13_does_not(kubelet, start, plugin_dir):
    daemon = start(config=write_config(plugin_dir, HEALTH_CONFIG))
    client = ready(kubelet)
    daemon.inject("xid-2-13")
    daemon.wait_log("XID 13 on GPU %s ignored" % H100_UUIDS[2])
    assert client.healthy() == sorted(H100_UUIDS)
    daemon.inject("xid-5-79")
    devices = client.wait(lambda d: d.get(H100_UUIDS[5]) == "Unhealthy")
    assert sorted(i for i, h in devices.items() if h == "Unhealthy") == [H100_UUIDS[5]]
    assert (
        'gpuops_device_plugin_health_events_total{action="unhealthy",kind="xid",xid="79"} 1.0'
        in daemon.metrics()
    )
    assert (
        'gpuops_device_plugin_health_events_total{action="ignored",kind="xid",xid="13"} 1.0'
        in daemon.metrics()
    )


def test_an_xid_gpu_recovers_after_the_quiet_period(kubelet, start, plugin_dir):
    daemon = start(config=write_config(plugin_dir, HEALTH_CONFIG))
    client = ready(kubelet)
    daemon.inject("xid-1-48")
    client.wait(lambda d: d.get(H100_UUIDS[1]) == "Unhealthy")
    marked = time.monotonic()
    client.wait(all_healthy(8), timeout=10)
    assert time.monotonic() - marked >= 0.9  # not before the 1 s quiet period
    daemon.wait_log("device %s is now Healthy: re-probe succeeded" % H100_UUIDS[1])


def test_a_lost_gpu_is_unhealthy_until_it_answers_again(kubelet, start, plugin_dir):
    daemon = start(config=write_config(plugin_dir, HEALTH_CONFIG))
    client = ready(kubelet)
    daemon.inject("lost-3")
    client.wait(lambda d: d.get(H100_UUIDS[3]) == "Unhealthy")
    time.sleep(2)  # longer than the quiet period: still lost, so still unhealthy
    assert client.devices[H100_UUIDS[3]] == "Unhealthy"
    daemon.clear("lost-3")
    client.wait(all_healthy(8), timeout=10)


def test_recovery_can_be_switched_off(kubelet, start, plugin_dir):
    text = HEALTH_CONFIG.replace("quietPeriodSeconds: 1", "enabled: false")
    daemon = start(config=write_config(plugin_dir, text))
    client = ready(kubelet)
    daemon.inject("xid-0-79")
    client.wait(lambda d: d.get(H100_UUIDS[0]) == "Unhealthy")
    time.sleep(2)
    assert client.devices[H100_UUIDS[0]] == "Unhealthy"


NVIDIA_MAJOR = 195
NODE_REPEATS = 5


def make_node(path, minor):
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))


@pytest.fixture
def dev_root():
    """An nvidiaDevRoot whose dev/ holds nvidia0..7 (character devices 195:0..7), as the
    H100 profile's minor numbers say; the host's /dev is not touched."""
    if os.geteuid() != 0:
        # Not a skip: make test runs as root (the lab needs it), so a run without root is
        # a setup error to see, not a test to leave out quietly.
        pytest.fail("device nodes need mknod: run as root (make test does)")
    root = short_tempdir("devroot-")
    os.mkdir(os.path.join(root, "dev"))
    for minor in range(len(H100_UUIDS)):
        make_node(os.path.join(root, "dev", "nvidia%d" % minor), minor)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_gpu_whose_device_node_goes_is_unhealthy_until_it_is_back(kubelet, start, plugin_dir, dev_root):
    """The lab's half-disappearing GPU: /dev/nvidia3 removed under a running daemon, whose
    NVML session still lists the GPU (the mock filters by /dev/nvidia<N> only at nvmlInit)."""
    uuid, node = H100_UUIDS[3], os.path.join(dev_root, "dev", "nvidia3")
    daemon = start(config=write_config(plugin_dir, HEALTH_CONFIG), args=("--nvidia-dev-root", dev_root))
    client = ready(kubelet)
    to_unhealthy, to_healthy = [], []
    for _repeat in range(NODE_REPEATS):
        # Acting right after the probe the last wait saw would time the worst phase only.
        time.sleep(random.uniform(0, 0.3))
        os.unlink(node)
        gone = time.monotonic()
        devices = client.wait(lambda d: d.get(uuid) == "Unhealthy")
        to_unhealthy.append(time.monotonic() - gone)
        assert sorted(i for i, h in devices.items() if h == "Unhealthy") == [uuid]
        time.sleep(random.uniform(0, 0.3))
        make_node(node, 3)
        back = time.monotonic()
        client.wait(all_healthy(8))
        to_healthy.append(time.monotonic() - back)
    daemon.wait_log("device %s is now Unhealthy: device node of GPU %s: %s is gone" % (uuid, uuid, node))
    assert "device nodes are not checked" not in daemon.text()
    text = daemon.metrics()
    assert 'health_events_total{action="unhealthy",kind="device_node",xid=""} %d.0' % NODE_REPEATS in text
    assert 'health_events_total{action="healthy",kind="recovery",xid=""} %d.0' % NODE_REPEATS in text
    # Numbers for the record, not asserts: how fast the kubelet hears of it (-s shows them).
    for name, times in (("removed -> Unhealthy", to_unhealthy), ("back -> Healthy", to_healthy)):
        print(
            "%s over %d repeats (probe 0.2 s, quiet 1 s): p50 %.3f s, max %.3f s"
            % (name, len(times), statistics.median(times), max(times))
        )


def test_a_node_replaced_by_another_minor_makes_its_gpu_unhealthy(kubelet, start, plugin_dir, dev_root):
    uuid, node = H100_UUIDS[6], os.path.join(dev_root, "dev", "nvidia6")
    daemon = start(config=write_config(plugin_dir, HEALTH_CONFIG), args=("--nvidia-dev-root", dev_root))
    client = ready(kubelet)
    os.unlink(node)
    make_node(node, 7)  # a bad udev rule: GPU 7's node under GPU 6's name
    client.wait(lambda d: d.get(uuid) == "Unhealthy")
    daemon.wait_log("%s is character device 195:7, not minor 6" % node)


def test_without_the_nodes_the_daemon_says_so_once_and_checks_none(kubelet, start, plugin_dir, tmp_path):
    daemon = start(config=write_config(plugin_dir, HEALTH_CONFIG), args=("--nvidia-dev-root", str(tmp_path)))
    client = ready(kubelet)
    time.sleep(0.5)  # a few re-probes
    assert client.healthy() == sorted(H100_UUIDS)
    assert daemon.text().count("device nodes are not checked") == 1
    assert "%s/dev/nvidia0, " % tmp_path in daemon.text()


def test_the_probe_over_the_mock_tells_a_gpu_nvml_does_not_list(lib_dir, plugin_dir):
    """What the daemon's re-probe gets from NVIDIA's mock for a UUID it does not list:
    NVML_ERROR_NOT_FOUND (a running daemon cannot be shown one: the mock fixes its GPUs at
    nvmlInit; the watcher's handling of it is test_health's)."""
    unstarted = Daemon(lib_dir, plugin_dir)
    env = unstarted.env
    unstarted.cleanup()
    script = (
        "from gpuops_device_plugin.discovery import Nvml\n"
        "nvml = Nvml(); nvml.start()\n"
        "print(nvml.probe(%r)); print(nvml.probe('GPU-00000000-0000-0000-0000-000000000000'))\n"
    ) % H100_UUIDS[0]
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert out == ["None", "ProbeError(kind='not_listed', message='Not Found')"]


SHARED_CONFIG = """\
version: v1
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
      - name: nvidia.com/gpu
        replicas: 2
        perDevice:
          - index: 0
            replicas: 1
"""


def test_sighup_reloads_the_configuration(kubelet, start, plugin_dir):
    path = write_config(plugin_dir, "version: v1\n")
    daemon = start(config=path)
    kubelet.wait_registered(GPU).wait(all_healthy(8))
    with open(path, "w") as handle:
        handle.write(SHARED_CONFIG)
    before = kubelet.registrations
    daemon.signal(signal.SIGHUP)
    shared = kubelet.wait_registered(GPU + ".shared", after=before).wait(all_healthy(14))
    assert sorted(shared) == sorted("%s::%d" % (uuid, n) for uuid in H100_UUIDS[1:] for n in range(2))
    assert kubelet.wait_registered(GPU, after=before).wait(all_healthy(1)) == {H100_UUIDS[0]: "Healthy"}


def test_sighup_with_a_bad_file_keeps_the_running_configuration(kubelet, start, plugin_dir):
    path = write_config(plugin_dir, "version: v1\n")
    daemon = start(config=path)
    client = ready(kubelet)
    with open(path, "w") as handle:
        handle.write("flags:\n  migStrategy: sometimes\n")
    daemon.signal(signal.SIGHUP)
    daemon.wait_log("reload refused, keeping the running configuration: migStrategy: 'sometimes'")
    assert daemon.proc.poll() is None
    assert (
        client.allocate([H100_UUIDS[0]]).container_responses[0].envs["NVIDIA_VISIBLE_DEVICES"]
        == H100_UUIDS[0]
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--mig-strategy", "sometimes"),
            "migStrategy: 'sometimes' is not valid; valid: none, single, mixed",
        ),
        (("--device-list-strategy", "envvar,nope"), "deviceListStrategy: 'nope' is not valid"),
        (
            ("--config-file", "/nonexistent/config.yaml"),
            "config file /nonexistent/config.yaml: cannot be read",
        ),
    ],
)
def test_bad_configuration_exits_2_and_serves_nothing(lib_dir, plugin_dir, args, message):
    rc, log = Daemon(lib_dir, plugin_dir, args=args).run()
    assert rc == 2
    assert "invalid configuration: " + message in log
    assert os.listdir(plugin_dir) == []


def test_sharing_a_resource_the_node_lacks_exits_2(lib_dir, plugin_dir):
    path = write_config(plugin_dir, SHARED_CONFIG.replace("nvidia.com/gpu", "nvidia.com/mig-1g.10gb"))
    rc, log = Daemon(lib_dir, plugin_dir, config=path).run()
    assert rc == 2
    assert "'nvidia.com/mig-1g.10gb' is not a resource this node offers; it offers nvidia.com/gpu" in log
    assert [n for n in os.listdir(plugin_dir) if n.endswith(".sock")] == []


def test_no_nvml_fails_by_default_and_waits_when_told_not_to(plugin_dir, tmp_path):
    rc, log = Daemon(str(tmp_path), plugin_dir, profile=None).run()
    assert rc == 1
    assert "NVML is not usable" in log
    daemon = Daemon(str(tmp_path), plugin_dir, profile=None, args=("--fail-on-init-error", "false")).start()
    try:
        daemon.wait_log("serving nothing until stopped", timeout=30)
        assert daemon.stop() == 0
    finally:
        daemon.cleanup()


def test_sigterm_stops_cleanly_and_removes_only_its_socket(kubelet, start, plugin_dir):
    daemon = start()
    kubelet.wait_registered(GPU)
    assert daemon.stop() == 0
    assert sorted(os.listdir(plugin_dir)) == ["kubelet.sock"]
    assert "stopping on SIGTERM" in daemon.text()


def test_mig_mixed_offers_one_resource_per_profile(kubelet, start, mig_lib_dir):
    start(library=mig_lib_dir, profile="a100-8x-mig.yaml", args=("--mig-strategy", "mixed"))
    kubelet.wait_registered("nvidia.com/mig-1g.5gb")
    for name in (
        "nvidia.com/gpu",
        "nvidia.com/mig-4g.20gb",
        "nvidia.com/mig-3g.20gb",
        "nvidia.com/mig-2g.10gb",
    ):
        kubelet.wait_registered(name)
    assert len(kubelet.clients["nvidia.com/gpu"].wait(all_healthy(5))) == 5  # GPUs 3-7
    assert len(kubelet.clients["nvidia.com/mig-1g.5gb"].wait(all_healthy(8))) == 8  # 1 on GPU 0, 7 on GPU 2
    assert len(kubelet.clients["nvidia.com/mig-3g.20gb"].wait(all_healthy(2))) == 2


def test_metrics_count_devices_registrations_and_rpcs(kubelet, start):
    daemon = start()
    client = ready(kubelet)
    client.allocate([H100_UUIDS[0]])
    # The daemon counts a registration once the kubelet's Register answer reaches it; the
    # kubelet has served ListAndWatch and Allocate by then, and on a busy machine the
    # answer can come after them (make test's daemon lane failed once reading too early).
    registered = 'gpuops_device_plugin_registrations_total{resource="nvidia.com/gpu",result="ok"} 1.0'
    deadline = time.monotonic() + 30
    text = daemon.metrics()
    while registered not in text and time.monotonic() < deadline:
        time.sleep(0.05)
        text = daemon.metrics()
    assert 'gpuops_device_plugin_devices{health="Healthy",resource="nvidia.com/gpu"} 8.0' in text
    assert registered in text, text
    assert 'gpuops_device_plugin_allocations_total{resource="nvidia.com/gpu"} 1.0' in text
    assert 'gpuops_device_plugin_rpc_duration_seconds_count{method="Allocate"} 1.0' in text


def test_answers_the_kubelet_as_it_did_on_a_real_h100(kubelet, start, plugin_dir):
    """Over the mock as on the real GPU, with the same configuration: the same options,
    Allocate answers (the GPU's UUID aside), time-sliced replicas and metric names."""
    with open(REAL_H100) as handle:
        real = json.load(handle)
    real_uuid = real["list_and_watch"][0]["id"]
    path = write_config(plugin_dir, "version: v1\n")
    daemon = start(config=path)
    client = ready(kubelet)
    assert {
        "pre_start_required": client.registered_options.pre_start_required,
        "get_preferred_allocation_available": client.registered_options.get_preferred_allocation_available,
    } == real["registered_options"]
    envs = dict(client.allocate([H100_UUIDS[0]]).container_responses[0].envs)
    assert envs == {
        key: value.replace(real_uuid, H100_UUIDS[0]) for key, value in real["allocate"]["envs"].items()
    }
    assert not any(real["allocate"][key] for key in ("mounts", "devices", "annotations", "cdi_devices"))
    metrics = {
        line.split("{")[0].split(" ")[0]
        for line in daemon.metrics().splitlines()
        if line.startswith("gpuops_")
    }
    assert metrics == set(real["metrics"])
    with open(path, "w") as handle:
        handle.write(TWO_REPLICAS_CONFIG)
    before = kubelet.registrations
    daemon.signal(signal.SIGHUP)
    shared = kubelet.wait_registered(GPU, after=before).wait(all_healthy(16))
    assert sorted(d for d in shared if d.startswith(H100_UUIDS[0])) == [
        name.replace(real_uuid, H100_UUIDS[0]) for name in real["time_slicing_2"]
    ]
    replica = dict(kubelet.clients[GPU].allocate([H100_UUIDS[0] + "::0"]).container_responses[0].envs)
    assert replica == {
        key: value.replace(real_uuid, H100_UUIDS[0])
        for key, value in real["time_slicing_allocate"]["envs"].items()
    }
