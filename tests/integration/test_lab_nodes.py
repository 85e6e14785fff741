# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab's Kubernetes nodes (lab/nodes.py): systemd podman nodes whose own containerd and
kubelet join the lab's control plane, reached over SSH as a non-root user with become."""

from __future__ import annotations

import concurrent.futures
import importlib
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import threading
import time
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
NODES = ROOT / "lab" / "nodes.py"
VENV_BIN = Path(sys.executable).parent
INVENTORY = Path(os.environ.get("GPUOPS_LAB_STATE", "/var/lib/gpuops-lab")) / "nodes" / "hosts.yml"
# What each node is: its OS and its distribution's containerd line. Three nodes: the
# third is where the fleet also runs Docker (the GPU proof through dockerd).
EXPECTED = {
    "gpuops-node-1": ("10.252.1.11", "Debian GNU/Linux 12 (bookworm)", "containerd://1.6."),
    "gpuops-node-2": ("10.252.1.12", "Debian GNU/Linux 13 (trixie)", "containerd://1.7."),
    "gpuops-node-3": ("10.252.1.13", "Debian GNU/Linux 12 (bookworm)", "containerd://1.6."),
}
CONTAINERD_NODES = ["gpuops-node-1", "gpuops-node-2"]
DOCKER_NODE = "gpuops-node-3"
# gpuops's device plugin serves the kubelet on the containerd nodes; the GPU-pair and
# validation tests use the H100 node with NVSwitch.
DAEMON_NODE = "gpuops-node-1"
# The oldest ansible-core line (2.17) manages Python 3.7 to 3.12: the Debian 12 nodes (3.11),
# a containerd one and the Docker one; Debian 13's 3.13 came with 2.18.
OLDEST_LINE_NODES = ("gpuops-node-1", "gpuops-node-3")
GPU_PLAYBOOK = Path(__file__).parent / "playbooks" / "lab_nodes_gpu.yml"


def nodes_cli(*args):
    return subprocess.run(
        [sys.executable, str(NODES), *args], capture_output=True, text=True, check=False, timeout=1800
    )


@pytest.fixture(scope="module")
def nodes(lab):
    lab.remove_nvidia_plugin()  # an earlier run's, cut short before its uninstall
    proc = nodes_cli("up", "--count", str(len(EXPECTED)))
    assert proc.returncode == 0, "lab/nodes.py up failed:\n%s" % proc.stderr[-6000:]
    yield lab
    # The other tests' lab has one node: leave it so.
    proc = nodes_cli("down")
    assert proc.returncode == 0, proc.stderr[-4000:]


def ansible_env():
    """The environment a user's shell would give Ansible: none of this session's own."""
    own = ("ANSIBLE_", "MOCK_NVML", "LD_LIBRARY_PATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith(own)}
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
    )
    return env


# Every deprecation warning an Ansible run in this module printed or a task returned (the
# last test asserts there are none).
DEPRECATIONS = []
# What a kubelet, the API server or Ansible says of a deprecation or a removal to come.
DEPRECATED = re.compile(r"deprecat|will be removed|no longer supported", re.IGNORECASE)
# Deprecations a module of another collection raises whatever its caller passes, so no use
# of it avoids them: kubernetes.core 6.6's helm module deprecates its own status.values return
# on every call that finds the release (plugins/modules/helm.py get_release_status); the role
# reads neither. Exact texts: any other deprecation still fails the last test.
UNAVOIDABLE = (
    "The 'status.values' return value is deprecated and will be removed in version 8.0.0. "
    "Use 'status.release_values' instead.",
)
# Ansible's hint printed under each deprecation warning: judged with the warning itself.
DEPRECATION_HINT = "Deprecation warnings can be disabled by setting"


def deprecation(text):
    """Whether TEXT says of a deprecation that the lab's runs must not cause."""
    return not any(known in text for known in (*UNAVOIDABLE, DEPRECATION_HINT))


def run_ansible(tool, *args, timeout=300, venv_bin=VENV_BIN):
    """ansible or ansible-playbook -i INVENTORY ARGS, from VENV_BIN (the dev environment's
    ansible-core line) or another venv's bin: the process and its plays (JSON)."""
    proc = subprocess.run(
        [str(venv_bin / tool), "-i", str(INVENTORY), *args],
        capture_output=True,
        text=True,
        env=ansible_env(),
        check=False,
        timeout=timeout,
    )
    # The dev line's: an older line may warn of what a newer one already changed.
    dev_line = venv_bin == VENV_BIN
    # The API server's warnings reach Ansible as [WARNING] lines ("v1 Endpoints is deprecated
    # in v1.33+; use discovery.k8s.io/v1 EndpointSlice", say).
    DEPRECATIONS.extend(
        line
        for line in proc.stderr.splitlines()
        if dev_line
        and ("DEPRECATION WARNING" in line or ("WARNING" in line and DEPRECATED.search(line)))
        and deprecation(line)
    )
    try:
        plays = json.loads(proc.stdout)["plays"]
    except ValueError as exc:
        raise AssertionError("no JSON from %s (rc %d):\n%s" % (tool, proc.returncode, proc.stderr)) from exc
    for play in plays:
        for task in play["tasks"]:
            for result in task["hosts"].values() if dev_line else ():
                DEPRECATIONS.extend(
                    "%s: %s" % (task["task"]["name"], d.get("msg", d))
                    for d in result.get("deprecations", [])
                    if deprecation(str(d.get("msg", d)))
                )
                name, warnings = task["task"]["name"], result.get("warnings", [])
                DEPRECATIONS.extend("%s: %s" % (name, w) for w in warnings if DEPRECATED.search(w))
    return proc, plays


def ansible(*args):
    proc, plays = run_ansible("ansible", "gpuops_lab_nodes", *args)
    return proc.returncode, plays[0]["tasks"][0]["hosts"]


def on_node(node, module, args):
    """MODULE with ARGS (a string, or a dict of them) on NODE, over SSH with become: its result."""
    args = args if isinstance(args, str) else json.dumps(args)
    rc, hosts = ansible("--limit", node, "-m", module, "-a", args)
    assert rc == 0, hosts
    return hosts[node]


def lablib(name):
    """The lab's own module lablib.NAME (lab/ goes on sys.path once)."""
    if str(ROOT / "lab") not in sys.path:
        sys.path.insert(0, str(ROOT / "lab"))
    return importlib.import_module("lablib." + name)


def provisioned_containerd_config():
    """The node's own containerd settings, as lab/nodes.py's provisioning wrote them."""
    return lablib("node_join").containerd_config()


def test_nodes_are_ready_with_their_own_containerd(nodes):
    for name, (ip, os_image, runtime) in EXPECTED.items():
        node = nodes.get("node", name)
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready[0]["status"] == "True", (name, ready)
        info = node["status"]["nodeInfo"]
        assert info["osImage"] == os_image
        assert info["containerRuntimeVersion"].startswith(runtime), info["containerRuntimeVersion"]
        addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
        assert addresses["InternalIP"] == ip
        # Nothing of NVIDIA's yet: no GPUs until gpuops's roles run there.
        assert "nvidia.com/gpu" not in node["status"]["allocatable"]


def run_pod(nodes, name, node, container, *, runtime_class=None, volumes=()):
    """A one-container pod on NODE (by the scheduler, through its hostname label), run to
    completion; the Pod as it ended and the last line of its log. It is deleted after."""
    spec = {
        "restartPolicy": "Never",
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [container],
        "volumes": list(volumes),
    }
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    nodes.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=true")
    nodes.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))
    try:
        nodes.wait(
            "pod %s to finish" % name,
            lambda: nodes.get("pod", name)["status"].get("phase") in ("Succeeded", "Failed"),
            120,
        )
        pod = nodes.get("pod", name)
        assert pod["status"]["phase"] == "Succeeded", pod["status"]
        assert pod["spec"]["nodeName"] == node

        # The log travels API server -> the node's kubelet (its serving certificate). Right
        # after the pod ends, on a busy machine, the kubelet may answer with none yet.
        def pod_log():
            return nodes.kubectl("logs", name, check=False).stdout.strip()

        return pod, nodes.wait("the log of pod %s" % name, pod_log, 30).splitlines()[-1]
    finally:
        nodes.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=false")


def test_the_scheduler_places_a_pod_on_each_node_and_its_log_comes_back(nodes):
    probe_each_node(nodes)


def probe_each_node(nodes):
    for name in EXPECTED:
        container = {
            "name": "probe",
            "image": "localhost/gpuops-lab/tools:1",
            "imagePullPolicy": "Never",
            "command": ["sh", "-c", 'echo "on $NODE"'],
            "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        }
        _pod, log = run_pod(nodes, "lab-node-probe-%s" % name.rsplit("-", 1)[1], name, container)
        assert log == "on %s" % name


def test_ansible_reaches_each_node_over_ssh_as_a_user_who_becomes_root(nodes):
    rc, hosts = ansible("-m", "ansible.builtin.command", "-a", "id -u")
    assert rc == 0, hosts
    assert {name: result["stdout"] for name, result in hosts.items()} == dict.fromkeys(EXPECTED, "0")
    rc, hosts = ansible("-m", "ansible.builtin.command", "-a", "id -un", "-e", "ansible_become=false")
    assert rc == 0, hosts
    assert {name: result["stdout"] for name, result in hosts.items()} == dict.fromkeys(EXPECTED, "gpuops")


def test_nodes_start_with_nothing_of_nvidias(nodes):
    script = (
        "dpkg-query -W -f '${Package}\\n' | grep -i nvidia; "
        "grep -il nvidia /etc/containerd/config.toml; "
        "ls /etc/cdi /var/run/cdi /usr/bin/nvidia-* 2>/dev/null; true"
    )
    rc, hosts = ansible("-m", "ansible.builtin.shell", "-a", script)
    assert rc == 0, hosts
    assert {name: result["stdout"] for name, result in hosts.items()} == dict.fromkeys(EXPECTED, "")


def test_up_again_keeps_the_running_nodes(nodes):
    started = {name: nodes.get("node", name)["metadata"]["uid"] for name in EXPECTED}
    proc = nodes_cli("up", "--count", str(len(EXPECTED)))
    assert proc.returncode == 0, proc.stderr[-4000:]
    for name in EXPECTED:
        assert "%s already up" % name in proc.stderr
        # The same Node object: not deleted and registered again.
        assert nodes.get("node", name)["metadata"]["uid"] == started[name]


# --- a GPU node's software from the fleet's mirror, and a GPU inside a pod ----------------

H100 = ROOT / "lab" / "profiles" / "h100-8x-nvswitch.yaml"


# Each playbook run's wall time: conftest's terminal summary prints them (where the lab
# lane's minutes go).
PLAYBOOK_TIMES = []


def concurrently(*calls):
    """Run each (function, args, kwargs) in its own thread: their results, in order. The lab
    runs read-only playbooks side by side: each waits mostly on its nodes and SSH."""
    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(function, *args, **kwargs) for function, args, kwargs in calls]
        return [future.result() for future in futures]


def playbook_changes(
    playbook, extra_vars, fleet, *more_inventories, check=False, venv_bin=VENV_BIN, hosts=tuple(EXPECTED)
):
    """ansible-playbook -i INVENTORY -i FLEET [-i MORE...] PLAYBOOK [--check --diff]
    --limit HOSTS, from VENV_BIN's ansible-core: {host: its changed tasks' names}."""
    inventories = [arg for path in (fleet, *more_inventories) for arg in ("-i", str(path))]
    args = (
        *inventories,
        str(playbook),
        "-e",
        json.dumps(extra_vars),
        "--limit",
        ",".join(hosts),
        *(("--check", "--diff") if check else ()),
    )
    started = time.monotonic()
    proc, plays = run_ansible("ansible-playbook", *args, timeout=900, venv_bin=venv_bin)
    line = "" if venv_bin == VENV_BIN else " (oldest line)"
    PLAYBOOK_TIMES.append(
        (
            "%s%s%s on %s" % (Path(playbook).name, " --check" if check else "", line, ",".join(hosts)),
            time.monotonic() - started,
        )
    )
    changed = {name: [] for name in hosts}
    failed = {}
    for play in plays:
        for task in play["tasks"]:
            for host, result in task["hosts"].items():
                if result.get("changed"):
                    changed[host].append(task["task"]["name"])
                if result.get("failed") or result.get("unreachable"):
                    failed.setdefault(host, []).append((task["task"]["name"], result.get("msg")))
    assert proc.returncode == 0 and not failed, (proc.returncode, failed, proc.stderr[-2000:])
    return changed


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """The nodes as a fleet's inventory has them: gpu_nodes, and each node's runtime
    settings as host variables, which site.yml and uninstall.yml both read."""
    path = tmp_path_factory.mktemp("fleet") / "fleet.yml"
    hosts = {
        # containerd 1.7 gets the nvidia runtime as a drop-in; 1.6 is edited in place.
        "gpuops-node-2": {"container_runtime_config_mode": "drop_in"},
        DOCKER_NODE: {"container_runtime_engine": "docker"},
    }
    path.write_text(json.dumps({"gpu_nodes": {"children": {"gpuops_lab_nodes": {}}, "hosts": hosts}}))
    return path


