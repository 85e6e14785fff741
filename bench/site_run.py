# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark playbooks/site.yml on the lab's Kubernetes nodes (not a test).

    .venv/bin/python bench/site_run.py [--nodes 2 4] [--fresh] [--converged 1] [--top 12]

For each node count: brings the lab's nodes to that count (lab/nodes.py up), then runs
site.yml, every phase, as `make site` does: on fresh nodes first with --fresh (`nodes.py
down`, then `up`: nothing of NVIDIA's on them), then --converged times on the converged
nodes. Each run's wall time and changed tasks per node come from Ansible's own JSON
(ansible.posix.json: every task's start and end, over all its hosts); per role, the time
its tasks took; the slowest tasks. And where the CPU went, which decides how a run
scales on this machine, whose cores the nodes share with the controller: the machine's
busy CPU seconds (/proc/stat), the controller's (ansible-playbook with its workers, the
modules it runs for the API, its SSH clients) and the nodes' (their containers' cgroup,
where the host has cgroup v1's cpuacct). One table at the end. Needs the lab's control
plane up (make lab-up).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
NODES_INVENTORY = Path("/var/lib/gpuops-lab/nodes/hosts.yml")
# Podman's containers, the lab's nodes alone here, under cgroup v1's cpuacct (the lab's host).
NODES_CPUACCT = Path("/sys/fs/cgroup/cpuacct/libpod_parent/cpuacct.usage")


def cpu_seconds():
    """(machine busy, controller, nodes or None): CPU seconds so far."""
    with open("/proc/stat", encoding="ascii") as stat:
        ticks = [int(field) for field in stat.readline().split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    machine = (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    nodes = int(NODES_CPUACCT.read_text()) / 1e9 if NODES_CPUACCT.exists() else None
    return machine, children.ru_utime + children.ru_stime, nodes


def nodes(*args):
    subprocess.run([sys.executable, str(ROOT / "lab" / "nodes.py"), *args], check=True)


def when(stamp):
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def site_run():
    """site.yml once: (wall seconds, {host: changed count}, {role: s}, [(s, task)], CPU seconds
    (machine, controller, nodes or None))."""
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
    )
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(ROOT / "inventories" / "lab")]
    argv += ["-i", str(NODES_INVENTORY), str(ROOT / "playbooks" / "site.yml")]
    start, cpu_start = time.monotonic(), cpu_seconds()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, cwd=ROOT)
    wall = time.monotonic() - start
    cpu = [None if a is None else b - a for a, b in zip(cpu_start, cpu_seconds())]
    report = json.loads(proc.stdout)
    failed = [
        "%s on %s: %s" % (task["task"]["name"], host, result.get("msg"))
        for play in report["plays"]
        for task in play["tasks"]
        for host, result in task["hosts"].items()
        if result.get("failed") or result.get("unreachable")
    ]
    if proc.returncode != 0:
        sys.exit("site.yml failed (rc %d): %s\n%s" % (proc.returncode, failed, proc.stderr[-2000:]))
    changed = {host: stats["changed"] for host, stats in report["stats"].items()}
    roles, tasks = collections.Counter(), []
    for play in report["plays"]:
        for task in play["tasks"]:
            span = task["task"].get("duration") or {}
            if not (span.get("start") and span.get("end")):
                continue
            seconds = when(span["end"]) - when(span["start"])
            name = task["task"]["name"]
            roles[name.split(" : ", 1)[0] if " : " in name else "(playbook)"] += seconds
            tasks.append((seconds, name))
    return wall, changed, roles, sorted(tasks, reverse=True), cpu


def cpu_text(cpu, wall):
    machine, controller, nodes = cpu
    cores = os.cpu_count() or 1
    return "machine %.1f (%.0f%% of %d cores), controller %.1f, nodes %s" % (
        machine,
        100 * machine / (wall * cores),
        cores,
        controller,
        "n/a" if nodes is None else "%.1f" % nodes,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[2], help="node counts (LAB_NODES)")
    parser.add_argument("--fresh", action="store_true", help="a run on fresh nodes first")
    parser.add_argument("--converged", type=int, default=1, help="converged runs after it")
    parser.add_argument("--top", type=int, default=12, help="slowest tasks to list")
    args = parser.parse_args(argv)
    rows = []
    for count in args.nodes:
        if args.fresh:
            nodes("down")
        nodes("up", "--count", str(count))
        runs = (["fresh"] if args.fresh else []) + ["converged"] * args.converged
        for kind in runs:
            print("site_run: %d nodes, %s run" % (count, kind), file=sys.stderr, flush=True)
            wall, changed, roles, tasks, cpu = site_run()
            # Nodes that `up` just added (or that drifted) are configured by the first run.
            label = "not converged: changed" if kind == "converged" and any(changed.values()) else kind
            rows.append((count, label, wall, changed, cpu))
            print("\n%d nodes, %s: %.1f s wall, changed %s" % (count, label, wall, changed))
            print("  CPU: %s" % cpu_text(cpu, wall))
            for role, seconds in roles.most_common():
                print("  %-45s %7.1f s" % (role, seconds))
            print("  slowest tasks:")
            for seconds, name in tasks[: args.top]:
                print("  %7.1f s  %s" % (seconds, name))
    print("\n| nodes | run | wall (s) | changed per node | CPU (s) |\n| --- | --- | --- | --- | --- |")
    for count, kind, wall, changed, cpu in rows:
        per_node = ", ".join("%d" % changed[host] for host in sorted(changed) if host != "localhost")
        print("| %d | %s | %.1f | %s | %s |" % (count, kind, wall, per_node, cpu_text(cpu, wall)))


if __name__ == "__main__":
    main()
