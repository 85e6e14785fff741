# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The drift guard the container_runtime role ships, run as a process against temp files.

systemctl is a stand-in script that records its calls (and answers is-active from a
queue), so every restart the guard asks for is counted. What the guard writes must be
read by Debian's real containerd (`config dump`: 1.6 for config version 2, 2.x for
version 3) and accepted by dockerd (`dockerd --validate`).

Decisions pinned here: a change that keeps the NVIDIA runtime as configured (a comment,
reordered tables) is in sync: the file is left as the user wrote it, nothing restarts. A
rewrite that drops the runtime is repaired; the runtime restarts only when the repaired
data differ from what it last ran with.
"""

import json
import os
import subprocess
import sys
import tomllib

import pytest
import yaml
from conftest import playbook
from resolve import resolve, role_file_tree
from runtimes import containerd_dump, dockerd_validate, runtime_root

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE_PARENT = os.path.join(REPO, "roles", "container_runtime", "files")
BINARY = "/usr/bin/nvidia-container-runtime"

SITE_V2 = """\
version = 2
# Site policy: keep this comment.
oom_score = -999

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9" # pinned by the site
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
"""

SITE_V3 = """\
version = 3
# containerd 2.x layout
root = '/var/lib/containerd'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    SystemdCgroup = true
"""

# (config version, site file, containerd suite that reads it, CRI runtime plugin in the dump)
CONTAINERD = {
    2: (SITE_V2, "bookworm", "io.containerd.grpc.v1.cri"),
    3: (SITE_V3, "sid", "io.containerd.cri.v1.runtime"),
}

FAKE_SYSTEMCTL = """\
#!/bin/sh
# Records each call; restart exits with $dir/restart_rc (default 0); is-active answers the
# first line of $dir/answers (consumed), else "active"; show answers $dir/invocation (the
# service's InvocationID, which a test changes to say "started again by someone else").
dir=$(dirname "$0")
echo "$*" >> "$dir/calls"
case "$1" in
  restart) exit "$(cat "$dir/restart_rc" 2>/dev/null || echo 0)" ;;
  show) cat "$dir/invocation" 2>/dev/null ;;
  is-active)
    if [ -s "$dir/answers" ]; then head -n 1 "$dir/answers"; sed -i 1d "$dir/answers"; else echo active; fi
    ;;
esac
"""


def run_guard(package_parent, parameters, *args):
    """One guard run of the package under package_parent with the parameters file."""
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    # No __pycache__ in the role's files tree: the role copies that tree to nodes.
    env.update(PYTHONPATH=str(package_parent), PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run(
        [sys.executable, "-m", "gpuops_runtime_guard", "--config", str(parameters), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


class Node:
    """A temp "node": config files, the guard's parameters and state, a recording systemctl."""

    def __init__(self, tmp_path, **params):
        self.root = tmp_path
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        systemctl = self.bin / "systemctl"
        systemctl.write_text(FAKE_SYSTEMCTL)
        systemctl.chmod(0o755)
        self.params = {
            "backup": True,
            "set_as_default": True,
            "systemctl": str(systemctl),
            "state_dir": str(tmp_path / "state"),
            "settle_seconds": 0,
            **params,
        }
        self.parameters = tmp_path / "guard.json"
        self.parameters.write_text(json.dumps(self.params))

    def guard(self, *args):
        return run_guard(PACKAGE_PARENT, self.parameters, *args)

    def calls(self):
        """What the guard asked systemctl to do (its show queries left out)."""
        path = self.bin / "calls"
        calls = path.read_text().splitlines() if path.exists() else []
        path.unlink(missing_ok=True)
        return [call for call in calls if not call.startswith("show ")]

    def state(self):
        return json.loads((self.root / "state" / "state.json").read_text())

    def backups(self, name):
        prefix = name + "."
        return sorted(p for p in self.root.iterdir() if p.name.startswith(prefix) and p.name.endswith("~"))


def containerd_node(tmp_path, version, **params):
    site, _suite, _plugin = CONTAINERD[version]
    config = tmp_path / "config.toml"
    config.write_text(site)
    node = Node(tmp_path, runtime="containerd", path=str(config), config_mode="in_place", **params)
    return node, config


