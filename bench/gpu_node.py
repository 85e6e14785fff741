# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Benchmark gpu_node on a large fleet against the lab's real API server (not a test).

    .venv/bin/python bench/gpu_node.py [--nodes 1000] [--per-host-nodes 100]

Creates N Node objects (no kubelets behind them) in the lab cluster (lab/cluster.py must
be up), then runs one play over an inventory of N hosts: each host sets what its Node
should carry (the H100 profile's labels and the GPU taint), and one gpu_node task applies
the whole fleet (the gpu_node_labels role's batch mode). It runs the play twice (first
apply, then converged) and reports wall time, the module's own API call count and the API
server's request counters for nodes. Per-host mode (one delegated task per host) is timed
on a smaller fleet for comparison. The Node objects are deleted at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
LAB = ROOT / "lab" / "cluster.py"

PLAY = """
- name: Label a fleet
  hosts: fleet
  gather_facts: false
  tasks:
    - name: Decide what each Node carries
      ansible.builtin.set_fact:
        request:
          name: "{{ inventory_hostname }}"
          labels: "{{ fleet_labels }}"
          taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}]

    - name: Apply the fleet in one task
      gpuops.k8s.gpu_node:
        kubeconfig: "{{ kubeconfig }}"
        nodes: "{{ ansible_play_hosts | map('extract', hostvars, 'request') | list }}"
      run_once: true
      when: batch | bool
      register: applied

    - name: Apply one host
      gpuops.k8s.gpu_node:
        kubeconfig: "{{ kubeconfig }}"
        name: "{{ request.name }}"
        labels: "{{ request.labels }}"
        taints: "{{ request.taints }}"
      when: not batch | bool
"""


def lab_env():
    out = subprocess.run([sys.executable, str(LAB), "env"], capture_output=True, text=True, check=True).stdout
    return dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines())


class Kubectl:
    def __init__(self, env):
        self.bin = str(Path(env["PATH"].split(":")[0]) / "kubectl")
        self.kubeconfig = env["KUBECONFIG"]

    def __call__(self, *args, stdin=None):
        return subprocess.run(
            [self.bin, "--kubeconfig", self.kubeconfig, *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    def node_requests(self):
        """The API server's own count of requests on nodes, by verb."""
        counts = {}
        pattern = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
        for line in self("get", "--raw", "/metrics").splitlines():
            match = pattern.match(line)
            if (
                not match
                or 'resource="nodes"' not in match["labels"]
                or 'subresource=""' not in match["labels"]
            ):
                continue
            verb = re.search(r'verb="([A-Z]+)"', match["labels"]).group(1)
            counts[verb] = counts.get(verb, 0) + float(match["value"])
        return counts


def h100_labels():
    lib = subprocess.run(
        ["bash", str(ROOT / "lab" / "mocknvml" / "build.sh")], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    env = dict(
        os.environ,
        LD_LIBRARY_PATH=lib,
        MOCK_NVML_CONFIG=str(ROOT / "lab" / "profiles" / "h100-8x-nvswitch.yaml"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
    )
    out = subprocess.run(
        [
            str(VENV_BIN / "ansible"),
            "localhost",
            "-m",
            "gpuops.k8s.gpu_info",
            "-e",
            "ansible_python_interpreter=%s" % sys.executable,
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    return json.loads(out)["plays"][0]["tasks"][0]["hosts"]["localhost"]["labels"]


def make_nodes(kubectl, names):
    items = [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {"bench": "gpu-node"}}}
        for n in names
    ]
    for start in range(0, len(items), 250):
        kubectl(
            "apply",
            "-f",
            "-",
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items[start : start + 250]}),
        )


def run_play(workdir, names, labels, *, kubeconfig, batch, forks):
    inventory = Path(workdir, "inventory.json")
    inventory.write_text(
        json.dumps({"fleet": {"hosts": {n: {"ansible_connection": "local"} for n in names}}})
    )
    play = Path(workdir, "play.yml")
    play.write_text(PLAY)
    variables = {
        "fleet_labels": labels,
        "kubeconfig": kubeconfig,
        "batch": batch,
        "ansible_python_interpreter": sys.executable,
    }
    env = dict(
        os.environ,
        ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".build" / "collections"),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_HOST_KEY_CHECKING="false",
    )
    start = time.monotonic()
    proc = subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            str(inventory),
            str(play),
            "-f",
            str(forks),
            "-e",
            json.dumps(variables),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(
            "play failed (%d):\n%s\n%s" % (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
        )
    stats = json.loads(proc.stdout)
    calls, changed = 0, 0
    for task in stats["plays"][0]["tasks"]:
        if task["task"]["name"].startswith("Apply"):
            for result in task["hosts"].values():
                if result.get("skipped"):
                    continue
                calls += result.get("api_calls", 0)
                changed += sum(1 for n in result.get("nodes", []) if n["changed"])
    return wall, calls, changed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--per-host-nodes", type=int, default=100)
    parser.add_argument("--forks", type=int, default=10)
    args = parser.parse_args()
    env = lab_env()
    kubectl = Kubectl(env)
    labels = h100_labels()
    names = ["bench-gpu-%04d" % i for i in range(args.nodes)]
    rows = []
    try:
        t0 = time.monotonic()
        make_nodes(kubectl, names)
        rows.append(
            ("create %d Node objects (kubectl apply)" % args.nodes, "%.1f s" % (time.monotonic() - t0), "")
        )
        with tempfile.TemporaryDirectory() as workdir:
            for label, subset, batch in (
                ("batch, first apply", names, True),
                ("batch, converged re-run", names, True),
                ("per host, first apply", names[: args.per_host_nodes], False),
            ):
                if not subset:
                    continue
                if not batch:
                    # Fresh Nodes for the per-host run: strip what the batch runs set.
                    kubectl("delete", "node", *subset, "--wait=true")
                    make_nodes(kubectl, subset)
                before = kubectl.node_requests()
                wall, calls, changed = run_play(
                    workdir, subset, labels, kubeconfig=env["KUBECONFIG"], batch=batch, forks=args.forks
                )
                after = kubectl.node_requests()
                delta = {
                    v: int(after.get(v, 0) - before.get(v, 0))
                    for v in sorted(after)
                    if after.get(v, 0) != before.get(v, 0)
                }
                rows.append(
                    (
                        "%s, %d nodes" % (label, len(subset)),
                        "%.1f s" % wall,
                        "%d changed; module calls %s; API server: %s"
                        % (changed, calls if batch else "n/a", json.dumps(delta)),
                    )
                )
    finally:
        kubectl("delete", "nodes", "-l", "bench=gpu-node", "--wait=false")
    print("| run | wall | notes |\n| --- | --- | --- |")
    for row in rows:
        print("| %s | %s | %s |" % row)


if __name__ == "__main__":
    main()
