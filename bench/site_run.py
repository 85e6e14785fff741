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
its tasks took; the slowest tasks. One table at the end. Needs the lab's control plane up (make lab-up).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
NODES_INVENTORY = Path("/var/lib/gpuops-lab/nodes/hosts.yml")


def nodes(*args):
    subprocess.run([sys.executable, str(ROOT / "lab" / "nodes.py"), *args], check=True)


def when(stamp):
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def site_run():
    """site.yml once: (wall seconds, {host: changed count}, {role: s}, [(s, task)])."""
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
    )
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(ROOT / "inventories" / "lab")]
    argv += ["-i", str(NODES_INVENTORY), str(ROOT / "playbooks" / "site.yml")]
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False, cwd=ROOT)
    wall = time.monotonic() - start
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
    return wall, changed, roles, sorted(tasks, reverse=True)


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
            wall, changed, roles, tasks = site_run()
            rows.append((count, kind, wall, changed))
            print("\n%d nodes, %s: %.1f s wall, changed %s" % (count, kind, wall, changed))
            for role, seconds in roles.most_common():
                print("  %-45s %7.1f s" % (role, seconds))
            print("  slowest tasks:")
            for seconds, name in tasks[: args.top]:
                print("  %7.1f s  %s" % (seconds, name))
    print("\n| nodes | run | wall (s) | changed per node |\n| --- | --- | --- | --- |")
    for count, kind, wall, changed in rows:
        per_node = ", ".join("%d" % changed[host] for host in sorted(changed) if host != "localhost")
        print("| %d | %s | %.1f | %s |" % (count, kind, wall, per_node))


if __name__ == "__main__":
    main()
