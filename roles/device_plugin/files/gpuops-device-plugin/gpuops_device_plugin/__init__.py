# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpuops device plugin: NVIDIA GPUs for the kubelet, over the v1beta1 device plugin API.

Parts: config (file, env, flags), discovery (NVML), resources (pure: names, replicas,
Allocate responses), allocation (pure: preferred allocation), health (NVML events,
recovery), server (gRPC translation), registrar (serve, register, watch the kubelet),
metrics (Prometheus), daemon (wiring, signals). dra/: the DRA front end over the same
discovery and health, with the kubelet's DRA protos in api/ (not started by the daemon yet).
"""

__version__ = "0.1.0"
