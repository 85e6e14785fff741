# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the container_runtime role leaves on a lab node, read from the node itself."""

import tomllib


def dump(host):
    return tomllib.loads(host.check_output("containerd config dump"))


def test_containerd_runs_with_the_cri_plugin_loaded(host):
    assert host.service("containerd").is_running
    assert host.service("containerd").is_enabled
    plugins = host.check_output("ctr plugins ls")
    assert any(line.split()[1:2] == ["cri"] and line.split()[-1] == "ok" for line in plugins.splitlines()[1:])


def test_nvidia_runtime_is_the_default_with_runc_options_carried_over(host):
    cri = dump(host)["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert cri["default_runtime_name"] == "nvidia"
    nvidia = cri["runtimes"]["nvidia"]
    assert nvidia["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert nvidia["options"]["SystemdCgroup"] is True


def test_site_settings_and_comments_survive(host):
    text = host.file("/etc/containerd/config.toml").content_string
    assert "# Site policy: keep this comment." in text
    assert "# pinned by the site" in text
    config = dump(host)
    assert config["oom_score"] == -999
    assert config["plugins"]["io.containerd.grpc.v1.cri"]["sandbox_image"] == "registry.k8s.io/pause:3.9"


def test_one_backup_of_the_site_file_was_kept(host):
    backups = host.check_output("ls /etc/containerd").split()
    backups = [name for name in backups if name.startswith("config.toml.") and name.endswith("~")]
    assert len(backups) == 1
    assert "nvidia" not in host.file("/etc/containerd/" + backups[0]).content_string
