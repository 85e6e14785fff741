# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab's Kubernetes nodes (lab/nodes.py) as podman containers: their names, addresses
and network, the containers' lifecycle, and the stamp that says whether a running one is
kept."""

from __future__ import annotations

import hashlib
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from .health import kubectl
from .layout import LAB, STATE_DIR
from .processes import LabError, log, run

NETWORK = "gpuops-lab-nodes"
NODES_SUBNET = "10.252.1.0/24"
# The host's address on NETWORK: where the nodes reach the API server.
GATEWAY = "10.252.1.1"
NODES_DIR = STATE_DIR / "nodes"
SSH_DIR = STATE_DIR / "ssh"
INVENTORY = NODES_DIR / "hosts.yml"
ADMIN_USER = "gpuops"
LABEL = "gpuops.lab-node"
CONTAINERD_SOCK = "/run/containerd/containerd.sock"
CGROUP_DRIVER = "systemd"
# The air-gapped node (issue 18): site.yml passing there proves that docs/air-gapped.md's
# mirrors are all a site needs. Its apt sources name the mirror's Debian subset only
# (DEBIAN_PACKAGES, mirror.py), and it has no default route.
AIR_GAPPED_NODES = (2,)
# The code that makes a node, lab/nodes.py's and its rooms': part of each node's stamp, so
# that `up` replaces a node another version of it made.
NODE_CODE = (
    LAB / "nodes.py",
    LAB / "lablib" / "node_containers.py",
    LAB / "lablib" / "node_join.py",
    LAB / "lablib" / "mirror.py",
)


@dataclass(frozen=True)
class Node:
    index: int

    @property
    def name(self):
        return "gpuops-node-%d" % self.index

    @property
    def suite(self):
        return "bookworm" if self.index % 2 else "trixie"

    @property
    def ip(self):
        return str(ipaddress.ip_network(NODES_SUBNET).network_address + 10 + self.index)

    @property
    def air_gapped(self):
        return self.index in AIR_GAPPED_NODES

    @property
    def pod_subnet(self):
        return "10.244.%d.0/24" % self.index

    @property
    def state(self):
        return NODES_DIR / self.name


def planned(count):
    if not 1 <= count <= 8:
        raise LabError("--count/LAB_NODES is %r: the lab runs 1 to 8 nodes" % count)
    return [Node(i) for i in range(1, count + 1)]


def podman(*args, check=True):
    return run(
        ["podman", *args], check=check, env=dict(os.environ, CONTAINERS_CONF=str(LAB / "containers.conf"))
    )


def node_exec(node, script, check=True):
    return podman("exec", node.name, "bash", "-euc", script, check=check)


# Every node's systemd, kubelet and containerd, molecule's nodes and the host's own take
# inotify instances from one per-user count (root is the same user in each privileged
# container), 128 by default. Exhausted, a node's path units fail ("Failed to enter waiting
# state: Too many open files", result 'resources'), the drift guard's among them. make
# test's lanes beside 3 nodes were seen at 75; these are the values kind's known issues
# give for kubelets in containers, for headroom.
INOTIFY_LIMITS = {"max_user_instances": 512, "max_user_watches": 524288}


def ensure_inotify_limits():
    for name, wanted in INOTIFY_LIMITS.items():
        path = Path("/proc/sys/fs/inotify") / name
        current = int(path.read_text())
        if current < wanted:
            print("lab: fs.inotify.%s %d -> %d (kubelets in containers)" % (name, current, wanted))
            path.write_text("%d\n" % wanted)


def ensure_network():
    if podman("network", "exists", NETWORK, check=False).returncode != 0:
        podman("network", "create", "--subnet", NODES_SUBNET, "--gateway", GATEWAY, NETWORK)


def stamp(node, image_id, bins, images):
    """What a running node must match to be kept: its image, the code that makes it
    (NODE_CODE), the kubelet, the images imported at join (their archives' paths carry their
    build's hash)."""
    digest = hashlib.sha256()
    kubelet = str(os.stat(bins["kubelet"]).st_mtime_ns)
    archives = [archive for _name, archive in images]
    code = b"".join(path.read_bytes() for path in NODE_CODE)
    for part in (image_id, code, kubelet, node.name, *archives):
        digest.update(part if isinstance(part, bytes) else part.encode())
    return digest.hexdigest()[:16]


def container_stamp(node):
    out = podman(
        "inspect",
        "--format",
        '{{ index .Config.Labels "%s" }} {{.State.Running}}' % LABEL,
        node.name,
        check=False,
    )
    label, _sep, running = out.stdout.strip().rpartition(" ")
    return label if out.returncode == 0 and running == "true" else None


def discard(name):
    """Remove a node's container at once (SIGKILL, no shutdown). A node's systemd takes the
    host's name=systemd cgroup hierarchy for its own (its units sit at the hierarchy's root,
    beside the other nodes'), and on a clean shutdown it trims every empty cgroup there: the
    other nodes' own empty name=systemd cgroups too, after which `podman exec` into them
    fails ("error adding pid ... to cgroups: ... libpod-<id>/cgroup.procs: no such file or
    directory"). A lab node keeps nothing worth a clean stop."""
    podman("rm", "--force", "--time", "0", name, check=False)


def start_node(node, image, wanted):
    discard(node.name)
    podman(
        "run",
        "--detach",
        "--name",
        node.name,
        "--hostname",
        node.name,
        "--label",
        "%s=%s" % (LABEL, wanted),
        "--privileged",
        "--systemd=always",
        # Its own cgroup namespace: runc in the node mounts a container's cgroups from the
        # paths in /proc/self/cgroup, which without one are the host's ("error mounting
        # cgroup ... no such file or directory").
        "--cgroupns=private",
        "--network",
        NETWORK,
        "--ip",
        node.ip,
        # overlayfs cannot stack on the node's own overlay root: containerd's snapshots and
        # the kubelet's volumes go on tmpfs (the node lives as long as its container).
        "--tmpfs",
        "/var/lib/containerd:rw,mode=0755,size=4g",
        "--tmpfs",
        "/var/lib/kubelet:rw,mode=0755,size=1g",
        # dockerd's too, on a node where the fleet runs Docker beside the kubelet.
        "--tmpfs",
        "/var/lib/docker:rw,mode=0710,size=4g",
        image,
    )


def existing_nodes():
    out = podman("ps", "-a", "--filter", "label=%s" % LABEL, "--format", "{{.Names}}")
    return [
        Node(int(name.rsplit("-", 1)[1])) for name in out.stdout.split() if name.startswith("gpuops-node-")
    ]


def remove(bins, node):
    discard(node.name)
    kubectl(bins, "delete", "node", node.name, "--ignore-not-found", "--wait=false", check=False)
    log("removed %s" % node.name)
