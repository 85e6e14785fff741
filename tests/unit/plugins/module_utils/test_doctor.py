# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""_doctor.diagnose: each finding's check, severity, message and fix, from registered results.

The observations are shaped as Ansible registers them (node_state_info, k8s_info, gpu_info,
kubelet_info, nvidia_runtime and gpu_node results). Messages and fixes are asserted in full:
users read them, scripts match on them (tests/integration/test_doctor.py does too).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _doctor as doc
from ansible_collections.gpuops.k8s.tests.unit.plugins.module_utils.doctor_observations import (
    RESOURCE,
    SETTINGS,
    dev_nodes,
    gpu_info,
    guard_units,
    healthy,
    kubelet,
    node,
    ready_pod,
    state,
    unit,
    units,
    uuid,
)


def diagnose(changes=None, settings=None, skip=()):
    observed = healthy()
    for key, value in (changes or {}).items():
        observed[key] = value
    return doc.diagnose(observed, dict(SETTINGS, **(settings or {})), skip)


def only(findings):
    assert len(findings) == 1, findings
    return findings[0]


def test_healthy_node_has_no_findings():
    assert doc.diagnose(healthy(), SETTINGS) == []


def test_driver_module_missing():
    node_state = dict(state(), driver={"loaded": False, "version": None, "majors": {}, "error": None})
    assert only(diagnose({"node_state": node_state})) == {
        "check": "driver_module",
        "severity": "fail",
        "message": "the NVIDIA kernel module is not loaded (no /proc/driver/nvidia/version)",
        "fix": "install the driver (role nvidia_driver) and reboot, or load it with modprobe nvidia; "
        "check dmesg for NVRM errors and Secure Boot",
    }


def test_no_device_nodes():
    assert only(diagnose({"node_state": state(devices={})})) == {
        "check": "device_nodes",
        "severity": "fail",
        "message": "no /dev/nvidia[0-9]* device nodes",
        "fix": "load the driver; nvidia-persistenced or nvidia-modprobe creates the nodes "
        "(role nvidia_driver enables persistence)",
    }


def test_driver_library_missing():
    gpu = {
        "gpu_count": 0,
        "nvml": {
            "available": False,
            "reason": "library_not_found",
            "error": "libnvidia-ml.so.1: cannot open",
        },
        "lost_gpus": [],
        "device_plugin": {"source": "record", "mode": "gpuops"},
    }
    findings = diagnose({"gpu": gpu})
    assert findings[0] == {
        "check": "nvml",
        "severity": "fail",
        "message": "the driver library libnvidia-ml.so.1 is missing: libnvidia-ml.so.1: cannot open",
        "fix": "install the driver user-space libraries (role nvidia_driver; Debian package libnvidia-ml1)",
    }
    # No GPU counted: the plugin and allocatable checks have nothing to compare.
    assert [f["check"] for f in findings] == ["nvml"]


def test_no_python_bindings_is_its_own_finding():
    error = "nvidia-ml-py (the Python module pynvml) is not installed for /usr/bin/python3"
    gpu = {"gpu_count": 0, "nvml": {"available": False, "reason": "bindings_not_installed", "error": error}}
    assert only(diagnose({"gpu": gpu})) == {
        "check": "nvml",
        "severity": "fail",
        "message": "NVML cannot be asked: " + error,
        "fix": "install nvidia-ml-py for the node's Python (nvidia_driver_python_bindings)",
    }


def test_nvml_does_not_start():
    gpu = {
        "gpu_count": 0,
        "nvml": {"available": False, "reason": "driver_not_loaded", "error": "Driver Not Loaded"},
    }
    assert only(diagnose({"gpu": gpu})) == {
        "check": "nvml",
        "severity": "fail",
        "message": "NVML does not start: Driver Not Loaded",
        "fix": "the library and the kernel module must be the same driver version; "
        "reboot after a driver upgrade",
    }


def test_nvml_sees_no_gpu():
    gpu = {"gpu_count": 0, "nvml": {"available": True}, "lost_gpus": []}
    assert only(diagnose({"gpu": gpu})) == {
        "check": "nvml",
        "severity": "fail",
        "message": "NVML works but sees no GPU",
        "fix": "check that the GPUs are on the PCI bus (lspci -d 10de:) and not passed through to a VM",
    }


