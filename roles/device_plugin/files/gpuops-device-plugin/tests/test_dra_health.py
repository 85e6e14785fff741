# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dra.health and the stream of dra.server: every device's health, at once, on each change
and again every refresh, and a stream that ends when the kubelet goes."""

import threading

from gpuops_device_plugin.dra import health
from gpuops_device_plugin.dra.devices import gpu_devices
from gpuops_device_plugin.dra.server import HealthStreams
from gpuops_device_plugin.health import HealthState

DEVICES = gpu_devices([{"index": i, "uuid": f"GPU-{i}"} for i in range(2)])


class StreamContext:
    """grpc.ServicerContext as a stream uses it: active until cancelled, callbacks on the end."""

    def __init__(self):
        self.active = True
        self.callbacks = []

    def is_active(self):
        return self.active

    def add_callback(self, callback):
        self.callbacks.append(callback)
        return True

    def cancel(self):
        self.active = False
        for callback in self.callbacks:
            callback()


def statuses(reports):
    return [(r.pool, r.device, r.status, r.message) for r in reports]


def test_every_device_is_reported_with_its_health():
    state = HealthState()
    state.mark(["GPU-1"], False, "XID 79 on GPU GPU-1")

    reports = health.report(DEVICES, "node-a", state, now=1700000000.7)

    assert statuses(reports) == [
        ("node-a", "gpu-0", "HEALTHY", ""),
        ("node-a", "gpu-1", "UNHEALTHY", "XID 79 on GPU GPU-1"),
    ]
    assert {r.updated for r in reports} == {1700000000}


def test_a_mig_device_is_as_healthy_as_its_gpu():
    migs = {
        "current": "enabled",
        "devices": [{"uuid": "MIG-0", "gpu_instance_id": 1, "compute_instance_id": 0}],
    }
    devices = gpu_devices([{"index": 0, "uuid": "GPU-0", "mig": migs}, {"index": 1, "uuid": "GPU-1"}])
    state = HealthState()
    state.mark(["GPU-0"], False, "XID 79 on GPU GPU-0")

    assert statuses(health.report(devices, "node-a", state, now=0)) == [
        ("node-a", "gpu-0-mig-1-0", "UNHEALTHY", "XID 79 on GPU GPU-0"),
        ("node-a", "gpu-1", "HEALTHY", ""),
    ]


def test_devices_nobody_watches_are_unknown():
    reports = health.report(DEVICES, "node-a", HealthState(), now=0, watched=False)
    assert {(r.status, r.message) for r in reports} == {("UNKNOWN", health.NOT_WATCHED)}


def test_a_long_reason_is_cut_to_what_the_kubelet_keeps():
    state = HealthState()
    state.mark(["GPU-0"], False, "x" * 2000)
    (first, _second) = health.report(DEVICES, "node-a", state, now=0)
    assert len(first.message) == 1024
    assert first.message.endswith("...")


def follow(streams, context):
    """Run a stream on a thread; return its messages as they come (a list) and the thread."""
    received, arrived = [], threading.Condition()

    def run():
        for reports in streams.watch(context):
            with arrived:
                received.append(statuses(reports))
                arrived.notify_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def wait(count, timeout=5.0):
        with arrived:
            assert arrived.wait_for(lambda: len(received) >= count, timeout), received
            return received[count - 1]

    return wait, thread


def test_the_stream_sends_the_list_at_once_on_each_change_and_ends_with_the_rpc():
    state = HealthState()
    streams = HealthStreams(lambda: health.report(DEVICES, "node-a", state, now=0), state, refresh_s=60)
    context = StreamContext()
    wait, thread = follow(streams, context)

    assert [s[2] for s in wait(1)] == ["HEALTHY", "HEALTHY"]
    state.mark(["GPU-0"], False, "GPU GPU-0 does not answer: lost")
    assert wait(2)[0] == ("node-a", "gpu-0", "UNHEALTHY", "GPU GPU-0 does not answer: lost")
    state.mark(["GPU-0"], True, "re-probe succeeded")
    assert [s[2] for s in wait(3)] == ["HEALTHY", "HEALTHY"]

    context.cancel()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert state._listeners == []  # the stream's callback went with it


def test_the_stream_repeats_the_list_when_nothing_changes():
    state = HealthState()
    streams = HealthStreams(lambda: health.report(DEVICES, "node-a", state, now=0), state, refresh_s=0.05)
    context = StreamContext()
    wait, thread = follow(streams, context)

    assert wait(4) == wait(1)
    context.cancel()
    thread.join(timeout=5)
    assert not thread.is_alive()
