# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""ansible-test sanity and units on each supported ansible-core line (`make matrix`).

One table, LINES: each line's ansible-core pin and the controller Python it runs on. Per
line: a venv under .cache/ansible-matrix/<line>-py<python> with that ansible-core (made
once, kept while the pin is unchanged), a copy of the collection under
.build/matrix/<line>/ (`make test-tree`), then `ansible-test sanity` (every test, pylint
on PYLINT_LINES only; no ignore file) and `ansible-test units`, both in ansible-test's own
venvs from that Python.
The newest line's sanity also runs the multi-version tests (compile, import) on the
Pythons of the managed nodes we support (NODE_PYTHONS).

The dev line (requirements/dev.txt, the `.venv` that every other gate runs in) is the
`sanity` and `units` gates' own, so only its multi-version sanity tests on the node
Pythons run here. Every line runs even after one fails; the summary names each failed
line and the exit status is 1.

Usage: python scripts/ansible-matrix.py [LINE ...]   (default: every line but the dev one)
       python scripts/ansible-matrix.py --python dev   (the dev line's interpreter, for
       scripts/bootstrap.sh; stdlib only, so any Python 3 runs it)
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("GPUOPS_CACHE", REPO / ".cache")) / "ansible-matrix"
BUILD = REPO / ".build" / "matrix"
COLLECTIONS = REPO / ".build" / "collections" / "ansible_collections"

# line, ansible-core pin, controller Python (one the line supports as controller:
# 2.17 3.10-3.12, 2.18 and 2.19 3.11-3.13, 2.20 and 2.21 3.12-3.14). 2.17 runs on 3.12,
# not 3.10: without tomllib (< 3.11) the runtime property tests read TOML with tomlkit
# 0.11, and units ran 5 minutes under load without finishing; 3.10 is a node Python below.
LINES = [
    ("2.17", "2.17.14", "3.12"),
    ("2.18", "2.18.19", "3.11"),
    ("2.19", "2.19.14", "3.11"),
    ("2.20", "2.20.10", "3.12"),
    ("2.21", "2.21.5", "3.13"),  # the dev line: `make venv` makes .venv with this Python
]
# The newest line: requirements/dev.in pins the same ansible-core.
DEV_LINE = "2.21"
# pylint, the one sanity test that is all CPU (about 140 s a line; make test is bound by its
# 2 cores), runs on the floor's line and the dev line (the sanity gate): its checkers come
# from pylint and ansible-test, not from the ansible-core our code runs on, so the lines
# between repeat what those two bracket. Every other sanity test, and units, run on all.
PYLINT_LINES = {LINES[0][0], DEV_LINE}
# The managed nodes' Python: modules and module_utils must compile and import there.
NODE_PYTHONS = [("3.9", "RHEL 9"), ("3.10", "Ubuntu 22.04"), ("3.11", "Debian 12")]


def say(line, text):
    print(f"matrix {line}: {text}", flush=True)


def interpreter(version):
    """The path of a real (non-venv) Python X.Y: pyenv's, else one on PATH."""
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = sorted(glob.glob(str(root / "versions" / f"{version}.*" / "bin" / f"python{version}")))
    candidates = [*found[-1:], shutil.which(f"python{version}") or ""]
    for path in candidates:
        if path and subprocess.run([path, "-c", ""], capture_output=True, check=False).returncode == 0:
            return path
    sys.exit(f"matrix: no Python {version} found (pyenv or python{version} on PATH)")


def run(line, cmd, cwd=None, env=None):
    """Run cmd with its output prefixed by the line and the seconds since it started."""
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    for text in proc.stdout:
        print(f"[{line} {time.monotonic() - start:4.0f}s] {text}", end="", flush=True)
    return proc.wait() == 0


def ensure_venv(line, core, python):
    """The line's venv with ansible-core==core and the collection's controller-side
    requirements (requirements.txt: what a playbook run needs, e.g. the lab's site.yml run
    on the oldest line); made again only when either changes."""
    venv = CACHE / f"{line}-py{python}"
    # make test's lanes may both want it: the matrix, and the lab nodes' oldest-line run.
    with locked(venv.with_name(venv.name + ".lock")):
        return _ensure_venv(venv, line, core, python)


