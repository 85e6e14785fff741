# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab's binaries and container images: built by the lab's scripts (cached; each prints
what it made), the images imported into the host's containerd."""

from __future__ import annotations

import shutil
from pathlib import Path

from .layout import CONTAINERD_SOCK, LAB
from .processes import log, run, script_output


def binaries():
    kube_bin = Path(script_output(LAB / "kube" / "build.sh")[-1])
    etcd_bin = Path(script_output(LAB / "kube" / "etcd.sh")[-1])
    return {
        "kube-apiserver": kube_bin / "kube-apiserver",
        "kube-controller-manager": kube_bin / "kube-controller-manager",
        "kube-scheduler": kube_bin / "kube-scheduler",
        "kubelet": kube_bin / "kubelet",
        "kubectl": kube_bin / "kubectl",
        "etcd": etcd_bin / "etcd",
        "containerd": Path(shutil.which("containerd") or "/usr/bin/containerd"),
        "ctr": Path(shutil.which("ctr") or "/usr/bin/ctr"),
    }


def ctr(bins, *args, check=True):
    return run([str(bins["ctr"]), "-a", str(CONTAINERD_SOCK), "-n", "k8s.io", *args], check=check)


def import_images(bins):
    # Always: importing an archive already there is quick, and a rebuilt one replaces it.
    for line in script_output(LAB / "kube" / "images.sh"):
        name, archive = line.split()
        # Named by the archive's own tag: --index-name makes ctr write an index that
        # containerd's garbage collector can take before the import ends.
        ctr(bins, "images", "import", archive)
        log("imported %s" % name)
