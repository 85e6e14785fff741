# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_doctor's runtime check looks at what the container_runtime role configured.

Each node is configured by the role's own task (the nvidia_runtime task of
roles/container_runtime/tasks/main.yml, verbatim, over the role's defaults and the user's
choices), then checked by the doctor's own task (tasks_from: runtime.yml) wired exactly as
playbooks/site.yml and playbooks/doctor.yml wire the role, with the user's choices in the
inventory. A node the role configured is healthy; with the nvidia runtime taken out of
its file it gets the runtime finding, naming that file. Everything runs in check mode or
on files under tmp_path, through the real ansible-playbook.
"""

import copy

import pytest
import yaml
from conftest import REPO, playbook

CRIO_CONF = """\
# The site's CRI-O configuration: this comment and the crun default must survive.
[crio]
log_dir = "/var/log/crio/pods"

[crio.runtime]
conmon_cgroup = "pod"
default_runtime = "crun"

[crio.runtime.runtimes.crun]
runtime_path = "/usr/bin/crun"
runtime_type = "oci"
"""

CONTAINERD_TOML = """\
version = 2
root = "/var/lib/containerd"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
"""

# How site.yml and doctor.yml hand the doctor to a node.
WIRINGS = ("site.yml", "doctor.yml")


def named(tasks, name):
    """The task called name in a list of tasks (blocks included)."""
    for task in tasks:
        if task.get("name") == name:
            return task
        found = named(task.get("block", []), name) if "block" in task else None
        if found:
            return found
    raise AssertionError("no task named %r" % name)


def with_module_defaults(tasks, name, defaults=None):
    """The task called name, its module's arguments merged over the module_defaults of the
    blocks around it (as Ansible applies them), or None."""
    for task in tasks:
        here = dict(defaults or {})
        for module, arguments in task.get("module_defaults", {}).items():
            here[module] = dict(here.get(module, {}), **arguments)
        if task.get("name") == name:
            merged = copy.deepcopy(task)
            for module, arguments in here.items():
                if module in merged:
                    merged[module] = dict(arguments, **(merged[module] or {}))
            return merged
        found = with_module_defaults(task.get("block", []), name, here) if "block" in task else None
        if found:
            return found
    return None


def container_runtime_task():
    """The role's task that declares the runtime, as the role has it (with the arguments
    its block gives every nvidia_runtime call)."""
    tasks = yaml.safe_load((REPO / "roles" / "container_runtime" / "tasks" / "main.yml").read_text())
    task = with_module_defaults(tasks, "Declare the NVIDIA runtime in the runtime's configuration")
    assert task is not None, "container_runtime declares the runtime under another task name"
    return task


def doctor_include(wiring):
    """An include_role of gpu_doctor's runtime check with the variables the playbook passes."""
    plays = yaml.safe_load((REPO / "playbooks" / wiring).read_text())
    if wiring == "site.yml":
        task = named(plays[-1]["tasks"], "Check each node's whole chain (read-only)")
        assert task["ansible.builtin.include_role"]["name"] == "gpuops.k8s.gpu_doctor"
        passed = task.get("vars", {})
    else:
        (entry,) = [role for role in plays[0]["roles"] if role["role"] == "gpuops.k8s.gpu_doctor"]
        passed = {key: value for key, value in entry.items() if key != "role"}
    return {
        "name": "Run the doctor's runtime check as %s does" % wiring,
        "ansible.builtin.include_role": {"name": "gpuops.k8s.gpu_doctor", "tasks_from": "runtime.yml"},
        "vars": copy.deepcopy(passed),
    }


def configure(tmp_path, choices):
    """What the container_runtime role does to the files, with the user's choices."""
    defaults = REPO / "roles" / "container_runtime" / "defaults" / "main.yml"
    play = {"hosts": "localhost", "gather_facts": False, "vars_files": [str(defaults)]}
    play["tasks"] = [container_runtime_task()]
    # Extra vars: the user's choices win over the role's defaults, as inventory ones would.
    (result,) = playbook(tmp_path, "configure", [play], extra_vars=choices).values()
    assert result["changed"] and not result.get("failed"), result
    return result


def doctor(tmp_path, choices, wiring, engine):
    """The doctor's runtime check and its diagnosis, the user's choices in the inventory."""
    diagnose = {
        "name": "Diagnose the runtime check",
        "ansible.builtin.debug": {
            "msg": "{{ {'runtime_check': gpu_doctor_runtime_check} | gpuops.k8s.doctor_findings("
            "{'runtime': '%s', 'runtime_name': 'nvidia'}) }}" % engine
        },
    }
    play = {"hosts": "localhost", "gather_facts": False, "tasks": [doctor_include(wiring), diagnose]}
    results = playbook(tmp_path, "doctor", [play], inventory_vars=choices)
    check = results["Check that the nvidia runtime is declared (check mode, nothing written)"]
    assert not check.get("changed"), check
    return check, results["Diagnose the runtime check"]["msg"]


