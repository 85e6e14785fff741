# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""_doctor.diagnose on a node our DRA driver serves (device_plugin_mode dra): its mode found
from the record or the registration socket, and each DRA finding with its fix."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _doctor as doc
from ansible_collections.gpuops.k8s.plugins.module_utils import _dra_view as view
from ansible_collections.gpuops.k8s.plugins.module_utils import _runtime_cdi as runtime_cdi
from ansible_collections.gpuops.k8s.tests.unit.plugins.module_utils.doctor_observations import (
    RESOURCE,
    SETTINGS,
    gpu_info,
    healthy,
    state,
    unit,
    units,
    uuid,
)

DRIVER = "gpu.gpuops.k8s"
SOCKET = SETTINGS["dra_registration_socket"]
RUNTIME = "/usr/bin/nvidia-container-runtime"


def paths(socket="socket"):
    found = {RUNTIME: {"exists": True, "type": "file", "executable": True}}
    if socket is not None:
        found[SOCKET] = {"exists": socket != "missing", "type": socket, "executable": False}
    return found


def device(index, taints=(), device_uuid=None):
    return {
        "name": "gpu-%d" % index,
        "attributes": {"type": {"string": "gpu"}, "uuid": {"string": device_uuid or uuid(index)}},
        "capacity": {"memory": {"value": "81559Mi"}},
        **({"taints": list(taints)} if taints else {}),
    }


def slices(devices=None, node_name="gpu-01", generation=1):
    """k8s_info of the driver's ResourceSlices: one slice of the node's pool."""
    devices = [device(i) for i in range(4)] if devices is None else devices
    return {
        "api_found": True,
        "resources": [
            {
                "metadata": {"name": "%s-%s-x7k2p" % (node_name, DRIVER)},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node_name,
                    "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
                    "devices": devices,
                },
            }
        ],
    }


