# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An extended resource a gone device plugin left in the Node's status.

A node moved from a device plugin to DRA keeps `nvidia.com/gpu` in its status: the kubelet
removes a plugin's resource only while it remembers the plugin (its device checkpoint), and
the role clears that checkpoint (tasks/dra.yml) because a kubelet restarted with it fails
every container asking for the resource. What stays is worse: the scheduler sees
`nvidia.com/gpu: 8` in allocatable, takes the device plugin's path instead of the
DeviceClass's extendedResourceName (KEP-5004), and the kubelet, knowing no such resource,
starts the pod without a GPU. Seen on the lab, Kubernetes 1.37.2.

So the DRA front end removes that resource from its Node's capacity and allocatable, only
when no device plugin at all serves on the node (no socket beside the kubelet's own in
its device-plugins directory accepts a connection): a plugin serving it would advertise it again, and the
role refuses to install DRA beside one. The Node authorizer lets a kubelet's credentials
patch their own Node's status.
"""

from __future__ import annotations

import logging
import os
import socket

LOG = logging.getLogger(__name__)


class NodeStatusError(Exception):
    """The Node's status could not be read or patched."""


KUBELET_SOCKET = "kubelet.sock"


def device_plugin_sockets(device_plugins_dir: str) -> list[str]:
    """The device plugins serving in the kubelet's directory: their sockets (not the
    kubelet's own) that accept a connection. A plugin killed without cleaning up leaves its
    socket file, which refuses; it serves nothing."""
    try:
        names = os.listdir(device_plugins_dir)
    except OSError:
        return []
    return sorted(
        name
        for name in names
        if name.endswith(".sock")
        and name != KUBELET_SOCKET
        and _serving(os.path.join(device_plugins_dir, name))
    )


def _serving(path: str) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def stale_patch(status: dict, resource: str) -> list[dict]:
    """The JSON patch removing resource from a Node status's capacity and allocatable."""
    pointer = resource.replace("~", "~0").replace("/", "~1")
    return [
        {"op": "remove", "path": f"/status/{field}/{pointer}"}
        for field in ("capacity", "allocatable")
        if resource in (status.get(field) or {})
    ]


def clear_stale(core_api, node: str, resource: str, device_plugins_dir: str) -> bool:
    """Remove resource from the Node's status where no device plugin can be serving it.

    Returns whether it patched. API errors propagate as NodeStatusError (the caller logs
    and tries again).
    """
    if not resource or device_plugin_sockets(device_plugins_dir):
        return False
    try:
        return _clear(core_api, node, resource)
    except Exception as error:  # ApiException, urllib3 and socket errors
        reason = f"{error.status} {error.reason}" if hasattr(error, "status") else str(error)
        raise NodeStatusError(
            f"cannot remove a gone device plugin's {resource} from Node {node}'s status: {reason}"
        ) from error


def _clear(core_api, node: str, resource: str) -> bool:
    # GET nodes, not nodes/status: the Node authorizer gives a kubelet's credentials the
    # one and PATCH nodes/status, not GET nodes/status (403 on the lab).
    status = core_api.read_node(node).to_dict().get("status") or {}
    patch = stale_patch(status, resource)
    if not patch:
        return False
    capacity = (status.get("capacity") or {}).get(resource)
    core_api.patch_node_status(node, patch)
    LOG.warning(
        "Node %s advertised %s %s from a device plugin no longer on it: removed from its status, "
        "so the scheduler gives pods asking for %s GPUs through DRA (the DeviceClass's "
        "extendedResourceName) instead of starting them without one",
        node,
        resource,
        capacity,
        resource,
    )
    return True
