# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The lab's certificates and kubeconfigs: one CA (PKI), a certificate per component, and
the nodes' certificates (lab/nodes.py) from the same CA."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import shutil

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .layout import ADMIN_KUBECONFIG, API_PORT, NODE_IP, NODE_NAME, PKI, SERVICE_CIDR, STATE_DIR
from .processes import log


def _write_key_and_cert(stem, key, cert, directory=PKI):
    key_path = directory / ("%s.key" % stem)
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    key_path.chmod(0o600)
    if cert is not None:
        (directory / ("%s.crt" % stem)).write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(cn, org=None):
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def issue_certificate(directory, stem, cn, org=None, *, server=False, dns=(), ips=(), ca=None):
    """A key and a certificate signed by the lab's CA (ca: key and certificate, else read
    from PKI), written as <stem>.key and <stem>.crt in directory."""
    if ca is None:
        ca = (
            serialization.load_pem_private_key((PKI / "ca.key").read_bytes(), None),
            x509.load_pem_x509_certificate((PKI / "ca.crt").read_bytes()),
        )
    ca_key, ca_cert = ca
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn, org))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        # Python 3.13's default TLS context verifies strictly (VERIFY_X509_STRICT): a
        # certificate without these fails with "Missing Authority Key Identifier".
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_cert.public_key()), critical=False
        )
    )
    if server:
        sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    _write_key_and_cert(stem, key, builder.sign(ca_key, hashes.SHA256()), directory)


# Written into PKI/.complete; a PKI made by another version is made again (with a new CA:
# the nodes' certificates are issued again at every `nodes.py up` anyway). 2: certificates
# with key identifiers (issue_certificate).
PKI_VERSION = "2"


def make_pki():
    """One CA and a certificate per component; kept across up/down (only --purge removes
    them, or a change of PKI_VERSION)."""
    done = PKI / ".complete"
    if done.exists() and done.read_text().strip() == PKI_VERSION:
        return
    if done.exists():
        log("the certificates are of an older layout: making the lab's PKI again")
        shutil.rmtree(PKI)
    PKI.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    until = now + datetime.timedelta(days=3650)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("gpuops-lab-ca"))
        .issuer_name(_name("gpuops-lab-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key_and_cert("ca", ca_key, ca_cert)

    def issue(stem, cn, org=None, *, server=False, dns=(), ips=()):
        issue_certificate(PKI, stem, cn, org, server=server, dns=dns, ips=ips, ca=(ca_key, ca_cert))

    service_ip = str(next(ipaddress.ip_network(SERVICE_CIDR).hosts()))
    issue(
        "apiserver",
        "kube-apiserver",
        server=True,
        dns=[
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "localhost",
        ],
        ips=["127.0.0.1", service_ip, NODE_IP],
    )
    issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
    issue("admin", "gpuops-lab-admin", "system:masters")
    issue("controller-manager", "system:kube-controller-manager")
    issue("scheduler", "system:kube-scheduler")
    issue("kubelet-client", "system:node:%s" % NODE_NAME, "system:nodes")
    issue("kubelet", NODE_NAME, server=True, dns=[NODE_NAME, "localhost"], ips=[NODE_IP, "127.0.0.1"])
    sa_key = ec.generate_private_key(ec.SECP256R1())
    _write_key_and_cert("service-account", sa_key, None)
    (PKI / "service-account.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    done.write_text(PKI_VERSION + "\n")


def write_kubeconfig(path, user, cert_stem, *, pki=PKI, server=None, tls_server_name=None):
    """A kubeconfig with the certificate embedded. server: the API server's URL as this
    client reaches it; tls_server_name: the name to check its certificate against when that
    URL's address is not in it (the lab's nodes reach it through their network's gateway)."""

    def b64(file):
        return base64.b64encode(file.read_bytes()).decode()

    cluster = {
        "server": server or "https://127.0.0.1:%d" % API_PORT,
        "certificate-authority-data": b64(PKI / "ca.crt"),
    }
    if tls_server_name:
        cluster["tls-server-name"] = tls_server_name

    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "gpuops-lab",
                "cluster": cluster,
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": b64(pki / ("%s.crt" % cert_stem)),
                    "client-key-data": b64(pki / ("%s.key" % cert_stem)),
                },
            }
        ],
        "contexts": [{"name": "gpuops-lab", "context": {"cluster": "gpuops-lab", "user": user}}],
        "current-context": "gpuops-lab",
    }
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    path.chmod(0o600)


def write_kubeconfigs():
    """The admin's kubeconfig and those of the host's control plane and kubelet."""
    write_kubeconfig(ADMIN_KUBECONFIG, "gpuops-lab-admin", "admin")
    write_kubeconfig(
        STATE_DIR / "controller-manager.kubeconfig", "system:kube-controller-manager", "controller-manager"
    )
    write_kubeconfig(STATE_DIR / "scheduler.kubeconfig", "system:kube-scheduler", "scheduler")
    write_kubeconfig(STATE_DIR / "kubelet.kubeconfig", "system:node:%s" % NODE_NAME, "kubelet-client")
