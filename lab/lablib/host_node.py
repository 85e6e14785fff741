# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host as the lab's node: its bridge, CNI, containerd (with the nvidia runtime
declared) and kubelet, and the KubeletConfiguration the lab's nodes (lab/nodes.py) share."""

from __future__ import annotations

import ipaddress
import json
import sys
from pathlib import Path

from .health import node_ready
from .images import import_images
from .layout import (
    BRIDGE,
    CONTAINERD_SOCK,
    KUBELET_PORT,
    KUBELET_ROOT,
    NODE_IP,
    NODE_NAME,
    PAUSE_IMAGE,
    PKI,
    POD_SUBNET,
    ROOT,
    RUN_DIR,
    STATE_DIR,
)
from .processes import run, start, wait_for


def kubelet_configuration(
    *, ca_file, cert_file, key_file, containerd_socket, cgroup_driver, max_pods, **more
):
    """The lab's KubeletConfiguration: the host's kubelet's and its nodes' (lab/nodes.py)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "readOnlyPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "tlsCertFile": str(cert_file),
        "tlsPrivateKeyFile": str(key_file),
        "containerRuntimeEndpoint": "unix://%s" % containerd_socket,
        "cgroupDriver": cgroup_driver,
        # The host is cgroup v1 (hybrid): allowed explicitly (the kubelet is in maintenance
        # mode on v1).
        "failCgroupV1": False,
        "failSwapOn": False,
        "resolvConf": "",
        "makeIPTablesUtilChains": False,
        # A lab on a shared disk: never evict or garbage-collect the imported images.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "maxPods": max_pods,
        "serializeImagePulls": False,
        **more,
    }


def write_configs():
    (STATE_DIR / "cni").mkdir(parents=True, exist_ok=True)
    (STATE_DIR / "cni" / "10-gpuops-lab.conflist").write_text(
        json.dumps(
            {
                "cniVersion": "0.4.0",
                "name": "gpuops-lab",
                "plugins": [
                    {
                        "type": "bridge",
                        "bridge": BRIDGE,
                        "isGateway": True,
                        # No masquerading: pods only talk to this machine.
                        "ipMasq": False,
                        "ipam": {
                            "type": "host-local",
                            "ranges": [[{"subnet": POD_SUBNET, "gateway": NODE_IP}]],
                            "dataDir": str(STATE_DIR / "cni" / "ipam"),
                        },
                    }
                ],
            },
            indent=2,
        )
    )
    containerd_toml = STATE_DIR / "containerd.toml"
    containerd_toml.write_text(
        "\n".join(
            [
                "# The lab's own containerd: its own socket, root and state; CRI for the kubelet.",
                "version = 2",
                'root = "%s"' % (STATE_DIR / "containerd"),
                'state = "%s"' % (RUN_DIR / "containerd"),
                "[grpc]",
                '  address = "%s"' % CONTAINERD_SOCK,
                "[ttrpc]",
                '  address = "%s"' % (RUN_DIR / "containerd" / "containerd.sock.ttrpc"),
                '[plugins."io.containerd.internal.v1.opt"]',
                '  path = "%s"' % (STATE_DIR / "containerd-opt"),
                '[plugins."io.containerd.grpc.v1.cri"]',
                '  sandbox_image = "%s"' % PAUSE_IMAGE,
                "  # This machine withholds CAP_SYS_RESOURCE even from root, so runc cannot",
                "  # lower a process's OOM score (the kubelet asks -998 for sandboxes).",
                "  restrict_oom_score_adj = true",
                '  [plugins."io.containerd.grpc.v1.cri".cni]',
                '    bin_dir = "/usr/lib/cni"',
                '    conf_dir = "%s"' % (STATE_DIR / "cni"),
                '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
                '    runtime_type = "io.containerd.runc.v2"',
                "",
            ]
        )
    )
    declare_nvidia_runtime(containerd_toml)
    kubelet_config = kubelet_configuration(
        ca_file=PKI / "ca.crt",
        cert_file=PKI / "kubelet.crt",
        key_file=PKI / "kubelet.key",
        containerd_socket=CONTAINERD_SOCK,
        # No systemd here (PID 1 is not an init): cgroupfs.
        cgroup_driver="cgroupfs",
        max_pods=32,
        address=NODE_IP,
        port=KUBELET_PORT,
        healthzBindAddress="127.0.0.1",
        healthzPort=10248,
        registerNode=True,
    )
    (STATE_DIR / "kubelet.yaml").write_text(json.dumps(kubelet_config, indent=2))


def declare_nvidia_runtime(path):
    """Declare the nvidia runtime as the container_runtime role would (nvidia_runtime's own
    code, defaults), so the doctor and RuntimeClass nvidia see a configured node. The lab has
    no NVIDIA Container Toolkit: a pod that selects this handler fails to start."""
    sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
    from _runtime import defaults, plan  # noqa: PLC0415 - the collection's module_utils, found at run time

    # Only what differs from the module's defaults; the plan edits the file in place.
    planned = plan.plan({**defaults.OPTIONS, "runtime": "containerd", "path": str(path)})
    for changed, text in planned.changes().items():
        Path(changed).write_text(text)


def ensure_bridge():
    if run(["ip", "link", "show", BRIDGE], check=False).returncode != 0:
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    addrs = run(["ip", "-o", "-4", "addr", "show", "dev", BRIDGE]).stdout
    if NODE_IP + "/" not in addrs:
        prefix = ipaddress.ip_network(POD_SUBNET).prefixlen
        run(["ip", "addr", "add", "%s/%d" % (NODE_IP, prefix), "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])


def start_containerd_and_kubelet(bins):
    """containerd, the lab's images in it, then the kubelet, until the node is Ready."""
    start("containerd", [bins["containerd"], "--config", STATE_DIR / "containerd.toml"])
    wait_for(
        "containerd's socket",
        lambda: run([str(bins["ctr"]), "-a", str(CONTAINERD_SOCK), "version"], check=False).returncode == 0,
        60,
        "containerd",
    )
    import_images(bins)
    start(
        "kubelet",
        [
            bins["kubelet"],
            "--config=%s" % (STATE_DIR / "kubelet.yaml"),
            "--kubeconfig=%s" % (STATE_DIR / "kubelet.kubeconfig"),
            "--root-dir=%s" % KUBELET_ROOT,
            "--hostname-override=%s" % NODE_NAME,
            "--node-ip=%s" % NODE_IP,
        ],
    )
    wait_for("node %s Ready" % NODE_NAME, lambda: node_ready(bins), 180, "kubelet")