@pytest.fixture(scope="module")
def oldest_line_bin():
    """The bin directory of a venv with the oldest ansible-core line we support
    (meta/runtime.yml's floor) and the controller's requirements, made by make matrix's
    script when it is missing."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "ansible-matrix.py"), "--venv", "oldest"],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return Path(proc.stdout.splitlines()[-1]) / "bin"


@pytest.fixture(scope="module")
def gpu_nodes(nodes, fleet, oldest_line_bin):
    """The nodes with the driver package, the toolkit and the nvidia runtime, converged.
    Check mode on the fresh nodes and a run on the converged ones also on the oldest
    ansible-core line."""
    extra_vars = {"lab_docker_nodes": [DOCKER_NODE], "lab_daemon_nodes": CONTAINERD_NODES}
    run = (GPU_PLAYBOOK, extra_vars, fleet)
    oldest = {"venv_bin": oldest_line_bin, "hosts": OLDEST_LINE_NODES}
    # The two lines' check runs side by side on the fresh nodes (check mode changes
    # nothing), and on the converged nodes the dev line's check run beside the oldest
    # line's real one (which must change nothing: if it did, its test fails either way).
    predicted, predicted_oldest = concurrently(
        (playbook_changes, run, {"check": True}), (playbook_changes, run, {"check": True, **oldest})
    )
    first = playbook_changes(*run)
    second = playbook_changes(*run)
    converged_check, second_oldest = concurrently(
        (playbook_changes, run, {"check": True}), (playbook_changes, run, oldest)
    )
    # Only what is not there: cluster_addons owns the nvidia one where a test made it.
    made = [
        rc
        for rc in RUNTIME_CLASSES
        if nodes.kubectl("get", "runtimeclass", rc["metadata"]["name"], check=False).returncode
    ]
    for runtime_class in made:
        nodes.kubectl("create", "-f", "-", stdin=json.dumps(runtime_class))
    yield {
        "predicted": predicted,
        "first": first,
        "second": second,
        "converged_check": converged_check,
        "predicted_oldest": predicted_oldest,
        "second_oldest": second_oldest,
    }
    for runtime_class in made:
        nodes.kubectl("delete", "runtimeclass", runtime_class["metadata"]["name"], "--ignore-not-found")


RUNTIME_CLASSES = [
    # cluster_addons makes the nvidia one on a real cluster; runc is the control.
    {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name}, "handler": runtime}
    for name, runtime in (("nvidia", "nvidia"), ("gpuops-lab-runc", "runc"))
]


# NVIDIA's mock finds its profile beside the library NVIDIA's runtime injects.
PROFILE_VOLUME = {
    "name": "profile",
    "hostPath": {"path": "/usr/share/gpuops-lab-driver/profile.yaml", "type": "File"},
}
PROFILE_MOUNT = {"name": "profile", "mountPath": "/usr/config/config.yaml", "readOnly": True}


def nvml_query_container(**more):
    return {
        "name": "query",
        "image": "localhost/gpuops-lab/nvml-query:1",
        "imagePullPolicy": "Never",
        "volumeMounts": [PROFILE_MOUNT],
        **more,
    }


def nvml_query_pod(nodes, node, runtime_class, visible=None):
    """The lab's nvml-query image in a pod on NODE: its JSON answer."""
    env = [] if visible is None else [{"name": "NVIDIA_VISIBLE_DEVICES", "value": visible}]
    name = "nvml-query-%s" % node.rsplit("-", 1)[1]
    _pod, log = run_pod(
        nodes,
        name,
        node,
        nvml_query_container(env=env),
        runtime_class=runtime_class,
        volumes=[PROFILE_VOLUME],
    )
    return json.loads(log)


def h100_uuids():
    return [device["uuid"] for device in yaml.safe_load(H100.read_text())["devices"]]


DRIVER_TASKS = [
    "gpuops.k8s.nvidia_driver : " + name
    for name in (
        "Declare the site's driver repository",
        "Pin the driver packages to the version pattern in apt's preferences",
        "Install the NVIDIA driver packages",
        "Install NVML's Python bindings, which gpu_info reads the GPUs with",
        "Hold the driver packages, or release them",
    )
]


def test_gpu_software_converges_and_a_second_run_changes_nothing(gpu_nodes):
    for name in EXPECTED:
        first = gpu_nodes["first"][name]
        # nvidia_driver with nvidia_driver_kernel_module false: the packages, their
        # repository, pin and hold; no headers, blacklist, module parameters or reboot.
        assert first[: len(DRIVER_TASKS)] == DRIVER_TASKS, (name, first)
        kernel_tasks = ("Blacklist nouveau", "Install the running kernel's headers")
        assert not any(task.endswith(kernel_tasks) for task in first), (name, first)
    assert gpu_nodes["second"] == {name: [] for name in EXPECTED}


def test_check_mode_on_fresh_nodes_predicts_the_first_runs_changes_exactly(gpu_nodes):
    # --check --diff on the nodes as they started (nothing of NVIDIA's): the tasks it says
    # would change are the tasks the real run then changed, in order, on every node. What
    # check mode cannot ask before a repository or a package exists, its stand-ins report
    # under the real tasks' names (a task whose loop both ran and was stood in for counts once).
    for name in EXPECTED:
        # The roles' tasks (the playbook's own lab step, loading an image into dockerd, is
        # left out of the check run).
        predicted, changed = (
            list(dict.fromkeys(task for task in gpu_nodes[run][name] if task.startswith("gpuops.k8s.")))
            for run in ("predicted", "first")
        )
        assert predicted == changed, (name, predicted, changed)


def test_check_mode_on_converged_nodes_predicts_nothing(gpu_nodes):
    # The real run after convergence changes nothing (above), so check mode must say so
    # too: a task that reports a change it would not make (the pip module given
    # extra_args did) makes every scheduled check run of a fleet look drifted.
    assert gpu_nodes["converged_check"] == {name: [] for name in EXPECTED}


def test_the_oldest_ansible_core_line_predicts_the_same_and_finds_nothing_to_change(gpu_nodes):
    # meta/runtime.yml's floor runs the node phases' roles too: on the fresh nodes its
    # check mode lists the same changes as the dev line's, and on the converged nodes
    # (converged by the dev line) it changes nothing.
    assert gpu_nodes["predicted_oldest"] == {name: gpu_nodes["predicted"][name] for name in OLDEST_LINE_NODES}
    assert gpu_nodes["second_oldest"] == {name: [] for name in OLDEST_LINE_NODES}


def test_the_driver_package_is_pinned_and_held_without_a_kernel_module_of_its_own(gpu_nodes):
    rc, hosts = ansible(
        "-m",
        "ansible.builtin.shell",
        "-a",
        "dpkg --get-selections gpuops-lab-driver;"
        " grep -h '^Package:\\|^Pin:' /etc/apt/preferences.d/nvidia-driver.pref;"
        " ls /etc/modprobe.d/blacklist-nouveau.conf 2>&1 | grep -c 'No such'",
    )
    assert rc == 0, hosts
    for name, result in hosts.items():
        assert [" ".join(line.split()) for line in result["stdout"].split("\n")] == [
            "gpuops-lab-driver hold",
            "Package: gpuops-lab-driver",
            "Pin: version 550.163.01*",
            "1",
        ], (name, result["stdout"])


# lab/nodes.py's air-gapped node, and one that is not (the control: the same probe reaches
# the distribution's mirror from there, as it does from this machine).
AIR_GAPPED_NODE, ONLINE_NODE = "gpuops-node-2", "gpuops-node-1"
MIRROR_URL = "http://10.252.1.1:8750/"
TOOLKIT_KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit-keyring.asc"


def test_the_air_gapped_node_reaches_only_the_lab_and_its_software_came_from_the_mirror(gpu_nodes):
    # The fleet's air-gapped node (docs/air-gapped.md): no route out but to this machine
    # (the API server and the mirror), apt sources that name the mirror alone. The driver,
    # the toolkit, the runtime's and the daemon's packages and wheels (the fixture's runs),
    # and later site.yml (NVIDIA's DaemonSet, below), all installed and passed there.
    debian = socket.getaddrinfo("deb.debian.org", 80, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
    probe = (
        'python3 -c "import socket\n'
        "try: socket.create_connection(('%s', 80), timeout=5).close(); print('reached')\n"
        "except OSError as exc: print('unreachable: %%s' %% exc)\"; "
        "ip route show default | grep -c . || true; "
        "apt-get -q update >/dev/null && apt-get indextargets --format '$(URI)' | sort -u" % debian
    )
    rc, hosts = ansible(
        "--limit", "%s,%s" % (AIR_GAPPED_NODE, ONLINE_NODE), "-m", "ansible.builtin.shell", "-a", probe
    )
    assert rc == 0, hosts
    reached, default_routes, *uris = hosts[AIR_GAPPED_NODE]["stdout"].split("\n")
    assert reached.startswith("unreachable:") and default_routes == "0", hosts[AIR_GAPPED_NODE]["stdout"]
    assert uris and all(uri.startswith(MIRROR_URL) for uri in uris), uris
    reached, default_routes, *_uris = hosts[ONLINE_NODE]["stdout"].split("\n")
    assert (reached, default_routes) == ("reached", "1"), hosts[ONLINE_NODE]["stdout"]
    # It got the same software as the node that reaches Debian, the toolkit's key from
    # the inventory's content (its URL answers nothing).
    first = gpu_nodes["first"]
    assert first[AIR_GAPPED_NODE] and first[AIR_GAPPED_NODE][: len(DRIVER_TASKS)] == DRIVER_TASKS, first
    mirror_key = INVENTORY.parent.parent / "mirror" / "nvidia-container-toolkit" / "gpgkey"
    keyring = on_node(AIR_GAPPED_NODE, "ansible.builtin.command", "cat %s" % TOOLKIT_KEYRING)
    # (The file lookup that gives the content drops the key's last newline.)
    assert keyring["stdout"] == mirror_key.read_text().strip(), keyring


@pytest.mark.parametrize("node", CONTAINERD_NODES)
def test_a_pod_through_the_nvidia_runtime_sees_exactly_the_gpu_it_asked_for(nodes, gpu_nodes, node):
    uuid = h100_uuids()[1]
    seen = nvml_query_pod(nodes, node, "nvidia", visible=uuid)
    assert seen == {
        "dev": ["nvidia-uvm", "nvidia-uvm-tools", "nvidia1", "nvidiactl"],
        "uuids": [uuid],
        "driver": "550.163.01",
    }


@pytest.mark.parametrize("node", CONTAINERD_NODES)
def test_a_pod_that_asks_for_no_gpu_sees_none(nodes, gpu_nodes, node):
    seen = nvml_query_pod(nodes, node, "nvidia")
    assert seen["dev"] == [] and "uuids" not in seen, seen


@pytest.mark.parametrize("node", CONTAINERD_NODES)
def test_the_same_pod_on_plain_runc_sees_no_gpu(nodes, gpu_nodes, node):
    # The control: without NVIDIA's runtime nothing injects the GPU or its driver.
    seen = nvml_query_pod(nodes, node, "gpuops-lab-runc", visible=h100_uuids()[1])
    assert seen["dev"] == [] and "uuids" not in seen, seen


def docker_query(runtime, visible=None):
    """The nvml-query image run by dockerd on DOCKER_NODE with RUNTIME (None: dockerd's
    default runtime): its JSON answer."""
    argv = ["docker", "run", "--rm", *(("--runtime", runtime) if runtime else ())]
    if visible is not None:
        argv += ["--env", "NVIDIA_VISIBLE_DEVICES=%s" % visible]
    argv += [
        "--volume",
        "/usr/share/gpuops-lab-driver/profile.yaml:/usr/config/config.yaml:ro",
        "localhost/gpuops-lab/nvml-query:1",
    ]
    rc, hosts = ansible(
        "--limit", DOCKER_NODE, "-m", "ansible.builtin.command", "-a", json.dumps({"argv": argv})
    )
    assert rc == 0, hosts
    return json.loads(hosts[DOCKER_NODE]["stdout"].splitlines()[-1])


def test_docker_through_the_nvidia_runtime_gives_exactly_the_gpu_asked_for(gpu_nodes):
    uuid = h100_uuids()[1]
    assert docker_query("nvidia", visible=uuid) == {
        "dev": ["nvidia-uvm", "nvidia-uvm-tools", "nvidia1", "nvidiactl"],
        "uuids": [uuid],
        "driver": "550.163.01",
    }
    seen = docker_query("nvidia")
    assert seen["dev"] == [] and "uuids" not in seen, seen


def test_docker_runs_through_the_nvidia_runtime_by_default(gpu_nodes):
    # container_runtime on a fresh dockerd: the nvidia runtime declared and made the
    # default in daemon.json (and nothing else there), so a plain `docker run` gets a GPU.
    daemon = node_files(DOCKER_NODE, "/etc/docker/daemon.json")["/etc/docker/daemon.json"]
    assert json.loads(daemon) == {
        "runtimes": {"nvidia": {"path": "/usr/bin/nvidia-container-runtime"}},
        "default-runtime": "nvidia",
    }
    uuid = h100_uuids()[2]
    assert docker_query(None, visible=uuid)["uuids"] == [uuid]


def test_docker_on_plain_runc_gives_no_gpu(gpu_nodes):
    seen = docker_query("runc", visible=h100_uuids()[1])
    assert seen["dev"] == [] and "uuids" not in seen, seen


def kubelet_assignments(node):
    """{pod UID: [device IDs]} for nvidia.com/gpu, from the kubelet's device manager
    checkpoint on NODE (what the kubelet gave each pod)."""
    rc, hosts = ansible(
        "--limit",
        node,
        "-m",
        "ansible.builtin.command",
        "-a",
        "cat /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint",
    )
    assert rc == 0, hosts
    entries = json.loads(hosts[node]["stdout"])["Data"]["PodDeviceEntries"] or []
    assigned = {}
    for entry in entries:
        if entry["ResourceName"] == "nvidia.com/gpu":
            for ids in entry["DeviceIDs"].values():
                assigned.setdefault(entry["PodUID"], []).extend(ids)
    return assigned


def test_the_daemon_serves_the_real_kubelet_and_a_pod_sees_exactly_its_gpus(nodes, gpu_nodes):
    allocatable = nodes.wait(
        "nvidia.com/gpu allocatable on %s" % DAEMON_NODE,
        lambda: nodes.get("node", DAEMON_NODE)["status"]["allocatable"].get("nvidia.com/gpu"),
        60,
    )
    assert allocatable == "8"
    # On its hostname label: the lab's own node has GPUs too (lab/cluster.py's plugin).
    container = nvml_query_container(resources={"limits": {"nvidia.com/gpu": 2}})
    pod, log = run_pod(
        nodes, "gpu-pair", DAEMON_NODE, container, runtime_class="nvidia", volumes=[PROFILE_VOLUME]
    )
    seen = json.loads(log)
    assigned = kubelet_assignments(DAEMON_NODE)[pod["metadata"]["uid"]]
    # What NVML lists inside the container is exactly what the kubelet assigned.
    assert len(assigned) == 2
    assert sorted(seen["uuids"]) == sorted(assigned), (seen, assigned)
    assert len(seen["dev"]) == 2 + 3  # two GPUs, nvidiactl, nvidia-uvm, nvidia-uvm-tools
    # The pair the plugin prefers, through the kubelet's GetPreferredAllocation: every pair
    # has 18 NVLinks through the NVSwitches, so the PCIe path decides, and a pair on one
    # socket beats one across sockets (a pick without preference: 16 of 28 pairs across).
    sockets = gpu_sockets()
    assert len({sockets[uuid] for uuid in assigned}) == 1, {uuid: sockets[uuid] for uuid in assigned}


# What the device_plugin role installed on a node, read there in one go (it was molecule's
# device_plugin scenario; the lab's nodes run the role whole, for a real kubelet).
INSTALL_PROBE = """
import glob, json, os, subprocess, urllib.request
def run(command):
    proc = subprocess.run(command, shell=True, capture_output=True, text=True)
    return {"rc": proc.returncode, "out": proc.stdout.strip(), "err": proc.stderr.strip()}
home = "/opt/gpuops-device-plugin"
props = ("ActiveState UnitFileState NoNewPrivileges ProtectSystem ProtectHome PrivateTmp "
         "CapabilityBoundingSet RestrictNamespaces ReadWritePaths ExecStart Environment")
site = glob.glob(home + "/venv/lib/python3*/site-packages/gpuops_device_plugin")[0]
with open("/tmp/bad-config.yaml", "w") as bad:
    bad.write("flags:\\n  migStrategy: sometimes\\n")
print(json.dumps({
    "unit": {p: run("systemctl show -P %s gpuops-device-plugin" % p)["out"] for p in props.split()},
    "pip_show": run(home + "/venv/bin/python -m pip show gpuops-device-plugin")["out"],
    "pip_check": run(home + "/venv/bin/python -m pip check")["rc"],
    "shared_module": open(site + "/_nvml_discovery.py").read().count("def discover("),
    "shared_is_link": os.path.islink(site + "/_nvml_discovery.py"),
    "compiled": os.path.isdir(site + "/__pycache__"),
    "src": run("cd %s/src && find . -type f | sort" % home)["out"].split(),
    "old_lib": os.path.exists(home + "/lib"),
    "bin_link": os.readlink(home + "/bin/gpuops-device-plugin"),
    "config_mode": oct(os.stat("/etc/gpuops-device-plugin/config.yaml").st_mode & 0o777),
    "config": open("/etc/gpuops-device-plugin/config.yaml").read(),
    "metrics": urllib.request.urlopen("http://127.0.0.1:9402/metrics", timeout=5).read().decode(),
    "bad_config": run(home + "/bin/gpuops-device-plugin --check-config --config-file /tmp/bad-config.yaml"),
    "journal": run("journalctl -u gpuops-device-plugin --no-pager -o cat")["out"],
}))
"""
HARDENING = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "CapabilityBoundingSet": "",
    "RestrictNamespaces": "yes",
    "ReadWritePaths": "/var/lib/kubelet/device-plugins",
}


