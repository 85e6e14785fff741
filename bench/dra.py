# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark the DRA kubelet plugin serving a lab node: gpuops's or NVIDIA's (not a test).

    .venv/bin/python bench/dra.py [--driver gpuops|nvidia] [--node gpuops-node-2]
        [--rounds 5] [--calls 200] [--idle 30] [--xid-timeout 30]
        [--only slices,prepare,xid,idle] [--json PATH]

One driver serves a node at a time (tests/integration moves node 2 between gpuops's DRA
front end, the systemd unit gpuops-device-plugin, and NVIDIA's DRA driver v0.5.0, a
DaemonSet pod, with the device_plugin role): this measures the one serving now, found by
its registration socket unless --driver names it. Run it once in each mode for both.
Needs the lab (lab/cluster.py and lab/nodes.py up) and root, for the node's sockets.

Measured:
- start to published slice: the plugin stopped (gpuops: systemctl stop; NVIDIA: its pod
  deleted, the DaemonSet makes a new one), the node's ResourceSlices of the driver deleted,
  then the time from the new process's start (its /proc starttime) until the node's slices
  list every GPU again; --rounds rounds, p50 and max (and from the restart command).
- NodePrepareResources / NodeUnprepareResources p50/p99 over --calls calls each: one
  ResourceClaim of one GPU no other claim holds, allocated by the bench as the scheduler
  would (status.allocation) and reserved for a pod bound to the node that never starts
  (holder_pod: the Node authorizer's path to the claim), prepared and unprepared in turn
  over the plugin's DRA socket, as the kubelet does (lab/daemon/dra_kubelet_standin.py).
- XID 79 on one free GPU through NVIDIA's mock (the node's /usr/config/overrides.yaml) to
  a new taint on that device in the slice, and the file removed to the taint gone; each
  given --xid-timeout seconds, else reported as not seen (NVIDIA's driver taints only with
  its alpha NVMLDeviceHealthCheck gate, and the mock raises an XID only on a guarded device
  call: see device_plugin.py's row in bench/README.md).
- the plugin process's RSS and its CPU seconds (utime+stime) over --idle idle seconds.

The node's sockets are reached from the host through /proc/<the node's PID>/root: the node
mounts a tmpfs on /var/lib/kubelet, which `podman mount`'s view of its image layers lacks.
Everything the bench makes goes in a finally: its claims (unprepared, deleted), the
overrides file, a stopped unit started again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shlex
import statistics
import sys
import time
import urllib.parse
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
DAEMON_PACKAGE = ROOT / "roles" / "device_plugin" / "files" / "gpuops-device-plugin"
sys.path[:0] = [str(ROOT / "lab"), str(ROOT / "lab" / "daemon"), str(DAEMON_PACKAGE)]
sys.dont_write_bytecode = True

from dra_kubelet_standin import (  # noqa: E402
    CHANNEL_OPTIONS,
    GET_INFO_TIMEOUT_S,
    KUBELET_1_37,
    DraPluginClient,
    choose,
)
from dra_node import claim  # noqa: E402
from lablib.health import https_get  # noqa: E402
from lablib.layout import ADMIN_KUBECONFIG, API_PORT, LAB  # noqa: E402
from lablib.node_containers import podman  # noqa: E402
from lablib.processes import run, script_output  # noqa: E402

from gpuops_device_plugin.api import pluginregistration_pb2, pluginregistration_pb2_grpc  # noqa: E402

API = "https://127.0.0.1:%d" % API_PORT
RESOURCE_API = "/apis/resource.k8s.io/v1"
TICKS = os.sysconf("SC_CLK_TCK")
MEASURES = ("slices", "prepare", "xid", "idle")
# NVIDIA's mock NVML reads its runtime faults from here on the lab's nodes, every second.
OVERRIDES = "/usr/config/overrides.yaml"
XID_79 = {"failure": {"mode": "ecc_uncorrectable", "xid": {"code": 79}}}
GPU_NAME = re.compile(r"^gpu-(\d+)$")
NAMESPACE = "default"
NVIDIA_NAMESPACE = "dra-driver-nvidia-gpu"
NVIDIA_PODS = "dra-driver-nvidia-gpu-component=kubelet-plugin"
GPUOPS_UNIT = "gpuops-device-plugin"
# Between restarts: the plugin finishes starting (registration, first probes) before it is
# stopped again, and gpuops's unit stays under systemd's start limit (5 starts in 10 s).
SETTLE_S = 2.0
POLL_S = 0.05


@dataclasses.dataclass(frozen=True)
class Driver:
    key: str
    name: str
    # Shell on the node printing the plugin's PID(s).
    pid_script: str

    @property
    def registration(self):
        return "/var/lib/kubelet/plugins_registry/%s-reg.sock" % self.name


DRIVERS = {
    "gpuops": Driver("gpuops", "gpu.gpuops.k8s", "systemctl show --property MainPID --value " + GPUOPS_UNIT),
    # The command's first word only: the chart starts it from `bash -c "... gpu-kubelet-plugin
    # -v N"`, and that shell's command line (and this one's) holds the name too.
    "nvidia": Driver("nvidia", "gpu.nvidia.com", "pgrep -f '^[^ ]*gpu-kubelet-plugin( |$)' || true"),
}


def percentile(values, pct):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def boot_seconds():
    """Now on the clock of /proc/<pid>/stat's starttime (the node shares the host's kernel)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def wait_until(predicate, timeout):
    """time.monotonic() when predicate first held, or None after timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        now = time.monotonic()
        if predicate():
            return now
        if now > deadline:
            return None
        time.sleep(POLL_S)


def allocated(item):
    """A ResourceClaim's allocation results (none while it is not allocated)."""
    allocation = (item.get("status") or {}).get("allocation") or {}
    return allocation.get("devices", {}).get("results", [])


class Lab:
    """The lab node and the API server, as the bench uses them: reads straight over HTTPS with
    the lab's admin certificate (lablib.health; no process per poll, so waits time to ~50 ms),
    writes through the lab's kubectl, commands in the node through podman."""

    def __init__(self, node):
        self.node = node
        self.kubectl_bin = str(Path(script_output(LAB / "kube" / "build.sh")[-1]) / "kubectl")
        pid = podman("inspect", "--format", "{{.State.Pid}}", node).stdout.strip()
        if pid in ("", "0"):
            raise SystemExit("%s is not running" % node)
        self.root = "/proc/%s/root" % pid

    def sh(self, script):
        return podman("exec", self.node, "bash", "-euc", script).stdout

    def kubectl(self, *args, stdin=None):
        return run([self.kubectl_bin, "--kubeconfig", str(ADMIN_KUBECONFIG), *args], input=stdin).stdout

    def get(self, path, **query):
        url = API + path + ("?" + urllib.parse.urlencode(query) if query else "")
        return json.loads(https_get(url)[1])

    def slices(self, driver):
        selector = "spec.nodeName=%s,spec.driver=%s" % (self.node, driver.name)
        return self.get(RESOURCE_API + "/resourceslices", fieldSelector=selector)["items"]

    def gpus(self, driver):
        """Whole GPUs in the node's slices: name -> its taints' keys."""
        return {
            device["name"]: sorted(taint["key"] for taint in device.get("taints", []))
            for piece in self.slices(driver)
            for device in piece["spec"].get("devices", [])
            if GPU_NAME.match(device["name"])
        }

    def held(self, driver):
        """Devices of the node's pool that some claim is allocated."""
        return {
            result["device"]
            for item in self.get(RESOURCE_API + "/resourceclaims")["items"]
            for result in allocated(item)
            if result["driver"] == driver.name and result["pool"] == self.node
        }

    def plugin_pids(self, driver):
        return [int(pid) for pid in self.sh(driver.pid_script).split() if pid != "0"]

    def proc_stat(self, pid):
        """(CPU seconds, start in boot seconds) of a process in the node, from /proc/<pid>/stat."""
        fields = self.sh("cat /proc/%d/stat" % pid).rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS, int(fields[19]) / TICKS

    def rss_mib(self, pid):
        for line in self.sh("cat /proc/%d/status" % pid).splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")


def serving(lab):
    """The driver whose registration socket is on the node (one of DRIVERS)."""
    found = [d for d in DRIVERS.values() if os.path.exists(lab.root + d.registration)]
    if len(found) != 1:
        raise SystemExit(
            "%s: %s registration socket(s) of %s: say which with --driver"
            % (lab.node, len(found) or "no", ", ".join(d.name for d in DRIVERS.values()))
        )
    return found[0]


def plugin_pid(lab, driver):
    """The plugin's one process (the newest, should an old one still be leaving)."""
    pids = lab.plugin_pids(driver)
    if not pids:
        raise SystemExit("no process of %s on %s" % (driver.name, lab.node))
    if len(pids) == 1:
        return pids[0]  # no podman exec to read its start: a few hundred ms
    return max(pids, key=lambda pid: lab.proc_stat(pid)[1])


# --- 1. start to published slice -------------------------------------------------------------


def delete_slices(lab, driver):
    """The node's slices of driver deleted; when (boot seconds)."""
    lab.kubectl(
        "delete",
        "resourceslices",
        "--field-selector",
        "spec.nodeName=%s,spec.driver=%s" % (lab.node, driver.name),
    )
    return boot_seconds()


def restart_gpuops(lab, driver):
    """Stopped, its slices deleted, started (whatever fails): when the slices went."""
    lab.sh("systemctl stop " + GPUOPS_UNIT)
    try:
        return delete_slices(lab, driver)
    finally:
        # --no-block: back at once, so the wait for the slice starts before it can be there.
        lab.sh("systemctl start --no-block " + GPUOPS_UNIT)


def restart_nvidia(lab, driver):
    """Its pod deleted and gone, its slices deleted (the DaemonSet makes the next pod): when
    the slices went."""
    pods = lab.get(
        "/api/v1/namespaces/%s/pods" % NVIDIA_NAMESPACE,
        labelSelector=NVIDIA_PODS,
        fieldSelector="spec.nodeName=" + lab.node,
    )["items"]
    names = [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]
    if not names:
        raise SystemExit("no kubelet-plugin pod of %s on %s" % (NVIDIA_NAMESPACE, lab.node))
    lab.kubectl("delete", "pod", "-n", NVIDIA_NAMESPACE, *names, "--timeout=120s")
    return delete_slices(lab, driver)


def start_round(lab, driver, gpus, timeout):
    """(process start -> slice, restart command -> slice, whether the new process was up
    before the slices were deleted), in seconds."""
    command_at = time.monotonic()
    deleted_at = (restart_gpuops if driver.key == "gpuops" else restart_nvidia)(lab, driver)
    seen = wait_until(lambda: set(gpus) <= set(lab.gpus(driver)), timeout)
    if seen is None:
        raise SystemExit("%s: no slice listing %s within %d s" % (driver.name, ", ".join(gpus), timeout))
    seen_at = boot_seconds() - (time.monotonic() - seen)
    _cpu, started = lab.proc_stat(plugin_pid(lab, driver))
    return seen_at - started, seen - command_at, started < deleted_at


def start_to_slice(lab, driver, rounds, timeout=120):
    gpus = sorted(lab.gpus(driver))
    if not gpus:
        raise SystemExit("%s publishes no GPU for %s: is it serving?" % (driver.name, lab.node))
    starts, commands, raced = [], [], 0
    for _round in range(rounds):
        start, command, early = start_round(lab, driver, gpus, timeout)
        starts.append(start)
        commands.append(command)
        raced += early
        time.sleep(SETTLE_S)
    return {
        "gpus": len(gpus),
        "start -> slice (s)": starts,
        "restart command -> slice (s)": commands,
        # The new process was up before the bench deleted the old slices (NVIDIA's pod can
        # come back that fast): its time includes publishing again after that delete.
        "raced": raced,
    }


# --- 2. NodePrepareResources / NodeUnprepareResources ----------------------------------------


def connect(lab, driver, timeout=60):
    """A DraPluginClient on the plugin's DRA socket, through the node's root: what
    dra_kubelet_standin.register does, less NotifyRegistrationStatus (the node's kubelet has
    registered the plugin; it needs no second word) and with the endpoint GetInfo names
    (a path in the node) taken from the host."""
    path = lab.root + driver.registration
    deadline = time.monotonic() + timeout
    while True:
        try:
            with grpc.insecure_channel("unix://" + path, options=CHANNEL_OPTIONS) as channel:
                info = pluginregistration_pb2_grpc.RegistrationStub(channel).GetInfo(
                    pluginregistration_pb2.InfoRequest(), timeout=GET_INFO_TIMEOUT_S
                )
            break
        except grpc.RpcError:
            # Just restarted: the socket comes with the plugin's registration.
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    plugin, _health = choose(KUBELET_1_37, info.supported_versions)
    on_host = pluginregistration_pb2.PluginInfo()
    on_host.CopyFrom(info)
    on_host.endpoint = lab.root + info.endpoint
    return DraPluginClient(on_host, plugin, "")


def free_gpus(lab, driver):
    return sorted(set(lab.gpus(driver)) - lab.held(driver), key=lambda n: int(GPU_NAME.match(n)[1]))


def holder_pod(lab, name):
    """A pod bound to the node (no scheduler) that holds the claim and never starts: the Node
    authorizer lets a node's credentials (gpuops's daemon uses the kubelet's) read a claim
    only through a pod on that node. Its image is never pulled (none is named so), so after
    the kubelet prepared the claim for it, the bench's calls are the only ones."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"gpuops.k8s/bench": "dra"}},
        "spec": {
            "nodeName": lab.node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "tolerations": [{"operator": "Exists"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
            "containers": [
                {
                    "name": "held",
                    "image": "localhost/gpuops-bench/never-pulled:1",
                    "imagePullPolicy": "Never",
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }
    return json.loads(lab.kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(pod)))


def make_claim(lab, driver, name, device):
    """Created, allocated to device and reserved for a pod on the node, as the scheduler
    writes it (status): its UID."""
    document = claim(name, [("gpu", device)], namespace=NAMESPACE, driver=driver.name, pool=lab.node)
    body = {
        "apiVersion": document["apiVersion"],
        "kind": document["kind"],
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"gpuops.k8s/bench": "dra"}},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": driver.name}}]}},
    }
    created = json.loads(lab.kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(body)))
    pod = holder_pod(lab, name)
    status = dict(
        document["status"],
        reservedFor=[{"resource": "pods", "name": name, "uid": pod["metadata"]["uid"]}],
    )
    lab.kubectl(
        "patch",
        "resourceclaim",
        name,
        "-n",
        NAMESPACE,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
    # The kubelet prepares it for the pod first (then fails to pull its image): wait for
    # that, so that its prepare is not one of the bench's calls.
    events = "involvedObject.name=%s,reason=ErrImageNeverPull" % name
    waited = wait_until(
        lambda: lab.get("/api/v1/namespaces/%s/events" % NAMESPACE, fieldSelector=events)["items"], 60
    )
    if waited is None:
        raise SystemExit("pod %s: the kubelet did not get to its image within 60 s" % name)
    return created["metadata"]["uid"]


def prepare_rounds(client, named, uid, calls):
    prepare, unprepare = [], []
    for _call in range(calls):
        start = time.perf_counter()
        answer = client.prepare(named)[uid]
        prepare.append(time.perf_counter() - start)
        if answer["error"]:
            raise SystemExit("NodePrepareResources: %s" % answer["error"])
        start = time.perf_counter()
        error = client.unprepare(named)[uid]
        unprepare.append(time.perf_counter() - start)
        if error:
            raise SystemExit("NodeUnprepareResources: %s" % error)
    return prepare, unprepare


def prepare_latency(lab, driver, calls):
    free = free_gpus(lab, driver)
    if not free:
        raise SystemExit("every GPU of %s is allocated: nothing free to prepare" % lab.node)
    name = "bench-dra-%d" % os.getpid()
    client = connect(lab, driver)
    named = None
    try:
        uid = make_claim(lab, driver, name, free[0])
        named = (NAMESPACE, uid, name)
        prepare, unprepare = prepare_rounds(client, named, uid, calls)
    finally:
        drop_claim(lab, client, name, named)
    return {
        "device": free[0],
        "service": client.plugin_service,
        "NodePrepareResources (ms)": [1000 * s for s in prepare],
        "NodeUnprepareResources (ms)": [1000 * s for s in unprepare],
    }


def drop_claim(lab, client, name, named):
    """Unprepared (nothing of the bench stays prepared, whatever failed) and deleted."""
    try:
        if named:
            client.unprepare(named)
    finally:
        client.close()
        lab.kubectl("delete", "pod", "-n", NAMESPACE, name, "--ignore-not-found", "--wait=true")
        lab.kubectl("delete", "resourceclaim", "-n", NAMESPACE, name, "--ignore-not-found")


# --- 3. XID to taint --------------------------------------------------------------------------


def write_overrides(lab, content):
    """Whole or not at all: the mock reads the file every second."""
    lab.sh(
        "printf '%%s' %s > %s.bench && mv %s.bench %s"
        % (shlex.quote(json.dumps(content)), OVERRIDES, OVERRIDES, OVERRIDES)
    )


def xid_to_taint(lab, driver, timeout):
    free = free_gpus(lab, driver)
    if not free:
        return {"skipped": "every GPU is allocated: no XID on a GPU someone uses"}
    if lab.sh("test -e %s && echo present || true" % OVERRIDES).strip():
        return {"skipped": "%s is there already: a fault the bench did not put" % OVERRIDES}
    device = free[-1]
    baseline = lab.gpus(driver)[device]
    index = GPU_NAME.match(device)[1]  # the mock's index: both drivers name GPUs gpu-<index>
    try:
        write_overrides(lab, {"version": 1, "devices": {index: XID_79}})
        written = time.monotonic()
        tainted = wait_until(lambda: lab.gpus(driver).get(device) != baseline, timeout)
        taints = lab.gpus(driver).get(device)
    finally:
        lab.sh("rm -f %s %s.bench" % (OVERRIDES, OVERRIDES))
    removed = time.monotonic()
    cleared = None
    if tainted is not None:
        cleared = wait_until(lambda: lab.gpus(driver).get(device) == baseline, timeout)
    return {
        "device": device,
        "taints": taints,
        "xid -> taint (s)": None if tainted is None else tainted - written,
        "cleared -> taint gone (s)": None if cleared is None else cleared - removed,
    }


# --- 4. idle CPU and RSS ----------------------------------------------------------------------


def idle_cost(lab, driver, seconds):
    pid = plugin_pid(lab, driver)
    before, started = lab.proc_stat(pid)
    window = time.monotonic()
    time.sleep(seconds)
    after, started_after = lab.proc_stat(pid)
    # The window as the two reads bound it: each is a podman exec of a few hundred ms.
    window = time.monotonic() - window
    if started_after != started:
        raise SystemExit("%s restarted during the idle window" % driver.name)
    return {"pid": pid, "RSS (MiB)": lab.rss_mib(pid), "idle CPU (s)": after - before, "idle (s)": window}


# --- report ---------------------------------------------------------------------------------


def seconds_or_not_seen(value, timeout):
    return "%.2f s" % value if value is not None else "not seen within %d s" % timeout


def slice_row(r):
    starts, commands = r["start -> slice (s)"], r["restart command -> slice (s)"]
    return (
        "start -> slice lists the %d GPUs, p50 / max" % r["gpus"],
        "%.2f s / %.2f s" % (statistics.median(starts), max(starts)),
        "%d rounds; from the restart command p50 %.2f s, max %.2f s%s"
        % (
            len(starts),
            statistics.median(commands),
            max(commands),
            "; %d started before the old slices were deleted" % r["raced"] if r["raced"] else "",
        ),
    )


def prepare_rows(r):
    return [
        (
            "%s p50 / p99" % rpc,
            "%.2f ms / %.2f ms" % (percentile(r[rpc + " (ms)"], 50), percentile(r[rpc + " (ms)"], 99)),
            "%d calls, one claim of %s, %s over the node's socket"
            % (len(r[rpc + " (ms)"]), r["device"], r["service"]),
        )
        for rpc in ("NodePrepareResources", "NodeUnprepareResources")
    ]


def xid_rows(r, timeout):
    if "skipped" in r:
        return [("XID 79 -> slice taint", "skipped", r["skipped"])]
    tainted = r["xid -> taint (s)"]
    return [
        (
            "XID 79 -> slice taint",
            seconds_or_not_seen(r["xid -> taint (s)"], timeout),
            "%s; its taints then: %s"
            % (
                r["device"],
                "gone from the slice" if r["taints"] is None else ", ".join(r["taints"]) or "none",
            ),
        ),
        (
            "XID cleared -> taint gone",
            "n/a" if tainted is None else seconds_or_not_seen(r["cleared -> taint gone (s)"], timeout),
            "no taint came" if tainted is None else r["device"],
        ),
    ]


def idle_rows(r):
    return [
        ("RSS", "%.1f MiB" % r["RSS (MiB)"], "VmRSS of PID %d in the node" % r["pid"]),
        (
            "idle CPU",
            "%.2f s (%.1f %% of a core)" % (r["idle CPU (s)"], 100 * r["idle CPU (s)"] / r["idle (s)"]),
            "utime+stime over %.0f s with no request" % r["idle (s)"],
        ),
    ]


def report(driver, results, args):
    table = []
    if "slices" in results:
        table.append(slice_row(results["slices"]))
    if "prepare" in results:
        table.extend(prepare_rows(results["prepare"]))
    if "xid" in results:
        table.extend(xid_rows(results["xid"], args.xid_timeout))
    if "idle" in results:
        table.extend(idle_rows(results["idle"]))
    print("| measure | %s (%s) | notes |\n| --- | --- | --- |" % (driver.key, driver.name))
    for row in table:
        print("| %s | %s | %s |" % row)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--driver", choices=sorted(DRIVERS), help="default: the one whose socket is there")
    parser.add_argument("--node", default="gpuops-node-2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--idle", type=int, default=30)
    parser.add_argument("--xid-timeout", type=int, default=30)
    parser.add_argument("--only", default=",".join(MEASURES), help="some of " + ",".join(MEASURES))
    parser.add_argument("--json", metavar="PATH", help="also write the figures, every sample, here")
    args = parser.parse_args()
    only = args.only.split(",")
    unknown = set(only) - set(MEASURES)
    if unknown:
        parser.error("--only: unknown %s" % ", ".join(sorted(unknown)))
    if os.geteuid() != 0:
        parser.error("run it as root: the node's sockets and podman's containers are root's")
    lab = Lab(args.node)
    driver = DRIVERS[args.driver] if args.driver else serving(lab)
    results = {}
    # In this order: the idle window last, after the restarts' start-up work is done.
    if "slices" in only:
        results["slices"] = start_to_slice(lab, driver, args.rounds)
    if "prepare" in only:
        results["prepare"] = prepare_latency(lab, driver, args.calls)
    if "xid" in only:
        results["xid"] = xid_to_taint(lab, driver, args.xid_timeout)
    if "idle" in only:
        results["idle"] = idle_cost(lab, driver, args.idle)
    report(driver, results, args)
    if args.json:
        Path(args.json).write_text(
            json.dumps({"driver": driver.name, "node": lab.node, "results": results}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
