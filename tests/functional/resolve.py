# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Resolve role variables with the real ansible-playbook (playbooks/resolve_vars.yml).

What a role would install or download is data in its defaults, vars files, task arguments
and templates. These helpers ask Ansible itself for it: role defaults and vars as a play
sees them, under an inventory's variables, with per-OS facts pretended, and expressions
taken verbatim from the roles' task files or templates, so a test asserts what the role
would really use, not a copy of it.
"""

import json
import os
import subprocess
from pathlib import Path

import yaml
from conftest import REPO, VENV_BIN, ansible_env

PLAYBOOK = Path(__file__).resolve().parent / "playbooks" / "resolve_vars.yml"
ROLES = REPO / "roles"

# Facts of the OS releases the roles have code paths for.
OS_FACTS = {
    "debian12": {
        "distribution": "Debian",
        "os_family": "Debian",
        "distribution_major_version": "12",
        "distribution_release": "bookworm",
        "architecture": "x86_64",
        "kernel": "6.1.0-28-amd64",
    },
    "ubuntu2204": {
        "distribution": "Ubuntu",
        "os_family": "Debian",
        "distribution_major_version": "22",
        "distribution_release": "jammy",
        "architecture": "x86_64",
        "kernel": "5.15.0-91-generic",
    },
    "ubuntu2404": {
        "distribution": "Ubuntu",
        "os_family": "Debian",
        "distribution_major_version": "24",
        "distribution_release": "noble",
        "architecture": "aarch64",
        "kernel": "6.8.0-31-generic",
    },
    "rhel9": {
        "distribution": "RedHat",
        "os_family": "RedHat",
        "distribution_major_version": "9",
        "distribution_release": "Plow",
        "architecture": "x86_64",
        "kernel": "5.14.0-427.13.1.el9_4.x86_64",
    },
    "rhel9-arm": {
        "distribution": "RedHat",
        "os_family": "RedHat",
        "distribution_major_version": "9",
        "distribution_release": "Plow",
        "architecture": "aarch64",
        "kernel": "5.14.0-427.13.1.el9_4.aarch64",
    },
}


def find_task(role, tasks_file, task_name, module=None):
    """A role's task (a dict, as written), found by its name (and module, where a check-mode
    stand-in carries the same name) in a tasks file or its blocks."""
    stack = list(yaml.safe_load((ROLES / role / "tasks" / tasks_file).read_text(encoding="utf-8")))
    while stack:
        task = stack.pop()
        stack.extend(task.get("block", []))
        if task.get("name") == task_name and (module is None or module in task):
            return task
    raise AssertionError("%s/tasks/%s has no %s task named %r" % (role, tasks_file, module or "", task_name))


def task_arg(role, tasks_file, task_name, module, arg):
    """The raw (untemplated) argument `arg` of a role's task, found by the task's name."""
    return find_task(role, tasks_file, task_name, module)[module][arg]


def template_expr(role, template):
    """An expression that renders one of a role's templates with the play's variables."""
    return "{{ lookup('ansible.builtin.template', '%s') }}" % (ROLES / role / "templates" / template)


def hosts_inventory(tmp_path, hosts):
    """A JSON inventory of HOSTS {name: host vars} under tmp_path, for resolve(): one host per
    case, so one run resolves them all."""
    path = Path(tmp_path) / "hosts.json"
    path.write_text(json.dumps({"all": {"hosts": hosts}}), encoding="utf-8")
    return str(path)


def resolve(inventory, names, *, facts=None, exprs=None, extra=None, limit=None, tmp_path=None):
    """{host: {name: value}} for the variables `names` and the expressions `exprs`.

    inventory: an inventory path (or a "host1,host2," list); facts: a key of OS_FACTS;
    exprs: {name: "{{ expression }}"}, reported under `name` (prefixed resolve_expr_);
    extra: more extra variables (they win over everything, as -e does).
    """
    extra_vars = {"resolve_roles_dir": str(ROLES)}
    if facts:
        extra_vars["resolve_facts"] = OS_FACTS[facts]
    report = list(names)
    for name, expression in (exprs or {}).items():
        extra_vars["resolve_expr_" + name] = expression
        report.append("resolve_expr_" + name)
    extra_vars["resolve_names"] = report
    extra_vars.update(extra or {})
    vars_file = Path(tmp_path) / "resolve-vars.json"
    vars_file.write_text(json.dumps(extra_vars), encoding="utf-8")
    command = [
        str(VENV_BIN / "ansible-playbook"),
        "-i",
        str(inventory),
        str(PLAYBOOK),
        "-e",
        "@%s" % vars_file,
        # Nothing is contacted: every task of the play runs on the controller.
        "-e",
        json.dumps({"ansible_connection": "local", "ansible_python_interpreter": str(VENV_BIN / "python")}),
    ]
    if limit:
        command += ["--limit", limit]
    proc = run_ansible(command)
    results = {}
    for play in proc["json"]["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] == "Report the resolved variables":
                for host, result in task["hosts"].items():
                    results[host] = {
                        key[len("resolve_expr_") :] if key.startswith("resolve_expr_") else key: value
                        for key, value in result["msg"].items()
                    }
    if not results:
        raise AssertionError("resolve_vars.yml reported nothing:\n%s" % proc["text"])
    return results


def role_file_tree(role, name, path):
    """gpuops.k8s.file_tree's result for a role's dict of files (the variable `name`), copied
    to path by playbooks/role_file_tree.yml as the role's task copies it."""
    command = [
        str(VENV_BIN / "ansible-playbook"),
        "-i",
        "localhost,",
        str(PLAYBOOK.with_name("role_file_tree.yml")),
        "-e",
        json.dumps(
            {
                "role_path": str(ROLES / role),
                "role_file_tree_var": name,
                "role_file_tree_path": str(path),
                "ansible_connection": "local",
                "ansible_python_interpreter": str(VENV_BIN / "python"),
            }
        ),
    ]
    proc = run_ansible(command)
    for play in proc["json"]["plays"]:
        for task in play["tasks"]:
            if task["task"]["name"] == "Copy the files of the variable role_file_tree_var names":
                return task["hosts"]["localhost"]
    raise AssertionError("role_file_tree.yml reported nothing:\n%s" % proc["text"])


def run_ansible(command, *, expect_rc=0, timeout=300):
    """Run an ansible CLI with the JSON callback; return {'json': ..., 'text': ..., 'rc': ...}."""
    env = ansible_env()
    env.update(
        ANSIBLE_RETRY_FILES_ENABLED="false",
        # Facts set by one test must not leak into the next.
        ANSIBLE_CACHE_PLUGIN="ansible.builtin.memory",
    )
    proc = subprocess.run(
        command, check=False, capture_output=True, text=True, env=env, timeout=timeout, cwd=os.fspath(REPO)
    )
    text = "$ %s\nrc %d\nstdout:\n%s\nstderr:\n%s" % (
        " ".join(command),
        proc.returncode,
        proc.stdout,
        proc.stderr,
    )
    if expect_rc is not None and proc.returncode != expect_rc:
        raise AssertionError(text)
    try:
        parsed = json.loads(proc.stdout)
    except ValueError:
        parsed = None
    return {"json": parsed, "text": text, "rc": proc.returncode}
