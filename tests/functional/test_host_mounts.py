# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Host paths that NVIDIA's plugin and the validation pod mount read-only: each mount's
hostPath type reaches the manifest, and a type the kubelet does not know is refused by the
roles' argument specs before anything is applied."""

import pytest
import yaml
from resolve import resolve, template_expr

FILE_MOUNT = {"host_path": "/usr/config/config.yaml", "mount_path": "/usr/config/config.yaml", "type": "File"}
UNTYPED_MOUNT = {"host_path": "/opt/driver-extras", "mount_path": "/opt/extras"}


def volumes(tmp_path, mounts):
    """The hostPath volumes of NVIDIA's DaemonSet and of the validation pod, as the roles'
    templates render them with these mounts."""
    extra = {
        "device_plugin_mode": "nvidia",
        "device_plugin_nvidia_host_mounts": mounts,
        "gpu_validation_host_mounts": mounts,
        "gpu_validation_pod_name": "gpuops-validation-test",
    }
    exprs = {
        "plugin": template_expr("device_plugin", "nvidia-device-plugin.yml.j2"),
        "pod": template_expr("gpu_validation", "pod.yaml.j2"),
    }
    got = resolve("node-1,", [], exprs=exprs, extra=extra, tmp_path=tmp_path)["node-1"]
    plugin = yaml.safe_load(got["plugin"])["spec"]["template"]["spec"]["volumes"]
    pod = yaml.safe_load(got["pod"])["spec"]["volumes"]
    return [v["hostPath"] for v in plugin if v["name"].startswith("host-")], [v["hostPath"] for v in pod]


def test_a_file_mount_makes_the_pod_wait_for_the_file_and_an_untyped_one_stays_untyped(tmp_path):
    # type File: the kubelet waits for the file instead of leaving an empty directory at
    # the path (a DaemonSet whose pod starts before the driver brings the file).
    plugin, pod = volumes(tmp_path, [FILE_MOUNT, UNTYPED_MOUNT])
    expected = [
        {"path": "/usr/config/config.yaml", "type": "File"},
        {"path": "/opt/driver-extras"},
    ]
    assert plugin == expected
    assert pod == expected


def test_a_type_the_kubelet_does_not_know_is_refused_with_the_field_named(tmp_path):
    with pytest.raises(AssertionError) as refused:
        volumes(tmp_path, [dict(FILE_MOUNT, type="file")])
    text = str(refused.value)
    assert "device_plugin_nvidia_host_mounts" in text and "type" in text and "File" in text, text
