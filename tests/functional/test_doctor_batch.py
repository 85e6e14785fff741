# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_doctor reads the API and checks the labels once for all hosts of the play
(roles/gpu_doctor/tasks/main.yml, gpu_doctor_batch): each host names its reads under its
own name, one read answers them all, and each host takes back its own objects and its own
Node's entry of the labels' check. Each expression is taken verbatim from the role and
evaluated by the real ansible-playbook with the roles' defaults and vars, two hosts in one
inventory, so a mix-up between hosts shows.
"""

from resolve import find_task, hosts_inventory, resolve

NAMES = ["node", "runtime_class", "slices", "device_classes", "dcgm_pods", "dcgm_ds"]


def node_objects(node):
    """What k8s_objects_info answers for one host's queries."""
    return {
        "node": {"api_found": True, "resources": [{"metadata": {"name": node}}]},
        "runtime_class": {"api_found": True, "resources": [{"metadata": {"name": "nvidia"}}]},
        "slices": {"api_found": True, "resources": []},
        "device_classes": {"api_found": True, "resources": []},
        "dcgm_pods": {"api_found": True, "resources": [{"metadata": {"name": "dcgm-" + node}}]},
        "dcgm_ds": {"api_found": True, "resources": []},
    }


def labels_entry(node, changed):
    return {"name": node, "changed": changed, "labels_updated": ["nvidia.com/gpu.count"] if changed else []}


def test_one_read_and_one_labels_check_answer_every_host_each_with_its_own(tmp_path):
    queries_task = find_task("gpu_doctor", "main.yml", "Name what the API is asked about this node")
    read_task = find_task(
        "gpu_doctor",
        "main.yml",
        "Read the Nodes, their RuntimeClass, the DRA driver's objects and dcgm-exporter's",
    )
    take_task = find_task("gpu_doctor", "main.yml", "Take this node's objects from what the API answered")
    labels_task = find_task(
        "gpu_doctor", "main.yml", "Check that the nodes' GPU labels are current (check mode, nothing written)"
    )
    observed = find_task("gpu_doctor", "main.yml", "Diagnose the node")["vars"]["__gpu_doctor_observed"]
    answer = {
        "%s:%s" % (host, name): value
        for host in ("gpu-a", "gpu-b")
        for name, value in node_objects(host).items()
    }
    checked = {"nodes": [labels_entry("gpu-a", False), labels_entry("gpu-b", True)], "changed": False}
    common = {
        "gpu_doctor_gpu": {
            "gpu_count": 1,
            "labels": {"nvidia.com/gpu.count": "1"},
            "device_plugin": {"mode": "gpuops"},
        },
        "__gpu_doctor_queries": queries_task["vars"]["__gpu_doctor_queries"],
        "__gpu_doctor_names": take_task["vars"]["__gpu_doctor_names"],
        "gpu_doctor_api_read": {"objects": answer},
        "gpu_doctor_labels_read": checked,
    }
    hosts = {
        # gpu-b's Node is judged; gpu-a is left out of the labels' check (skipped by the inventory).
        "gpu-a": dict(common, gpu_doctor_skip=["labels"], gpu_doctor_labels_request=None),
        "gpu-b": dict(common, gpu_doctor_labels_request={"name": "gpu-b", "labels": {}, "taints": []}),
    }
    # First what each host names (its set_fact), then, with those as its facts, the batch.
    named = resolve(
        hosts_inventory(tmp_path, hosts),
        [],
        exprs={"named": queries_task["ansible.builtin.set_fact"]["gpu_doctor_api_queries"]},
        tmp_path=tmp_path,
    )
    for host, host_vars in hosts.items():
        host_vars["gpu_doctor_api_queries"] = named[host]["named"]
    found = resolve(
        hosts_inventory(tmp_path, hosts),
        [],
        exprs={
            "queries": read_task["gpuops.k8s.k8s_objects_info"]["queries"],
            "objects": take_task["ansible.builtin.set_fact"]["gpu_doctor_api"]["objects"],
            "requests": labels_task["vars"]["__gpu_doctor_labels_requests"],
            "labels": observed["labels"],
        },
        tmp_path=tmp_path,
    )
    queries = found["gpu-a"]["queries"]
    assert sorted(queries) == sorted("%s:%s" % (host, name) for host in ("gpu-a", "gpu-b") for name in NAMES)
    assert queries["gpu-b:node"] == {"kind": "Node", "name": "gpu-b"}
    assert queries["gpu-a:dcgm_pods"]["field_selectors"] == ["spec.nodeName=gpu-a"]
    assert found["gpu-b"]["queries"] == queries
    for host in ("gpu-a", "gpu-b"):
        assert found[host]["objects"] == node_objects(host), host
        assert found[host]["requests"] == [{"name": "gpu-b", "labels": {}, "taints": []}], host
    assert found["gpu-a"]["labels"] == {"skipped": True}
    assert found["gpu-b"]["labels"] == {"nodes": [labels_entry("gpu-b", True)]}


def test_without_batch_each_host_reads_its_own(tmp_path):
    read_task = find_task(
        "gpu_doctor",
        "main.yml",
        "Read the Nodes, their RuntimeClass, the DRA driver's objects and dcgm-exporter's",
    )
    hosts = {
        host: {
            "gpu_doctor_batch": False,
            "gpu_doctor_api_queries": {host + ":node": {"kind": "Node", "name": host}},
        }
        for host in ("gpu-a", "gpu-b")
    }
    found = resolve(
        hosts_inventory(tmp_path, hosts),
        [],
        exprs={"queries": read_task["gpuops.k8s.k8s_objects_info"]["queries"], "once": read_task["run_once"]},
        tmp_path=tmp_path,
    )
    for host in ("gpu-a", "gpu-b"):
        assert found[host]["queries"] == {host + ":node": {"kind": "Node", "name": host}}
        assert found[host]["once"] is False