def test_the_daemon_is_the_roles_hardened_service_from_a_wheel_built_on_the_node(nodes, gpu_nodes):
    on_node(DAEMON_NODE, "ansible.builtin.copy", {"dest": "/root/install-probe.py", "content": INSTALL_PROBE})
    probe = on_node(DAEMON_NODE, "ansible.builtin.command", "python3 /root/install-probe.py")
    found = json.loads(probe["stdout"])
    unit, command = found["unit"], "/opt/gpuops-device-plugin/venv/bin/gpuops-device-plugin"
    assert (unit["ActiveState"], unit["UnitFileState"]) == ("active", "enabled"), unit
    assert {prop: unit[prop] for prop in HARDENING} == HARDENING
    # The venv's console script, with no PYTHONPATH: the daemon is a wheel in the venv,
    # its dependencies the role's pins, the module shared with the collection a file.
    assert (
        "path=%s ;" % command in unit["ExecStart"]
        and "argv[]=%s --config-file " % command in unit["ExecStart"]
    )
    assert "PYTHONPATH" not in unit["Environment"], unit
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    assert "Name: gpuops-device-plugin" in found["pip_show"] and "Version: " + version in found["pip_show"]
    assert found["pip_check"] == 0 and found["shared_module"] == 1 and not found["shared_is_link"], found
    # Compiled at install: the service cannot write bytecode under ProtectSystem=strict.
    assert found["compiled"], found
    # Only the build source reached the node: no tests, no bytecode, no old PYTHONPATH copy.
    src = found["src"]
    assert "./pyproject.toml" in src and "./gpuops_device_plugin/daemon.py" in src, src
    assert not [f for f in src if "/tests/" in f or "__pycache__" in f or f.endswith(".pyc")], src
    assert not found["old_lib"] and found["bin_link"] == command, found
    # The configuration lab_nodes_gpu.yml gave, validated and written; metrics served.
    assert found["config_mode"] == "0o644" and "quietPeriodSeconds: 10" in found["config"], found
    healthy = 'gpuops_device_plugin_devices{health="Healthy",resource="nvidia.com/gpu"} 8.0'
    assert healthy in found["metrics"].splitlines(), found["metrics"][:2000]
    assert "registered nvidia.com/gpu with the kubelet (8 devices)" in found["journal"]
    # The check the role's `validate:` runs: a bad value is refused with the field named.
    bad = found["bad_config"]
    assert (
        bad["rc"] == 2 and "migStrategy: 'sometimes' is not valid; valid: none, single, mixed" in bad["err"]
    ), bad


def gpu_sockets():
    """{GPU UUID: the NUMA node of its PCIe root complex}, from the H100 profile."""
    profile = yaml.safe_load(H100.read_text())
    numa = {
        bus.upper(): root["numa_node"]
        for root in profile["pcie_topology"]["root_complexes"]
        for bus in root["devices"]
    }
    return {device["uuid"]: numa[device["pci"]["bus_id"].upper()] for device in profile["devices"]}


def test_four_gpus_asked_for_are_one_sockets_four(nodes, gpu_nodes):
    # All four GPUs of one socket (a pick without preference: 2 sets of 70).
    container = nvml_query_container(resources={"limits": {"nvidia.com/gpu": 4}})
    pod, log = run_pod(
        nodes, "gpu-four", DAEMON_NODE, container, runtime_class="nvidia", volumes=[PROFILE_VOLUME]
    )
    assigned = kubelet_assignments(DAEMON_NODE)[pod["metadata"]["uid"]]
    sockets = gpu_sockets()
    socket = sockets[assigned[0]]
    assert sorted(assigned) == sorted(uuid for uuid, s in sockets.items() if s == socket), assigned
    assert sorted(json.loads(log)["uuids"]) == sorted(assigned)


def playbook_on(playbook, hosts, fleet, tags=None, **extra_vars):
    """PLAYBOOK on HOSTS with make site's settings (inventories/lab), only TAGS where given:
    its return code, and each task's name and per-host results, in the order they ran."""
    args = (
        *("-i", str(ROOT / "inventories" / "lab"), "-i", str(fleet), "--limit", ",".join(hosts)),
        *(str(ROOT / "playbooks" / playbook), "-e", json.dumps(extra_vars)),
        *(("--tags", tags) if tags else ()),
    )
    proc, plays = run_ansible("ansible-playbook", *args, timeout=900)
    tasks = [task for play in plays for task in play["tasks"]]
    return proc.returncode, [(task["task"]["name"], task["hosts"]) for task in tasks]


def validation_on(fleet, node, **extra_vars):
    """playbooks/validate.yml on NODE with make site's settings (inventories/lab): its
    return code and the node's result as gpu_validation recorded it."""
    rc, tasks = playbook_on("validate.yml", [node], fleet, **extra_vars)
    result = dict(tasks)["gpuops.k8s.gpu_validation : Record this node's result"][node]
    return rc, result["ansible_facts"]["gpu_validation_result"]


def junit_failures(path):
    """The JUnit report gpu_validation wrote: (tests, [each failure's message])."""
    suite = ET.parse(path).getroot()
    return int(suite.get("tests")), [failure.get("message") for failure in suite.iter("failure")]


def test_validation_compares_the_pods_gpus_with_what_the_kubelet_assigned(nodes, gpu_nodes, fleet, tmp_path):
    junit = tmp_path / "validation.xml"
    rc, result = validation_on(fleet, DAEMON_NODE, gpu_validation_junit_path=str(junit))
    devices = result["pod"]["devices"]
    assert rc == 0 and result["passed"], result
    assert result["pod"]["phase"] == "Succeeded" and result["pod"]["exit_code"] == 0, result
    # The UUIDs NVML listed in the pod are the kubelet's (its pod-resources API), and are
    # this node's own GPUs.
    assert devices["result"] == "match" and devices["seen"] == devices["assigned"], devices
    assert len(devices["seen"]) == 1 and devices["seen"][0] in h100_uuids(), devices
    assert junit_failures(junit) == (1, [])
    # The test pod is cleaned up.
    pods = nodes.kubectl("get", "pods", "-n", "default", "-o", "name").stdout.split()
    assert not [pod for pod in pods if pod.startswith("pod/gpuops-validate-")], pods


def test_validation_fails_when_allocatable_is_short_of_the_replicas_expected(nodes, gpu_nodes, fleet):
    # Time-slicing with 2 replicas expected, but the plugin advertises each GPU once: the
    # wait for allocatable ends, and the result says what is short.
    rc, result = validation_on(
        fleet, DAEMON_NODE, gpu_validation_replicas=2, gpu_validation_allocatable_wait=4
    )
    assert rc != 0 and not result["passed"], result
    # The doctor's allocatable finding, in its words: the kubelet's checkpoint says why.
    short = "allocatable nvidia.com/gpu is 8, expected 16 (8 GPUs found x 2): the plugin advertises 1 per GPU"
    assert short in result["reasons"], result


def test_validation_fails_when_the_pod_sees_other_gpus_than_it_was_given(nodes, gpu_nodes, fleet):
    # Without the node's profile in the pod, NVIDIA's mock lists its default GPUs: not the
    # one the kubelet assigned.
    rc, result = validation_on(fleet, DAEMON_NODE, gpu_validation_host_mounts=[])
    devices = result["pod"]["devices"]
    assert rc != 0 and not result["passed"], result
    assert devices["result"] == "differ" and devices["assigned"][0] in h100_uuids(), devices
    pod = "default/gpuops-validate-" + DAEMON_NODE
    seen, assigned = ", ".join(devices["seen"]), devices["assigned"][0]
    assert result["reasons"] == [
        f"test pod {pod} saw GPUs {seen} through NVML, but the kubelet assigned it {assigned}"
        f" (pod-resources API): not assigned {seen}: not seen {assigned}"
    ], result


def allocatable(nodes, node):
    return nodes.get("node", node)["status"]["allocatable"].get("nvidia.com/gpu")


