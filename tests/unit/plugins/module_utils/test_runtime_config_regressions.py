# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Inputs the property tests found that once broke the runtime config edit."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import tomlkit

from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.containerd import (
    RUNC_TYPE,
    containerd_in_place,
)
from ansible_collections.gpuops.k8s.plugins.module_utils._runtime.docker import docker_edit

SPEC = {
    "state": "present",
    "runtime_name": "nvidia",
    "runtime_path": "/usr/bin/nvidia-container-runtime",
    "set_as_default": True,
    "enable_cdi": None,
}


def test_an_existing_inline_runtime_gets_inline_options():
    text = "[plugins.cri.containerd.runtimes]\nrunc = {}\nnvidia = {}\n"
    new_text, _before, after, version = containerd_in_place(text, SPEC, "config.toml")
    assert version == 1
    nvidia = after["plugins"]["cri"]["containerd"]["runtimes"]["nvidia"]
    assert nvidia == {"runtime_type": RUNC_TYPE, "options": {"BinaryName": SPEC["runtime_path"]}}
    assert tomlkit.parse(new_text).unwrap() == after
    assert containerd_in_place(new_text, SPEC, "config.toml")[0] == new_text


def test_runtimes_as_one_inline_table_gets_an_inline_nvidia_entry_with_runc_options():
    text = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'runtimes = { runc = { runtime_type = "io.containerd.runc.v2", '
        "options = { SystemdCgroup = true } } }\n"
    )
    new_text, _before, after, _version = containerd_in_place(text, SPEC, "config.toml")
    runtimes = after["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    assert runtimes["nvidia"]["options"] == {"SystemdCgroup": True, "BinaryName": SPEC["runtime_path"]}
    assert "runtimes = { runc" in new_text  # still one inline table, not split into sections


def test_docker_runtimes_null_means_none():
    new_text, _before, after = docker_edit('{"runtimes": null}', SPEC, "daemon.json")
    assert after["runtimes"] == {"nvidia": {"path": SPEC["runtime_path"]}}
    assert json.loads(new_text) == after
    absent = dict(SPEC, state="absent")
    assert docker_edit('{"runtimes": null}', absent, "daemon.json")[0] == '{"runtimes": null}'
