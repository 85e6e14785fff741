# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark the gpuops device plugin against NVIDIA's, side by side (not a test).

    .venv/bin/python bench/device_plugin.py [--plugins gpuops,nvidia] [--calls 10000]
        [--restarts 100] [--idle 60] [--real-gpu [--nvidia-binary PATH]]

Both plugins run over NVIDIA's mock NVML (lab/mocknvml/build.sh, H100 8-GPU profile)
and talk to the same kubelet stand-in (lab/daemon/kubelet_standin.py), which
is also the client that times the RPCs. NVIDIA's plugin always serves in
/var/lib/kubelet/device-plugins, so both run there: run as root on a machine without a
kubelet. NVIDIA's binary comes from lab/peer/build-nvidia-plugin.sh.

Measured: time to first registration; re-registration after each of --restarts kubelet
restarts (p50/p99); Allocate and GetPreferredAllocation latency over --calls calls
(p50/p99); XID 79 to Unhealthy in the kubelet's list (one per GPU, injected through the
mock's overrides file); RSS and CPU while idle for --idle seconds.

--real-gpu: the driver's own NVML and GPUs instead of the mock (a machine with a GPU;
nothing on it is changed), so no XID is injected; --nvidia-binary names NVIDIA's plugin
built elsewhere, where this machine has no Go.

NVIDIA's mock delivers an injected XID through the event set only after the process makes
a guarded device call (a real GPU raises it unasked): a plugin that only waits on events
between requests never sees it. Such GPUs are counted, not timed.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DAEMON_PACKAGE = ROOT / "roles" / "device_plugin" / "files" / "gpuops-device-plugin"
sys.path[:0] = [str(ROOT / "lab" / "daemon"), str(DAEMON_PACKAGE)]
sys.dont_write_bytecode = True

from dp_harness import H100_UUIDS, OVERRIDES_TTL, PROFILES, MockFaults, build_mock, short_tempdir  # noqa: E402
from kubelet_standin import KubeletStandin  # noqa: E402

PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
RESOURCE = "nvidia.com/gpu"
TICKS = os.sysconf("SC_CLK_TCK")


def percentile(values, pct):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def real_uuids():
    """The UUIDs of the driver's GPUs (--real-gpu), from NVML as both plugins read them."""
    import pynvml  # noqa: PLC0415 - only on a machine with a GPU

    pynvml.nvmlInit()
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        return [pynvml.nvmlDeviceGetUUID(handle) for handle in handles]
    finally:
        pynvml.nvmlShutdown()


def nvidia_binary(path=None):
    if path:
        return path
    proc = subprocess.run(
        ["bash", str(ROOT / "lab" / "peer" / "build-nvidia-plugin.sh")],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit("NVIDIA's plugin is not available: %s" % proc.stderr.strip())
    return os.path.join(proc.stdout.strip().splitlines()[-1], "nvidia-device-plugin")


def command(plugin, options):
    if plugin == "gpuops":
        config = Path(short_tempdir("bench-cfg-")) / "config.yaml"
        config.write_text("version: v1\nhealth:\n  recovery:\n    enabled: false\n")
        return [
            sys.executable,
            "-m",
            "gpuops_device_plugin",
            "--device-plugin-path",
            PLUGIN_DIR,
            "--metrics-address",
            "",
            "--config-file",
            str(config),
        ]
    return [
        nvidia_binary(options.nvidia_binary),
        "--kubelet-socket",
        os.path.join(PLUGIN_DIR, "kubelet.sock"),
    ]


def cpu_seconds(pid):
    fields = Path("/proc/%d/stat" % pid).read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid):
    for line in Path("/proc/%d/status" % pid).read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def reregistration(kubelet, restarts, uuids):
    times = []
    for _restart in range(restarts):
        before = kubelet.registrations
        kubelet.restart()
        kubelet.wait_registered(RESOURCE, after=before, timeout=60).wait(
            lambda d: len(d) == len(uuids), timeout=30
        )
        # From the new kubelet.sock to the plugin's Register (the stand-in's own stop is excluded).
        times.append(kubelet.registered_at - kubelet.started_at)
    return {
        "re-registration p50 (ms)": 1000 * percentile(times, 50),
        "re-registration p99 (ms)": 1000 * percentile(times, 99),
    }


def rpc_latency(client, calls, uuids):
    rng = random.Random(7)
    allocate, preferred = [], []
    for _call in range(calls):
        device = rng.choice(uuids)
        start = time.perf_counter()
        client.allocate([device])
        allocate.append(time.perf_counter() - start)
    for _call in range(calls):
        must = [rng.choice(uuids)]
        start = time.perf_counter()
        client.preferred(uuids, must, min(4, len(uuids)))
        preferred.append(time.perf_counter() - start)
    return {
        "Allocate p50 (ms)": 1000 * percentile(allocate, 50),
        "Allocate p99 (ms)": 1000 * percentile(allocate, 99),
        "GetPreferredAllocation p50 (ms)": 1000 * percentile(preferred, 50),
        "GetPreferredAllocation p99 (ms)": 1000 * percentile(preferred, 99),
    }