def settled(node):
    """The role's state: the guard has run once (declared the runtime) and recorded it."""
    first = node.guard()
    assert first.returncode == 0, first.stderr
    node.calls()
    for backup in node.backups("config.toml"):
        backup.unlink()
    return first


def dumped(version, path):
    _site, suite, plugin = CONTAINERD[version]
    rc, out, err = containerd_dump(suite, path)
    assert rc == 0, err
    return tomllib.loads(out)["plugins"][plugin]["containerd"]


def containerd_default(version):
    """`containerd config default` of the matching containerd: what an overwrite looks like."""
    suite = CONTAINERD[version][1]
    binary = runtime_root("containerd", suite) / "usr" / "bin" / "containerd"
    return subprocess.run(
        [str(binary), "config", "default"], capture_output=True, text=True, check=True, timeout=60
    ).stdout


@pytest.mark.parametrize("version", [2, 3])
def test_overwritten_config_gets_the_runtime_back_keeps_new_keys_and_restarts_once(tmp_path, version):
    node, config = containerd_node(tmp_path, version)
    settled(node)
    default = containerd_default(version)
    overwrite = default.replace("oom_score = 0\n", "oom_score = -500 # the new tool's own value\n", 1)
    assert overwrite != default and "nvidia" not in overwrite
    config.write_text(overwrite)

    proc = node.guard()
    assert proc.returncode == 0, proc.stderr
    assert node.calls() == ["restart containerd", "is-active containerd"]
    assert "drift: restored the nvidia runtime in %s" % config in proc.stderr
    cri = dumped(version, config)
    assert cri["default_runtime_name"] == "nvidia"
    assert cri["runtimes"]["nvidia"]["options"]["BinaryName"] == BINARY
    text = config.read_text()
    assert "oom_score = -500 # the new tool's own value" in text
    (backup,) = node.backups("config.toml")
    assert backup.read_text() == overwrite
    assert node.state()["last_run"]["result"] == "repaired" and node.state()["last_run"]["restarted"]

    again = node.guard()
    assert again.returncode == 0 and "in sync" in again.stderr
    assert node.calls() == [] and config.read_text() == text


@pytest.mark.parametrize("version", [2, 3])
def test_a_comment_is_in_sync_left_as_written_and_nothing_restarts(tmp_path, version):
    node, config = containerd_node(tmp_path, version)
    settled(node)
    edited = "# a comment an operator added\n" + config.read_text()
    config.write_text(edited)
    proc = node.guard()
    assert proc.returncode == 0 and "in sync" in proc.stderr
    assert node.calls() == []
    assert config.read_text() == edited and node.backups("config.toml") == []


def test_reordered_tables_with_the_runtime_kept_are_in_sync(tmp_path):
    node, config = containerd_node(tmp_path, 2)
    settled(node)
    data = tomllib.loads(config.read_text())
    header, *tables = config.read_text().rstrip("\n").split("\n\n")
    reordered = "\n\n".join([header, *reversed(tables)]) + "\n"
    config.write_text(reordered)
    assert tomllib.loads(reordered) == data, "the test's reordering changed the data"
    proc = node.guard()
    assert proc.returncode == 0 and "in sync" in proc.stderr, proc.stderr
    assert node.calls() == [] and config.read_text() == reordered


def test_a_tool_rewriting_the_same_file_without_the_runtime_costs_a_repair_not_a_restart(tmp_path):
    node, config = containerd_node(tmp_path, 2)
    settled(node)
    for _attempt in range(2):
        config.write_text(SITE_V2)  # the site's template, again, as a config tool would
        proc = node.guard()
        assert proc.returncode == 0, proc.stderr
        assert "restored the nvidia runtime" in proc.stderr and "no restart" in proc.stderr
        assert node.calls() == []
        assert dumped(2, config)["default_runtime_name"] == "nvidia"
    assert node.state()["last_run"]["restarted"] is False


