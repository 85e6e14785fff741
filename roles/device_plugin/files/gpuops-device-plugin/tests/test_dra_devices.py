# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dra.devices: a device per whole GPU, gpu-<index>, in index order; a MIG GPU's MIG devices
instead of it, gpu-<index>-mig-<gi>-<ci>, named alike by the slices and Prepare."""

from gpus import gpu, mig

from gpuops_device_plugin.dra.devices import GpuDevice, gpu_devices


def with_ci(part, ci):
    return {**part, "compute_instance_id": ci}


def test_whole_gpus_are_devices_by_index_and_a_mig_gpu_its_mig_devices():
    parts = [with_ci(mig(1, 1, "3g.40gb", 2), 0), with_ci(mig(1, 0, "1g.10gb", 7), 0)]
    found = [gpu(2), gpu(0), gpu(1, mig=parts)]
    devices = gpu_devices(found)
    assert list(devices) == ["gpu-0", "gpu-1-mig-2-0", "gpu-1-mig-7-0", "gpu-2"]
    assert devices == {
        "gpu-0": GpuDevice("gpu-0", 0, found[1]["uuid"]),
        "gpu-1-mig-2-0": GpuDevice("gpu-1-mig-2-0", 1, parts[0]["uuid"], found[2]["uuid"]),
        "gpu-1-mig-7-0": GpuDevice("gpu-1-mig-7-0", 1, parts[1]["uuid"], found[2]["uuid"]),
        "gpu-2": GpuDevice("gpu-2", 2, found[0]["uuid"]),
    }
    assert devices["gpu-1-mig-2-0"].gpu_uuid == found[2]["uuid"]
    assert devices["gpu-0"].gpu_uuid == found[1]["uuid"]


def test_a_mig_device_nvml_gave_no_instance_ids_is_left_out():
    """The slices refuse to name it (test_dra_slices); Prepare must not serve a name they lack."""
    found = [gpu(0, mig=[mig(0, 0, "1g.10gb", 7), with_ci(mig(0, 1, "1g.10gb", 8), 0)])]
    assert list(gpu_devices(found)) == ["gpu-0-mig-8-0"]
