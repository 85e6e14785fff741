# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a container sees of NVIDIA's GPUs, as one JSON line: its NVIDIA device nodes and
the UUIDs NVML lists (or NVML's error). The entry point of the lab's nvml-query image
(lab/kube/images.sh); NVML comes from the node's driver, injected by the NVIDIA runtime."""

import json
import os

import pynvml

seen = {"dev": sorted(name for name in os.listdir("/dev") if name.startswith("nvidia"))}
try:
    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    seen["uuids"] = [pynvml.nvmlDeviceGetUUID(handle) for handle in handles]
    seen["driver"] = pynvml.nvmlSystemGetDriverVersion()
except pynvml.NVMLError as error:
    seen["error"] = str(error)
print(json.dumps(seen), flush=True)