def test_a_runtime_started_again_without_the_entry_is_restarted_after_the_repair(tmp_path):
    # The tool that dropped the entry restarted containerd (or the guard was down when it
    # did): containerd runs without the runtime now, whatever the guard recorded before.
    node, config = containerd_node(tmp_path, 2)
    (node.bin / "invocation").write_text("1f0c-first-start\n")
    settled(node)
    config.write_text(SITE_V2)
    (node.bin / "invocation").write_text("7d2a-started-again-by-the-tool\n")
    proc = node.guard()
    assert proc.returncode == 0, proc.stderr
    assert "restored the nvidia runtime" in proc.stderr and "no restart" not in proc.stderr, proc.stderr
    assert node.calls() == ["restart containerd", "is-active containerd"]
    # Not started again since: the record holds, and the same rewrite costs no restart.
    config.write_text(SITE_V2)
    proc = node.guard()
    assert "no restart" in proc.stderr and node.calls() == [], proc.stderr


def test_without_a_record_the_guard_decides_the_restart_as_nvidia_runtime_does(tmp_path):
    node, config = containerd_node(tmp_path, 2)
    proc = node.guard()
    assert proc.returncode == 0, proc.stderr
    assert node.calls() == ["restart containerd", "is-active containerd"]
    # The same repair with the record kept: no restart (previous test); without it, one.
    (tmp_path / "state" / "state.json").unlink()
    config.write_text(SITE_V2)
    node.guard()
    assert node.calls() == ["restart containerd", "is-active containerd"]


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("config.toml", SITE_V2 + "\n[plugins.broken\nkey = 1\n", "line 12"),
        ("daemon.json", '{\n  "log-driver": "journald",\n  "runtimes": {\n}\n', "line 5"),
    ],
)
def test_an_unparsable_file_is_left_untouched_and_named_with_its_line(tmp_path, name, text, line):
    config = tmp_path / name
    config.write_text(text)
    runtime = "docker" if name.endswith(".json") else "containerd"
    node = Node(tmp_path, runtime=runtime, path=str(config))
    proc = node.guard()
    assert proc.returncode == 2
    assert str(config) in proc.stderr and line in proc.stderr, proc.stderr
    assert config.read_text() == text
    assert node.calls() == [] and node.backups(name) == []
    assert node.state()["last_run"]["result"] == "error"