def doctor_findings(fleet):
    """playbooks/doctor.yml on the containerd nodes: its return code and, per node, each
    failed check's message."""
    rc, tasks = playbook_on("doctor.yml", CONTAINERD_NODES, fleet, gpu_doctor_fail_on_findings=False)
    return rc, {
        host: {f["check"]: f["message"] for f in result["ansible_facts"]["gpu_doctor_findings"]}
        for host, result in dict(tasks)["gpuops.k8s.gpu_doctor : Diagnose the node"].items()
    }


def doctor_beside_validation(findings_of, fleet, **validation_vars):
    """FINDINGS_OF(fleet) (the doctor on the containerd nodes) and validation_on(fleet,
    FAULTED, **validation_vars), side by side: the doctor only reads, and a faulted node's
    validation mostly waits (for its test pod, or on the API). (findings, (rc, result))."""
    return concurrently((findings_of, (fleet,), {}), (validation_on, (fleet, FAULTED), validation_vars))


# Faults go on the second containerd node (Debian 13, containerd 1.7, the runtime as a
# drop-in); the first is the healthy control.
FAULTED, HEALTHY = CONTAINERD_NODES[1], CONTAINERD_NODES[0]
# How long a faulted node's test pod, which cannot start, is given: long enough for the
# kubelet's first sandbox attempt to fail and say why while make test's other lanes keep
# both cores busy.
FAULT_POD_TIMEOUT = 45


def on_faulted(module, args):
    return on_node(FAULTED, module, args)


def test_a_stopped_plugin_is_found_on_its_node_only_and_fails_its_validation(
    nodes, gpu_nodes, fleet, tmp_path
):
    on_faulted("ansible.builtin.systemd_service", "name=gpuops-device-plugin state=stopped")
    try:
        # The kubelet marks the plugin's GPUs unhealthy once its socket is gone.
        nodes.wait("no allocatable GPU on " + FAULTED, lambda: allocatable(nodes, FAULTED) == "0", 60)
        junit = tmp_path / "validation.xml"
        (rc, findings), (validation_rc, result) = doctor_beside_validation(
            doctor_findings, fleet, gpu_validation_allocatable_wait=0, gpu_validation_junit_path=str(junit)
        )
        assert rc == 0 and "plugin" in findings[FAULTED] and "plugin" not in findings[HEALTHY], findings
        assert findings[FAULTED]["services"].startswith("gpuops-device-plugin.service is "), findings
        assert "services" not in findings[HEALTHY], findings
        # The doctor's failing findings, in its words: the unit, its socket, the count (the
        # kubelet holds the 8 unhealthy for its grace period).
        unit, socket, count = result["reasons"]
        assert validation_rc != 0 and unit == findings[FAULTED]["services"], result
        assert unit.endswith(
            ": the device plugin is down, so the kubelet holds the node's GPUs unhealthy and gives them "
            "to no new pod"
        ), result
        assert (
            socket
            == "no device plugin socket in /var/lib/kubelet/device-plugins: the device plugin is not running"
        )
        assert count.startswith("allocatable nvidia.com/gpu is 0, expected 8 (8 GPUs found x 1): "), result
        assert count.endswith("8 held unhealthy (capacity 8)"), result
        tests, failures = junit_failures(junit)
        assert tests == 1 and len(failures) == 1 and socket in failures[0], failures
    finally:
        on_faulted("ansible.builtin.systemd_service", "name=gpuops-device-plugin state=started")
        nodes.wait("8 GPUs allocatable on " + FAULTED, lambda: allocatable(nodes, FAULTED) == "8", 60)


RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"


def test_a_removed_runtime_binary_is_found_on_its_node_only_and_fails_its_validation(nodes, gpu_nodes, fleet):
    on_faulted("ansible.builtin.command", "mv %s %s.moved-by-test" % (RUNTIME_BINARY, RUNTIME_BINARY))
    try:
        (doctor_rc, findings), (rc, result) = doctor_beside_validation(
            doctor_findings, fleet, gpu_validation_timeout=FAULT_POD_TIMEOUT
        )
        assert doctor_rc == 0, findings
        assert findings[FAULTED]["toolkit"] == RUNTIME_BINARY + " is missing (NVIDIA Container Toolkit)", (
            findings
        )
        assert "toolkit" not in findings[HEALTHY], findings
        # nvidia is the node's default runtime, so containerd cannot start even the pod's
        # sandbox: the pod stays Pending, and the kubelet's warning on it is the reason.
        assert rc != 0 and len(result["reasons"]) == 1, result
        reason = result["reasons"][0]
        assert reason.startswith(
            "test pod did not finish within %d s (phase Pending, ContainerCreating): FailedCreatePodSandBox: "
            % FAULT_POD_TIMEOUT
        ), result
        assert reason.endswith("fork/exec %s: no such file or directory: unknown" % RUNTIME_BINARY), result
    finally:
        on_faulted("ansible.builtin.command", "mv %s.moved-by-test %s" % (RUNTIME_BINARY, RUNTIME_BINARY))


CDI_SPEC = "/var/run/cdi/nvidia.yaml"


def test_a_cdi_spec_the_runtime_cannot_load_is_found_on_its_node_only_and_fails_its_validation(
    nodes, gpu_nodes, fleet
):
    # A spec cut short or edited by hand: the lab's nodes run the NVIDIA runtime in mode cdi,
    # so the test pod's GPU comes from this spec. The doctor used to call such a node healthy.
    saved = "/root/nvidia.yaml.saved-by-test"
    on_faulted(
        "ansible.builtin.shell", "cp %s %s && echo 'devices: [ {broken' >> %s" % (CDI_SPEC, saved, CDI_SPEC)
    )
    try:
        (doctor_rc, findings), (rc, result) = doctor_beside_validation(
            doctor_findings, fleet, gpu_validation_timeout=FAULT_POD_TIMEOUT
        )
        assert doctor_rc == 0, findings
        # nvidia-ctk cdi list's words, which are the CDI cache's, as containerd's.
        assert findings[FAULTED]["toolkit"].startswith(
            "the CDI spec %s cannot be loaded (failed to load CDI Spec failed to parse CDI Spec" % CDI_SPEC
        ), findings
        assert "toolkit" not in findings[HEALTHY], findings
        assert rc != 0 and any("unresolvable CDI devices" in reason for reason in result["reasons"]), result
    finally:
        on_faulted("ansible.builtin.command", "mv %s %s" % (saved, CDI_SPEC))


CONTAINERD_CONFIG = "/etc/containerd/config.toml"
GUARD_UNITS = "gpuops-runtime-guard.path gpuops-runtime-guard.timer"
# The guard's stated reaction: it repairs within seconds of the write (roles' docs).
GUARD_REPAIR_BOUND = 30


def test_the_runtime_dropped_by_another_tool_is_found_and_the_drift_guard_puts_it_back(
    nodes, gpu_nodes, fleet
):
    provisioned = provisioned_containerd_config()
    # Another tool writes the node's containerd configuration from its own template: no
    # import of our drop-in, so no nvidia runtime once containerd restarts. The guard is
    # down meanwhile, so the fault stays for the doctor and the validation to find.
    on_faulted("ansible.builtin.command", "systemctl stop " + GUARD_UNITS)
    try:
        on_faulted("ansible.builtin.copy", {"dest": CONTAINERD_CONFIG, "content": provisioned})
        on_faulted("ansible.builtin.systemd_service", {"name": "containerd", "state": "restarted"})
        (doctor_rc, findings), (rc, result) = doctor_beside_validation(
            doctor_findings, fleet, gpu_validation_timeout=FAULT_POD_TIMEOUT
        )
        assert doctor_rc == 0, findings
        assert findings[FAULTED]["runtime"] == (
            "the nvidia runtime is missing from (or differs in) " + CONTAINERD_CONFIG
        ), findings
        assert "runtime" not in findings[HEALTHY], findings
        # The guard being down is a finding of its own (a warning: it is the repair that is
        # missing), on that node only: the other's units, installed alike, are active.
        assert findings[FAULTED]["drift_guard"].endswith(
            ": gpuops-runtime-guard.path inactive (result success), "
            "gpuops-runtime-guard.timer inactive (result success)"
        ), findings
        assert "drift_guard" not in findings[HEALTHY], findings
        assert rc != 0 and len(result["reasons"]) == 1, result
        assert result["reasons"][0].startswith(
            "test pod did not finish within %d s (phase Pending, ContainerCreating): FailedCreatePodSandBox: "
            % FAULT_POD_TIMEOUT
        ), result
        assert 'no runtime for "nvidia" is configured' in result["reasons"][0], result
    finally:
        on_faulted("ansible.builtin.command", "systemctl start " + GUARD_UNITS)
    # The tool writes its template again and restarts containerd, now with the guard
    # watching (which, started, has already put the runtime back once): whichever comes
    # first, containerd must end up started again with the nvidia runtime. Written and timed
    # on the node itself. (Written without the tool's restart, the guard finds containerd
    # already running with the runtime and rightly restarts nothing: fc18.)
    template = "/root/site-tool-config.toml"
    on_faulted("ansible.builtin.copy", {"dest": template, "content": provisioned + "# applied again\n"})
    started = "systemctl show -p InvocationID --value containerd"
    back = (
        '[ "$(%s)" != "$before" ] && systemctl is-active -q containerd'
        " && containerd config dump 2>/dev/null | grep -qF runtimes.nvidia]" % started
    )
    try:
        repaired = on_faulted(
            "ansible.builtin.shell",
            "export before=$(%s); start=$(date +%%s%%N); cp %s %s; systemctl restart containerd;"
            " timeout %d sh -c 'until %s; do sleep 0.1; done' || exit 1;"
            " echo $(( ($(date +%%s%%N) - start) / 1000000 ))"
            % (started, template, CONTAINERD_CONFIG, GUARD_REPAIR_BOUND, back),
        )
    except AssertionError as missed:
        units = "gpuops-runtime-guard.path gpuops-runtime-guard.service containerd"
        status = on_faulted("ansible.builtin.shell", "systemctl status --no-pager -n 15 %s || true" % units)
        raise AssertionError(
            "containerd did not come back with nvidia within %d s of the write; on %s:\n%s"
            % (GUARD_REPAIR_BOUND, FAULTED, status["stdout"])
        ) from missed
    print(
        "drift guard on %s: containerd restarted with nvidia %s ms after the write"
        % (FAULTED, repaired["stdout"])
    )
    # The node serves GPU pods again.
    rc, result = validation_on(fleet, FAULTED, gpu_validation_timeout=60)
    assert rc == 0 and result["passed"], result


# NVIDIA's mock NVML reads its runtime faults from overrides.yaml beside its profile
# (/usr/config/config.yaml on the lab's nodes), every second, in every process using it.
MOCK_OVERRIDES = "/usr/config/overrides.yaml"
GPU_3_LOST = {"version": 1, "devices": {"3": {"failure": {"mode": "lost"}}}}


def test_a_lost_gpu_is_found_on_its_node_only_and_fails_its_validation(nodes, gpu_nodes, fleet):
    on_faulted(
        "ansible.builtin.copy", "dest=%s content=%s" % (MOCK_OVERRIDES, json.dumps(json.dumps(GPU_3_LOST)))
    )
    try:
        # The daemon's health loop takes the GPU out: the kubelet has 7.
        nodes.wait("7 GPUs allocatable on " + FAULTED, lambda: allocatable(nodes, FAULTED) == "7", 60)
        (doctor_rc, findings), (rc, result) = doctor_beside_validation(doctor_findings, fleet)
        assert doctor_rc == 0 and findings[FAULTED]["nvml"].startswith("GPU 3 is lost ("), findings
        assert "nvml" not in findings[HEALTHY], findings
        # 7 found, 7 allocatable, and the test pod gets a healthy GPU: only the lost one
        # fails the node.
        assert rc != 0 and result["reasons"] == [
            "GPU 3 does not answer NVML (%s): lost or fallen off the bus; drain the node, then reset or "
            "replace it" % "GPU is lost"
        ], result
    finally:
        on_faulted("ansible.builtin.file", "path=%s state=absent" % MOCK_OVERRIDES)
        # The daemon's recovery: Healthy again once re-probes pass for its quiet period
        # (10 s in lab_nodes_gpu.yml).
        nodes.wait("GPU 3 back: 8 allocatable on " + FAULTED, lambda: allocatable(nodes, FAULTED) == "8", 60)


def all_findings(fleet):
    """playbooks/doctor.yml on the containerd nodes: per node, every finding as
    (check, severity, message), in the doctor's order."""
    rc, tasks = playbook_on("doctor.yml", CONTAINERD_NODES, fleet, gpu_doctor_fail_on_findings=False)
    assert rc == 0, tasks
    return {
        host: [
            (f["check"], f["severity"], f["message"]) for f in result["ansible_facts"]["gpu_doctor_findings"]
        ]
        for host, result in dict(tasks)["gpuops.k8s.gpu_doctor : Diagnose the node"].items()
    }


