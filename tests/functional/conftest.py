# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared helpers for tests that drive the real `ansible` CLI against this collection."""

import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(os.environ.get("GPUOPS_VENV", REPO / ".venv")) / "bin"
COLLECTIONS = REPO / ".build" / "collections"


def ansible_env(**extra):
    """Environment for the ansible CLI: this collection, JSON output, no user config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="json",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_module(name, args=None, env=None, check=False, python=None):
    """Run one module on localhost through `ansible`; return its result dict.

    python: the interpreter that runs the module (default: the venv's). Passed as a
    variable because implicit localhost ignores ANSIBLE_PYTHON_INTERPRETER.
    """
    interpreter = {"ansible_python_interpreter": str(python or VENV_BIN / "python")}
    command = [str(VENV_BIN / "ansible"), "localhost", "-m", name, "-e", json.dumps(interpreter)]
    if args:
        command += ["-a", json.dumps(args)]
    if check:
        command.append("--check")
    proc = subprocess.run(
        command, check=False, env=ansible_env(**(env or {})), capture_output=True, text=True, timeout=120
    )
    try:
        output = json.loads(proc.stdout)
    except ValueError:
        pytest.fail("ansible printed no JSON (rc %d):\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr))
    return output["plays"][0]["tasks"][0]["hosts"]["localhost"]
