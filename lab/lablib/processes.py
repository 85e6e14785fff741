# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Errors, logging and commands, and the lab's components as processes: started with their
output in LOGS, recorded by PID (and the command and environment `restart` needs) in
RUN_DIR, stopped by PID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from .layout import LOGS, RUN_DIR


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


def require_root():
    if os.geteuid() != 0:
        raise LabError("the lab cluster runs a kubelet and containerd: run it as root")


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


def saved_spec(component):
    saved = RUN_DIR / ("%s.json" % component)
    if not saved.exists():
        raise LabError("%s was not started by `up` (no %s)" % (component, saved))
    return json.loads(saved.read_text())
