# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""After a refused change, the node runs containerd on the configuration it had."""


def test_the_previous_configuration_is_back(host):
    assert host.file("/etc/containerd/config.toml").content_string == ""


def test_containerd_runs_again_with_its_cri_plugin(host):
    assert host.service("containerd").is_running
    plugins = host.check_output("ctr plugins ls")
    assert any(line.split()[1:2] == ["cri"] and line.split()[-1] == "ok" for line in plugins.splitlines()[1:])


def test_one_backup_holds_the_file_as_it_was(host):
    names = host.check_output("ls -a /etc/containerd").split()
    backups = [n for n in names if n.startswith("config.toml.") and n.endswith("~")]
    assert len(backups) == 1, names
    assert host.file("/etc/containerd/" + backups[0]).content_string == ""


def test_the_container_started_before_the_change_still_runs(host):
    tasks = host.check_output("ctr task ls").splitlines()[1:]
    assert any(line.split()[0] == "keeper" and line.split()[-1] == "RUNNING" for line in tasks), tasks
