# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""dra.checkpoint: claims survive a restart, repeats are no-ops, bad files and writes are loud."""

import json
import os

import pytest

from gpuops_device_plugin.dra import checkpoint as dc
from gpuops_device_plugin.dra import files

UID = "0b9a6c1e-5a7d-4c39-9f6e-2d1f3c4b5a69"
GPU0 = dc.PreparedDevice(
    pool="node-a",
    device="gpu-0",
    request_names=["gpu"],
    cdi_device_ids=[f"k8s.gpu.example.com/claim={UID}-gpu-0"],
)


@pytest.fixture
def path(tmp_path):
    return str(tmp_path / "checkpoint.json")


def test_a_missing_file_is_an_empty_checkpoint(path):
    checkpoint = dc.Checkpoint.load(path)
    assert checkpoint.get(UID) is None
    assert checkpoint.stale() == []
    assert not os.path.exists(path)


def test_claims_round_trip_through_the_file(path):
    checkpoint = dc.Checkpoint.load(path)
    checkpoint.begin(UID, "team-a", "train")
    checkpoint.complete(UID, [GPU0])
    checkpoint.begin("other", "team-b", "infer")

    again = dc.Checkpoint.load(path)
    assert again.get(UID) == dc.PreparedClaim(
        uid=UID, namespace="team-a", name="train", state=dc.COMPLETED, devices=(GPU0,)
    )
    assert again.get("other") == dc.PreparedClaim(
        uid="other", namespace="team-b", name="infer", state=dc.STARTED
    )
    with open(path) as handle:
        document = json.load(handle)
    assert document["version"] == dc.VERSION
    assert document["claims"][UID]["devices"] == [
        {
            "pool": "node-a",
            "device": "gpu-0",
            "request_names": ["gpu"],
            "cdi_device_ids": [f"k8s.gpu.example.com/claim={UID}-gpu-0"],
        }
    ]


def test_a_devices_time_slice_round_trips_and_is_written_only_where_set(path):
    sliced = dc.PreparedDevice("node-a", "gpu-1", ["gpu"], [f"k8s.gpu.example.com/claim={UID}-gpu-1"], "Long")
    checkpoint = dc.Checkpoint.load(path)
    checkpoint.begin(UID, "team-a", "train")
    checkpoint.complete(UID, [GPU0, sliced])

    assert dc.Checkpoint.load(path).get(UID).devices == (GPU0, sliced)
    assert [claim.uid for claim in dc.Checkpoint.load(path).completed()] == [UID]
    with open(path) as handle:
        devices = json.load(handle)["claims"][UID]["devices"]
    # A file of a daemon that knew no time-slices reads as one without them.
    assert ["time_slice" in device for device in devices] == [False, True]
    assert devices[1]["time_slice"] == "Long"


def test_complete_again_with_the_same_devices_writes_nothing(path):
    checkpoint = dc.Checkpoint.load(path)
    checkpoint.begin(UID, "team-a", "train")
    first = checkpoint.complete(UID, [GPU0])
    written = os.stat(path).st_mtime_ns, os.stat(path).st_ino

    assert checkpoint.complete(UID, [GPU0]) == first
    assert (os.stat(path).st_mtime_ns, os.stat(path).st_ino) == written


def test_complete_again_with_other_devices_is_refused(path):
    checkpoint = dc.Checkpoint.load(path)
    checkpoint.begin(UID, "team-a", "train")
    checkpoint.complete(UID, [GPU0])
    other = dc.PreparedDevice(pool="node-a", device="gpu-1", request_names=["gpu"], cdi_device_ids=[])

    with pytest.raises(dc.ClaimStateError, match=UID):
        checkpoint.complete(UID, [other])
    assert checkpoint.get(UID).devices == (GPU0,)


def test_complete_without_begin_is_refused(path):
    with pytest.raises(dc.ClaimStateError, match="without begin"):
        dc.Checkpoint.load(path).complete(UID, [GPU0])


def test_begin_on_a_prepared_claim_keeps_its_devices(path):
    checkpoint = dc.Checkpoint.load(path)
    checkpoint.begin(UID, "team-a", "train")
    checkpoint.complete(UID, [GPU0])

    claim = checkpoint.begin(UID, "team-a", "train")
    assert claim.state == dc.COMPLETED
    assert claim.devices == (GPU0,)


def test_a_crash_between_begin_and_complete_shows_as_stale(path):
    checkpoint = dc.Checkpoint.load(path)
    checkpoint.begin(UID, "team-a", "train")
    checkpoint.begin("done", "team-b", "infer")
    checkpoint.complete("done", [GPU0])
    del checkpoint  # the daemon dies here, before completing UID

    restarted = dc.Checkpoint.load(path)
    assert [claim.uid for claim in restarted.stale()] == [UID]
    # Prepare retried after the restart carries on from the recorded start.
    assert restarted.begin(UID, "team-a", "train").state == dc.STARTED
    restarted.complete(UID, [GPU0])
    assert restarted.stale() == []


def test_forget_removes_the_claim_and_repeats_quietly(path):
    checkpoint = dc.Checkpoint.load(path)
    checkpoint.begin(UID, "team-a", "train")
    checkpoint.complete(UID, [GPU0])

    checkpoint.forget(UID)
    checkpoint.forget(UID)
    checkpoint.forget("never-prepared")
    assert checkpoint.get(UID) is None
    assert dc.Checkpoint.load(path).get(UID) is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "is not JSON"),
        ("[]", "has no format version"),
        ('{"claims": {}}', "has no format version"),
        ('{"version": 2, "claims": {}}', "has format version 2; this daemon reads version 1"),
        ('{"version": 1}', "has no claims object"),
        ('{"version": 1, "claims": {"u": {"state": "started"}}}', "malformed claim"),
        (
            '{"version": 1, "claims": {"u": {"namespace": "n", "name": "c", "state": "prepared",'
            ' "devices": []}}}',
            "malformed claim",
        ),
        (
            '{"version": 1, "claims": {"u": {"namespace": "n", "name": "c", "state": "completed",'
            ' "devices": [{"pool": "p", "device": "d", "request_names": "gpu", "cdi_device_ids": []}]}}}',
            "malformed claim",
        ),
    ],
)
def test_a_bad_file_is_an_error_naming_the_path(path, text, problem):
    with open(path, "w") as handle:
        handle.write(text)

    with pytest.raises(dc.CheckpointFileError, match=problem) as raised:
        dc.Checkpoint.load(path)
    assert raised.value.path == path
    assert path in str(raised.value)


def test_a_failed_rename_leaves_the_previous_file_and_state(path, monkeypatch):
    checkpoint = dc.Checkpoint.load(path)
    checkpoint.begin(UID, "team-a", "train")
    with open(path, "rb") as handle:
        before = handle.read()

    def fail(source, target):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", fail)
    with pytest.raises(dc.CheckpointFileError, match="No space left") as raised:
        checkpoint.complete(UID, [GPU0])
    monkeypatch.undo()

    assert raised.value.path == path
    with open(path, "rb") as handle:
        assert handle.read() == before
    assert os.listdir(os.path.dirname(path)) == ["checkpoint.json"]  # no temporary left
    assert checkpoint.get(UID).state == dc.STARTED
    assert dc.Checkpoint.load(path).get(UID).state == dc.STARTED
