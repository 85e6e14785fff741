# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The managed-cluster profiles (docs/managed-clusters.md, inventories/examples/{aks,gke,eks}).

Without a cloud account: each example inventory parses with the real ansible-inventory,
passes every role's argument specs and site.yml's preflight (run on this machine in check
mode, as if it were each node), and what its variables produce, rendered from the roles'
own templates, fits the platform: GPU pods and our DaemonSets tolerate the taints the
platform puts on GPU nodes, the doctor is not told to expect what the platform does not
have, and (EKS) the doctor's runtime check accepts the containerd file nodeadm writes.
"""

import json
import re
import subprocess

import pytest
import yaml
from conftest import COLLECTIONS, REPO, VENV_BIN, process_env, run_module
from resolve import resolve, run_ansible, template_expr

EXAMPLES = REPO / "inventories" / "examples"
SITE = REPO / "playbooks" / "site.yml"
PHASES = ["driver", "toolkit", "runtime", "device_plugin", "labels", "addons", "validate"]
# The taints each platform puts on its GPU nodes by itself or by its documented pool setup
# (docs/managed-clusters.md), and the one our gpu_node_labels adds where it adds any.
PLATFORM_TAINTS = {
    "aks": [{"key": "sku", "value": "gpu", "effect": "NoSchedule"}],
    "gke": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    "eks": [],
}
# The node phases the platform's image or add-ons own (what the profile must leave out).
PLATFORM_OWNS = {
    "aks": {"driver", "toolkit", "runtime"},
    "gke": {"driver", "toolkit", "runtime", "device_plugin"},
    "eks": {"driver", "toolkit", "runtime"},
}
PROVIDERS = sorted(PLATFORM_TAINTS)


def inventory(provider):
    return EXAMPLES / provider


def hostvars(provider):
    env = process_env()
    env["ANSIBLE_COLLECTIONS_PATH"] = str(COLLECTIONS)
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-inventory"), "-i", str(inventory(provider)), "--list"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    data = json.loads(proc.stdout)
    assert data["gpu_nodes"]["hosts"], "no hosts in group gpu_nodes"
    return data["_meta"]["hostvars"]


def doctor_checks():
    """The doctor's check names, as its diagnosis (module_utils/_doctor.py) lists them."""
    source = (REPO / "plugins" / "module_utils" / "_doctor.py").read_text(encoding="utf-8")
    (checks,) = re.findall(r"^CHECKS = \(([^)]*)\)", source, re.M)
    return set(re.findall(r'"([a-z_]+)"', checks))


def tolerates(tolerations, taint):
    """Kubernetes' rule: does one of these tolerations match this taint?"""
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint["effect"]:
            continue
        if tol.get("operator", "Equal") == "Exists":
            if not tol.get("key") or tol["key"] == taint["key"]:
                return True
        elif tol.get("key") == taint["key"] and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def site_doctor_expr(name):
    """An expression site.yml passes to gpu_doctor (its Summary play), verbatim."""
    plays = yaml.safe_load(SITE.read_text(encoding="utf-8"))
    summary = next(play for play in plays if play["name"] == "Summary")
    task = next(
        t
        for t in summary["tasks"]
        if t.get("ansible.builtin.include_role", {}).get("name") == "gpuops.k8s.gpu_doctor"
    )
    return task["vars"][name]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_inventory_parses_and_skips_what_the_platform_owns(provider):
    hosts = hostvars(provider)
    assert len(hosts) >= 2
    for name, hv in hosts.items():
        assert set(hv["gpuops_site_skip"]) == PLATFORM_OWNS[provider], name
        assert set(hv["gpuops_site_skip"]) <= set(PHASES), name
        # A typo in a check name would silently skip nothing.
        assert set(hv["gpu_doctor_skip"]) <= doctor_checks(), name


@pytest.mark.parametrize("provider", PROVIDERS)
def test_site_syntax_with_the_inventory(provider):
    run_ansible(
        [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory(provider)), str(SITE), "--syntax-check"]
    )