@contextlib.contextmanager
def locked(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _ensure_venv(venv, line, core, python):
    stamp = venv / ".gpuops-stamp"
    want = f"ansible-core=={core}"
    # Ours, and those of the collection we depend on (as an execution environment gets them).
    requirements = [REPO / "requirements.txt", COLLECTIONS / "kubernetes/core/requirements.txt"]
    wanted = "\n".join([want, *(path.read_text().strip() for path in requirements)])
    if not (stamp.is_file() and stamp.read_text().strip() == wanted):
        say(line, f"creating {venv.relative_to(CACHE.parent)} with {want} and the controller's requirements")
        shutil.rmtree(venv, ignore_errors=True)
        # uv (requirements/dev.txt) makes the venv and installs into it from its shared
        # cache: about 2 s a line where venv and pip took 40 to 70 s, in each fresh clone.
        # --seed: pip in the venv, which ansible-test and its pip bootstrap run.
        uv = uv_command()
        subprocess.run([uv, "venv", "-q", "--seed", "--python", interpreter(python), str(venv)], check=True)
        subprocess.run(
            [
                uv,
                "pip",
                "install",
                "-q",
                "--python",
                str(venv / "bin/python"),
                want,
                *(arg for path in requirements for arg in ("-r", str(path))),
            ],
            check=True,
        )
        stamp.write_text(wanted + "\n")
    # ansible-test's pip bootstrap for the pip version this line pins (offline stand-in).
    subprocess.run(["bash", str(REPO / "scripts/ansible-test-pip.sh"), str(venv / "bin/python")], check=True)
    return venv


def uv_command():
    """The dev venv's uv (beside the Python running this), else one on PATH."""
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if not found:
        sys.exit("matrix: no uv (requirements/dev.txt installs it: make venv)")
    return found


def make_tree(line):
    """A fresh copy of the collection for this line, keeping ansible-test's delegation
    venvs (tests/output/.tmp/delegation: the units requirements) from the last run."""
    tree = BUILD / line / "ansible_collections/gpuops/k8s"
    keep = tree / "tests/output/.tmp/delegation"
    kept = BUILD / line / "delegation"
    if keep.is_dir():
        shutil.rmtree(kept, ignore_errors=True)
        keep.rename(kept)
    subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), "test-tree", f"TEST_TREE={tree}"], check=True
    )
    if kept.is_dir():
        keep.parent.mkdir(parents=True, exist_ok=True)
        kept.rename(keep)
    # The property tests take fewer examples on the lines that re-check what the dev line's
    # units explore (tests/unit/plugins/module_utils/test_runtime_config_properties.py).
    (tree / "tests/unit/matrix-line").write_text(line + "\n")
    return tree


def run_line(line, core, python, newest, node_pythons_only=False):
    """Sanity and units on one line; with node_pythons_only (the dev line, whose own gates
    run the rest) only the multi-version sanity tests on the node Pythons."""
    times = {"units": 0.0}
    start = time.monotonic()
    venv = ensure_venv(line, core, python)
    tree = make_tree(line)
    times["setup"] = time.monotonic() - start
    # Sanity: the controller in a venv of the line's Python; the multi-version tests
    # (compile, import) on each target Python, run directly (import makes its own venvs).
    nodes = [version for version, _os in NODE_PYTHONS if version != python] if newest else []
    pythons = nodes if node_pythons_only else [python, *nodes]
    # ansible-test looks some of them up again as pythonX.Y on PATH (the import test's
    # venvs), where pyenv's shims refuse versions that are not global: links to them first.
    links = CACHE / "bin"
    links.mkdir(parents=True, exist_ok=True)
    for version in pythons:
        link = links / f"python{version}"
        if not link.exists():  # missing, or dangling after a Python moved
            link.unlink(missing_ok=True)
            link.symlink_to(interpreter(version))
    env = dict(os.environ, PATH=f"{venv / 'bin'}:{links}:{os.environ['PATH']}")
    env.pop("VIRTUAL_ENV", None)
    test = [str(venv / "bin/ansible-test")]
    targets = []
    for version in pythons:
        targets += ["--target-python", f"{version}@{interpreter(version)}"]
    controller = ["--controller", f"origin:python=venv/{python}@{interpreter(python)}"]
    on = ", ".join(pythons)
    skip = [] if node_pythons_only or line in PYLINT_LINES else ["--skip-test", "pylint"]
    without = "; pylint on the floor's and the dev line only" if skip else ""
    say(line, f"sanity (ansible-core {core}, Python {python}; compile and import on {on}{without})")
    only = ["--test", "compile", "--test", "import"] if node_pythons_only else []
    start = time.monotonic()
    sanity = [*test, "sanity", "--color", "no", *only, *skip, *controller, *targets]
    ok_sanity = run(line, sanity, cwd=tree, env=env)
    times["sanity"] = time.monotonic() - start
    if node_pythons_only:
        return ([] if ok_sanity else ["sanity"]), times

    # Units, as `make units`: pythonX.Y is the line's venv (first on PATH).
    say(line, f"units (ansible-core {core}, Python {python})")
    start = time.monotonic()
    ok_units = run(line, [*test, "units", "--color", "no", "--venv", "--python", python], cwd=tree, env=env)
    times["units"] = time.monotonic() - start
    failed = [name for name, ok in (("sanity", ok_sanity), ("units", ok_units)) if not ok]
    return failed, times


