# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_validation's verdict for one node (roles/gpu_validation/templates/result.json.j2),
rendered by the real ansible-playbook from what the role's tasks register: the failures
that the counts alone would miss or leave unexplained."""

import json

from resolve import resolve, template_expr

LOST = {"index": 3, "error": "GPU is lost", "nvml_code": 15}


def node_result(tmp_path, *, lost=(), container_state=None, log="", warnings=(), findings=None):
    """The node's result: 8 GPUs less the LOST ones found and allocatable, and a test pod
    (the CUDA sample's default check) in CONTAINER_STATE with LOG and the kubelet's
    WARNINGS on it; FINDINGS, where given, the doctor's failing ones (tasks/main.yml)."""
    found = 8 - len(lost)
    state = container_state or {"terminated": {"exitCode": 0, "reason": "Completed"}}
    ended = state.get("terminated")
    phase = "Pending" if not ended else "Succeeded" if ended["exitCode"] == 0 else "Failed"
    extra = {
        "gpu_validation_gpu": {
            "gpu_count": found,
            "lost_gpus": list(lost),
            "nvml": {"available": True},
        },
        "gpu_validation_found": found,
        "gpu_validation_expected": found,
        "gpu_validation_allocatable": found,
        "gpu_validation_pod": {
            "resources": [{"status": {"phase": phase, "containerStatuses": [{"state": state}]}}]
        },
        "gpu_validation_log": {"log": log},
        "gpu_validation_pod_warnings": {"resources": list(warnings)},
        "gpu_validation_compare_devices": "off",
    }
    if findings is not None:
        extra["gpu_validation_findings"] = list(findings)
        del extra["gpu_validation_pod"]  # a node that fails the doctor's checks runs no test pod
    exprs = {"result": template_expr("gpu_validation", "result.json.j2")}
    rendered = resolve("gpuops-node-1,", [], exprs=exprs, extra=extra, tmp_path=tmp_path)
    result = rendered["gpuops-node-1"]["result"]
    return result if isinstance(result, dict) else json.loads(result)


def test_a_healthy_node_passes(tmp_path):
    result = node_result(tmp_path, log="Test PASSED\n")
    assert result["passed"] and result["reasons"] == [], result


def test_a_lost_gpu_fails_the_node_though_allocatable_equals_the_gpus_left(tmp_path):
    # The plugin stops advertising a lost GPU and gpu_info leaves it out: 7 = 7, and the
    # test pod gets a healthy GPU. Only gpu_info's lost_gpus tells.
    result = node_result(tmp_path, lost=[LOST], log="Test PASSED\n")
    assert not result["passed"], result
    assert result["reasons"] == [
        "GPU 3 does not answer NVML (GPU is lost): lost or fallen off the bus; drain the node, "
        "then reset or replace it"
    ], result


# containerd's error when the runtime a RuntimeClass names is not on the node.
NO_RUNTIME = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    "fork/exec /usr/bin/nvidia-container-runtime: no such file or directory: unknown"
)


def test_a_container_the_runtime_could_not_start_names_the_runtimes_error(tmp_path):
    # nvidia not the default runtime: the sandbox starts on runc, the container fails.
    state = {"terminated": {"exitCode": 128, "reason": "StartError", "message": NO_RUNTIME}}
    result = node_result(tmp_path, container_state=state)
    assert not result["passed"], result
    assert result["reasons"] == ["test pod failed with exit code 128 (StartError: %s)" % NO_RUNTIME], result


def test_a_pod_that_never_starts_names_the_kubelets_newest_warning(tmp_path):
    # nvidia the default runtime: not even the sandbox starts, and the pod stays Pending.
    def warning(created, message):
        return {
            "metadata": {"creationTimestamp": created},
            "reason": "FailedCreatePodSandBox",
            "message": message,
        }

    warnings = [
        warning("2026-11-25T10:00:09Z", "Failed: " + NO_RUNTIME),
        warning("2026-11-25T10:00:01Z", "older"),
    ]
    state = {"waiting": {"reason": "ContainerCreating"}}
    result = node_result(tmp_path, container_state=state, warnings=warnings)
    assert result["reasons"] == [
        "test pod did not finish within 300 s (phase Pending, ContainerCreating): "
        "FailedCreatePodSandBox: Failed: " + NO_RUNTIME
    ], result