def idle(pid, seconds):
    cpu_before, wall_before = cpu_seconds(pid), time.perf_counter()
    time.sleep(seconds)
    cpu = cpu_seconds(pid) - cpu_before
    return {"idle CPU (%)": 100 * cpu / (time.perf_counter() - wall_before), "RSS (MiB)": rss_mib(pid)}


def xid_to_unhealthy(client, faults, timeout=15):
    """XID 79 on each GPU in turn (NVIDIA's plugin never recovers one, so each GPU once)."""
    times, missed = [], 0
    for index, uuid in enumerate(H100_UUIDS):
        start = time.perf_counter()
        faults.inject("xid-%d-79" % index)
        try:
            client.wait(lambda d, u=uuid: d.get(u) == "Unhealthy", timeout=timeout)
        except TimeoutError:
            missed += 1
            continue
        times.append(time.perf_counter() - start)
    return {
        "XID-to-Unhealthy p50 (ms)": 1000 * statistics.median(times) if times else float("nan"),
        "XID-to-Unhealthy max (ms)": 1000 * max(times) if times else float("nan"),
        "XIDs not seen within %d s" % timeout: missed,
    }


def bench(plugin, lib_dir, options, uuids):
    control = short_tempdir("bench-ctl-")
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(DAEMON_PACKAGE), os.environ.get("PYTHONPATH")])),
    )
    if lib_dir:
        env.update(
            LD_LIBRARY_PATH=lib_dir,
            MOCK_NVML_CONFIG=str(PROFILES / "h100-8x-nvswitch.yaml"),
            MOCK_NVML_OVERRIDES=os.path.join(control, "overrides.yaml"),
            MOCK_NVML_OVERRIDES_TTL=OVERRIDES_TTL,
        )
    kubelet = KubeletStandin(PLUGIN_DIR)
    kubelet.start()
    log = open(os.path.join(control, "plugin.log"), "w")  # noqa: SIM115
    argv = command(plugin, options)
    started = time.perf_counter()
    proc = None
    results = {}
    try:
        proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        client = kubelet.wait_registered(RESOURCE, timeout=60)
        client.wait(lambda d: len(d) == len(uuids), timeout=30)
        results["first registration (s)"] = time.perf_counter() - started
        results.update(reregistration(kubelet, options.restarts, uuids))
        results.update(rpc_latency(kubelet.clients[RESOURCE], options.calls, uuids))
        results.update(idle(proc.pid, options.idle))
        if lib_dir:  # the mock's faults; a real GPU gets none
            results.update(
                xid_to_unhealthy(kubelet.clients[RESOURCE], MockFaults(env["MOCK_NVML_OVERRIDES"]))
            )
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        log.close()
        kubelet.stop()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plugins", default="gpuops,nvidia")
    parser.add_argument("--calls", type=int, default=10000)
    parser.add_argument("--restarts", type=int, default=100)
    parser.add_argument("--idle", type=float, default=60)
    parser.add_argument("--real-gpu", action="store_true", help="the driver's NVML and GPUs, not the mock")
    parser.add_argument("--nvidia-binary", help="NVIDIA's plugin, built elsewhere")
    options = parser.parse_args()
    kubelet_sock = os.path.join(PLUGIN_DIR, "kubelet.sock")
    if os.path.exists(kubelet_sock):
        with socket.socket(socket.AF_UNIX) as probe:
            if probe.connect_ex(kubelet_sock) == 0:
                raise SystemExit("%s answers: a kubelet runs here; not benchmarking over it." % kubelet_sock)
        os.unlink(kubelet_sock)  # left by an interrupted run: nothing listens on it
    os.makedirs(PLUGIN_DIR, exist_ok=True)
    lib_dir, uuids = (None, real_uuids()) if options.real_gpu else (build_mock(), H100_UUIDS)
    table = {}
    for plugin in options.plugins.split(","):
        print("benchmarking %s ..." % plugin, file=sys.stderr)
        table[plugin] = bench(plugin, lib_dir, options, uuids)
    metrics = list(next(iter(table.values())))
    names = list(table)
    header = "| metric | " + " | ".join(names) + (" | gpuops / nvidia |" if len(names) == 2 else " |")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for metric in metrics:
        row = [table[n][metric] for n in names]
        ratio = (
            " | %.2f" % (row[0] / row[1]) if len(row) == 2 and row[1] else (" | -" if len(row) == 2 else "")
        )
        print("| %s | %s%s |" % (metric, " | ".join("%.3f" % v for v in row), ratio))


if __name__ == "__main__":
    main()
