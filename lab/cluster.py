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
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import ipaddress
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

LAB = Path(__file__).resolve().parent
ROOT = LAB.parent
STATE_DIR = Path(os.environ.get("GPUOPS_LAB_STATE", "/var/lib/gpuops-lab"))
RUN_DIR = Path("/run/gpuops-lab")
# NVIDIA's mock NVML runtime overrides (faults) for every NVML user on the lab node.
MOCK_OVERRIDES = RUN_DIR / "mocknvml-overrides.yaml"
# The kubelet's default root dir, on purpose: NVIDIA's device plugin only knows
# /var/lib/kubelet/device-plugins, and so do our role's defaults.
KUBELET_ROOT = Path("/var/lib/kubelet")
PLUGIN_DIR = KUBELET_ROOT / "device-plugins"
NODE_NAME = "gpuops-lab"
# The kubelet refuses a loopback node IP, so the node gets an address on the lab's own
# bridge, which is also the pod network's gateway. Nothing leaves this machine.
BRIDGE = "gpuopslab0"
NODE_IP = "10.252.0.1"
POD_SUBNET = "10.252.0.0/24"
SERVICE_CIDR = "10.253.0.0/24"
API_PORT = 16443
ETCD_PORT = 12379
KUBELET_PORT = 10250
CONTAINERD_SOCK = RUN_DIR / "containerd" / "containerd.sock"
PAUSE_IMAGE = "localhost/gpuops-lab/pause:1"
TOOLS_IMAGE = "localhost/gpuops-lab/tools:1"
PKI = STATE_DIR / "pki"
ADMIN_KUBECONFIG = STATE_DIR / "admin.kubeconfig"
LOGS = STATE_DIR / "logs"
ANSIBLE_VARS = STATE_DIR / "ansible-vars.json"
CGROUP_V1 = Path("/sys/fs/cgroup")


class LabError(Exception):
    """A step of up/down failed; the message says which and where its log is."""


def log(message):
    print("lab: %s" % message, file=sys.stderr, flush=True)


def run(argv, **kwargs):
    check = kwargs.pop("check", True)
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    try:
        return subprocess.run(argv, check=check, **kwargs)
    except subprocess.CalledProcessError as exc:
        raise LabError(
            "%s failed (%d): %s"
            % (" ".join(map(str, argv)), exc.returncode, (exc.stderr or "its output is above").strip())
        ) from exc


def script_output(script, *args):
    """Last lines of a lab build script's stdout (the scripts print their results). Its
    stderr, the progress of builds that take minutes, goes straight to ours."""
    # Not capture_output with stderr=None: subprocess.run then captures stderr as well.
    proc = run(["bash", str(script), *args], capture_output=False, stdout=subprocess.PIPE, timeout=3600)
    return proc.stdout.strip().splitlines()


# --- binaries and images --------------------------------------------------------------


def binaries():
    kube_bin = Path(script_output(LAB / "kube" / "build.sh")[-1])
    etcd_bin = Path(script_output(LAB / "kube" / "etcd.sh")[-1])
    return {
        "kube-apiserver": kube_bin / "kube-apiserver",
        "kube-controller-manager": kube_bin / "kube-controller-manager",
        "kube-scheduler": kube_bin / "kube-scheduler",
        "kubelet": kube_bin / "kubelet",
        "kubectl": kube_bin / "kubectl",
        "etcd": etcd_bin / "etcd",
        "containerd": Path(shutil.which("containerd") or "/usr/bin/containerd"),
        "ctr": Path(shutil.which("ctr") or "/usr/bin/ctr"),
    }


# --- certificates and kubeconfigs -----------------------------------------------------


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


# --- process bookkeeping -------------------------------------------------------------


def pid_file(name):
    return RUN_DIR / ("%s.pid" % name)


def running_pid(name):
    """The PID recorded for a component, if that process still runs the same binary."""
    try:
        pid = int(pid_file(name).read_text().split()[0])
        recorded_exe = pid_file(name).read_text().split()[1]
        if os.readlink("/proc/%d/exe" % pid).removesuffix(" (deleted)") == recorded_exe:
            return pid
    except (OSError, ValueError, IndexError):
        pass
    return None


