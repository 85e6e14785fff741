# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab cluster (lab/cluster.py) as a session fixture, and kubectl against it."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dp_harness import build_mock

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "lab" / "cluster.py"
VENV_BIN = Path(sys.executable).parent
PLAYBOOKS = Path(__file__).resolve().parent / "playbooks"
# The single-host lab's inventory (the host's kubelet is the GPU node); make site's
# inventories/lab is the lab's Kubernetes nodes.
SINGLE_HOST = Path(__file__).resolve().parent / "inventories" / "single-host"
NODES = ROOT / "lab" / "nodes.py"
# Labels and taints with these prefixes are the kubelet's and the node controller's own
# (kubernetes.io/hostname, node.kubernetes.io/not-ready, ...); anything else on the lab
# Node was put there by a playbook or a test.
KUBELET_PREFIXES = ("kubernetes.io/", "beta.kubernetes.io/", "node.kubernetes.io/")


def _kubelet_owns(key):
    return key.startswith(KUBELET_PREFIXES)


def cluster(*args, timeout=3600):
    return subprocess.run(
        [sys.executable, str(CLUSTER), *args], capture_output=True, text=True, check=False, timeout=timeout
    )


class Lab:
    def __init__(self, environment):
        self.kubeconfig = environment["KUBECONFIG"]
        self.kubectl_bin = str(Path(environment["PATH"].split(":")[0]) / "kubectl")
        self.node = environment["GPUOPS_LAB_NODE"]

    def kubectl(self, *args, check=True, stdin=None):
        proc = subprocess.run(
            [self.kubectl_bin, "--kubeconfig", self.kubeconfig, *args],
            capture_output=True,
            text=True,
            input=stdin,
            check=False,
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                "kubectl %s failed (%d): %s" % (" ".join(args), proc.returncode, proc.stderr)
            )
        return proc

    def get(self, *args):
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def node_object(self):
        return self.get("node", self.node)

    def wait(self, what, check, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = check()
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError("timed out after %s s waiting for %s" % (timeout, what))

    def playbook(self, name, extra_vars=None, env=None, check=False, diff=False):
        """Run playbooks/NAME with the real ansible-playbook; return {task name: localhost result}."""
        command = [str(VENV_BIN / "ansible-playbook"), str(PLAYBOOKS / name)]
        variables = {"lab_kubeconfig": self.kubeconfig, "lab_node": self.node}
        variables.update(extra_vars or {})
        variables["ansible_python_interpreter"] = sys.executable
        command += ["-e", json.dumps(variables)]
        command += (["--check"] if check else []) + (["--diff"] if diff else [])
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOCK_NVML"))}
        full_env.update(
            ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
            ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
            ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
            ANSIBLE_LOCALHOST_WARNING="false",
            ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
        )
        full_env.update(env or {})
        proc = subprocess.run(command, capture_output=True, text=True, env=full_env, check=False, timeout=600)
        try:
            plays = json.loads(proc.stdout)["plays"]
        except ValueError as exc:
            raise AssertionError(
                "no JSON from ansible-playbook (rc %d):\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr)
            ) from exc
        results = {"_rc": proc.returncode}
        for play in plays:
            for task in play["tasks"]:
                # Role tasks come as "ROLE : NAME"; key them by NAME. A check-mode stand-in
                # carries its real task's name: the one of the two that ran wins.
                name, result = task["task"]["name"].rpartition(" : ")[2], task["hosts"].get("localhost", {})
                if not (result.get("skipped") and name in results):
                    results[name] = result
        return results

    def inventory_playbook(self, playbook, extra_vars=None, json_output=False, args=()):
        """ansible-playbook -i SINGLE_HOST PLAYBOOK (a path from the repository root), as a
        user runs it; the CompletedProcess, its stdout JSON with json_output."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("ANSIBLE_", "MOCK_NVML", "LD_LIBRARY_PATH"))
        }
        if json_output:
            env.update(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json")
        variables = dict(extra_vars or {}, ansible_python_interpreter=sys.executable)
        command = [str(VENV_BIN / "ansible-playbook"), "-i", str(SINGLE_HOST), str(playbook)]
        return subprocess.run(
            [*command, "-e", json.dumps(variables), *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )

    def taints(self):
        return self.node_object()["spec"].get("taints", [])

    def set_taints(self, taints):
        """Replace the node's taints (a merge patch replaces the list whole)."""
        self.kubectl(
            "patch", "node", self.node, "--type=merge", "-p", json.dumps({"spec": {"taints": taints or None}})
        )

    def add_taint(self, taint):
        """Add TAINT unless the node has one with its key and effect (the API refuses a
        duplicate); return the taints as they were, for set_taints to put back."""
        before = self.taints()
        if not any((t["key"], t["effect"]) == (taint["key"], taint["effect"]) for t in before):
            self.set_taints([*before, taint])
        return before

    def reset_node(self):
        """Bring the Node back to what the kubelet registered: its own labels, no taints but
        the node controller's, no gpuops.k8s annotations, schedulable."""
        node = self.node_object()
        metadata = node["metadata"]
        labels = {key: None for key in metadata.get("labels", {}) if not _kubelet_owns(key)}
        annotations = {key: None for key in metadata.get("annotations", {}) if key.startswith("gpuops.k8s/")}
        taints = node["spec"].get("taints", [])
        kept = [t for t in taints if _kubelet_owns(t["key"])]
        patch = {"metadata": {}, "spec": {}}
        if labels:
            patch["metadata"]["labels"] = labels
        if annotations:
            patch["metadata"]["annotations"] = annotations
        if kept != taints:
            patch["spec"]["taints"] = kept or None
        if node["spec"].get("unschedulable"):
            patch["spec"]["unschedulable"] = None
        if patch != {"metadata": {}, "spec": {}}:
            self.kubectl("patch", "node", self.node, "--type=merge", "-p", json.dumps(patch))
        return patch

    def reset(self):
        """The lab as `make lab-up` leaves it, whatever ran against it before (`make site`,
        an earlier test session that was cut short): gpuops.k8s's cluster objects taken
        away by playbooks/uninstall.yml, as a user would, then the Node as the kubelet
        registered it, and the lab's own device plugin running."""
        proc = self.inventory_playbook("playbooks/uninstall.yml")
        assert proc.returncode == 0, "uninstall.yml failed:\n" + proc.stdout[-4000:] + proc.stderr[-2000:]
        self.remove_nvidia_plugin()
        self.reset_node()
        if not self.running("device-plugin"):
            self.control("start", "device-plugin")

    def remove_nvidia_plugin(self):
        """NVIDIA's device plugin DaemonSet, which make site applies for its node 2 (and a
        test may leave when it fails): cluster state that outlives the lab's nodes, and that
        would put a second plugin on the next node of that name."""
        self.kubectl(
            "delete",
            "daemonset",
            "-n",
            "kube-system",
            "nvidia-device-plugin-daemonset",
            "--ignore-not-found",
            "--wait=true",
        )

    def control(self, action, component):
        """restart, stop or start one of the lab's components."""
        proc = cluster(action, component, timeout=120)
        assert proc.returncode == 0, proc.stderr

    def running(self, component):
        rows = cluster("status", timeout=60).stdout.splitlines()
        return any(row.split()[:1] == [component] and row.split()[1] != "-" for row in rows)


class HostDriverLock:
    """The Makefile's HOST_DRIVER_LOCK, exclusively, for the test that installs a driver on this
    machine (test_driver_upgrade.py): make pytest's functional tests and molecule's nvidia_*
    scenarios hold it shared, since they must not meet that driver."""

    def __init__(self, path):
        self.path = path
        self.handle = None

    def acquire(self):
        if self.handle is not None:
            return
        handle = open(self.path, "a")  # noqa: SIM115 - held open until release()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("waiting for %s: make pytest or molecule's nvidia scenarios" % self.path, flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        self.handle = handle

    def release(self):
        if self.handle is not None:
            self.handle.close()  # closing the file releases its lock
            self.handle = None

    @contextlib.contextmanager
    def held(self):
        self.acquire()
        try:
            yield
        finally:
            self.release()


HOST_DRIVER = HostDriverLock(os.environ.get("HOST_DRIVER_LOCK", "/run/lock/gpuops-host-driver.lock"))


def pytest_collection_finish(session):
    """Take HOST_DRIVER_LOCK as soon as the session knows it will install a driver (make
    integration runs that module first), before the lanes beside it take the lock shared:
    they then wait the few minutes of that module, not it for them most of an hour."""
    if any(item.path.name == "test_driver_upgrade.py" for item in session.items):
        HOST_DRIVER.acquire()


def pytest_sessionfinish(session):
    HOST_DRIVER.release()


@pytest.fixture(scope="session")
def host_driver_lock():
    return HOST_DRIVER


@pytest.fixture(scope="session")
def lab():
    """A Ready lab cluster: the one already up, or one brought up (and down) for the session."""
    if os.geteuid() != 0:
        pytest.skip("the lab cluster runs a kubelet and containerd: integration tests need root")
    was_up = cluster("status", timeout=60).returncode == 0
    if not was_up:
        # With our device plugin on the H100 profile, as `make lab-up` runs it; tests that
        # run a plugin of their own stop this one for their module.
        proc = cluster("up", "--device-plugin", "gpuops")
        assert proc.returncode == 0, "lab/cluster.py up failed:\n%s" % proc.stderr[-6000:]
    # The Kubernetes nodes `make site` leaves, with what site.yml installed on them: the
    # suite runs on the host's node, and test_lab_nodes.py starts nodes of its own.
    proc = subprocess.run(
        [sys.executable, str(NODES), "down"], capture_output=True, text=True, check=False, timeout=600
    )
    assert proc.returncode == 0, "lab/nodes.py down failed:\n%s" % proc.stderr[-6000:]
    exports = dict(line.removeprefix("export ").split("=", 1) for line in cluster("env").stdout.splitlines())
    lab = Lab(exports)
    # Whatever ran against the lab before this session (`make site` keeps its labels, taints
    # and RuntimeClass; `make lab-down` keeps etcd) is taken away first.
    lab.reset()
    yield lab
    if not was_up:
        proc = cluster("down", timeout=300)
        assert proc.returncode == 0, "lab/cluster.py down failed:\n%s" % proc.stderr[-6000:]


@pytest.fixture(scope="module", autouse=True)
def lab_node_baseline(lab):
    """Each test module starts on the Node as the kubelet registered it, even when an
    earlier module failed before its own clean-up (one read; a patch only if needed)."""
    lab.reset_node()


@pytest.fixture(scope="session")
def mock_lib():
    """NVIDIA's mock NVML library's directory (lab/mocknvml/build.sh)."""
    return build_mock()


def pytest_terminal_summary(terminalreporter):
    """Each lab-node playbook run's wall time, in order: where the lab lane's minutes go."""
    lab_nodes = sys.modules.get("test_lab_nodes")
    times = getattr(lab_nodes, "PLAYBOOK_TIMES", [])
    if times:
        terminalreporter.section("lab node playbook runs (wall seconds; side by side ones overlap)")
        for run, seconds in times:
            terminalreporter.write_line("%7.1f  %s" % (seconds, run))
        terminalreporter.write_line("%7.1f  in all, %d runs" % (sum(s for _r, s in times), len(times)))
