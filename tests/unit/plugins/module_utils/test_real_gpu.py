# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_info's facts and labels for a real GPU, checked against NVIDIA's own nvidia-smi.

Each folder of tests/fixtures/real_gpu was recorded by lab/real-gpu/record.py on a real
NVIDIA GPU, identifiers replaced (its README.md): an H100 80GB HBM3 in a Firecracker VM and
an H200 under gVisor, driver 580.159.04, CUDA 13.0, MIG disabled, one GPU each. gpu_info.json
is what the module returned there through the ansible CLI; nvidia-smi.txt is `nvidia-smi -q`
on the same machine at the same time, the independent witness: every fact below is read
from it, not from our own output.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _cdi_spec as gpu_cdi
from ansible_collections.gpuops.k8s.plugins.module_utils import _gfd_labels as gfd

REAL_GPU = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "real_gpu")
# Each recording, and the accelerator label GKE's convention gives its board.
RECORDINGS = {"h100-80gb-hbm3": "nvidia-h100", "h200": "nvidia-h200"}


@pytest.fixture(scope="module", params=sorted(RECORDINGS))
def board(request):
    return request.param


def _read(board, name):
    with open(os.path.join(REAL_GPU, board, name)) as handle:
        return handle.read()


@pytest.fixture(scope="module")
def recorded(board):
    return json.loads(_read(board, "gpu_info.json"))


@pytest.fixture(scope="module")
def smi(board):
    """nvidia-smi -q's fields: the first value of each name, and MIG mode's sub-fields."""
    text = _read(board, "nvidia-smi.txt")
    fields = {}
    for name, value in re.findall(r"(?m)^\s*([A-Za-z][^:\n]*?)\s*:\s(.*)$", text):
        fields.setdefault(name, value.strip())
    mig = re.search(r"(?m)^\s*MIG Mode\n\s*Current\s*:\s*(\S+)\n\s*Pending\s*:\s*(\S+)", text)
    fields["MIG Current"], fields["MIG Pending"] = mig.groups()
    pci = re.search(r"Base Classcode\s*:\s*0x(\w+)\n\s*Sub Classcode\s*:\s*0x(\w+)", text)
    fields["PCI class"] = "0x%02x%02x00" % (int(pci.group(1), 16), int(pci.group(2), 16))
    fields["FB Total MiB"] = re.search(r"FB Memory Usage\n\s*Total\s*:\s*(\d+) MiB", text).group(1)
    return fields


def test_the_facts_gpu_info_read_are_what_nvidia_smi_said(recorded, smi):
    assert recorded["gpu_count"] == int(smi["Attached GPUs"]) == 1
    gpu = recorded["gpus"][0]
    assert gpu["name"] == smi["Product Name"]
    assert gpu["family"] == smi["Product Architecture"].lower()
    assert gpu["memory_total_mib"] == int(smi["FB Total MiB"])
    assert gpu["pci_bus_id"] == smi["Bus Id"]
    assert gpu["uuid"] == smi["GPU UUID"]
    assert gpu["minor_number"] == int(smi["Minor Number"])
    assert gpu["persistence_mode"] is (smi["Persistence Mode"] == "Enabled")
    assert gpu["mode"] == {"0x030200": "compute", "0x030000": "graphics"}[smi["PCI class"]]
    # nvidia-smi prints N/A for both on a board that cannot do MIG.
    assert gpu["mig"]["capable"] is (smi["MIG Current"] != "N/A")
    assert (gpu["mig"]["current"], gpu["mig"]["pending"]) == (
        smi["MIG Current"].lower(),
        smi["MIG Pending"].lower(),
    )
    assert recorded["nvml"]["driver_version"] == smi["Driver Version"]
    assert recorded["nvml"]["cuda_driver_version"] == smi["CUDA Version"]
    assert recorded["lost_gpus"] == [] and recorded["nvswitch"] is False


def test_the_labels_for_the_real_gpu_follow_gfd_from_nvidia_smi_s_values(board, recorded, smi):
    labels = gfd.render(recorded["nvml"], recorded["gpus"])
    # What the module returned on the machine is what the pure code renders from its facts
    # (the machine type was unreadable there: a VM without DMI product name).
    assert labels == recorded["labels"]
    driver = smi["Driver Version"].split(".")
    cuda = smi["CUDA Version"].split(".")
    expected = {
        "nvidia.com/gpu.product": smi["Product Name"].replace(" ", "-"),
        "nvidia.com/gpu.memory": smi["FB Total MiB"],
        "nvidia.com/gpu.family": smi["Product Architecture"].lower(),
        "nvidia.com/gpu.count": smi["Attached GPUs"],
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/cuda.driver-version.full": smi["Driver Version"],
        "nvidia.com/cuda.driver-version.major": driver[0],
        "nvidia.com/cuda.driver-version.minor": driver[1],
        "nvidia.com/cuda.driver-version.revision": driver[2],
        "nvidia.com/cuda.driver.major": driver[0],
        "nvidia.com/cuda.driver.minor": driver[1],
        "nvidia.com/cuda.driver.rev": driver[2],
        "nvidia.com/cuda.runtime-version.full": smi["CUDA Version"],
        "nvidia.com/cuda.runtime-version.major": cuda[0],
        "nvidia.com/cuda.runtime-version.minor": cuda[1],
        "nvidia.com/cuda.runtime.major": cuda[0],
        "nvidia.com/cuda.runtime.minor": cuda[1],
        # Compute capability 9.0 is Hopper's; nvidia-smi -q does not print it.
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "accelerator": RECORDINGS[board],
    }
    assert {key: labels.get(key) for key in expected} == expected


def test_the_recording_holds_no_real_identifier(board):
    text = "".join(_read(board, name) for name in sorted(os.listdir(os.path.join(REAL_GPU, board))))
    uuids = set(re.findall(r"GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", text))
    assert uuids == {"GPU-00000000-0000-4000-8000-000000000000"}
    assert set(re.findall(r"Serial Number\s*:\s*(.*)", text)) <= {"(removed)", "N/A"}


@pytest.fixture(scope="module")
def generate_stderr(board):
    """What nvidia-ctk 1.20 (built from NVIDIA's source) logged generating the spec there."""
    return "\n".join(json.loads(_read(board, "cdi.json"))["generate_stderr"]) + "\n"


def test_a_real_generation_s_warnings_are_not_taken_for_a_missing_driver(generate_stderr):
    # A VM's driver lacks much (nvidia-modeset, sandboxutils, X and Wayland pieces): nvidia-ctk
    # warns about each, logs no error, and generates; none of it means "no driver".
    assert gpu_cdi.nvidia_ctk_messages(generate_stderr, "error") == []
    assert gpu_cdi.classify_failure(generate_stderr) is None
    warnings = gpu_cdi.nvidia_ctk_messages(generate_stderr, "warning")
    assert "Could not locate /dev/nvidia-modeset: /dev/nvidia-modeset: not found" in warnings
    # logrus's escaped newlines come back as newlines.
    assert (
        "Ignoring error in locating libnvidia-sandboxutils.so.1: libnvidia-sandboxutils.so.1: not found\n"
        "libnvidia-sandboxutils.so.1: not found"
    ) in warnings
    assert "Using driver version 580.159.04" in gpu_cdi.nvidia_ctk_messages(generate_stderr, "info")