def test_each_lost_gpu_is_a_finding_and_no_gpu_is_not_one_more():
    lost = [{"index": 3, "error": "GPU is lost"}, {"index": 5, "error": "Unknown Error"}]
    gpu = {"gpu_count": 0, "nvml": {"available": True}, "lost_gpus": lost}
    findings = diagnose({"gpu": gpu})
    fix = (
        "drain the node, then reset the GPU (nvidia-smi -r) or reboot; "
        "replace it if it falls off the bus again"
    )
    assert findings == [
        {"check": "nvml", "severity": "fail", "message": "GPU 3 is lost (GPU is lost)", "fix": fix},
        {"check": "nvml", "severity": "fail", "message": "GPU 5 is lost (Unknown Error)", "fix": fix},
    ]


def test_a_lost_gpu_beside_working_ones():
    # gpu_info leaves the lost GPU out; its node stays, and the daemon holds it unhealthy:
    # capacity 8 is the 7 GPUs and the lost one.
    lost = [{"index": 3, "error": "GPU is lost", "nvml_code": 15}]
    observed = dict(
        healthy(),
        gpu=gpu_info([0, 1, 2, 4, 5, 6, 7], lost=lost),
        node_state=state(
            devices=dev_nodes(range(8)), registered={RESOURCE: [uuid(m) for m in (0, 1, 2, 4, 5, 6, 7)]}
        ),
        node=node(7, capacity=8),
    )
    assert [f["message"] for f in doc.diagnose(observed, SETTINGS)] == ["GPU 3 is lost (GPU is lost)"]


def test_toolkit_missing_names_the_binary():
    path = "/opt/nvidia/bin/nvidia-container-runtime"
    missing = state(paths={path: {"exists": False, "type": "missing", "executable": False}})
    assert only(diagnose({"node_state": missing}, {"runtime_path": path})) == {
        "check": "toolkit",
        "severity": "fail",
        "message": "/opt/nvidia/bin/nvidia-container-runtime is missing (NVIDIA Container Toolkit)",
        "fix": "install it (role nvidia_container_toolkit)",
    }


def test_a_toolkit_binary_that_cannot_run():
    path = "/usr/bin/nvidia-container-runtime"
    plain = state(paths={path: {"exists": True, "type": "file", "executable": False}})
    assert only(diagnose({"node_state": plain})) == {
        "check": "toolkit",
        "severity": "fail",
        "message": "/usr/bin/nvidia-container-runtime is not an executable file (it is a file, or lacks "
        "its x bits): the runtime cannot run it",
        "fix": "reinstall it (role nvidia_container_toolkit)",
    }


RUNTIME = "/usr/bin/nvidia-container-runtime"
SPEC = "/var/run/cdi/nvidia.yaml"


def test_a_cdi_spec_missing_in_mode_cdi_is_named_with_its_fix():
    paths = {RUNTIME: {"exists": True, "type": "file", "executable": True}, SPEC: {"exists": False}}
    found = only(diagnose({"node_state": state(paths=paths)}, {"toolkit_runtime_mode": "cdi"}))
    assert found["check"] == "toolkit" and found["severity"] == "fail", found
    assert found["message"] == (
        "/var/run/cdi/nvidia.yaml is missing: the NVIDIA runtime is in mode cdi and injects GPUs only "
        "from that spec, so every GPU container fails with unresolvable CDI devices"
    )
    assert found["fix"].startswith("generate it as root: nvidia-ctk cdi generate --output=" + SPEC)


@pytest.mark.parametrize(
    "mode, spec",
    [("cdi", {"exists": True, "type": "file"}), ("auto", {"exists": False}), ("legacy", {"exists": False})],
)
def test_a_cdi_spec_is_needed_only_in_mode_cdi(mode, spec):
    paths = {RUNTIME: {"exists": True, "type": "file", "executable": True}, SPEC: spec}
    assert diagnose({"node_state": state(paths=paths)}, {"toolkit_runtime_mode": mode}) == []


BROKEN = (
    'failed to load CDI Spec failed to parse CDI Spec "/var/run/cdi/nvidia.yaml": failed to unmarshal'
    " CDI Spec: yaml: line 547: did not find expected ',' or '}'"
)


