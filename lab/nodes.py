# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab's Kubernetes nodes: systemd podman containers, each with its own containerd and
a kubelet (the lab's build, KUBE_VERSION) joined to lab/cluster.py's control plane, reached over
SSH as a non-root user with sudo, the way a real fleet is.

    python lab/nodes.py up [--count N]   # default 2 (or $LAB_NODES); needs `lab/cluster.py up`
    python lab/nodes.py status
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
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import cluster
from cluster import LAB, STATE_DIR, LabError, log, run

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
# The air-gapped node (issue 18): site.yml passing there proves that docs/air-gapped.md's
# mirrors are all a site needs. Its apt sources name the mirror's Debian subset, which
# holds what site.yml's roles install from the distribution on a node with the lab's
# image (and whatever those packages need). A role that starts to fetch anything else
# fails there: add it here only once docs/air-gapped.md says where a site mirrors it.
AIR_GAPPED_NODES = (2,)
DEBIAN_PACKAGES = (
    "python3-pynvml",  # nvidia_driver, for gpu_info
    "python3-tomlkit",  # container_runtime
    "python3-venv",  # device_plugin (mode gpuops)
    "python3-packaging",  # device_plugin (mode gpuops), for ansible.builtin.pip
)
DEBIAN_MIRROR = MIRROR_DIR / "debian"


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


# --- what a fleet's provisioning gives the node (the "user's" settings) ----------------


def containerd_config():
    """The node's own containerd settings, as its provisioning wrote them; gpuops's
    container_runtime must keep every line of it."""
    return "\n".join(
        [
            "# Written by the site's node provisioning (lab/nodes.py); keep this comment.",
            "version = 2",
            '[plugins."io.containerd.grpc.v1.cri"]',
            "  # No registry here: the lab's own pause image, imported at join.",
            '  sandbox_image = "%s"' % cluster.PAUSE_IMAGE,
            "  # The host withholds CAP_SYS_RESOURCE even from root, so runc cannot lower a",
            "  # process's OOM score (the kubelet asks -998 for sandboxes).",
            "  restrict_oom_score_adj = true",
            '  [plugins."io.containerd.grpc.v1.cri".cni]',
            '    bin_dir = "/usr/lib/cni"',
            '    conf_dir = "/etc/cni/net.d"',
            '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
            '    runtime_type = "io.containerd.runc.v2"',
            '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]',
            "      SystemdCgroup = %s" % ("true" if CGROUP_DRIVER == "systemd" else "false"),
            "",
        ]
    )


def cni_config(node):
    return {
        "cniVersion": "0.4.0",
        "name": "gpuops-lab",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": node.pod_subnet}]]},
            },
            {"type": "loopback"},
        ],
    }


def kubelet_config():
    return cluster.kubelet_configuration(
        ca_file="/etc/kubernetes/pki/ca.crt",
        cert_file="/etc/kubernetes/pki/kubelet-serving.crt",
        key_file="/etc/kubernetes/pki/kubelet-serving.key",
        containerd_socket=CONTAINERD_SOCK,
        cgroup_driver=CGROUP_DRIVER,
        max_pods=16,
    )


