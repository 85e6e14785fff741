# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""discovery on its own: the Nvml adapter over a fake pynvml module (no NVML library)."""

import types

import pytest

from gpuops_device_plugin import discovery
from gpuops_device_plugin.discovery import (
    LOST,
    NO_INSTANCE,
    NOT_LISTED,
    Event,
    Nvml,
    NvmlLibraryNotFound,
    ProbeError,
)

XID, ECC = 0x8, 0x2  # NVML's event type bits (XidCriticalError, DoubleBitEccError)
TIMEOUT, NOT_FOUND = 10, 6  # NVML_ERROR_TIMEOUT, NVML_ERROR_NOT_FOUND


class NVMLError(Exception):
    def __init__(self, value, text="NVML error"):
        super().__init__(text)
        self.value = value


def fake_pynvml(supported=None, unregistrable=(), answers=(), waits=(), lost_uuids=(), *, unlisted=()):
    """A pynvml with the calls discovery makes; `calls` records what was asked."""
    calls = []
    handles = {}

    def handle_by_uuid(uuid):
        calls.append(("handle", uuid))
        if uuid in unlisted:
            raise NVMLError(NOT_FOUND, "Not Found")
        if uuid not in answers:
            raise NVMLError(15, "GPU is lost")
        return handles.setdefault(uuid, types.SimpleNamespace(uuid=uuid))

    def register(handle, mask, event_set):
        if handle.uuid in unregistrable:
            raise NVMLError(3, "Not Supported")
        calls.append(("register", handle.uuid, mask, event_set))

    pending = list(waits)

    def wait(event_set, timeout_ms):
        calls.append(("wait", event_set, timeout_ms))
        item = pending.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def uuid_of(handle):
        if handle.uuid in lost_uuids:
            raise NVMLError(15, "GPU is lost")
        return handle.uuid.encode()

    return types.SimpleNamespace(
        calls=calls,
        NVMLError=NVMLError,
        NVML_ERROR_TIMEOUT=TIMEOUT,
        NVML_ERROR_NOT_FOUND=NOT_FOUND,
        nvmlEventTypeXidCriticalError=XID,
        nvmlEventTypeDoubleBitEccError=ECC,
        nvmlEventSetCreate=lambda: "event-set",
        nvmlEventSetFree=lambda event_set: calls.append(("free", event_set)),
        nvmlDeviceGetHandleByUUID=handle_by_uuid,
        nvmlDeviceGetSupportedEventTypes=lambda handle: (supported or {}).get(handle.uuid, XID | ECC | 0x1),
        nvmlDeviceRegisterEvents=register,
        nvmlEventSetWait_v2=wait,
        nvmlDeviceGetUUID=uuid_of,
        nvmlDeviceGetPciInfo=lambda handle: calls.append(("pci", handle.uuid)),
        nvmlDeviceGetMemoryInfo=lambda handle: calls.append(("memory", handle.uuid)),
    )


def use(monkeypatch, fake):
    monkeypatch.setattr(discovery, "pynvml", fake)
    return fake


def event_data(uuid, kind, data=0, instance=NO_INSTANCE):
    return types.SimpleNamespace(
        device=types.SimpleNamespace(uuid=uuid), eventType=kind, eventData=data, gpuInstanceId=instance
    )


def test_start_without_pynvml_says_what_is_missing(monkeypatch):
    monkeypatch.setattr(discovery, "pynvml", None)
    with pytest.raises(NvmlLibraryNotFound, match="nvidia-ml-py"):
        Nvml().start()


def test_start_and_stop_open_and_close_one_session(monkeypatch):
    use(monkeypatch, fake_pynvml())
    seen = []

    class Session:
        def __enter__(self):
            seen.append("init")

        def __exit__(self, *exc):
            seen.append("shutdown")

    monkeypatch.setattr(discovery.nvml_discovery, "NvmlSession", Session)
    nvml = Nvml()
    nvml.start()
    nvml.stop()
    nvml.stop()  # a second stop does nothing
    assert seen == ["init", "shutdown"]


def test_discover_is_gpu_infos_discovery_under_the_same_sysfs(monkeypatch):
    asked = []
    monkeypatch.setattr(
        discovery.nvml_discovery, "discover", lambda root: asked.append(root) or {"gpus": ["g"]}
    )
    assert Nvml(sysfs_root="/fake/sys").discover() == {"gpus": ["g"]}
    assert asked == ["/fake/sys"]


def test_watch_registers_xid_and_ecc_events_each_gpu_supports(monkeypatch):
    fake = use(
        monkeypatch,
        fake_pynvml(answers={"GPU-0", "GPU-1", "GPU-2"}, supported={"GPU-1": XID}, unregistrable={"GPU-2"}),
    )
    failed = Nvml().watch(["GPU-0", "GPU-1", "GPU-2", "GPU-3"])
    assert failed == ["GPU-2", "GPU-3"]  # refused the registration; does not answer
    registered = [c for c in fake.calls if c[0] == "register"]
    assert registered == [
        ("register", "GPU-0", XID | ECC, "event-set"),
        ("register", "GPU-1", XID, "event-set"),  # only what it supports
    ]


def test_wait_maps_nvml_events(monkeypatch):
    use(
        monkeypatch,
        fake_pynvml(
            waits=[
                event_data("GPU-0", XID, data=79),
                event_data("GPU-1", ECC, data=123, instance=2),
                event_data("GPU-2", XID, data=48),
            ],
            lost_uuids={"GPU-2"},
        ),
    )
    nvml = Nvml()
    assert nvml.wait(250) == Event("GPU-0", "xid", 79, None)
    assert nvml.wait(250) == Event("GPU-1", "ecc_double_bit", None, 2)
    assert nvml.wait(250) == Event(None, "xid", 48, None)  # the GPU no longer says who it is


def test_wait_returns_none_on_timeout_and_raises_other_errors(monkeypatch):
    fake = use(monkeypatch, fake_pynvml(waits=[NVMLError(TIMEOUT), NVMLError(999, "Unknown Error")]))
    nvml = Nvml()
    assert nvml.wait(250) is None
    with pytest.raises(NVMLError, match="Unknown Error"):
        nvml.wait(250)
    assert [c[2] for c in fake.calls if c[0] == "wait"] == [250, 250]


def test_probe_asks_the_gpu_and_returns_nvmls_error_text(monkeypatch):
    fake = use(monkeypatch, fake_pynvml(answers={"GPU-0"}, unlisted={"GPU-2"}))
    nvml = Nvml()
    assert nvml.probe("GPU-0") is None
    assert ("pci", "GPU-0") in fake.calls
    assert ("memory", "GPU-0") in fake.calls
    assert nvml.probe("GPU-1") == ProbeError(LOST, "GPU is lost")
    # NVML_ERROR_NOT_FOUND from the lookup by UUID: NVML no longer lists that GPU.
    assert nvml.probe("GPU-2") == ProbeError(NOT_LISTED, "Not Found")


def test_stop_frees_the_event_set(monkeypatch):
    fake = use(monkeypatch, fake_pynvml(answers={"GPU-0"}))
    nvml = Nvml()
    nvml.watch(["GPU-0"])
    nvml.stop()
    assert ("free", "event-set") in fake.calls
