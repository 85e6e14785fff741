# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Health checks: what answers over HTTP(S), kubectl as the lab's admin, and whether a Node
is Ready."""

from __future__ import annotations

import json
import ssl
import urllib.request

from .layout import ADMIN_KUBECONFIG, NODE_NAME, PKI
from .processes import run


def https_get(url):
    context = ssl.create_default_context(cafile=str(PKI / "ca.crt"))
    context.load_cert_chain(str(PKI / "admin.crt"), str(PKI / "admin.key"))
    with urllib.request.urlopen(url, context=context, timeout=5) as reply:
        return reply.status, reply.read().decode()


def http_get(url):
    with urllib.request.urlopen(url, timeout=5) as reply:
        return reply.status, reply.read().decode()


def kubectl(bins, *args, check=True):
    return run([str(bins["kubectl"]), "--kubeconfig", str(ADMIN_KUBECONFIG), *args], check=check)


def gpu_allocatable(bins):
    out = kubectl(bins, "get", "node", NODE_NAME, "-o", "jsonpath={.status.allocatable.nvidia\\.com/gpu}")
    return int(out.stdout or 0)


def node_ready(bins, name=NODE_NAME):
    out = kubectl(bins, "get", "node", name, "-o", "json", check=False)
    if out.returncode != 0:
        return False
    conditions = json.loads(out.stdout)["status"].get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