def failing(findings):
    return [message for _check, severity, message in findings if severity == "fail"]


def plugin_log_since(since, text):
    """The daemon's journal lines on the faulted node since SINCE (journalctl's --since) with TEXT."""
    journal = on_faulted(
        "ansible.builtin.command",
        {"argv": ["journalctl", "-u", "gpuops-device-plugin", "--since", since, "--no-pager", "-o", "cat"]},
    )["stdout"]
    return [line for line in journal.splitlines() if text in line]


GPU_3_NODE = "/dev/nvidia3"
MKNOD_GPU_3 = "mknod -m 0666 /dev/nvidia3 c 195 3"
# make site's health settings for the faulted node's daemon (lab_nodes_gpu.yml).
PROBE_INTERVAL, QUIET_PERIOD = 2, 10


def test_a_plugin_offering_a_gpu_nvml_no_longer_lists_is_named_on_its_node_only(nodes, gpu_nodes, fleet):
    # A plugin that never re-probes (NVIDIA's; here our daemon, frozen) keeps a GPU whose
    # device node is gone healthy: the kubelet's checkpoint still lists it, and a fresh
    # NVML (NVIDIA's mock opens only the GPUs whose nodes exist, as a container's would)
    # does not.
    stop = "kill -STOP $(systemctl show --property MainPID --value gpuops-device-plugin)"
    on_faulted("ansible.builtin.shell", stop)
    on_faulted("ansible.builtin.command", "rm " + GPU_3_NODE)
    try:
        findings, (rc, result) = doctor_beside_validation(all_findings, fleet)
        assert failing(findings[HEALTHY]) == [], findings
        gpu_3 = h100_uuids()[3]
        advertised = (
            "the plugin advertises GPUs that NVML no longer lists: %s, held healthy by the kubelet "
            "(8 nvidia.com/gpu devices registered, NVML lists 7 GPUs); %s is missing (see device_nodes)"
            % (gpu_3, GPU_3_NODE)
        )
        assert failing(findings[FAULTED]) == [advertised], findings
        assert ("device_nodes", "warn") in [found[:2] for found in findings[FAULTED]], findings
        # Validation fails the node with the doctor's words, without waiting and without a pod.
        assert rc != 0 and result["reasons"] == [advertised] and not result["pod"]["ran"], result
    finally:
        on_faulted("ansible.builtin.command", MKNOD_GPU_3)
        on_faulted("ansible.builtin.shell", stop.replace("-STOP", "-CONT"))


def test_a_removed_gpu_device_node_is_found_and_the_daemon_takes_the_gpu_out_and_back(
    nodes, gpu_nodes, fleet
):
    since = on_faulted("ansible.builtin.command", "date '+%Y-%m-%d %H:%M:%S'")["stdout"]
    removed = time.monotonic()
    on_faulted("ansible.builtin.command", "rm " + GPU_3_NODE)
    restored = None
    try:
        # The daemon's re-probe finds the node gone and marks the GPU unhealthy: 7 of 8.
        nodes.wait("7 GPUs allocatable on " + FAULTED, lambda: allocatable(nodes, FAULTED) == "7", 60)
        out = time.monotonic() - removed
        gpu_3 = h100_uuids()[3]
        marked = plugin_log_since(since, "is now Unhealthy")
        assert marked and marked[-1].endswith(
            "device %s is now Unhealthy: device node of GPU %s: %s is gone" % (gpu_3, gpu_3, GPU_3_NODE)
        ), marked
        findings, (rc, result) = doctor_beside_validation(all_findings, fleet)
        assert failing(findings[HEALTHY]) == [], findings
        held = (
            "the plugin advertises GPUs that NVML no longer lists: capacity nvidia.com/gpu is 8, NVML "
            "lists 7 GPUs x 1; the kubelet holds the 1 more unhealthy (allocatable 7); %s is missing "
            "(see device_nodes)" % GPU_3_NODE
        )
        assert failing(findings[FAULTED]) == [held], findings
        assert rc != 0 and result["reasons"] == [held] and not result["pod"]["ran"], result
        on_faulted("ansible.builtin.command", MKNOD_GPU_3)
        restored = time.monotonic()
        # Healthy again once re-probes pass for the quiet period.
        nodes.wait("GPU 3 back: 8 allocatable on " + FAULTED, lambda: allocatable(nodes, FAULTED) == "8", 60)
        back = time.monotonic() - restored
        assert plugin_log_since(since, "is now Healthy: re-probe succeeded"), "no recovery logged"
        # Measured, not asserted (the kubelet's node status adds up to 10 s to each).
        print("device node removed -> allocatable 7: %.1f s; restored -> 8: %.1f s" % (out, back))
    finally:
        if restored is None:
            on_faulted("ansible.builtin.command", MKNOD_GPU_3)
            nodes.wait("8 GPUs allocatable on " + FAULTED, lambda: allocatable(nodes, FAULTED) == "8", 60)


def test_a_removed_uvm_node_is_found_on_its_node_only_and_fails_its_validation(nodes, gpu_nodes, fleet):
    uvm = "/dev/nvidia-uvm"
    on_faulted("ansible.builtin.command", "rm " + uvm)
    try:
        findings, (rc, result) = doctor_beside_validation(all_findings, fleet)
        assert failing(findings[HEALTHY]) == [], findings
        missing = (
            "/dev/nvidia-uvm is missing: CUDA needs it (unified memory), and the device plugin passes it "
            "to containers only where it exists"
        )
        assert failing(findings[FAULTED]) == [missing], findings
        assert rc != 0 and result["reasons"] == [missing], result
    finally:
        on_faulted("ansible.builtin.command", "mknod -m 0666 %s c 510 0" % uvm)


def node_ready(nodes, node):
    conditions = nodes.get("node", node)["status"]["conditions"]
    return next(c for c in conditions if c["type"] == "Ready")


def not_ready(nodes, node):
    """The Node's Ready condition while it is not True, else None."""
    condition = node_ready(nodes, node)
    return condition if condition["status"] != "True" else None


def test_a_stopped_container_runtime_is_found_on_its_node_only_and_fails_its_validation(
    nodes, gpu_nodes, fleet
):
    on_faulted("ansible.builtin.systemd_service", "name=containerd state=stopped")
    try:
        # The kubelet says the runtime is down about 30 s after its last good check.
        ready = nodes.wait(
            "%s NotReady" % FAULTED,
            lambda: not_ready(nodes, FAULTED),
            120,
        )
        findings, (rc, result) = doctor_beside_validation(all_findings, fleet)
        assert failing(findings[HEALTHY]) == [], findings
        stopped = (
            "containerd.service is inactive (dead): the container runtime is down, so no container starts "
            "or stops on the node, and the kubelet reports the Node NotReady"
        )
        # The Node's condition in the doctor's words: status, reason and the kubelet's message.
        not_ready_now = "Node %s is not Ready (Ready=%s, %s): %s" % (
            FAULTED,
            ready["status"],
            ready["reason"],
            ready["message"],
        )
        assert failing(findings[FAULTED]) == [stopped, not_ready_now], findings
        assert "container runtime is down" in not_ready_now, ready
        # Validation: the same two causes, at once, without a test pod.
        assert rc != 0 and result["reasons"] == [stopped, not_ready_now] and not result["pod"]["ran"], result
    finally:
        on_faulted("ansible.builtin.systemd_service", "name=containerd state=started")
        nodes.wait("%s Ready again" % FAULTED, lambda: node_ready(nodes, FAULTED)["status"] == "True", 120)


# The node's kubelet configuration (JSON, written by lab/nodes.py).
KUBELET_CONFIG = "/etc/kubernetes/kubelet.yaml"
DROP_FAIL_CGROUP_V1 = (
    "import json, sys; path = sys.argv[1]; config = json.load(open(path)); "
    "config.pop('failCgroupV1'); open(path, 'w').write(json.dumps(config, indent=2))"
)


def test_a_kubelet_that_would_refuse_cgroup_v1_is_named_on_its_node_only(nodes, gpu_nodes, fleet):
    # The lab's kubelets run on this cgroup v1 host because their configuration says
    # failCgroupV1: false. Without it a 1.35+ kubelet exits at its next start; the running
    # one read its file at start, so the node stays Ready while the doctor must say so.
    saved = KUBELET_CONFIG + ".gpuops-test"
    on_faulted("ansible.builtin.command", {"argv": ["cp", "-p", KUBELET_CONFIG, saved]})
    try:
        drop = ["python3", "-c", DROP_FAIL_CGROUP_V1, KUBELET_CONFIG]
        on_faulted("ansible.builtin.command", {"argv": drop})
        rc, findings = doctor_findings(fleet)
        assert rc == 0 and "kubelet" not in findings[HEALTHY], findings
        assert re.fullmatch(
            r"this node is on cgroup v1 and the kubelet \(v1\.3[5-9]\.\d+\) refuses to start there: "
            + re.escape(KUBELET_CONFIG)
            + r" does not set failCgroupV1, which is true by default from Kubernetes 1\.35 \(KEP-5573\), "
            r"so the kubelet exits at start and the Node goes NotReady",
            findings[FAULTED]["kubelet"],
        ), findings
        # site.yml's preflight stops that node with the same words, and only that node.
        rc, tasks = playbook_on("site.yml", CONTAINERD_NODES, fleet, tags="preflight")
        check = dict(tasks)["Check that the kubelet can run on this host"]
        assert rc != 0 and check[FAULTED]["failed"] and not check[HEALTHY].get("failed"), check
        fix = ". Fix: move the node to cgroup v2"
        assert check[FAULTED]["msg"].startswith(findings[FAULTED]["kubelet"] + fix), check
    finally:
        on_faulted("ansible.builtin.command", {"argv": ["mv", saved, KUBELET_CONFIG]})
    rc, findings = doctor_findings(fleet)
    assert "kubelet" not in findings[FAULTED], findings


# --- DRA: node 2 moves from gpuops's device plugin to the daemon's DRA front end ----------

DRA_PLAYBOOK = Path(__file__).parent / "playbooks" / "lab_nodes_dra.yml"
DRA_DRIVER = "gpu.gpuops.k8s"
DRA_CHECKPOINT = "/var/lib/kubelet/plugins/gpu.gpuops.k8s/checkpoint.json"
# Issue 33's count: 20 kubelet and 20 plugin restarts with claims prepared.
DRA_RESTARTS = 20
# systemd refuses a sixth start of a unit within 10 s (its defaults: StartLimitBurst=5 in
# StartLimitIntervalSec=10s), so a round, which restarts each unit once, takes at least this.
DRA_ROUND_AT_LEAST = 2.5
CLEAR_CHECKPOINT_TASK = (
    "gpuops.k8s.device_plugin : Remove the kubelet's device checkpoint (the kubelet writes a new one)"
)


def dra_slices(nodes, node, driver=DRA_DRIVER):
    selector = f"spec.nodeName={node},spec.driver={driver}"
    return nodes.get("resourceslices", "--field-selector", selector)["items"]


def dra_devices(nodes, node, driver=DRA_DRIVER):
    """{device name: its attributes' values} of the node's published slices."""
    return {
        device["name"]: {key: next(iter(value.values())) for key, value in device["attributes"].items()}
        for piece in dra_slices(nodes, node, driver)
        for device in piece["spec"]["devices"]
    }


def dra_pod(nodes, name, node, *, claim_template=None, claim=None, gpu_limit=False):
    """A long-running nvml-query pod on NODE: through a ResourceClaimTemplate of ours, or
    asking for nvidia.com/gpu with no claim (DRA's extended resource)."""
    container = nvml_query_container(command=["sh", "-c", "python3 /opt/nvml-query.py; sleep 3600"])
    spec = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 1,
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [container],
        "volumes": [PROFILE_VOLUME],
    }
    if claim_template or claim:
        container["resources"] = {"claims": [{"name": "gpu"}]}
        source = (
            {"resourceClaimTemplateName": claim_template} if claim_template else {"resourceClaimName": claim}
        )
        spec["resourceClaims"] = [{"name": "gpu", **source}]
    if gpu_limit:
        container["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
    nodes.kubectl("apply", "-f", "-", stdin=json.dumps(manifest))


def claim_template(name, memory=None, consume=None, driver=DRA_DRIVER):
    """One GPU of DRIVER's DeviceClass (ours unless given) with at least MEMORY (a quantity)
    of memory, or one that CONSUMEs that much of a GPU's memory (shared with other such claims)."""
    request = {"deviceClassName": driver}
    if memory:
        expression = f'device.capacity["{driver}"].memory.compareTo(quantity("{memory}")) >= 0'
        request["selectors"] = [{"cel": {"expression": expression}}]
    if consume:
        request["capacity"] = {"requests": {"memory": consume}}
    devices = {"requests": [{"name": "gpu", "exactly": request}]}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": devices}},
    }


# Our driver's opaque configuration: the GPU time-sliced (Short), as NVIDIA's driver's GpuConfig.
TIME_SLICED = {
    "opaque": {
        "driver": DRA_DRIVER,
        "parameters": {
            "apiVersion": "gpu.gpuops.k8s/v1alpha1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}},
        },
    }
}


