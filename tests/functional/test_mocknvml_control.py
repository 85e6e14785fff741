# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Runtime fault injection in the mock NVML: MOCK_NVML_CONTROL_DIR (lab/profiles/README.md).

A file xid-<index>-<code> in the control directory is one XID critical error for that GPU,
delivered through the NVML event set and then deleted; a file lost-<index> makes that GPU
answer NVML_ERROR_GPU_IS_LOST while it exists. Each test drives nvidia-ml-py in a
subprocess (the library is selected per process) and writes the control files from there,
as a test harness next to a long-running daemon would.
"""

import subprocess

import pytest
import yaml
from _mock import PROFILES, mock_env, run_python
from conftest import VENV_BIN, process_env, run_module

H100 = "h100-8x-nvswitch.yaml"
GPU_IS_LOST = 15

# Shared by the scripts: NVML up, every GPU's handle and UUID, a helper that writes a
# control file, and the events one wait loop collects.
PRELUDE = """
import json
import os
import time

import pynvml

CONTROL = os.environ["MOCK_NVML_CONTROL_DIR"]
XID = pynvml.nvmlEventTypeXidCriticalError


def text(value):
    return value.decode() if isinstance(value, bytes) else value


def touch(name):
    with open(os.path.join(CONTROL, name), "w") as handle:
        handle.write("injected by the test\\n")


def present(name):
    return os.path.exists(os.path.join(CONTROL, name))


# Events until none comes: timeout_ms for the first, 200 ms for each further one.
def drain(events_set, timeout_ms):
    seen = []
    while True:
        try:
            data = pynvml.nvmlEventSetWait(events_set, timeout_ms if not seen else 200)
        except pynvml.NVMLError_Timeout:
            return seen
        seen.append({"uuid": text(pynvml.nvmlDeviceGetUUID(data.device)), "type": data.eventType,
                     "xid": data.eventData, "gi": data.gpuInstanceId, "ci": data.computeInstanceId})


pynvml.nvmlInit()
handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
uuids = [text(pynvml.nvmlDeviceGetUUID(h)) for h in handles]
"""

XID_SCRIPT = (
    PRELUDE
    + """
# Nobody listens yet: the file stays, for whichever process registers the GPU.
touch("xid-2-79")
pynvml.nvmlDeviceGetMemoryInfo(handles[2])
kept_unregistered = present("xid-2-79")
os.remove(os.path.join(CONTROL, "xid-2-79"))

first, second = pynvml.nvmlEventSetCreate(), pynvml.nvmlEventSetCreate()
for handle in handles:
    pynvml.nvmlDeviceRegisterEvents(handle, XID, first)
pynvml.nvmlDeviceRegisterEvents(handles[2], XID, second)
touch("xid-2-79")
events_first = drain(first, 2000)
events_second = drain(second, 200)
consumed = not present("xid-2-79")

# Only GPU 0 registered in a third set: an XID for GPU 4 goes to `first` alone.
third = pynvml.nvmlEventSetCreate()
pynvml.nvmlDeviceRegisterEvents(handles[0], XID, third)
touch("xid-4-48")
events_third = drain(third, 200)
events_first_again = drain(first, 2000)
for events_set in (first, second, third):
    pynvml.nvmlEventSetFree(events_set)
pynvml.nvmlShutdown()
print(json.dumps({"uuids": uuids, "xid_type": XID, "kept_unregistered": kept_unregistered,
                  "first": events_first, "second": events_second, "consumed": consumed,
                  "third": events_third, "first_again": events_first_again,
                  "left": sorted(os.listdir(CONTROL))}))
"""
)

LOST_SCRIPT = (
    PRELUDE
    + """
def answer(call, *args):
    try:
        call(*args)
        return "ok"
    except pynvml.NVMLError as error:
        return error.value


touch("lost-3")
while_lost = {
    "uuid_3": answer(pynvml.nvmlDeviceGetUUID, handles[3]),
    "memory_3": answer(pynvml.nvmlDeviceGetMemoryInfo, handles[3]),
    "handle_3": answer(pynvml.nvmlDeviceGetHandleByIndex, 3),
    "others": [answer(pynvml.nvmlDeviceGetUUID, h) for i, h in enumerate(handles) if i != 3],
    "count": pynvml.nvmlDeviceGetCount(),
}
os.remove(os.path.join(CONTROL, "lost-3"))
back = {
    "uuid_3": text(pynvml.nvmlDeviceGetUUID(handles[3])),
    "handle_3": answer(pynvml.nvmlDeviceGetHandleByIndex, 3),
}
pynvml.nvmlShutdown()
print(json.dumps({"uuids": uuids, "while_lost": while_lost, "back": back}))
"""
)

TIMEOUT_SCRIPT = (
    PRELUDE
    + """
