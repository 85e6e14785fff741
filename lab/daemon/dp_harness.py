# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run the daemon as a real process over NVIDIA's mock NVML, next to a kubelet stand-in.

Faults are injected the way NVIDIA's mock takes them at runtime: an overrides file
(MOCK_NVML_OVERRIDES) that it deep-merges over the profile and re-reads every TTL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DAEMON_DIR = ROOT / "roles" / "device_plugin" / "files" / "gpuops-device-plugin"
PROFILES = ROOT / "lab" / "profiles"
BUILD_SH = ROOT / "lab" / "mocknvml" / "build.sh"
MIG_STANDIN_SH = ROOT / "lab" / "mig-nvml-standin" / "build.sh"
# How often the mock re-reads the overrides file (its default is 1 s).
OVERRIDES_TTL = "100ms"

# Time-slicing, every GPU twice: what lab/real-gpu/record.py sends the daemon on a real GPU
# with SIGHUP, and tests/daemon its answers over the mock.
TWO_REPLICAS_CONFIG = """\
version: v1
sharing:
  timeSlicing:
    resources:
      - name: nvidia.com/gpu
        replicas: 2
"""

H100_UUIDS = [
    "GPU-20330507-055a-40f9-a4e7-4b442a53b091",
    "GPU-c4e4ce3c-8667-4c1d-904a-8de172a33a6c",
    "GPU-1fa45ea5-9859-4d4a-9c71-052a7270678f",
    "GPU-d48e567d-c0eb-4cb8-8b5c-c48b95729130",
    "GPU-cc33af16-adbe-4d8e-ba06-dd998327d5ac",
    "GPU-a3e6a76e-c9fe-4ed1-8b23-2b89d7da1a55",
    "GPU-b2f2d9c4-ad92-4331-9707-569afaf0106b",
    "GPU-ecbb4aad-1e16-4d09-ac62-92f8286c7183",
]


def _build(script):
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False, timeout=1800)
    if proc.returncode != 0:
        # Never a skip: a test that needs the library fails with the build's own message.
        raise RuntimeError("%s failed (%d):\n%s" % (script.relative_to(ROOT), proc.returncode, proc.stderr))
    return proc.stdout.strip().splitlines()[-1]


def build_mock():
    """NVIDIA's mock NVML (lab/mocknvml/build.sh): the directory of its libnvidia-ml.so.1."""
    return _build(BUILD_SH)


def build_mig_standin():
    """gpuops's MIG stand-in (lab/mig-nvml-standin), for MIG instances only."""
    return _build(MIG_STANDIN_SH)


class MockFaults:
    """Faults for NVIDIA's mock NVML, written to its runtime overrides file.

    Names as the tests use them: `xid-<index>-<code>` (the GPU trips into
    ecc_uncorrectable and delivers that XID once through the NVML event set, on its next
    guarded device call) and `lost-<index>` (the GPU answers NVML_ERROR_GPU_IS_LOST from
    its next guarded call until the fault is cleared).
    """

    def __init__(self, path):
        self.path = Path(path)
        self.faults = {}

    def inject(self, name):
        kind, index, *rest = name.split("-")
        if kind == "xid" and len(rest) == 1:
            failure = {"mode": "ecc_uncorrectable", "xid": {"code": int(rest[0])}}
        elif kind == "lost" and not rest:
            failure = {"mode": "lost"}
        else:
            raise ValueError("fault %r: expected xid-<gpu index>-<code> or lost-<gpu index>" % name)
        self.faults[int(index)] = failure
        self._write()

    def clear(self, name=None):
        """Clear one fault (by the name it was injected with), or all of them."""
        if name is None:
            self.faults.clear()
        else:
            self.faults.pop(int(name.split("-")[1]), None)
        self._write()

    def _write(self):
        doc = {"version": 1, "devices": {str(i): {"failure": f} for i, f in sorted(self.faults.items())}}
        scratch = self.path.with_name(self.path.name + ".tmp")
        scratch.write_text(json.dumps(doc, indent=2) + "\n")  # JSON is YAML: no yaml import here
        os.replace(scratch, self.path)


def short_tempdir(prefix):
    # Unix socket paths are limited to 107 bytes: pytest's tmp_path is too deep.
    return tempfile.mkdtemp(prefix=prefix, dir="/tmp")


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Daemon:
    """The daemon as `python -m gpuops_device_plugin`, its log in a file."""

    def __init__(
        self, lib_dir, plugin_dir, *, profile="h100-8x-nvswitch.yaml", config=None, args=(), env=None
    ):
        self.plugin_dir = plugin_dir
        self.control_dir = short_tempdir("mocknvml-ctl-")
        self.faults = MockFaults(os.path.join(self.control_dir, "overrides.yaml"))
        self.metrics_port = free_port()
        self.log_path = os.path.join(self.control_dir, "daemon.log")
        self.command = [
            sys.executable,
            "-m",
            "gpuops_device_plugin",
            "--device-plugin-path",
            plugin_dir,
            "--metrics-address",
            "127.0.0.1:%d" % self.metrics_port,
            *(["--config-file", str(config)] if config else []),
            *args,
        ]
        self.env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("MOCK_NVML", "MOCK_MIG", "DP_", "GPUOPS_")) and key != "LD_LIBRARY_PATH"
        }
        self.env.update(
            PYTHONPATH=str(DAEMON_DIR),
            LD_LIBRARY_PATH=str(lib_dir),
            MOCK_NVML_OVERRIDES=str(self.faults.path),
            MOCK_NVML_OVERRIDES_TTL=OVERRIDES_TTL,
            PYTHONUNBUFFERED="1",
        )
        if profile:
            self.env["MOCK_NVML_CONFIG"] = str(PROFILES / profile)
        self.env.update(env or {})
        self.proc = None

    def start(self):
        self.log = open(self.log_path, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.command, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        return self

    def run(self, timeout=60):
        """Run to completion (for configurations that must not start); return (rc, log)."""
        self.start()
        rc = self.proc.wait(timeout=timeout)
        self.log.close()
        return rc, self.text()

    def text(self):
        return Path(self.log_path).read_text()

    def wait_log(self, needle, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.text():
                return
            if self.proc.poll() is not None:
                raise AssertionError("daemon exited %s:\n%s" % (self.proc.returncode, self.text()))
            time.sleep(0.05)
        raise TimeoutError("%r not in the daemon's log:\n%s" % (needle, self.text()))

    def inject(self, name):
        """A fault on one GPU (MockFaults): xid-<gpu>-<code>, lost-<gpu>."""
        self.faults.inject(name)

    def clear(self, name):
        self.faults.clear(name)

    def signal(self, signum):
        self.proc.send_signal(signum)

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.metrics_port, timeout=5) as reply:
            return reply.read().decode()

    def stop(self, timeout=15):
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.control_dir, ignore_errors=True)