def summarize(results, dev_row):
    """Print each line's times and result; the exit status: 1 if any line failed."""
    print("\n===== ansible-core matrix =====")
    print(f"  {'line':5} {'ansible-core':12} {'python':6} {'setup':>6} {'sanity':>7} {'units':>6}  result")
    for line, core, python, failed, times in results:
        result = "ok" if not failed else "FAILED: " + ", ".join(failed)
        print(
            f"  {line:5} {core:12} {python:6} {times['setup']:5.0f}s {times['sanity']:6.0f}s "
            f"{times['units']:5.0f}s  {result}"
        )
    if dev_row:
        core, python = dev_row
        print(f"  {DEV_LINE:5} {core:12} {python:6} (the dev line: run by `make sanity units`)")
    bad = [entry[0] for entry in results if entry[3]]
    if bad:
        print(f"matrix FAILED on ansible-core {', '.join(bad)}")
        return 1
    print("matrix ok")
    return 0


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "lines", nargs="*", metavar="LINE", help="lines to run (default: all but the dev line)"
    )
    parser.add_argument("--list", action="store_true", help="print the table and exit")
    parser.add_argument(
        "--python",
        metavar="LINE",
        help="print the path of LINE's controller Python (\"dev\": the dev line's); run nothing",
    )
    parser.add_argument(
        "--venv",
        metavar="LINE",
        help="make LINE's venv if needed and print its path (\"oldest\": the floor's); run nothing",
    )
    args = parser.parse_args()
    table = {line: (core, python) for line, core, python in LINES}
    named = {"dev": DEV_LINE, "oldest": LINES[0][0]}
    if args.list:
        for line, core, python in LINES:
            note = "  (dev line: make sanity units)" if line == DEV_LINE else ""
            print(f"{line}  ansible-core {core}  Python {python}{note}")
        print(
            "node Pythons (compile, import on %s): %s"
            % (LINES[-1][0], ", ".join(f"{v} ({name})" for v, name in NODE_PYTHONS))
        )
        return 0
    wanted = args.python or args.venv
    if wanted:
        line = named.get(wanted, wanted)
        if line not in table:
            parser.error(f"unknown line {wanted}; known: {', '.join([*named, *table])}")
        if args.python:
            print(interpreter(table[line][1]))
            return 0
        with contextlib.redirect_stdout(sys.stderr):  # stdout: the path alone
            venv = ensure_venv(line, *table[line])
        print(venv)
        return 0
    unknown = [line for line in args.lines if line not in table]
    if unknown:
        parser.error(f"unknown line(s) {', '.join(unknown)}; known: {', '.join(table)}")
    chosen = args.lines or [entry[0] for entry in LINES if entry[0] != DEV_LINE]

    newest = LINES[-1][0]
    results = []
    for line in chosen:
        core, python = table[line]
        failed, times = run_line(line, core, python, newest=line == newest)
        results.append((line, core, python, failed, times))
    if newest == DEV_LINE and not args.lines:
        # `make sanity` runs the dev line on its own Python; its node Pythons are ours.
        core, python = table[DEV_LINE]
        failed, times = run_line(DEV_LINE, core, python, newest=True, node_pythons_only=True)
        results.append((DEV_LINE, core, "nodes", failed, times))
    return summarize(results, None if DEV_LINE in chosen else table[DEV_LINE])


if __name__ == "__main__":
    sys.exit(main())
