# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One run of the drift guard: plan, repair, restart only on an effective change, roll back.

The parameters file is JSON written by the container_runtime role: the parameters
nvidia_runtime returns (its options but state, defaults applied: _runtime/defaults.py,
PARAMETERS) plus the runtime's service name and the state directory, and, for tests, the
systemctl command.

Exit status: 0 in sync or repaired; 1 the repaired configuration did not start (rolled
back), or the same files already failed that way; 2 a file cannot be parsed or edited
(left untouched); 3 bad parameters.

When to restart: the guard remembers (state.json) the effective configuration the runtime
was last restarted with or last seen in sync ("applied"), and which start of the runtime's
service that was (systemd's InvocationID). A repair restarts the runtime only when the
repaired data differ from it, so a tool that keeps rewriting the same file without the
NVIDIA runtime costs a file repair each time, not a runtime restart. Without that memory
(first run), or when the runtime has been started again since (by the tool that dropped
the entry, say: it then runs without it), it decides as nvidia_runtime does: the effective
data before and after the repair differ.
"""

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time

from ._runtime import plan as rp
from ._runtime.defaults import ENGINES, OPTIONS, PARAMETERS
from ._runtime.errors import RuntimeConfigError
from ._runtime.toml_text import HAS_TOMLKIT

DEFAULT_PARAMETERS = "/etc/gpuops-runtime-guard/guard.json"
DEFAULTS = {
    **dict.fromkeys(PARAMETERS),  # what nvidia_runtime returns as its parameters
    **OPTIONS,  # with nvidia_runtime's defaults, from the one table
    "backup": True,
    "service": None,  # the engine's (defaults.ENGINES)
    # Test hooks and tuning.
    "systemctl": "systemctl",
    "state_dir": "/var/lib/gpuops-runtime-guard",
    "settle_seconds": 0.5,  # let a burst of writes (rm + cp, an editor's save) finish first
    "max_passes": 3,
    "restart_timeout": 300,
    "history": 20,
}

OK, FAILED, UNPARSABLE, BAD_PARAMETERS = 0, 1, 2, 3
# syslog priorities, as journald reads them from a "<N>" line prefix.
ERR, WARNING, NOTICE, INFO = 3, 4, 5, 6


class ParameterError(Exception):
    pass


class Log:
    """Lines on stderr; under systemd (JOURNAL_STREAM set) with the journal's priority prefix."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.journal = bool(os.environ.get("JOURNAL_STREAM"))
        self.lines = []

    def __call__(self, priority, message):
        self.lines.append(message)
        prefix = "<%d>" % priority if self.journal else ""
        self.stream.write(prefix + message + "\n")
        self.stream.flush()


def load_parameters(path):
    try:
        with open(path) as handle:
            given = json.load(handle)
    except (OSError, ValueError) as error:
        raise ParameterError("%s: %s" % (path, error)) from error
    if not isinstance(given, dict):
        raise ParameterError("%s: expected a JSON object" % path)
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ParameterError("%s: unknown parameters %s" % (path, ", ".join(unknown)))
    params = dict(DEFAULTS)
    params.update({key: value for key, value in given.items() if value is not None})
    if params["runtime"] not in ENGINES:
        raise ParameterError(
            "%s: runtime=%r: expected one of %s" % (path, params["runtime"], ", ".join(sorted(ENGINES)))
        )
    params["service"] = params["service"] or ENGINES[params["runtime"]]["service"]
    if isinstance(params["systemctl"], str):
        params["systemctl"] = [params["systemctl"]]
    return params


def digest(data):
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def effective_digest(runtime, files):
    """Digest of what the runtime reads from files ({path: text or None})."""
    return digest({path: rp.effective(runtime, path, text or "") for path, text in sorted(files.items())})


def backup_name(path):
    """nvidia_runtime's (AnsibleModule.backup_local's) naming: PATH.PID.YYYY-MM-DD@HH:MM:SS~"""
    name = "%s.%s.%s" % (path, os.getpid(), time.strftime("%Y-%m-%d@%H:%M:%S~", time.localtime()))
    count = 1
    unique = name
    while os.path.exists(unique):  # a second repair of the same file within the second
        unique = "%s-%d~" % (name[:-1], count)
        count += 1
    return unique


class GuardFiles:
    """rp.apply()'s io for the guard: backups named as nvidia_runtime's, atomic writes that
    keep a file's mode and owner (new files 0644)."""

    def backup(self, path):
        dest = backup_name(path)
        shutil.copy2(path, dest)
        info = os.stat(path)
        with contextlib.suppress(PermissionError):
            os.chown(dest, info.st_uid, info.st_gid)
        return dest

    def write(self, path, text):
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            info = None
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, stat.S_IMODE(info.st_mode) if info else 0o644)
            if info:
                with contextlib.suppress(PermissionError):
                    os.chown(tmp, info.st_uid, info.st_gid)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def remove(self, path):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