@pytest.mark.parametrize("mode", ["auto", "cdi", "legacy"])
def test_a_cdi_spec_the_cache_cannot_load_fails_in_every_mode(mode):
    # What the lab's node showed: the doctor said healthy, the test pod failed on
    # "unresolvable CDI devices". nvidia-ctk cdi list reads the specs as the runtime does.
    paths = {RUNTIME: {"exists": True, "type": "file", "executable": True}, SPEC: {"exists": True}}
    cdi = {
        "available": True,
        "error": None,
        "devices": [],
        "spec_errors": {SPEC: BROKEN, "/etc/cdi/x.json": "bad"},
    }
    found = diagnose({"node_state": dict(state(paths=paths), cdi=cdi)}, {"toolkit_runtime_mode": mode})
    assert [(f["check"], f["severity"]) for f in found] == [("toolkit", "fail"), ("toolkit", "fail")]
    assert found[0]["message"] == (
        "the CDI spec /etc/cdi/x.json cannot be loaded (bad): the container runtime reads it with the"
        " same CDI code, so every container that asks for its devices fails with unresolvable CDI devices"
    )
    assert found[0]["fix"] == "repair or remove it (nvidia-ctk cdi list names what is wrong)"
    assert found[1]["message"].startswith("the CDI spec %s cannot be loaded (%s)" % (SPEC, BROKEN))
    assert found[1]["fix"] == (
        "regenerate it: role nvidia_container_toolkit, or as root nvidia-ctk cdi generate --output=" + SPEC
    )


def test_cdi_specs_that_load_or_were_not_read_are_no_finding():
    paths = {RUNTIME: {"exists": True, "type": "file", "executable": True}, SPEC: {"exists": True}}
    loads = {"available": True, "error": None, "devices": ["nvidia.com/gpu=0"], "spec_errors": {}}
    for cdi in (
        loads,
        None,
        {"available": False, "error": "x is not installed", "devices": [], "spec_errors": {}},
    ):
        assert (
            diagnose({"node_state": dict(state(paths=paths), cdi=cdi)}, {"toolkit_runtime_mode": "cdi"}) == []
        )


def test_a_toolkit_binary_not_looked_at_is_no_finding():
    assert diagnose({"node_state": state(paths={})}) == []


def test_runtime_missing_names_every_file_to_change():
    files = ["/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"]
    result = {"changed": False, "failed": False, "changed_files": files, "restart_required": True}
    assert only(diagnose({"runtime_check": result})) == {
        "check": "runtime",
        "severity": "fail",
        "message": "the nvidia runtime is missing from (or differs in) "
        "/etc/containerd/config.toml, /etc/containerd/conf.d/99-nvidia.toml",
        "fix": "run role container_runtime (it restores the entry and restarts containerd only on a real "
        "change); if another tool rewrote the file, that tool dropped it",
    }


def test_runtime_finding_names_the_runtime_and_its_entry():
    result = {"changed_files": ["/etc/crio/crio.conf"]}
    finding = only(diagnose({"runtime_check": result}, {"runtime": "crio", "runtime_name": "nvidia-gpu"}))
    assert finding["message"] == "the nvidia-gpu runtime is missing from (or differs in) /etc/crio/crio.conf"
    assert "restarts crio only on a real change" in finding["fix"]


def test_runtime_config_that_cannot_be_read():
    # As registered with ignore_errors: the module's failure and its message.
    result = {
        "changed": False,
        "failed": True,
        "msg": "/etc/containerd/config.toml line 2, column 8: Unexpected character: '\\n'; "
        "the file is left untouched",
        "restart_required": False,
    }
    assert only(diagnose({"runtime_check": result})) == {
        "check": "runtime",
        "severity": "fail",
        "message": "the containerd configuration cannot be read: /etc/containerd/config.toml line 2, "
        "column 8: Unexpected character: '\\n'; the file is left untouched",
        "fix": "fix the file named in the message, then run role container_runtime",
    }


def test_runtime_check_skipped_is_no_finding():
    assert diagnose({"runtime_check": {"skipped": True, "changed": False}}) == []


