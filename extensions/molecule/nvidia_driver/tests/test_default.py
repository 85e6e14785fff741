# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the nvidia_driver role leaves on a GPU-less Debian 12 lab node, read from the node."""

import json
import os

import pytest

# What the role installs, and the DKMS source it holds with them.
DRIVER_PACKAGES = [
    "nvidia-driver",
    "libcuda1",
    "nvidia-smi",
    "libnvidia-ml1",
    "nvidia-persistenced",
    "nvidia-kernel-dkms",
]


def ends_with_newline(host, path):
    # Output through Ansible loses a trailing newline: ask for the last byte instead.
    return host.check_output("tail -c 1 %s | od -An -tx1", path).strip() == "0a"


def dpkg_field(host, package, field):
    return host.check_output("dpkg-query -W -f='${%s}' %s" % (field, package))


@pytest.mark.parametrize("package", DRIVER_PACKAGES)
def test_driver_package_is_installed_on_the_535_branch_and_held(host, package):
    assert dpkg_field(host, package, "db:Status-Abbrev").strip() == "hi"  # hold, installed
    assert dpkg_field(host, package, "Version").startswith("535.")


def test_the_full_driver_came_from_debian_non_free(host):
    # The real metapackage with its X and GL pieces, not a stand-in.
    for package in ["xserver-xorg-video-nvidia", "nvidia-driver-libs", "firmware-nvidia-gsp"]:
        assert host.package(package).is_installed
    assert host.file("/usr/bin/nvidia-smi").exists
    assert host.file("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").exists


def test_apt_pins_the_driver_sources_to_the_branch(host):
    path = "/etc/apt/preferences.d/nvidia-driver.pref"
    text = host.file(path).content_string
    assert "\nPackage: src:nvidia-graphics-drivers src:nvidia-persistenced " in text
    assert text.endswith("\nPin: version 535.*\nPin-Priority: 1001")
    assert ends_with_newline(host, path)
    # apt reads the file: the installed version carries the pin's priority.
    policy = host.check_output("apt-cache policy nvidia-driver")
    assert " *** 535." in policy
    assert " 1001\n" in policy


def test_nouveau_is_blacklisted_with_modesetting_off(host):
    blacklist = host.file("/etc/modprobe.d/blacklist-nouveau.conf")
    assert blacklist.mode == 0o644
    text = blacklist.content_string
    assert text.startswith("# Managed by Ansible")
    assert text.endswith("\nblacklist nouveau\noptions nouveau modeset=0")
    assert ends_with_newline(host, blacklist.path)


def test_module_parameters_are_one_options_line_for_debians_module_name(host):
    path = "/etc/modprobe.d/nvidia-params.conf"
    text = host.file(path).content_string
    options = [line for line in text.splitlines() if not line.startswith("#")]
    # Sorted by name; the boolean false written as 0.
    assert options == [
        "options nvidia-current NVreg_DeviceFileMode=0660 NVreg_EnableGpuFirmware=0 "
        "NVreg_RestrictProfilingToAdminUsers=0"
    ]
    assert ends_with_newline(host, path)


def test_debians_own_modprobe_file_is_left_alone(host):
    # Debian's nvidia.conf maps `nvidia` to its renamed module; overwriting it breaks loading.
    link = host.file("/etc/modprobe.d/nvidia.conf")
    assert link.is_symlink
    assert "install nvidia modprobe -i nvidia-current" in link.content_string


def test_persistenced_is_enabled_with_persistence_mode(host):
    assert host.service("nvidia-persistenced").is_enabled
    exec_start = host.check_output("systemctl show -p ExecStart --value nvidia-persistenced")
    assert "/usr/bin/nvidia-persistenced --user nvpd --persistence-mode --verbose" in exec_start
    drop_in = host.check_output("systemctl show -p DropInPaths --value nvidia-persistenced")
    assert "/etc/systemd/system/nvidia-persistenced.service.d/gpuops-k8s.conf" in drop_in


def test_persistenced_was_not_started_without_a_driver(host):
    # This host shows privileged containers a /dev/nvidiactl with no NVIDIA driver behind it.
    assert not host.file("/proc/driver/nvidia/version").exists
    assert not host.service("nvidia-persistenced").is_running


def runs(host):
    lines = host.file("/var/tmp/nvidia_driver_runs.jsonl").content_string.splitlines()
    return [json.loads(line) for line in lines]


def recorded_changes(host, name):
    # Written by extensions/molecule/callback_plugins/changed_tasks.py.
    directory = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "changed-tasks")
    with open(os.path.join(directory, name)) as handle:
        names = json.load(handle)[host.backend.get_hostname()]
    return [name.removeprefix("gpuops.k8s.nvidia_driver : ") for name in names]


def test_check_mode_predicted_the_same_changed_tasks_as_the_real_run(host):
    predicted = recorded_changes(host, "converge-check-1.json")
    real = recorded_changes(host, "converge-real-1.json")
    assert "Install the NVIDIA driver packages" in real
    # On a fresh node check mode cannot predict one change: it runs no command (the
    # initramfs handler). The hold of packages not installed yet, which dpkg cannot be
    # asked about, its stand-in reports under the real task's name.
    unpredictable = ["Regenerate the initramfs"]
    assert all(name in real for name in unpredictable)
    assert predicted == [name for name in real if name not in unpredictable]


def test_reboot_is_pending_after_each_run_and_says_why(host):
    check, converge, idempotence = runs(host)
    changed = "driver packages, the nouveau blacklist or module parameters changed in this run"
    not_loaded = "the NVIDIA kernel module is not loaded (installed driver 535."
    # Check mode installs nothing: only the change it predicts.
    assert check["check_mode"] and check["reboot_pending"]
    assert check["reboot_reasons"] == [changed]
    # The real run changed the driver, which is installed and not loaded.
    assert not converge["check_mode"] and converge["reboot_pending"]
    assert converge["reboot_reasons"][0] == changed
    assert converge["reboot_reasons"][1].startswith(not_loaded)
    # Nothing changed the second time; the driver is still not the running one.
    assert idempotence["reboot_pending"]
    assert len(idempotence["reboot_reasons"]) == 1
    assert idempotence["reboot_reasons"][0].startswith(not_loaded)
