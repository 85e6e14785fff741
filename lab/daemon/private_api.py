# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A private Kubernetes API server for tests of the daemon's DRA front end: the lab's own
etcd and kube-apiserver (lab/kube/etcd.sh, lab/kube/build.sh: the release the lab runs), in
a temporary directory on free loopback ports, apart from the lab cluster.

Only the API: no kubelet, scheduler or controllers. A test writes what the scheduler would
(a ResourceClaim and its status.allocation) and reads what the daemon published; the API
server validates both and drops fields whose feature gate is off, as a cluster's does.
Clients authenticate with a static token as a member of system:masters; the kubelet's Node
authorizer is exercised on the lab's nodes, not here.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid as uuidlib
from pathlib import Path

LAB = Path(__file__).resolve().parents[1]
START_TIMEOUT_S = 120


def _script_dir(script: Path, override: str) -> Path:
    """The directory a lab build script prints last (it builds or reuses its cache), or the
    one the environment variable override names (binaries carried to a machine that cannot
    build them, as lab/real-gpu/record.py's)."""
    if os.environ.get(override):
        return Path(os.environ[override])
    out = subprocess.run(["bash", str(script)], check=True, capture_output=True, text=True).stdout
    return Path(out.strip().splitlines()[-1])


def _rsa_key_pem() -> bytes:
    """The service-account signing key (cryptography, an ansible-core requirement: no openssl
    binary needed, which a GPU machine's image may lack)."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import rsa  # noqa: PLC0415

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class PrivateApi:
    """etcd and kube-apiserver under root; client() gives a kubernetes ApiClient."""

    def __init__(self, root: str):
        self.root = Path(root)
        self.token = uuidlib.uuid4().hex
        self.port = _free_port()
        self.processes: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def start(self) -> PrivateApi:
        kube_bin = _script_dir(LAB / "kube" / "build.sh", "GPUOPS_LAB_KUBE_BIN")
        etcd_bin = _script_dir(LAB / "kube" / "etcd.sh", "GPUOPS_LAB_ETCD_BIN")
        self.root.mkdir(parents=True, exist_ok=True)
        client_port, peer_port = _free_port(), _free_port()
        etcd_url = f"http://127.0.0.1:{client_port}"
        self._spawn(
            "etcd",
            [
                str(etcd_bin / "etcd"),
                "--name=private",
                f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=private=http://127.0.0.1:{peer_port}",
            ],
        )
        tokens = self.root / "tokens.csv"
        tokens.write_text(f"{self.token},admin,admin,system:masters\n")
        tokens.chmod(0o600)
        key = self.root / "service-account.key"
        key.write_bytes(_rsa_key_pem())
        key.chmod(0o600)
        self._spawn(
            "kube-apiserver",
            [
                str(kube_bin / "kube-apiserver"),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.port}",
                f"--cert-dir={self.root / 'certs'}",  # a self-signed serving certificate
                f"--token-auth-file={tokens}",
                "--authorization-mode=RBAC",
                "--service-cluster-ip-range=10.255.0.0/24",
                "--service-account-issuer=https://private-api.invalid",
                f"--service-account-key-file={key}",
                f"--service-account-signing-key-file={key}",
            ],
        )
        self._wait_ready()
        return self

    def _spawn(self, name: str, argv: list[str]) -> None:
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - kept open for the process
        self.processes.append(
            subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, ETCD_UNSUPPORTED_ARCH="")
            )
        )

    def _wait_ready(self) -> None:
        from kubernetes import client  # noqa: PLC0415

        core = client.CoreV1Api(self.client())
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            for process in self.processes:
                if process.poll() is not None:
                    raise RuntimeError(f"{process.args[0]} exited {process.returncode}: {self.log_tail()}")
            try:
                core.read_namespace("default")  # created by the API server once it is up
                return
            except Exception as error:  # not listening yet, or still starting (503, 404)
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the private API server was not ready in {START_TIMEOUT_S}s: {self.log_tail()}"
                    ) from error
                time.sleep(0.5)

    def log_tail(self, lines: int = 15) -> str:
        path = self.root / "kube-apiserver.log"
        text = path.read_text(errors="replace") if path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def kubeconfig(self, path: str) -> str:
        """A kubeconfig file for the daemon (JSON is YAML)."""
        import json  # noqa: PLC0415

        document = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "private", "cluster": {"server": self.url, "insecure-skip-tls-verify": True}}
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [{"name": "private", "context": {"cluster": "private", "user": "admin"}}],
            "current-context": "private",
        }
        Path(path).write_text(json.dumps(document))
        return path

    def client(self):
        from kubernetes import client  # noqa: PLC0415

        configuration = client.Configuration()
        configuration.host = self.url
        configuration.verify_ssl = False
        configuration.api_key = {"authorization": "Bearer " + self.token}
        return client.ApiClient(configuration)

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.processes.clear()
        shutil.rmtree(self.root, ignore_errors=True)


class NodeApi:
    """One Node in a PrivateApi: its claims, its ResourceSlices of driver (as the scheduler and
    the kubelet would write and read them)."""

    def __init__(self, api, name, driver):
        from kubernetes import client  # noqa: PLC0415

        self.api = api
        self.name = name
        self.api_client = api.client()
        self.core = client.CoreV1Api(self.api_client)
        self.resource = client.ResourceV1Api(self.api_client)
        self.uid = self.core.create_node({"metadata": {"name": name}}).metadata.uid
        # Its claims in a namespace of its own: the tests share the API server.
        self.namespace = name
        self.core.create_namespace({"metadata": {"name": name}})
        self.driver = driver
        self.selector = f"spec.nodeName={name},spec.driver={driver}"

    def put_claim(self, document):
        """Create the claim, then write its allocation as the scheduler does (status)."""
        metadata = document["metadata"]
        body = {
            "metadata": {"name": metadata["name"]},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": request["name"], "exactly": {"deviceClassName": self.driver}}
                        for request in document["spec"]["devices"]["requests"]
                    ]
                }
            },
        }
        created = self.resource.create_namespaced_resource_claim(metadata["namespace"], body)
        created.status = document["status"]
        stored = self.resource.replace_namespaced_resource_claim_status(
            metadata["name"], metadata["namespace"], created
        )
        return self.api_client.sanitize_for_serialization(stored)

    def delete_claim(self, namespace, name):
        self.resource.delete_namespaced_resource_claim(name, namespace)

    def slices(self):
        found = self.resource.list_resource_slice(field_selector=self.selector).items
        return {s.metadata.name: self.api_client.sanitize_for_serialization(s) for s in found}

    def versions(self):
        """Each slice's name and resourceVersion: equal before and after means no write."""
        return {name: s["metadata"]["resourceVersion"] for name, s in self.slices().items()}

    def wipe(self):
        """The kubelet's cleanup when no plugin of the driver is connected (or it restarts)."""
        for name in self.slices():
            self.resource.delete_resource_slice(name)

    def status_resources(self):
        status = self.core.read_node_status(self.name).status
        return dict(status.capacity or {}), dict(status.allocatable or {})

    def set_status_resources(self, resources):
        self.core.patch_node_status(self.name, {"status": {"capacity": resources, "allocatable": resources}})
