# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia_runtime through the real CLI, checked by the real runtimes.

What the module writes must be read by Debian's containerd 1.6 (bookworm), 1.7 (trixie)
and 2.1 (sid) as intended (`containerd config dump`: the merged view, imports included),
and accepted by dockerd 26 (`dockerd --validate`); check mode must predict the real run.
"""

import hashlib
import json
import tomllib
import venv
from pathlib import Path

import pytest
from conftest import REPO, run_module
from runtimes import CONTAINERD_SUITES, containerd_dump, dockerd_validate

BINARY = "/usr/bin/nvidia-container-runtime"

MAIN_V2 = """\
version = 2
# Written by the site's own tooling: this comment and the layout must survive.
root = "/var/lib/containerd"
oom_score = -999

[grpc]
  address = "/run/containerd/containerd.sock"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.9" # pinned
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
"""

MAIN_V3 = """\
version = 3
# containerd 2.x layout
root = '/var/lib/containerd'

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = 'registry.k8s.io/pause:3.10'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    SystemdCgroup = true
"""

# (suite, main config, CRI runtime plugin as `config dump` prints it)
CONTAINERD_CASES = [
    ("bookworm", MAIN_V2, "io.containerd.grpc.v1.cri"),
    ("trixie", MAIN_V2, "io.containerd.grpc.v1.cri"),
    ("sid", MAIN_V2, "io.containerd.cri.v1.runtime"),  # 2.x migrates v2 on load
    ("sid", MAIN_V3, "io.containerd.cri.v1.runtime"),
]
assert {case[0] for case in CONTAINERD_CASES} == set(CONTAINERD_SUITES)


def digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def dumped(suite, path):
    rc, out, err = containerd_dump(suite, path)
    assert rc == 0, err
    return tomllib.loads(out)


def containerd_args(tmp_path, config, mode):
    """Module arguments: the NVIDIA runtime as default, in config or in a drop-in beside it."""
    return {
        "runtime": "containerd",
        "path": str(config),
        "config_mode": mode,
        "drop_in_path": str(tmp_path / "conf.d" / "99-nvidia.toml"),
        "set_as_default": True,
    }


def runtimes_of(dump, plugin):
    return dump["plugins"][plugin]["containerd"]


@pytest.mark.parametrize("mode", ["in_place", "drop_in"])
@pytest.mark.parametrize(("suite", "main", "plugin"), CONTAINERD_CASES)
def test_containerd_reads_the_nvidia_runtime_and_keeps_the_rest(tmp_path, suite, main, plugin, mode):
    config = tmp_path / "config.toml"
    config.write_text(main)
    before = dumped(suite, config)
    args = containerd_args(tmp_path, config, mode)
    predicted = run_module(args, module="gpuops.k8s.nvidia_runtime", check=True, diff=True)
    assert config.read_text() == main, "check mode wrote the file"
    assert not (tmp_path / "conf.d").exists(), "check mode made the drop-in directory"

    result = run_module(args, module="gpuops.k8s.nvidia_runtime", diff=True)
    assert result["changed"] and result["restart_required"]
    for key in ("changed", "restart_required", "changed_files", "diff"):
        assert predicted[key] == result[key], "check mode mispredicted %s" % key

    after = dumped(suite, config)
    cri = runtimes_of(after, plugin)
    assert cri["default_runtime_name"] == "nvidia"
    nvidia = cri["runtimes"]["nvidia"]
    assert nvidia["options"]["BinaryName"] == BINARY
    assert nvidia["options"]["SystemdCgroup"] is True, "runc's cgroup driver was not carried over"
    assert cri["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    # Everything else containerd reads is as before.
    cri["runtimes"].pop("nvidia")
    cri.pop("default_runtime_name")
    runtimes_of(before, plugin).pop("default_runtime_name")
    if mode == "drop_in":
        # containerd 1.7 lists the imports it read in no fixed order.
        assert sorted(after["imports"]) == sorted([*before["imports"], args["drop_in_path"]])
        after["imports"] = before["imports"]
    assert after == before
    if mode == "in_place":
        text = config.read_text()
        assert all(line in text for line in main.splitlines() if "#" in line), "a comment was lost"

    again = run_module(args, module="gpuops.k8s.nvidia_runtime")
    assert not again["changed"] and not again["restart_required"]


@pytest.mark.parametrize("mode", ["in_place", "drop_in"])
@pytest.mark.parametrize("suite", ["bookworm", "sid"])
def test_containerd_absent_restores_what_containerd_reads(tmp_path, suite, mode):
    config = tmp_path / "config.toml"
    config.write_text(MAIN_V2)
    original = dumped(suite, config)
    args = containerd_args(tmp_path, config, mode)
    assert run_module(args, module="gpuops.k8s.nvidia_runtime")["changed"]
    removed = run_module(dict(args, state="absent"), module="gpuops.k8s.nvidia_runtime")
    assert removed["changed"] and removed["restart_required"]
    assert dumped(suite, config) == original
    assert not (tmp_path / "conf.d" / "99-nvidia.toml").exists()


def test_unparsable_config_is_reported_with_its_line_and_left_untouched(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(MAIN_V2 + "\n[plugins.broken\nkey = 1\n")
    digest_before = digest(config)
    result = run_module(
        {"runtime": "containerd", "path": str(config), "backup": True}, module="gpuops.k8s.nvidia_runtime"
    )
    assert result["failed"]
    assert str(config) in result["msg"] and "line 18" in result["msg"]
    assert "left untouched" in result["msg"]
    assert digest(config) == digest_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"], "a backup or temp file was left"


def test_wrong_shape_names_the_key(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\nruntimes = "runc"\n')
    digest_before = digest(config)
    result = run_module({"runtime": "containerd", "path": str(config)}, module="gpuops.k8s.nvidia_runtime")
    assert result["failed"]
    assert 'plugins."io.containerd.grpc.v1.cri".containerd.runtimes is a string' in result["msg"]
    assert digest(config) == digest_before


def test_bad_runtime_name_is_rejected_before_anything_is_read(tmp_path):
    result = run_module(
        {"runtime": "containerd", "path": str(tmp_path / "missing.toml"), "runtime_name": "NVIDIA GPU"},
        module="gpuops.k8s.nvidia_runtime",
    )
    assert result["failed"]
    assert "runtime_name='NVIDIA GPU'" in result["msg"] and "DNS label" in result["msg"]
    assert not any(tmp_path.iterdir())


def test_missing_config_is_created_at_the_default_version_and_containerd_reads_it(tmp_path):
    config = tmp_path / "etc" / "containerd" / "config.toml"
    result = run_module(
        {"runtime": "containerd", "path": str(config), "set_as_default": True},
        module="gpuops.k8s.nvidia_runtime",
    )
    assert result["changed"] and result["config_version"] == 2
    assert result["created_files"] == [str(config)] and result["backup_files"] == {}
    assert oct(config.stat().st_mode & 0o777) == "0o644"
    cri = runtimes_of(dumped("bookworm", config), "io.containerd.grpc.v1.cri")
    assert cri["default_runtime_name"] == "nvidia"
    assert cri["runtimes"]["nvidia"]["options"]["BinaryName"] == BINARY


def test_backup_keeps_the_previous_file(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(MAIN_V2)
    result = run_module(
        {"runtime": "containerd", "path": str(config), "backup": True}, module="gpuops.k8s.nvidia_runtime"
    )
    assert list(result["backup_files"]) == [str(config)]
    assert result["created_files"] == []
    with open(result["backup_files"][str(config)]) as handle:
        assert handle.read() == MAIN_V2


DAEMON_JSON = {
    "exec-opts": ["native.cgroupdriver=systemd"],
    "log-driver": "json-file",
    "log-opts": {"max-size": "100m"},
    "runtimes": {"other": {"path": "/usr/bin/other-runtime", "runtimeArgs": ["--debug"]}},
    "storage-driver": "overlay2",
}


def test_docker_daemon_json_is_accepted_by_dockerd_and_keeps_the_rest(tmp_path):
    config = tmp_path / "daemon.json"
    config.write_text(json.dumps(DAEMON_JSON, indent=4) + "\n")
    args = {"runtime": "docker", "path": str(config), "set_as_default": True}
    predicted = run_module(args, module="gpuops.k8s.nvidia_runtime", check=True, diff=True)
    result = run_module(args, module="gpuops.k8s.nvidia_runtime", diff=True)
    assert predicted["diff"] == result["diff"] and result["changed"] and result["restart_required"]
    text = config.read_text()
    data = json.loads(text)
    assert list(data) == [*DAEMON_JSON, "default-runtime"], "key order changed"
    assert data["runtimes"]["nvidia"] == {"path": BINARY}
    assert data["runtimes"]["other"] == DAEMON_JSON["runtimes"]["other"]
    assert data["default-runtime"] == "nvidia"
    assert text.startswith('{\n    "exec-opts"'), "indent changed"
    rc, _out, err = dockerd_validate(config)
    assert rc == 0 and "configuration OK" in err
    assert not run_module(args, module="gpuops.k8s.nvidia_runtime")["changed"]


def test_docker_bad_json_names_line_and_column(tmp_path):
    config = tmp_path / "daemon.json"
    config.write_text('{\n  "log-driver": "json-file",\n  "runtimes": {\n}\n')
    result = run_module({"runtime": "docker", "path": str(config)}, module="gpuops.k8s.nvidia_runtime")
    assert result["failed"] and str(config) in result["msg"] and "line 5" in result["msg"]


def test_an_empty_existing_file_is_backed_up_not_reported_as_created(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text("")
    result = run_module(
        {"runtime": "containerd", "path": str(config), "backup": True}, module="gpuops.k8s.nvidia_runtime"
    )
    assert result["created_files"] == []
    assert list(result["backup_files"]) == [str(config)]


@pytest.mark.parametrize("existing", [None, MAIN_V2])
def test_check_mode_without_tomlkit_predicts_what_the_real_run_does(tmp_path, existing):
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # Python 3.11 without tomlkit, as on a fresh node
    python = bare / "bin" / "python"
    config = tmp_path / "config.toml"
    if existing:
        config.write_text(existing)
    args = {"runtime": "containerd", "path": str(config), "set_as_default": True}
    predicted = run_module(
        args, module="gpuops.k8s.nvidia_runtime", check=True, python=bare / "bin" / "python"
    )
    assert "tomlkit is not installed" in " ".join(predicted["warnings"])
    assert config.exists() == bool(existing)
    real = run_module(args, module="gpuops.k8s.nvidia_runtime")
    for key in ("changed", "restart_required", "changed_files", "created_files"):
        assert predicted[key] == real[key], key
    settled = run_module(args, module="gpuops.k8s.nvidia_runtime", check=True, python=python)
    assert not settled["changed"] and not settled["restart_required"]
    without_check = run_module(args, module="gpuops.k8s.nvidia_runtime", python=python)
    assert without_check["failed"] and "tomlkit" in without_check["msg"]


def test_the_options_planned_with_are_returned_in_check_mode_too_and_without_tomlkit(tmp_path):
    # The container_runtime role writes them for its drift guard from a check-mode run.
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    config = tmp_path / "config.toml"
    config.write_text(MAIN_V2)
    args = {"runtime": "containerd", "path": str(config), "enable_cdi": True}
    without_tomlkit = run_module(
        args, module="gpuops.k8s.nvidia_runtime", check=True, python=bare / "bin" / "python"
    )
    predicted = run_module(args, module="gpuops.k8s.nvidia_runtime", check=True)
    result = run_module(args, module="gpuops.k8s.nvidia_runtime")
    assert (
        without_tomlkit["parameters"]
        == predicted["parameters"]
        == result["parameters"]
        == {
            "runtime": "containerd",
            "config_mode": "in_place",
            "path": str(config),
            "drop_in_path": "/etc/containerd/conf.d/99-nvidia.toml",
            "runtime_name": "nvidia",
            "runtime_path": BINARY,
            "set_as_default": None,
            "enable_cdi": True,
            "config_version": 2,
            "backup": False,
        }
    )
    docker = run_module(
        {"runtime": "docker", "path": str(tmp_path / "daemon.json")},
        module="gpuops.k8s.nvidia_runtime",
        check=True,
    )
    assert docker["parameters"]["config_mode"] == "in_place" and docker["parameters"]["drop_in_path"] is None


# ------------------------------------------------------------- check mode without tomlkit


def bare_python(tmp_path):
    """A Python 3.11 without tomlkit, as on a fresh node before the role installs it."""
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)
    return bare / "bin" / "python"


# /etc/crio/crio.conf.d/10-crio.conf as CRI-O's own packages ship it (crun the default).
FIXTURES = REPO / "tests" / "unit" / "plugins" / "module_utils" / "fixtures" / "runtime_configs"
CRIO_PACKAGED = (FIXTURES / "crio-10-crio.conf").read_text()


def crio_args(tmp_path, **extra):
    """A CRI-O node: crio.conf plus the packaged drop-in; the NVIDIA drop-in goes beside it."""
    etc = tmp_path / "crio"
    (etc / "crio.conf.d").mkdir(parents=True, exist_ok=True)
    (etc / "crio.conf").write_text('[crio]\nlog_dir = "/var/log/crio/pods"\n')
    (etc / "crio.conf.d" / "10-crio.conf").write_text(CRIO_PACKAGED)
    return {
        "runtime": "crio",
        "path": str(etc / "crio.conf"),
        "drop_in_path": str(etc / "crio.conf.d" / "99-nvidia.conf"),
        **extra,
    }


PREDICTED = ("changed", "restart_required", "changed_files", "created_files")


@pytest.mark.parametrize("settled", [False, True], ids=["fresh", "settled"])
def test_check_mode_without_tomlkit_predicts_the_crio_drop_in(tmp_path, settled):
    args = crio_args(tmp_path)
    if settled:
        assert run_module(args, module="gpuops.k8s.nvidia_runtime")["changed"]
    predicted = run_module(args, module="gpuops.k8s.nvidia_runtime", check=True, python=bare_python(tmp_path))
    real = run_module(args, module="gpuops.k8s.nvidia_runtime")
    assert real["changed"] is not settled
    for key in PREDICTED:
        assert predicted[key] == real[key], key


def test_check_mode_without_tomlkit_predicts_both_containerd_drop_in_files(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(MAIN_V2)
    args = containerd_args(tmp_path, config, "drop_in")
    predicted = run_module(args, module="gpuops.k8s.nvidia_runtime", check=True, python=bare_python(tmp_path))
    real = run_module(args, module="gpuops.k8s.nvidia_runtime")
    assert real["changed_files"] == sorted([str(config), args["drop_in_path"]])
    for key in PREDICTED:
        assert predicted[key] == real[key], key


# ------------------------------------------------------------- what real configs show


def test_crio_drop_in_copies_the_default_runtime_settings_like_in_place(tmp_path):
    args = crio_args(tmp_path)
    result = run_module(args, module="gpuops.k8s.nvidia_runtime")
    assert result["changed"] and result["changed_files"] == [args["drop_in_path"]]
    entry = tomllib.loads(Path(args["drop_in_path"]).read_text())["crio"]["runtime"]["runtimes"]["nvidia"]
    # What CRI-O merges from crio.conf and 10-crio.conf: the default runtime is crun.
    assert entry == {
        "runtime_path": BINARY,
        "runtime_type": "oci",
        "runtime_root": "/run/crun",
        "monitor_path": "/usr/libexec/crio/conmon",
        "allowed_annotations": ["io.containers.trace-syscall"],
    }
    # In place, the same main data gives the same entry.
    merged = tmp_path / "merged.conf"
    merged.write_text(CRIO_PACKAGED)
    run_module(
        {"runtime": "crio", "path": str(merged), "config_mode": "in_place"},
        module="gpuops.k8s.nvidia_runtime",
    )
    assert tomllib.loads(merged.read_text())["crio"]["runtime"]["runtimes"]["nvidia"] == entry
    assert not run_module(args, module="gpuops.k8s.nvidia_runtime")["changed"]


@pytest.mark.parametrize(
    "main",
    [MAIN_V2, MAIN_V2.replace("oom_score = -999\n", "oom_score = -999\nimports = []\n")],
    ids=["no-imports", "empty-imports"],
)
def test_containerd_absent_after_present_gives_back_the_file_as_it_was(tmp_path, main):
    config = tmp_path / "config.toml"
    config.write_text(main)
    args = containerd_args(tmp_path, config, "drop_in")
    assert run_module(args, module="gpuops.k8s.nvidia_runtime")["changed"]
    removed = run_module(dict(args, state="absent"), module="gpuops.k8s.nvidia_runtime")
    assert removed["changed"]
    assert config.read_text() == main
    assert not (tmp_path / "conf.d" / "99-nvidia.toml").exists()


@pytest.mark.parametrize("set_as_default", [True, False, None])
def test_crio_absent_after_present_gives_back_the_default_runtime(tmp_path, set_as_default):
    config = tmp_path / "crio.conf"
    config.write_text(CRIO_PACKAGED)
    args = {
        "runtime": "crio",
        "path": str(config),
        "config_mode": "in_place",
        "set_as_default": set_as_default,
    }
    assert run_module(args, module="gpuops.k8s.nvidia_runtime")["changed"]
    assert run_module(dict(args, state="absent"), module="gpuops.k8s.nvidia_runtime")["changed"]
    assert config.read_text() == CRIO_PACKAGED


K3S_GENERATED = """\

