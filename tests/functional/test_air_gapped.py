# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""inventories/examples/air-gapped points every download of site.yml at the site's mirrors.

The real ansible-playbook resolves, per OS, what each role would fetch with that inventory:
repository and key URLs, the pip arguments of the device plugin's install task, the chart
repository, and every image in the manifests rendered from the roles' own templates (NVIDIA's
device plugin, the GPU Operator's values, dcgm-exporter, the validation pod). No upstream
host may remain. The same resolution without the inventory must find the upstream hosts,
so the check can fail; and the mirrored images must be the ones the roles pin.
"""

import re
from urllib.parse import urlsplit

import pytest
import yaml
from conftest import REPO
from resolve import find_task, resolve, task_arg, template_expr

AIR_GAPPED = REPO / "inventories" / "examples" / "air-gapped"
MIRROR_HOSTS = {"mirror.example.internal", "registry.example.internal"}
UPSTREAM_HOSTS = {
    "nvcr.io",
    "nvidia.github.io",
    "developer.download.nvidia.com",
    "pypi.org",
    "files.pythonhosted.org",
    "helm.ngc.nvidia.com",
    "registry.k8s.io",
    "deb.debian.org",
    "archive.ubuntu.com",
    "docker.io",
    "quay.io",
    "ghcr.io",
    "gcr.io",
}
# GPU Operator chart values that name an image repository, with the chart's defaults
# (the chart's values.yaml, v25 layout): where the file leaves one out, the chart pulls
# from there.
OPERATOR_IMAGE_KEYS = {
    ("operator",): "nvcr.io/nvidia",
    ("operator", "initContainer"): "nvcr.io/nvidia",
    ("validator",): "nvcr.io/nvidia/cloud-native",
    ("driver",): "nvcr.io/nvidia",
    ("driver", "manager"): "nvcr.io/nvidia/cloud-native",
    ("toolkit",): "nvcr.io/nvidia/k8s",
    ("devicePlugin",): "nvcr.io/nvidia",
    ("dcgm",): "nvcr.io/nvidia/cloud-native",
    ("dcgmExporter",): "nvcr.io/nvidia/k8s",
    ("gfd",): "nvcr.io/nvidia",
    ("migManager",): "nvcr.io/nvidia/cloud-native",
    ("nodeStatusExporter",): "nvcr.io/nvidia/cloud-native",
    ("node-feature-discovery", "image"): "registry.k8s.io/nfd/node-feature-discovery",
}
NAMES = [
    "nvidia_container_toolkit_key_url",
    "nvidia_container_toolkit_key_content",
    "__nvidia_container_toolkit_repository_url",
    "__nvidia_container_toolkit_probe_url",
    "device_plugin_operator_chart_repo_url",
    "device_plugin_operator_chart_ref",
    "device_plugin_nvidia_image",
    "device_plugin_nvidia_version",
    "cluster_addons_dcgm_exporter_image",
    "gpu_validation_image",
    "device_plugin_wheelhouse",
]


def exprs(os_family):
    found = {
        # Where pip looks goes through its environment (PIP_NO_INDEX, PIP_FIND_LINKS, PIP_INDEX_URL).
        "pip_env": find_task(
            "device_plugin",
            "install.yml",
            "Install the pinned dependencies and the build backend into the venv",
            "ansible.builtin.pip",
        )["environment"],
        "plugin": template_expr("device_plugin", "nvidia-device-plugin.yml.j2"),
        "operator_values": template_expr("device_plugin", "gpu-operator-values.yml.j2"),
        "dcgm": template_expr("cluster_addons", "dcgm-exporter.yaml.j2"),
        "pod": template_expr("gpu_validation", "pod.yaml.j2"),
    }
    if os_family == "RedHat":
        cuda = (
            "nvidia_driver",
            "install_dnf.yml",
            "Add NVIDIA's CUDA repository",
            "ansible.builtin.yum_repository",
        )
        found["cuda_baseurl"] = task_arg(*cuda, "baseurl")
        found["cuda_gpgkey"] = task_arg(*cuda, "gpgkey")
        found["toolkit_baseurl"] = task_arg(
            "nvidia_container_toolkit",
            "dnf.yml",
            "Declare the repository, its metadata signed by that key",
            "ansible.builtin.yum_repository",
            "baseurl",
        )
    else:
        found["toolkit_source"] = template_expr(
            "nvidia_container_toolkit", "nvidia-container-toolkit.sources.j2"
        )
    return found


def images(manifests):
    for doc in yaml.safe_load_all(manifests):
        if doc and doc.get("kind") in ("DaemonSet", "Pod"):
            spec = doc["spec"]["template"]["spec"] if doc["kind"] == "DaemonSet" else doc["spec"]
            for container in spec["containers"]:
                yield container["image"]


def sources(got, os_family):
    """(what, where from) for every download the roles would make with these variables."""
    found = [
        ("toolkit repository", got["__nvidia_container_toolkit_repository_url"]),
        ("toolkit repository check", got["__nvidia_container_toolkit_probe_url"]),
    ]
    if not got["nvidia_container_toolkit_key_content"]:
        found.append(("toolkit key", got["nvidia_container_toolkit_key_url"]))
    if os_family == "RedHat":
        found += [
            ("CUDA repository (driver)", got["cuda_baseurl"]),
            ("CUDA repository key", got["cuda_gpgkey"]),
            ("toolkit dnf repository", got["toolkit_baseurl"]),
        ]
    else:
        found += [
            ("toolkit apt source", line[len("URIs: ") :])
            for line in got["toolkit_source"].splitlines()
            if line.startswith("URIs: ")
        ]
    # An empty environment: no wheelhouse, no index, pip's defaults.
    pip = got.get("pip_env") or {}
    if pip.get("PIP_NO_INDEX"):
        # The role copies the controller's wheelhouse to the node and installs from that copy.
        assert pip["PIP_FIND_LINKS"].endswith("/wheelhouse"), pip
        found.append(("device plugin wheels", "file://" + got["device_plugin_wheelhouse"]))
    elif pip.get("PIP_INDEX_URL"):
        found.append(("device plugin wheels", pip["PIP_INDEX_URL"]))
    else:  # pip's own default index
        found.append(("device plugin wheels", "https://pypi.org/simple"))
    if got["device_plugin_operator_chart_ref"].startswith("/"):
        found.append(("GPU Operator chart", "file://" + got["device_plugin_operator_chart_ref"]))
    else:
        found.append(("GPU Operator chart", got["device_plugin_operator_chart_repo_url"]))
    values = yaml.safe_load(got["operator_values"])
    for path, default in OPERATOR_IMAGE_KEYS.items():
        node = values
        for key in path:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        found.append(("GPU Operator image " + ".".join(path), node.get("repository", default)))
    found += [("device plugin image", image) for image in images(got["plugin"])]
    found += [("dcgm-exporter image", image) for image in images(got["dcgm"])]
    found += [("validation image", image) for image in images(got["pod"])]
    return found


def host_of(source):
    if "://" in source:
        return urlsplit(source).hostname or ""
    return source.split("/", 1)[0]  # an image reference: registry/path:tag


EXTRA = {"gpu_validation_pod_name": "gpuops-validation-test"}
OS_FAMILIES = {"debian12": "Debian", "ubuntu2204": "Debian", "rhel9": "RedHat"}


@pytest.mark.parametrize("facts", sorted(OS_FAMILIES))
def test_every_download_comes_from_the_mirrors(facts, tmp_path):
    family = OS_FAMILIES[facts]
    hosts = resolve(AIR_GAPPED, NAMES, facts=facts, exprs=exprs(family), extra=EXTRA, tmp_path=tmp_path)
    assert set(hosts) == {"gpu-node-01.example.internal", "gpu-node-02.example.internal"}
    for host, got in hosts.items():
        found = sources(got, family)
        upstream = [(what, src) for what, src in found if any(up in src for up in UPSTREAM_HOSTS)]
        assert not upstream, "%s (%s) still downloads from upstream: %s" % (host, facts, upstream)
        for what, src in found:
            if src.startswith("file://"):
                assert src.startswith("file://%s/" % AIR_GAPPED), (what, src)
            else:
                assert host_of(src) in MIRROR_HOSTS, (host, what, src)


@pytest.mark.parametrize("facts", ["ubuntu2204", "rhel9"])
def test_without_the_file_the_downloads_are_upstream(facts, tmp_path):
    """The negative control: the same resolution on the roles' defaults finds NVIDIA and PyPI."""
    family = OS_FAMILIES[facts]
    got = resolve("gpu-node-1,", NAMES, facts=facts, exprs=exprs(family), extra=EXTRA, tmp_path=tmp_path)[
        "gpu-node-1"
    ]
    hosts = {host_of(found[1]) for found in sources(got, family)}
    expected = {"nvidia.github.io", "nvcr.io", "pypi.org", "helm.ngc.nvidia.com", "registry.k8s.io"}
    if family == "RedHat":
        expected.add("developer.download.nvidia.com")
    assert expected <= hosts, hosts