def without_nvidia_tables(text):
    """text without any [...runtimes.nvidia...] table, as a tool that rewrites it would leave it."""
    kept, in_nvidia = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("["):
            in_nvidia = "runtimes.nvidia" in line
        if not in_nvidia:
            kept.append(line)
    return "\n".join(kept) + "\n"


@pytest.fixture(scope="module")
def crio_in_place(tmp_path_factory):
    """A CRI-O node: the user chose only the engine (and, here, where its file is)."""
    tmp_path = tmp_path_factory.mktemp("crio")
    conf = tmp_path / "crio.conf"
    conf.write_text(CRIO_CONF)
    choices = {"container_runtime_engine": "crio", "container_runtime_config_path": str(conf)}
    result = configure(tmp_path, choices)
    # The role edits crio.conf itself (its default config_mode): no drop-in anywhere.
    assert result["changed_files"] == [str(conf)]
    assert "[crio.runtime.runtimes.nvidia]" in conf.read_text()
    return tmp_path, choices, conf


@pytest.fixture(scope="module")
def containerd_drop_in(tmp_path_factory):
    """A containerd node whose user chose a drop-in (nvidia-ctk's own default since v1.20)."""
    tmp_path = tmp_path_factory.mktemp("containerd")
    main, drop_in = tmp_path / "config.toml", tmp_path / "conf.d" / "99-nvidia.toml"
    main.write_text(CONTAINERD_TOML)
    choices = {
        "container_runtime_engine": "containerd",
        "container_runtime_config_mode": "drop_in",
        "container_runtime_config_path": str(main),
        "container_runtime_drop_in_path": str(drop_in),
    }
    result = configure(tmp_path, choices)
    assert sorted(result["changed_files"]) == sorted([str(main), str(drop_in)])
    assert "runtimes.nvidia]" in drop_in.read_text() and "runtimes.nvidia" not in main.read_text()
    return tmp_path, choices, drop_in


NODES = {"crio_in_place": "crio", "containerd_drop_in": "containerd"}


@pytest.mark.parametrize("wiring", WIRINGS)
@pytest.mark.parametrize("node", sorted(NODES))
def test_a_node_the_role_configured_is_healthy(request, node, wiring):
    tmp_path, choices, _runtime_file = request.getfixturevalue(node)
    check, findings = doctor(tmp_path, choices, wiring, NODES[node])
    assert findings == [], (findings, check)
    assert check["changed_files"] == [] and not check.get("failed"), check


@pytest.mark.parametrize("wiring", WIRINGS)
@pytest.mark.parametrize("node", sorted(NODES))
def test_a_node_the_role_configured_is_healthy_with_the_doctor_told_its_file(request, node, wiring):
    # As the lab inventory does: gpu_doctor's own variables name the runtime and its main file.
    tmp_path, choices, _runtime_file = request.getfixturevalue(node)
    told = dict(
        choices,
        gpu_doctor_runtime=choices["container_runtime_engine"],
        gpu_doctor_runtime_config=choices["container_runtime_config_path"],
    )
    check, findings = doctor(tmp_path, told, wiring, NODES[node])
    assert findings == [], (findings, check)


@pytest.mark.parametrize("wiring", WIRINGS)
@pytest.mark.parametrize("node", sorted(NODES))
def test_the_nvidia_runtime_removed_is_the_runtime_finding(request, node, wiring):
    tmp_path, choices, runtime_file = request.getfixturevalue(node)
    configured = runtime_file.read_text()
    removed = without_nvidia_tables(configured)
    assert removed != configured
    runtime_file.write_text(removed)
    try:
        _check, findings = doctor(tmp_path, choices, wiring, NODES[node])
    finally:
        runtime_file.write_text(configured)
    assert [(f["check"], f["severity"], f["message"]) for f in findings] == [
        ("runtime", "fail", "the nvidia runtime is missing from (or differs in) %s" % runtime_file)
    ]


@pytest.mark.parametrize("wiring", WIRINGS)
def test_a_file_that_cannot_be_read_is_the_runtime_finding(tmp_path, wiring):
    # As the lab inventory does: containerd's defaults, the doctor told where the file is.
    config = tmp_path / "config.toml"
    config.write_text("version = 2\n[plugins\n")
    check, findings = doctor(tmp_path, {"gpu_doctor_runtime_config": str(config)}, wiring, "containerd")
    assert [(f["check"], f["severity"]) for f in findings] == [("runtime", "fail")], (findings, check)
    assert findings[0]["message"].startswith(
        "the containerd configuration cannot be read: %s line 2, column 8: " % config
    ), findings
    # Registered as failed (the task goes on): the module's failure is kept, not cleared.
    assert check["failed"], check
    assert config.read_text() == "version = 2\n[plugins\n"
