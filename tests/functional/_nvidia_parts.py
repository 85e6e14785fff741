# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVIDIA's parts for tests that run them together: the Container Toolkit as NVIDIA's
nvidia-container-toolkit-base package installs it (built from its Go source by
lab/toolkit/build.sh), a driver root of NVIDIA's mock NVML and CUDA with device nodes
(lab/driver/driver-root.sh), and gpuops.k8s.nvidia_cdi_spec generating the CDI spec
over them."""

import subprocess
from pathlib import Path

from conftest import REPO, run_module

TOOLKIT_VERSION = "v1.20.2"


def sh(*argv):
    proc = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, timeout=3600)
    assert proc.returncode == 0, "%s failed (%d):\n%s" % (argv[:2], proc.returncode, proc.stderr[-3000:])
    return proc.stdout


def install_toolkit(root):
    """Unpack nvidia-container-toolkit-base into root; return its usr/bin."""
    repo = Path(sh("bash", REPO / "lab" / "toolkit" / "build.sh", TOOLKIT_VERSION).split()[-1])
    (deb,) = repo.glob("stable/deb/*/nvidia-container-toolkit-base_%s-1_*.deb" % TOOLKIT_VERSION[1:])
    sh("dpkg-deb", "-x", deb, root)
    return Path(root) / "usr" / "bin"


def lay_out_driver(root, profile):
    """NVIDIA's mock libraries for profile's driver version and its GPUs' device nodes."""
    sh("bash", REPO / "lab" / "driver" / "driver-root.sh", root, profile)


def driver_profile(root):
    return Path(root) / "usr" / "share" / "gpuops-lab-driver" / "profile.yaml"


def generate_cdi_spec(toolkit, root, spec, check=False):
    """nvidia_cdi_spec as the toolkit role runs it, nvidia-ctk pointed at the driver root."""
    env_file = Path(root).parent / "cdi-refresh.env"
    env_file.write_text(
        "NVIDIA_CTK_DRIVER_ROOT=%s\nNVIDIA_CTK_CDI_HOOK_PATH=%s\n" % (root, toolkit / "nvidia-cdi-hook")
    )
    env = {
        "LD_LIBRARY_PATH": Path(root) / "usr" / "lib" / "x86_64-linux-gnu",
        "MOCK_NVML_CONFIG": driver_profile(root),
    }
    args = {"path": str(spec), "nvidia_ctk": str(toolkit / "nvidia-ctk"), "env_file": str(env_file)}
    return run_module(args, env, module="gpuops.k8s.nvidia_cdi_spec", check=check, diff=check)
