# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/upgrade_driver.yml on the lab node: the lab's "driver" is a real Debian
package (lab/driver/build-repo.sh) installing NVIDIA's mock NVML and CUDA libraries under
the driver's version, device nodes and the mock GPUs' profile, served by apt from a
local repository this module builds. A job that does not finish stops the upgrade after the
cordon; the label keeps the failed step and the next run resumes there."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OLD, NEW = "550.163.01", "560.35.03"
REPO = Path("/var/lib/gpuops-lab/driver-repo")
SOURCE = Path("/etc/apt/sources.list.d/gpuops-lab-driver.list")
STATE = "nvidia.com/gpu-driver-upgrade-state"
FAILURE = "gpuops.k8s/driver-upgrade-failure"
DEFAULT_PROFILE = "h100-8x-nvswitch.yaml"

GPU_APP = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "upgrade-gpu-app", "namespace": "default"},
    "spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "upgrade-gpu-app"}},
        "template": {
            "metadata": {"labels": {"app": "upgrade-gpu-app"}},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [
                    {
                        "name": "app",
                        "image": "localhost/gpuops-lab/tools:1",
                        "imagePullPolicy": "Never",
                        "command": ["sleep", "3600"],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        },
    },
}


def job_pod(node):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "upgrade-long-job",
            "namespace": "default",
            "labels": {"gpuops-test/job": "true"},
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "job",
                    "image": "localhost/gpuops-lab/tools:1",
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                }
            ],
        },
    }


# apt and dpkg wait for each other's lock (another install on the machine, an unattended
# upgrade) instead of failing at once.
APT = ("apt-get", "-o", "DPkg::Lock::Timeout=300")


def sh(*argv):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=900)
    assert proc.returncode == 0, "%s failed: %s" % (" ".join(argv), proc.stderr[-2000:])
    return proc.stdout


def installed_driver():
    return sh("dpkg-query", "-W", "-f", "${Version}", "gpuops-lab-driver")


def apt_update_lab_source():
    sh(
        *APT, "update", "-qq",
        "-o", "Dir::Etc::sourcelist=%s" % SOURCE,
        "-o", "Dir::Etc::sourceparts=-",
        "-o", "APT::Get::List-Cleanup=0",
    )  # fmt: skip


@pytest.fixture(scope="module")
def lab_driver(lab, host_driver_lock):
    """The lab node running the packaged driver OLD, with a GPU app on it; HOST_DRIVER_LOCK
    held exclusively until the driver is purged again (conftest.py)."""
    with host_driver_lock.held():
        yield from _lab_driver(lab)


def _lab_driver(lab):
    # Not under pytest's private tmp: apt reads the repository as its own unprivileged user.
    repo = REPO
    shutil.rmtree(repo, ignore_errors=True)
    sh("bash", str(ROOT / "lab" / "driver" / "build-repo.sh"), str(repo), OLD, NEW)
    SOURCE.write_text("deb [trusted=yes] file:%s ./\n" % repo)
    try:
        apt_update_lab_source()
        sh(*APT, "install", "-y", "-qq", "--allow-downgrades", "gpuops-lab-driver=%s-1" % OLD)
        if not lab.running("device-plugin"):
            lab.control("start", "device-plugin")
        lab.control("profile", "/usr/share/gpuops-lab-driver/profile.yaml")
        lab.wait("8 GPUs allocatable", lambda: gpus_allocatable(lab) == 8, 30)
        lab.kubectl("apply", "-f", "-", stdin=json.dumps(GPU_APP))
        lab.wait("the GPU app running", lambda: app_pods(lab, "Running"), 60)
        yield lab
    finally:
        lab.kubectl("delete", "deployment", "upgrade-gpu-app", "--ignore-not-found", "--wait=true")
        lab.kubectl("delete", "pod", "upgrade-long-job", "--ignore-not-found", "--grace-period=1")
        lab.kubectl("uncordon", lab.node)
        lab.kubectl("label", "node", lab.node, STATE + "-")
        lab.kubectl("annotate", "node", lab.node, FAILURE + "-", "gpuops.k8s/driver-upgrade-cordoned-")
        subprocess.run([*APT, "purge", "-y", "-qq", "gpuops-lab-driver"], check=False, capture_output=True)
        # Purged, the driver is gone from the host again: no library, no device node.
        assert not Path("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").exists()
        assert not Path("/dev/nvidia0").exists()
        # Only now the lab's plugin back on its own profile: restarted after the package took
        # its device nodes, it checks none (there are none), as before this module. Restarted
        # before, it took their going for 8 lost GPUs, and the next module's healthy node
        # had none allocatable (seen once this module ran first in make integration).
        lab.control("profile", DEFAULT_PROFILE)
        SOURCE.unlink(missing_ok=True)
        for stale in Path("/var/lib/apt/lists").glob("*%s*" % str(repo).strip("/").replace("/", "_")):
            stale.unlink()
        shutil.rmtree(repo, ignore_errors=True)


