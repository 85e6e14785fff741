# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared helpers for tests that drive the real `ansible` CLI against this collection."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(os.environ.get("GPUOPS_VENV", REPO / ".venv")) / "bin"
COLLECTIONS = REPO / ".build" / "collections"

# Inherited variables that would change what ansible, the loader or the mock NVML does.
_SCRUBBED_PREFIXES = ("ANSIBLE_", "MOCK_NVML_", "MOCK_MIG_", "MOCK_TOPOLOGY_")
_SCRUBBED = ("LD_LIBRARY_PATH", "LD_PRELOAD", "NODE_NAME")


def process_env(env=None):
    """os.environ without variables that steer ansible or NVML, plus env."""
    base = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(_SCRUBBED_PREFIXES) and key not in _SCRUBBED
    }
    base.update({key: str(value) for key, value in (env or {}).items()})
    return base


def ansible_env(env=None):
    """process_env(env) plus what makes the ansible CLI find this collection and answer in JSON."""
    full_env = process_env(env)
    full_env.update(
        ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS),
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOCALHOST_WARNING="false",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="false",
    )
    return full_env


def run_module(
    args=None, env=None, *, module="gpuops.k8s.gpu_info", check=False, diff=False, python=None, timeout=180
):
    """Run one module on implicit localhost with the real `ansible` CLI; return its result.

    env: extra environment (LD_LIBRARY_PATH, MOCK_NVML_CONFIG, ...). python: the
    interpreter that runs the module (default: the venv's); passed as a variable because
    implicit localhost ignores ANSIBLE_PYTHON_INTERPRETER. The result is the host's dict
    from the JSON callback: return values plus `failed`, `msg` and `warnings` where set.
    """
    interpreter = {"ansible_python_interpreter": str(python or VENV_BIN / "python")}
    command = [str(VENV_BIN / "ansible"), "localhost", "-m", module, "-e", json.dumps(interpreter)]
    if args:
        command += ["-a", json.dumps(args)]
    if check:
        command.append("--check")
    if diff:
        command.append("--diff")
    full_env = ansible_env(env)
    proc = subprocess.run(command, check=False, capture_output=True, text=True, env=full_env, timeout=timeout)
    try:
        return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError) as error:
        raise AssertionError(
            "ansible gave no module result (%s; rc %d)\nstdout:\n%s\nstderr:\n%s"
            % (error, proc.returncode, proc.stdout, proc.stderr)
        ) from error


def playbook(tmp_path, name, plays, inventory_vars=None, extra_vars=None):
    """Run plays with ansible-playbook on localhost; return {task name: localhost's result}."""
    python = str(VENV_BIN / "python")
    host = dict(inventory_vars or {}, ansible_connection="local", ansible_python_interpreter=python)
    inventory = tmp_path / ("%s.inventory.yml" % name)
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": host}}}))
    path = tmp_path / ("%s.yml" % name)
    path.write_text(yaml.safe_dump(plays, sort_keys=False))
    command = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(path)]
    if extra_vars:
        extra = tmp_path / ("%s.extra.json" % name)
        extra.write_text(json.dumps(extra_vars))
        command += ["-e", "@%s" % extra]
    env = ansible_env()
    proc = subprocess.run(command, capture_output=True, text=True, env=env, check=False, timeout=300)
    try:
        tasks = json.loads(proc.stdout)["plays"][0]["tasks"]
    except (ValueError, KeyError, IndexError) as error:
        raise AssertionError(
            "no JSON result (rc %d)\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr)
        ) from error
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    # A role's task is named "ROLE : NAME".
    return {task["task"]["name"].split(" : ")[-1]: task["hosts"]["localhost"] for task in tasks}


def _library(script):
    from _mock import build_mock  # noqa: PLC0415 - _mock imports this module

    build = build_mock(script)
    if build.rc != 0:
        # A library that cannot be built fails the tests that need it: never a skip.
        raise RuntimeError(
            "%s failed (exit %d):\n%s\n%s" % (script.relative_to(REPO), build.rc, build.stdout, build.stderr)
        )
    return build.lib_dir


@pytest.fixture(scope="module")
def mocknvml():
    """NVIDIA's mock NVML (lab/mocknvml/build.sh): its library directory."""
    from _mock import BUILD_SH  # noqa: PLC0415 - _mock imports this module

    return _library(BUILD_SH)


@pytest.fixture(scope="module")
def mig_standin():
    """gpuops's MIG NVML stand-in (lab/mig-nvml-standin), for the tests that need MIG
    instances, which NVIDIA's mock does not model: its library directory."""
    from _mock import MIG_STANDIN_SH  # noqa: PLC0415 - _mock imports this module

    return _library(MIG_STANDIN_SH)