def preflight(provider, extra=None):
    """site.yml's preflight phase, check mode, every example host run as this machine."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": str(VENV_BIN / "python")}
    local.update(extra or {})
    return run_ansible(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            str(inventory(provider)),
            str(SITE),
            "--tags",
            "preflight",
            "--skip-tags",
            "always",  # the summary's doctor needs a cluster
            "--check",
            "-e",
            json.dumps(local),
        ],
        expect_rc=None,
    )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_preflight_accepts_the_profile(provider):
    run = preflight(provider)
    assert run["rc"] == 0, run["text"]
    stats = run["json"]["stats"]
    assert set(stats) == set(hostvars(provider))
    assert all(s["failures"] == 0 and s["unreachable"] == 0 for s in stats.values()), run["text"]
    tasks = {t["task"]["name"]: t for t in run["json"]["plays"][0]["tasks"]}
    for host, result in tasks["Describe the node's GPUs"]["hosts"].items():
        # No GPU here: gpu_info says why NVML is unusable instead of failing.
        assert result["nvml"]["available"] is False, host


def test_preflight_runs_with_no_phase_left_out():
    # The air-gapped example is a whole site: gpuops_site_skip is not set at all, which
    # the preflight's own check must take as "no phase left out".
    assert all("gpuops_site_skip" not in hv for hv in hostvars("air-gapped").values())
    run = preflight("air-gapped")
    assert run["rc"] == 0, run["text"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_preflight_refuses_an_unknown_phase(provider):
    run = preflight(provider, {"gpuops_site_skip": ["driver", "drivers"]})
    assert run["rc"] != 0
    assert "names drivers" in run["text"]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_profile_fits_the_platform(provider, tmp_path):
    names = [
        "device_plugin_mode",
        "gpuops_site_skip",
        "gpu_doctor_skip",
        "gpu_node_labels_taints",
        "cluster_addons_runtime_class_enabled",
        "cluster_addons_dcgm_exporter_enabled",
        # site.yml passes the doctor none of the runtime choices: its defaults follow
        # container_runtime's, as resolved here.
        "gpu_doctor_runtime_is_default",
    ]
    exprs = {
        "plugin": template_expr("device_plugin", "nvidia-device-plugin.yml.j2"),
        "dcgm": template_expr("cluster_addons", "dcgm-exporter.yaml.j2"),
        "pod": template_expr("gpu_validation", "pod.yaml.j2"),
        "doctor_taints": site_doctor_expr("gpu_doctor_taints"),
    }
    # Role-internal names the templates need; resolve_vars.yml also validates every role's
    # argument specs against the inventory's variables.
    extra = {"gpu_validation_pod_name": "gpuops-validation-test", "__gpuops_site_default_taints": []}
    hosts = resolve(inventory(provider), names, exprs=exprs, extra=extra, tmp_path=tmp_path)
    for host, got in hosts.items():
        node_taints = PLATFORM_TAINTS[provider] + got["gpu_node_labels_taints"]
        pod = yaml.safe_load(got["pod"])
        workloads = {"validation pod": pod["spec"]}
        if "device_plugin" not in got["gpuops_site_skip"]:
            assert got["device_plugin_mode"] == "nvidia", host
            plugin = yaml.safe_load(got["plugin"])
            workloads["device plugin"] = plugin["spec"]["template"]["spec"]
        if got["cluster_addons_dcgm_exporter_enabled"]:
            dcgm = next(d for d in yaml.safe_load_all(got["dcgm"]) if d and d["kind"] == "DaemonSet")
            workloads["dcgm-exporter"] = dcgm["spec"]["template"]["spec"]
        for what, spec in workloads.items():
            for taint in node_taints:
                assert tolerates(spec.get("tolerations") or [], taint), "%s: %s does not tolerate %s" % (
                    host,
                    what,
                    taint,
                )
        # The doctor expects our taints only where we add them...
        assert got["doctor_taints"] == got["gpu_node_labels_taints"], host
        # ...and the NVIDIA runtime reachable: as the default, through a RuntimeClass, or
        # not its business (GKE has no such runtime).
        assert (
            got["gpu_doctor_runtime_is_default"]
            or got["cluster_addons_runtime_class_enabled"]
            or "runtime_class" in got["gpu_doctor_skip"]
        ), host
        # Where the platform owns the toolkit and runtime but has none (GKE), the doctor
        # must not look for them.
        if provider == "gke":
            assert {"toolkit", "runtime", "runtime_class"} <= set(got["gpu_doctor_skip"]), host
            assert got["cluster_addons_dcgm_exporter_enabled"] is False, host


# containerd 2.x configuration as EKS's nodeadm describes it for the AL2023 NVIDIA AMI:
# version 3, the runtime "nvidia" running NVIDIA's runtime binary, and the default.
EKS_NODEADM_CONFIG = """\
version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[plugins.'io.containerd.cri.v1.runtime']
enable_cdi = true

[plugins.'io.containerd.cri.v1.runtime'.containerd]
default_runtime_name = "nvidia"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]
runtime_type = "io.containerd.runc.v2"
base_runtime_spec = "/etc/containerd/base-runtime-spec.json"

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia.options]
BinaryName = "/usr/bin/nvidia-container-runtime"
SystemdCgroup = true
"""


def doctor_runtime_check(path):
    """The nvidia_runtime call gpu_doctor makes (check mode), with site.yml's arguments."""
    return run_module(
        {
            "runtime": "containerd",
            "path": str(path),
            "runtime_name": "nvidia",
            "runtime_path": "/usr/bin/nvidia-container-runtime",
            "backup": False,
        },
        module="gpuops.k8s.nvidia_runtime",
        check=True,
    )


def test_eks_doctor_runtime_check_accepts_nodeadm_config(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text(EKS_NODEADM_CONFIG, encoding="utf-8")
    result = doctor_runtime_check(config)
    assert not result.get("failed"), result
    assert result["changed_files"] == [], result
    assert "runtime" not in hostvars("eks")["ip-10-0-12-34.ec2.internal"]["gpu_doctor_skip"]


def test_eks_doctor_runtime_check_sees_a_missing_entry(tmp_path):
    """The same check on a file without the nvidia runtime reports it: the test above can fail."""
    config = tmp_path / "config.toml"
    config.write_text(
        EKS_NODEADM_CONFIG.split("[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes", maxsplit=1)[0]
    )
    result = doctor_runtime_check(config)
    assert result["changed_files"] == [str(config)], result


def test_page_table_matches_the_inventories():
    """docs/managed-clusters.md's summary table says what the example inventories set."""
    page = (REPO / "docs" / "managed-clusters.md").read_text(encoding="utf-8")
    columns = ["aks", "gke", "eks"]
    for variable in ("gpuops_site_skip", "gpu_doctor_skip"):
        row = next(line for line in page.splitlines() if line.startswith("| `%s` |" % variable))
        cells = [cell.strip() for cell in row.strip("|").split("|")][1:]
        for provider, cell in zip(columns, cells):
            documented = yaml.safe_load(re.match(r"`([^`]*)`", cell).group(1))
            for name, hv in hostvars(provider).items():
                assert hv[variable] == documented, (variable, provider, name)
