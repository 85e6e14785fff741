# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""health on its own: HealthState, and HealthWatcher's decisions over a fake NVML, /dev and
clock (and once over device nodes made with mknod)."""

import dataclasses
import logging
import os
import stat
import types

import pytest
from fakes import Clock, FakeMetrics, gpu

from gpuops_device_plugin.config import Config
from gpuops_device_plugin.discovery import LOST, NOT_LISTED, Event, ProbeError
from gpuops_device_plugin.health import (
    DEVICE_NODE,
    Fault,
    HealthState,
    HealthWatcher,
    node_problem,
    probe_fault,
    watched_nodes,
)

NVIDIA_MAJOR = 195


class FakeNvml:
    """discovery.Nvml's health calls: watch, wait, probe."""

    def __init__(self, events=(), unwatchable=(), down=None):
        self.events = list(events)
        self.unwatchable = list(unwatchable)
        self.down = dict(down or {})  # uuid -> ProbeError
        self.probed = []

    def watch(self, uuids):
        return [u for u in uuids if u in self.unwatchable]

    def wait(self, _timeout_ms):
        if self.events:
            event = self.events.pop(0)
            if isinstance(event, Exception):
                raise event
            return event
        return None

    def probe(self, uuid):
        self.probed.append(uuid)
        return self.down.get(uuid)


class FakeDev:
    """A /dev for os.stat: {path: (is a character device, major, minor)}; others are missing."""

    def __init__(self, nodes=None):
        self.nodes = dict(nodes or {})

    @classmethod
    def nvidia(cls, *minors, root="/dev"):
        return cls({"%s/nvidia%d" % (root, m): (True, NVIDIA_MAJOR, m) for m in minors})

    def __call__(self, path):
        if path not in self.nodes:
            raise FileNotFoundError(2, "No such file or directory", path)
        char, major, minor = self.nodes[path]
        mode = (stat.S_IFCHR if char else stat.S_IFREG) | 0o666
        return types.SimpleNamespace(st_mode=mode, st_rdev=os.makedev(major, minor) if char else 0)


def watcher(gpus, nvml=None, config=None, **kwargs):
    state = HealthState()
    clock = Clock()
    metrics = FakeMetrics()
    config = config or Config()
    watch = HealthWatcher(nvml or FakeNvml(), gpus, state, config, metrics=metrics, clock=clock, **kwargs)
    return watch, state, clock, metrics


def lost(text="GPU is lost"):
    return ProbeError(LOST, text)


def xid(number, uuid="GPU-0", instance=None):
    return Event(uuid, "xid", number, instance)


# HealthState


def test_mark_reports_only_what_changed_and_listeners_hear_only_changes():
    state = HealthState()
    heard = []
    state.subscribe(lambda: heard.append(state.unhealthy()))
    assert state.mark(["a", "b"], False, "XID 79") == ["a", "b"]
    assert state.mark(["a"], False, "again") == []  # already unhealthy: no news
    assert heard == [{"a": "XID 79", "b": "XID 79"}]
    assert state.mark(["a", "c"], True, "recovered") == ["a"]  # c was never unhealthy
    assert not state.healthy("b")
    assert state.healthy("a")
    assert state.healthy("c")
    assert len(heard) == 2


def test_an_unsubscribed_listener_hears_nothing():
    state = HealthState()
    heard = []
    unsubscribe = state.subscribe(lambda: heard.append(1))
    unsubscribe()
    unsubscribe()  # twice is harmless
    state.mark(["a"], False, "x")
    assert heard == []


def test_a_listener_may_read_the_state_it_is_told_about():
    # Listeners run outside the lock: one that reads the state must not deadlock.
    state = HealthState()
    seen = []
    state.subscribe(lambda: seen.append(state.healthy("a")))
    state.mark(["a"], False, "x")
    assert seen == [False]


# HealthWatcher: events


def test_a_critical_xid_makes_its_gpu_unhealthy_and_is_counted():
    watch, state, _clock, metrics = watcher([gpu(0), gpu(1)])
    watch.on_event(xid(79))
    assert state.unhealthy() == {"GPU-0": "XID 79 on GPU GPU-0"}
    assert metrics.health_events == [("xid", "79", "unhealthy")]


