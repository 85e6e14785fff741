# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dra.cdi: a claim's spec holds exactly its GPUs' edits and the toolkit's common edits."""

import json
import os
import re

import pytest
import yaml

from gpuops_device_plugin.dra import cdi
from gpuops_device_plugin.dra.devices import gpu_devices

UID = "0b9a6c1e-5a7d-4c39-9f6e-2d1f3c4b5a69"
GPUS = gpu_devices([{"index": i, "uuid": f"GPU-{i}"} for i in range(3)])
COMMON = {
    "env": ["NVIDIA_VISIBLE_DEVICES=void"],
    "deviceNodes": [{"path": "/dev/nvidiactl"}],
    "mounts": [{"hostPath": "/usr/lib/libcuda.so.1", "containerPath": "/usr/lib/libcuda.so.1"}],
}


def gpu_edits(index):
    return {
        "deviceNodes": [{"path": f"/dev/nvidia{index}", "major": 195, "minor": index}],
        "hooks": [
            {"hookName": "createRuntime", "path": "/usr/bin/nvidia-cdi-hook", "args": [f"GPU-{index}"]}
        ],
    }


def toolkit_document(version="0.5.0"):
    """What nvidia-ctk cdi generate writes for three GPUs: by index, by UUID, all."""
    devices = [{"name": str(i), "containerEdits": gpu_edits(i)} for i in range(3)]
    devices += [{"name": f"GPU-{i}", "containerEdits": gpu_edits(i)} for i in range(3)]
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}})
    return {"cdiVersion": version, "kind": "nvidia.com/gpu", "devices": devices, "containerEdits": COMMON}


@pytest.fixture
def specs(tmp_path):
    toolkit = tmp_path / "nvidia.yaml"
    toolkit.write_text(yaml.safe_dump(toolkit_document()))
    return cdi.ClaimSpecs(str(tmp_path / "cdi"), str(toolkit))


def read(path):
    with open(path) as handle:
        return json.load(handle)


def test_the_claim_spec_holds_exactly_the_claimed_gpus_and_the_common_edits(specs):
    ids = specs.write(UID, [GPUS["gpu-2"], GPUS["gpu-0"]])

    assert ids == {
        "gpu-2": f"k8s.gpu.gpuops.k8s/claim={UID}-gpu-2",
        "gpu-0": f"k8s.gpu.gpuops.k8s/claim={UID}-gpu-0",
    }
    path = os.path.join(specs.spec_dir, f"k8s.gpu.gpuops.k8s-claim_{UID}.json")
    assert specs.path(UID) == path
    assert read(path) == {
        "cdiVersion": "0.5.0",
        "kind": "k8s.gpu.gpuops.k8s/claim",
        "devices": [
            {"name": f"{UID}-gpu-2", "containerEdits": gpu_edits(2)},
            {"name": f"{UID}-gpu-0", "containerEdits": gpu_edits(0)},
        ],
        "containerEdits": COMMON,
    }
    assert oct(os.stat(path).st_mode & 0o777) == "0o644"
    assert os.listdir(specs.spec_dir) == [os.path.basename(path)]  # no temporary left


def test_remove_is_idempotent(specs):
    specs.write(UID, [GPUS["gpu-1"]])
    specs.remove(UID)
    specs.remove(UID)
    assert os.listdir(specs.spec_dir) == []


@pytest.mark.parametrize(("toolkit", "version"), [("0.3.0", "0.5.0"), ("0.5.0", "0.5.0"), ("0.8.0", "0.8.0")])
def test_the_version_allows_names_that_begin_with_a_digit(tmp_path, toolkit, version):
    """A UID may begin with a digit, which CDI allows from 0.5.0 on; a newer toolkit's stays."""
    path = tmp_path / "nvidia.yaml"
    path.write_text(yaml.safe_dump(toolkit_document(toolkit)))
    specs = cdi.ClaimSpecs(str(tmp_path), str(path))
    assert specs.spec(UID, [GPUS["gpu-0"]])["cdiVersion"] == version


def test_a_missing_toolkit_spec_names_the_path_and_the_fix(tmp_path):
    missing = str(tmp_path / "nvidia.yaml")
    specs = cdi.ClaimSpecs(str(tmp_path / "cdi"), missing)

    with pytest.raises(cdi.ToolkitSpecError) as raised:
        specs.write(UID, [GPUS["gpu-0"]])
    assert raised.value.path == missing
    message = str(raised.value)
    assert f"{missing} does not exist" in message
    assert "systemctl start nvidia-cdi-refresh.service" in message
    assert f"nvidia-ctk cdi generate --output={missing}" in message
    assert not os.path.exists(tmp_path / "cdi" / f"k8s.gpu.gpuops.k8s-claim_{UID}.json")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("devices: [\n", "is not YAML"),
        ("kind: nvidia.com/gpu\n", "has no devices list"),
        ("cdiVersion: latest\ndevices: [{name: GPU-0}]\n", "has cdiVersion 'latest'"),
        ("cdiVersion: 0.5.0\ndevices: [{name: GPU-1}]\n", "has no device GPU-0 (gpu-0)"),
    ],
)
def test_a_bad_toolkit_spec_is_an_error_naming_it(tmp_path, text, problem):
    path = tmp_path / "nvidia.yaml"
    path.write_text(text)
    with pytest.raises(cdi.ToolkitSpecError, match=re.escape(problem)) as raised:
        cdi.ClaimSpecs(str(tmp_path), str(path)).write(UID, [GPUS["gpu-0"]])
    assert str(path) in str(raised.value)


def test_an_unreadable_toolkit_spec_is_an_error_naming_it(tmp_path):
    (tmp_path / "nvidia.yaml").mkdir()
    with pytest.raises(cdi.ToolkitSpecError, match="cannot be read"):
        cdi.ClaimSpecs(str(tmp_path), str(tmp_path / "nvidia.yaml")).write(UID, [GPUS["gpu-0"]])


def test_a_spec_that_cannot_be_written_names_its_path(specs):
    with open(specs.spec_dir, "w"):
        pass  # a file where the spec directory should be: fails for root too
    with pytest.raises(cdi.ClaimSpecError, match="cannot be written") as raised:
        specs.write(UID, [GPUS["gpu-0"]])
    assert raised.value.path == specs.path(UID)


@pytest.mark.parametrize("uid", ["../../etc/passwd", "", "-leading-dash", "a b"])
def test_a_uid_that_cannot_name_a_file_is_refused(specs, uid):
    with pytest.raises(cdi.ClaimSpecError, match="cannot name a CDI spec"):
        specs.write(uid, [GPUS["gpu-0"]])
    with pytest.raises(cdi.ClaimSpecError, match="cannot name a CDI spec"):
        specs.remove(uid)