def assert_driver_files(version):
    """The package behaves like a driver above the kernel: NVIDIA's mock libraries under
    the version's names where the driver's go, and its device nodes (major 195)."""
    lib = Path("/usr/lib/x86_64-linux-gnu")
    for name in ("libnvidia-ml", "libcuda"):
        assert (lib / ("%s.so.1" % name)).resolve() == lib / ("%s.so.%s" % (name, version))
    for index in range(8):
        node = os.stat("/dev/nvidia%d" % index)
        assert stat.S_ISCHR(node.st_mode) and (os.major(node.st_rdev), os.minor(node.st_rdev)) == (195, index)
    assert os.major(os.stat("/dev/nvidiactl").st_rdev) == 195


def gpus_allocatable(lab):
    return int(lab.node_object()["status"]["allocatable"].get("nvidia.com/gpu", "0"))


def app_pods(lab, phase=None):
    pods = lab.get("pods", "-n", "default", "-l", "app=upgrade-gpu-app")["items"]
    return [
        p["metadata"]["name"]
        for p in pods
        if (phase is None or p["status"].get("phase") == phase) and not p["metadata"].get("deletionTimestamp")
    ]


def upgrade(lab, extra=None, args=()):
    proc = lab.inventory_playbook(
        "playbooks/upgrade_driver.yml",
        dict(extra or {}, driver_upgrade_version=NEW),
        json_output=True,
        args=args,
    )
    try:
        report = json.loads(proc.stdout)
    except ValueError as exc:
        raise AssertionError("no JSON (rc %d): %s %s" % (proc.returncode, proc.stdout, proc.stderr)) from exc
    tasks = {}
    for play in report["plays"]:
        for task in play["tasks"]:
            name = task["task"]["name"].rpartition(" : ")[2]
            tasks.setdefault(name, []).append(task["hosts"].get("gpuops-lab", {}))
    return proc.returncode, report["stats"]["gpuops-lab"], tasks


def failures(tasks):
    """(task, message) of each task that failed on the node: what a failed run's assert shows."""
    return [
        (name, result.get("msg"))
        for name, results in tasks.items()
        for result in results
        if result.get("failed")
    ]


def ran(tasks, name):
    """How many times a task really ran (not skipped) on the node."""
    return sum(1 for result in tasks.get(name, []) if result and not result.get("skipped"))


def test_check_mode_predicts_the_upgrade_and_touches_nothing(lab_driver):
    lab = lab_driver
    rc, stats, tasks = upgrade(lab, args=["--check"])
    assert rc == 0 and stats["changed"] == 1, stats
    plan = tasks["Say what a real run would do"][0]["msg"]
    assert "%s to %s" % (OLD, NEW) in plan and plan.endswith("validation-required, uncordon-required"), plan
    node = lab.node_object()
    assert STATE not in node["metadata"].get("labels", {}) and not node["spec"].get("unschedulable")
    assert installed_driver() == OLD + "-1"


def test_failure_after_cordon_keeps_the_step_and_a_rerun_resumes(lab_driver):
    lab = lab_driver
    lab.kubectl("apply", "-f", "-", stdin=json.dumps(job_pod(lab.node)))
    lab.wait(
        "the long job running",
        lambda: lab.get("pod", "upgrade-long-job")["status"].get("phase") == "Running",
        60,
    )
    app_before = app_pods(lab, "Running")
    waiting = {
        "driver_upgrade_wait_for_pods_selector": "gpuops-test/job=true",
        "driver_upgrade_wait_for_pods_timeout": 6,
    }

    rc, _stats, tasks = upgrade(lab, waiting)
    assert rc != 0
    node = lab.node_object()
    assert node["metadata"]["labels"][STATE] == "wait-for-jobs-required"
    assert node["spec"].get("unschedulable") is True
    failure = node["metadata"]["annotations"][FAILURE]
    assert failure.startswith("wait-for-jobs-required:") and "default/upgrade-long-job" in failure, failure
    assert ran(tasks, "Cordon the node") == 1
    # Stopped before anything was deleted or installed.
    assert app_pods(lab, "Running") == app_before
    assert installed_driver() == OLD + "-1"

    lab.kubectl("delete", "pod", "upgrade-long-job", "--grace-period=1", "--wait=true")
    rc, stats, tasks = upgrade(lab, waiting)
    assert rc == 0, (stats, failures(tasks))
    # Resumed at the failed step: no second cordon, the rest done in order.
    assert ran(tasks, "Cordon the node") == 0
    assert ran(tasks, "Delete the GPU pods and wait until they are gone") == 1
    assert ran(tasks, "Install the lab driver package at the target version") == 1
    assert ran(tasks, "Check the validation pod passed") == 1
    assert ran(tasks, "Uncordon the node") == 1
    assert installed_driver() == NEW + "-1"
    assert_driver_files(NEW)
    node = lab.node_object()
    assert node["metadata"]["labels"][STATE] == "upgrade-done"
    assert not node["spec"].get("unschedulable")
    assert FAILURE not in node["metadata"].get("annotations", {})
    # The GPU app's pod was deleted, and its Deployment's new pod runs on the new driver.
    assert not set(app_before) & set(app_pods(lab))
    lab.wait("the GPU app running again", lambda: app_pods(lab, "Running"), 60)
    assert gpus_allocatable(lab) == 8

    rc, stats, _tasks = upgrade(lab, waiting)
    assert rc == 0 and stats["changed"] == 0, stats
