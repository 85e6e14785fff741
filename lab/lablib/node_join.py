# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a lab node gets when it joins, as a fleet's provisioning would give it: containerd,
CNI and kubelet settings, its certificates and kubeconfig, the images, SSH for its admin
user, and the Ansible inventory of the nodes."""

from __future__ import annotations

import ipaddress
import json
import shutil
import tempfile
from pathlib import Path

from .host_node import kubelet_configuration
from .layout import API_PORT, PAUSE_IMAGE, PKI, SERVICE_CIDR
from .mirror import MIRROR_URL, air_gap
from .node_containers import (
    ADMIN_USER,
    CGROUP_DRIVER,
    CONTAINERD_SOCK,
    GATEWAY,
    INVENTORY,
    SSH_DIR,
    node_exec,
    podman,
)
from .pki import issue_certificate, write_kubeconfig
from .processes import run

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
            '  sandbox_image = "%s"' % PAUSE_IMAGE,
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
                # Service addresses through the node (service_routing), nothing else.
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": node.pod_subnet}]],
                    "routes": [{"dst": SERVICE_CIDR}],
                },
            },
            {"type": "loopback"},
        ],
    }


# The API server's Service address (kubernetes.default), the first of SERVICE_CIDR, as
# the API server allocates it and its certificate names it (lab/lablib/pki.py).
API_SERVICE_IP = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))


def service_routing(node):
    """What a pod's in-cluster client needs to reach the API server (NVIDIA's DRA kubelet
    plugin is one): the lab runs no kube-proxy, so the node carries the one rule kube-proxy
    would write for the kubernetes Service (its address, port 443, to the API server on the
    host), plus masquerading, as the host has no route back to the pods' subnet. Not kube-proxy:
    no other Service is reachable from a lab pod."""
    return [
        "iptables -t nat -A PREROUTING -d %s/32 -p tcp --dport 443 -j DNAT --to-destination %s:%d"
        % (API_SERVICE_IP, GATEWAY, API_PORT),
        "iptables -t nat -A POSTROUTING -s %s -d %s/32 -j MASQUERADE" % (node.pod_subnet, GATEWAY),
    ]


def kubelet_config():
    return kubelet_configuration(
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
    issue_certificate(pki, "kubelet-client", "system:node:%s" % node.name, "system:nodes")
    issue_certificate(pki, "kubelet-serving", node.name, server=True, dns=[node.name], ips=[node.ip])
    root = Path(tempfile.mkdtemp(prefix="gpuops-node-", dir="/var/tmp"))
    kube = root / "etc" / "kubernetes"
    (kube / "pki").mkdir(parents=True)
    shutil.copy(PKI / "ca.crt", kube / "pki" / "ca.crt")
    for stem in ("kubelet-serving",):
        shutil.copy(pki / ("%s.crt" % stem), kube / "pki")
        shutil.copy(pki / ("%s.key" % stem), kube / "pki")
    write_kubeconfig(
        kube / "kubelet.kubeconfig",
        "system:node:%s" % node.name,
        "kubelet-client",
        pki=pki,
        server="https://%s:%d" % (GATEWAY, API_PORT),
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


# --- join ---------------------------------------------------------------------------


def join(node, bins, images, public_key):
    """Provision the node as a fleet would before gpuops: containerd configured, kubelet joined."""
    node_exec(node, "systemctl is-system-running --wait >/dev/null || true")
    known = admit_ssh(node, public_key)
    root = stage(node, bins, images)
    try:
        podman("cp", "%s/." % root, "%s:/" % node.name)
    finally:
        shutil.rmtree(root)
    # As kind's node entrypoint does: the root mount shared, so that a pod mounting a host
    # path with HostToContainer propagation (NVIDIA's DRA kubelet plugin mounts / so) starts.
    script = ["mount --make-rshared /", *service_routing(node), "systemctl restart containerd"]
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
