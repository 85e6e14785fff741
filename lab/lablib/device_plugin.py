# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host node's mock GPUs: the NVML profile and library (NVIDIA's mock, or gpuops's MIG
stand-in), our device plugin over them, and the variables the single-host inventory reads."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from .layout import ADMIN_KUBECONFIG, ANSIBLE_VARS, MOCK_OVERRIDES, NODE_NAME, PLUGIN_DIR, ROOT
from .processes import LabError, log, saved_spec, script_output, start, stop


def resolve_profile(profile):
    return Path(profile) if os.path.isabs(profile) else ROOT / "lab" / "profiles" / profile


def nvml_library(profile_path):
    """The NVML library for a profile: NVIDIA's mock, or gpuops's MIG stand-in for a profile
    with MIG instances (a sibling <name>.mig.yaml), which NVIDIA's mock does not model."""
    if profile_path.with_name(profile_path.stem + ".mig.yaml").is_file():
        log("%s has MIG instances: gpuops's MIG NVML stand-in, not NVIDIA's mock" % profile_path.name)
        return script_output(ROOT / "lab" / "mig-nvml-standin" / "build.sh")[-1]
    return script_output(ROOT / "lab" / "mocknvml" / "build.sh")[-1]


def node_nvml_environment(profile_path):
    """What the device plugin and every play on the lab node read to see the mock GPUs;
    faults are injected through MOCK_OVERRIDES (NVIDIA's mock re-reads it every second)."""
    return {
        "LD_LIBRARY_PATH": nvml_library(profile_path),
        "MOCK_NVML_CONFIG": str(profile_path),
        "MOCK_NVML_OVERRIDES": str(MOCK_OVERRIDES),
    }


def start_device_plugin(profile):
    """Our daemon over the mock NVML library, as the lab's node would run it."""
    node_env = node_nvml_environment(resolve_profile(profile))
    MOCK_OVERRIDES.unlink(missing_ok=True)  # no fault left over from an interrupted test
    start(
        "device-plugin",
        [
            sys.executable,
            "-m",
            "gpuops_device_plugin",
            "--device-plugin-path",
            PLUGIN_DIR,
            "--metrics-address",
            "127.0.0.1:9402",
        ],
        env={
            "PYTHONPATH": str(ROOT / "roles" / "device_plugin" / "files" / "gpuops-device-plugin"),
            **node_env,
        },
    )
    # What a play on the lab node needs to see the same mock GPUs (the single-host
    # inventory of the integration tests).
    return node_env


def write_ansible_vars(node_env):
    """Variables the integration tests' single-host inventory reads: the kubeconfig and the
    node's NVML environment."""
    ANSIBLE_VARS.write_text(
        json.dumps(
            {"kubeconfig": str(ADMIN_KUBECONFIG), "node": NODE_NAME, "node_environment": node_env}, indent=2
        )
    )


def switch_profile(profile):
    """Point the node's mock NVML at another profile, as a driver change would: the device
    plugin restarts with it and plays on the node see it (ansible-vars.json)."""
    spec = saved_spec("device-plugin")
    profile_path = resolve_profile(profile)
    if not profile_path.is_file():
        raise LabError("no mock NVML profile at %s" % profile_path)
    nvml_env = node_nvml_environment(profile_path)
    spec["env"].pop("MOCK_NVML_CONTROL_DIR", None)  # written by labs started before NVIDIA's mock
    spec["env"].update(nvml_env)
    stop("device-plugin")
    start("device-plugin", spec["argv"], spec["env"])
    node_env = json.loads(ANSIBLE_VARS.read_text())["node_environment"]
    node_env.pop("MOCK_NVML_CONTROL_DIR", None)
    node_env.update(nvml_env)
    write_ansible_vars(node_env)
