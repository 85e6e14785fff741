# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU doctor's rules on whether each part of the chain runs: the services check (the
container runtime's, the kubelet's and our device plugin's systemd units) and the
node_ready check (the Node's Ready condition, as the kubelet last reported it).

Private to the gpuops.k8s collection. Pure, as _doctor_gpus: observations and settings
in, findings out. node_state is gpuops.k8s.node_state_info's result, gpu gpu_info's
(its device_plugin.mode says whether our daemon serves the node), node k8s_info's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpuops.k8s.plugins.module_utils._doctor_base import (
    FAIL,
    WARN,
    finding,
    node_status,
    resources,
    to_int,
)
from ansible_collections.gpuops.k8s.plugins.module_utils._node_state import unit_name

# ActiveState values of a unit that runs (reloading: running, re-reading its configuration).
_RUNNING = ("active", "reloading")

# (setting naming the unit, what it is, what its being down means).
_PARTS = (
    (
        "runtime_service",
        "the container runtime",
        "no container starts or stops on the node, and the kubelet reports the Node NotReady",
    ),
    (
        "kubelet_service",
        "the kubelet",
        "nothing runs the node's pods, device plugins cannot register, and the Node goes NotReady",
    ),
    (
        "plugin_service",
        "the device plugin",
        "the kubelet holds the node's GPUs unhealthy and gives them to no new pod",
    ),
)


def _state(status):
    """'inactive (dead)', with the result and restarts where they say more."""
    text = "%s (%s)" % (status.get("ActiveState"), status.get("SubState"))
    if status.get("LoadState") not in (None, "loaded"):
        text = "%s, %s" % (status["LoadState"], text)
    if status.get("Result") in (None, "", "success"):  # stopped on purpose, or never started
        return text
    details = ["result %s" % status["Result"]]
    code, main = status.get("ExecMainCode"), status.get("ExecMainStatus")
    # waitid(2)'s si_code: 1 the process exited with that status, 2 or 3 a signal ended it.
    if code == "1" and to_int(main):
        details.append("exit status %s" % main)
    elif code in ("2", "3"):
        details.append("killed by signal %s" % main)
    if to_int(status.get("NRestarts")):
        details.append("restarted %s times" % status["NRestarts"])
    return text + ", " + ", ".join(details)


# The device_plugin modes whose plugin is our daemon's unit (its device plugin or its DRA front end).
_OUR_MODES = ("gpuops", "dra")
# What the daemon's unit being down means in mode dra (the kubelet calls the driver for each claim).
_DRA_DOWN = "the kubelet cannot prepare the node's ResourceClaims, so no new pod gets its GPUs"


def _plugin_mode(gpu):
    return ((gpu or {}).get("device_plugin") or {}).get("mode")


def _plugin_is_ours(gpu):
    """Whether the node's device plugin is our daemon's unit: the record (or gpu_doctor_device_plugin)
    says mode gpuops or dra (True), says another mode (False), or there is none (None: judged where
    installed)."""
    mode = _plugin_mode(gpu)
    return None if mode is None else mode in _OUR_MODES


def services(obs, settings):
    systemd = obs["node_state"].get("systemd") or {}
    if not systemd.get("available"):  # no systemd, or it did not answer: nothing to judge
        return []
    units = systemd.get("units") or {}
    ours = _plugin_is_ours(obs["gpu"])
    found = []
    for setting, what, means in _PARTS:
        name = settings[setting]
        if not name or (setting == "plugin_service" and ours is False):
            continue
        part, consequence = what, means
        if setting == "plugin_service" and _plugin_mode(obs["gpu"]) == "dra":
            part, consequence = "the DRA driver", _DRA_DOWN
        full = unit_name(name)
        status = units.get(full)
        if status is None:  # not asked of node_state_info
            continue
        if status.get("LoadState") == "not-found":
            # A kubelet or runtime under another unit (k3s, a kubelet in a container) cannot be
            # judged by it; the Node's Ready condition still is (node_ready).
            if setting == "plugin_service" and ours:
                found.append(
                    finding(
                        "services",
                        FAIL,
                        "%s is not installed, though the node's device plugin is ours (mode %s): %s"
                        % (full, _plugin_mode(obs["gpu"]), consequence),
                        "run role device_plugin (device_plugin_mode %s)" % _plugin_mode(obs["gpu"]),
                    )
                )
            continue
        active, sub = status.get("ActiveState"), status.get("SubState")
        if active in _RUNNING:
            continue
        if active == "activating" and sub != "auto-restart":
            found.append(
                finding(
                    "services",
                    WARN,
                    "%s (%s) is starting: %s" % (full, part, _state(status)),
                    "look again in a few seconds; if it stays there, systemctl status %s and "
                    "journalctl -u %s say what it waits for" % (name, name),
                )
            )
            continue
        fix = "journalctl -u %s says why it stopped (systemctl status %s); start it: systemctl start %s" % (
            name,
            name,
            name,
        )
        if status.get("LoadState") == "masked":
            fix = "unmask it (systemctl unmask %s), then start it; journalctl -u %s says why it stopped" % (
                name,
                name,
            )
        if sub == "auto-restart":
            fix = "journalctl -u %s says why it keeps exiting; fix that, and systemd starts it again" % name
        found.append(
            finding(
                "services",
                FAIL,
                "%s is %s: %s is down, so %s" % (full, _state(status), part, consequence),
                fix,
            )
        )
    return found


# Fragments of the kubelet's NotReady messages, and what to do about each, in this order.
_NOT_READY_FIXES = (
    (
        ("container runtime is down", "container runtime status check", "container runtime not ready"),
        "the kubelet cannot reach the container runtime: start %(runtime)s (systemctl status %(runtime)s, "
        "journalctl -u %(runtime)s; see services); the Node turns Ready once the runtime answers",
    ),
    (
        ("PLEG is not healthy",),
        "the kubelet's pod lifecycle events stall, usually on a container runtime that hangs: "
        "journalctl -u %(runtime)s and journalctl -u %(kubelet)s",
    ),
    (
        ("network plugin", "NetworkReady=false", "cni"),
        "the pod network is not ready: the CNI plugin's pod on the node, and /etc/cni/net.d",
    ),
)


def node_ready(obs, settings):
    if not resources(obs["node"]):  # the allocatable check says the Node is missing
        return []
    conditions = node_status(obs["node"]).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None) or {}
    status = ready.get("status") or "Unknown"
    if status == "True":
        return []
    names = {"runtime": settings["runtime_service"], "kubelet": settings["kubelet_service"]}
    message = ready.get("message") or "no Ready condition reported"
    if status == "Unknown":
        fix = (
            "the kubelet stopped reporting the node's status: it is down or cannot reach the API server "
            "(systemctl status %(kubelet)s, journalctl -u %(kubelet)s; see services)" % names
        )
    else:
        fix = next(
            (text % names for fragments, text in _NOT_READY_FIXES if any(f in message for f in fragments)),
            "journalctl -u %s on the node says why; kubectl describe node %s shows every condition"
            % (names["kubelet"], settings["node_name"]),
        )
    return [
        finding(
            "node_ready",
            FAIL,
            "Node %s is not Ready (Ready=%s, %s): %s"
            % (settings["node_name"], status, ready.get("reason") or "no reason", message),
            fix,
        )
    ]