def test_a_test_that_fails_in_its_container_shows_its_log(tmp_path):
    state = {"terminated": {"exitCode": 1, "reason": "Error"}}
    result = node_result(tmp_path, container_state=state, log="NVML: Driver Not Loaded\n")
    assert result["reasons"] == ["test pod failed with exit code 1: NVML: Driver Not Loaded"], result


def test_the_doctors_failing_findings_are_the_reasons_in_its_words(tmp_path):
    findings = [
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
            "message": "Node gpuops-node-1 is not Ready (Ready=False, KubeletNotReady): container "
            "runtime is down",
            "fix": "start containerd",
        },
    ]
    result = node_result(tmp_path, findings=findings)
    assert not result["passed"], result
    assert result["reasons"] == [finding["message"] for finding in findings], result
    assert result["pod"] == {"ran": False}, result


def test_a_lost_gpu_is_said_beside_the_doctors_findings(tmp_path):
    unlisted = {
        "check": "allocatable",
        "severity": "fail",
        "message": "the plugin advertises ...",
        "fix": "x",
    }
    result = node_result(tmp_path, lost=[LOST], findings=[unlisted])
    assert result["reasons"] == [
        "GPU 3 does not answer NVML (GPU is lost): lost or fallen off the bus; drain the node, "
        "then reset or replace it",
        "the plugin advertises ...",
    ], result


# Mode dra: the test pod claims a GPU with a ResourceClaimTemplate; the claim's allocated
# device's uuid attribute in the driver's slice is compared with the UUID the pod printed.
DRIVER = "gpu.gpuops.k8s"


def gpu_uuid(index):
    return "GPU-%08d-1111-2222-3333-444444444444" % index


def finished_on_eight_gpus(printed):
    """A node with 8 GPUs, all allocatable, whose test pod succeeded printing PRINTED."""
    return {
        "gpu_validation_gpu": {
            "gpu_count": 8,
            "lost_gpus": [],
            "nvml": {"available": True},
        },
        "gpu_validation_found": 8,
        "gpu_validation_expected": 8,
        "gpu_validation_allocatable": 8,
        "gpu_validation_pod": {
            "resources": [
                {
                    "metadata": {"name": "gpuops-validate-gpuops-node-1"},
                    "status": {
                        "phase": "Succeeded",
                        "containerStatuses": [{"state": {"terminated": {"exitCode": 0}}}],
                    },
                }
            ]
        },
        "gpu_validation_log": {"log": "%s\nTest PASSED\n" % printed},
    }


def dra_result(tmp_path, *, printed, allocated, claim_read=True):
    """A node in mode dra whose test pod printed PRINTED and whose claim was allocated gpu-ALLOCATED."""
    devices = [{"name": "gpu-%d" % i, "attributes": {"uuid": {"string": gpu_uuid(i)}}} for i in range(8)]
    slices = {
        "api_found": True,
        "resources": [
            {
                "spec": {
                    "driver": DRIVER,
                    "nodeName": "gpuops-node-1",
                    "pool": {"name": "gpuops-node-1", "generation": 1},
                    "devices": devices,
                }
            }
        ],
    }
    allocation = {"devices": {"results": [{"driver": DRIVER, "pool": "gpuops-node-1", "device": allocated}]}}
    claim = {"resources": [{"status": {"allocation": allocation}}] if claim_read else []}
    running = {"resources": [{"status": {"phase": "Running"}}]}
    extra = {
        "gpu_validation_mode": "dra",
        "gpu_validation_dra_driver": DRIVER,
        "gpu_validation_pod_started": running,
        **finished_on_eight_gpus(printed),
        "gpu_validation_claim": claim,
        "gpu_validation_slices": slices,
        "gpu_validation_compare_devices": "auto",
    }
    exprs = {"result": template_expr("gpu_validation", "result.json.j2")}
    rendered = resolve("gpuops-node-1,", [], exprs=exprs, extra=extra, tmp_path=tmp_path)
    result = rendered["gpuops-node-1"]["result"]
    return result if isinstance(result, dict) else json.loads(result)


def test_dra_the_claimed_gpu_is_the_one_the_pod_saw(tmp_path):
    result = dra_result(tmp_path, printed=gpu_uuid(5), allocated="gpu-5")
    assert result["passed"], result
    assert result["pod"]["devices"] == {
        "result": "match",
        "seen": [gpu_uuid(5)],
        "assigned": [gpu_uuid(5)],
    }
    assert (result["mode"], result["driver"], result["allocatable"]) == (
        "dra",
        DRIVER,
        8,
    ), result