def test_a_stopped_drift_guard_is_a_warning_naming_each_unit_not_active():
    assert only(diagnose({"node_state": state(systemd=guard_units("inactive", "inactive"))})) == {
        "check": "drift_guard",
        "severity": "warn",
        "message": "the runtime drift guard is not running, so another tool's rewrite of the runtime's "
        "configuration stays: gpuops-runtime-guard.path inactive (result success), "
        "gpuops-runtime-guard.timer inactive (result success)",
        "fix": "start them (systemctl start, or run role container_runtime); "
        "journalctl -u says why they stopped",
    }


def test_a_path_unit_out_of_inotify_instances_says_so():
    # systemd's result when it cannot set up the watch ("Too many open files"): seen on a
    # lab node with root's inotify instances used up.
    finding = only(
        diagnose({"node_state": state(systemd=guard_units("failed", "active", result="resources"))})
    )
    assert finding["message"].endswith(": gpuops-runtime-guard.path failed (result resources)"), finding
    assert finding["fix"].endswith(
        "; result resources: systemd could not watch the files, raise fs.inotify.max_user_instances"
    ), finding


@pytest.mark.parametrize(
    "systemd",
    [
        # container_runtime_drift_guard: false, or the runtime phase never ran here
        guard_units("inactive", "inactive", load="not-found"),
        # no systemd on the node: node_state_info says so
        {"available": False, "error": "systemd is not the init system here", "units": {}},
        # not asked of node_state_info
        {"available": True, "error": None, "units": {}},
    ],
    ids=["not-installed", "no-systemd", "not-asked"],
)
def test_a_guard_that_is_not_installed_is_no_finding(systemd):
    assert diagnose({"node_state": state(systemd=systemd)}) == []


def test_runtime_class_missing_when_nvidia_is_not_the_default():
    assert only(diagnose({"runtime_class_info": {"resources": []}})) == {
        "check": "runtime_class",
        "severity": "warn",
        "message": "nvidia is not the default runtime and RuntimeClass nvidia does not exist: "
        "pods get no GPU libraries",
        "fix": "run role cluster_addons (RuntimeClass), or set the runtime as default",
    }


def test_runtime_class_not_needed_when_nvidia_is_the_default():
    assert diagnose({"runtime_class_info": {"resources": []}}, {"runtime_is_default": True}) == []


KUBELET_FIX = (
    "move the node to cgroup v2 (boot with systemd.unified_cgroup_hierarchy=1; RHEL 8 and older "
    "images default to v1), or set failCgroupV1: false in /var/lib/kubelet/config.yaml and restart "
    "the kubelet (cgroup v1 is in maintenance mode upstream)"
)


def test_a_kubelet_135_on_cgroup_v1_without_the_setting_fails_naming_it():
    assert only(diagnose({"kubelet": kubelet("v1.35.4", config={"cgroupDriver": "systemd"})})) == {
        "check": "kubelet",
        "severity": "fail",
        "message": "this node is on cgroup v1 and the kubelet (v1.35.4) refuses to start there: "
        "/var/lib/kubelet/config.yaml does not set failCgroupV1, which is true by default from "
        "Kubernetes 1.35 (KEP-5573), so the kubelet exits at start and the Node goes NotReady",
        "fix": KUBELET_FIX,
    }


def test_failcgroupv1_true_fails_from_131_where_the_setting_came():
    found = only(diagnose({"kubelet": kubelet("v1.31.0", config={"failCgroupV1": True})}))
    assert found["severity"] == "fail"
    assert "/var/lib/kubelet/config.yaml says failCgroupV1: true" in found["message"]
    assert diagnose({"kubelet": kubelet("v1.30.9", config={"failCgroupV1": True})}) == []


def test_an_upgrade_the_inventory_plans_is_a_warning_before_it_happens():
    found = only(diagnose({"kubelet": kubelet("v1.34.10", config={})}, {"kubelet_version": "v1.35.4"}))
    assert found["severity"] == "warn"
    assert found["message"].startswith(
        "this node is on cgroup v1 and the kubelet at v1.35.4 (gpuops_kubernetes_version) refuses to start"
    )
    assert found["fix"] == KUBELET_FIX


