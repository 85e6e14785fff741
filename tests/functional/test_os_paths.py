# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The Ubuntu and RHEL paths of nvidia_driver and nvidia_container_toolkit, at unit level.

Only Debian nodes run here (molecule, the lab). For Ubuntu 22.04/24.04 and RHEL 9 these
tests ask the real ansible-playbook what the roles would install: their defaults and per-OS
vars under pretended facts, the package arguments of their apt/dnf/yum_repository tasks and
their templates (apt pin, deb822 source), each taken verbatim from the role's files. They
assert the exact package names, repositories, keys and pins, so a change to any of them
shows up here; whether those packages exist on a real Ubuntu or RHEL node is not tested.
"""

import yaml
from resolve import PLAYBOOK, find_task, resolve, task_arg, template_expr

INVENTORY = "gpu-node-1,"
DRIVER_VARS = [
    "__nvidia_driver_packages",
    "__nvidia_driver_hold_packages",
    "__nvidia_driver_version",
    "__nvidia_driver_version_package",
    "__nvidia_driver_versioned_package",
    "__nvidia_driver_headers_packages",
    "__nvidia_driver_fabricmanager_package",
    "__nvidia_driver_module_name",
    "__nvidia_driver_modprobe_file",
    "__nvidia_driver_persistenced_user",
    "__nvidia_driver_initramfs_command",
]
TOOLKIT_VARS = [
    "__nvidia_container_toolkit_repository_url",
    "__nvidia_container_toolkit_probe_url",
    "__nvidia_container_toolkit_package_specs",
    "__nvidia_container_toolkit_keyring",
    "nvidia_container_toolkit_key_url",
]
TOOLKIT_PACKAGES = [
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
]
NVIDIA_TOOLKIT_REPO = "https://nvidia.github.io/libnvidia-container/stable"


def apt_exprs():
    return {
        "apt_install": task_arg(
            "nvidia_driver",
            "install_apt.yml",
            "Install the NVIDIA driver packages",
            "ansible.builtin.apt",
            "name",
        ),
        "apt_pin": template_expr("nvidia_driver", "apt-preferences.j2"),
        "toolkit_source": template_expr("nvidia_container_toolkit", "nvidia-container-toolkit.sources.j2"),
    }


def dnf_exprs():
    repo_task = (
        "nvidia_driver",
        "install_dnf.yml",
        "Add NVIDIA's CUDA repository",
        "ansible.builtin.yum_repository",
    )
    toolkit_repo = (
        "nvidia_container_toolkit",
        "dnf.yml",
        "Declare the repository, its metadata signed by that key",
        "ansible.builtin.yum_repository",
    )
    return {
        "dnf_install": task_arg(
            "nvidia_driver",
            "install_dnf.yml",
            "Install the nvidia-driver module stream",
            "ansible.builtin.dnf",
            "name",
        ),
        "cuda_baseurl": task_arg(*repo_task, "baseurl"),
        "cuda_gpgkey": task_arg(*repo_task, "gpgkey"),
        "toolkit_baseurl": task_arg(*toolkit_repo, "baseurl"),
        "toolkit_gpgkey": task_arg(*toolkit_repo, "gpgkey"),
        "toolkit_repo_gpgcheck": task_arg(*toolkit_repo, "repo_gpgcheck"),
    }


def one_host(tmp_path, facts, exprs, extra=None):
    return resolve(
        INVENTORY, DRIVER_VARS + TOOLKIT_VARS, facts=facts, exprs=exprs, extra=extra, tmp_path=tmp_path
    )["gpu-node-1"]


def test_ubuntu_2204_driver_and_toolkit(tmp_path):
    got = one_host(tmp_path, "ubuntu2204", apt_exprs())
    assert got["__nvidia_driver_packages"] == ["nvidia-driver-535"]
    assert got["apt_install"] == ["nvidia-driver-535=535.*"]
    assert got["__nvidia_driver_hold_packages"] == ["nvidia-driver-535"]
    assert got["__nvidia_driver_version_package"] == "nvidia-driver-535"
    assert got["__nvidia_driver_versioned_package"] == "nvidia-driver-535"
    assert got["__nvidia_driver_headers_packages"] == [
        "linux-headers-5.15.0-91-generic",
        "linux-headers-generic",
    ]
    assert got["__nvidia_driver_fabricmanager_package"] == "nvidia-fabricmanager-535"
    assert got["__nvidia_driver_module_name"] == "nvidia"
    assert got["__nvidia_driver_modprobe_file"] == "/etc/modprobe.d/nvidia.conf"
    assert got["__nvidia_driver_persistenced_user"] == "nvidia-persistenced"
    assert got["__nvidia_driver_initramfs_command"] == ["update-initramfs", "-u", "-k", "all"]
    pin = [line for line in got["apt_pin"].splitlines() if not line.startswith("#")]
    assert pin == [
        "Explanation: gpuops.k8s.nvidia_driver branch 535",
        "Package: src:nvidia-graphics-drivers-535 src:nvidia-graphics-drivers-535-server"
        " src:fabric-manager-535",
        "Pin: version 535.*",
        "Pin-Priority: 1001",
    ]
    # Ubuntu is of the Debian family: the toolkit's flat apt repository, amd64.
    assert got["__nvidia_container_toolkit_repository_url"] == NVIDIA_TOOLKIT_REPO + "/deb/$(ARCH)"
    assert got["__nvidia_container_toolkit_probe_url"] == NVIDIA_TOOLKIT_REPO + "/deb/amd64/InRelease"
    assert got["__nvidia_container_toolkit_package_specs"] == [p + "=1.20.2-1" for p in TOOLKIT_PACKAGES]
    assert got["nvidia_container_toolkit_key_url"] == "https://nvidia.github.io/libnvidia-container/gpgkey"
    source = [line for line in got["toolkit_source"].splitlines() if not line.startswith("#")]
    assert source == [
        "Types: deb",
        "URIs: " + NVIDIA_TOOLKIT_REPO + "/deb/$(ARCH)",
        "Suites: /",
        "Signed-By: /etc/apt/keyrings/nvidia-container-toolkit-keyring.asc",
    ]


def test_ubuntu_2204_a_sites_own_driver_packages(tmp_path):
    # nvidia_driver_packages: exactly those are installed, pinned and held, and the first
    # one's version is the driver's; nothing of the distribution's list is added.
    extra = {
        "nvidia_driver_packages": ["site-nvidia-driver", "site-nvidia-utils"],
        "nvidia_driver_version": "550.*",
    }
    got = one_host(tmp_path, "ubuntu2204", apt_exprs(), extra)
    assert got["apt_install"] == ["site-nvidia-driver=550.*", "site-nvidia-utils=550.*"]
    assert got["__nvidia_driver_hold_packages"] == ["site-nvidia-driver", "site-nvidia-utils"]
    assert got["__nvidia_driver_versioned_package"] == "site-nvidia-driver"
    assert "Package: site-nvidia-driver site-nvidia-utils" in got["apt_pin"].splitlines()


def test_ubuntu_2404_headless_pinned_branch_on_arm(tmp_path):
    extra = {
        "nvidia_driver_branch": "570",
        "nvidia_driver_variant": "headless",
        "nvidia_driver_version": "570.172.08-0ubuntu*",
    }
    got = one_host(tmp_path, "ubuntu2404", apt_exprs(), extra)
    assert got["__nvidia_driver_packages"] == ["nvidia-headless-570-server", "nvidia-utils-570-server"]
    assert got["apt_install"] == [
        "nvidia-headless-570-server=570.172.08-0ubuntu*",
        "nvidia-utils-570-server=570.172.08-0ubuntu*",
    ]
    assert got["__nvidia_driver_version_package"] == "nvidia-headless-570-server"
    assert got["__nvidia_driver_fabricmanager_package"] == "nvidia-fabricmanager-570"
    assert got["__nvidia_driver_headers_packages"] == [
        "linux-headers-6.8.0-31-generic",
        "linux-headers-generic",
    ]
    assert "Pin: version 570.172.08-0ubuntu*" in got["apt_pin"].splitlines()
    assert got["__nvidia_container_toolkit_probe_url"] == NVIDIA_TOOLKIT_REPO + "/deb/arm64/InRelease"


def test_rhel9_driver_module_stream_and_repositories(tmp_path):
    got = one_host(tmp_path, "rhel9", dnf_exprs())
    assert got["__nvidia_driver_packages"] == ["@nvidia-driver:535-dkms", "nvidia-persistenced"]
    assert got["dnf_install"] == ["@nvidia-driver:535-dkms", "nvidia-persistenced"]
    assert got["cuda_baseurl"] == "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/"
    assert (
        got["cuda_gpgkey"]
        == "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/D42D0685.pub"
    )
    assert got["__nvidia_driver_headers_packages"] == ["kernel-devel-5.14.0-427.13.1.el9_4.x86_64"]
    assert got["__nvidia_driver_fabricmanager_package"] == "nvidia-fabric-manager"
    assert got["__nvidia_driver_version_package"] == "nvidia-driver"
    assert got["__nvidia_driver_module_name"] == "nvidia"
    assert got["__nvidia_driver_persistenced_user"] == "nvidia-persistenced"
    assert got["__nvidia_driver_initramfs_command"] == ["dracut", "--force", "--regenerate-all"]
    assert got["toolkit_baseurl"] == NVIDIA_TOOLKIT_REPO + "/rpm/$basearch"
    assert (
        got["__nvidia_container_toolkit_probe_url"] == NVIDIA_TOOLKIT_REPO + "/rpm/x86_64/repodata/repomd.xml"
    )
    assert got["toolkit_gpgkey"] == "file:///etc/pki/rpm-gpg/RPM-GPG-KEY-nvidia-container-toolkit"
    assert got["toolkit_repo_gpgcheck"] is True
    assert got["__nvidia_container_toolkit_package_specs"] == [p + "-1.20.2-1" for p in TOOLKIT_PACKAGES]


def test_rhel9_arm_headless_from_a_mirror(tmp_path):
    mirror = "https://mirror.example.internal/cuda/rhel9/sbsa/"
    extra = {
        "nvidia_driver_variant": "headless",
        "nvidia_driver_branch": "550",
        "nvidia_driver_rhel_repository_url": mirror,
    }
    got = one_host(tmp_path, "rhel9-arm", dnf_exprs(), extra)
    assert got["dnf_install"] == ["@nvidia-driver:550-dkms/ks", "nvidia-persistenced"]
    assert got["cuda_baseurl"] == mirror
    assert got["cuda_gpgkey"] == mirror + "D42D0685.pub"
    assert (
        got["__nvidia_container_toolkit_probe_url"]
        == NVIDIA_TOOLKIT_REPO + "/rpm/aarch64/repodata/repomd.xml"
    )


def test_rhel9_arm_uses_nvidias_sbsa_repository(tmp_path):
    got = one_host(tmp_path, "rhel9-arm", dnf_exprs())
    assert got["cuda_baseurl"] == "https://developer.download.nvidia.com/compute/cuda/repos/rhel9/sbsa/"


def test_resolve_loads_os_vars_as_the_roles_do():
    """resolve_vars.yml picks the per-OS vars files exactly as the roles' tasks/main.yml do."""
    play = yaml.safe_load(PLAYBOOK.read_text(encoding="utf-8"))[0]
    ours = {task["name"]: task for task in play["tasks"]}
    driver = find_task("nvidia_driver", "main.yml", "Load the OS's package names and paths")
    mine = ours["Load nvidia_driver's OS vars (the same first_found as its tasks/main.yml)"]
    assert (
        driver["vars"]["__nvidia_driver_os_vars"]["files"]
        == mine["vars"]["__resolve_driver_os_vars"]["files"]
    )
    toolkit = find_task("nvidia_container_toolkit", "main.yml", "Load the package manager's settings")
    mine = ours["Load nvidia_container_toolkit's OS vars (as its tasks/main.yml does)"]
    assert mine["ansible.builtin.include_vars"].endswith("/" + toolkit["ansible.builtin.include_vars"])


def test_debian12_baseline(tmp_path):
    """The path molecule tests on real Debian 12, through the same resolution."""
    got = one_host(tmp_path, "debian12", apt_exprs())
    assert got["__nvidia_driver_packages"] == [
        "nvidia-driver",
        "libcuda1",
        "nvidia-smi",
        "libnvidia-ml1",
        "nvidia-persistenced",
    ]
    assert got["__nvidia_driver_module_name"] == "nvidia-current"
    assert got["__nvidia_driver_fabricmanager_package"] == ""
    assert got["__nvidia_driver_headers_packages"] == ["linux-headers-6.1.0-28-amd64", "linux-headers-amd64"]
