# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The drift guard on a lab node: real systemd units, real containerd, real rewrites.

Runs after test_default.py (file order): these tests rewrite config.toml and leave more
backups. Each rewrite is timed on the node by drift_probe.py; the latencies are printed
(a measurement, not an assertion: the probe's 60 s bound only fails a guard that never
acts).
"""

import base64
import json
import os
import re
import subprocess

import pytest

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "drift_probe.py")
GUARD = "gpuops-runtime-guard"
CONFIG = "/etc/containerd/config.toml"
GUARD_OFF = os.path.join(os.path.dirname(os.path.dirname(PROBE)), "guard_off.yml")


@pytest.fixture
def probe(host):
    with open(PROBE, "rb") as handle:
        encoded = base64.b64encode(handle.read()).decode()
    host.check_output("echo %s | base64 -d > /root/drift_probe.py" % encoded)

    def run(how, content, wait):
        # base64: Ansible's shell module splits and templates what it is given.
        encoded = base64.b64encode(content.encode()).decode()
        line = host.check_output(
            "echo %s | base64 -d > /root/drift-content && python3 /root/drift_probe.py %s %s %s"
            % (encoded, how, "/root/drift-content", wait)
        )
        result = json.loads(line.splitlines()[-1])
        print(
            "\ndrift-guard %s %-8s: nvidia in config dump after %s, containerd restarted after %s; runs %s"
            % (
                host.backend.get_hostname(),
                how,
                "%.2f s" % result["repaired"] if "repaired" in result else "never",
                "%.2f s" % result["restarted"] if "restarted" in result else "(no restart)",
                [(run["result"], run["restarted"], run["seconds"]) for run in result["history"]],
            )
        )
        return result

    return run


def default_config(host, oom_score):
    """`containerd config default` of the node's containerd, with a value of the tool's own."""
    text = host.check_output("containerd config default")
    assert "oom_score = 0\n" in text + "\n" and "nvidia" not in text
    return text.replace("oom_score = 0", "oom_score = %d" % oom_score, 1) + "\n"


def test_the_path_unit_watches_and_the_timer_is_scheduled(host):
    for unit in ("path", "timer"):
        assert host.run("systemctl is-active %s.%s" % (GUARD, unit)).stdout.strip() == "active"
        assert host.run("systemctl is-enabled %s.%s" % (GUARD, unit)).stdout.strip() == "enabled"
    assert "PathChanged=%s\n" % CONFIG in host.file("/etc/systemd/system/%s.path" % GUARD).content_string
    next_run = host.check_output("systemctl show -p NextElapseUSecMonotonic --value %s.timer" % GUARD)
    assert next_run and next_run not in ("0", "infinity")
    state = json.loads(host.file("/var/lib/%s/state.json" % GUARD).content_string)
    assert state["last_run"]["result"] == "in_sync", "the role's first guard run found drift"


@pytest.mark.parametrize(("how", "oom_score"), [("truncate", -501), ("rename", -502), ("recreate", -503)])
def test_an_overwrite_is_repaired_and_containerd_restarted_once(host, probe, how, oom_score):
    result = probe(how, default_config(host, oom_score), "restart")
    assert "repaired" in result, "the nvidia runtime did not come back within 60 s"
    assert "restarted" in result and result["pid_after"] != result["pid_before"]
    first, *rest = result["history"]
    assert first["result"] == "repaired" and first["restarted"] is True
    assert all(run["result"] == "in_sync" for run in rest), "a second run was not a no-op"
    text = host.file(CONFIG).content_string
    assert "oom_score = %d" % oom_score in text, "the new file's own settings were not kept"
    assert host.service("containerd").is_running


def test_the_guard_said_what_it_did_in_the_journal(host):
    journal = host.check_output("journalctl -u %s.service --no-pager -o cat" % GUARD)
    assert "drift: restored the nvidia runtime in %s" % CONFIG in journal
    assert "restarted containerd" in journal


def test_the_same_rewrite_again_is_repaired_without_a_restart(host, probe):
    result = probe("truncate", default_config(host, -503), "repaired")
    assert "repaired" in result
    assert result["history"][0]["result"] == "repaired" and result["history"][0]["restarted"] is False
    assert result["pid_after"] == result["pid_before"]


def test_a_comment_is_not_an_effective_change(host, probe):
    result = probe("append", "# an operator's note\n", "run")
    assert result["runs_after"] > result["runs_before"], "the guard did not run"
    assert [run["result"] for run in result["history"]] == ["in_sync"]
    assert result["pid_after"] == result["pid_before"]
    assert "# an operator's note" in host.file(CONFIG).content_string


def test_a_change_the_path_unit_missed_is_repaired_by_the_timers_service(host):
    host.check_output("systemctl stop %s.path" % GUARD)
    try:
        host.check_output("containerd config default > %s && sleep 2" % CONFIG)
        assert "runtimes.nvidia]" not in host.check_output("containerd config dump")
        host.check_output("systemctl start %s.service" % GUARD)  # what the timer starts
        assert "runtimes.nvidia]" in host.check_output("containerd config dump")
    finally:
        host.check_output("systemctl start %s.path" % GUARD)


REFUSE_NVIDIA = "/etc/systemd/system/containerd.service.d/refuse-nvidia.conf"


def test_a_repair_containerd_does_not_start_with_is_rolled_back_and_not_retried(host, probe):
    # A containerd that refuses to start once its config names the nvidia runtime.
    host.check_output(
        "mkdir -p %s && printf '[Service]\\nExecStartPre=/bin/sh -c \"! grep -q nvidia %s\"\\n' > %s"
        " && systemctl daemon-reload" % (os.path.dirname(REFUSE_NVIDIA), CONFIG, REFUSE_NVIDIA)
    )
    try:
        overwrite = default_config(host, -504)
        result = probe("truncate", overwrite, "run")
        assert [run["result"] for run in result["history"]] == ["rolled_back"]
        # content_string: testinfra strips the trailing newline.
        assert host.file(CONFIG).content_string == overwrite.rstrip("\n"), "not restored as it was"
        assert host.service("containerd").is_running and result["pid_after"] != result["pid_before"]
        journal = host.check_output("journalctl -u %s.service --no-pager -o cat" % GUARD)
        assert "containerd did not come back after the nvidia runtime was restored" in journal
        assert "Restored the files as they were and restarted containerd: it is active" in journal
        # The timer's next run does not try the same files again.
        assert host.run("systemctl start %s.service" % GUARD).rc != 0
        assert "not repairing %s again" % CONFIG in host.check_output(
            "journalctl -u %s.service --no-pager -o cat -n 5" % GUARD
        )
        assert host.file(CONFIG).content_string == overwrite.rstrip("\n")
    finally:
        host.check_output("rm -f %s && systemctl daemon-reload" % REFUSE_NVIDIA)
    # Once the files change, the guard repairs them again.
    result = probe("append", "# fixed\n", "restart")
    assert "restarted" in result


def test_containerd_ends_with_the_nvidia_runtime_as_default(host):
    assert host.service("containerd").is_running
    plugins = host.check_output("ctr plugins ls")
    assert any(line.split()[1:2] == ["cri"] and line.split()[-1] == "ok" for line in plugins.splitlines()[1:])
    dump = host.check_output("containerd config dump")
    assert 'default_runtime_name = "nvidia"' in dump


def converge_guard_off(host, *options):
    """The role with container_runtime_drift_guard: false on this host; its recap's changed count."""
    name = host.backend.get_hostname()
    proc = subprocess.run(
        [
            "ansible-playbook",
            "-i",
            os.environ["MOLECULE_INVENTORY_FILE"],
            "--limit",
            name,
            GUARD_OFF,
            *options,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recap = re.search(r"^%s\s*:\s*ok=\d+\s+changed=(\d+)" % re.escape(name), proc.stdout, re.MULTILINE)
    assert recap, proc.stdout[-3000:]
    return int(recap.group(1))


def test_turning_the_guard_off_removes_what_it_installed(host):
    predicted = converge_guard_off(host, "--check")
    assert host.file("/etc/systemd/system/%s.path" % GUARD).exists, "check mode removed something"
    assert predicted > 0
    assert converge_guard_off(host) == predicted, "check mode mispredicted the removal"
    for path in (
        "/etc/systemd/system/%s.path" % GUARD,
        "/etc/systemd/system/%s.timer" % GUARD,
        "/etc/systemd/system/%s.service" % GUARD,
        "/usr/local/lib/%s" % GUARD,
        "/etc/%s" % GUARD,
        "/var/lib/%s" % GUARD,
    ):
        assert not host.file(path).exists, path
    assert host.run("systemctl is-active %s.path" % GUARD).stdout.strip() != "active"
    assert converge_guard_off(host) == 0, "removing the guard is not idempotent"
    assert 'default_runtime_name = "nvidia"' in host.check_output("containerd config dump")
