# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Wall time of gpu_info: the module alone (its process) and a whole `ansible` run.

A benchmark, not a test: it prints numbers and asserts nothing about speed. Each NVML
source is measured that exists here: NVIDIA's mock NVML with the 8-GPU H100 profile
(when lab/mocknvml/build.sh can build it), Debian's real libnvidia-ml1 without a
kernel driver, and no library at all.

    python bench/gpu_info.py [--runs 20]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("GPUOPS_VENV", REPO / ".venv"))
COLLECTIONS = REPO / ".build" / "collections"
MODULE = "ansible_collections.gpuops.k8s.plugins.modules.gpu_info"


def nvml_sources():
    sources = [("no libnvidia-ml (driver not installed)", {"LD_LIBRARY_PATH": tempfile.mkdtemp()})]
    debian = subprocess.run(
        ["bash", str(REPO / "lab/nvml/fetch-debian-nvml.sh")], capture_output=True, text=True, check=False
    )
    if debian.returncode == 0:
        sources.append(
            ("Debian libnvidia-ml1, no kernel driver", {"LD_LIBRARY_PATH": debian.stdout.split()[-1]})
        )
    mock = subprocess.run(
        ["bash", str(REPO / "lab/mocknvml/build.sh")], capture_output=True, text=True, check=False
    )
    profile = REPO / "lab/profiles/h100-8x-nvswitch.yaml"
    if mock.returncode == 0:
        env = {"LD_LIBRARY_PATH": mock.stdout.split()[-1], "MOCK_NVML_CONFIG": str(profile)}
        sources.insert(0, ("mock NVML, 8x H100 NVSwitch profile", env))
    else:
        print("mock NVML not measured: %s" % (mock.stderr.strip().splitlines() or ["?"])[-1])
    return sources


def timed(command, env, runs):
    samples = []
    for _run in range(runs):
        start = time.perf_counter()
        subprocess.run(command, env=env, capture_output=True, check=False)
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    opts = parser.parse_args()
    args_file = Path(tempfile.mkdtemp()) / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"require_nvml": False}}))
    print("gpu_info wall time, %d runs each (ms)" % opts.runs)
    print("%-42s %-22s %8s %8s" % ("NVML source", "how", "median", "p90"))
    for label, extra in nvml_sources():
        env = dict(
            os.environ, PYTHONPATH=str(COLLECTIONS), ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), **extra
        )
        python = str(VENV / "bin" / "python")
        alone = [python, "-m", MODULE, str(args_file)]
        via_ansible = [
            str(VENV / "bin" / "ansible"), "localhost", "-m", "gpuops.k8s.gpu_info",
            "-a", "require_nvml=false", "-e", "ansible_python_interpreter=" + python,
        ]  # fmt: skip
        for how, command in (("module process", alone), ("ansible localhost -m", via_ansible)):
            median, p90 = timed(command, env, opts.runs)
            print("%-42s %-22s %8.1f %8.1f" % (label, how, median, p90))
    return 0


if __name__ == "__main__":
    sys.exit(main())