def test_an_ignored_xid_changes_nothing_but_is_counted():
    watch, state, _clock, metrics = watcher([gpu(0)], config=Config(ignored_xids=frozenset({13})))
    watch.on_event(xid(13))
    assert state.unhealthy() == {}
    assert metrics.health_events == [("xid", "13", "ignored")]


def test_a_double_bit_ecc_error_is_never_ignored():
    watch, state, _clock, metrics = watcher([gpu(0)], config=Config(ignored_xids=frozenset({48})))
    watch.on_event(Event("GPU-0", "ecc_double_bit", None, None))
    assert state.unhealthy() == {"GPU-0": "double-bit ECC error on GPU GPU-0"}
    assert metrics.health_events == [("ecc_double_bit", "", "unhealthy")]


def test_an_event_on_a_mig_instance_takes_only_that_mig_device():
    watch, state, _clock, _metrics = watcher([gpu(0, migs=(1, 2))])
    watch.on_event(xid(79, instance=2))
    assert sorted(state.unhealthy()) == ["MIG-0-1"]


def test_an_event_on_a_whole_mig_gpu_takes_the_gpu_and_all_its_mig_devices():
    watch, state, _clock, _metrics = watcher([gpu(0, migs=(1, 2))])
    watch.on_event(xid(79))
    assert sorted(state.unhealthy()) == ["GPU-0", "MIG-0-0", "MIG-0-1"]


def test_an_event_from_a_gpu_that_no_longer_answers_takes_every_gpu():
    # NVML could not say whose event it was (uuid None): nothing can be trusted.
    watch, state, _clock, _metrics = watcher([gpu(0), gpu(1)])
    watch.on_event(Event(None, "xid", 79, None))
    assert state.unhealthy() == {"GPU-0": "XID 79 on GPU unknown", "GPU-1": "XID 79 on GPU unknown"}


# HealthWatcher: probes and recovery


def test_a_gpu_that_does_not_answer_is_unhealthy_and_counted_once():
    nvml = FakeNvml(down={"GPU-1": lost()})
    watch, state, _clock, metrics = watcher([gpu(0), gpu(1)], nvml)
    watch.probe_all()
    watch.probe_all()
    assert state.unhealthy() == {"GPU-1": "GPU GPU-1 does not answer: GPU is lost"}
    assert metrics.health_events == [("lost", "", "unhealthy")]
    assert nvml.probed == ["GPU-0", "GPU-1", "GPU-0", "GPU-1"]


def test_a_gpu_recovers_only_after_the_quiet_period_without_faults():
    config = Config(recovery_quiet_seconds=30.0)
    watch, state, clock, metrics = watcher([gpu(0, migs=(1,))], config=config)
    watch.on_event(xid(79))
    clock.now += 29.9
    watch.probe_all()
    assert not state.healthy("GPU-0")
    clock.now += 0.1
    watch.probe_all()
    assert state.unhealthy() == {}  # the GPU and its MIG device
    assert metrics.health_events[-1] == ("recovery", "", "healthy")


def test_a_new_fault_restarts_the_quiet_period():
    config = Config(recovery_quiet_seconds=30.0)
    watch, state, clock, _metrics = watcher([gpu(0)], config=config)
    watch.on_event(xid(79))
    clock.now += 20
    watch.on_event(xid(94))
    clock.now += 20  # 40 s after the first fault, 20 s after the last
    watch.probe_all()
    assert not state.healthy("GPU-0")


def test_without_recovery_an_unhealthy_gpu_stays_unhealthy():
    config = Config(recovery_enabled=False, recovery_quiet_seconds=1.0)
    watch, state, clock, _metrics = watcher([gpu(0)], config=config)
    watch.on_event(xid(79))
    clock.now += 3600
    watch.probe_all()
    assert not state.healthy("GPU-0")


def test_a_lost_gpu_that_answers_again_recovers():
    nvml = FakeNvml(down={"GPU-0": lost()})
    watch, state, clock, _metrics = watcher([gpu(0)], nvml, config=Config(recovery_quiet_seconds=5.0))
    watch.probe_all()
    assert not state.healthy("GPU-0")
    del nvml.down["GPU-0"]
    clock.now += 5
    watch.probe_all()
    assert state.healthy("GPU-0")