def test_a_kubelet_configuration_that_cannot_be_read_is_named_not_taken_for_unset():
    broken = dict(kubelet(config={}), config_error="/var/lib/kubelet/config.yaml: Expecting value: line 1")
    assert only(diagnose({"kubelet": broken})) == {
        "check": "kubelet",
        "severity": "fail",
        "message": "the kubelet (v1.37.2) cannot start: its configuration cannot be read "
        "(/var/lib/kubelet/config.yaml: Expecting value: line 1)",
        "fix": "repair or restore the file (the kubelet logs the same parse error at start), "
        "then restart the kubelet",
    }
    # On cgroup v2 too: the file stops the kubelet whatever the host.
    assert only(diagnose({"kubelet": dict(broken, cgroup_version=2)}))["severity"] == "fail"


@pytest.mark.parametrize(
    "observed, target",
    [
        (kubelet("v1.37.2", config={"failCgroupV1": False}), "v1.37.2"),  # allowed explicitly
        (kubelet("v1.37.2", cgroup=2, config={}), ""),  # cgroup v2: nothing to refuse
        (kubelet("v1.34.10", config={}), ""),  # before 1.35 the default lets it run
        (kubelet("v1.34.10", config={}), "v1.34.12"),  # and so does the planned release
        (kubelet(None, config={}), ""),  # no kubelet on the node
        ({"skipped": True, "changed": False}, ""),  # not checked
    ],
)
def test_no_kubelet_finding_where_it_does_not_apply(observed, target):
    assert diagnose({"kubelet": observed}, {"kubelet_version": target}) == []


def test_no_plugin_socket():
    assert only(diagnose({"node_state": state(sockets=())})) == {
        "check": "plugin",
        "severity": "fail",
        "message": "no device plugin socket in /var/lib/kubelet/device-plugins: "
        "the device plugin is not running",
        "fix": "start it (role device_plugin; systemctl status gpuops-device-plugin, "
        "or the nvidia-device-plugin pod)",
    }


def test_a_plugin_record_that_cannot_be_read_is_a_plugin_failure():
    """gpu_info with fail_on_plugin_error false: the record's error, the GPUs still counted."""
    gpu = healthy()["gpu"]
    error = (
        "the device plugin's configuration (/etc/gpuops-device-plugin/served.json): "
        "/etc/gpuops-device-plugin/served.json: not valid JSON: Unterminated string"
    )
    gpu = dict(gpu, labels={}, device_plugin=dict(gpu.get("device_plugin") or {}, mode=None, error=error))
    assert only(diagnose({"gpu": gpu})) == {
        "check": "plugin",
        "severity": "fail",
        "message": error,
        "fix": "run role device_plugin on the node again: it writes the record of what its plugin "
        "serves (the labels are judged once it can be read)",
    }


CHECKPOINT = "/var/lib/kubelet/device-plugins/kubelet_internal_checkpoint"


@pytest.mark.parametrize(
    "checkpoint, why",
    [
        ({"path": CHECKPOINT, "exists": True, "registered": {}, "error": None}, ""),
        ({"path": CHECKPOINT, "exists": True, "registered": {"example.com/fpga": ["f0"]}, "error": None}, ""),
        ({"path": CHECKPOINT, "exists": False, "registered": {}, "error": None}, ""),
        (
            {"path": CHECKPOINT, "exists": True, "registered": {}, "error": CHECKPOINT + ": Expecting value"},
            " (%s: Expecting value)" % CHECKPOINT,
        ),
    ],
    ids=["no-devices", "other-resource", "no-checkpoint", "unreadable"],
)
def test_socket_without_registration(checkpoint, why):
    findings = diagnose({"node_state": state(checkpoint=checkpoint)})
    # Nothing registered: allocatable (4 on the Node) says nothing more where the checkpoint
    # cannot tell which GPUs.
    assert only(findings) == {
        "check": "plugin",
        "severity": "fail",
        "message": "a plugin socket exists but the kubelet has no nvidia.com/gpu devices registered" + why,
        "fix": "check the plugin's log for its Register call (and for GPUs it marks unhealthy); "
        "restart the kubelet if its kubelet.sock is stale",
    }


def test_plugin_and_allocatable_are_not_checked_without_gpus():
    observed = healthy(gpus=0)
    observed["gpu"]["lost_gpus"] = [{"index": 0, "error": "GPU is lost"}]
    observed["node_state"] = state(devices=dev_nodes([0]), sockets=(), registered={})
    observed["node"]["resources"][0]["status"]["allocatable"] = {}
    assert [f["check"] for f in doc.diagnose(observed, SETTINGS)] == ["nvml"]


