# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What every rule of the GPU doctor's diagnosis shares: a finding's shape, its severities,
and reading numbers and lists out of registered results as Jinja would.

Private to the gpuops.k8s collection. Pure. The rules are in _doctor (and the rooms it
imports: _doctor_gpus, _doctor_running); nothing here calls back up.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

FAIL = "fail"
WARN = "warn"


def finding(check, severity, message, fix):
    return {"check": check, "severity": severity, "message": message, "fix": fix}


def to_int(value):
    """As Jinja's int filter: an int, else int(float(value)), else 0."""
    try:
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return 0


def resources(result):
    """k8s_info's resources (a failed or skipped read has none)."""
    return (result or {}).get("resources") or []


def gpu_count(gpu):
    return to_int((gpu or {}).get("gpu_count"))


def node_status(node):
    """The Node's status (k8s_info's first resource), {} where there is no Node."""
    nodes = resources(node)
    return (nodes[0].get("status") or {}) if nodes else {}


def listing(items, limit=None):
    """items joined with ", ", the first limit of them and "..." beyond."""
    items = list(items)
    if limit is not None and len(items) > limit:
        return ", ".join(items[:limit]) + ", ..."
    return ", ".join(items)
