# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fakes of the small interfaces the daemon's parts take from each other (daemon.py wires
the real ones): metrics, a GPU in gpu_info's shape, a clock."""

from __future__ import annotations

import contextlib
from collections import Counter


class Labelled:
    """A prometheus child: .labels(...).inc() counts per label tuple."""

    def __init__(self):
        self.counts: Counter = Counter()

    def labels(self, *labels):
        parent = self

        class _Child:
            def inc(self, amount=1):
                parent.counts[labels] += amount

        return _Child()


class FakeMetrics:
    """The methods and counters of metrics.Metrics that the parts call."""

    def __init__(self):
        self.registrations = Labelled()
        self.allocations = Labelled()
        self.allocation_errors = Labelled()
        self.health_events: list[tuple[str, str, str]] = []
        self.devices: dict[str, tuple[int, int]] = {}
        self.rpcs: list[str] = []

    def health_event(self, kind, xid, action):
        self.health_events.append((kind, xid, action))

    def set_devices(self, resource, healthy, unhealthy):
        self.devices[resource] = (healthy, unhealthy)

    @contextlib.contextmanager
    def rpc(self, method):
        self.rpcs.append(method)
        yield


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def gpu(index, migs=(), minor=None):
    """A GPU in gpu_info's shape; migs: gpu_instance_id of each MIG device; minor: its
    device node's minor number (gpu_info's minor_number), when the test needs one."""
    found = {
        "index": index,
        "uuid": "GPU-%d" % index,
        "mig": {
            "current": "enabled" if migs else "disabled",
            "devices": [
                {"index": slot, "uuid": "MIG-%d-%d" % (index, slot), "gpu_instance_id": gi}
                for slot, gi in enumerate(migs)
            ],
        },
    }
    if minor is not None:
        found["minor_number"] = minor
    return found
