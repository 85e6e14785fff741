# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_validation's use of the doctor's rules (roles/gpu_validation/tasks/main.yml), each
expression taken verbatim from the role and evaluated by the real ansible-playbook with the
roles' defaults and vars: which faults end the wait for allocatable at once, which do not
(a plugin the site run has just restarted), and the node's failing findings.

The registered results are shaped as gpu_info, node_state_info and k8s_info return them
on a lab node (8 mock H100s, our daemon, containerd). Each scenario is a host of one
inventory, so two ansible-playbook runs judge them all (one pair per scenario took most
of this file's 3 minutes in make test).
"""

import pytest
from resolve import find_task, hosts_inventory, resolve, task_arg

RESOURCE = "nvidia.com/gpu"
UUIDS = ["GPU-%08d-0000-0000-0000-000000000000" % i for i in range(8)]
SEVEN = (0, 1, 2, 4, 5, 6, 7)
RECORD_ERROR = (
    "the device plugin's configuration (/etc/gpuops-device-plugin/served.json): "
    "/etc/gpuops-device-plugin/served.json: not valid JSON: Unterminated string starting at: line 1 "
    "column 32 (char 31); the device_plugin role writes this record: run it again on the node to rewrite it"
)


def gpu(minors=range(8)):
    gpus = [{"index": i, "minor_number": m, "uuid": UUIDS[m]} for i, m in enumerate(minors)]
    return {
        "gpu_count": len(gpus),
        "gpus": gpus,
        "lost_gpus": [],
        "nvml": {"available": True},
        "device_plugin": {"mode": "gpuops"},
    }


def char(major, minor):
    return {"type": "char", "major": major, "minor": minor, "link": None}


def node_state(minors=range(8), registered=UUIDS, sockets=("gpuops-gpu.sock",), down=(), uvm=True):
    devices = {"nvidia%d" % m: char(195, m) for m in minors}
    devices["nvidiactl"] = char(195, 255)
    if uvm:
        devices["nvidia-uvm"] = char(510, 0)
    units = {
        name: {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "Result": "success"}
        for name in ("containerd.service", "kubelet.service", "gpuops-device-plugin.service")
    }
    for name in down:
        units[name] = {
            "LoadState": "loaded",
            "ActiveState": "inactive",
            "SubState": "dead",
            "Result": "success",
        }
    return {
        "driver": {"loaded": True, "majors": {}},
        "devices": devices,
        "systemd": {"available": True, "error": None, "units": units},
        "device_plugins": {
            "sockets": list(sockets),
            "checkpoint": {"exists": True, "error": None, "registered": {RESOURCE: list(registered)}},
        },
        "paths": {},
    }


def node(allocatable=8, capacity=8, ready="True", message="kubelet is posting ready status", attempts=1):
    status = {
        "allocatable": {RESOURCE: str(allocatable)},
        "capacity": {RESOURCE: str(capacity)},
        "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletNotReady", "message": message}],
    }
    return {"resources": [{"status": status}], "attempts": attempts}


def expressions():
    settled = task_arg(
        "gpu_validation",
        "main.yml",
        "Find what already fails the node",
        "ansible.builtin.set_fact",
        "gpu_validation_settled",
    )
    read = find_task(
        "gpu_validation",
        "main.yml",
        "Read the Node and what the checks judge, until the node offers the GPUs found",
    )
    findings = task_arg(
        "gpu_validation",
        "main.yml",
        "Compare the node with the GPUs found, as the doctor does",
        "ansible.builtin.set_fact",
        "gpu_validation_findings",
    )
    mode = task_arg(
        "gpu_validation",
        "main.yml",
        "Say whether the node offers its GPUs through DRA or a device plugin",
        "ansible.builtin.set_fact",
        "gpu_validation_mode",
    )
    allocatable = task_arg(
        "gpu_validation",
        "main.yml",
        "Compare the node with the GPUs found, as the doctor does",
        "ansible.builtin.set_fact",
        "gpu_validation_allocatable",
    )
    return {
        "mode": mode,
        "settled": settled,
        # The wait ends where this holds (the reads left aside: one read here).
        "done": "{{ (%s) }}" % read["until"],
        "findings": findings,
        "allocatable": allocatable,
    }


# What the API answers where no DRA driver publishes.
NO_SLICES = {"api_found": True, "resources": []}

# Mode dra: the node's record says so; no device plugin socket, no nvidia.com/gpu in the
# Node's status, and the driver's ResourceSlice offers the GPUs (tainted ones do not count).
DRIVER = "gpu.gpuops.k8s"


def dra_registered(tainted=()):
    devices = []
    for i, uuid in enumerate(UUIDS):
        device = {"name": "gpu-%d" % i, "attributes": {"uuid": {"string": uuid}}}
        if i in tainted:
            device["taints"] = [{"key": DRIVER + "/xid", "value": "79", "effect": "NoSchedule"}]
        devices.append(device)
    spec = {"driver": DRIVER, "nodeName": "gpuops-node-1", "pool": {"name": "gpuops-node-1", "generation": 1}}
    return {
        "gpu_validation_slices": {"api_found": True, "resources": [{"spec": dict(spec, devices=devices)}]},
        "gpu_validation_device_classes": {"api_found": True, "resources": [{"metadata": {"name": DRIVER}}]},
    }


def dra_node():
    result = node()
    status = result["resources"][0]["status"]
    status["allocatable"], status["capacity"] = {"cpu": "16"}, {"cpu": "16"}
    return result


def dra_gpu():
    return dict(gpu(), device_plugin={"mode": "dra"})


def scenarios():
    """{name: (gpu_info's, node_state_info's and k8s_info's Node results, more registered)}."""
    dra_state = node_state(registered=[], sockets=())
    no_class = dra_registered()
    no_class["gpu_validation_device_classes"]["resources"] = []
    return {
        "healthy": (gpu(), node_state(), node(), {}),
        # No socket yet, nothing allocatable: it registers in seconds, so no verdict yet.
        "plugin_restarted": (gpu(), node_state(sockets=(), registered=()), node(0, 0), {}),
        # After a site run restarted containerd, the Node is NotReady for a few seconds.
        "not_ready": (gpu(), node_state(), node(ready="False", message="container runtime is down"), {}),
        "containerd_stopped": (
            gpu(),
            node_state(down=["containerd.service"]),
            node(ready="False", message="container runtime is down, PLEG is not healthy"),
            {},
        ),
        # gpu_info with fail_on_plugin_error false on a node whose record is cut short.
        "record_unreadable": (
            dict(gpu(), labels={}, device_plugin={"mode": None, "error": RECORD_ERROR}),
            node_state(),
            node(),
            {},
        ),
        # (A): NVML lists 7, the plugin still offers 8: 8 never becomes 7 with NVIDIA's plugin.
        "gpu_removed": (gpu(SEVEN), node_state(minors=SEVEN), node(), {}),
        "uvm_missing": (gpu(), node_state(uvm=False), node(), {"gpu_validation_skip": []}),
        "uvm_missing_left_out": (
            gpu(),
            node_state(uvm=False),
            node(),
            {"gpu_validation_skip": ["device_nodes"]},
        ),
        # Waited (3 reads): the socket the first look missed is there now.
        "read_again": (
            gpu(),
            node_state(sockets=(), registered=()),
            node(attempts=3),
            {"gpu_validation_node_state_after": node_state()},
        ),
        "dra": (dra_gpu(), dra_state, dra_node(), dra_registered()),
        "dra_tainted": (dra_gpu(), dra_state, dra_node(), dra_registered(tainted=[3])),
        "dra_no_class": (dra_gpu(), dra_state, dra_node(), no_class),
        # The driver has just started: its slice is not published yet.
        "dra_unpublished": (
            dra_gpu(),
            dra_state,
            dra_node(),
            dict(dra_registered(), gpu_validation_slices=NO_SLICES),
        ),
    }


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    """{scenario: {settled, mode, done, findings, allocatable}}: each scenario a host of one
    inventory (its registered results as host vars), the role's expressions resolved for all
    of them in two runs."""
    tmp_path = tmp_path_factory.mktemp("verdicts")
    hosts = {}
    for name, (gpu_result, state, node_result, extra) in scenarios().items():
        hosts[name] = {
            "gpu_validation_node_name": "gpuops-node-1",
            "gpu_validation_gpu": gpu_result,
            "gpu_validation_node_state": state,
            "gpu_validation_node_state_after": {"skipped": True, "changed": False},
            "gpu_validation_node": node_result,
            # The until's own vars: as many reads as the default wait gives.
            "__gpu_validation_api_reads": 30,
            **extra,
        }
        # The one read the wait judges, as k8s_objects_info returns it (until adds attempts);
        # the role names its parts as above.
        objects = {"node": node_result, "slices": NO_SLICES, "device_classes": NO_SLICES}
        objects.update(
            (key, hosts[name]["gpu_validation_" + key])
            for key in ("slices", "device_classes")
            if "gpu_validation_" + key in hosts[name]
        )
        hosts[name]["gpu_validation_api"] = {"objects": objects, "attempts": node_result["attempts"]}
    exprs = expressions()
    # The wait reads gpu_validation_settled and gpu_validation_mode, which the role sets first.
    first = resolve(
        hosts_inventory(tmp_path, hosts),
        [],
        exprs={"settled": exprs["settled"], "mode": exprs["mode"]},
        tmp_path=tmp_path,
    )
    for name, got in first.items():
        hosts[name].update(gpu_validation_settled=got["settled"], gpu_validation_mode=got["mode"].strip())
    later = {"done": exprs["done"], "findings": exprs["findings"], "allocatable": exprs["allocatable"]}
    found = resolve(hosts_inventory(tmp_path, hosts), [], exprs=later, tmp_path=tmp_path)
    return {
        name: dict(
            got, settled=hosts[name]["gpu_validation_settled"], mode=hosts[name]["gpu_validation_mode"]
        )
        for name, got in found.items()
    }


def checks(findings):
    return [f["check"] for f in findings]


def test_a_healthy_node_ends_the_wait_at_the_first_read_with_no_finding(verdicts):
    got = verdicts["healthy"]
    assert (got["settled"], got["done"], got["findings"]) == ([], True, [])


def test_a_plugin_just_restarted_is_waited_for(verdicts):
    got = verdicts["plugin_restarted"]
    assert got["settled"] == [] and got["done"] is False


def test_a_node_not_ready_for_a_while_is_waited_for(verdicts):
    got = verdicts["not_ready"]
    assert got["done"] is False and checks(got["findings"]) == ["node_ready"]


def test_containerd_stopped_ends_the_wait_with_the_doctors_words(verdicts):
    got = verdicts["containerd_stopped"]
    assert checks(got["settled"]) == ["services"] and got["done"] is True
    assert [f["message"] for f in got["findings"]] == [
        "containerd.service is inactive (dead): the container runtime is down, so no container starts or "
        "stops on the node, and the kubelet reports the Node NotReady",
        "Node gpuops-node-1 is not Ready (Ready=False, KubeletNotReady): container runtime is down, PLEG "
        "is not healthy",
    ]


def test_a_plugin_record_that_cannot_be_read_fails_the_node_at_once_with_its_reason(verdicts):
    got = verdicts["record_unreadable"]
    assert checks(got["settled"]) == ["plugin"] and got["done"] is True
    assert [(f["check"], f["message"]) for f in got["findings"]] == [("plugin", RECORD_ERROR)]


def test_a_removed_gpu_node_ends_the_wait_however_long_allocatable_would_take(verdicts):
    got = verdicts["gpu_removed"]
    assert checks(got["settled"]) == ["allocatable"] and got["done"] is True
    assert checks(got["findings"]) == ["allocatable"]
    assert got["findings"][0]["message"].startswith(
        "the plugin advertises GPUs that NVML no longer lists: " + UUIDS[3]
    )


@pytest.mark.parametrize(
    "scenario, expected", [("uvm_missing", ["device_nodes"]), ("uvm_missing_left_out", [])]
)
def test_a_missing_uvm_node_fails_at_once_unless_the_inventory_leaves_device_nodes_out(
    verdicts, scenario, expected
):
    got = verdicts[scenario]
    assert checks(got["settled"]) == expected and checks(got["findings"]) == expected and got["done"] is True


def test_the_state_read_again_after_a_wait_is_the_one_judged(verdicts):
    assert verdicts["read_again"]["findings"] == []


def test_a_dra_node_whose_slice_offers_every_gpu_passes_with_no_nvidia_gpu_in_its_status(verdicts):
    got = verdicts["dra"]
    assert (got["mode"], got["settled"], got["done"], got["findings"]) == ("dra", [], True, []), got
    assert int(got["allocatable"]) == 8


def test_a_dra_node_with_a_tainted_gpu_fails_in_the_doctors_words(verdicts):
    got = verdicts["dra_tainted"]
    assert checks(got["findings"]) == ["allocatable"], got
    assert got["findings"][0]["message"].startswith(
        "the ResourceSlice of gpu.gpuops.k8s for node gpuops-node-1 offers 7 of the 8 GPUs NVML lists "
        "untainted"
    )
    assert int(got["allocatable"]) == 7


def test_a_dra_node_is_waited_for_until_its_slice_offers_every_gpu_untainted(verdicts):
    # Ready with nothing of nvidia.com/gpu in its status, as a DRA node always is: what ends
    # the wait is the slice, published a few seconds after the driver's start.
    assert verdicts["dra_unpublished"]["done"] is False, verdicts["dra_unpublished"]
    assert verdicts["dra_tainted"]["done"] is False, verdicts["dra_tainted"]


def test_a_dra_node_without_its_device_class_fails(verdicts):
    assert checks(verdicts["dra_no_class"]["findings"]) == ["dra"], verdicts["dra_no_class"]


# Per recorded mode: the driver, and the doctor's class for nvidia.com/gpu pods.
RECORDED_DRIVERS = {
    "dra": ("gpu.gpuops.k8s", "nvidia-gpu.gpu.gpuops.k8s"),
    "nvidia_dra": ("gpu.nvidia.com", "gpu.nvidia.com"),
    "gpuops": ("gpu.gpuops.k8s", "nvidia-gpu.gpu.gpuops.k8s"),
}
# What both roles derive from the record.
PER_DRIVER = ("dra_mode", "driver", "dra_socket", "dra_class")


def test_both_roles_judge_the_driver_the_node_records(tmp_path):
    # The record of device_plugin_mode nvidia_dra names NVIDIA's driver (its registration
    # socket and its class of whole GPUs, which also serves nvidia.com/gpu pods); any other
    # record, ours. One host per record, in one run.
    hosts = {}
    for mode in RECORDED_DRIVERS:
        record = dict(gpu(), device_plugin={"mode": mode})
        hosts["node-" + mode] = {"gpu_validation_gpu": record, "gpu_doctor_gpu": record}
    names = ["__gpu_%s_%s" % (role, name) for role in ("validation", "doctor") for name in PER_DRIVER]
    found = resolve(
        hosts_inventory(tmp_path, hosts), [*names, "__gpu_doctor_dra_extended_class"], tmp_path=tmp_path
    )
    for mode, (driver, extended_class) in RECORDED_DRIVERS.items():
        got = found["node-" + mode]
        socket = "/var/lib/kubelet/plugins_registry/%s-reg.sock" % driver
        expected = ["nvidia_dra" if mode == "nvidia_dra" else "dra", driver, socket, driver]
        assert [got[name] for name in names] == expected * 2, (mode, got)
        assert got["__gpu_doctor_dra_extended_class"] == extended_class, (mode, got)
