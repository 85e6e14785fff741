# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab's Kubernetes nodes: systemd podman containers, each with its own containerd and
a kubelet (the lab's build, KUBE_VERSION) joined to lab/cluster.py's control plane, reached over
SSH as a non-root user with sudo, the way a real fleet is.

    python lab/nodes.py up [--count N]   # default 2 (or $LAB_NODES); needs `lab/cluster.py up`
    python lab/nodes.py status
    python lab/nodes.py nvidia-dra NODE  # NVIDIA's DRA driver's image into NODE's containerd
    python lab/nodes.py down

Node i is gpuops-node-<i> at 10.252.1.<10+i> on the podman network NETWORK: odd nodes
Debian 12 with its containerd 1.6, even nodes Debian 13 with its containerd 1.7. They
start with nothing of NVIDIA's: no driver, toolkit, nvidia runtime or device plugin.
Node 2 is air-gapped: no default route (the host, with the API server and the mirror, is
its only way out) and apt sources that name the mirror's Debian subset only.
`up` leaves an Ansible inventory of them (INVENTORY) and the SSH key, config and known
hosts it names under SSH_DIR, and serves the fleet's package mirror (MIRROR_URL: NVIDIA's
Container Toolkit built from source, the lab driver packages) from the host. `down`
removes the containers, their Node objects, the mirror's server and the network; their
certificates stay with the lab's PKI (`lab/cluster.py down --purge`).

This file is the command line; the nodes' parts are rooms in lab/lablib (node_containers,
node_join, mirror), beside the host's that lab/cluster.py runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from lablib.health import https_get, kubectl, node_ready
from lablib.images import binaries
from lablib.layout import API_PORT, LAB
from lablib.mirror import MIRROR_URL, publish_mirror
from lablib.node_containers import (
    INVENTORY,
    NETWORK,
    NODES_DIR,
    SSH_DIR,
    container_stamp,
    ensure_inotify_limits,
    ensure_network,
    existing_nodes,
    node_exec,
    planned,
    podman,
    remove,
    stamp,
    start_node,
)
from lablib.node_join import admit_ssh, join, ssh_config, ssh_key, write_inventory
from lablib.processes import LabError, log, require_root, running_pid, script_output, stop, wait_for


def up(args):
    t0 = time.monotonic()
    require_root()
    bins = binaries()
    try:
        https_get("https://127.0.0.1:%d/readyz" % API_PORT)
    except OSError as exc:
        raise LabError("the lab's control plane is not up (%s): run `make lab-up` first" % exc) from exc
    nodes = planned(args.count)
    for extra in set(existing_nodes()) - set(nodes):
        remove(bins, extra)
    NODES_DIR.mkdir(parents=True, exist_ok=True)
    ensure_inotify_limits()
    ensure_network()
    public_key = ssh_key().with_suffix(".pub").read_text().strip()
    images = [tuple(line.split()) for line in script_output(LAB / "kube" / "images.sh")]
    known_hosts = {}
    for node in nodes:
        image = script_output(LAB / "kube-node-image.sh", node.suite)[-1]
        image_id = podman("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
        wanted = stamp(node, image_id, bins, images)
        if container_stamp(node) == wanted and node_ready(bins, node.name):
            log("%s already up" % node.name)
            known_hosts[node] = admit_ssh(node, public_key)
            continue
        log("%s: starting (%s, %s)" % (node.name, image, node.ip))
        kubectl(bins, "delete", "node", node.name, "--ignore-not-found", check=False)
        start_node(node, image, wanted)
        known_hosts[node] = join(node, bins, images, public_key)
    (SSH_DIR / "known_hosts").write_text("".join("%s\n" % line for line in known_hosts.values()))
    ssh_config(nodes)
    write_inventory(nodes)
    # After the nodes: the gateway address exists once a container is on the network.
    publish_mirror(nodes)
    for node in nodes:
        wait_for("node %s Ready" % node.name, lambda n=node: node_ready(bins, n.name), 180)
    log("%d node(s) up in %.1f s; inventory %s" % (len(nodes), time.monotonic() - t0, INVENTORY))
    print(kubectl(bins, "get", "nodes", "-o", "wide").stdout, end="")


def down(_args):
    require_root()
    bins = binaries()
    stop("mirror")
    for node in existing_nodes():
        remove(bins, node)
    if podman("network", "exists", NETWORK, check=False).returncode == 0:
        podman("network", "rm", NETWORK)
    INVENTORY.unlink(missing_ok=True)


def status(_args):
    bins = binaries()
    for node in existing_nodes():
        ready = node_ready(bins, node.name)
        print("%-16s %-9s %-14s %s" % (node.name, node.suite, node.ip, "Ready" if ready else "not Ready"))
    pid = running_pid("mirror")
    served = "pid %d" % pid if pid else "stopped"
    print("%-16s %-9s %-14s %s" % ("mirror", "-", MIRROR_URL.split("//")[1], served))


def nvidia_dra(args):
    """NVIDIA's DRA driver for a node, as no registry can serve it here: its image (built from
    its source, lab/kube/nvidia-dra-image.sh) imported into the node's containerd, and what
    device_plugin_mode nvidia_dra then installs it with, as JSON: the release's chart
    directory and the lab's helm."""
    require_root()
    found = [node for node in existing_nodes() if node.name == args.node]
    if not found:
        raise LabError("no lab node %s is running (lab/nodes.py status)" % args.node)
    node = found[0]
    image, archive = script_output(LAB / "kube" / "nvidia-dra-image.sh")[-1].split()
    chart = script_output(LAB / "peer" / "build-nvidia-dra.sh")[-1] + "/chart"
    helm = script_output(LAB / "kube" / "helm.sh")[-1] + "/helm"
    if image not in node_exec(node, "ctr -n k8s.io images ls -q").stdout.split():
        started = time.monotonic()
        inside = "/var/lib/gpuops-lab-images/nvidia-dra.tar"
        podman("cp", archive, "%s:%s" % (node.name, inside))
        # As lab/lablib/node_join.py imports the lab's images: the archive's tag names it.
        node_exec(node, "ctr -n k8s.io images import %s >/dev/null; rm -f %s" % (inside, inside))
        log("%s: imported %s in %.1f s" % (node.name, image, time.monotonic() - started))
    print(json.dumps({"image": image, "chart": chart, "helm": helm}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start the nodes (idempotent) and wait until each is Ready")
    p_up.add_argument("--count", type=int, default=int(os.environ.get("LAB_NODES", "2")))
    p_up.set_defaults(func=up)
    sub.add_parser("down", help="remove the nodes, their Node objects and their network").set_defaults(
        func=down
    )
    sub.add_parser("status", help="each node and whether it is Ready").set_defaults(func=status)
    p_dra = sub.add_parser("nvidia-dra", help="NVIDIA's DRA driver's image into NODE's containerd")
    p_dra.add_argument("node")
    p_dra.set_defaults(func=nvidia_dra)
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except LabError as exc:
        print("lab: error: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