def kubelet_unit(node):
    return "\n".join(
        [
            "[Unit]",
            "Description=kubelet (joined to the gpuops lab's control plane by lab/nodes.py)",
            "After=containerd.service",
            "Wants=containerd.service",
            "[Service]",
            "ExecStart=/usr/local/bin/kubelet --config=/etc/kubernetes/kubelet.yaml"
            " --kubeconfig=/etc/kubernetes/kubelet.kubeconfig --node-ip=%s" % node.ip,
            "Restart=always",
            "RestartSec=2",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def stage(node, bins, images):
    """The node's join files in a tree laid out like its root, for `podman cp`."""
    pki = node.state / "pki"
    pki.mkdir(parents=True, exist_ok=True)
    cluster.issue_certificate(pki, "kubelet-client", "system:node:%s" % node.name, "system:nodes")
    cluster.issue_certificate(pki, "kubelet-serving", node.name, server=True, dns=[node.name], ips=[node.ip])
    root = Path(tempfile.mkdtemp(prefix="gpuops-node-", dir="/var/tmp"))
    kube = root / "etc" / "kubernetes"
    (kube / "pki").mkdir(parents=True)
    shutil.copy(cluster.PKI / "ca.crt", kube / "pki" / "ca.crt")
    for stem in ("kubelet-serving",):
        shutil.copy(pki / ("%s.crt" % stem), kube / "pki")
        shutil.copy(pki / ("%s.key" % stem), kube / "pki")
    cluster.write_kubeconfig(
        kube / "kubelet.kubeconfig",
        "system:node:%s" % node.name,
        "kubelet-client",
        pki=pki,
        server="https://%s:%d" % (GATEWAY, cluster.API_PORT),
        # The API server's certificate names it "kubernetes", not by the gateway's address.
        tls_server_name="kubernetes",
    )
    (kube / "kubelet.yaml").write_text(json.dumps(kubelet_config(), indent=2))
    (root / "etc" / "containerd").mkdir(parents=True)
    (root / "etc" / "containerd" / "config.toml").write_text(containerd_config())
    (root / "etc" / "cni" / "net.d").mkdir(parents=True)
    (root / "etc" / "cni" / "net.d" / "10-gpuops-lab.conflist").write_text(
        json.dumps(cni_config(node), indent=2)
    )
    (root / "etc" / "systemd" / "system").mkdir(parents=True)
    (root / "etc" / "systemd" / "system" / "kubelet.service").write_text(kubelet_unit(node))
    (root / "usr" / "local" / "bin").mkdir(parents=True)
    shutil.copy(bins["kubelet"], root / "usr" / "local" / "bin" / "kubelet")
    (root / "var" / "lib" / "gpuops-lab-images").mkdir(parents=True)
    for name, archive in images:
        shutil.copy(archive, root / "var" / "lib" / "gpuops-lab-images" / (name.replace("/", "_") + ".tar"))
    return root


# --- SSH ----------------------------------------------------------------------------


def ssh_key():
    key = SSH_DIR / "id_ed25519"
    if not key.exists():
        SSH_DIR.mkdir(parents=True, exist_ok=True, mode=0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuops-lab", "-f", str(key)])
    return key


def ssh_config(nodes):
    lines = ["# The lab's nodes (lab/nodes.py); `ssh -F %s gpuops-node-1`" % (SSH_DIR / "config")]
    for node in nodes:
        lines += [
            # By name and by address: Ansible connects to ansible_host, the address.
            "Host %s %s" % (node.name, node.ip),
            "  HostName %s" % node.ip,
            "  User %s" % ADMIN_USER,
            "  IdentityFile %s" % (SSH_DIR / "id_ed25519"),
            "  IdentitiesOnly yes",
            # Each node makes its own host key at up; `up` records it here.
            "  UserKnownHostsFile %s" % (SSH_DIR / "known_hosts"),
            "  StrictHostKeyChecking yes",
        ]
    (SSH_DIR / "config").write_text("\n".join(lines) + "\n")


def admit_ssh(node, public_key):
    """A host key of the node's own, our key for its admin user; its host key line."""
    node_exec(
        node,
        "test -f /etc/ssh/ssh_host_ed25519_key || ssh-keygen -q -A\n"
        # Right after boot systemd may still be settling ssh.service's first (keyless) try.
        "for i in $(seq 50); do systemctl restart ssh && break; sleep 0.2; done\n"
        "systemctl is-active --quiet ssh || { systemctl status ssh --no-pager >&2; exit 1; }\n"
        f"install -d -o {ADMIN_USER} -g {ADMIN_USER} -m 0700 /home/{ADMIN_USER}/.ssh\n"
        f"printf '%s\\n' '{public_key}' >/home/{ADMIN_USER}/.ssh/authorized_keys\n"
        f"chown {ADMIN_USER}:{ADMIN_USER} /home/{ADMIN_USER}/.ssh/authorized_keys",
    )
    host_key = node_exec(node, "cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub").stdout.strip()
    return "%s,%s %s" % (node.name, node.ip, host_key)


# --- the mirror -------------------------------------------------------------------------


def made_for(directory, wanted):
    """Whether DIRECTORY was last filled for WANTED: its .stamp, written last, says so."""
    stamp_file = directory / ".stamp"
    return stamp_file.is_file() and stamp_file.read_text() == wanted


def driver_repo_stamp():
    digest = hashlib.sha256(" ".join(DRIVER_VERSIONS).encode())
    for part in ("driver/build-repo.sh", "driver/driver-root.sh", "profiles/h100-8x-nvswitch.yaml"):
        digest.update((LAB / part).read_bytes())
    digest.update(cluster.script_output(LAB / "mocknvml" / "build.sh")[-1].encode())
    return digest.hexdigest()[:16]


def fill_wheelhouse():
    """pip download of the device plugin role's pinned requirements, for each node Python."""
    import yaml  # noqa: PLC0415 - the lab venv's, only needed here

    defaults = yaml.safe_load(
        (cluster.ROOT / "roles" / "device_plugin" / "defaults" / "main.yml").read_text()
    )
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
    image = cluster.script_output(LAB / "kube-node-image.sh", suite)[-1]
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
    toolkit = Path(cluster.script_output(LAB / "toolkit" / "build.sh")[-1])
    link = MIRROR_DIR / "nvidia-container-toolkit"
    if not link.is_symlink() or link.readlink() != toolkit:
        link.unlink(missing_ok=True)
        link.symlink_to(toolkit)
    driver = MIRROR_DIR / "gpuops-lab-driver"
    wanted = driver_repo_stamp()
    if not made_for(driver, wanted):
        log("building the lab driver packages %s" % ", ".join(DRIVER_VERSIONS))
        shutil.rmtree(driver, ignore_errors=True)
        cluster.script_output(LAB / "driver" / "build-repo.sh", str(driver), *DRIVER_VERSIONS)
        (driver / ".stamp").write_text(wanted)
    for suite in sorted({node.suite for node in nodes if node.air_gapped}):
        fill_debian_subset(suite)
    fill_wheelhouse()
    cluster.start(
        "mirror",
        [sys.executable, "-m", "http.server", str(MIRROR_PORT), "--bind", GATEWAY, "--directory", MIRROR_DIR],
    )
    cluster.wait_for(
        "the mirror at %s" % MIRROR_URL,
        lambda: cluster.http_get("%s/gpuops-lab-driver/Packages" % MIRROR_URL)[0] == 200,
        30,
        "mirror",
    )


# --- up / down / status ----------------------------------------------------------------


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
    """What a running node must match to be kept: its image, this file, the kubelet, the
    images imported at join (their archives' paths carry their build's hash)."""
    digest = hashlib.sha256()
    kubelet = str(os.stat(bins["kubelet"]).st_mtime_ns)
    archives = [archive for _name, archive in images]
    for part in (image_id, Path(__file__).read_bytes(), kubelet, node.name, *archives):
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


def start_node(node, image, wanted):
    podman("rm", "-f", node.name, check=False)
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


def join(node, bins, images, public_key):
    """Provision the node as a fleet would before gpuops: containerd configured, kubelet joined."""
    node_exec(node, "systemctl is-system-running --wait >/dev/null || true")
    known = admit_ssh(node, public_key)
    root = stage(node, bins, images)
    try:
        podman("cp", "%s/." % root, "%s:/" % node.name)
    finally:
        shutil.rmtree(root)
    script = ["systemctl restart containerd"]
    # ctr answers once containerd serves its socket; an import before that loses content.
    script.append("for i in $(seq 100); do ctr version >/dev/null 2>&1 && break; sleep 0.2; done")
    for name, _archive in images:
        # No --index-name: ctr 1.6 and 1.7 then write an index of their own that their
        # garbage collector can take before the import ends ("content digest sha256:...:
        # not found"). The archive's own tag names the image.
        archive = "/var/lib/gpuops-lab-images/%s.tar" % name.replace("/", "_")
        script.append("ctr -n k8s.io images import %s >/dev/null" % archive)
    script += ["systemctl daemon-reload", "systemctl enable --now kubelet"]
    node_exec(node, "\n".join(script))
    if node.air_gapped:
        air_gap(node)
    return known


def write_inventory(nodes):
    hosts = {
        node.name: {
            "ansible_host": node.ip,
            "ansible_user": ADMIN_USER,
            "ansible_ssh_common_args": "-F %s" % (SSH_DIR / "config"),
            "ansible_become": True,
            "ansible_python_interpreter": "/usr/bin/python3",
            "gpuops_lab_node_suite": node.suite,
            "gpuops_lab_node_air_gapped": node.air_gapped,
            "gpuops_lab_mirror_url": MIRROR_URL,
        }
        for node in nodes
    }
    INVENTORY.write_text(json.dumps({"gpuops_lab_nodes": {"hosts": hosts}}, indent=2) + "\n")


def existing_nodes():
    out = podman("ps", "-a", "--filter", "label=%s" % LABEL, "--format", "{{.Names}}")
    return [
        Node(int(name.rsplit("-", 1)[1])) for name in out.stdout.split() if name.startswith("gpuops-node-")
    ]


def up(args):
    t0 = time.monotonic()
    cluster.require_root()
    bins = cluster.binaries()
    try:
        cluster.https_get("https://127.0.0.1:%d/readyz" % cluster.API_PORT)
    except OSError as exc:
        raise LabError("the lab's control plane is not up (%s): run `make lab-up` first" % exc) from exc
    nodes = planned(args.count)
    for extra in set(existing_nodes()) - set(nodes):
        remove(bins, extra)
    NODES_DIR.mkdir(parents=True, exist_ok=True)
    ensure_inotify_limits()
    ensure_network()
    public_key = ssh_key().with_suffix(".pub").read_text().strip()
    images = [tuple(line.split()) for line in cluster.script_output(LAB / "kube" / "images.sh")]
    known_hosts = {}
    for node in nodes:
        image = cluster.script_output(LAB / "kube-node-image.sh", node.suite)[-1]
        image_id = podman("image", "inspect", "--format", "{{.Id}}", image).stdout.strip()
        wanted = stamp(node, image_id, bins, images)
        if container_stamp(node) == wanted and cluster.node_ready(bins, node.name):
            log("%s already up" % node.name)
            known_hosts[node] = admit_ssh(node, public_key)
            continue
        log("%s: starting (%s, %s)" % (node.name, image, node.ip))
        cluster.kubectl(bins, "delete", "node", node.name, "--ignore-not-found", check=False)
        start_node(node, image, wanted)
        known_hosts[node] = join(node, bins, images, public_key)
    (SSH_DIR / "known_hosts").write_text("".join("%s\n" % line for line in known_hosts.values()))
    ssh_config(nodes)
    write_inventory(nodes)
    # After the nodes: the gateway address exists once a container is on the network.
    publish_mirror(nodes)
    for node in nodes:
        cluster.wait_for("node %s Ready" % node.name, lambda n=node: cluster.node_ready(bins, n.name), 180)
    log("%d node(s) up in %.1f s; inventory %s" % (len(nodes), time.monotonic() - t0, INVENTORY))
    print(cluster.kubectl(bins, "get", "nodes", "-o", "wide").stdout, end="")


def remove(bins, node):
    podman("rm", "--force", "--time", "10", node.name, check=False)
    cluster.kubectl(bins, "delete", "node", node.name, "--ignore-not-found", "--wait=false", check=False)
    log("removed %s" % node.name)


def down(_args):
    cluster.require_root()
    bins = cluster.binaries()
    cluster.stop("mirror")
    for node in existing_nodes():
        remove(bins, node)
    if podman("network", "exists", NETWORK, check=False).returncode == 0:
        podman("network", "rm", NETWORK)
    INVENTORY.unlink(missing_ok=True)


def status(_args):
    bins = cluster.binaries()
    for node in existing_nodes():
        ready = cluster.node_ready(bins, node.name)
        print("%-16s %-9s %-14s %s" % (node.name, node.suite, node.ip, "Ready" if ready else "not Ready"))
    pid = cluster.running_pid("mirror")
    served = "pid %d" % pid if pid else "stopped"
    print("%-16s %-9s %-14s %s" % ("mirror", "-", MIRROR_URL.split("//")[1], served))


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
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except LabError as exc:
        print("lab: error: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
