# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Runs on the lab node: change config.toml one way, then time what the drift guard does.

python3 drift_probe.py HOW CONTENT_FILE WAIT, HOW one of truncate (rewrite in place),
rename (atomic replace), recreate (delete, then write anew), append; WAIT one of restart
(repaired and restarted), repaired, run (the guard ran, whatever it did). Prints one
JSON line: seconds until `containerd config dump` lists the nvidia runtime again
("repaired") and until containerd runs with a new MainPID ("restarted"), the guard's run
count and last result, both PIDs. Polls every 50 ms for at most 60 s: a bound that fails a
guard that never acts, not a timing assertion. Timed on the node, not through testinfra,
whose every command costs a second.
"""

import json
import os
import subprocess
import sys
import time

CONFIG = "/etc/containerd/config.toml"
STATE = "/var/lib/gpuops-runtime-guard/state.json"
GUARD = "gpuops-runtime-guard.service"
BOUND = 60.0


def out(*command):
    return subprocess.run(command, capture_output=True, text=True, check=False).stdout.strip()


def main_pid():
    return out("systemctl", "show", "-p", "MainPID", "--value", "containerd")


def state():
    try:
        with open(STATE) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def has_nvidia():
    return "runtimes.nvidia]" in out("containerd", "config", "dump")


def change(how, text):
    if how == "truncate":
        with open(CONFIG, "w") as handle:
            handle.write(text)
    elif how == "append":
        with open(CONFIG, "a") as handle:
            handle.write(text)
    elif how == "rename":
        tmp = os.path.join(os.path.dirname(CONFIG), ".config.toml.probe")
        with open(tmp, "w") as handle:
            handle.write(text)
        os.rename(tmp, CONFIG)
    elif how == "recreate":
        os.remove(CONFIG)
        with open(CONFIG, "w") as handle:
            handle.write(text)
    else:
        raise SystemExit("unknown change %r" % how)


def main():
    how, content, wait = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(content) as handle:
        text = handle.read()
    pid0, runs0 = main_pid(), state().get("runs", 0)
    start = time.monotonic()
    change(how, text)
    result = {"how": how, "pid_before": pid0, "runs_before": runs0}
    while time.monotonic() - start < BOUND:
        now = time.monotonic() - start
        if "repaired" not in result and has_nvidia():
            result["repaired"] = round(now, 3)
        pid = main_pid()
        if (
            "restarted" not in result
            and pid not in (pid0, "0")
            and out("systemctl", "is-active", "containerd") == "active"
        ):
            result["restarted"] = round(now, 3)
        guard_done = state().get("runs", 0) > runs0 and out("systemctl", "is-active", GUARD) != "activating"
        if guard_done and (
            wait == "run"
            or (wait == "repaired" and "repaired" in result)
            or (wait == "restart" and "repaired" in result and "restarted" in result)
        ):
            break
        time.sleep(0.05)
    # Let a second trigger (the guard's own write) finish, then read the final state.
    time.sleep(2)
    while out("systemctl", "is-active", GUARD) == "activating":
        time.sleep(0.1)
    final = state()
    result.update(
        pid_after=main_pid(),
        runs_after=final.get("runs", 0),
        history=final.get("history", [])[-(final.get("runs", 0) - runs0) :]
        if final.get("runs", 0) > runs0
        else [],
        nvidia=has_nvidia(),
    )
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
