# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""kubelet_info's running kubelet: only one that sees this host's root counts, whatever
order /proc lists the processes in."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.k8s.plugins.modules import kubelet_info

HOST_ROOT = (65024, 2)
LAB_KUBELET = ("/opt/kube/bin/kubelet", "/var/lib/lab/kubelet.yaml", "/var/lib/lab/kubelet.kubeconfig")
# pid: (its root directory, its binary, its command line)
PROCESSES = {
    "100": ((40, 1335498), "/usr/local/bin/kubelet", ["kubelet", "--config=/etc/kubernetes/kubelet.yaml"]),
    "200": (
        HOST_ROOT,
        "/opt/kube/bin/kubelet",
        ["kubelet", "--config", "/var/lib/lab/kubelet.yaml", "--kubeconfig=/var/lib/lab/kubelet.kubeconfig"],
    ),
    "300": (HOST_ROOT, "/usr/bin/containerd", ["containerd"]),
    # kubelet_info's own `kubelet --version`, from another inventory name on this host
    "400": (HOST_ROOT, "/opt/kube/bin/kubelet", ["/opt/kube/bin/kubelet", "--version"]),
    # a kubelet started without --config (flags only)
    "500": (HOST_ROOT, "/opt/kube/bin/kubelet", ["kubelet", "--v=2"]),
}


@pytest.fixture
def proc(monkeypatch):
    def listing(order):
        monkeypatch.setattr(kubelet_info.os, "listdir", lambda path: [*order, "self", "sys"])

    monkeypatch.setattr(kubelet_info, "_root", lambda pid: HOST_ROOT if pid == "self" else PROCESSES[pid][0])
    monkeypatch.setattr(kubelet_info.os, "readlink", lambda path: PROCESSES[path.split("/")[2]][1])
    monkeypatch.setattr(
        kubelet_info, "_read", lambda path: "\0".join(PROCESSES[path.split("/")[2]][2]) + "\0"
    )
    return listing


@pytest.mark.parametrize("order", [("100", "200", "300"), ("300", "200", "100")])
def test_a_kubelet_in_a_container_is_not_the_hosts(proc, order):
    proc(order)
    assert kubelet_info.running_kubelet() == LAB_KUBELET


def test_only_container_kubelets_means_none_runs_here(proc):
    proc(("100", "300"))
    assert kubelet_info.running_kubelet() == (None, None, None)


@pytest.mark.parametrize("order", [("400", "200"), ("200", "400")])
def test_a_kubelet_asked_for_its_version_is_not_a_running_kubelet(proc, order):
    """The clean-clone CI's failure: one host's scan caught the other's `kubelet --version`."""
    proc(order)
    assert kubelet_info.running_kubelet() == LAB_KUBELET


def test_only_a_version_query_means_none_runs_here(proc):
    proc(("400",))
    assert kubelet_info.running_kubelet() == (None, None, None)


@pytest.mark.parametrize("order", [("500", "200"), ("200", "500")])
def test_a_kubelet_with_a_config_file_wins(proc, order):
    proc(order)
    assert kubelet_info.running_kubelet() == LAB_KUBELET


def test_a_kubelet_without_config_file_still_runs(proc):
    proc(("500",))
    assert kubelet_info.running_kubelet() == ("/opt/kube/bin/kubelet", None, None)