def test_dra_a_pod_that_saw_another_gpu_than_its_claims_fails_the_node(tmp_path):
    result = dra_result(tmp_path, printed=gpu_uuid(5), allocated="gpu-2")
    assert not result["passed"], result
    assert result["reasons"] == [
        "test pod default/gpuops-validate-gpuops-node-1 saw GPUs %s through NVML, but its ResourceClaim was "
        "allocated %s (the uuid of its device in the gpu.gpuops.k8s ResourceSlice): not allocated %s: not "
        "seen %s" % (gpu_uuid(5), gpu_uuid(2), gpu_uuid(5), gpu_uuid(2))
    ], result


def test_dra_a_claim_that_could_not_be_read_is_a_note_unless_required(tmp_path):
    result = dra_result(tmp_path, printed=gpu_uuid(5), allocated="gpu-5", claim_read=False)
    assert result["passed"], result
    assert result["pod"]["devices"] == {
        "result": "not compared",
        "note": "the test pod's ResourceClaim could not be read",
    }


def test_a_device_plugin_nodes_result_says_no_mode(tmp_path):
    result = node_result(tmp_path, log="Test PASSED\n")
    assert "mode" not in result and "driver" not in result, result


# Mode device plugin: the UUIDs the test pod printed against what the node's pod-resources
# API says the kubelet assigned it, read by a watch started before the pod (the kubelet
# answers for active pods only), collected once the pod has finished.
CLIENT = "/opt/gpuops-device-plugin/venv/bin/gpuops-pod-resources"


def plugin_result(tmp_path, *, printed, client, compare="auto", node_state=None):
    """A node whose finished test pod printed PRINTED and whose pod-resources client answered CLIENT."""
    extra = {
        **finished_on_eight_gpus(printed),
        "gpu_validation_node_state": node_state or {"paths": {CLIENT: {"exists": True, "executable": True}}},
        "gpu_validation_assigned": client,
        "gpu_validation_compare_devices": compare,
    }
    exprs = {"result": template_expr("gpu_validation", "result.json.j2")}
    rendered = resolve("gpuops-node-1,", [], exprs=exprs, extra=extra, tmp_path=tmp_path)
    result = rendered["gpuops-node-1"]["result"]
    return result if isinstance(result, dict) else json.loads(result)


def assigned(*uuids):
    containers = {"validate": {"nvidia.com/gpu": list(uuids)}}
    return {"rc": 0, "stdout": json.dumps({"containers": containers}), "stderr": ""}


def test_a_finished_pods_gpus_are_compared_with_what_the_kubelet_assigned(tmp_path):
    # No start seen while the pod ran (no gpu_validation_pod_started): the pod had finished.
    result = plugin_result(tmp_path, printed=gpu_uuid(5), client=assigned(gpu_uuid(5)))
    assert result["passed"], result
    assert result["pod"]["devices"] == {
        "result": "match",
        "seen": [gpu_uuid(5)],
        "assigned": [gpu_uuid(5)],
    }


def test_a_finished_pod_that_saw_another_gpu_than_assigned_fails_the_node(tmp_path):
    result = plugin_result(tmp_path, printed=gpu_uuid(5), client=assigned(gpu_uuid(2)))
    assert not result["passed"], result
    assert result["pod"]["devices"]["result"] == "differ", result


def test_a_pod_the_kubelet_never_listed_is_a_note_and_fails_where_required(tmp_path):
    stderr = "gpuops-pod-resources: ... pod x in namespace default not found\n"
    gone = {"rc": 1, "stdout": "", "stderr": stderr}
    note = (
        "the kubelet did not list the test pod while it was active (pod-resources API: "
        "gpuops-pod-resources: ... pod x in namespace default not found)"
    )
    result = plugin_result(tmp_path, printed=gpu_uuid(5), client=gone)
    assert result["passed"] and result["pod"]["devices"] == {
        "result": "not compared",
        "note": note,
    }, result
    result = plugin_result(tmp_path, printed=gpu_uuid(5), client=gone, compare="required")
    assert result["reasons"] == ["GPUs not compared with what the kubelet assigned: " + note], result


def test_a_node_without_the_pod_resources_client_says_so(tmp_path):
    # The read of the node's state found no client: no watch ran.
    result = plugin_result(tmp_path, printed=gpu_uuid(5), client={}, node_state={"paths": {}})
    assert result["pod"]["devices"] == {
        "result": "not compared",
        "note": "no pod-resources client at %s (the device_plugin role installs it: always in mode gpuops, "
        "with device_plugin_pod_resources_client in the others)" % CLIENT,
    }, result