def start(name, argv, env=None):
    if running_pid(name):
        wanted = {"argv": [str(a) for a in argv], "env": env or {}}
        spec = RUN_DIR / ("%s.json" % name)
        if spec.is_file() and json.loads(spec.read_text()) == wanted:
            log("%s already running (pid %d)" % (name, running_pid(name)))
            return
        # A lab started by an earlier checkout (another mock library, other flags) must
        # not keep serving what this one no longer asks for.
        log("%s is running with another command or environment: restarting it" % name)
        stop(name)
    LOGS.mkdir(parents=True, exist_ok=True)
    with open(LOGS / ("%s.log" % name), "ab") as out:
        proc = subprocess.Popen(
            [str(a) for a in argv],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, **(env or {})),
            start_new_session=True,
        )
    pid_file(name).write_text("%d %s\n" % (proc.pid, os.path.realpath(argv[0])))
    # What `restart` needs to start it again the same way.
    (RUN_DIR / ("%s.json" % name)).write_text(json.dumps({"argv": [str(a) for a in argv], "env": env or {}}))
    log("started %s (pid %d, log %s)" % (name, proc.pid, LOGS / ("%s.log" % name)))


def stop(name, timeout=20):
    pid = running_pid(name)
    if pid:
        os.kill(pid, signal.SIGTERM)
        if not wait_gone([pid], timeout):
            os.kill(pid, signal.SIGKILL)
            wait_gone([pid], 5)
        log("stopped %s (pid %d)" % (name, pid))
    pid_file(name).unlink(missing_ok=True)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child (we never are its parent, but be safe) counts as gone.
    try:
        return Path("/proc/%d/stat" % pid).read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


