# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dra.devices: a device per whole GPU, gpu-<index>, in index order; a MIG GPU is none."""

from gpus import gpu, mig

from gpuops_device_plugin.dra.devices import GpuDevice, gpu_devices


def test_whole_gpus_are_devices_by_index_and_mig_gpus_are_not():
    found = [gpu(2), gpu(0), gpu(1, mig=[mig(1, 0, "1g.10gb", 7)])]
    devices = gpu_devices(found)
    assert list(devices) == ["gpu-0", "gpu-2"]
    assert devices == {
        "gpu-0": GpuDevice("gpu-0", 0, found[1]["uuid"]),
        "gpu-2": GpuDevice("gpu-2", 2, found[0]["uuid"]),
    }