def test_node_not_in_the_cluster():
    finding = only(diagnose({"node": {"resources": []}}))
    assert finding == {
        "check": "allocatable",
        "severity": "fail",
        "message": "Node gpu-01 does not exist in the cluster",
        "fix": "join the node (kubeadm join), or set gpu_doctor_node_name to its Node name",
    }


def test_node_not_in_the_cluster_is_reported_even_when_allocatable_is_skipped():
    assert [f["message"] for f in diagnose({"node": {"resources": []}}, skip=["allocatable"])] == [
        "Node gpu-01 does not exist in the cluster"
    ]


REPLICAS_FIX = (
    "the plugin's time-slicing replicas differ from those expected: set gpu_doctor_replicas "
    "(gpu_validation_replicas) to the plugin's, or apply the sharing settings (role device_plugin) "
    "and restart the plugin"
)
FEWER_FIX = (
    "the plugin marks GPUs Unhealthy (its log says why: XIDs, a GPU or its device node gone; see nvml and "
    "device_nodes) or is not registered (see plugin and services)"
)


def test_fewer_allocatable_because_the_plugin_shares_less_than_expected():
    # Time-slicing with 2 replicas expected; the plugin advertises each GPU once.
    assert only(diagnose({}, {"replicas": 2})) == {
        "check": "allocatable",
        "severity": "fail",
        "message": "allocatable nvidia.com/gpu is 4, expected 8 (4 GPUs found x 2): "
        "the plugin advertises 1 per GPU",
        "fix": REPLICAS_FIX,
    }


def test_more_allocatable_because_the_plugin_shares_more_than_expected():
    replicas = {RESOURCE: ["%s::%d" % (uuid(i), n) for i in range(4) for n in range(4)]}
    observed = {"node_state": state(registered=replicas), "node": node(16)}
    assert only(diagnose(observed)) == {
        "check": "allocatable",
        "severity": "fail",
        "message": "allocatable nvidia.com/gpu is 16, expected 4 (4 GPUs found x 1): "
        "the plugin advertises 4 per GPU",
        "fix": REPLICAS_FIX,
    }
    assert diagnose(observed, {"replicas": 4}) == []


def test_a_gpu_marked_unhealthy_is_named_with_the_unhealthy_count():
    # XIDs on GPU 2: the plugin says Unhealthy; the kubelet keeps it in capacity only.
    observed = {"node_state": state(registered={RESOURCE: [uuid(i) for i in (0, 1, 3)]}), "node": node(3, 4)}
    assert only(diagnose(observed)) == {
        "check": "allocatable",
        "severity": "fail",
        "message": "allocatable nvidia.com/gpu is 3, expected 4 (4 GPUs found x 1): not advertised healthy: "
        "%s (GPU 2); 1 held unhealthy (capacity 4)" % uuid(2),
        "fix": FEWER_FIX,
    }


def test_a_stopped_plugin_leaves_nothing_healthy():
    # The kubelet holds every device unhealthy once the plugin's stream ends (5 minutes).
    observed = {"node_state": state(sockets=(), registered={}), "node": node(0, 4)}
    assert [(f["check"], f["message"]) for f in diagnose(observed)] == [
        (
            "plugin",
            "no device plugin socket in /var/lib/kubelet/device-plugins: the device plugin is not running",
        ),
        (
            "allocatable",
            "allocatable nvidia.com/gpu is 0, expected 4 (4 GPUs found x 1): "
            "the kubelet holds no nvidia.com/gpu device healthy; 4 held unhealthy (capacity 4)",
        ),
    ]


def test_no_allocatable_entry_counts_as_zero():
    observed = node()
    for counts in ("allocatable", "capacity"):
        del observed["resources"][0]["status"][counts][RESOURCE]
    observed = {"node": observed}
    assert only(diagnose(observed)) == {
        "check": "allocatable",
        "severity": "fail",
        "message": "allocatable nvidia.com/gpu is 0, expected 4 (4 GPUs found x 1)",
        "fix": FEWER_FIX,
    }


