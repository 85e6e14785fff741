# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What `down` undoes: the components, what runs in the kubelet's pods and the lab
containerd's shims, the mounts under the lab's directories, the pods' network namespaces,
the kubepods cgroups and the bridge."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from pathlib import Path

from .images import ctr
from .layout import (
    ANSIBLE_VARS,
    BRIDGE,
    CGROUP_V1,
    COMPONENTS,
    CONTAINERD_SOCK,
    KUBELET_ROOT,
    RUN_DIR,
    STATE_DIR,
)
from .processes import LabError, log, run, running_pid, stop, wait_gone


def lab_mounts():
    """Mount points under the lab's directories (and its pods' network namespaces), deepest first."""
    roots = [str(KUBELET_ROOT), str(STATE_DIR), str(RUN_DIR)]
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if any(point == r or point.startswith(r + "/") for r in roots):
            points.append(point)
    return sorted(set(points), key=lambda p: p.count("/"), reverse=True)


def shim_pids():
    """containerd-shim processes that serve the lab's containerd (re-parented to PID 1)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and b"containerd-shim" in argv[0] and str(CONTAINERD_SOCK).encode() in argv:
            pids.append(int(proc.name))
    return pids


def kubepods_cgroups():
    """The kubelet's cgroups (cgroupfs driver) in every v1 hierarchy, deepest first."""
    found = []
    for hierarchy in CGROUP_V1.iterdir():
        top = hierarchy / "kubepods"
        if top.is_dir():
            found.extend(dirpath for dirpath, _dirs, _files in os.walk(top))
    return sorted(found, key=lambda p: p.count("/"), reverse=True)


def pod_netns_paths(bins):
    """Network namespaces of the lab's pod sandboxes, read from containerd before it stops."""
    paths = set()
    if not running_pid("containerd"):
        return paths
    for cid in ctr(bins, "containers", "ls", "-q", check=False).stdout.split():
        info = ctr(bins, "containers", "info", cid, check=False).stdout
        try:
            spec = json.loads(info).get("Spec") or {}
        except ValueError:
            continue
        for ns in spec.get("linux", {}).get("namespaces", []):
            if ns.get("type") == "network" and ns.get("path", "").startswith("/var/run/netns/"):
                paths.add(ns["path"].replace("/var/run/", "/run/", 1))
    return paths


def remove_netns(paths):
    """Unmount and remove the pods' network namespace files. One can be mounted more than
    once (one umount each), or sit under a later bind mount of /run/netns on itself (podman
    makes one for the lab nodes' namespaces, as `ip netns` does): unlink then says EBUSY,
    and the file is left and said, not fatal."""
    for path in paths:
        for _attempt in range(5):
            if not os.path.ismount(path):
                break
            run(["umount", "--lazy", path], check=False)
        try:
            Path(path).unlink(missing_ok=True)
        except OSError as error:
            log("left %s: %s" % (path, error.strerror))


def tear_down(purge):
    """Everything `up` started, mounted and made, gone; with purge, its state too. Fails
    naming what is left."""
    bins = {"ctr": Path(shutil.which("ctr") or "/usr/bin/ctr")}
    stop("device-plugin")
    stop("kubelet")
    netns = pod_netns_paths(bins)
    # The containers: every process in the kubelet's pod cgroups, then the shims.
    for cgroup in kubepods_cgroups():
        procs = Path(cgroup, "cgroup.procs")
        for pid in procs.read_text().split() if procs.exists() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
    shims = shim_pids()
    for pid in shims:
        os.kill(pid, signal.SIGKILL)
    wait_gone(shims, 10)
    stop("containerd")
    for name in ("kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd"):
        stop(name)
    for point in lab_mounts():
        run(["umount", "--lazy", point], check=False)
    remove_netns(netns)
    for cgroup in kubepods_cgroups():
        with contextlib.suppress(OSError):
            os.rmdir(cgroup)
    if run(["ip", "link", "show", BRIDGE], check=False).returncode == 0:
        run(["ip", "link", "del", BRIDGE])
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    ANSIBLE_VARS.unlink(missing_ok=True)
    if purge:
        shutil.rmtree(STATE_DIR, ignore_errors=True)
        shutil.rmtree(KUBELET_ROOT, ignore_errors=True)
        log("purged %s and %s" % (STATE_DIR, KUBELET_ROOT))
    left = leftovers()
    if left:
        raise LabError("still there after down: %s" % "; ".join(left))
    log("down")


def leftovers():
    left = ["pid %d (%s)" % (pid, name) for name in COMPONENTS if (pid := running_pid(name))]
    left += ["shim pid %d" % pid for pid in shim_pids()]
    left += ["mount %s" % point for point in lab_mounts()]
    return left
