# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpuops.k8s.nvidia_cdi_spec with NVIDIA's parts on both sides: nvidia-ctk from NVIDIA's
Container Toolkit (built from its Go source at v1.20.2, lab/toolkit/build.sh, taken out of
its nvidia-container-toolkit-base package) generating over NVIDIA's mock NVML and mock
CUDA in a driver root laid out as NVIDIA's mock deployment does (lab/driver/driver-root.sh:
the libraries, and device nodes made with mknod).

A driver change (another profile: fewer GPUs, another driver version) must update the
spec; the same driver must leave it alone; check mode must predict the change and write
nothing.
"""

import os
from pathlib import Path

import pytest
import yaml
from _nvidia_parts import generate_cdi_spec as generate
from _nvidia_parts import install_toolkit
from _nvidia_parts import lay_out_driver as lay_out
from conftest import REPO

H100 = REPO / "lab" / "profiles" / "h100-8x-nvswitch.yaml"
T4 = REPO / "lab" / "profiles" / "t4-1x.yaml"
UPGRADED = "560.35.03"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="device nodes need mknod: run as root (make test does)"
)


@pytest.fixture(scope="module")
def toolkit(tmp_path_factory):
    """nvidia-ctk and nvidia-cdi-hook as NVIDIA's package installs them."""
    return install_toolkit(tmp_path_factory.mktemp("toolkit"))


def devices(spec):
    listed = yaml.safe_load(spec.read_text())["devices"]
    return {device["name"]: device["containerEdits"] for device in listed}


def mounted_libraries(spec):
    doc = yaml.safe_load(spec.read_text())
    return sorted(Path(mount["hostPath"]).name for mount in doc["containerEdits"].get("mounts", []))


def uuids(profile):
    return [device["uuid"] for device in yaml.safe_load(profile.read_text())["devices"]]


def test_spec_follows_the_driver(toolkit, tmp_path):
    root = tmp_path / "driver"
    spec = tmp_path / "cdi" / "nvidia.yaml"
    spec.parent.mkdir()
    lay_out(root, H100)

    first = generate(toolkit, root, spec)
    assert not first.get("failed"), first.get("msg")
    assert first["changed"] is True
    listed = devices(spec)
    assert sorted(listed) == sorted([str(i) for i in range(8)] + uuids(H100) + ["all"])
    (node,) = listed["3"]["deviceNodes"]
    assert (node["path"], node["hostPath"], node["major"], node["minor"]) == (
        "/dev/nvidia3",
        str(root / "dev" / "nvidia3"),
        195,
        3,
    )
    assert listed[uuids(H100)[3]] == listed["3"]
    assert len(listed["all"]["deviceNodes"]) == 8
    assert {"libnvidia-ml.so.550.163.01", "libcuda.so.550.163.01"} <= set(mounted_libraries(spec))

    again = generate(toolkit, root, spec)
    assert again["changed"] is False, again

    # The driver changes: one T4 on driver 560.35.03.
    upgraded = tmp_path / "t4-560.yaml"
    upgraded.write_text(T4.read_text().replace("550.163.01", UPGRADED))
    lay_out(root, upgraded)
    before = spec.read_bytes()
    predicted = generate(toolkit, root, spec, check=True)
    assert predicted["changed"] is True
    assert spec.read_bytes() == before
    assert predicted["diff"]["before"] != predicted["diff"]["after"]

    changed = generate(toolkit, root, spec)
    assert changed["changed"] is True
    assert sorted(devices(spec)) == sorted(["0", *uuids(T4), "all"])
    libraries = mounted_libraries(spec)
    assert "libnvidia-ml.so.%s" % UPGRADED in libraries
    assert "libnvidia-ml.so.550.163.01" not in libraries
    assert yaml.safe_load(spec.read_text()) == yaml.safe_load(predicted["diff"]["after"])