FILES = GuardFiles()


def systemctl(params, *args):
    command = [*params["systemctl"], *args]
    try:
        proc = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=params["restart_timeout"],
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return 127, "", str(error)
    return proc.returncode, proc.stdout.strip(), proc.stderr.strip()


def restart(params):
    """Restart the runtime's service; (True, "") when it is active afterwards, else (False, why)."""
    service = params["service"]
    rc_, _out, err = systemctl(params, "restart", service)
    if rc_ != 0:
        return False, "systemctl restart %s failed (rc %d): %s" % (service, rc_, err or "no message")
    rc_, out, err = systemctl(params, "is-active", service)
    if out != "active":
        detail = (": " + err) if err else ""
        return False, "%s is %s after the restart%s" % (service, out or "unknown", detail)
    return True, ""


def invocation(params):
    """The runtime service's current start (systemd's InvocationID), or "" if unknown."""
    rc_, out, _err = systemctl(params, "show", "--property=InvocationID", "--value", params["service"])
    return out if rc_ == 0 else ""


def remember(params, state, applied):
    """Record APPLIED as what the runtime runs with, in its current start."""
    state["applied"] = applied
    state["applied_invocation"] = invocation(params) if applied else None


def recorded(params, state):
    """What the runtime runs with, as recorded; None when unknown: no record, or the
    runtime started again since (by whoever dropped the entry), so it runs with the files
    as they are now."""
    applied = state.get("applied")
    if applied and state.get("applied_invocation", "") != invocation(params):
        return None
    return applied


