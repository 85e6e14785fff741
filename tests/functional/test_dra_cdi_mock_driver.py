# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The DRA front end's per-claim CDI spec on NVIDIA's parts: made from the spec nvidia-ctk
(v1.20.2, built from its Go source) generates over the lab's mock driver, and read back by
nvidia-ctk's own CDI library (`nvidia-ctk cdi list`, the registry containerd and CRI-O use).

The claim's devices must be listed (a spec the registry refuses lists nothing of it, and a
UID that begins with a digit needs spec version 0.5.0), and carry the claimed GPUs' device
nodes and no other.
"""

import os
import subprocess

import pytest
import yaml
from _nvidia_parts import generate_cdi_spec as generate
from _nvidia_parts import install_toolkit
from _nvidia_parts import lay_out_driver as lay_out
from conftest import REPO

from gpuops_device_plugin.dra.cdi import ClaimSpecs
from gpuops_device_plugin.dra.devices import gpu_devices

H100 = REPO / "lab" / "profiles" / "h100-8x-nvswitch.yaml"
UID = "0b9a6c1e-5a7d-4c39-9f6e-2d1f3c4b5a69"  # begins with a digit

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="device nodes need mknod: run as root (make test does)"
)


def test_the_claim_spec_is_listed_by_nvidia_ctk_with_the_claimed_gpus_only(tmp_path):
    toolkit = install_toolkit(tmp_path / "toolkit")
    root = tmp_path / "driver"
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    spec = cdi_dir / "nvidia.yaml"
    lay_out(root, H100)
    generated = generate(toolkit, root, spec)
    assert not generated.get("failed"), generated.get("msg")
    uuids = [device["uuid"] for device in yaml.safe_load(H100.read_text())["devices"]]
    gpus = gpu_devices([{"index": i, "uuid": uuid} for i, uuid in enumerate(uuids)])

    ids = ClaimSpecs(str(cdi_dir), str(spec)).write(UID, [gpus["gpu-2"], gpus["gpu-5"]])

    listed = subprocess.run(
        [str(toolkit / "nvidia-ctk"), "cdi", "list", "--spec-dir", str(cdi_dir)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "registry errors" not in listed.stderr, listed.stderr
    names = listed.stdout.split()
    assert [name for name in names if name.startswith("k8s.gpu.gpuops.k8s/")] == sorted(ids.values())
    assert "nvidia.com/gpu=all" in names
    claim_spec = yaml.safe_load((cdi_dir / f"k8s.gpu.gpuops.k8s-claim_{UID}.json").read_text())
    nodes = [
        (node["path"], node["hostPath"])
        for device in claim_spec["devices"]
        for node in device["containerEdits"]["deviceNodes"]
    ]
    assert nodes == [
        ("/dev/nvidia2", str(root / "dev" / "nvidia2")),
        ("/dev/nvidia5", str(root / "dev" / "nvidia5")),
    ]
    assert claim_spec["containerEdits"] == yaml.safe_load(spec.read_text())["containerEdits"]
