# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A fresh node after the role: containerd 2.x (from sid) at config version 3."""

import json
import os
import tomllib


def test_check_mode_predicted_the_same_changed_tasks_as_the_real_run(host):
    directory = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "changed-tasks")
    with open(os.path.join(directory, "converge-check-1.json")) as handle:
        predicted = json.load(handle)
    with open(os.path.join(directory, "converge-real-1.json")) as handle:
        real = json.load(handle)
    name = host.backend.get_hostname()
    assert real[name], "the real converge changed nothing: nothing was compared"
    assert predicted[name] == real[name]


def test_containerd_2_lists_the_nvidia_runtime_as_default(host):
    # Debian's containerd 2.x package ships a version 2 config.toml; a file that states
    # its version keeps it, and containerd 2.x migrates it when loading.
    assert host.check_output("containerd --version").split()[2].startswith("2.")
    assert "runtimes.nvidia" in host.file("/etc/containerd/config.toml").content_string
    dump = tomllib.loads(host.check_output("containerd config dump"))
    assert dump["version"] == 3
    cri = dump["plugins"]["io.containerd.cri.v1.runtime"]["containerd"]
    assert cri["default_runtime_name"] == "nvidia"
    assert cri["runtimes"]["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    plugins = host.check_output("ctr plugins ls")
    assert any(line.split()[1:2] == ["cri"] and line.split()[-1] == "ok" for line in plugins.splitlines()[1:])