@contextlib.contextmanager
def locked(state_dir):
    os.makedirs(state_dir, 0o755, exist_ok=True)
    with open(os.path.join(state_dir, "lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def load_state(path):
    try:
        with open(path) as handle:
            state = json.load(handle)
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def save_state(path, state):
    FILES.write(path, json.dumps(state, indent=2, sort_keys=True) + "\n")


def roll_back(params, state, change, why):
    """The files as they were (created ones removed), the runtime restarted; the message.

    change: {"files": {path: new text}, "before": {path: old text}, "existed": {path: bool},
    "inputs": digest of the old texts}.
    """
    runtime, service = params["runtime"], params["service"]
    changed, before = change["files"], change["before"]
    for path in sorted(changed):
        if change["existed"][path]:
            FILES.write(path, before[path])
        else:
            FILES.remove(path)
    back, why_back = restart(params)
    state["failed"] = change["inputs"]
    remember(params, state, effective_digest(runtime, before) if back else None)
    return (
        "%s did not come back after the %s runtime was restored in %s: %s. Restored the files as "
        "they were and restarted %s: %s. The guard will not repair these files again until they "
        "change; see journalctl -u %s"
        % (
            service,
            params["runtime_name"],
            ", ".join(sorted(changed)),
            why,
            service,
            "it is active" if back else "that failed too (%s)" % why_back,
            service,
        )
    )


def delegated(planned, log):
    """True, logged, when k3s or RKE2 writes the file anew at every start (the plan says so,
    as it tells nvidia_runtime): a repair would be lost, and repeated for ever."""
    if not planned.distribution:
        return False
    log(INFO, "%s; nothing to do" % planned.msg)
    for warning in planned.warnings:
        log(WARNING, warning)
    return True


def repair(params, state, log):
    """Plan and apply until the files are in sync (a write may land while we work)."""
    runtime, name, service = params["runtime"], params["runtime_name"], params["service"]
    outcome = {"result": "in_sync", "restarted": False, "changed_files": [], "backup_files": {}}
    for attempt in range(params["max_passes"]):
        try:
            planned = rp.plan(params)
            changed, module_restart = planned.changes(), planned.restart_required()
            after = effective_digest(runtime, planned.files)
        except RuntimeConfigError as error:
            log(ERR, "cannot check the %s runtime: %s" % (name, error))
            outcome.update(result="error", message=str(error))
            return UNPARSABLE, outcome
        if delegated(planned, log):
            outcome.update(result="distribution", message=planned.msg)
            return OK, outcome
        files = ", ".join(planned.planned_files)
        if not changed:
            if attempt == 0:
                log(INFO, "in sync: %s declares the %s runtime as configured; nothing to do" % (files, name))
            remember(params, state, after)
            state.pop("failed", None)
            return OK, outcome

        before = planned.before
        inputs = digest(sorted(before.items()))
        if state.get("failed") == inputs:
            message = (
                "not repairing %s again: the same files, repaired, already kept %s from starting "
                "(see the previous run); change them or rerun the container_runtime role" % (files, service)
            )
            log(ERR, message)
            outcome.update(result="failed_before", message=message)
            return FAILED, outcome

        applied = recorded(params, state)
        needs_restart = after != applied if applied else module_restart
        existed = {path: planned.existed[path] for path in changed}
        backups = rp.apply(changed, params["backup"], FILES)
        outcome["changed_files"] = sorted(set(outcome["changed_files"]) | set(changed))
        outcome["backup_files"].update(backups)
        outcome["result"] = "repaired"
        log(
            NOTICE,
            "drift: restored the %s runtime in %s%s"
            % (
                name,
                ", ".join(sorted(changed)),
                " (backup: %s)" % ", ".join(backups[p] for p in sorted(backups)) if backups else "",
            ),
        )
        if not needs_restart:
            log(INFO, "no restart: %s already runs with this effective configuration" % service)
            remember(params, state, after)
            state.pop("failed", None)
            continue

        started = time.monotonic()
        ok, why = restart(params)
        if ok:
            log(NOTICE, "restarted %s (%.1f s); it is active" % (service, time.monotonic() - started))
            outcome["restarted"] = True
            remember(params, state, after)
            state.pop("failed", None)
            continue

        change = {"files": changed, "before": before, "existed": existed, "inputs": inputs}
        message = roll_back(params, state, change, why)
        log(ERR, message)
        outcome.update(result="rolled_back", restarted=True, message=message)
        return FAILED, outcome

    log(
        WARNING, "the files kept changing for %d passes; the next trigger checks again" % params["max_passes"]
    )
    return OK, outcome


def check_only(params, log):
    """--check: report drift without touching anything (0 in sync, 1 drift, 2 unparsable)."""
    try:
        planned = rp.plan(params)
        changed, restart_required = planned.changes(), planned.restart_required()
    except RuntimeConfigError as error:
        log(ERR, "cannot check the %s runtime: %s" % (params["runtime_name"], error))
        return UNPARSABLE
    if delegated(planned, log):
        return OK
    if not changed:
        log(INFO, "in sync: %s" % ", ".join(planned.planned_files))
        return OK
    log(
        WARNING,
        "drift: %s would be rewritten (effective change: %s)"
        % (", ".join(sorted(changed)), "yes" if restart_required else "no"),
    )
    return FAILED


def main(argv=None, log=None):
    parser = argparse.ArgumentParser(prog="gpuops_runtime_guard", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=DEFAULT_PARAMETERS, help="parameters (JSON) the role wrote")
    parser.add_argument("--check", action="store_true", help="only report drift; change nothing")
    args = parser.parse_args(argv)
    log = log or Log()
    try:
        params = load_parameters(args.config)
    except ParameterError as error:
        log(ERR, "bad parameters: %s" % error)
        return BAD_PARAMETERS
    if params["runtime"] != "docker" and not HAS_TOMLKIT:
        log(ERR, "the Python module tomlkit is missing: install python3-tomlkit (the role does)")
        return BAD_PARAMETERS
    if args.check:
        return check_only(params, log)

    state_dir = params["state_dir"]
    state_file = os.path.join(state_dir, "state.json")
    if params["settle_seconds"]:
        time.sleep(params["settle_seconds"])
    with locked(state_dir):
        state = load_state(state_file)
        started = time.time()
        status, outcome = repair(params, state, log)
        outcome.update(
            time=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
            seconds=round(time.time() - started, 3),
            status=status,
        )
        state["runs"] = state.get("runs", 0) + 1
        state["last_run"] = outcome
        state["history"] = ([*state.get("history", []), outcome])[-params["history"] :]
        save_state(state_file, state)
    return status