def shared_gpus(nodes):
    """Two pods on one time-sliced ResourceClaim, and two claims each consuming half of an
    80 GB GPU's memory: {pod: (its claim's device, the UUIDs NVML listed in it)}."""
    shared = claim_template("shared-gpu")
    shared.update(kind="ResourceClaim", spec=shared["spec"]["spec"])
    shared["spec"]["devices"]["config"] = [TIME_SLICED]
    nodes.kubectl("apply", "-f", "-", stdin=json.dumps(shared))
    for pod in ("dra-shared-a", "dra-shared-b"):
        dra_pod(nodes, pod, FAULTED, claim="shared-gpu")
    for pod in ("dra-half-a", "dra-half-b"):
        dra_pod(nodes, pod, FAULTED, claim_template="gpu-half")
    found = {}
    for pod in ("dra-shared-a", "dra-shared-b", "dra-half-a", "dra-half-b"):
        status, seen = running_query(nodes, pod)
        found[pod] = (allocated_device(nodes, status)[1], seen["uuids"])
    return found


def shared_on_the_node(nodes, devices, taken):
    """Sharing: one time-sliced claim's two pods on its one GPU; two half-memory claims on
    one GPU (the scheduler's accounting; the mock's GPUs, as real ones, do not cap it), none
    of the TAKEN devices."""
    shared = shared_gpus(nodes)
    for first, second in (("dra-shared-a", "dra-shared-b"), ("dra-half-a", "dra-half-b")):
        assert shared[first] == shared[second], shared
        assert shared[first][1] == [devices[shared[first][0]]["uuid"]], shared
    assert shared["dra-half-a"][0] not in (*taken, shared["dra-shared-a"][0]), shared
    # The shared claim's time-slice, set by NVIDIA's nvidia-smi at Prepare (the daemon
    # records it only after nvidia-smi succeeded); the other claims set none.
    sliced = time_slices(nodes, "shared-gpu")
    assert sliced == ([(shared["dra-shared-a"][0], "Short")], set()), sliced


def time_slices(nodes, claim):
    """CLAIM's (device, time-slice) pairs in the node's DRA checkpoint, and the time-slices
    the other claims there set."""
    uid = nodes.get("resourceclaim", claim)["metadata"]["uid"]
    records = checkpointed_claims(detail=True)
    mine = [(device["device"], device.get("time_slice", "")) for device in records.pop(uid)["devices"]]
    others = {
        device["time_slice"]
        for record in records.values()
        for device in record["devices"]
        if device.get("time_slice")
    }
    return mine, others


def running_query(nodes, name):
    """The pod once Running, and what NVML listed in it."""
    nodes.wait(f"pod {name} to run", lambda: nodes.get("pod", name)["status"].get("phase") == "Running", 120)

    def pod_log():
        return nodes.kubectl("logs", name, check=False).stdout.strip()

    log = nodes.wait(f"the log of pod {name}", pod_log, 30)
    return nodes.get("pod", name), json.loads(log.splitlines()[0])


def claim_name(pod):
    """The pod's (only) claim: made from its template, named in its spec, or made for its
    nvidia.com/gpu request (DRA's extended resource)."""
    statuses = pod["status"].get("resourceClaimStatuses")
    if statuses:
        (status,) = statuses
        return status["resourceClaimName"]
    named = [
        ref["resourceClaimName"]
        for ref in pod["spec"].get("resourceClaims", [])
        if "resourceClaimName" in ref
    ]
    if named:
        (name,) = named
        return name
    return pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]


def allocated_device(nodes, pod, driver=DRA_DRIVER):
    """The device the scheduler allocated to the pod's (only) claim."""
    claim = nodes.get("resourceclaim", claim_name(pod))
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (driver, FAULTED), result
    return claim, result["device"]


def checkpointed_claims(detail=False):
    """Claim UID -> its state in the DRA checkpoint on the node; with detail, its record."""
    text = on_faulted("ansible.builtin.command", "cat " + DRA_CHECKPOINT)["stdout"]
    claims = json.loads(text)["claims"]
    return claims if detail else {uid: claim["state"] for uid, claim in claims.items()}


def device_health(nodes, pod):
    statuses = nodes.get("pod", pod)["status"]["containerStatuses"][0].get("allocatedResourcesStatus") or []
    return [resource["health"] for status in statuses for resource in status["resources"]]


def device_taints(nodes, device):
    for piece in dra_slices(nodes, FAULTED):
        for published in piece["spec"]["devices"]:
            if published["name"] == device:
                return [taint["key"] for taint in published.get("taints", [])]
    return None


