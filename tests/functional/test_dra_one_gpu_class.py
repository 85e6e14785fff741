# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""device_plugin's refusal of a second DeviceClass for nvidia.com/gpu pods
(roles/device_plugin/tasks/dra_checks.yml), its condition and message taken verbatim from
the role and evaluated by the real ansible-playbook, for a play whose hosts are in the two
DRA modes. The lab (tests/integration/test_lab_nodes.py) sees the other half: a class
already in the cluster."""

import pytest
from resolve import find_task, hosts_inventory, resolve

TASK = find_task("device_plugin", "dra_checks.yml", "Refuse a second DeviceClass for nvidia.com/gpu pods")


def refusal(tmp_path, modes, **host_vars):
    """{host: (refused, message)} for a play of hosts in MODES {host: mode}."""
    hosts = {host: {"device_plugin_mode": mode, **host_vars.get(host, {})} for host, mode in modes.items()}
    when = " and ".join("(%s)" % condition for condition in TASK["when"])
    exprs = {"refused": "{{ %s }}" % when, "message": TASK["ansible.builtin.fail"]["msg"]}
    # The task's vars, as the play gives them to its condition and message; no DeviceClass
    # in the cluster (the task reading them registered none).
    extra = dict(TASK["vars"], __device_plugin_dra_classes={"resources": []})
    found = resolve(hosts_inventory(tmp_path, hosts), [], exprs=exprs, extra=extra, tmp_path=tmp_path)
    return {host: (got["refused"], " ".join(got["message"].split())) for host, got in found.items()}


def refused_hosts(found):
    return {host: verdict[0] for host, verdict in found.items()}


def test_each_mode_names_the_host_in_the_other_and_its_class(tmp_path):
    found = refusal(tmp_path, {"gpu-a": "dra", "gpu-b": "nvidia_dra"})
    refused, message = found["gpu-a"]
    assert refused is True
    assert message.startswith(
        "Node gpu-a: device_plugin_mode dra serves pods that ask for nvidia.com/gpu (no claim) through "
        "DeviceClass nvidia-gpu.gpu.gpuops.k8s, but gpu-b in this play, in device_plugin_mode nvidia_dra, "
        "would through gpu.nvidia.com."
    ), message
    refused, message = found["gpu-b"]
    assert refused is True
    assert (
        "through DeviceClass gpu.nvidia.com, but gpu-a in this play, in device_plugin_mode dra, "
        "would through nvidia-gpu.gpu.gpuops.k8s."
    ) in message, message
    assert message.endswith("The device_plugin role changed nothing on this node."), message


@pytest.mark.parametrize(
    "modes",
    [{"gpu-a": "dra", "gpu-b": "dra"}, {"gpu-a": "nvidia_dra", "gpu-b": "nvidia_dra"}],
    ids=["dra", "nvidia_dra"],
)
def test_one_mode_for_all_is_not_refused(tmp_path, modes):
    assert refused_hosts(refusal(tmp_path, modes)) == {"gpu-a": False, "gpu-b": False}


def test_ours_without_the_extended_resource_is_no_rival(tmp_path):
    # device_plugin_dra_extended_resource false: our nodes serve claims only.
    off = {"device_plugin_dra_extended_resource": False}
    found = refusal(tmp_path, {"gpu-a": "dra", "gpu-b": "nvidia_dra"}, **{"gpu-a": off})
    assert refused_hosts(found) == {"gpu-a": False, "gpu-b": False}
