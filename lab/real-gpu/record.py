# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Record what gpuops sees of a real NVIDIA GPU, sanitised, as test fixtures.

For a machine with NVIDIA's driver and a GPU (the device machine some sessions are lent):

    python3 lab/real-gpu/record.py OUTDIR [NVIDIA_CTK]

It reads and never sets: NVML queries, and the daemon's answers to a kubelet stand-in
(Allocate only answers; nothing is configured on the GPU, MIG mode included). It writes:

- gpu_info.json: the gpuops.k8s.gpu_info module's result, run by the real ansible CLI;
- daemon.json: our daemon (python -m gpuops_device_plugin) on the driver's NVML, through
  lab/daemon/kubelet_standin.py: registration, ListAndWatch with topology, a preferred
  allocation, Allocate, metrics, a SIGHUP to time-slicing and back, SIGTERM; timings;
- nvml_query.json: lab/kube/nvml-query.py, what the lab's validation pod runs;
- cdi.json and nvidia.yaml (with NVIDIA_CTK, an nvidia-ctk built from NVIDIA's source by
  lab/toolkit/build.sh): `nvidia-ctk cdi generate` on the real driver, its messages, and
  the gpuops.k8s.nvidia_cdi_spec module run, run again, and run in check mode;
- dra.json (with NVIDIA_CTK, and etcd and kube-apiserver as lab/daemon/private_api.py finds
  them): the daemon's DRA front end on the driver's NVML, the API a private kube-apiserver,
  the kubelet lab/daemon/dra_kubelet_standin.py: registration, the ResourceSlice published,
  a claim of one GPU prepared on the toolkit's specification above and unprepared (p50/p99),
  the health stream for 10 s, SIGTERM;
- nvidia-smi.txt: `nvidia-smi -q` and `nvidia-smi topo -m`, for people.

Identifiers (GPU UUIDs, serial numbers, board ids, the host's name) are replaced by
stand-ins in every file before it is written, so the real ones never leave the machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "lab" / "daemon"))
sys.path.insert(0, str(ROOT / "roles" / "device_plugin" / "files" / "gpuops-device-plugin"))

import grpc  # noqa: E402
import pynvml  # noqa: E402
from dp_harness import DAEMON_DIR, TWO_REPLICAS_CONFIG, Daemon, short_tempdir  # noqa: E402
from dra_kubelet_standin import register  # noqa: E402
from dra_node import claim  # noqa: E402
from google.protobuf.json_format import MessageToDict  # noqa: E402
from kubelet_standin import KubeletStandin  # noqa: E402
from private_api import NodeApi, PrivateApi  # noqa: E402

from gpuops_device_plugin.api import api_pb2, api_pb2_grpc  # noqa: E402
from gpuops_device_plugin.dra.devices import DRIVER  # noqa: E402

GPU = "nvidia.com/gpu"
HOST_STAND_IN = "real-gpu-host"
# Tasks of a play on localhost; run_playbook adds the one that keeps what they registered.
CDI_TASKS = """\
    - name: Generate the specification
      ignore_errors: true
      gpuops.k8s.nvidia_cdi_spec: &generate
        path: "{{ spec }}"
        nvidia_ctk: "{{ ctk }}"
        require_driver: true
      register: first
    - name: Generate it again
      ignore_errors: true
      gpuops.k8s.nvidia_cdi_spec: *generate
      register: second
    - name: Generate it in check mode
      ignore_errors: true
      gpuops.k8s.nvidia_cdi_spec: *generate
      check_mode: true
      register: checked
"""
GPU_INFO_TASKS = """\
    - name: Describe the GPUs
      gpuops.k8s.gpu_info:
      register: gpu_info
"""
PLAY = """\
- name: Record on a real GPU
  hosts: localhost
  gather_facts: false
  tasks:
%s    - name: Keep the results
      ansible.builtin.copy:
        content: "{{ %s | to_nice_json }}"
        dest: "{{ out }}"
        mode: "0644"
"""


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def identifiers():
    """Real identifier -> stand-in, longest first so no stand-in splits another."""
    found = {}
    pynvml.nvmlInit()
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            found[_text(pynvml.nvmlDeviceGetUUID(handle))] = "GPU-00000000-0000-4000-8000-%012d" % index
            for getter, stand_in in (
                (pynvml.nvmlDeviceGetSerial, "SERIAL%d"),
                (pynvml.nvmlDeviceGetBoardId, None),
            ):
                try:
                    value = getter(handle)
                except pynvml.NVMLError:
                    continue
                if stand_in and value:
                    found[_text(value)] = stand_in % index
    finally:
        pynvml.nvmlShutdown()
    return dict(sorted(found.items(), key=lambda item: -len(item[0])))