def test_docker_daemon_json_overwritten_is_repaired_and_dockerd_accepts_it(tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{\n  "log-driver": "journald"\n}\n')
    node = Node(tmp_path, runtime="docker", path=str(daemon), enable_cdi=True)
    settled(node)
    daemon.write_text('{\n    "log-driver": "local",\n    "data-root": "/srv/docker"\n}\n')

    proc = node.guard()
    assert proc.returncode == 0, proc.stderr
    assert node.calls() == ["restart docker", "is-active docker"]
    assert json.loads(daemon.read_text()) == {
        "log-driver": "local",
        "data-root": "/srv/docker",
        "runtimes": {"nvidia": {"path": BINARY}},
        "default-runtime": "nvidia",
        "features": {"cdi": True},
    }
    assert daemon.read_text().startswith('{\n    "log-driver"'), "indent or key order not kept"
    rc, _out, err = dockerd_validate(daemon)
    assert rc == 0, err
    assert node.guard().returncode == 0 and node.calls() == []


def test_a_deleted_drop_in_is_recreated_as_it_was_without_a_restart(tmp_path):
    # The runtime still runs with what the drop-in held: writing it back is enough.
    config = tmp_path / "config.toml"
    config.write_text(SITE_V2)
    drop_in = tmp_path / "conf.d" / "99-nvidia.toml"
    node = Node(
        tmp_path, runtime="containerd", path=str(config), config_mode="drop_in", drop_in_path=str(drop_in)
    )
    settled(node)
    written = drop_in.read_text()
    drop_in.unlink()
    proc = node.guard()
    assert proc.returncode == 0, proc.stderr
    assert drop_in.read_text() == written
    assert node.calls() == [] and "no restart" in proc.stderr
    assert dumped(2, config)["runtimes"]["nvidia"]["options"]["BinaryName"] == BINARY


def test_a_restart_that_fails_is_rolled_back_and_not_retried_on_the_same_files(tmp_path):
    node, config = containerd_node(tmp_path, 2)
    settled(node)
    overwrite = containerd_default(2)
    config.write_text(overwrite)
    (node.bin / "answers").write_text("failed\nactive\n")

    proc = node.guard()
    assert proc.returncode == 1
    assert node.calls() == ["restart containerd", "is-active containerd"] * 2
    assert config.read_text() == overwrite, "the files were not restored as they were"
    assert "containerd did not come back" in proc.stderr and "containerd is failed" in proc.stderr
    assert "Restored the files as they were and restarted containerd: it is active" in proc.stderr
    assert node.state()["last_run"]["result"] == "rolled_back"

    # The timer fires again: the same files are not tried again (no restart loop)...
    proc = node.guard()
    assert proc.returncode == 1 and "not repairing" in proc.stderr
    assert node.calls() == [] and config.read_text() == overwrite
    # ...until they change.
    config.write_text(overwrite + "\n# changed\n")
    proc = node.guard()
    assert proc.returncode == 0, proc.stderr
    assert node.calls() == ["restart containerd", "is-active containerd"]


def test_check_reports_drift_and_changes_nothing(tmp_path):
    node, config = containerd_node(tmp_path, 2)
    proc = node.guard("--check")
    assert proc.returncode == 1 and "drift" in proc.stderr
    assert config.read_text() == SITE_V2 and node.calls() == []
    assert not (tmp_path / "state").exists()


def test_unknown_parameters_are_refused(tmp_path):
    node = Node(tmp_path, runtime="containerd", path=str(tmp_path / "c.toml"), restart_comand="x")
    proc = node.guard()
    assert proc.returncode == 3 and "unknown parameters restart_comand" in proc.stderr


K3S_GENERATED = """\

# File generated by k3s. DO NOT EDIT. Use config.toml.tmpl instead.
version = 2

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
"""


def test_a_k3s_config_is_not_fought_over(tmp_path):
    # k3s writes config.toml anew at every start: a repair would be lost, then repeated forever.
    config = tmp_path / "config.toml"
    config.write_text(K3S_GENERATED)
    node = Node(tmp_path, runtime="containerd", path=str(config))
    proc = node.guard()
    assert proc.returncode == 0, proc.stderr
    assert "k3s" in proc.stderr and "nothing to do" in proc.stderr
    assert config.read_text() == K3S_GENERATED and node.calls() == [] and node.backups("config.toml") == []


def test_the_guard_ships_the_plan_the_module_uses():
    """Every file of module_utils/_runtime but the module's runner is linked into the guard's
    package, so the guard plans with nvidia_runtime's code and its one table of defaults."""
    package = os.path.join(REPO, "plugins", "module_utils", "_runtime")
    shipped = os.path.join(PACKAGE_PARENT, "gpuops_runtime_guard", "_runtime")
    wanted = sorted(name for name in os.listdir(package) if name.endswith(".py") and name != "runner.py")
    assert sorted(os.listdir(shipped)) == wanted
    for name in wanted:
        link = os.path.join(shipped, name)
        assert os.path.islink(link) and os.path.realpath(link) == os.path.join(package, name), name


def test_the_role_installs_the_guards_python_files_and_nothing_else(tmp_path):
    """What drift_guard_files.yml gives gpuops.k8s.file_tree (resolved by the real
    ansible-playbook): every .py file of the package, links followed, under the same
    names; installed by the module, the guard runs from there."""
    program = resolve(
        "localhost,",
        ["__container_runtime_guard_program"],
        extra={"role_path": os.path.join(REPO, "roles", "container_runtime")},
        tmp_path=tmp_path,
    )["localhost"]["__container_runtime_guard_program"]
    package = os.path.join(PACKAGE_PARENT, "gpuops_runtime_guard")
    wanted = {}
    for root, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(root, name), encoding="utf-8") as handle:
                    wanted[os.path.relpath(os.path.join(root, name), PACKAGE_PARENT)] = handle.read()
    assert "gpuops_runtime_guard/_runtime/plan.py" in wanted
    assert program == wanted

    lib = tmp_path / "lib"
    installed = role_file_tree("container_runtime", "__container_runtime_guard_program", lib)
    assert installed["changed"] is True and installed["removed"] == [], installed
    # Byte for byte: the contents come from lookups, never templated (k3s.py holds "{{ template").
    assert {name: (lib / name).read_text(encoding="utf-8") for name in wanted} == wanted
    env = dict(os.environ, PYTHONPATH=str(lib), PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run(
        [sys.executable, "-m", "gpuops_runtime_guard", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0 and "--config" in proc.stdout, proc.stderr


def test_the_role_restarts_the_service_the_table_names():
    sys.path.insert(0, os.path.join(REPO, "plugins", "module_utils"))
    from _runtime.defaults import ENGINES  # noqa: PLC0415 - the collection's module_utils

    with open(os.path.join(REPO, "roles", "container_runtime", "vars", "main.yml")) as handle:
        role_vars = yaml.safe_load(handle)
    assert role_vars["__container_runtime_services"] == {e: ENGINES[e]["service"] for e in ENGINES}
    assert sorted(role_vars["__container_runtime_packages"]) == sorted(ENGINES)


ROLE = os.path.join(REPO, "roles", "container_runtime")
WRITE_PARAMETERS = "Write the drift guard's parameters (those nvidia_runtime plans with)"
DECLARE = "Declare the NVIDIA runtime in the runtime's configuration"


def role_play(**keywords):
    """The container_runtime role's block that plans, installs the guard's files and declares
    the runtime: its tasks and module_defaults verbatim, over the role's defaults; the guard's
    files (an include relative to the role) included from the role."""
    with open(os.path.join(ROLE, "tasks", "main.yml")) as handle:
        (block,) = [task for task in yaml.safe_load(handle) if "block" in task and "module_defaults" in task]
    tasks = []
    for task in block["block"]:
        if "ansible.builtin.include_tasks" in task:
            included = task.pop("ansible.builtin.include_tasks")
            task["ansible.builtin.include_role"] = {
                "name": "gpuops.k8s.container_runtime",
                "tasks_from": included,
            }
        tasks.append(task)
    return {
        "hosts": "localhost",
        "gather_facts": False,
        "vars_files": [os.path.join(ROLE, "defaults", "main.yml")],
        "module_defaults": block["module_defaults"],
        "tasks": tasks,
        **keywords,
    }


def test_the_role_writes_the_guard_the_options_nvidia_runtime_planned_with(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(SITE_V2)
    parameters, state_dir = tmp_path / "etc" / "guard.json", tmp_path / "state"
    choices = {
        "container_runtime_config_mode": "drop_in",
        "container_runtime_config_path": str(config),
        "container_runtime_drop_in_path": str(tmp_path / "conf.d" / "99-nvidia.toml"),
        # The guard's program, parameters and record under tmp_path.
        "__container_runtime_guard_lib": str(tmp_path / "lib"),
        "__container_runtime_guard_parameters": str(parameters),
        "__container_runtime_guard_state_dir": str(state_dir),
    }
    predicted = playbook(tmp_path, "check", [role_play(check_mode=True, diff=True)], extra_vars=choices)
    assert predicted[WRITE_PARAMETERS]["changed"] and not parameters.exists()

    results = playbook(tmp_path, "run", [role_play(diff=True)], extra_vars=choices)
    written = parameters.read_text()
    assert results[WRITE_PARAMETERS]["changed"]
    (diff,) = results[WRITE_PARAMETERS]["diff"]
    assert [d["after"] for d in predicted[WRITE_PARAMETERS]["diff"]] == [diff["after"]] == [written]
    options = results[DECLARE]["parameters"]
    assert json.loads(written) == {**options, "service": "containerd", "state_dir": str(state_dir)}

    # The guard the role installed plans with them what nvidia_runtime did: in sync.
    proc = run_guard(tmp_path / "lib", parameters, "--check")
    assert proc.returncode == 0 and "in sync" in proc.stderr, proc.stderr

    again = playbook(tmp_path, "again", [role_play()], extra_vars=choices)
    assert not again[WRITE_PARAMETERS]["changed"] and not again[DECLARE]["changed"]
    assert parameters.read_text() == written
