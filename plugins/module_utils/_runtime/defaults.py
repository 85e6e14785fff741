# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one table of defaults: each engine's files, config mode and service; the options'.

Private to the gpuops.k8s collection. Read by the nvidia_runtime module (its argument
spec), the plan (a path left empty, the parameters it reports) and the drift guard (its
parameters); the container_runtime role takes the files and the guard's parameters from
the module's result, and the lab declares the runtime with these defaults.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

ENGINES = {
    "containerd": {
        "path": "/etc/containerd/config.toml",
        "drop_in_path": "/etc/containerd/conf.d/99-nvidia.toml",
        "config_mode": "in_place",
        "service": "containerd",
    },
    "docker": {
        "path": "/etc/docker/daemon.json",
        "drop_in_path": None,  # Docker reads a single daemon.json
        "config_mode": "in_place",
        "service": "docker",
    },
    "crio": {
        "path": "/etc/crio/crio.conf",
        "drop_in_path": "/etc/crio/crio.conf.d/99-nvidia.conf",
        "config_mode": "drop_in",
        "service": "crio",
    },
}

# nvidia_runtime's options and their defaults (None: the engine's, or leave as it is).
OPTIONS = {
    "state": "present",
    "config_mode": None,
    "path": None,
    "drop_in_path": None,
    "runtime_name": "nvidia",
    "runtime_path": "/usr/bin/nvidia-container-runtime",
    "set_as_default": None,
    "enable_cdi": None,
    "config_version": 2,
    "backup": False,
}

# What makes a run again: the engine and every option but state. A plan reports them as
# resolved (nvidia_runtime's return value parameters); the container_runtime role writes
# that result for the drift guard, which only ever declares the runtime.
PARAMETERS = ("runtime", *(key for key in OPTIONS if key != "state"))
