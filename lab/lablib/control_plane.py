# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The control plane: etcd, kube-apiserver, kube-controller-manager and kube-scheduler, as
plain processes on the host."""

from __future__ import annotations

from .health import http_get, https_get
from .layout import API_PORT, ETCD_PORT, NODE_IP, NODE_NAME, PKI, SERVICE_CIDR, STATE_DIR
from .processes import start, wait_for


def start_control_plane(bins):
    """etcd, then the API server, each once it answers; then the controller-manager and the
    scheduler (idempotent, as `start`)."""
    service_ip_range = SERVICE_CIDR

    start(
        "etcd",
        [
            bins["etcd"],
            "--name=%s" % NODE_NAME,
            "--data-dir=%s" % (STATE_DIR / "etcd"),
            "--listen-client-urls=http://127.0.0.1:%d" % ETCD_PORT,
            "--advertise-client-urls=http://127.0.0.1:%d" % ETCD_PORT,
            "--listen-peer-urls=http://127.0.0.1:%d" % (ETCD_PORT + 1),
            "--initial-advertise-peer-urls=http://127.0.0.1:%d" % (ETCD_PORT + 1),
            "--initial-cluster=%s=http://127.0.0.1:%d" % (NODE_NAME, ETCD_PORT + 1),
            "--listen-metrics-urls=http://127.0.0.1:%d" % (ETCD_PORT + 2),
        ],
        env={"ETCD_UNSUPPORTED_ARCH": ""},
    )
    etcd_health = "http://127.0.0.1:%d/health" % ETCD_PORT
    wait_for("etcd health", lambda: '"health":"true"' in http_get(etcd_health)[1], 60, "etcd")

    start(
        "kube-apiserver",
        [
            bins["kube-apiserver"],
            "--etcd-servers=http://127.0.0.1:%d" % ETCD_PORT,
            # Every address: the lab's kubelet nodes (lab/nodes.py) reach it through their
            # podman network's gateway. Every request still needs a client certificate.
            "--bind-address=0.0.0.0",
            "--advertise-address=%s" % NODE_IP,
            "--secure-port=%d" % API_PORT,
            "--service-cluster-ip-range=%s" % service_ip_range,
            "--client-ca-file=%s" % (PKI / "ca.crt"),
            "--tls-cert-file=%s" % (PKI / "apiserver.crt"),
            "--tls-private-key-file=%s" % (PKI / "apiserver.key"),
            "--kubelet-client-certificate=%s" % (PKI / "apiserver-kubelet-client.crt"),
            "--kubelet-client-key=%s" % (PKI / "apiserver-kubelet-client.key"),
            "--kubelet-certificate-authority=%s" % (PKI / "ca.crt"),
            "--kubelet-preferred-address-types=InternalIP",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--service-account-key-file=%s" % (PKI / "service-account.pub"),
            "--service-account-signing-key-file=%s" % (PKI / "service-account.key"),
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            "--profiling=false",
        ],
    )
    wait_for(
        "kube-apiserver /readyz",
        lambda: https_get("https://127.0.0.1:%d/readyz" % API_PORT)[0] == 200,
        120,
        "kube-apiserver",
    )
    start(
        "kube-controller-manager",
        [
            bins["kube-controller-manager"],
            "--kubeconfig=%s" % (STATE_DIR / "controller-manager.kubeconfig"),
            "--authentication-kubeconfig=%s" % (STATE_DIR / "controller-manager.kubeconfig"),
            "--authorization-kubeconfig=%s" % (STATE_DIR / "controller-manager.kubeconfig"),
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            "--service-account-private-key-file=%s" % (PKI / "service-account.key"),
            "--root-ca-file=%s" % (PKI / "ca.crt"),
            "--service-cluster-ip-range=%s" % service_ip_range,
            "--profiling=false",
        ],
    )
    start(
        "kube-scheduler",
        [
            bins["kube-scheduler"],
            "--kubeconfig=%s" % (STATE_DIR / "scheduler.kubeconfig"),
            "--authentication-kubeconfig=%s" % (STATE_DIR / "scheduler.kubeconfig"),
            "--authorization-kubeconfig=%s" % (STATE_DIR / "scheduler.kubeconfig"),
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--profiling=false",
        ],
    )