events_set = pynvml.nvmlEventSetCreate()
for handle in handles:
    pynvml.nvmlDeviceRegisterEvents(handle, XID, events_set)
waits = {}
for timeout_ms in (0, 300, 1000):
    started = time.monotonic()
    try:
        pynvml.nvmlEventSetWait(events_set, timeout_ms)
        waits[timeout_ms] = "event"
    except pynvml.NVMLError_Timeout:
        waits[timeout_ms] = time.monotonic() - started
pynvml.nvmlEventSetFree(events_set)
pynvml.nvmlShutdown()
print(json.dumps({"waits": waits}))
"""
)


@pytest.fixture
def control(tmp_path):
    path = tmp_path / "control"
    path.mkdir()
    return path


def h100_uuids():
    with open(str(PROFILES / H100)) as handle:
        return [device["uuid"] for device in yaml.safe_load(handle)["devices"]]


def run(mocknvml, control, script):
    return run_python(script, env=mock_env(mocknvml, H100, MOCK_NVML_CONTROL_DIR=control))


def test_xid_file_is_one_event_for_every_set_that_registered_the_gpu(mocknvml, control):
    seen = run(mocknvml, control, XID_SCRIPT)
    uuids = seen["uuids"]
    assert uuids == h100_uuids()
    assert seen["kept_unregistered"] is True  # no set had registered GPU 2 yet
    expected = [{"uuid": uuids[2], "type": seen["xid_type"], "xid": 79, "gi": 0xFFFFFFFF, "ci": 0xFFFFFFFF}]
    assert seen["first"] == expected
    assert seen["second"] == expected
    assert seen["consumed"] is True
    # GPU 4's XID: not for the set that registered GPU 0 only, once for the set with all.
    assert seen["third"] == []
    assert [(e["uuid"], e["xid"]) for e in seen["first_again"]] == [(uuids[4], 48)]
    assert seen["left"] == []


def test_lost_file_loses_that_gpu_until_it_is_deleted(mocknvml, control):
    seen = run(mocknvml, control, LOST_SCRIPT)
    lost = seen["while_lost"]
    assert lost["uuid_3"] == GPU_IS_LOST
    assert lost["memory_3"] == GPU_IS_LOST
    assert lost["handle_3"] == GPU_IS_LOST
    assert lost["others"] == ["ok"] * 7
    assert lost["count"] == 8  # a lost GPU is still counted, as by the driver
    assert seen["back"] == {"uuid_3": seen["uuids"][3], "handle_3": "ok"}


def test_event_wait_honours_its_timeout(mocknvml, control):
    waits = run(mocknvml, control, TIMEOUT_SCRIPT)["waits"]
    assert 0 <= waits["0"] < 1.0
    assert 0.25 <= waits["300"] < 5.0
    assert 0.9 <= waits["1000"] < 10.0


def test_gpu_info_reports_a_gpu_lost_through_the_control_dir(mocknvml, control, tmp_path):
    (control / "lost-6").write_text("")
    env = mock_env(mocknvml, H100, MOCK_NVML_CONTROL_DIR=control)
    result = run_module({"sysfs_root": str(tmp_path)}, env=env)
    assert not result.get("failed"), result.get("msg")
    assert [(gone["index"], gone["nvml_code"]) for gone in result["lost_gpus"]] == [(6, GPU_IS_LOST)]
    assert result["gpu_count"] == 7
    assert (control / "lost-6").exists()  # a lost file is state, not an event: never consumed


# --- Profiles the mock refuses ------------------------------------------------------------


@pytest.mark.parametrize(
    ("drop", "message"),
    [("version", "no top-level `version`"), ("driver_version", "no system.driver_version")],
)
def test_profile_without_version_is_refused(mocknvml, tmp_path, drop, message):
    doc = yaml.safe_load((PROFILES / "t4-1x.yaml").read_text())
    if drop == "version":
        del doc["version"]
    else:
        del doc["system"]["driver_version"]
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(doc))
    code = "\n".join(
        [
            "import pynvml",
            "try:",
            "    pynvml.nvmlInit()",
            "except pynvml.NVMLError as error:",
            "    print(error.value)",
        ]
    )
    proc = subprocess.run(
        [str(VENV_BIN / "python"), "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env=process_env({"LD_LIBRARY_PATH": mocknvml, "MOCK_NVML_CONFIG": str(broken)}),
        timeout=60,
    )
    assert proc.stdout.strip() == "999"  # NVML_ERROR_UNKNOWN: no silent fallback to 8 GPUs
    assert message in proc.stderr