def wait_gone(pids, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(alive(p) for p in pids):
            return True
        time.sleep(0.1)
    return not any(alive(p) for p in pids)


def wait_for(what, check, timeout, component=None):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if component and not running_pid(component):
            raise LabError(
                "%s exited while waiting for %s; see %s" % (component, what, LOGS / ("%s.log" % component))
            )
        try:
            if check():
                return
        except Exception as exc:
            last = exc
        time.sleep(0.25)
    where = " (log %s)" % (LOGS / ("%s.log" % component)) if component else ""
    raise LabError("timed out after %d s waiting for %s%s; last error: %s" % (timeout, what, where, last))


# --- health checks -------------------------------------------------------------------


def https_get(url):
    context = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    context.load_cert_chain(str(PKI / "admin.crt"), str(PKI / "admin.key"))
    with urllib.request.urlopen(url, context=context, timeout=5) as reply:
        return reply.status, reply.read().decode()


def http_get(url):
    with urllib.request.urlopen(url, timeout=5) as reply:
        return reply.status, reply.read().decode()


def kubectl(bins, *args, check=True):
    return run([str(bins["kubectl"]), "--kubeconfig", str(ADMIN_KUBECONFIG), *args], check=check)


def gpu_allocatable(bins):
    out = kubectl(bins, "get", "node", NODE_NAME, "-o", "jsonpath={.status.allocatable.nvidia\\.com/gpu}")
    return int(out.stdout or 0)


def node_ready(bins, name=NODE_NAME):
    out = kubectl(bins, "get", "node", name, "-o", "json", check=False)
    if out.returncode != 0:
        return False
    conditions = json.loads(out.stdout)["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


# --- up ------------------------------------------------------------------------------


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
    write_kubeconfig(ADMIN_KUBECONFIG, "gpuops-lab-admin", "admin")
    write_kubeconfig(
        STATE_DIR / "controller-manager.kubeconfig", "system:kube-controller-manager", "controller-manager"
    )
    write_kubeconfig(STATE_DIR / "scheduler.kubeconfig", "system:kube-scheduler", "scheduler")
    write_kubeconfig(STATE_DIR / "kubelet.kubeconfig", "system:node:%s" % NODE_NAME, "kubelet-client")


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


def ctr(bins, *args, check=True):
    return run([str(bins["ctr"]), "-a", str(CONTAINERD_SOCK), "-n", "k8s.io", *args], check=check)


def import_images(bins):
    # Always: importing an archive already there is quick, and a rebuilt one replaces it.
    for line in script_output(LAB / "kube" / "images.sh"):
        name, archive = line.split()
        # Named by the archive's own tag: --index-name makes ctr write an index that
        # containerd's garbage collector can take before the import ends.
        ctr(bins, "images", "import", archive)
        log("imported %s" % name)


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
    ensure_bridge()
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


def resolve_profile(profile):
    return Path(profile) if os.path.isabs(profile) else ROOT / "lab" / "profiles" / profile


def nvml_library(profile_path):
    """The NVML library for a profile: NVIDIA's mock, or gpuops's MIG stand-in for a profile
    with MIG instances (a sibling <name>.mig.yaml), which NVIDIA's mock does not model."""
    if profile_path.with_name(profile_path.stem + ".mig.yaml").is_file():
        log("%s has MIG instances: gpuops's MIG NVML stand-in, not NVIDIA's mock" % profile_path.name)
        return script_output(ROOT / "lab" / "mig-nvml-standin" / "build.sh")[-1]
    return script_output(ROOT / "lab" / "mocknvml" / "build.sh")[-1]


def node_nvml_environment(profile_path):
    """What the device plugin and every play on the lab node read to see the mock GPUs;
    faults are injected through MOCK_OVERRIDES (NVIDIA's mock re-reads it every second)."""
    return {
        "LD_LIBRARY_PATH": nvml_library(profile_path),
        "MOCK_NVML_CONFIG": str(profile_path),
        "MOCK_NVML_OVERRIDES": str(MOCK_OVERRIDES),
    }


def start_device_plugin(profile):
    """Our daemon over the mock NVML library, as the lab's node would run it."""
    node_env = node_nvml_environment(resolve_profile(profile))
    MOCK_OVERRIDES.unlink(missing_ok=True)  # no fault left over from an interrupted test
    start(
        "device-plugin",
        [
            sys.executable,
            "-m",
            "gpuops_device_plugin",
            "--device-plugin-path",
            PLUGIN_DIR,
            "--metrics-address",
            "127.0.0.1:9402",
        ],
        env={
            "PYTHONPATH": str(ROOT / "roles" / "device_plugin" / "files" / "gpuops-device-plugin"),
            **node_env,
        },
    )
    # What a play on the lab node needs to see the same mock GPUs (the single-host
    # inventory of the integration tests).
    return node_env


def write_ansible_vars(node_env):
    """Variables the integration tests' single-host inventory reads: the kubeconfig and the
    node's NVML environment."""
    ANSIBLE_VARS.write_text(
        json.dumps(
            {"kubeconfig": str(ADMIN_KUBECONFIG), "node": NODE_NAME, "node_environment": node_env}, indent=2
        )
    )


# --- down ----------------------------------------------------------------------------


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


def down(args):
    require_root()
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
    if args.purge:
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


# --- status / env --------------------------------------------------------------------

COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "containerd",
    "kubelet",
    "device-plugin",
)


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


def saved_spec(component):
    saved = RUN_DIR / ("%s.json" % component)
    if not saved.exists():
        raise LabError("%s was not started by `up` (no %s)" % (component, saved))
    return json.loads(saved.read_text())


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
    spec = saved_spec("device-plugin")
    profile_path = resolve_profile(args.profile)
    if not profile_path.is_file():
        raise LabError("no mock NVML profile at %s" % profile_path)
    nvml_env = node_nvml_environment(profile_path)
    spec["env"].pop("MOCK_NVML_CONTROL_DIR", None)  # written by labs started before NVIDIA's mock
    spec["env"].update(nvml_env)
    stop("device-plugin")
    start("device-plugin", spec["argv"], spec["env"])
    node_env = json.loads(ANSIBLE_VARS.read_text())["node_environment"]
    node_env.pop("MOCK_NVML_CONTROL_DIR", None)
    node_env.update(nvml_env)
    write_ansible_vars(node_env)
    return 0


def env(_args):
    kube_bin = script_output(LAB / "kube" / "build.sh")[-1]
    print("export KUBECONFIG=%s" % ADMIN_KUBECONFIG)
    print("export PATH=%s:$PATH" % kube_bin)
    print("export GPUOPS_LAB_NODE=%s" % NODE_NAME)
    return 0


def require_root():
    if os.geteuid() != 0:
        raise LabError("the lab cluster runs a kubelet and containerd: run it as root")


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
