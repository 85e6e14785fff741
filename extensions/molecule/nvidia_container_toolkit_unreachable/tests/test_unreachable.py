# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""After the role stopped on an unreachable repository, the node is as it was."""

PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)


def test_no_source_or_key_was_written(host):
    assert not host.file("/etc/apt/sources.list.d/nvidia-container-toolkit.sources").exists
    assert not host.file("/etc/apt/keyrings/nvidia-container-toolkit-keyring.asc").exists


def test_no_package_was_installed(host):
    for name in PACKAGES:
        assert not host.package(name).is_installed, name