def move_to_dra(nodes, fleet):
    """Node 2 into mode dra, checked: check mode predicts the move, a second run changes
    nothing, its slice is published, and the device plugin's nvidia.com/gpu leaves its
    Node. Its devices: {name: attributes}."""
    extra_vars = {"container_runtime_enable_cdi": True, "lab_daemon_nodes": [], "lab_docker_nodes": []}
    predicted = playbook_changes(DRA_PLAYBOOK, extra_vars, fleet, check=True, hosts=(FAULTED,))
    first = playbook_changes(DRA_PLAYBOOK, extra_vars, fleet, hosts=(FAULTED,))
    second = playbook_changes(DRA_PLAYBOOK, extra_vars, fleet, hosts=(FAULTED,))
    assert predicted == first, (predicted, first)
    assert second == {FAULTED: []}, second
    # The device plugin's nvidia.com/gpu was in the kubelet's device checkpoint.
    assert CLEAR_CHECKPOINT_TASK in first[FAULTED], first

    # One slice, one pool named for the node, owned by its Node, the node's 8 H100s.
    (published,) = nodes.wait("the node's ResourceSlice", lambda: dra_slices(nodes, FAULTED), 60)
    assert published["spec"]["pool"]["name"] == FAULTED
    (owner,) = published["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("Node", FAULTED)
    devices = dra_devices(nodes, FAULTED)
    assert sorted(attributes["uuid"] for attributes in devices.values()) == sorted(h100_uuids())
    # Else the scheduler would place unchanged pods by it, and the kubelet start them
    # without a GPU (seen on this lab before the daemon removed it).
    nodes.wait(
        "nvidia.com/gpu gone from the node's status",
        lambda: "nvidia.com/gpu" not in nodes.get("node", FAULTED)["status"]["capacity"],
        60,
    )
    return devices


CDI_REFUSAL_TASK = (
    "gpuops.k8s.device_plugin : Refuse a node whose container runtime does not inject CDI devices"
)


def refused_without_cdi(fleet):
    """Mode dra on node 1, whose containerd 1.6 injects no CDI devices: site.yml's device
    plugin phase fails there before it changes anything, naming the runtime and what would
    serve."""
    rc, tasks = playbook_on("site.yml", [DAEMON_NODE], fleet, tags="device_plugin", device_plugin_mode="dra")
    changed = [name for name, hosts in tasks if hosts.get(DAEMON_NODE, {}).get("changed")]
    failed = [(name, hosts[DAEMON_NODE]) for name, hosts in tasks if hosts.get(DAEMON_NODE, {}).get("failed")]
    assert rc != 0 and changed == [], (rc, changed)
    assert [name for name, _result in failed] == [CDI_REFUSAL_TASK], failed
    message = failed[0][1]["msg"]
    assert "containerd 1.6." in message and "has no CDI support" in message, message
    assert "containerd 1.7 with enable_cdi = true" in message, message


SECOND_CLASS_TASK = "gpuops.k8s.device_plugin : Refuse a second DeviceClass for nvidia.com/gpu pods"


def refused_a_second_gpu_class(fleet):
    """Node 2, served by our DRA driver, moved straight to NVIDIA's (mode nvidia_dra): our
    DeviceClass already serves nvidia.com/gpu pods, and NVIDIA's chart's gpu.nvidia.com would
    too, of which the scheduler uses only the newer. Refused before anything changes."""
    rc, tasks = playbook_on(
        "site.yml", [FAULTED], fleet, tags="device_plugin", device_plugin_mode="nvidia_dra"
    )
    changed = [name for name, hosts in tasks if hosts.get(FAULTED, {}).get("changed")]
    failed = [(name, hosts[FAULTED]) for name, hosts in tasks if hosts.get(FAULTED, {}).get("failed")]
    assert rc != 0 and changed == [], (rc, changed)
    assert [name for name, _result in failed] == [SECOND_CLASS_TASK], failed
    message = " ".join(failed[0][1]["msg"].split())
    assert (
        "through DeviceClass gpu.nvidia.com, but DeviceClass nvidia-gpu.gpu.gpuops.k8s in the cluster does."
    ) in message, message
    assert "device_plugin_dra_extended_resource false on the nodes in mode dra" in message, message


def validated_through_dra(fleet, driver=DRA_DRIVER):
    """validate.yml on the DRA node: its test pod's claim (a DeviceClass of DRIVER) got a GPU,
    NVML in the pod saw that one; doctor.yml on it finds nothing failing (registration, slice
    against NVML, classes)."""
    cdi = {"container_runtime_enable_cdi": True}
    # Side by side: the doctor reads the node, its slice and the classes, none of which the
    # validation's claim and pod change.
    (rc, result), (doctor_rc, tasks) = concurrently(
        (validation_on, (fleet, FAULTED), cdi),
        (playbook_on, ("doctor.yml", [FAULTED], fleet), {"gpu_doctor_fail_on_findings": False, **cdi}),
    )
    assert rc == 0 and result["passed"], result
    assert (result["mode"], result["driver"], result["allocatable"]) == ("dra", driver, 8), result
    devices = result["pod"]["devices"]
    assert devices["result"] == "match" and devices["seen"] == devices["assigned"], devices
    assert len(devices["seen"]) == 1 and devices["seen"][0] in h100_uuids(), devices
    findings = dict(tasks)["gpuops.k8s.gpu_doctor : Diagnose the node"][FAULTED]["ansible_facts"]
    failed = [f["message"] for f in findings["gpu_doctor_findings"] if f["severity"] == "fail"]
    assert doctor_rc == 0 and failed == [], findings


def systemctl_on_faulted(*args):
    """systemctl ARGS on the faulted node through podman exec (the lab's own): about a second,
    where an Ansible call takes several, so the restart rounds can be the issue's 20."""
    lablib("node_containers").podman("exec", FAULTED, "systemctl", *args)


def restart_rounds(nodes):
    """The plugin and the kubelet restarted DRA_RESTARTS times each; the slice back each time."""
    back = {"gpuops-device-plugin": [], "kubelet": []}
    for _round in range(DRA_RESTARTS):
        started = time.monotonic()
        for unit, seconds in back.items():
            systemctl_on_faulted("restart", unit)
            start = time.monotonic()
            nodes.wait("the slice back", lambda: len(dra_devices(nodes, FAULTED)) == 8, 90)
            seconds.append(time.monotonic() - start)
        time.sleep(max(0.0, DRA_ROUND_AT_LEAST - (time.monotonic() - started)))
    for unit, seconds in back.items():
        print(
            f"slice back after {len(seconds)} restarts of {unit}: p50 {statistics.median(seconds):.1f} s,"
            f" max {max(seconds):.1f} s"
        )


def lose_and_recover(nodes, pod, device):
    """POD's GPU DEVICE loses its device node: the pod's status and the slice say so, and
    both clear once it is back (quiet period 10 s)."""
    minor = int(device.rsplit("-", 1)[1])
    nodes.wait("the claim's device healthy", lambda: device_health(nodes, pod) == ["Healthy"], 60)
    on_faulted("ansible.builtin.command", f"rm /dev/nvidia{minor}")
    try:
        start = time.monotonic()
        nodes.wait("the pod told", lambda: device_health(nodes, pod) == ["Unhealthy"], 60)
        print(f"pod status Unhealthy after {time.monotonic() - start:.1f} s")
        lost = [DRA_DRIVER + "/lost"]
        nodes.wait("the device tainted lost", lambda: device_taints(nodes, device) == lost, 60)
    finally:
        on_faulted("ansible.builtin.command", f"mknod -m 0666 /dev/nvidia{minor} c 195 {minor}")
    start = time.monotonic()
    nodes.wait("the pod told again", lambda: device_health(nodes, pod) == ["Healthy"], 90)
    nodes.wait("the taint gone", lambda: device_taints(nodes, device) == [], 90)
    print(f"healthy and untainted {time.monotonic() - start:.1f} s after the device node came back")


DRA_XID_ROUNDS = 3
XID_TAINT = DRA_DRIVER + "/xid"


def xid_rounds(nodes, pod, device):
    """An XID on POD's GPU, DRA_XID_ROUNDS times (NVIDIA's mock: the GPU trips into an
    uncorrectable ECC error and reports XID 79 through NVML's event set): the slice taints the
    device and the pod's status says Unhealthy; with the fault cleared both lift once re-probes
    pass for the quiet period (10 s here). Seconds: {"xid -> taint": [...], ...}."""
    index = device.rsplit("-", 1)[1]
    xid = {"version": 1, "devices": {index: {"failure": {"mode": "ecc_uncorrectable", "xid": {"code": 79}}}}}
    times = {"xid -> taint": [], "xid -> pod Unhealthy": [], "recovery -> untaint and Healthy": []}
    for _round in range(DRA_XID_ROUNDS):
        nodes.wait("the claim's device healthy", lambda: device_health(nodes, pod) == ["Healthy"], 90)
        on_faulted("ansible.builtin.copy", {"dest": MOCK_OVERRIDES, "content": json.dumps(xid)})
        start = time.monotonic()
        try:
            seen = {}
            while len(seen) < 2 and time.monotonic() - start < 60:
                if "taint" not in seen and device_taints(nodes, device) == [XID_TAINT]:
                    seen["taint"] = time.monotonic() - start
                if "pod" not in seen and device_health(nodes, pod) == ["Unhealthy"]:
                    seen["pod"] = time.monotonic() - start
                time.sleep(0.1)
            assert set(seen) == {"taint", "pod"}, (
                seen,
                device_taints(nodes, device),
                device_health(nodes, pod),
            )
            # Only the faulted GPU: the others stay offered.
            tainted = [
                d["name"] for s in dra_slices(nodes, FAULTED) for d in s["spec"]["devices"] if d.get("taints")
            ]
            assert tainted == [device], tainted
        finally:
            on_faulted("ansible.builtin.file", {"path": MOCK_OVERRIDES, "state": "absent"})
        cleared = time.monotonic()
        nodes.wait("the taint gone", lambda: device_taints(nodes, device) == [], 90)
        nodes.wait("the pod told again", lambda: device_health(nodes, pod) == ["Healthy"], 90)
        times["xid -> taint"].append(seen["taint"])
        times["xid -> pod Unhealthy"].append(seen["pod"])
        times["recovery -> untaint and Healthy"].append(time.monotonic() - cleared)
    for what, seconds in times.items():
        print(
            f"{what}: p50 {statistics.median(seconds):.1f} s, max {max(seconds):.1f} s, {len(seconds)} rounds"
        )
    return times


def uninstall_dra(nodes, fleet):
    """Mode dra's uninstall on node 2 (device_plugin_state absent): check mode predicts it, a
    second run changes nothing, and no slice, class, socket, claim CDI spec or checkpoint of
    the driver stays."""
    extra_vars = {
        "container_runtime_enable_cdi": True,
        "lab_daemon_nodes": [],
        "lab_docker_nodes": [],
        "device_plugin_state": "absent",
    }
    predicted = playbook_changes(DRA_PLAYBOOK, extra_vars, fleet, check=True, hosts=(FAULTED,))
    first = playbook_changes(DRA_PLAYBOOK, extra_vars, fleet, hosts=(FAULTED,))
    assert predicted == first and first[FAULTED], (predicted, first)
    assert playbook_changes(DRA_PLAYBOOK, extra_vars, fleet, hosts=(FAULTED,)) == {FAULTED: []}
    assert dra_slices(nodes, FAULTED) == []
    classes = [c["metadata"]["name"] for c in nodes.get("deviceclasses")["items"]]
    assert not [c for c in classes if c.endswith(DRA_DRIVER)], classes
    left = on_faulted(
        "ansible.builtin.shell",
        "ls -d /var/lib/kubelet/plugins_registry/*gpuops* /var/lib/kubelet/plugins/*gpuops* "
        "/etc/gpuops-device-plugin /opt/gpuops-device-plugin 2>/dev/null; ls /var/run/cdi; "
        "systemctl list-unit-files gpuops-device-plugin.service --no-legend | cut -d' ' -f1; true",
    )["stdout"].split()
    assert left == ["nvidia.yaml"], left


NVIDIA_DRA_PLAYBOOK = Path(__file__).parent / "playbooks" / "lab_nodes_nvidia_dra.yml"
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"


def nvidia_dra_runs(fleet, extra_vars):
    """lab_nodes_nvidia_dra.yml on node 2 with EXTRA_VARS: check mode predicts the real run,
    which changes something, and a second run changes nothing."""
    predicted = playbook_changes(NVIDIA_DRA_PLAYBOOK, extra_vars, fleet, check=True, hosts=(FAULTED,))
    first = playbook_changes(NVIDIA_DRA_PLAYBOOK, extra_vars, fleet, hosts=(FAULTED,))
    second = playbook_changes(NVIDIA_DRA_PLAYBOOK, extra_vars, fleet, hosts=(FAULTED,))
    assert predicted == first and first[FAULTED], (predicted, first)
    assert second == {FAULTED: []}, second
    return first[FAULTED]


def nvidia_dra_serves(nodes, fleet):
    """Node 2 served by NVIDIA's DRA driver v0.5.0 (device_plugin_mode nvidia_dra, its own
    chart and its image built from source): the install and its uninstall each predicted by
    check mode and idempotent; its slice lists the node's 8 H100s; a pod on a claim of its
    DeviceClass sees exactly the GPU allocated (validate.yml) and doctor.yml finds nothing
    failing there; nothing of it stays after the uninstall."""
    lab = nodes_cli("nvidia-dra", FAULTED)
    assert lab.returncode == 0, lab.stderr[-2000:]
    found = json.loads(lab.stdout.splitlines()[-1])
    extra_vars = {"lab_nvidia_dra_chart": found["chart"], "lab_helm": found["helm"]}
    nvidia_dra_runs(fleet, extra_vars)
    devices = dra_devices(nodes, FAULTED, NVIDIA_DRA_DRIVER)
    assert sorted(attributes["uuid"] for attributes in devices.values()) == sorted(h100_uuids()), devices
    # Only node 2 carries the label that puts NVIDIA's kubelet plugin on a node.
    assert dra_slices(nodes, DAEMON_NODE, NVIDIA_DRA_DRIVER) == []
    # The validation's pod on a claim of NVIDIA's class sees exactly its allocated GPU, and
    # the doctor judges the node as NVIDIA's driver's (not as a device plugin node).
    validated_through_dra(fleet, NVIDIA_DRA_DRIVER)

    nvidia_dra_runs(fleet, {**extra_vars, "device_plugin_state": "absent"})
    assert dra_slices(nodes, FAULTED, NVIDIA_DRA_DRIVER) == []
    classes = [c["metadata"]["name"] for c in nodes.get("deviceclasses")["items"]]
    assert not [c for c in classes if c.endswith("nvidia.com")], classes
    left = on_faulted(
        "ansible.builtin.shell",
        "ls -d /var/lib/kubelet/plugins_registry/gpu.nvidia.com* /var/lib/kubelet/plugins/gpu.nvidia.com "
        "2>/dev/null; ls /var/run/cdi; true",
    )["stdout"].split()
    assert left == ["nvidia.yaml"], left


def unschedulable(nodes, pod):
    """The scheduler's messages while POD is not scheduled."""
    conditions = nodes.get("pod", pod)["status"].get("conditions") or []
    return [c["message"] for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"]


def test_dra_serves_the_node_claims_and_unchanged_gpu_pods_through_restarts_and_a_lost_gpu(
    nodes, gpu_nodes, fleet
):
    """Node 2 (containerd 1.7) moves from gpuops's device plugin to DRA; a claim asking for
    80 GB and an unchanged nvidia.com/gpu pod each see exactly their GPU through CDI, one
    asking for 200 GiB stays pending with the scheduler's reason; a shared claim's pods and
    two half-memory claims each share one GPU; kubelet and plugin restarts keep prepared
    claims; a lost GPU and an XID reach the pod's status and the slice, and both recover; the
    uninstall leaves nothing of the driver behind; node 1's containerd 1.6 is refused, and so
    is a move straight to NVIDIA's driver while our DeviceClass serves nvidia.com/gpu pods.
    Then NVIDIA's DRA driver serves node 2 through device_plugin_mode nvidia_dra, and goes
    again."""
    refused_without_cdi(fleet)
    devices = move_to_dra(nodes, fleet)
    refused_a_second_gpu_class(fleet)
    validated_through_dra(fleet)
    pods = ["dra-80g", "dra-unchanged", "dra-200g", "dra-after"]
    sharing = ["dra-shared-a", "dra-shared-b", "dra-half-a", "dra-half-b"]
    templates = [
        claim_template("gpu-80g", "80G"),
        claim_template("gpu-200g", "200Gi"),
        claim_template("gpu-half", consume="40G"),
    ]
    try:
        for template in templates:
            nodes.kubectl("apply", "-f", "-", stdin=json.dumps(template))
        dra_pod(nodes, "dra-80g", FAULTED, claim_template="gpu-80g")
        dra_pod(nodes, "dra-unchanged", FAULTED, gpu_limit=True)
        dra_pod(nodes, "dra-200g", FAULTED, claim_template="gpu-200g")

        pod, seen = running_query(nodes, "dra-80g")
        claim, device = allocated_device(nodes, pod)
        assert seen["uuids"] == [devices[device]["uuid"]], (seen, device)
        unchanged, seen_unchanged = running_query(nodes, "dra-unchanged")
        unchanged_claim, unchanged_device = allocated_device(nodes, unchanged)
        assert seen_unchanged["uuids"] == [devices[unchanged_device]["uuid"]], seen_unchanged
        assert unchanged_device != device
        (reason,) = nodes.wait("pod dra-200g unschedulable", lambda: unschedulable(nodes, "dra-200g"), 60)
        assert "cannot allocate all claims" in reason, reason

        shared_on_the_node(nodes, devices, (device, unchanged_device))
        nodes.kubectl("delete", "pod", *sharing, "--wait=true")
        nodes.kubectl("delete", "resourceclaim", "shared-gpu", "--wait=true")

        restart_rounds(nodes)
        uids = [claim["metadata"]["uid"], unchanged_claim["metadata"]["uid"]]
        assert checkpointed_claims() == dict.fromkeys(uids, "completed")
        for name in ("dra-80g", "dra-unchanged"):
            status = nodes.get("pod", name)["status"]
            assert status["phase"] == "Running" and status["containerStatuses"][0]["restartCount"] == 0, (
                status
            )
        dra_pod(nodes, "dra-after", FAULTED, claim_template="gpu-80g")
        _pod, seen_after = running_query(nodes, "dra-after")
        assert len(seen_after["uuids"]) == 1, seen_after
        assert seen_after["uuids"][0] not in seen["uuids"] + seen_unchanged["uuids"], seen_after

        lose_and_recover(nodes, "dra-80g", device)
        xid_rounds(nodes, "dra-80g", device)
    finally:
        nodes.kubectl("delete", "pod", *pods, *sharing, "--ignore-not-found", "--wait=true", check=False)
        nodes.kubectl("delete", "resourceclaim", "shared-gpu", "--ignore-not-found", check=False)
        for template in templates:
            nodes.kubectl(
                "delete", "resourceclaimtemplate", template["metadata"]["name"], "--ignore-not-found"
            )
    # Unprepared: no claim left in the checkpoint, no claim's CDI spec.
    nodes.wait("claims unprepared", lambda: checkpointed_claims() == {}, 60)
    specs = on_faulted("ansible.builtin.shell", "ls /var/run/cdi")["stdout"].split()
    assert specs == ["nvidia.yaml"], specs
    uninstall_dra(nodes, fleet)
    nvidia_dra_serves(nodes, fleet)
    # Back as lab_nodes_gpu.yml left it (gpuops's device plugin, CDI as provisioned): the
    # tests after this one start from there.
    extra_vars = {"lab_daemon_nodes": [FAULTED], "lab_docker_nodes": []}
    playbook_changes(GPU_PLAYBOOK, extra_vars, fleet, hosts=(FAULTED,))


UPGRADED = "560.35.03"
HOSTNAME_IN = {"key": "kubernetes.io/hostname", "operator": "In", "values": CONTAINERD_NODES}
ON_CONTAINERD_NODES = {"nodeSelectorTerms": [{"matchExpressions": [HOSTNAME_IN]}]}
ONE_GPU = {"limits": {"nvidia.com/gpu": 1}}
GPU_APP_CONTAINER = nvml_query_container(command=["sleep", "3600"], resources=ONE_GPU)
ROLLING_APP = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "rolling-gpu-app", "namespace": "default"},
    "spec": {
        "replicas": len(CONTAINERD_NODES),
        "selector": {"matchLabels": {"app": "rolling-gpu-app"}},
        "template": {
            "metadata": {"labels": {"app": "rolling-gpu-app"}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "runtimeClassName": "nvidia",
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "affinity": {
                    # One replica on each containerd node, never two on one.
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": ON_CONTAINERD_NODES},
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "labelSelector": {"matchLabels": {"app": "rolling-gpu-app"}},
                                "topologyKey": "kubernetes.io/hostname",
                            }
                        ]
                    },
                },
                "containers": [GPU_APP_CONTAINER],
                "volumes": [PROFILE_VOLUME],
            },
        },
    },
}


def cluster_sample(nodes):
    """(cordoned nodes, nodes with a running GPU app pod), from the API server now."""
    cordoned = {n["metadata"]["name"] for n in nodes.get("nodes")["items"] if n["spec"].get("unschedulable")}
    pods = nodes.get("pods", "-l", "app=rolling-gpu-app")["items"]
    running = {p["spec"].get("nodeName") for p in pods if p["status"].get("phase") == "Running"}
    return frozenset(cordoned), frozenset(running)


