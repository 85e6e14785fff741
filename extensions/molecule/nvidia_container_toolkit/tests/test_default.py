# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the nvidia_container_toolkit role leaves on a lab node, read from the node itself.

The packages come from lab/toolkit/build.sh: NVIDIA's Go source at v1.20.2 (and 1.17.8,
which side_effect.yml pins and removes again), NVIDIA's package names, versions and
dependencies, built by the lab (not by NVIDIA). The node has no NVIDIA driver.
Each check is one command: testinfra's ansible backend pays seconds per command.
"""

import json
import tomllib

PINNED = "1.20.2-1"
KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit-keyring.asc"
MIRROR_KEY = "/srv/nvidia-mirror/gpgkey"
SOURCE = "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"
INSTALL_GUIDE_SOURCE = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"
PROGRAMS = ("/usr/bin/nvidia-ctk", "/usr/bin/nvidia-container-runtime", "/usr/bin/nvidia-cdi-hook")


def test_the_base_package_is_installed_at_the_pin_and_held_and_nothing_else_of_the_toolkit(host):
    # Status-Want is dpkg's selection: "hold" for a held package.
    out = host.check_output(
        "dpkg-query --show --showformat='${Package} ${Version} ${db:Status-Want} ${db:Status-Status}\\n'"
        " 'nvidia-container-toolkit*' 'libnvidia-container*' 2>/dev/null || true"
    )
    installed = [line for line in out.splitlines() if line.endswith(" installed")]
    assert installed == [f"nvidia-container-toolkit-base {PINNED} hold installed"]


def test_the_programs_are_elf_binaries_built_from_nvidias_source_at_the_pin(host):
    magic = "for f in %s; do head -c 4 $f | od -An -c | tr -d ' '; done" % " ".join(PROGRAMS)
    out = host.check_output("nvidia-ctk --version && " + magic)
    assert out.splitlines() == ["NVIDIA Container Toolkit CLI version 1.20.2"] + ["177ELF"] * len(PROGRAMS)
    # Marked as the lab's build of NVIDIA's source, so nobody takes it for NVIDIA's package.
    field = host.check_output(
        "dpkg-query --show --showformat='${Gpuops-Lab-Build}' nvidia-container-toolkit-base"
    )
    assert field.endswith(
        "from github.com/NVIDIA/nvidia-container-toolkit@v1.20.2; not a package built by NVIDIA"
    )


def test_the_runtime_is_in_cdi_mode_in_the_config_nvidia_ctk_wrote(host):
    config = tomllib.loads(host.file("/etc/nvidia-container-runtime/config.toml").content_string)
    runtime = config["nvidia-container-runtime"]
    assert runtime["mode"] == "cdi"
    # Written by nvidia-ctk (the package's postinst, then the role): its defaults are there.
    assert runtime["modes"]["cdi"]["spec-dirs"] == ["/etc/cdi", "/var/run/cdi"]


def test_nvidias_refresh_units_watch_for_the_driver_and_the_roles_own_are_gone(host):
    out = host.check_output(
        "systemctl show --property=Id,ActiveState,UnitFileState"
        " nvidia-cdi-refresh.path nvidia-cdi-refresh.service"
        " && echo && ls /etc/systemd/system /etc/systemd/system/multi-user.target.wants"
    )
    path_unit, service = (block.splitlines() for block in out.split("\n\n")[:2])
    assert path_unit == ["Id=nvidia-cdi-refresh.path", "ActiveState=active", "UnitFileState=enabled"]
    # The oneshot service ran at install and was skipped: no nvidia-smi on this node.
    assert service == ["Id=nvidia-cdi-refresh.service", "ActiveState=inactive", "UnitFileState=enabled"]
    assert "gpuops-cdi-refresh" not in out


def runs(host):
    lines = host.file("/var/tmp/nvidia_container_toolkit_runs.jsonl").content_string.splitlines()
    return [json.loads(line) for line in lines]


def test_no_driver_so_no_spec_and_the_role_said_why(host):
    (converge,) = runs(host)
    assert not converge["check_mode"]
    assert converge["cdi"]["driver"] == "absent"
    assert not converge["cdi"]["generated"] and not converge["cdi"]["changed"]
    assert converge["cdi"]["message"].startswith(
        "No CDI specification generated for /var/run/cdi/nvidia.yaml: no NVIDIA driver is installed"
    )
    assert "failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND" in converge["cdi"]["message"]
    assert converge["cdi"]["message"].endswith(
        "nvidia-cdi-refresh.path generates it once the driver is installed or changes."
    )
    assert not host.file("/var/run/cdi/nvidia.yaml").exists


def test_the_keyring_is_the_mirror_key_armored_and_root_owned(host):
    out = host.check_output(
        f"stat -c '%U %G %a' {KEYRING} && cmp {KEYRING} {MIRROR_KEY} && head -1 {KEYRING}"
    )
    assert out.splitlines() == ["root root 644", "-----BEGIN PGP PUBLIC KEY BLOCK-----"]


def test_the_source_is_deb822_signed_by_that_keyring_and_replaces_the_guide_list(host):
    out = host.check_output(f"cat {SOURCE} && ! test -e {INSTALL_GUIDE_SOURCE}")
    fields = dict(line.split(": ", 1) for line in out.splitlines() if line and not line.startswith("#"))
    assert fields == {
        "Types": "deb",
        "URIs": "http://127.0.0.1:8750/stable/deb/$(ARCH)",
        "Suites": "/",
        "Signed-By": KEYRING,
    }


def test_apt_verifies_the_repository_with_that_keyring_alone(host):
    # Only this source, into a scratch lists directory (the node's own lists stay as they
    # are), and any warning (an unsigned or badly signed index) is an error.
    update = host.run(
        "lists=$(mktemp -d) && mkdir $lists/partial && chown -R _apt $lists"
        " && apt-get update --error-on=any -o Dir::State::Lists=$lists"
        f" -o Dir::Etc::SourceList={SOURCE} -o Dir::Etc::SourceParts=/nonexistent"
        " -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=;"
        " rc=$?; rm -rf $lists; exit $rc"
    )
    assert update.rc == 0, update.stdout + update.stderr
    assert "127.0.0.1:8750" in update.stdout
