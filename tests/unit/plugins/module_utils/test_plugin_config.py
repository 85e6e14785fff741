# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_plugin_config.served and read_record: what a node's device plugin serves, for the labels.

(The document reader itself is the daemon's too: tests/daemon/test_config.py covers it
through the daemon's file and command line.)
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _plugin_config as pc

TIME_SLICING = {
    "version": "v1",
    "flags": {"migStrategy": "mixed"},
    "sharing": {
        "timeSlicing": {
            "renameByDefault": True,
            "resources": [
                {"name": "nvidia.com/gpu", "replicas": 4, "perDevice": [{"index": 3, "replicas": 2}]},
            ],
        }
    },
}


def test_the_gpuops_record_is_read_like_the_daemon_reads_its_file():
    config = pc.served({"mode": "gpuops", "config": TIME_SLICING, "environment": {}})
    assert config.mig_strategy == "mixed"
    assert config.sharing() == (
        "time-slicing",
        (pc.SharedResource("nvidia.com/gpu", 4, per_device=(pc.PerDevice(2, index="3"),)),),
        True,
    )


def test_the_environment_wins_over_the_file_as_in_both_plugins():
    record = {"mode": "gpuops", "config": TIME_SLICING, "environment": {"MIG_STRATEGY": "single"}}
    assert pc.served(record).mig_strategy == "single"
    assert pc.served({"mode": "nvidia", "environment": {"MIG_STRATEGY": "mixed"}}).mig_strategy == "mixed"
    assert (
        pc.served({"mode": "operator", "config": {"flags": {"migStrategy": "single"}}}).mig_strategy
        == "single"
    )


def test_the_dra_record_is_read_as_the_daemon_reads_it():
    document = {"version": "v1", "frontEnd": "dra", "dra": {"nodeName": "gpu-1"}}
    config = pc.served({"mode": "dra", "config": document, "environment": {}})
    assert (config.front_end, config.dra_node_name) == ("dra", "gpu-1")
    with pytest.raises(pc.ConfigError, match=r"device_plugin\.mode: 'dra2' is not valid; valid: .*, dra"):
        pc.served({"mode": "dra2"})


def test_an_empty_record_is_the_defaults():
    config = pc.served({})
    assert (config.mig_strategy, config.sharing()) == ("none", ("none", (), False))


def test_mps_is_described_for_nvidias_plugin_and_refused_for_ours():
    document = {"sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 3}]}}}
    config = pc.served({"mode": "nvidia", "config": document})
    assert config.sharing() == ("mps", (pc.SharedResource("nvidia.com/gpu", 3),), False)
    with pytest.raises(pc.ConfigError, match=r"sharing\.mps: the gpuops device plugin does not serve MPS"):
        pc.served({"mode": "gpuops", "config": document})


def test_nvidias_plugin_is_described_without_the_choices_it_passes_over():
    # NVIDIA api/config/v1/config.go DisableResourceNamingInConfig, called by its plugin and
    # by GFD (cmd/gpu-feature-discovery/main.go) on every configuration they load: each
    # resource's rename and devices are dropped; its reader has no perDevice.
    resource = {
        "name": "nvidia.com/gpu",
        "replicas": 4,
        "rename": "nvidia.com/gpu-four",
        "devices": [0, 1],
        "perDevice": [{"index": 1, "replicas": 2}],
    }
    document = {"sharing": {"timeSlicing": {"resources": [resource]}}}
    for mode in ("nvidia", "operator", "nvidia_dra"):
        assert pc.served({"mode": mode, "config": document}).sharing() == (
            "time-slicing",
            (pc.SharedResource("nvidia.com/gpu", 4),),
            False,
        )
    # renameByDefault still renames, to <name>.shared; MPS is read the same way.
    document = {"sharing": {"mps": {"renameByDefault": True, "resources": [resource]}}}
    config = pc.served({"mode": "nvidia", "config": document})
    assert config.sharing() == ("mps", (pc.SharedResource("nvidia.com/gpu", 4),), True)
    # The gpuops plugin serves all three.
    shared = pc.served({"mode": "gpuops", "config": {"sharing": {"timeSlicing": {"resources": [resource]}}}})
    assert shared.sharing()[1] == (
        pc.SharedResource(
            "nvidia.com/gpu", 4, "nvidia.com/gpu-four", ("0", "1"), (pc.PerDevice(2, index="1"),)
        ),
    )


def test_an_mps_section_wins_over_time_slicing_like_nvidias_config():
    # NVIDIA api/config/v1/sharing.go: ReplicatedResources() is the MPS list when there is one.
    config = pc.Config(
        shared=(pc.SharedResource("nvidia.com/gpu", 4),), mps_shared=(pc.SharedResource("nvidia.com/gpu", 2),)
    )
    assert config.sharing()[0:2] == ("mps", (pc.SharedResource("nvidia.com/gpu", 2),))
    assert pc.Config(shared=(pc.SharedResource("nvidia.com/gpu", 1),)).sharing()[0] == "none"


@pytest.mark.parametrize(
    "record, message",
    [
        ([], r"device_plugin: \[\] is not valid; expected a mapping"),
        (
            {"mode": "nvidia-dra"},
            r"device_plugin\.mode: 'nvidia-dra' is not valid; "
            r"valid: gpuops, nvidia, operator, dra, nvidia_dra",
        ),
        ({"modes": "gpuops"}, r"device_plugin\.modes: 'gpuops' is not valid; unknown key; valid keys here"),
        ({"environment": ["MIG_STRATEGY=single"]}, r"device_plugin\.environment: .* expected a mapping"),
        (
            {"config": {"flags": {"migStrategy": 1}}},
            r"device_plugin\.config: flags\.migStrategy: 1 is not valid; expected a string",
        ),
        (
            {"environment": {"MIG_STRATEGY": "all"}},
            r"migStrategy: 'all' is not valid; valid: none, single, mixed",
        ),
        (
            {
                "config": {
                    "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 0}]}}
                }
            },
            r"sharing\.timeSlicing\.resources\[0\]\.replicas: 0 is not valid; expected an integer >= 1",
        ),
        (
            {
                "config": {
                    "sharing": {
                        "mps": {"resources": [{"name": "a", "replicas": 2}, {"name": "a", "replicas": 3}]}
                    }
                }
            },
            r"sharing\.mps\.resources: 'a' is listed twice",
        ),
    ],
)
def test_bad_records_name_the_field_the_value_and_what_is_valid(record, message):
    with pytest.raises(pc.ConfigError, match=message):
        pc.served(record)


def test_read_record(tmp_path):
    assert pc.read_record(str(tmp_path / "absent.json")) is None
    path = tmp_path / "served.json"
    path.write_text(json.dumps({"mode": "gpuops", "config": TIME_SLICING}))
    assert pc.read_record(str(path))["config"] == TIME_SLICING
    path.write_text("{mode: gpuops")
    with pytest.raises(pc.ConfigError, match=r"served\.json: not valid JSON"):
        pc.read_record(str(path))