def gpu_count():
    pynvml.nvmlInit()
    try:
        return pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()


def sanitise(text, ids):
    for real, stand_in in ids.items():
        if real:
            text = text.replace(real, stand_in)
    # The host's name as a word only: a short one ("gpu") may be part of other words.
    text = re.sub(r"\b%s\b" % re.escape(socket.gethostname()), HOST_STAND_IN, text)
    # nvidia-smi -q names identifiers NVML's Python bindings do not return as strings.
    for field in (
        "Serial Number",
        "Board Id",
        "GPU Part Number",
        "Module ID",
        "GPU PDI",
        "Inforom Image Version",
    ):
        text = re.sub(r"(?m)^(\s*%s\s*:).*$" % re.escape(field), r"\1 (removed)", text)
    return text


def nvml_library_dir():
    listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    for line in listing.splitlines():
        if "libnvidia-ml.so.1 " in line and "x86-64" in line:
            return os.path.dirname(line.split("=>")[-1].strip())
    return os.environ.get("LD_LIBRARY_PATH", "")


def run_gpu_info(out):
    """gpu_info through ansible-playbook, with this checkout as the collection gpuops.k8s."""
    return run_playbook(GPU_INFO_TASKS, "gpu_info", {"out": str(out)})


def run_playbook(tasks, kept, extra_vars):
    tree = Path(tempfile.mkdtemp(prefix="real-gpu-ac-"))
    (tree / "ansible_collections" / "gpuops").mkdir(parents=True)
    (tree / "ansible_collections" / "gpuops" / "k8s").symlink_to(ROOT)
    playbook = tree / "record.yml"
    playbook.write_text(PLAY % (tasks, kept))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(tree), ANSIBLE_LOCALHOST_WARNING="false")
    extra = json.dumps({"ansible_python_interpreter": sys.executable, **extra_vars})
    command = [sys.executable, "-m", "ansible", "playbook", "-i", "localhost,", "-c", "local", "-e", extra]
    started = time.perf_counter()
    proc = subprocess.run(
        [*command, str(playbook)], capture_output=True, text=True, env=env, check=False, timeout=300
    )
    seconds = time.perf_counter() - started
    print(proc.stdout[-3000:], proc.stderr[-3000:], flush=True)
    return {"rc": proc.returncode, "seconds": round(seconds, 2)}


def list_and_watch(endpoint):
    """The first ListAndWatch message, whole (the stand-in keeps only IDs and health)."""
    channel = grpc.insecure_channel("unix://" + endpoint)
    try:
        stream = api_pb2_grpc.DevicePluginStub(channel).ListAndWatch(api_pb2.Empty())
        message = next(iter(stream))
        stream.cancel()
    finally:
        channel.close()
    return [
        {
            "id": d.ID,
            "health": d.health,
            "numa_nodes": [n.ID for n in d.topology.nodes] if d.HasField("topology") else None,
        }
        for d in message.devices
    ]


def allocate_response(response):
    container = response.container_responses[0]
    return MessageToDict(
        container, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )


def allocation_latency(client, ids, count):
    timings = []
    for _call in range(count):
        started = time.perf_counter()
        client.allocate(ids)
        timings.append((time.perf_counter() - started) * 1000)
    timings.sort()
    return [round(timings[count // 2], 3), round(timings[count * 99 // 100], 3)]


def run_daemon(lib_dir):
    plugin_dir = short_tempdir("real-gpu-dp-")
    config = Path(plugin_dir + ".yaml")
    config.write_text("version: v1\n")
    kubelet = KubeletStandin(plugin_dir)
    kubelet.start()
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(DAEMON_DIR), os.environ.get("PYTHONPATH")]))}
    daemon = Daemon(lib_dir, plugin_dir, profile=None, config=config, env=env)
    record = {}
    try:
        started = time.perf_counter()
        daemon.start()
        client = kubelet.wait_registered(GPU, timeout=60)
        record["seconds_to_registration"] = round(time.perf_counter() - started, 3)
        devices = client.wait(lambda d: bool(d) and all(h == "Healthy" for h in d.values()), timeout=30)
        record["seconds_to_healthy_devices"] = round(time.perf_counter() - started, 3)
        options = client.registered_options
        record["registered_options"] = {
            "pre_start_required": options.pre_start_required,
            "get_preferred_allocation_available": options.get_preferred_allocation_available,
        }
        record["list_and_watch"] = list_and_watch(client.endpoint)
        ids = sorted(devices)
        record["preferred_1"] = client.preferred(ids, [], 1)
        started = time.perf_counter()
        record["allocate"] = allocate_response(client.allocate(ids[:1]))
        record["allocate_seconds"] = round(time.perf_counter() - started, 4)
        record["allocate_ms_p50_p99_of_200"] = allocation_latency(client, ids[:1], 200)
        lines = daemon.metrics().splitlines()
        record["metrics"] = sorted(
            {line.split("{")[0].split(" ")[0] for line in lines if line.startswith("gpuops_")}
        )
        # Health watching on the real event set for a while: nothing may turn unhealthy.
        time.sleep(10)
        record["health_after_10s"] = dict(client.devices)
        before = kubelet.registrations
        config.write_text(TWO_REPLICAS_CONFIG)
        daemon.signal(signal.SIGHUP)
        shared = kubelet.wait_registered(GPU, after=before, timeout=30)
        record["time_slicing_2"] = sorted(shared.wait(lambda d: len(d) == 2 * len(ids), timeout=30))
        record["time_slicing_allocate"] = allocate_response(shared.allocate(record["time_slicing_2"][:1]))
        stopped = time.perf_counter()
        rc = daemon.stop()
        record["sigterm"] = {"rc": rc, "seconds": round(time.perf_counter() - stopped, 3)}
    finally:
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.stop()
        kubelet.stop()
        record["log"] = daemon.text().splitlines()[-60:]
    return record


