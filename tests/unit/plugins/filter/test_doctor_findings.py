# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The doctor_findings filter: _doctor.diagnose for templates, its input errors as filter errors."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s.plugins.filter.doctor_findings import FilterModule

doctor_findings = FilterModule().filters()["doctor_findings"]
RUNTIME = {"runtime": "containerd", "runtime_name": "nvidia"}


def test_the_filter_diagnoses_what_it_is_given():
    observed = {"runtime_check": {"changed_files": ["/etc/containerd/config.toml"]}}
    assert [f["message"] for f in doctor_findings(observed, RUNTIME)] == [
        "the nvidia runtime is missing from (or differs in) /etc/containerd/config.toml"
    ]


def test_skip_leaves_a_check_out():
    observed = {"runtime_check": {"changed_files": ["/etc/containerd/config.toml"]}}
    assert doctor_findings(observed, RUNTIME, skip=["runtime"]) == []


def test_only_runs_the_checks_named():
    observed = {
        "runtime_check": {"changed_files": ["/etc/containerd/config.toml"]},
        "kubelet": {"version": "v1.37.2", "config_error": "/etc/kubernetes/kubelet.yaml: Expecting value"},
    }
    settings = dict(RUNTIME, kubelet_version="")
    assert [f["check"] for f in doctor_findings(observed, settings)] == ["runtime", "kubelet"]
    assert [f["check"] for f in doctor_findings(observed, settings, only=["kubelet"])] == ["kubelet"]
    assert doctor_findings(observed, settings, skip=["kubelet"], only=["kubelet"]) == []


def test_an_input_error_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match=r"^doctor_findings: the runtime check needs the setting"):
        doctor_findings({"runtime_check": {}}, {"runtime": "crio"})


@pytest.mark.parametrize("observed, settings", [([], {}), ({}, None)])
def test_observations_and_settings_must_be_dicts(observed, settings):
    with pytest.raises(AnsibleFilterError, match="must be dicts"):
        doctor_findings(observed, settings)
