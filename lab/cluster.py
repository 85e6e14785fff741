# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab's single-node Kubernetes on this machine: real etcd, kube-apiserver,
kube-controller-manager, kube-scheduler, containerd and kubelet, started as plain
processes (there is no systemd here) and stopped by PID.

    python lab/cluster.py up [--device-plugin gpuops] [--profile h100-8x-nvswitch.yaml]
    python lab/cluster.py status
    python lab/cluster.py down [--purge]
    python lab/cluster.py env        # KUBECONFIG=... and friends, for `eval`
    python lab/cluster.py profile PROFILE   # the mock GPUs' "driver" changes (lab upgrades)

Everything it writes lives under STATE_DIR, RUN_DIR and the kubelet's root dir, plus
one bridge (BRIDGE) that carries the node IP and the pod network. `down` stops what
`up` started, unmounts what the kubelet and containerd mounted under those paths, and
removes the bridge; `--purge` also deletes the state (certificates, etcd data, images).
Needs root (the kubelet and containerd do).

This file is the command line; the lab's parts are rooms of their own in lab/lablib (its
__init__.py lists them), which lab/nodes.py builds on too.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from lablib.control_plane import start_control_plane
from lablib.device_plugin import start_device_plugin, switch_profile, write_ansible_vars
from lablib.health import gpu_allocatable, http_get, kubectl, node_ready
from lablib.host_node import ensure_bridge, start_containerd_and_kubelet, write_configs
from lablib.images import binaries
from lablib.layout import (
    ADMIN_KUBECONFIG,
    COMPONENTS,
    KUBELET_ROOT,
    LAB,
    NODE_NAME,
    PLUGIN_DIR,
    RUN_DIR,
    STATE_DIR,
)
from lablib.pki import make_pki, write_kubeconfigs
from lablib.processes import (
    LabError,
    log,
    require_root,
    running_pid,
    saved_spec,
    script_output,
    start,
    stop,
    wait_for,
)
from lablib.teardown import tear_down


def up(args):
    t0 = time.monotonic()
    require_root()
    bins = binaries()
    missing = [str(p) for p in bins.values() if not os.access(p, os.X_OK)]
    if missing:
        raise LabError("missing binaries: %s (run `bash lab/install-deps.sh cluster`)" % ", ".join(missing))
    for directory in (STATE_DIR, RUN_DIR, KUBELET_ROOT, PLUGIN_DIR):
        directory.mkdir(parents=True, exist_ok=True)
    make_pki()
    write_configs()
    write_kubeconfigs()
    ensure_bridge()
    start_control_plane(bins)
    start_containerd_and_kubelet(bins)
    # Pods in `default` need its ServiceAccount, which the controller-manager creates.
    wait_for(
        "the default ServiceAccount",
        lambda: kubectl(bins, "get", "serviceaccount", "default", check=False).returncode == 0,
        60,
        "kube-controller-manager",
    )
    node_env = start_device_plugin(args.profile) if args.device_plugin == "gpuops" else {}
    write_ansible_vars(node_env)
    if node_env:
        # The kubelet posts the plugin's devices with its next status update (up to 10 s).
        wait_for(
            "nvidia.com/gpu allocatable on %s" % NODE_NAME,
            lambda: gpu_allocatable(bins) > 0,
            60,
            "device-plugin",
        )
    log("up in %.1f s; export KUBECONFIG=%s" % (time.monotonic() - t0, ADMIN_KUBECONFIG))
    print(kubectl(bins, "get", "nodes", "-o", "wide").stdout, end="")


def down(args):
    require_root()
    tear_down(args.purge)


def status(_args):
    """Exit 0 when the control plane answers and the node is Ready."""
    rows = []
    total = 0
    for name in COMPONENTS:
        pid = running_pid(name)
        rss = ""
        if pid:
            for line in Path("/proc/%d/status" % pid).read_text().splitlines():
                if line.startswith("VmRSS:"):
                    rss = "%d MiB" % (int(line.split()[1]) // 1024)
                    total += int(line.split()[1])
        rows.append("%-24s %-8s %s" % (name, pid or "-", rss))
    rows.append("%-24s %-8s %d MiB" % ("total (RSS)", "", total // 1024))
    print("\n".join(rows))
    if not running_pid("kube-apiserver") or not ADMIN_KUBECONFIG.exists():
        print("cluster: down")
        return 1
    kubectl_bin = Path(script_output(LAB / "kube" / "build.sh")[-1]) / "kubectl"
    ready = node_ready({"kubectl": kubectl_bin})
    print("node %s: %s" % (NODE_NAME, "Ready" if ready else "NotReady"))
    return 0 if ready else 1


def restart(args):
    """Stop one component and start it again with the arguments `up` gave it."""
    require_root()
    spec = saved_spec(args.component)
    if args.action in ("stop", "restart"):
        stop(args.component)
    if args.action in ("start", "restart"):
        start(args.component, spec["argv"], spec["env"])
        if args.component == "kubelet":
            wait_for(
                "the kubelet's healthz",
                lambda: http_get("http://127.0.0.1:10248/healthz")[1] == "ok",
                60,
                "kubelet",
            )
    return 0


def set_profile(args):
    """Point the node's mock NVML at another profile, as a driver change would: the device
    plugin restarts with it and plays on the node see it (ansible-vars.json)."""
    require_root()
    switch_profile(args.profile)
    return 0


def env(_args):
    kube_bin = script_output(LAB / "kube" / "build.sh")[-1]
    print("export KUBECONFIG=%s" % ADMIN_KUBECONFIG)
    print("export PATH=%s:$PATH" % kube_bin)
    print("export GPUOPS_LAB_NODE=%s" % NODE_NAME)
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="lab/cluster.py", description=__doc__.split("\n\n", maxsplit=1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start the cluster (idempotent) and wait until the node is Ready")
    p_up.add_argument("--device-plugin", choices=["none", "gpuops"], default="none")
    p_up.add_argument(
        "--profile", default="h100-8x-nvswitch.yaml", help="mock NVML profile for the device plugin"
    )
    p_up.set_defaults(func=up)
    p_down = sub.add_parser("down", help="stop everything up started and unmount what it mounted")
    p_down.add_argument("--purge", action="store_true", help="also delete certificates, etcd data and images")
    p_down.set_defaults(func=down)
    sub.add_parser("status", help="components, PIDs, memory; exit 0 if the node is Ready").set_defaults(
        func=status
    )
    for action, what in (("restart", "stop and start"), ("stop", "stop"), ("start", "start")):
        p_one = sub.add_parser(action, help="%s one component as `up` started it" % what)
        p_one.add_argument("component", choices=COMPONENTS)
        p_one.set_defaults(func=restart, action=action)
    p_profile = sub.add_parser("profile", help="restart the device plugin over another mock NVML profile")
    p_profile.add_argument("profile", help="a file in lab/profiles, or an absolute path")
    p_profile.set_defaults(func=set_profile)
    sub.add_parser("env", help="shell exports for kubectl against the lab").set_defaults(func=env)
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except LabError as exc:
        log("error: %s" % exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