# The re-probe's verdict: NVML's answer and the device node


@pytest.mark.parametrize(
    ("answer", "node", "fault"),
    [
        (None, None, None),
        (
            ProbeError(NOT_LISTED, "Not Found"),
            None,
            Fault(NOT_LISTED, "NVML no longer lists GPU GPU-3: Not Found"),
        ),
        (lost(), None, Fault(LOST, "GPU GPU-3 does not answer: GPU is lost")),
        (
            None,
            "/dev/nvidia3 is gone",
            Fault(DEVICE_NODE, "device node of GPU GPU-3: /dev/nvidia3 is gone"),
        ),
        # NVML's answer wins: a GPU it cannot reach says more than its node.
        (
            ProbeError(NOT_LISTED, "Not Found"),
            "/dev/nvidia3 is gone",
            Fault(NOT_LISTED, "NVML no longer lists GPU GPU-3: Not Found"),
        ),
    ],
    ids=["fine", "not-listed", "lost", "node-gone", "not-listed-and-node-gone"],
)
def test_probe_fault_decides_from_nvml_and_the_device_node(answer, node, fault):
    assert probe_fault("GPU-3", answer, node) == fault


@pytest.mark.parametrize(
    ("nodes", "problem"),
    [
        ({"/dev/nvidia3": (True, NVIDIA_MAJOR, 3)}, None),
        ({}, "/dev/nvidia3 is gone"),
        ({"/dev/nvidia3": (False, 0, 0)}, "/dev/nvidia3 is not a character device"),
        ({"/dev/nvidia3": (True, NVIDIA_MAJOR, 4)}, "/dev/nvidia3 is character device 195:4, not minor 3"),
    ],
    ids=["its-node", "gone", "a-file", "another-minor"],
)
def test_node_problem_wants_a_character_device_with_the_gpus_minor(nodes, problem):
    assert node_problem("/dev/nvidia3", 3, stat=FakeDev(nodes)) == problem


def test_node_problem_on_real_nodes(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("device nodes need mknod: run as root (make test does)")
    node = str(tmp_path / "nvidia3")
    os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, 3))
    assert node_problem(node, 3) is None
    assert node_problem(node, 2) == "%s is character device 195:3, not minor 2" % node
    os.unlink(node)
    assert node_problem(node, 3) == "%s is gone" % node
    open(node, "w").close()  # a regular file where the node was
    assert node_problem(node, 3) == "%s is not a character device" % node


def test_nodes_are_checked_where_any_gpus_node_is_there(caplog):
    gpus = [gpu(0, minor=0), gpu(1, minor=1), gpu(2)]
    with caplog.at_level(logging.WARNING):
        nodes = watched_nodes(gpus, "/dev", FakeDev.nvidia(0))
    # GPU 1's node is missing while GPU 0's is there: checked, so it turns unhealthy.
    assert nodes == {"GPU-0": ("/dev/nvidia0", 0), "GPU-1": ("/dev/nvidia1", 1)}
    assert caplog.messages == ["NVML gave no minor number for GPU GPU-2: their device nodes are not checked"]


def test_no_node_is_checked_where_none_is_there_and_that_is_said_once(caplog):
    with caplog.at_level(logging.WARNING):
        nodes = watched_nodes([gpu(0, minor=0), gpu(1, minor=1)], "/srv/dev", FakeDev.nvidia(0, 1))
    assert nodes == {}
    assert caplog.messages == [
        "none of the GPUs' device nodes (/srv/dev/nvidia0, /srv/dev/nvidia1) exists: device nodes "
        "are not checked (nvidiaDevRoot says where the host's /dev is)"
    ]