def device_class(name, extended=None):
    spec = {"selectors": [{"cel": {"expression": 'device.driver == "%s"' % DRIVER}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"metadata": {"name": name}, "spec": spec}


def classes(*items):
    if not items:
        items = (device_class(DRIVER), device_class("nvidia-gpu." + DRIVER, RESOURCE))
    return {"api_found": True, "resources": list(items)}


def dra_node(mode="dra", socket="socket"):
    """A healthy node of 4 GPUs served by our DRA driver: no device plugin socket, no checkpoint,
    no nvidia.com/gpu in the Node's status."""
    observed = healthy()
    observed["gpu"] = gpu_info(mode=mode)
    observed["node_state"] = state(
        sockets=(),
        checkpoint={"path": "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint", "exists": False},
        paths=paths(socket),
    )
    status = observed["node"]["resources"][0]["status"]
    for key in ("allocatable", "capacity"):
        del status[key][RESOURCE]
    observed["slices"] = slices()
    observed["device_classes"] = classes()
    return observed


def diagnose(observed, **settings):
    return doc.diagnose(observed, dict(SETTINGS, **settings))


def only(findings):
    assert len(findings) == 1, findings
    return findings[0]


def test_a_healthy_dra_node_has_no_findings():
    assert diagnose(dra_node()) == []


def test_a_node_without_a_record_is_dra_by_its_registration_socket():
    observed = dra_node(mode=None)
    observed["gpu"]["device_plugin"] = {"source": "none", "mode": None}
    assert diagnose(observed) == []


def test_the_device_plugin_findings_stay_on_a_device_plugin_node_without_the_socket():
    # The same node, no record and no DRA socket: the device plugin's rules judge it.
    observed = dra_node(socket=None)
    observed["gpu"]["device_plugin"] = {"source": "none", "mode": None}
    assert [f["check"] for f in diagnose(observed)] == ["plugin", "allocatable"]


@pytest.mark.parametrize(
    "gpu, node_state, mode",
    [
        ({"device_plugin": {"mode": "dra"}}, {}, view.DRA),
        ({"device_plugin": {"mode": "nvidia_dra"}}, {}, view.DRA),
        ({"device_plugin": {"mode": "gpuops"}}, {"paths": {SOCKET: {"type": "socket"}}}, view.DEVICE_PLUGIN),
        ({"device_plugin": {"mode": None}}, {"paths": {SOCKET: {"type": "socket"}}}, view.DRA),
        ({"device_plugin": {"mode": None}}, {"paths": {SOCKET: {"type": "missing"}}}, view.DEVICE_PLUGIN),
        ({}, {}, view.DEVICE_PLUGIN),
    ],
)
def test_the_mode_is_the_record_else_the_socket(gpu, node_state, mode):
    assert view.serving_mode(gpu, node_state, SOCKET) == mode


@pytest.mark.parametrize("socket, what", [("missing", "no"), ("file", "a file, not a")])
def test_no_registration_socket(socket, what):
    observed = dra_node(socket=socket)
    assert only(diagnose(observed)) == {
        "check": "plugin",
        "severity": "fail",
        "message": "the DRA driver gpu.gpuops.k8s serves %s registration socket %s: the kubelet cannot "
        "prepare the node's ResourceClaims, so no pod gets its GPUs" % (what, SOCKET),
        "fix": "systemctl status gpuops-device-plugin and journalctl -u gpuops-device-plugin say why the "
        "driver does not serve (its credentials, NVIDIA's CDI spec, the driver's nvidia-smi and NVML); "
        "restart gpuops-device-plugin, or run role device_plugin (device_plugin_mode dra), which fails with "
        "its last warnings",
    }


NVIDIA = {
    "dra_driver": "gpu.nvidia.com",
    "dra_mode": "nvidia_dra",
    "dra_namespace": "dra-driver-nvidia-gpu",
    "dra_registration_socket": "/var/lib/kubelet/plugins_registry/gpu.nvidia.com-reg.sock",
    "dra_device_class": "gpu.nvidia.com",
    "dra_extended_class": "gpu.nvidia.com",
}
NVIDIA_POD = "-l dra-driver-nvidia-gpu-component=kubelet-plugin --field-selector spec.nodeName=gpu-01"


def nvidia_dra_node(**changes):
    """The same node served by NVIDIA's DRA driver (device_plugin_mode nvidia_dra)."""
    observed = dra_node(mode="nvidia_dra")
    observed["node_state"]["paths"] = {
        RUNTIME: observed["node_state"]["paths"][RUNTIME],
        NVIDIA["dra_registration_socket"]: {"exists": True, "type": "socket", "executable": False},
    }
    for item in observed["slices"]["resources"]:
        item["spec"]["driver"] = "gpu.nvidia.com"
    observed["device_classes"] = classes(device_class("gpu.nvidia.com", RESOURCE))
    observed.update(changes)
    return observed


def test_a_healthy_node_of_nvidias_dra_driver_has_no_findings():
    """Not judged as a device plugin node (no nvidia.com/gpu allocatable, no plugin socket)."""
    assert diagnose(nvidia_dra_node(), **NVIDIA) == []


def test_nvidias_driver_not_registered_names_its_pod_and_mode():
    observed = nvidia_dra_node()
    observed["node_state"]["paths"][NVIDIA["dra_registration_socket"]] = {"exists": False, "type": "missing"}
    found = only(diagnose(observed, **NVIDIA))
    assert (found["check"], found["severity"]) == ("plugin", "fail")
    assert found["message"].startswith("the DRA driver gpu.nvidia.com serves no registration socket")
    assert found["fix"] == (
        "kubectl -n dra-driver-nvidia-gpu logs %s (NVIDIA's kubelet plugin) say why the driver does not "
        "serve (its credentials, NVIDIA's CDI spec, the driver's nvidia-smi and NVML); delete NVIDIA's "
        "kubelet plugin pod on the node (kubectl -n dra-driver-nvidia-gpu delete pod %s; its DaemonSet "
        "starts it again), or run role device_plugin (device_plugin_mode nvidia_dra), which fails with its "
        "last warnings" % (NVIDIA_POD, NVIDIA_POD)
    )


def test_a_device_nvidias_driver_tainted_says_it_is_never_lifted():
    lost = {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}
    observed = nvidia_dra_node()
    observed["slices"]["resources"][0]["spec"]["devices"][1]["taints"] = [lost]
    found = only(diagnose(observed, **NVIDIA))
    assert found["check"] == "allocatable"
    assert "tainted: gpu-1 (%s, gpu.nvidia.com/gpu-lost)" % uuid(1) in found["message"], found
    assert (
        "NVIDIA's driver never lifts its taints: once the GPU is sound again, delete NVIDIA's" in found["fix"]
    )


def test_nvidias_class_must_keep_its_extended_resource_name():
    observed = nvidia_dra_node(device_classes=classes(device_class("gpu.nvidia.com")))
    found = only(diagnose(observed, **NVIDIA))
    assert (found["check"], found["severity"]) == ("dra", "warn")
    assert found["message"].startswith("DeviceClass gpu.nvidia.com has no extendedResourceName")


def test_no_slice_published():
    observed = dra_node()
    observed["slices"] = slices(node_name="gpu-02")  # another node's only
    found = only(diagnose(observed))
    assert (found["check"], found["severity"]) == ("allocatable", "fail")
    assert found["message"] == (
        "the DRA driver gpu.gpuops.k8s publishes no ResourceSlice for node gpu-01: no claim can be "
        "allocated its GPUs"
    )
    assert found["fix"].startswith("the driver publishes its slice at start and again whenever the kubelet")


def test_a_tainted_device_and_an_unpublished_gpu_are_named():
    xid = {"key": "gpu.gpuops.k8s/xid", "value": "79", "effect": "NoSchedule"}
    observed = dra_node()
    observed["slices"] = slices([device(0), device(1, [xid]), device(2)])  # gpu-3 not published
    found = only(diagnose(observed))
    assert found["check"] == "allocatable"
    assert found["message"] == (
        "the ResourceSlice of gpu.gpuops.k8s for node gpu-01 offers 2 of the 4 GPUs NVML lists untainted: "
        "tainted: gpu-1 (%s, gpu.gpuops.k8s/xid=79); not published: %s (GPU 3)" % (uuid(1), uuid(3))
    )
    assert found["fix"].startswith(
        "the driver taints a device it finds unhealthy (the key says why; see nvml and device_nodes); the "
        "daemon lifts the taint once the GPU answers again for its quiet period;"
    )


def test_a_device_for_a_gpu_nvml_no_longer_lists():
    observed = dra_node()
    observed["gpu"] = gpu_info(range(3), mode="dra")
    observed["node_state"]["devices"] = {
        k: v for k, v in observed["node_state"]["devices"].items() if k != "nvidia3"
    }
    found = only(diagnose(observed))
    assert found["message"] == (
        "the ResourceSlice of gpu.gpuops.k8s offers GPUs that NVML no longer lists: gpu-3 (%s)" % uuid(3)
    )


def test_only_the_pools_newest_generation_counts():
    observed = dra_node()
    old = slices([device(i, [{"key": "gpu.gpuops.k8s/lost", "effect": "NoSchedule"}]) for i in range(4)])
    observed["slices"]["resources"] += old["resources"]
    observed["slices"]["resources"][1]["spec"]["pool"]["generation"] = 0
    assert diagnose(observed) == []


def test_a_stale_device_plugin_resource_in_the_nodes_status():
    observed = dra_node()
    status = observed["node"]["resources"][0]["status"]
    status["capacity"][RESOURCE], status["allocatable"][RESOURCE] = "4", "0"
    found = only(diagnose(observed))
    assert found["message"] == (
        "Node gpu-01 still lists nvidia.com/gpu from a device plugin (capacity 4, allocatable 0), though the "
        "DRA driver gpu.gpuops.k8s serves its GPUs: the scheduler places nvidia.com/gpu pods by that count "
        "and the kubelet may start them without a GPU"
    )


def test_dra_not_served_by_the_api_server():
    observed = dra_node()
    observed["device_classes"] = {"api_found": False, "resources": []}
    found = only(diagnose(observed))
    assert (found["check"], found["severity"]) == ("dra", "fail")
    assert found["message"].startswith("the API server does not serve resource.k8s.io/v1 (DeviceClass)")


def test_the_drivers_device_class_missing():
    observed = dra_node()
    observed["device_classes"] = classes(device_class("nvidia-gpu." + DRIVER, RESOURCE))
    found = only(diagnose(observed))
    assert found == {
        "check": "dra",
        "severity": "fail",
        "message": "DeviceClass gpu.gpuops.k8s does not exist: claims for the driver's GPUs name it, and "
        "none can be allocated",
        "fix": "run role device_plugin (device_plugin_mode dra), which applies the driver's DeviceClasses",
    }


def test_the_extended_resource_class_missing_is_a_warning_only_where_wanted():
    observed = dra_node()
    observed["device_classes"] = classes(device_class(DRIVER))
    found = only(diagnose(observed))
    assert (found["check"], found["severity"]) == ("dra", "warn")
    assert found["message"].startswith("DeviceClass nvidia-gpu.gpu.gpuops.k8s does not exist")
    assert diagnose(observed, dra_extended_class="") == []


def test_an_extended_resource_name_the_api_server_dropped_says_the_gate_is_off():
    observed = dra_node()
    observed["device_classes"] = classes(device_class(DRIVER), device_class("nvidia-gpu." + DRIVER))
    found = only(diagnose(observed))
    assert found["severity"] == "warn"
    assert "its DRAExtendedResource feature gate is off" in found["message"]


@pytest.mark.parametrize(
    "kubelet, why",
    [
        (
            {
                "version": "v1.37.2",
                "config": {"failCgroupV1": False, "featureGates": {"DynamicResourceAllocation": False}},
            },
            "its configuration (/var/lib/kubelet/config.yaml) sets the feature gate "
            "DynamicResourceAllocation: false",
        ),
        (
            {"version": "v1.33.4", "config": {"failCgroupV1": False}},
            "it is v1.33.4, older than Kubernetes 1.34, where DRA's v1 API became GA",
        ),
    ],
)
def test_a_kubelet_that_cannot_serve_dra(kubelet, why):
    observed = dra_node()
    observed["kubelet"] = dict(observed["kubelet"], **kubelet)
    found = only(diagnose(observed))
    assert (found["check"], found["severity"]) == ("dra", "fail")
    assert found["message"] == "the kubelet cannot prepare the DRA driver gpu.gpuops.k8s's claims: " + why


def test_dra_checks_are_silent_on_a_device_plugin_node():
    observed = healthy()
    observed["slices"] = {"api_found": False, "resources": []}
    observed["device_classes"] = {"api_found": False, "resources": []}
    assert diagnose(observed) == []


def test_the_daemons_unit_is_judged_in_mode_dra_with_what_its_stop_means():
    observed = dra_node()
    observed["node_state"]["systemd"] = units(**{"gpuops-device-plugin.service": unit("inactive", "dead")})
    found = only(diagnose(observed))
    assert found["message"] == (
        "gpuops-device-plugin.service is inactive (dead): the DRA driver is down, so the kubelet cannot "
        "prepare the node's ResourceClaims, so no new pod gets its GPUs"
    )


def test_every_dra_check_in_order_and_skipped():
    observed = dra_node(socket="missing")
    observed["slices"] = slices([])
    observed["device_classes"] = classes()
    observed["device_classes"]["resources"] = []
    checks = [f["check"] for f in diagnose(observed)]
    assert checks == ["plugin", "allocatable", "dra", "dra"]
    assert [f["check"] for f in doc.diagnose(observed, SETTINGS, ["dra", "plugin"])] == ["allocatable"]


def test_settings_default_to_our_driver_for_callers_that_give_none():
    settings = {k: v for k, v in SETTINGS.items() if not k.startswith("dra_")}
    observed = dra_node(socket="missing")
    assert [f["check"] for f in doc.diagnose(observed, settings)] == ["plugin"]


# `containerd config dump` of containerd 1.7, its CRI plugin cut to what matters here, with
# or without enable_cdi (containerd's default: off).
DUMP_17 = """\
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
%s    sandbox_image = "registry.k8s.io/pause:3.8"
"""
NO_CDI = [
    ("containerd://1.6.20~ds1", None),
    ("containerd://1.7.24", DUMP_17 % ""),
    ("containerd://1.7.24", DUMP_17 % "    enable_cdi = false\n"),
]


def with_runtime(observed, runtime_version, dump=None):
    """observed with node_state_info's runtime_cdi for that runtime (the real verdict)."""
    observed["node_state"]["runtime_cdi"] = runtime_cdi.verdict(runtime_version, dump)
    return observed


@pytest.mark.parametrize("runtime_version, dump", NO_CDI)
def test_a_dra_node_whose_runtime_does_not_inject_cdi_devices(runtime_version, dump):
    observed = with_runtime(dra_node(), runtime_version, dump)
    said = observed["node_state"]["runtime_cdi"]["msg"]
    assert said is not None
    found = only(diagnose(observed))
    assert (found["check"], found["severity"]) == ("dra", "fail")
    assert found["message"] == (
        "Node gpu-01: the DRA driver gpu.gpuops.k8s prepares each claim as CDI devices, which its container "
        "runtime must inject, but %s. Every claimed GPU reaches its pod without its device" % said
    )
    assert found["fix"].startswith(
        "containerd 1.7 (or 2.x with CDI turned off): set container_runtime_enable_cdi: true and run role "
        "container_runtime"
    )
    assert "then run role device_plugin (device_plugin_mode dra) again" in found["fix"]
    assert "upgrade it to one the message names as valid" in found["fix"]


def test_the_runtimes_verdict_names_the_version_and_what_is_valid():
    observed = with_runtime(dra_node(), "containerd://1.6.20~ds1")
    message = only(diagnose(observed))["message"]
    assert "containerd 1.6.20~ds1 has no CDI support" in message
    assert "DRA needs containerd 1.7 with enable_cdi = true" in message


@pytest.mark.parametrize("runtime_version, dump", NO_CDI)
def test_no_runtime_finding_on_a_device_plugin_node(runtime_version, dump):
    assert diagnose(with_runtime(healthy(), runtime_version, dump)) == []


@pytest.mark.parametrize(
    "runtime_version, dump",
    [
        ("containerd://1.7.24", DUMP_17 % "    enable_cdi = true\n"),
        ("containerd://2.1.4", 'version = 3\n[plugins]\n  [plugins."io.containerd.cri.v1.runtime"]\n'),
        ("cri-o://1.30.4", None),
    ],
)
def test_no_runtime_finding_where_the_runtime_injects_cdi_devices(runtime_version, dump):
    observed = with_runtime(dra_node(), runtime_version, dump)
    assert observed["node_state"]["runtime_cdi"]["msg"] is None
    assert diagnose(observed) == []


@pytest.mark.parametrize("present", [False, True])
def test_no_runtime_finding_without_the_runtimes_verdict(present):
    # Callers that give node_state_info no container_runtime_version: runtime_cdi null, or
    # no such key in an older node_state_info's result.
    observed = dra_node()
    assert "runtime_cdi" not in observed["node_state"]
    if present:
        observed["node_state"]["runtime_cdi"] = None
    assert diagnose(observed) == []


def test_the_runtime_finding_is_skipped_with_the_dra_check():
    observed = with_runtime(dra_node(), "containerd://1.6.20~ds1")
    assert doc.diagnose(observed, SETTINGS, ["dra"]) == []