def test_mirrored_images_are_the_pinned_ones(tmp_path):
    """Same repository path and tag as the roles' defaults, only the registry differs."""
    names = ["device_plugin_nvidia_image", "cluster_addons_dcgm_exporter_image", "gpu_validation_image"]
    mirrored = resolve(AIR_GAPPED, names, limit="gpu-node-01.example.internal", tmp_path=tmp_path)
    defaults = resolve("gpu-node-1,", names, tmp_path=tmp_path)["gpu-node-1"]
    for name in names:
        registry, path = mirrored["gpu-node-01.example.internal"][name].split("/", 1)
        assert registry == "registry.example.internal", name
        assert defaults[name] == "nvcr.io/" + path, name


def test_operator_values_cover_every_chart_image():
    values = yaml.safe_load((AIR_GAPPED / "group_vars" / "all.yml").read_text(encoding="utf-8"))
    for path in OPERATOR_IMAGE_KEYS:
        node = values["device_plugin_operator_values"]
        for key in path:
            node = node[key]
        assert "{{ gpuops_registry }}" in node["repository"], path


def test_page_names_every_variable_of_the_file():
    page = (REPO / "docs" / "air-gapped.md").read_text(encoding="utf-8")
    values = yaml.safe_load((AIR_GAPPED / "group_vars" / "all.yml").read_text(encoding="utf-8"))
    missing = [name for name in values if not re.search(r"`%s`" % re.escape(name), page)]
    assert not missing, missing