def test_a_gpu_whose_device_node_goes_is_unhealthy_with_its_mig_devices_and_comes_back():
    dev = FakeDev.nvidia(0, 1)
    config = Config(recovery_quiet_seconds=30.0)
    gpus = [gpu(0, minor=0), gpu(1, migs=(1,), minor=1)]
    watch, state, clock, metrics = watcher(gpus, config=config, stat=dev)
    watch.probe_all()
    assert state.unhealthy() == {}
    del dev.nodes["/dev/nvidia1"]
    watch.probe_all()
    reason = "device node of GPU GPU-1: /dev/nvidia1 is gone"
    assert state.unhealthy() == {"GPU-1": reason, "MIG-1-0": reason}
    watch.probe_all()
    assert metrics.health_events == [(DEVICE_NODE, "", "unhealthy")]  # counted once
    clock.now += 60
    watch.probe_all()  # still gone: the quiet period starts when it is back
    assert not state.healthy("GPU-1")
    dev.nodes["/dev/nvidia1"] = (True, NVIDIA_MAJOR, 1)
    clock.now += 29
    watch.probe_all()
    assert not state.healthy("GPU-1")
    clock.now += 1
    watch.probe_all()
    assert state.unhealthy() == {}
    assert metrics.health_events[-1] == ("recovery", "", "healthy")


def test_a_node_recreated_with_another_minor_is_a_fault():
    dev = FakeDev.nvidia(0, 1)
    watch, state, _clock, _metrics = watcher([gpu(0, minor=0), gpu(1, minor=1)], stat=dev)
    dev.nodes["/dev/nvidia1"] = (True, NVIDIA_MAJOR, 0)
    watch.probe_all()
    assert state.unhealthy() == {
        "GPU-1": "device node of GPU GPU-1: /dev/nvidia1 is character device 195:0, not minor 1"
    }


def test_a_node_missing_at_start_beside_present_ones_is_unhealthy_at_the_first_probe():
    watch, state, _clock, _metrics = watcher([gpu(0, minor=0), gpu(1, minor=1)], stat=FakeDev.nvidia(0))
    watch.probe_all()
    assert state.unhealthy() == {"GPU-1": "device node of GPU GPU-1: /dev/nvidia1 is gone"}


def test_the_device_directory_is_the_watchers_to_choose():
    dev = FakeDev.nvidia(0, root="/host/dev")
    watch, state, _clock, _metrics = watcher([gpu(0, minor=0)], stat=dev, dev_dir="/host/dev")
    assert watch.nodes == {"GPU-0": ("/host/dev/nvidia0", 0)}
    del dev.nodes["/host/dev/nvidia0"]
    watch.probe_all()
    assert state.unhealthy() == {"GPU-0": "device node of GPU GPU-0: /host/dev/nvidia0 is gone"}


def test_a_gpu_nvml_no_longer_lists_is_unhealthy_and_comes_back_when_listed_again():
    nvml = FakeNvml(down={"GPU-1": ProbeError(NOT_LISTED, "Not Found")})
    watch, state, clock, metrics = watcher([gpu(0), gpu(1)], nvml, config=Config(recovery_quiet_seconds=5.0))
    watch.probe_all()
    assert state.unhealthy() == {"GPU-1": "NVML no longer lists GPU GPU-1: Not Found"}
    assert metrics.health_events == [(NOT_LISTED, "", "unhealthy")]
    del nvml.down["GPU-1"]
    clock.now += 5
    watch.probe_all()
    assert state.unhealthy() == {}


# HealthWatcher: the thread


def test_run_handles_events_and_stops_when_asked():
    config = dataclasses.replace(Config(), probe_interval_seconds=3600.0)

    class StopAfterEvents(FakeNvml):
        def wait(self, timeout_ms):
            event = super().wait(timeout_ms)
            if not self.events:
                watch.stopping.set()
            return event

    nvml = StopAfterEvents(events=[xid(79), xid(13)], unwatchable=["GPU-1"])
    watch, state, _clock, metrics = watcher([gpu(0), gpu(1)], nvml, config=config)
    watch.run()
    assert state.unhealthy() == {"GPU-0": "XID 79 on GPU GPU-0"}
    assert metrics.health_events == [("xid", "79", "unhealthy"), ("xid", "13", "ignored")]
    assert nvml.probed == ["GPU-0", "GPU-1"]  # one probe at start, the next an hour away


def test_a_failing_watcher_marks_every_device_unhealthy():
    nvml = FakeNvml(events=[RuntimeError("NVML went away")])
    watch, state, _clock, _metrics = watcher([gpu(0, migs=(1,)), gpu(1)], nvml)
    watch.run()
    assert state.unhealthy() == dict.fromkeys(["GPU-0", "MIG-0-0", "GPU-1"], "health watcher failed")
