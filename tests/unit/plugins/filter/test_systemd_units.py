# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s.plugins.filter.systemd_units import systemd_units_to_change

PATH = {"name": "nvidia-cdi-refresh.path", "state": "started"}
SERVICE = {"name": "nvidia-cdi-refresh.service"}


def read(**units):
    """node_state_info's result with these units, as systemctl show prints them."""
    return {"systemd": {"available": True, "error": None, "units": units}}


def unit(active, enabled):
    return {"LoadState": "loaded", "ActiveState": active, "SubState": "x", "UnitFileState": enabled}


def test_units_already_enabled_and_started_are_left_out():
    state = read(**{PATH["name"]: unit("active", "enabled"), SERVICE["name"]: unit("inactive", "enabled")})
    assert systemd_units_to_change([PATH, SERVICE], state) == []


@pytest.mark.parametrize(
    "path_state, expected",
    [
        (unit("inactive", "enabled"), [PATH]),  # stopped
        (unit("active", "disabled"), [PATH]),  # running, not enabled
        (unit("activating", "enabled"), [PATH]),  # systemd's to judge
        (unit("active", "static"), [PATH]),  # is-enabled answers 0 for static: still systemd's call
        ({"LoadState": "not-found", "ActiveState": "inactive", "UnitFileState": ""}, [PATH]),
    ],
)
def test_any_other_state_keeps_the_unit_for_systemd(path_state, expected):
    state = read(**{PATH["name"]: path_state, SERVICE["name"]: unit("inactive", "enabled")})
    assert systemd_units_to_change([PATH, SERVICE], state) == expected


def test_units_not_read_and_a_host_without_systemd_keep_every_unit_in_order():
    assert systemd_units_to_change([PATH, SERVICE], read()) == [PATH, SERVICE]
    no_systemd = {
        "systemd": {"available": False, "error": "systemd is not the init system here", "units": {}}
    }
    assert systemd_units_to_change([PATH, SERVICE], no_systemd) == [PATH, SERVICE]


@pytest.mark.parametrize(
    "wanted, node_state, message",
    [
        ([{"state": "started"}], read(), "each wanted unit must be a dict with a name"),
        ([{"name": "a.service", "state": "restarted"}], read(), "state 'restarted' is not supported"),
        ([PATH], "not a result", "node_state must be node_state_info's result"),
    ],
)
def test_bad_input_names_what_is_wrong(wanted, node_state, message):
    with pytest.raises(AnsibleFilterError, match=message):
        systemd_units_to_change(wanted, node_state)
