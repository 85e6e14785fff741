# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where the host's lab lives and what it runs: its directories, the node's name and
addresses, the ports, the images' names and the components `up` starts."""

from __future__ import annotations

import os
from pathlib import Path

# lab/, where this package is.
LAB = Path(__file__).resolve().parents[1]
ROOT = LAB.parent
STATE_DIR = Path(os.environ.get("GPUOPS_LAB_STATE", "/var/lib/gpuops-lab"))
RUN_DIR = Path("/run/gpuops-lab")
# NVIDIA's mock NVML runtime overrides (faults) for every NVML user on the lab node.
MOCK_OVERRIDES = RUN_DIR / "mocknvml-overrides.yaml"
# The kubelet's default root dir, on purpose: NVIDIA's device plugin only knows
# /var/lib/kubelet/device-plugins, and so do our role's defaults.
KUBELET_ROOT = Path("/var/lib/kubelet")
PLUGIN_DIR = KUBELET_ROOT / "device-plugins"
NODE_NAME = "gpuops-lab"
# The kubelet refuses a loopback node IP, so the node gets an address on the lab's own
# bridge, which is also the pod network's gateway. Nothing leaves this machine.
BRIDGE = "gpuopslab0"
NODE_IP = "10.252.0.1"
POD_SUBNET = "10.252.0.0/24"
SERVICE_CIDR = "10.253.0.0/24"
API_PORT = 16443
ETCD_PORT = 12379
KUBELET_PORT = 10250
CONTAINERD_SOCK = RUN_DIR / "containerd" / "containerd.sock"
PAUSE_IMAGE = "localhost/gpuops-lab/pause:1"
TOOLS_IMAGE = "localhost/gpuops-lab/tools:1"
PKI = STATE_DIR / "pki"
ADMIN_KUBECONFIG = STATE_DIR / "admin.kubeconfig"
LOGS = STATE_DIR / "logs"
ANSIBLE_VARS = STATE_DIR / "ansible-vars.json"
CGROUP_V1 = Path("/sys/fs/cgroup")


# What `up` starts, in that order; `status`, `restart` and `down` go by these names.
COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "containerd",
    "kubelet",
    "device-plugin",
)
