# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Prometheus metrics (prometheus-client), on a registry of our own."""

from __future__ import annotations

import time
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

PREFIX = "gpuops_device_plugin_"


class Metrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.devices = Gauge(
            PREFIX + "devices",
            "Devices offered to the kubelet, by health",
            ["resource", "health"],
            registry=self.registry,
        )
        self.allocations = Counter(
            PREFIX + "allocations", "Container allocations answered", ["resource"], registry=self.registry
        )
        self.allocation_errors = Counter(
            PREFIX + "allocation_errors", "Allocate requests refused", ["resource"], registry=self.registry
        )
        self.registrations = Counter(
            PREFIX + "registrations",
            "Registrations with the kubelet",
            ["resource", "result"],
            registry=self.registry,
        )
        self.health_events = Counter(
            PREFIX + "health_events", "Health events seen", ["kind", "xid", "action"], registry=self.registry
        )
        self.rpc_seconds = Histogram(
            PREFIX + "rpc_duration_seconds",
            "Device plugin RPC latency",
            ["method"],
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0),
            registry=self.registry,
        )
        self.server = None

    def serve(self, address: str) -> None:
        if not address:
            return
        host, _sep, port = address.rpartition(":")
        self.server, _thread = start_http_server(int(port), addr=host or "0.0.0.0", registry=self.registry)

    def shutdown(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server = None

    @contextmanager
    def rpc(self, method: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.rpc_seconds.labels(method).observe(time.perf_counter() - start)

    def health_event(self, kind: str, xid: str, action: str) -> None:
        self.health_events.labels(kind, xid, action).inc()

    def set_devices(self, resource: str, healthy: int, unhealthy: int) -> None:
        self.devices.labels(resource, "Healthy").set(healthy)
        self.devices.labels(resource, "Unhealthy").set(unhealthy)
