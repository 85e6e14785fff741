# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What a DRA driver finds around it on one node, without a cluster: claims in the API and
the toolkit's CDI spec.

claim() builds a ResourceClaim in the API's JSON (what `kubectl get resourceclaim -o json`
prints and the kubernetes client's sanitize_for_serialization makes of a
ResourceV1ResourceClaim), allocated by the scheduler to devices of a pool; Claims holds them
by namespace and name and is a ClaimReader for dra.prepare that counts how often it was
asked. toolkit_spec() is what `nvidia-ctk cdi generate` writes for some GPUs, in its layout
(a device per GPU by index and by UUID, `all`, common edits), for tests that need more GPUs
than the real H100's spec in tests/fixtures has.
"""

from __future__ import annotations

import copy
import threading
import uuid as uuidlib

from gpuops_device_plugin.dra.devices import DRIVER


def claim(
    name,
    devices,
    *,
    namespace="default",
    uid=None,
    driver=DRIVER,
    pool="node-a",
    configs=(),
    allocated=True,
):
    """A claim allocated to devices: (request, device) pairs of driver in pool.

    configs: (requests, parameters) of driver's opaque configuration, from the claim.
    """
    document = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuidlib.uuid4())},
        "spec": {
            "devices": {
                "requests": [
                    {"name": request} for request in dict.fromkeys(request for request, _device in devices)
                ]
            }
        },
        "status": {},
    }
    if allocated:
        document["status"]["allocation"] = {
            "devices": {
                "results": [
                    {"request": request, "driver": driver, "pool": pool, "device": device}
                    for request, device in devices
                ],
                "config": [
                    {
                        "source": "FromClaim",
                        "requests": list(requests),
                        "opaque": {"driver": driver, "parameters": parameters},
                    }
                    for requests, parameters in configs
                ],
            },
            # What the scheduler writes for a node-local pool: the node the pool is named for.
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pool]}]}
                ]
            },
        }
    return document


class Claims:
    """ResourceClaims by namespace and name; calling it reads one (None when there is none)."""

    def __init__(self, *documents):
        self._lock = threading.Lock()
        self._claims = {}
        self.reads = 0
        for document in documents:
            self.put(document)

    def put(self, document):
        metadata = document["metadata"]
        with self._lock:
            self._claims[metadata["namespace"], metadata["name"]] = copy.deepcopy(document)

    def delete(self, namespace, name):
        with self._lock:
            self._claims.pop((namespace, name), None)

    def __call__(self, namespace, name):
        with self._lock:
            self.reads += 1
            return copy.deepcopy(self._claims.get((namespace, name)))


def toolkit_spec(uuids, driver_root=""):
    """nvidia-ctk's spec (kind nvidia.com/gpu) for GPUs with these UUIDs, minor = position."""

    def edits(minor, uuid):
        return {
            "deviceNodes": [
                {
                    "path": f"/dev/nvidia{minor}",
                    "major": 195,
                    "minor": minor,
                    "fileMode": 438,
                    "permissions": "rwm",
                }
            ],
            "hooks": [
                {
                    "hookName": "createRuntime",
                    "path": "/usr/bin/nvidia-cdi-hook",
                    "args": [
                        "nvidia-cdi-hook",
                        "apply-cuda-memory-limits",
                        "--driver-root",
                        driver_root,
                        "--gpu-id",
                        uuid,
                    ],
                    "env": ["NVIDIA_CTK_DEBUG=false"],
                }
            ],
        }

    by_index = [
        {"name": str(minor), "containerEdits": edits(minor, uuid)} for minor, uuid in enumerate(uuids)
    ]
    by_uuid = [{"name": uuid, "containerEdits": edits(minor, uuid)} for minor, uuid in enumerate(uuids)]
    every = {
        "name": "all",
        "containerEdits": {
            "deviceNodes": [node for d in by_index for node in d["containerEdits"]["deviceNodes"]]
        },
    }
    return {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [*by_index, *by_uuid, every],
        "containerEdits": {
            "env": ["NVIDIA_VISIBLE_DEVICES=void"],
            "deviceNodes": [
                {"path": "/dev/nvidiactl", "major": 195, "minor": 255, "fileMode": 438, "permissions": "rwm"}
            ],
            "mounts": [
                {
                    "hostPath": f"{driver_root}/usr/lib/x86_64-linux-gnu/libcuda.so.550.163.01",
                    "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.163.01",
                    "options": ["ro", "nosuid", "nodev", "rbind", "rprivate"],
                }
            ],
        },
    }
