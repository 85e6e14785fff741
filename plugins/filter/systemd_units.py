# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Documentation: systemd_units_to_change.yml beside this file.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

# What ansible.builtin.systemd_service does nothing for, read as node_state_info reads a
# unit: enabled (systemctl is-enabled answers "enabled") and, to be started, active.
ENABLED = "enabled"
STARTED = "started"
ACTIVE = "active"


def systemd_units_to_change(wanted, node_state):
    """The units of WANTED ({name, state?}: enabled, and started where state is started) that
    node_state_info's read (NODE_STATE) does not show exactly so, in WANTED's order. Any other
    state (not read, not found, static, activating) is systemd's to judge: the unit stays in."""
    if not isinstance(wanted, list) or not all(
        isinstance(unit, dict) and unit.get("name") for unit in wanted
    ):
        raise AnsibleFilterError("systemd_units_to_change: each wanted unit must be a dict with a name")
    if not isinstance(node_state, dict):
        raise AnsibleFilterError("systemd_units_to_change: node_state must be node_state_info's result")
    unsupported = [unit["state"] for unit in wanted if unit.get("state") not in (None, STARTED)]
    if unsupported:
        raise AnsibleFilterError(
            "systemd_units_to_change: state %r is not supported; valid: started, or none" % unsupported[0]
        )
    read = (node_state.get("systemd") or {}).get("units") or {}
    return [unit for unit in wanted if not _kept(unit, read.get(unit["name"]) or {})]


def _kept(unit, status):
    if status.get("UnitFileState") != ENABLED:
        return False
    return unit.get("state") != STARTED or status.get("ActiveState") == ACTIVE


class FilterModule:
    def filters(self):
        return {"systemd_units_to_change": systemd_units_to_change}
