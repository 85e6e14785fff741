# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet's package mirror, served by the host to the lab's nodes: NVIDIA's Container
Toolkit built from source, the lab driver packages, the device plugin's wheels and the
air-gapped nodes' Debian subset."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

from .health import http_get
from .layout import LAB, ROOT, STATE_DIR
from .node_containers import GATEWAY, node_exec, podman
from .processes import log, run, script_output, start, wait_for

# The fleet's package mirror, served by the host to the nodes (no NVIDIA repository is
# reachable here, as in an air-gapped site): NVIDIA's Container Toolkit built from its
# source (lab/toolkit/build.sh, signed) and the lab driver packages (lab/driver).
MIRROR_DIR = STATE_DIR / "mirror"
MIRROR_PORT = 8750
MIRROR_URL = "http://%s:%d" % (GATEWAY, MIRROR_PORT)
DRIVER_VERSIONS = ("550.163.01", "560.35.03")
# The device plugin's wheels for the nodes' Pythons (Debian 12: 3.11, Debian 13: 3.13):
# its role installs them from the controller (device_plugin_wheelhouse), as on a fleet
# that reaches no PyPI.
WHEELHOUSE = MIRROR_DIR / "device-plugin-wheels"
NODE_PYTHONS = ("3.11", "3.13")
# The air-gapped nodes' apt sources (AIR_GAPPED_NODES, node_containers.py) name the
# mirror's Debian subset, which holds what site.yml's roles install from the distribution
# on a node with the lab's image (and whatever those packages need). A role that starts to
# fetch anything else fails there: add it here only once docs/air-gapped.md says where a
# site mirrors it.
DEBIAN_PACKAGES = (
    "python3-pynvml",  # nvidia_driver, for gpu_info
    "python3-tomlkit",  # container_runtime
    "python3-venv",  # device_plugin (mode gpuops)
    "python3-packaging",  # device_plugin (mode gpuops), for ansible.builtin.pip
)
DEBIAN_MIRROR = MIRROR_DIR / "debian"


def made_for(directory, wanted):
    """Whether DIRECTORY was last filled for WANTED: its .stamp, written last, says so."""
    stamp_file = directory / ".stamp"
    return stamp_file.is_file() and stamp_file.read_text() == wanted


def driver_repo_stamp():
    digest = hashlib.sha256(" ".join(DRIVER_VERSIONS).encode())
    parts = (
        "driver/build-repo.sh",
        "driver/driver-root.sh",
        "driver/nvidia-smi.sh",
        "profiles/h100-8x-nvswitch.yaml",
    )
    for part in parts:
        digest.update((LAB / part).read_bytes())
    digest.update(script_output(LAB / "mocknvml" / "build.sh")[-1].encode())
    return digest.hexdigest()[:16]


def fill_wheelhouse():
    """pip download of the device plugin role's pinned requirements, for each node Python."""
    import yaml  # noqa: PLC0415 - the lab venv's, only needed here

    defaults = yaml.safe_load((ROOT / "roles" / "device_plugin" / "defaults" / "main.yml").read_text())
    requirements = defaults["device_plugin_requirements"] + defaults["device_plugin_build_requirements"]
    wanted = hashlib.sha256(json.dumps([requirements, NODE_PYTHONS]).encode()).hexdigest()[:16]
    if made_for(WHEELHOUSE, wanted):
        return
    log("downloading the device plugin's wheels for Python %s" % ", ".join(NODE_PYTHONS))
    shutil.rmtree(WHEELHOUSE, ignore_errors=True)
    for version in NODE_PYTHONS:
        run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:"]
            + ["--python-version", version, "--dest", str(WHEELHOUSE)]
            + [
                "--platform=%s" % tag
                for tag in ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_28_x86_64")
            ]
            + requirements
        )
    (WHEELHOUSE / ".stamp").write_text(wanted)


def fill_debian_subset(suite):
    """DEBIAN_PACKAGES and what they need on the suite's node image, as a flat apt
    repository under DEBIAN_MIRROR: resolved and downloaded by apt in a throwaway container
    of that image, with the lab driver's repository beside Debian's (python3-pynvml needs
    the libnvidia-ml.so.1 it provides, as a site's driver mirror would)."""
    image = script_output(LAB / "kube-node-image.sh", suite)[-1]
    image_id = podman("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
    driver = MIRROR_DIR / "gpuops-lab-driver"
    wanted = hashlib.sha256(
        json.dumps([image_id, DEBIAN_PACKAGES, (driver / ".stamp").read_text()]).encode()
    ).hexdigest()[:16]
    out = DEBIAN_MIRROR / suite
    if made_for(out, wanted):
        return
    log("filling the mirror's Debian %s subset: %s and what they need" % (suite, ", ".join(DEBIAN_PACKAGES)))
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # With Recommends, as container_runtime and device_plugin install. The driver's newest
    # version: each has the same dependencies.
    script = (
        "echo 'deb [trusted=yes] file:/driver ./' >/etc/apt/sources.list.d/gpuops-lab-driver.list\n"
        "apt-get update -q >/dev/null\n"
        "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --download-only "
        "gpuops-lab-driver %s >/dev/null\n"
        "cp /var/cache/apt/archives/*.deb /out/" % " ".join(DEBIAN_PACKAGES)
    )
    podman(
        "run",
        "--rm",
        "--entrypoint",
        "/bin/bash",
        "--volume",
        "%s:/driver:ro" % driver,
        "--volume",
        "%s:/out" % out,
        image,
        "-euc",
        script,
    )
    run(["bash", "-c", "dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages"], cwd=out)
    (out / ".stamp").write_text(wanted)


def air_gap(node):
    """Cut the node's route out and point its apt at the mirror's Debian subset only."""
    node_exec(
        node,
        "rm -f /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list\n"
        "echo 'deb [trusted=yes] %s/debian/%s ./' >/etc/apt/sources.list.d/gpuops-lab-mirror.list\n"
        # On-link, NODES_SUBNET stays: the host (API server, mirror, DNS) and the other nodes.
        "ip route del default\n"
        "! ip route show | grep -q '^default'" % (MIRROR_URL, node.suite),
    )


def publish_mirror(nodes):
    """The mirror's tree (the toolkit's signed repository, the driver packages) and its
    server, a lab component like the API server."""
    MIRROR_DIR.mkdir(parents=True, exist_ok=True)
    toolkit = Path(script_output(LAB / "toolkit" / "build.sh")[-1])
    link = MIRROR_DIR / "nvidia-container-toolkit"
    if not link.is_symlink() or link.readlink() != toolkit:
        link.unlink(missing_ok=True)
        link.symlink_to(toolkit)
    driver = MIRROR_DIR / "gpuops-lab-driver"
    wanted = driver_repo_stamp()
    if not made_for(driver, wanted):
        log("building the lab driver packages %s" % ", ".join(DRIVER_VERSIONS))
        shutil.rmtree(driver, ignore_errors=True)
        script_output(LAB / "driver" / "build-repo.sh", str(driver), *DRIVER_VERSIONS)
        (driver / ".stamp").write_text(wanted)
    for suite in sorted({node.suite for node in nodes if node.air_gapped}):
        fill_debian_subset(suite)
    fill_wheelhouse()
    start(
        "mirror",
        [sys.executable, "-m", "http.server", str(MIRROR_PORT), "--bind", GATEWAY, "--directory", MIRROR_DIR],
    )
    wait_for(
        "the mirror at %s" % MIRROR_URL,
        lambda: http_get("%s/gpuops-lab-driver/Packages" % MIRROR_URL)[0] == 200,
        30,
        "mirror",
    )