# File generated by {program}. DO NOT EDIT. Use config.toml.tmpl instead.
version = 2

[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/rancher/{program}/agent/containerd"
[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "10010"
  enable_selinux = false
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
  sandbox_image = "rancher/mirrored-pause:3.6"

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "overlayfs"
  disable_snapshot_annotations = true

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/var/lib/rancher/{program}/data/current/bin"
  conf_dir = "/var/lib/rancher/{program}/agent/etc/cni/net.d"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
"""
K3S_DETECTED = """
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes."nvidia"]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes."nvidia".options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
"""


@pytest.mark.parametrize("program", ["k3s", "rke2"])
@pytest.mark.parametrize("detected", [False, True], ids=["before-restart", "detected"])
def test_k3s_and_rke2_configs_are_left_to_their_own_nvidia_detection(tmp_path, program, detected):
    config = tmp_path / "config.toml"
    text = K3S_GENERATED.format(program=program) + (K3S_DETECTED if detected else "")
    config.write_text(text)
    args = {"runtime": "containerd", "path": str(config)}
    predicted = run_module(args, module="gpuops.k8s.nvidia_runtime", check=True, diff=True)
    result = run_module(args, module="gpuops.k8s.nvidia_runtime", diff=True)
    assert config.read_text() == text and sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]
    for outcome in (predicted, result):
        assert not outcome["changed"] and not outcome["restart_required"]
        assert outcome["distribution"] == program and outcome["planned_files"] == []
        assert "config.toml.tmpl" in outcome["msg"] and "nvidia-container-runtime" in outcome["msg"]
    warnings = " ".join(result.get("warnings", []))
    if detected:
        assert "restart" not in warnings
    else:
        assert "restart %s" % program in warnings


def test_k3s_cannot_name_the_runtime_otherwise(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(K3S_GENERATED.format(program="k3s"))
    result = run_module(
        {"runtime": "containerd", "path": str(config), "runtime_name": "gpu"},
        module="gpuops.k8s.nvidia_runtime",
    )
    assert result["failed"] and "runtime_name='gpu'" in result["msg"] and "'nvidia'" in result["msg"]


DOCKER_CONTAINERD = """\
#   Copyright 2018-2022 Docker Inc.
#   (the config.toml that Docker's containerd.io package ships)

disabled_plugins = ["cri"]

#root = "/var/lib/containerd"
#state = "/run/containerd"
"""


def test_a_disabled_cri_plugin_gets_a_warning_that_the_edit_has_no_effect(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(DOCKER_CONTAINERD)
    result = run_module({"runtime": "containerd", "path": str(config)}, module="gpuops.k8s.nvidia_runtime")
    assert result["changed"]
    assert any("CRI plugin is disabled" in w and "no effect" in w for w in result.get("warnings", [])), result