def upgrade_containerd_nodes(fleet):
    """playbooks/upgrade_driver.yml (serial 1) on the containerd nodes, with make site's
    settings (inventories/lab: the validation pod's image and checks); changed tasks."""
    rc, tasks = playbook_on("upgrade_driver.yml", CONTAINERD_NODES, fleet, driver_upgrade_version=UPGRADED)
    results = [(name, host, result) for name, hosts in tasks for host, result in hosts.items()]
    assert rc == 0, [(name, host, r.get("msg")) for name, host, r in results if r.get("failed")]
    return [(host, name) for name, host, result in results if result.get("changed")]


def test_a_rolling_driver_upgrade_keeps_a_gpu_pod_running_on_the_other_node(nodes, gpu_nodes, fleet):
    nodes.kubectl("apply", "-f", "-", stdin=json.dumps(ROLLING_APP))
    try:
        nodes.wait(
            "a GPU app pod running on each containerd node",
            lambda: cluster_sample(nodes)[1] == set(CONTAINERD_NODES),
            120,
        )
        samples, done = [], threading.Event()

        def watch():
            while not done.is_set():
                samples.append(cluster_sample(nodes))
                time.sleep(0.5)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            changed = upgrade_containerd_nodes(fleet)
        finally:
            done.set()
            watcher.join(30)
        # Node by node: each was cordoned on its own, and all the while the GPU app ran on
        # the other one. The CDI specification was regenerated for the new driver on each.
        cordoned = [c for c, _running in samples if c]
        assert {frozenset([n]) for n in CONTAINERD_NODES} <= set(cordoned), [sorted(c) for c in set(cordoned)]
        assert all(len(c) == 1 for c in cordoned), [sorted(c) for c in set(cordoned)]
        for c, running in samples:
            for node in c:
                (other,) = set(CONTAINERD_NODES) - {node}
                assert other in running, (c, running)
        regenerated = "gpuops.k8s.driver_upgrade : Regenerate the CDI specification for the new driver"
        assert {host for host, task in changed if task == regenerated} == set(CONTAINERD_NODES), changed
        rc, hosts = ansible("--limit", ",".join(CONTAINERD_NODES), "-m", "ansible.builtin.command", "-a",
                            "dpkg-query -W -f ${Version} gpuops-lab-driver")  # fmt: skip
        assert rc == 0 and {h: r["stdout"] for h, r in hosts.items()} == dict.fromkeys(
            CONTAINERD_NODES, UPGRADED + "-1"
        )
        assert not any(n["spec"].get("unschedulable") for n in nodes.get("nodes")["items"])
        # Done is done: a second run finds each node at the version and changes nothing.
        assert upgrade_containerd_nodes(fleet) == []
    finally:
        nodes.kubectl("delete", "deployment", "rolling-gpu-app", "--ignore-not-found", "--wait=true")


NVIDIA_PLUGIN_TASK = "gpuops.k8s.device_plugin : Apply NVIDIA's device plugin DaemonSet"
STOP_DAEMON_TASK = "gpuops.k8s.device_plugin : Stop the gpuops daemon where another plugin mode serves now"
REMOVE_NVIDIA_PLUGIN = "gpuops.k8s.device_plugin : Remove NVIDIA's device plugin DaemonSet"


def nvidia_plugin_pods(nodes):
    return nodes.get("pods", "-n", "kube-system", "-l", "name=nvidia-device-plugin-ds")["items"]


def managed_profile(provider):
    """The example inventory's settings for a managed cluster (docs/managed-clusters.md)
    that a lab node takes as they are: all but how Ansible reaches the nodes and the API."""
    path = ROOT / "inventories" / "examples" / provider / "group_vars" / "gpu_nodes.yml"
    settings = yaml.safe_load(path.read_text())
    return {k: v for k, v in settings.items() if not (k.startswith("ansible_") or k.endswith("_kubeconfig"))}


def test_nvidias_daemonset_serves_a_node_in_place_of_the_daemon(nodes, gpu_nodes, fleet):
    # A managed cluster's profile on a node whose "image" brings the driver, the toolkit and
    # containerd's nvidia runtime (the converged node 2): EKS's, from its example inventory
    # (phases driver, toolkit and runtime left out, device_plugin_mode nvidia, the doctor
    # expecting everything). The role stops gpuops's daemon there and applies NVIDIA's
    # DaemonSet. Its image is NVIDIA's plugin built from its Go source (lab/kube/images.sh),
    # in the node's containerd under NVIDIA's name; the real kubelet gets the node's GPUs
    # through it. Last before the uninstall, which takes it away with the rest (the faults
    # above need gpuops's daemon here).
    profile = managed_profile("eks")
    assert profile["gpuops_site_skip"] == ["driver", "toolkit", "runtime"], profile
    assert profile["device_plugin_mode"] == "nvidia" and profile["gpu_doctor_skip"] == [], profile
    # What the lab still says: a container has no kernel module of its own (as make site);
    # labels and addons stay out (make site runs them; their taint would keep the other
    # tests' pods, which tolerate none, off the node), so the doctor must not expect the
    # labels either (it found "GPU labels or taints are not current" otherwise).
    lab = {
        "gpuops_site_skip": [*profile["gpuops_site_skip"], "labels", "addons"],
        "gpu_doctor_skip": ["driver_module", "labels"],
    }
    rc, tasks = playbook_on("site.yml", [FAULTED], fleet, **{**profile, **lab})
    results = dict(tasks)
    assert rc == 0, [(n, h.get(FAULTED, {}).get("msg")) for n, h in tasks if h.get(FAULTED, {}).get("failed")]
    # The image's phases did not run; the doctor, expecting everything, found nothing.
    ran = {
        name.split(" : ")[0]
        for name, hosts in tasks
        if not hosts.get(FAULTED, {"skipped": True}).get("skipped")
    }
    image_roles = {
        "gpuops.k8s.nvidia_driver",
        "gpuops.k8s.nvidia_container_toolkit",
        "gpuops.k8s.container_runtime",
    }
    assert not ran & image_roles, ran
    doctor = results["gpuops.k8s.gpu_doctor : Diagnose the node"][FAULTED]["ansible_facts"]
    assert doctor["gpu_doctor_findings"] == [], doctor["gpu_doctor_findings"]
    assert results[STOP_DAEMON_TASK][FAULTED]["changed"], results[STOP_DAEMON_TASK]
    assert results[NVIDIA_PLUGIN_TASK][FAULTED]["changed"], results[NVIDIA_PLUGIN_TASK]
    (pod,) = nvidia_plugin_pods(nodes)
    assert pod["spec"]["nodeName"] == FAULTED and pod["status"]["phase"] == "Running", pod["status"]
    assert pod["spec"]["containers"][0]["image"].startswith("nvcr.io/nvidia/k8s-device-plugin:v"), pod
    state = on_faulted("ansible.builtin.shell", "systemctl is-active gpuops-device-plugin || true")
    assert state["stdout"] == "inactive", state
    # The node's validation, in the same run: 8 allocatable, and the test pod saw through
    # NVML exactly the GPU the kubelet gave it from NVIDIA's plugin.
    result = results["gpuops.k8s.gpu_validation : Record this node's result"][FAULTED]
    result = result["ansible_facts"]["gpu_validation_result"]
    assert result["passed"] and result["allocatable"] == 8, result
    assert result["pod"]["devices"]["result"] == "match", result["pod"]
    assert result["pod"]["devices"]["seen"][0] in h100_uuids(), result["pod"]


# --- last: playbooks/uninstall.yml gives each node back as it was ------------------------


def node_files(node, *paths):
    """{path: its text, or None} on NODE (over SSH, with become)."""
    script = "; ".join("echo '== %s'; cat %s 2>/dev/null || echo '(absent)'" % (p, p) for p in paths)
    rc, hosts = ansible("--limit", node, "-m", "ansible.builtin.shell", "-a", script)
    assert rc == 0, hosts
    texts, current = {}, None
    for line in hosts[node]["stdout"].split("\n"):
        if line.startswith("== ") and line[3:] in paths:
            current = line[3:]
            texts[current] = []
        else:
            texts[current].append(line)
    return {p: (None if t == ["(absent)"] else "\n".join(t)) for p, t in texts.items()}


def test_uninstall_gives_the_nodes_back_as_they_were(nodes, gpu_nodes, fleet):
    # The real playbook, on the same inventory and make site's (inventories/lab, last: node
    # 2 serves through NVIDIA's DaemonSet, and node 1, first in the play, through gpuops's
    # daemon); the cluster objects it would remove were made by this test, not by the roles.
    uninstall = ROOT / "playbooks" / "uninstall.yml"
    skip = {"gpuops_site_skip": ["addons", "labels"]}
    site_settings = ROOT / "inventories" / "lab"
    first = playbook_changes(uninstall, skip, fleet, site_settings)
    assert all(first[name] for name in EXPECTED), first
    assert REMOVE_NVIDIA_PLUGIN in first[FAULTED], first[FAULTED]
    assert playbook_changes(uninstall, skip, fleet, site_settings) == {name: [] for name in EXPECTED}
    # The DaemonSet is gone at once; its pod after its grace period.
    nodes.wait("NVIDIA's plugin pod gone", lambda: not nvidia_plugin_pods(nodes), 60)
    assert nodes.kubectl(
        "get", "daemonset", "-n", "kube-system", "nvidia-device-plugin-daemonset", check=False
    ).returncode

    # Each node's own containerd configuration, exactly as its provisioning wrote it.
    provisioned = provisioned_containerd_config()

    for name in CONTAINERD_NODES:
        files = node_files(name, "/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml")
        kept = files["/etc/containerd/config.toml"]
        # Every setting as provisioned, and every line of it (its comments included). An
        # empty [...cri".containerd] header that the in-place edit made stays behind on 1.6:
        # the same TOML, one table header more (noted in issue 16).
        assert tomllib.loads(kept) == tomllib.loads(provisioned), name
        assert [line for line in provisioned.splitlines() if line not in kept.splitlines()] == [], name
        assert files["/etc/containerd/conf.d/99-nvidia.toml"] is None, name
    rc, hosts = ansible(
        "-m",
        "ansible.builtin.shell",
        "-a",
        "dpkg-query -W -f '${Package} ${Status}\\n' 'nvidia-*' 2>/dev/null | grep ' installed$';"
        " ls /etc/apt/sources.list.d/ | grep -i nvidia;"
        " systemctl list-unit-files 'gpuops-*' --no-legend | cut -d' ' -f1;"
        " ls -d /opt/gpuops-device-plugin /etc/gpuops-device-plugin 2>/dev/null;"
        " ls /var/lib/kubelet/device-plugins/ | grep '^nvidia-';"
        " dpkg-query -W -f '${Version}' gpuops-lab-driver",
    )
    assert rc == 0, hosts
    for name, result in hosts.items():
        # No toolkit, its source, the plugin's service and files or the drift guard; the driver stays,
        # and so does the repository nvidia_driver declared for it.
        # The containerd nodes run the driver the rolling upgrade put there.
        driver = UPGRADED + "-1" if name in CONTAINERD_NODES else "550.163.01-1"
        assert result["stdout"].splitlines() == ["gpuops-nvidia-driver.list", driver], (
            name,
            result["stdout"],
        )
    docker = node_files(DOCKER_NODE, "/etc/docker/daemon.json")["/etc/docker/daemon.json"]
    assert docker is None or "nvidia" not in docker, docker
    # dockerd was restarted for it: the running daemon no longer offers the nvidia runtime.
    # (Plain `docker info`: Ansible would template a Go template given to --format.)
    info = on_node(DOCKER_NODE, "ansible.builtin.command", "docker info")["stdout"].splitlines()
    runtimes = [line.split(":", 1)[1].split() for line in info if line.strip().startswith("Runtimes:")]
    assert len(runtimes) == 1 and "runc" in runtimes[0] and "nvidia" not in runtimes[0], runtimes
    # The nodes still run pods, on their own runtime again.
    probe_each_node(nodes)


def test_no_kubelet_logged_a_deprecation(nodes):
    # After every run above: the lab's kubelet configuration and what our roles put on the
    # nodes (services, pods, runtime settings) use nothing Kubernetes 1.37 deprecates. (The
    # API server's deprecation warnings to our clients are in DEPRECATIONS, below.)
    for node in EXPECTED:
        journal = on_node(node, "ansible.builtin.command", "journalctl -u kubelet --no-pager -o cat")
        assert [line for line in journal["stdout"].splitlines() if DEPRECATED.search(line)] == [], node


def test_no_ansible_run_printed_a_deprecation_warning():
    # Every playbook and ad-hoc run above, on the dev environment's ansible-core line:
    # site.yml's node phases, validate.yml, upgrade_driver.yml, doctor runs, uninstall.yml;
    # Ansible's own deprecations and the API server's warnings to the roles' requests.
    assert DEPRECATIONS == []
