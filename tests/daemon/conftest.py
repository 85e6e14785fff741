# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Tests of the device plugin daemon (roles/device_plugin/files/gpuops_device_plugin)."""

import sys
from pathlib import Path

# No __pycache__ in roles/device_plugin/files: the role copies that directory to nodes.
sys.dont_write_bytecode = True

# The daemon package and this directory's helpers (dp_harness, kubelet_standin, gpus).
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "roles" / "device_plugin" / "files"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