DRA_CONFIG = """\
version: v1
frontEnd: dra
dra:
  nodeName: {node}
  kubeconfig: {root}/kubeconfig
  kubeletRegistryDir: {root}/registry
  kubeletPluginsDir: {root}/plugins
  cdiDir: {root}/cdi
  toolkitSpec: {spec}
"""


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        found = predicate()
        if found:
            return found
        if time.monotonic() > deadline:
            raise TimeoutError("%s: not within %gs" % (what, timeout))
        time.sleep(0.05)


def run_dra(lib_dir, toolkit_spec, count):
    """The DRA front end on the real GPUs: a private API server, the DRA kubelet stand-in."""
    root = Path(short_tempdir("real-gpu-dra-"))
    record = {}
    started = time.perf_counter()
    api = PrivateApi(str(root / "api")).start()
    record["api_server_seconds_to_ready"] = round(time.perf_counter() - started, 2)
    node = NodeApi(api, HOST_STAND_IN, DRIVER)
    api.kubeconfig(str(root / "kubeconfig"))
    config = root / "config.yaml"
    config.write_text(DRA_CONFIG.format(node=HOST_STAND_IN, root=root, spec=toolkit_spec))
    (root / "device-plugins").mkdir()
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(DAEMON_DIR), os.environ.get("PYTHONPATH")]))}
    daemon = Daemon(lib_dir, str(root / "device-plugins"), profile=None, config=config, env=env)
    kubelet = []
    try:
        dra_session(record, root, node, daemon, kubelet, count=count)
    except Exception as error:  # what went wrong is part of the record
        record["error"] = "%s: %s" % (type(error).__name__, error)
    finally:
        for client in kubelet:
            client.close()
        daemon.stop()
        record["log"] = daemon.text().splitlines()[-60:] if os.path.exists(daemon.log_path) else []
        daemon.cleanup()
        api.stop()
    return record


def dra_session(record, root, node, daemon, kubelet, *, count):
    started = time.perf_counter()
    daemon.start()
    kubelet.append(register(str(root / "registry" / f"{DRIVER}-reg.sock"), wait_s=60))
    client = kubelet[0]
    record["seconds_to_registration"] = round(time.perf_counter() - started, 3)
    record["services"] = [client.plugin_service, client.health_service]
    slices = wait_until(
        lambda: [s for s in node.slices().values() if len(s["spec"]["devices"]) == count],
        60,
        "a slice of %d devices" % count,
    )
    record["seconds_to_slice"] = round(time.perf_counter() - started, 3)
    record["slice_spec"] = slices[0]["spec"]
    watch = client.watch_health()
    device = slices[0]["spec"]["devices"][0]["name"]
    document = node.put_claim(
        claim("real-gpu", [("gpu", device)], pool=HOST_STAND_IN, namespace=node.namespace)
    )
    uid = document["metadata"]["uid"]
    named = (node.namespace, uid, "real-gpu")
    started = time.perf_counter()
    record["prepare"] = client.prepare(named)[uid]
    record["prepare_seconds"] = round(time.perf_counter() - started, 4)
    record["claim_spec_files"] = {
        path.name.replace(uid, "CLAIM-UID"): json.loads(path.read_text().replace(uid, "CLAIM-UID"))
        for path in (root / "cdi").iterdir()
    }
    record["unprepare"] = client.unprepare(named)[uid]
    record["spec_files_after_unprepare"] = sorted(path.name for path in (root / "cdi").iterdir())
    timings = {"prepare": [], "unprepare": []}
    for _round in range(100):
        for name, call in (("prepare", client.prepare), ("unprepare", client.unprepare)):
            started = time.perf_counter()
            call(named)
            timings[name].append((time.perf_counter() - started) * 1000)
    for name, values in timings.items():
        values.sort()
        record[name + "_ms_p50_p99_of_100"] = [round(values[50], 3), round(values[99], 3)]
    # Health on the real GPU's events for a while: every device in the stream, healthy.
    time.sleep(10)
    record["health_stream_after_10s"] = {"/".join(key): value for key, value in watch.devices.items()}
    record["slice_taints_after_10s"] = {
        d["name"]: d.get("taints", []) for s in node.slices().values() for d in s["spec"]["devices"]
    }
    stopped = time.perf_counter()
    rc = daemon.stop()
    record["sigterm"] = {"rc": rc, "seconds": round(time.perf_counter() - stopped, 3)}
    checkpoint = root / "plugins" / DRIVER / "checkpoint.json"
    record["checkpoint_after_stop"] = json.loads(checkpoint.read_text()).get("claims")