def test_more_allocatable_where_the_plugin_names_devices_by_index():
    # NVIDIA's DEVICE_ID_STRATEGY=index: nothing to match with NVML's UUIDs, only counts.
    observed = {"node_state": state(registered={RESOURCE: [str(i) for i in range(6)]}), "node": node(6)}
    assert only(diagnose(observed)) == {
        "check": "allocatable",
        "severity": "fail",
        "message": "allocatable nvidia.com/gpu is 6, expected 4 (4 GPUs found x 1): "
        "more devices than NVML's GPUs x replicas",
        "fix": "the plugin's time-slicing replicas may differ from those expected (set gpu_doctor_replicas "
        "or gpu_validation_replicas to the plugin's, or apply the sharing settings with role device_plugin "
        "and restart the plugin), or it offers GPUs NVML no longer lists (restart it)",
    }


def test_allocatable_matching_replicas_is_healthy():
    replicas = {RESOURCE: ["%s::%d" % (uuid(i), n) for i in range(4) for n in range(4)]}
    assert diagnose({"node_state": state(registered=replicas), "node": node(16)}, {"replicas": 4}) == []


def test_labels_not_current_lists_three_keys_per_verb():
    result = {
        "changed": False,
        "nodes": [
            {
                "name": "gpu-01",
                "changed": True,
                "labels_added": ["nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory"],
                "taints_added": ["nvidia.com/gpu=present:NoSchedule"],
                "labels_updated": ["accelerator"],
                "labels_removed": [],
                "taints_removed": [],
            }
        ],
    }
    assert only(diagnose({"labels": result})) == {
        "check": "labels",
        "severity": "warn",
        "message": "GPU labels or taints are not current (to add 4: nvidia.com/gpu.product, "
        "nvidia.com/gpu.count, nvidia.com/gpu.memory, ...; to update 1: accelerator)",
        "fix": "run role gpu_node_labels",
    }


def test_labels_only_removals():
    result = {
        "nodes": [
            {
                "changed": True,
                "labels_added": [],
                "taints_added": [],
                "labels_updated": [],
                "labels_removed": ["nvidia.com/mig.strategy"],
                "taints_removed": ["nvidia.com/gpu=present:NoSchedule"],
            }
        ]
    }
    assert only(diagnose({"labels": result}))["message"] == (
        "GPU labels or taints are not current "
        "(to remove 2: nvidia.com/mig.strategy, nvidia.com/gpu=present:NoSchedule)"
    )


@pytest.mark.parametrize(
    "labels_result",
    [
        {"skipped": True, "changed": False},
        {"changed": False, "failed": False, "msg": "Failed to get client due to HTTPSConnectionPool"},
    ],
    ids=["skipped", "api-error"],
)
def test_labels_not_checked_is_no_finding(labels_result):
    assert diagnose({"labels": labels_result}) == []


def test_dcgm_exporter_without_a_pod_on_the_node():
    assert only(diagnose({"dcgm_pods": {"resources": []}})) == {
        "check": "dcgm_exporter",
        "severity": "warn",
        "message": "dcgm-exporter has no pod on the node",
        "fix": "the node lacks the nvidia.com/gpu.present label or the DaemonSet does not tolerate its taint "
        "(roles gpu_node_labels, cluster_addons)",
    }


@pytest.mark.parametrize(
    "pod",
    [ready_pod("dcgm-exporter-7x2kq", "False"), {"metadata": {"name": "dcgm-exporter-7x2kq"}, "status": {}}],
    ids=["not-ready", "no-conditions"],
)
def test_dcgm_exporter_pod_not_ready(pod):
    assert only(diagnose({"dcgm_pods": {"resources": [pod]}})) == {
        "check": "dcgm_exporter",
        "severity": "warn",
        "message": "dcgm-exporter pod dcgm-exporter-7x2kq is not Ready",
        "fix": "kubectl -n gpuops-system describe pod dcgm-exporter-7x2kq "
        "(image pull, SYS_ADMIN, the pod-resources mount)",
    }


def test_dcgm_exporter_not_checked_without_its_daemonset():
    assert diagnose({"dcgm_ds": {"resources": []}, "dcgm_pods": {"resources": []}}) == []


NOT_READY = {
    "type": "Ready",
    "status": "False",
    "reason": "KubeletNotReady",
    "message": "container runtime is down, PLEG is not healthy: "
    "pleg was last seen active 3m5s ago; threshold is 3m0s",
}


