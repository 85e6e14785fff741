# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The device_plugin role on a lab node: the daemon built into a wheel and installed in its
venv, a hardened service the kubelet stand-in registers."""

import json
import os
from pathlib import Path

import pytest
import yaml

REPO = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"]).parent
SERVICE = "gpuops-device-plugin"
VENV_PYTHON = "/opt/gpuops-device-plugin/venv/bin/python"
COMMAND = "/opt/gpuops-device-plugin/venv/bin/gpuops-device-plugin"
SITE_PACKAGE = "/opt/gpuops-device-plugin/venv/lib/python3.11/site-packages/gpuops_device_plugin"
PROFILE = yaml.safe_load((REPO / "lab" / "profiles" / "h100-8x-nvswitch.yaml").read_text())
H100_UUIDS = sorted(device["uuid"] for device in PROFILE["devices"])

PROBE = """
import json, sys
sys.path[:0] = ["/tmp/standin"]  # gpuops_device_plugin.api comes from the venv
from kubelet_standin import KubeletStandin
kubelet = KubeletStandin("/var/lib/kubelet/device-plugins")
kubelet.start()
try:
    devices = kubelet.wait_registered("nvidia.com/gpu", timeout=30).wait(lambda d: len(d) == 8, timeout=30)
    print(json.dumps(devices))
finally:
    kubelet.stop()
"""


def test_service_is_active_and_enabled(host):
    service = host.service(SERVICE)
    assert service.is_running
    assert service.is_enabled


@pytest.mark.parametrize(
    ("prop", "value"),
    [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("CapabilityBoundingSet", ""),
        ("RestrictNamespaces", "yes"),
        ("ReadWritePaths", "/var/lib/kubelet/device-plugins"),
    ],
)
def test_unit_is_hardened(host, prop, value):
    assert host.check_output("systemctl show -P %s %s" % (prop, SERVICE)) == value


def test_the_service_runs_the_installed_console_script(host):
    exec_start = host.check_output("systemctl show -P ExecStart %s" % SERVICE)
    assert "path=%s ;" % COMMAND in exec_start
    assert "argv[]=%s --config-file " % COMMAND in exec_start
    assert "PYTHONPATH" not in host.check_output("systemctl show -P Environment %s" % SERVICE)


def test_the_daemon_is_a_wheel_installed_in_the_venv(host):
    shown = host.check_output("%s -m pip show gpuops-device-plugin" % VENV_PYTHON)
    assert "Name: gpuops-device-plugin" in shown
    assert "Version: %s" % yaml.safe_load((REPO / "galaxy.yml").read_text())["version"] in shown
    # Its dependencies are the role's pins, all present.
    host.run_expect([0], "%s -m pip check" % VENV_PYTHON)
    # The module linked from the collection's module_utils, installed as a file.
    shared = host.file("%s/_nvml_discovery.py" % SITE_PACKAGE)
    assert shared.is_file
    assert not shared.is_symlink
    assert "def discover(" in shared.content_string
    # Compiled at install: the service cannot write bytecode under ProtectSystem=strict.
    assert host.file("%s/__pycache__" % SITE_PACKAGE).is_directory


def test_only_the_build_source_reached_the_node(host):
    files = host.check_output("cd /opt/gpuops-device-plugin/src && find . -type f | sort").split()
    assert "./pyproject.toml" in files
    assert "./gpuops_device_plugin/daemon.py" in files
    assert not [f for f in files if "/tests/" in f or "__pycache__" in f or f.endswith(".pyc")]
    assert not host.file("/opt/gpuops-device-plugin/lib").exists  # the old PYTHONPATH copy
    link = host.file("/opt/gpuops-device-plugin/bin/gpuops-device-plugin")
    assert link.is_symlink
    assert link.linked_to == COMMAND


def test_config_was_validated_and_written(host):
    config = host.file("/etc/gpuops-device-plugin/config.yaml")
    assert config.mode == 0o644
    assert "quietPeriodSeconds: 30" in config.content_string


def test_metrics_endpoint_listens(host):
    assert host.socket("tcp://0.0.0.0:9402").is_listening


def test_kubelet_standin_sees_eight_healthy_gpus(host):
    host.check_output("mkdir -p /tmp/standin")
    standin = (REPO / "lab" / "daemon" / "kubelet_standin.py").read_text()
    host.run_expect([0], "cat > /tmp/standin/kubelet_standin.py <<'EOF'\n%s\nEOF" % standin)
    host.run_expect([0], "cat > /tmp/standin/probe.py <<'EOF'\n%s\nEOF" % PROBE)
    devices = json.loads(host.check_output("%s /tmp/standin/probe.py" % VENV_PYTHON))
    assert sorted(devices) == H100_UUIDS
    assert set(devices.values()) == {"Healthy"}
    log = host.check_output("journalctl -u %s --no-pager -o cat" % SERVICE)
    assert "registered nvidia.com/gpu with the kubelet (8 devices)" in log


def test_the_role_validator_refuses_a_bad_config_with_the_field_named(host):
    # The role writes the config with `validate:` running exactly this command, so a bad
    # config fails the task and the running file stays as it was.
    host.run_expect([0], "printf 'flags:\\n  migStrategy: sometimes\\n' > /tmp/bad-config.yaml")
    result = host.run(
        "/opt/gpuops-device-plugin/bin/gpuops-device-plugin --check-config --config-file /tmp/bad-config.yaml"
    )
    assert result.rc == 2
    assert "migStrategy: 'sometimes' is not valid; valid: none, single, mixed" in result.stderr
    assert "migStrategy: none" in host.file("/etc/gpuops-device-plugin/config.yaml").content_string
