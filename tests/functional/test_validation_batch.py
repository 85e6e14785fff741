# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_validation starts, waits for and removes the test pods of all hosts of the play in
one task each (roles/gpu_validation/tasks/pod.yml, gpu_validation_batch): only the hosts
that named a pod in this run are in it (a host that runs none has none, or forgot the one
of an earlier run), the wait ends once every pod has finished, and each host takes back
its own pod. Each expression is taken verbatim from the role and evaluated
by the real ansible-playbook with the roles' defaults and vars.
"""

from resolve import ROLES, find_task, hosts_inventory, resolve


def pod(name, phase):
    return {"api_found": True, "resources": [{"metadata": {"name": name}, "status": {"phase": phase}}]}


def test_the_pods_of_the_hosts_that_run_one_are_started_waited_for_and_each_host_gets_its_own(tmp_path):
    request = find_task("gpu_validation", "pod.yml", "Name this node's test pod")
    forget = find_task("gpu_validation", "pod.yml", "Forget this node's test pod")
    wait = find_task("gpu_validation", "pod.yml", "Wait for the test pods to finish")
    take = find_task("gpu_validation", "pod.yml", "Take this node's test pod from what the API answered")
    start = find_task("gpu_validation", "pod.yml", "Start the test pods")
    assert forget["ansible.builtin.set_fact"] == {"gpu_validation_pod_request": None}
    hosts = {"gpu-a": {}, "gpu-b": {}, "gpu-c": {}}
    # The role's template, found by its path outside the role.
    template = "'%s'" % (ROLES / "gpu_validation" / "templates" / "pod.yaml.j2")
    named_request = request["ansible.builtin.set_fact"]["gpu_validation_pod_request"]
    named = resolve(
        hosts_inventory(tmp_path, hosts),
        [],
        exprs={
            "name": named_request["name"],
            "manifest": named_request["manifest"].replace("'pod.yaml.j2'", template),
            "query_namespace": named_request["query"]["namespace"],
            "query_name": named_request["query"]["name"],
        },
        tmp_path=tmp_path,
    )
    assert named["gpu-a"]["name"] == "gpuops-validate-gpu-a"
    assert named["gpu-a"]["manifest"]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "gpu-a"}
    requests = {
        host: {
            "name": named[host]["name"],
            "manifest": named[host]["manifest"],
            "query": {
                "kind": "Pod",
                "namespace": named[host]["query_namespace"],
                "name": named[host]["query_name"],
            },
        }
        for host in hosts
    }
    assert named_request["query"]["kind"] == "Pod"
    assert requests["gpu-c"]["query"] == {
        "kind": "Pod",
        "namespace": "default",
        "name": "gpuops-validate-gpu-c",
    }
    # gpu-b runs no pod in this run: it has forgotten the one of an earlier run.
    requests["gpu-b"] = None

    for host, host_vars in hosts.items():
        host_vars["gpu_validation_pod_request"] = requests[host]
    exprs = {
        "manifests": start["kubernetes.core.k8s"]["definition"],
        "queries": wait["gpuops.k8s.k8s_objects_info"]["queries"],
        "done": "{{ %s }}" % wait["until"],
    }
    # Only the hosts that run a pod take one (tasks/pod.yml is theirs alone).
    take_pod = {"pod": take["ansible.builtin.set_fact"]["gpu_validation_pod"]}
    # gpu-c's pod still runs: the wait goes on; then both have finished, one of them failed.
    running = {"gpuops-validate-gpu-a": pod("gpuops-validate-gpu-a", "Succeeded")}
    running["gpuops-validate-gpu-c"] = pod("gpuops-validate-gpu-c", "Running")
    finished = dict(running, **{"gpuops-validate-gpu-c": pod("gpuops-validate-gpu-c", "Failed")})
    found = {}
    for case, objects in (("running", running), ("finished", finished)):
        for host_vars in hosts.values():
            host_vars["gpu_validation_pods"] = {"objects": objects, "changed": False}
        found[case] = resolve(hosts_inventory(tmp_path, hosts), [], exprs=exprs, tmp_path=tmp_path)
    took = resolve(
        hosts_inventory(tmp_path, hosts), [], exprs=take_pod, limit="gpu-a,gpu-c", tmp_path=tmp_path
    )
    answer = found["finished"]["gpu-a"]
    assert [m["metadata"]["name"] for m in answer["manifests"]] == [
        "gpuops-validate-gpu-a",
        "gpuops-validate-gpu-c",
    ]
    assert sorted(answer["queries"]) == ["gpuops-validate-gpu-a", "gpuops-validate-gpu-c"]
    assert found["running"]["gpu-a"]["done"] is False
    assert answer["done"] is True
    assert took["gpu-c"]["pod"] == pod("gpuops-validate-gpu-c", "Failed")
    assert took["gpu-a"]["pod"] == pod("gpuops-validate-gpu-a", "Succeeded")
