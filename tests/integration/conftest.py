# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab cluster (lab/cluster.py) as a session fixture, and kubectl against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "lab" / "cluster.py"


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

    def control(self, action, component):
        """restart, stop or start one of the lab's components."""
        proc = cluster(action, component, timeout=120)
        assert proc.returncode == 0, proc.stderr

    def running(self, component):
        rows = cluster("status", timeout=60).stdout.splitlines()
        return any(row.split()[:1] == [component] and row.split()[1] != "-" for row in rows)


@pytest.fixture(scope="session")
def lab():
    """A Ready lab cluster: the one already up, or one brought up (and down) for the session."""
    if os.geteuid() != 0:
        pytest.skip("the lab cluster runs a kubelet and containerd: integration tests need root")
    was_up = cluster("status", timeout=60).returncode == 0
    if not was_up:
        proc = cluster("up")
        assert proc.returncode == 0, "lab/cluster.py up failed:\n%s" % proc.stderr[-6000:]
    exports = dict(line.removeprefix("export ").split("=", 1) for line in cluster("env").stdout.splitlines())
    yield Lab(exports)
    if not was_up:
        proc = cluster("down", timeout=300)
        assert proc.returncode == 0, "lab/cluster.py down failed:\n%s" % proc.stderr[-6000:]
