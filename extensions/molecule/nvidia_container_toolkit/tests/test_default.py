# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the nvidia_container_toolkit role leaves on a lab node, read from the node itself.

The packages come from a stand-in mirror (see files/make-standin-mirror.sh): NVIDIA's
names and versions, not NVIDIA's software. The mirror also offers a newer 1.19.0-1.
Each check is one command: testinfra's ansible backend pays seconds per command.
"""

PACKAGES = (
    "nvidia-container-toolkit",
    "nvidia-container-toolkit-base",
    "libnvidia-container-tools",
    "libnvidia-container1",
)
PINNED = "1.18.2-1"
KEYRING = "/etc/apt/keyrings/nvidia-container-toolkit-keyring.asc"
MIRROR_KEY = "/srv/nvidia-mirror/gpgkey"
SOURCE = "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"
INSTALL_GUIDE_SOURCE = "/etc/apt/sources.list.d/nvidia-container-toolkit.list"


def test_every_package_is_installed_at_the_pinned_version_and_held(host):
    # Status-Want is dpkg's selection: "hold" for a held package.
    out = host.check_output(
        "dpkg-query --show --showformat='${Package} ${Version} ${db:Status-Want} ${db:Status-Status}\\n' "
        + " ".join(PACKAGES)
    )
    assert sorted(out.splitlines()) == sorted(f"{name} {PINNED} hold installed" for name in PACKAGES)


def test_the_pinned_stand_in_binary_runs(host):
    assert "version 1.18.2 (stand-in)" in host.check_output("nvidia-ctk --version")


def test_the_hold_keeps_the_newer_release_out_of_apt_upgrade(host):
    out = host.check_output("apt-cache policy nvidia-container-toolkit && apt-get --simulate upgrade")
    assert "Candidate: 1.19.0-1" in out
    assert not [line for line in out.splitlines() if line.startswith("Inst") and "nvidia-container" in line]


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
