# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The NVIDIA runtime in containerd, Docker and CRI-O configuration: plan, then apply.

Private to the gpuops.k8s collection: no compatibility promise outside it. Calls go one
way, downwards: plan -> containerd, crio, docker (the per-engine edits) -> tables (edits on
plain data) -> toml_edit (the difference applied to the user's text) -> toml_text (reading,
lexing, rendering) -> errors. Nothing here does I/O at import; only plan reads files. The
drift guard (roles/container_runtime/files/gpuops_runtime_guard/_runtime) links these files.
"""
