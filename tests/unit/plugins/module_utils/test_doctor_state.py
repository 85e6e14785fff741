# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The doctor's rules on the node's state (gpuops.k8s.node_state_info) and whether each part
runs: device_nodes against NVML's minors, services, node_ready, and the allocatable check's
comparison of what the plugin advertises with what NVML lists; then the lab's faults, each
as the observations the role registers on the faulted node (issue 34's (A) to (D)).
Messages and fixes are asserted in full, as in test_doctor.py.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _doctor as doc
from ansible_collections.gpuops.k8s.tests.unit.plugins.module_utils.doctor_observations import (
    RESOURCE,
    SETTINGS,
    char,
    dev_nodes,
    gpu_info,
    healthy,
    node,
    state,
    unit,
    units,
    uuid,
)

EIGHT = range(8)
# NVIDIA's mock NVML lists a GPU only while its /dev/nvidia<minor> exists: without
# /dev/nvidia3 a fresh NVML lists 7, renumbered 0-6, minors 0-2 and 4-7.
SEVEN = (0, 1, 2, 4, 5, 6, 7)


def lab_state(**changes):
    """node_state_info's result on a healthy lab node, but for changes (state()'s arguments)."""
    return state(
        **dict({"devices": dev_nodes(EIGHT), "registered": {RESOURCE: [uuid(m) for m in EIGHT]}}, **changes)
    )


def lab_node(**changes):
    """A healthy lab node (8 H100s, our daemon, containerd), but for changes."""
    observed = dict(healthy(), gpu=gpu_info(EIGHT), node_state=lab_state(), node=node(8))
    observed.update(changes)
    return observed


def findings(observed, settings=None, **kw):
    return doc.diagnose(observed, dict(SETTINGS, **(settings or {})), **kw)


def said(observed, settings=None):
    """(check, severity, message) of each finding."""
    return [(f["check"], f["severity"], f["message"]) for f in findings(observed, settings)]


def test_the_lab_node_is_healthy():
    assert findings(lab_node()) == []


# --- device_nodes -------------------------------------------------------------------------

RECREATE_3 = (
    "recreate it as root (nvidia-modprobe -c 3 makes /dev/nvidia3, char 195:3), then make sure the device "
    "plugin lists the GPU again (restart it if not); find what removed it (a udev rule, a script "
    "cleaning /dev)"
)


def test_an_nvml_gpu_without_its_node_fails_naming_gpu_minor_and_fix():
    # A real driver: NVML still lists GPU 3 when its node is gone.
    devices = dev_nodes(SEVEN)
    observed = lab_node(
        node_state=lab_state(devices=devices, registered={RESOURCE: [uuid(m) for m in EIGHT]})
    )
    found = findings(observed, only=["device_nodes"])
    assert found == [
        {
            "check": "device_nodes",
            "severity": "fail",
            "message": "GPU 3 (%s) has no device node /dev/nvidia3: no container can open it" % uuid(3),
            "fix": RECREATE_3,
        }
    ]


@pytest.mark.parametrize(
    "entry, what",
    [
        ({"type": "file", "major": None, "minor": None, "link": None}, "a file"),
        (char(195, 4), "a char device 195:4"),
        (char(1, 3), "a char device 1:3"),
        ({"type": "block", "major": 195, "minor": 3, "link": None}, "a block device 195:3"),
    ],
)
def test_a_gpu_node_that_is_not_its_device(entry, what):
    devices = dict(dev_nodes(EIGHT), nvidia3=entry)
    found = findings(lab_node(node_state=lab_state(devices=devices)), only=["device_nodes"])
    assert found == [
        {
            "check": "device_nodes",
            "severity": "fail",
            "message": "/dev/nvidia3 is %s, not GPU 3 (%s)'s device node (char 195:3)" % (what, uuid(3)),
            "fix": "remove it, then " + RECREATE_3,
        }
    ]


CTL_FIX = (
    "recreate it as root: nvidia-modprobe -c 255, or nvidia-ctk system create-device-nodes "
    "--control-devices (NVIDIA Container Toolkit); find what removed it"
)
UVM_FIX = (
    "as root: nvidia-modprobe -u -c=0 (loads nvidia-uvm and creates /dev/nvidia-uvm and "
    "/dev/nvidia-uvm-tools), or modprobe nvidia-uvm then nvidia-ctk system create-device-nodes "
    "--control-devices; then restart the device plugin so that new containers get it"
)


def test_each_missing_control_node_is_a_finding_with_its_fix():
    devices = dev_nodes(EIGHT, ctl=False, uvm=False)
    assert findings(lab_node(node_state=lab_state(devices=devices)), only=["device_nodes"]) == [
        {
            "check": "device_nodes",
            "severity": "fail",
            "message": "/dev/nvidiactl is missing: NVML and CUDA open the driver through it, so no "
            "process or "
            "container can use a GPU",
            "fix": CTL_FIX,
        },
        {
            "check": "device_nodes",
            "severity": "fail",
            "message": "/dev/nvidia-uvm is missing: CUDA needs it (unified memory), and the device "
            "plugin passes "
            "it to containers only where it exists",
            "fix": UVM_FIX,
        },
    ]


def test_a_uvm_node_with_another_major_than_the_loaded_module():
    # nvidia-uvm's major is chosen when it loads; a node left from an earlier load is stale.
    observed = lab_node(node_state=lab_state(devices=dict(dev_nodes(EIGHT), **{"nvidia-uvm": char(509, 0)})))
    assert said(observed) == [
        (
            "device_nodes",
            "fail",
            "/dev/nvidia-uvm is a char device 509:0, not the driver's (char 510:0): CUDA needs it (unified "
            "memory), and the device plugin passes it to containers only where it exists",
        )
    ]
    # Without the module's major (a container sees the host's /proc/devices), any major is its.
    unknown = lab_state(devices=dict(dev_nodes(EIGHT), **{"nvidia-uvm": char(509, 0)}))
    unknown["driver"]["majors"] = {}
    assert findings(lab_node(node_state=unknown)) == []


def test_a_hole_among_the_gpu_nodes_is_a_warning_naming_it():
    # NVML and the plugin agree on 7 GPUs: nothing says a GPU is gone, but its node is.
    observed = lab_node(
        gpu=gpu_info(SEVEN),
        node_state=lab_state(devices=dev_nodes(SEVEN), registered={RESOURCE: [uuid(m) for m in SEVEN]}),
        node=node(7),
    )
    assert findings(observed) == [
        {
            "check": "device_nodes",
            "severity": "warn",
            "message": "/dev/nvidia3 is missing among /dev/nvidia0-7: probably the device node of a GPU, "
            "which "
            "NVML then leaves out or cannot open",
            "fix": "recreate it as root (nvidia-modprobe -c 3), then look again: the GPU is listed once "
            "its node "
            "is back; find what removed it (a udev rule, a script cleaning /dev)",
        }
    ]


def test_holes_are_named_together():
    observed = lab_node(node_state=lab_state(devices=dev_nodes((0, 2, 5))), gpu=gpu_info((0, 2, 5)))
    messages = [f["message"] for f in findings(observed, only=["device_nodes"])]
    assert messages == [
        "/dev/nvidia1, /dev/nvidia3, /dev/nvidia4 are missing among /dev/nvidia0-5: probably the device node "
        "of a GPU, which NVML then leaves out or cannot open"
    ]


def test_device_nodes_not_read_is_no_finding():
    assert findings({"gpu": gpu_info(), "node_state": {"skipped": True}}) == []


# --- services -----------------------------------------------------------------------------


def test_a_crash_looping_kubelet_fails_with_its_exit_and_restarts():
    crashing = unit("activating", "auto-restart", result="exit-code", ExecMainCode="1", ExecMainStatus="1")
    crashing["NRestarts"] = "12"
    observed = lab_node(node_state=lab_state(systemd=units(**{"kubelet.service": crashing})))
    assert findings(observed, only=["services"]) == [
        {
            "check": "services",
            "severity": "fail",
            "message": "kubelet.service is activating (auto-restart), result exit-code, exit status 1, "
            "restarted "
            "12 times: the kubelet is down, so nothing runs the node's pods, device plugins cannot register, "
            "and the Node goes NotReady",
            "fix": "journalctl -u kubelet says why it keeps exiting; fix that, and systemd starts it again",
        }
    ]


def test_a_daemon_killed_by_a_signal_says_so():
    killed = unit("failed", "failed", result="signal", ExecMainCode="2", ExecMainStatus="9")
    observed = lab_node(node_state=lab_state(systemd=units(**{"gpuops-device-plugin.service": killed})))
    assert said(observed)[0] == (
        "services",
        "fail",
        "gpuops-device-plugin.service is failed (failed), result signal, killed by signal 9: the device "
        "plugin "
        "is down, so the kubelet holds the node's GPUs unhealthy and gives them to no new pod",
    )


def test_a_masked_runtime_must_be_unmasked():
    masked = unit("inactive", "dead", load="masked")
    observed = lab_node(node_state=lab_state(systemd=units(**{"containerd.service": masked})))
    found = findings(observed, only=["services"])
    assert [f["message"] for f in found] == [
        "containerd.service is masked, inactive (dead): the container runtime is down, so no container "
        "starts "
        "or stops on the node, and the kubelet reports the Node NotReady"
    ]
    assert found[0]["fix"] == (
        "unmask it (systemctl unmask containerd), then start it; journalctl -u containerd says why it stopped"
    )


def test_a_unit_starting_is_a_warning():
    starting = unit("activating", "start")
    observed = lab_node(node_state=lab_state(systemd=units(**{"containerd.service": starting})))
    assert findings(observed) == [
        {
            "check": "services",
            "severity": "warn",
            "message": "containerd.service (the container runtime) is starting: activating (start)",
            "fix": "look again in a few seconds; if it stays there, systemctl status containerd and "
            "journalctl -u containerd say what it waits for",
        }
    ]


def test_our_plugin_not_installed_where_the_record_says_it_serves():
    observed = lab_node(
        node_state=lab_state(
            systemd=units(**{"gpuops-device-plugin.service": unit("inactive", "dead", "not-found")})
        )
    )
    assert findings(observed, only=["services"]) == [
        {
            "check": "services",
            "severity": "fail",
            "message": "gpuops-device-plugin.service is not installed, though the node's device plugin "
            "is ours "
            "(mode gpuops): the kubelet holds the node's GPUs unhealthy and gives them to no new pod",
            "fix": "run role device_plugin (device_plugin_mode gpuops)",
        }
    ]


@pytest.mark.parametrize(
    "mode, status, judged",
    [
        ("nvidia", unit("inactive", "dead"), False),  # NVIDIA's DaemonSet serves: the unit is not the plugin
        ("operator", unit("failed", "failed", result="exit-code"), False),
        (None, unit("inactive", "dead", "not-found"), False),  # no record, no unit: nothing to say
        (None, unit("inactive", "dead"), True),  # no record, but our unit installed and stopped
    ],
)
def test_our_plugins_unit_is_judged_where_it_is_the_plugin(mode, status, judged):
    observed = lab_node(
        gpu=gpu_info(EIGHT, mode=mode),
        node_state=lab_state(
            devices=dev_nodes(EIGHT),
            registered={RESOURCE: [uuid(m) for m in EIGHT]},
            systemd=units(**{"gpuops-device-plugin.service": status}),
        ),
    )
    assert [f["check"] for f in findings(observed)] == (["services"] if judged else [])


@pytest.mark.parametrize(
    "systemd",
    [
        {
            "available": False,
            "error": "systemd is not the init system here (no /run/systemd/system)",
            "units": {},
        },
        units(**{"containerd.service": unit("inactive", "dead", "not-found")}),  # k3s: its own containerd
        units(**{"kubelet.service": unit("inactive", "dead", "not-found")}),  # a kubelet under another name
        {"available": True, "error": None, "units": {}},  # not asked
    ],
    ids=["no-systemd", "runtime-not-a-unit", "kubelet-not-a-unit", "not-asked"],
)
def test_what_cannot_be_judged_by_its_unit_is_no_finding(systemd):
    assert findings(lab_node(node_state=lab_state(systemd=systemd)), only=["services"]) == []


def test_the_units_are_the_ones_the_settings_name():
    observed = lab_node(node_state=lab_state(systemd=units(**{"crio.service": unit("failed", "failed")})))
    assert findings(observed, {"runtime_service": "crio"}, only=["services"])[0]["message"].startswith(
        "crio.service is failed (failed): the container runtime is down"
    )
    assert findings(observed, only=["services"]) == []


# --- node_ready ---------------------------------------------------------------------------


def not_ready(status, reason, message):
    return node(8, ready={"type": "Ready", "status": status, "reason": reason, "message": message})


def test_a_kubelet_that_stopped_posting_is_unknown():
    observed = lab_node(
        node=not_ready("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    )
    assert findings(observed) == [
        {
            "check": "node_ready",
            "severity": "fail",
            "message": "Node gpu-01 is not Ready (Ready=Unknown, NodeStatusUnknown): Kubelet stopped posting "
            "node status.",
            "fix": "the kubelet stopped reporting the node's status: it is down or cannot reach the API "
            "server "
            "(systemctl status kubelet, journalctl -u kubelet; see services)",
        }
    ]


@pytest.mark.parametrize(
    "message, fix",
    [
        (
            "PLEG is not healthy: pleg was last seen active 3m5s ago; threshold is 3m0s",
            "the kubelet's pod lifecycle events stall, usually on a container runtime that hangs: "
            "journalctl -u containerd and journalctl -u kubelet",
        ),
        (
            "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
            "message:Network "
            "plugin returns error: cni plugin not initialized",
            "the pod network is not ready: the CNI plugin's pod on the node, and /etc/cni/net.d",
        ),
        (
            "something new",
            "journalctl -u kubelet on the node says why; kubectl describe node gpu-01 shows every condition",
        ),
    ],
    ids=["pleg", "network", "other"],
)
def test_each_not_ready_cause_has_its_fix(message, fix):
    found = findings(lab_node(node=not_ready("False", "KubeletNotReady", message)))
    assert found == [
        {
            "check": "node_ready",
            "severity": "fail",
            "message": "Node gpu-01 is not Ready (Ready=False, KubeletNotReady): " + message,
            "fix": fix,
        }
    ]


def test_a_missing_node_is_not_also_not_ready():
    assert said(lab_node(node={"resources": []})) == [
        ("allocatable", "fail", "Node gpu-01 does not exist in the cluster")
    ]


# --- the faults the lab plants (issue 34) ---------------------------------------------------

OFFERED_FIX = (
    "NVML leaves out a GPU whose device node is gone (see device_nodes) or that fell off the bus: recreate "
    "the node (nvidia-modprobe -c <minor>), or drain the node and reset or replace the GPU. Pods given it "
    "fail meanwhile: restart a plugin that keeps offering it (systemctl restart gpuops-device-plugin, or "
    "delete NVIDIA's plugin pod on the node)"
)
HELD_FIX = (
    "NVML leaves out a GPU whose device node is gone (see device_nodes) or that fell off the bus: recreate "
    "the node (nvidia-modprobe -c <minor>), or drain the node and reset or replace the GPU. The kubelet "
    "keeps it in capacity, unhealthy, until the plugin stops listing it"
)
HOLE_3 = (
    "device_nodes",
    "warn",
    "/dev/nvidia3 is missing among /dev/nvidia0-7: probably the device node of a GPU, which NVML then leaves "
    "out or cannot open",
)


def test_fault_a_node_removed_while_the_plugin_still_offers_its_gpu():
    # (A), first: rm /dev/nvidia3. NVML lists 7; the plugin, started earlier, still has 8
    # registered healthy; the Node says 8 allocatable. Not "stale sharing settings".
    observed = lab_node(
        gpu=gpu_info(SEVEN),
        node_state=lab_state(devices=dev_nodes(SEVEN), registered={RESOURCE: [uuid(m) for m in EIGHT]}),
        node=node(8),
    )
    found = findings(observed)
    assert [(f["check"], f["severity"], f["message"]) for f in found] == [
        HOLE_3,
        (
            "allocatable",
            "fail",
            "the plugin advertises GPUs that NVML no longer lists: %s, held healthy by the kubelet "
            "(8 nvidia.com/gpu devices registered, NVML lists 7 GPUs); /dev/nvidia3 is missing "
            "(see device_nodes)" % uuid(3),
        ),
    ]
    assert found[1]["fix"] == OFFERED_FIX


def test_fault_a_node_removed_and_the_plugin_holding_its_gpu_unhealthy():
    # (A), once the daemon re-probed: the GPU is Unhealthy, so the checkpoint lists 7 and
    # allocatable is 7 (= 7 found); capacity stays 8.
    observed = lab_node(
        gpu=gpu_info(SEVEN),
        node_state=lab_state(devices=dev_nodes(SEVEN), registered={RESOURCE: [uuid(m) for m in SEVEN]}),
        node=node(7, capacity=8),
    )
    found = findings(observed)
    assert [(f["check"], f["severity"], f["message"]) for f in found] == [
        HOLE_3,
        (
            "allocatable",
            "fail",
            "the plugin advertises GPUs that NVML no longer lists: capacity nvidia.com/gpu is 8, NVML "
            "lists 7 "
            "GPUs x 1; the kubelet holds the 1 more unhealthy (allocatable 7); /dev/nvidia3 is missing "
            "(see device_nodes)",
        ),
    ]
    assert found[1]["fix"] == HELD_FIX


def test_fault_a_on_a_real_driver_that_still_lists_the_gpu():
    # NVML lists all 8; the daemon holds GPU 3 unhealthy (its node is gone).
    observed = lab_node(
        node_state=lab_state(devices=dev_nodes(SEVEN), registered={RESOURCE: [uuid(m) for m in SEVEN]}),
        node=node(7, capacity=8),
    )
    assert said(observed) == [
        (
            "device_nodes",
            "fail",
            "GPU 3 (%s) has no device node /dev/nvidia3: no container can open it" % uuid(3),
        ),
        (
            "allocatable",
            "fail",
            "allocatable nvidia.com/gpu is 7, expected 8 (8 GPUs found x 1): not advertised healthy: %s "
            "(GPU 3); "
            "1 held unhealthy (capacity 8); /dev/nvidia3 is missing (see device_nodes)" % uuid(3),
        ),
    ]


def test_fault_b_control_nodes_removed():
    # (B): rm /dev/nvidia-uvm /dev/nvidiactl. The mock's GPUs do not need them; containers do.
    observed = lab_node(node_state=lab_state(devices=dev_nodes(EIGHT, ctl=False, uvm=False)))
    assert [
        (f["check"], f["severity"], f["message"].split(":")[0], f["fix"]) for f in findings(observed)
    ] == [
        ("device_nodes", "fail", "/dev/nvidiactl is missing", CTL_FIX),
        ("device_nodes", "fail", "/dev/nvidia-uvm is missing", UVM_FIX),
    ]


def test_fault_c_the_plugin_offers_a_gpu_nvml_no_longer_lists():
    # (C): NVML no longer lists GPU 5 (off the bus), its node still there; the plugin offers 8.
    listed = (0, 1, 2, 3, 4, 6, 7)
    observed = lab_node(gpu=gpu_info(listed), node_state=lab_state(), node=node(8))
    found = findings(observed)
    assert found == [
        {
            "check": "allocatable",
            "severity": "fail",
            "message": "the plugin advertises GPUs that NVML no longer lists: %s, held healthy by the "
            "kubelet "
            "(8 nvidia.com/gpu devices registered, NVML lists 7 GPUs)" % uuid(5),
            "fix": OFFERED_FIX,
        }
    ]
    # The same finding where the Node was not read: validation's first look, node-local only.
    node_local = {name: observed[name] for name in ("gpu", "node_state")}
    assert findings(node_local, only=["allocatable"]) == found


def test_fault_c_with_time_sliced_replicas_names_the_gpu_once():
    registered = {RESOURCE: ["%s::%d" % (uuid(m), n) for m in EIGHT for n in range(2)]}
    observed = lab_node(
        gpu=gpu_info(SEVEN), node_state=state(devices=dev_nodes(EIGHT), registered=registered), node=node(16)
    )
    assert said(observed, {"replicas": 2}) == [
        (
            "allocatable",
            "fail",
            "the plugin advertises GPUs that NVML no longer lists: %s, held healthy by the kubelet "
            "(16 nvidia.com/gpu devices registered, NVML lists 7 GPUs)" % uuid(3),
        )
    ]


def test_fault_d_containerd_stopped():
    # (D): systemctl stop containerd. The kubelet reports the Node NotReady; the plugin,
    # a systemd service, still runs and the GPUs stay allocatable.
    observed = lab_node(
        node_state=lab_state(
            devices=dev_nodes(EIGHT),
            registered={RESOURCE: [uuid(m) for m in EIGHT]},
            systemd=units(**{"containerd.service": unit("inactive", "dead")}),
        ),
        node=not_ready(
            "False",
            "KubeletNotReady",
            "container runtime is down, PLEG is not healthy: pleg was last seen active 3m0.9s ago; "
            "threshold is "
            "3m0s",
        ),
    )
    assert findings(observed) == [
        {
            "check": "services",
            "severity": "fail",
            "message": "containerd.service is inactive (dead): the container runtime is down, so no "
            "container "
            "starts or stops on the node, and the kubelet reports the Node NotReady",
            "fix": "journalctl -u containerd says why it stopped (systemctl status containerd); start it: "
            "systemctl start containerd",
        },
        {
            "check": "node_ready",
            "severity": "fail",
            "message": "Node gpu-01 is not Ready (Ready=False, KubeletNotReady): container runtime is "
            "down, PLEG "
            "is not healthy: pleg was last seen active 3m0.9s ago; threshold is 3m0s",
            "fix": "the kubelet cannot reach the container runtime: start containerd (systemctl status "
            "containerd, "
            "journalctl -u containerd; see services); the Node turns Ready once the runtime answers",
        },
    ]


def test_fault_d_before_the_kubelet_reports_it():
    # The Node still says Ready for up to the kubelet's status period: the unit says it first.
    observed = lab_node(
        node_state=lab_state(systemd=units(**{"containerd.service": unit("inactive", "dead")}))
    )
    assert [f["check"] for f in findings(observed)] == ["services"]


def test_a_stopped_plugin_names_its_unit_its_socket_and_the_count():
    observed = lab_node(
        node_state=lab_state(
            devices=dev_nodes(EIGHT),
            sockets=(),
            registered={},
            systemd=units(**{"gpuops-device-plugin.service": unit("inactive", "dead")}),
        ),
        node=node(0, capacity=8),
    )
    assert said(observed) == [
        (
            "services",
            "fail",
            "gpuops-device-plugin.service is inactive (dead): the device plugin is down, so the kubelet "
            "holds the "
            "node's GPUs unhealthy and gives them to no new pod",
        ),
        (
            "plugin",
            "fail",
            "no device plugin socket in /var/lib/kubelet/device-plugins: the device plugin is not running",
        ),
        (
            "allocatable",
            "fail",
            "allocatable nvidia.com/gpu is 0, expected 8 (8 GPUs found x 1): the kubelet holds no "
            "nvidia.com/gpu "
            "device healthy; 8 held unhealthy (capacity 8)",
        ),
    ]


def test_a_stopped_plugin_with_the_checkpoint_the_kubelet_has_not_rewritten():
    # The kubelet marks a disconnected plugin's devices unhealthy without writing its
    # checkpoint (it does on the next device update, allocation, or when the resource goes):
    # the checkpoint still lists all 8, so the count alone says what is held unhealthy.
    observed = lab_node(
        node_state=lab_state(
            sockets=(), systemd=units(**{"gpuops-device-plugin.service": unit("inactive", "dead")})
        ),
        node=node(0, capacity=8),
    )
    assert [f["message"] for f in findings(observed, only=["allocatable"])] == [
        "allocatable nvidia.com/gpu is 0, expected 8 (8 GPUs found x 1): 8 held unhealthy (capacity 8)"
    ]