def broken():
    """A node where every check has something to say."""
    return {
        "gpu": gpu_info([0], lost=[{"index": 1, "error": "GPU is lost"}]),
        "node_state": dict(
            state(
                devices=dev_nodes([0], ctl=False),
                systemd=units(
                    **{
                        "containerd.service": unit("inactive", "dead"),
                        "gpuops-runtime-guard.path": unit("failed", "dead", result="resources"),
                    }
                ),
                sockets=(),
                registered={},
                paths={
                    "/usr/bin/nvidia-container-runtime": {
                        "exists": False,
                        "type": "missing",
                        "executable": False,
                    }
                },
            ),
            driver={"loaded": False, "version": None, "majors": {}, "error": None},
        ),
        "runtime_check": {"changed_files": ["/etc/containerd/config.toml"]},
        "runtime_class_info": {"resources": []},
        "kubelet": kubelet(config={}),
        "node": node(0, ready=NOT_READY),
        "labels": {"nodes": [{"changed": True, "labels_added": ["a"]}]},
        "dcgm_pods": {"resources": []},
        "dcgm_ds": {"resources": [{}]},
    }


# Every check but dra, which judges only a node our DRA driver serves (test_doctor_dra.py).
DEVICE_PLUGIN_CHECKS = [check for check in doc.CHECKS if check != "dra"]


def test_findings_come_in_check_order():
    assert [f["check"] for f in doc.diagnose(broken(), SETTINGS)] == DEVICE_PLUGIN_CHECKS


@pytest.mark.parametrize("skipped", DEVICE_PLUGIN_CHECKS)
def test_a_skipped_check_reports_nothing(skipped):
    checks = [f["check"] for f in doc.diagnose(broken(), SETTINGS, [skipped])]
    assert checks == [check for check in DEVICE_PLUGIN_CHECKS if check != skipped]


def test_a_check_runs_only_with_all_its_observations():
    observed = broken()
    del observed["kubelet"]
    del observed["dcgm_pods"]  # dcgm_exporter reads dcgm_ds and dcgm_pods
    checks = [f["check"] for f in doc.diagnose(observed, SETTINGS)]
    assert checks == [check for check in DEVICE_PLUGIN_CHECKS if check not in ("kubelet", "dcgm_exporter")]
    # node_state_info's result is every node-local check's.
    del observed["node_state"]
    checks = [f["check"] for f in doc.diagnose(observed, SETTINGS)]
    assert checks == ["nvml", "runtime", "runtime_class", "node_ready", "labels"]


def test_one_check_alone_needs_only_its_own_settings():
    observed = {"runtime_check": {"changed_files": ["/etc/crio/crio.conf"]}}
    findings = doc.diagnose(observed, {"runtime": "crio", "runtime_name": "nvidia"})
    assert [f["message"] for f in findings] == [
        "the nvidia runtime is missing from (or differs in) /etc/crio/crio.conf"
    ]


def test_a_check_without_its_setting_is_an_error():
    with pytest.raises(
        doc.DoctorInputError, match=r"^the runtime check needs the setting\(s\) runtime_name$"
    ):
        doc.diagnose({"runtime_check": {}}, {"runtime": "crio"})


@pytest.mark.parametrize(
    "observed, settings, skip, unknown",
    [
        ({"runtime": {}}, {}, (), "runtime"),
        ({}, {"runtime_config": ""}, (), "runtime_config"),
        ({}, {}, ("plugins",), "plugins"),
        ({"checkpoint": {}}, {}, (), "checkpoint"),  # node_state's since node_state_info
    ],
)
def test_unknown_names_are_errors(observed, settings, skip, unknown):
    with pytest.raises(doc.DoctorInputError, match="^unknown observation, setting or check: %s$" % unknown):
        doc.diagnose(observed, settings, skip)


def test_inputs_are_not_changed():
    observed, settings = broken(), dict(SETTINGS)
    before = copy.deepcopy((observed, settings))
    doc.diagnose(observed, settings, ["labels"])
    assert (observed, settings) == before


def test_settings_are_the_ones_the_checks_read():
    assert set(doc.SETTINGS) == set(SETTINGS)
