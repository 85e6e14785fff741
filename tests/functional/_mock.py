# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Helpers for tests that run modules against NVIDIA's mock NVML (lab/mocknvml/build.sh)
or, for the tests that need MIG instances, gpuops's MIG stand-in (lab/mig-nvml-standin).

The library is selected per process by environment: LD_LIBRARY_PATH finds its
libnvidia-ml.so.1, MOCK_NVML_CONFIG names the profile (lab/profiles/).
"""

import json
import subprocess

from conftest import REPO, VENV_BIN, process_env

PROFILES = REPO / "lab" / "profiles"
BUILD_SH = REPO / "lab" / "mocknvml" / "build.sh"
MIG_STANDIN_SH = REPO / "lab" / "mig-nvml-standin" / "build.sh"


class MockBuild:
    """What build.sh said: rc, the library directory (rc 0) or its error (rc != 0)."""

    def __init__(self, proc):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        lines = [line for line in proc.stdout.splitlines() if line.strip()]
        self.lib_dir = lines[-1].strip() if self.rc == 0 and lines else None


def build_mock(script=BUILD_SH, timeout=1800):
    """Run a build script (it reuses a library built before) and return a MockBuild."""
    proc = subprocess.run(["bash", str(script)], check=False, capture_output=True, text=True, timeout=timeout)
    return MockBuild(proc)


def mock_env(lib_dir, profile=None, **extra):
    """Environment selecting the mock library and, when given, a profile from lab/profiles."""
    env = {"LD_LIBRARY_PATH": str(lib_dir)}
    if profile is not None:
        env["MOCK_NVML_CONFIG"] = str(PROFILES / profile)
    env.update({key: str(value) for key, value in extra.items()})
    return env


def run_python(code, env=None, timeout=120):
    """Run code with the venv's Python (nvidia-ml-py) in env; return its stdout as JSON."""
    proc = subprocess.run(
        [str(VENV_BIN / "python"), "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=process_env(env),
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise AssertionError("python exited %d:\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr))
    return json.loads(proc.stdout)
