# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A GPU inside a container, through NVIDIA's parts only: NVIDIA's nvidia-container-runtime
(v1.20.2 from its Go source, in CDI mode) runs a container whose NVML query, over NVIDIA's
mock NVML injected from a driver root (lab/driver/driver-root.sh), lists exactly the GPU
requested. The CDI spec comes from gpuops.k8s.nvidia_cdi_spec.

The engine is podman (the container engine this machine has; it hands the OCI spec to
the runtime as containerd and dockerd do); the runtime gets its configuration from an
XDG_CONFIG_HOME that a two-line wrapper sets, as /etc/nvidia-container-runtime/config.toml
would on a node. The image is the lab's Debian node image (python3) with nvidia-ml-py
mounted in. NVIDIA's mock lists the GPUs whose /dev/nvidia<N> it can see, as real NVML
in a container does.
"""

import json
import os
import shutil
import subprocess

import pytest
import yaml
from _nvidia_parts import driver_profile, generate_cdi_spec, install_toolkit, lay_out_driver, sh
from conftest import REPO, VENV_BIN

H100 = REPO / "lab" / "profiles" / "h100-8x-nvswitch.yaml"
NVML_VERSION = "13.615.71"  # nvidia-ml-py, as pinned in requirements/dev.txt
IMAGE_SUITE = "bookworm"

# In the container: which NVIDIA device nodes it has and what NVML lists (the lab's
# nvml-query image runs the same script in pods).
QUERY = REPO / "lab" / "kube" / "nvml-query.py"

# make test runs as root; podman comes with `make lab-deps`, which `make pytest` runs first,
# so a missing podman fails (run_container) rather than skips.
pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="device nodes need mknod and podman needs root: run as root"
)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """Everything a GPU node has here: driver root, toolkit, CDI spec, runtime config."""
    base = tmp_path_factory.mktemp("gpu-node")
    toolkit = install_toolkit(base / "toolkit")
    root = base / "driver"
    lay_out_driver(root, H100)
    spec = base / "cdi" / "nvidia.yaml"
    spec.parent.mkdir()
    result = generate_cdi_spec(toolkit, root, spec)
    assert result.get("generated") is True, result

    # NVIDIA's runtime configuration, made by NVIDIA's own tool: CDI mode, our spec dir.
    config = base / "xdg" / "nvidia-container-runtime" / "config.toml"
    config.parent.mkdir(parents=True)
    sh(toolkit / "nvidia-ctk", "config", "default", "--output", config)
    sh(
        toolkit / "nvidia-ctk",
        "config",
        "--config-file",
        config,
        "--in-place",
        "--set",
        "nvidia-container-runtime.mode=cdi",
        "--set",
        "nvidia-container-runtime.modes.cdi.spec-dirs=%s" % spec.parent,
    )
    runtime = base / "nvidia-container-runtime"
    runtime.write_text(
        '#!/bin/sh\nexport XDG_CONFIG_HOME=%s\nexec %s "$@"\n'
        % (config.parent.parent, toolkit / "nvidia-container-runtime")
    )
    runtime.chmod(0o755)

    wheels = base / "wheels"
    subprocess.run(
        [VENV_BIN / "pip", "download", "-q", "--no-deps", "-d", wheels, "nvidia-ml-py==%s" % NVML_VERSION],
        check=True,
        timeout=600,
    )
    (wheel,) = wheels.glob("nvidia_ml_py-*.whl")
    wheel.rename(wheels / "nvidia_ml_py.whl")

    image = sh("bash", REPO / "lab" / "node-image.sh", IMAGE_SUITE).split()[-1]
    return {"base": base, "root": root, "runtime": runtime, "image": image, "spec": spec}


def run_container(node, runtime, env=()):
    """The query in a fresh container started by `runtime`; its JSON answer."""
    assert shutil.which("podman"), "podman not found: `make lab-deps` installs it"
    argv = ["podman", "run", "--rm", "--runtime", str(runtime)]
    for item in env:
        argv += ["-e", item]
    argv += [
        "-e",
        "MOCK_NVML_CONFIG=/etc/gpuops-mock/profile.yaml",
        "-v",
        "%s:/etc/gpuops-mock/profile.yaml:ro" % driver_profile(node["root"]),
        "-v",
        "%s:/whl:ro" % (node["base"] / "wheels"),
        "-e",
        "PYTHONPATH=/whl/nvidia_ml_py.whl",
        "-v",
        "%s:/query.py:ro" % QUERY,
        node["image"],
        "python3",
        "/query.py",
    ]
    env_vars = dict(os.environ, CONTAINERS_CONF=str(REPO / "lab" / "containers.conf"))
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=300, env=env_vars)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def uuids():
    return [device["uuid"] for device in yaml.safe_load(H100.read_text())["devices"]]


def test_one_gpu_requested_by_uuid_is_the_only_one_seen(node):
    seen = run_container(node, node["runtime"], ["NVIDIA_VISIBLE_DEVICES=%s" % uuids()[1]])
    assert seen == {
        "dev": ["nvidia-uvm", "nvidia-uvm-tools", "nvidia1", "nvidiactl"],
        "uuids": [uuids()[1]],
        "driver": "550.163.01",
    }


def test_all_gpus_requested_are_all_seen(node):
    seen = run_container(node, node["runtime"], ["NVIDIA_VISIBLE_DEVICES=all"])
    assert seen["uuids"] == uuids()
    control = ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"]
    assert seen["dev"] == sorted(control + ["nvidia%d" % i for i in range(8)])


def test_no_gpu_requested_gets_no_driver(node):
    seen = run_container(node, node["runtime"])
    assert seen == {"dev": [], "error": "NVML Shared Library Not Found"}


def test_plain_runc_injects_nothing(node):
    """The same request without NVIDIA's runtime: the container has no GPU and no NVML.
    (The check that the tests above depend on the nvidia runtime, not on the engine.)"""
    seen = run_container(node, "runc", ["NVIDIA_VISIBLE_DEVICES=%s" % uuids()[1]])
    assert seen == {"dev": [], "error": "NVML Shared Library Not Found"}