def command_output(command):
    try:
        return subprocess.run(command, capture_output=True, text=True, check=False).stdout
    except FileNotFoundError as error:
        return str(error)


def run_cdi(out, ctk, ids):
    """nvidia-ctk cdi generate on the real driver, then the nvidia_cdi_spec module."""
    scratch = Path(tempfile.mkdtemp(prefix="real-gpu-cdi-"))
    version = subprocess.run([ctk, "--version"], capture_output=True, text=True, check=False)
    started = time.perf_counter()
    generate = subprocess.run(
        [ctk, "cdi", "generate", "--output", str(scratch / "direct.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    record = {
        "nvidia_ctk_version": version.stdout.strip().splitlines(),
        "generate": {"rc": generate.returncode, "seconds": round(time.perf_counter() - started, 3)},
        "generate_stderr": generate.stderr.splitlines(),
    }
    results = scratch / "module.json"
    kept = "{'first': first, 'second': second, 'check': checked}"
    extra = {"out": str(results), "spec": str(scratch / "nvidia.yaml"), "ctk": ctk}
    record["module_playbook"] = run_playbook(CDI_TASKS, kept, extra)
    if results.exists():
        keep = ("changed", "driver", "generated", "message", "path", "warnings", "failed", "msg")
        runs = json.loads(results.read_text())
        record["module"] = {run: {key: result.get(key) for key in keep} for run, result in runs.items()}
    spec = scratch / "nvidia.yaml"
    if spec.exists():
        (out / "nvidia.yaml").write_text(sanitise(spec.read_text(), ids))
        record["module_spec_equals_direct_generate"] = (
            spec.read_text() == (scratch / "direct.yaml").read_text()
        )
    (out / "cdi.json").write_text(sanitise(json.dumps(record, indent=2, sort_keys=True), ids) + "\n")
    return spec if spec.exists() else None


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    ids = identifiers()
    lib_dir = nvml_library_dir()
    smi = "\n".join(
        command_output(command) for command in (["nvidia-smi", "-q"], ["nvidia-smi", "topo", "-m"])
    )
    (out / "nvidia-smi.txt").write_text(sanitise(smi, ids))

    scratch = Path(tempfile.mkdtemp(prefix="real-gpu-"))
    timing = run_gpu_info(scratch / "gpu_info.json")
    if timing["rc"] == 0:
        result = json.loads((scratch / "gpu_info.json").read_text())
        result = {key: value for key, value in result.items() if key not in ("changed", "failed")}
        result["_recorded"] = {"playbook_seconds": timing["seconds"], "nvml_library_dir": lib_dir}
        (out / "gpu_info.json").write_text(sanitise(json.dumps(result, indent=2, sort_keys=True), ids) + "\n")

    query_script = str(ROOT / "lab" / "kube" / "nvml-query.py")
    query = subprocess.run([sys.executable, query_script], capture_output=True, text=True, check=False)
    (out / "nvml_query.json").write_text(sanitise(query.stdout or query.stderr, ids))

    dra = {}
    if len(sys.argv) > 2:
        spec = run_cdi(out, sys.argv[2], ids)  # the real one: the written copy is sanitised
        if spec is not None:
            dra = run_dra(lib_dir, spec, gpu_count())
            (out / "dra.json").write_text(sanitise(json.dumps(dra, indent=2, sort_keys=True), ids) + "\n")

    daemon = run_daemon(lib_dir)
    (out / "daemon.json").write_text(sanitise(json.dumps(daemon, indent=2, sort_keys=True), ids) + "\n")
    print("recorded:", sorted(path.name for path in out.iterdir()), flush=True)
    dra_ok = len(sys.argv) <= 2 or "sigterm" in dra
    return 0 if timing["rc"] == 0 and "sigterm" in daemon and dra_ok else 1


if __name__ == "__main__":
    sys.exit(main())
