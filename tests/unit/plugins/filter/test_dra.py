# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The DRA filters gpu_validation reads a node in mode dra with: its mode, what its driver's
slice offers, and the GPUs the test pod's ResourceClaim was allocated."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s.plugins.filter.dra import FilterModule
from ansible_collections.gpuops.k8s.tests.unit.plugins.module_utils.doctor_observations import gpu_info, uuid
from ansible_collections.gpuops.k8s.tests.unit.plugins.module_utils.test_doctor_dra import (
    DRIVER,
    SOCKET,
    device,
    slices,
)

FILTERS = FilterModule().filters()


def claim(*results, allocated=True):
    """k8s_info of a ResourceClaim allocated the devices RESULTS ((pool, device) pairs)."""
    status = {}
    if allocated:
        status = {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": DRIVER, "pool": pool, "device": name}
                        for pool, name in results
                    ]
                }
            }
        }
    return {"resources": [{"metadata": {"name": "gpuops-validate-gpu-01-gpu-abcde"}, "status": status}]}


def test_the_mode_filter():
    state = {"paths": {SOCKET: {"type": "socket", "exists": True}}}
    assert FILTERS["gpu_serving_mode"]({"device_plugin": {"mode": None}}, state, SOCKET) == "dra"
    assert (
        FILTERS["gpu_serving_mode"]({"device_plugin": {"mode": "nvidia"}}, state, SOCKET) == "device_plugin"
    )


def test_the_driver_filter_names_nvidias_only_where_recorded():
    nvidia = FILTERS["dra_driver"]({"device_plugin": {"mode": "nvidia_dra"}}, DRIVER)
    assert nvidia == {"mode": "nvidia_dra", "driver": "gpu.nvidia.com"}
    for record in ({"device_plugin": {"mode": "dra"}}, {"device_plugin": None}, {}):
        assert FILTERS["dra_driver"](record, DRIVER) == {"mode": "dra", "driver": DRIVER}
    with pytest.raises(AnsibleFilterError, match="dra_driver: the registered results must be dicts"):
        FILTERS["dra_driver"]("nvidia_dra", DRIVER)


def test_the_offer_counts_untainted_gpus():
    xid = {"key": "gpu.gpuops.k8s/xid", "value": "48", "effect": "NoSchedule"}
    offer = FILTERS["dra_offer"](
        gpu_info(), slices([device(0), device(1), device(2, [xid])]), DRIVER, "gpu-01"
    )
    assert offer == {"offered": 2, "devices": 3, "tainted": 1, "published": True}
    assert FILTERS["dra_offer"](gpu_info(), {"resources": []}, DRIVER, "gpu-01")["published"] is False


def test_a_mig_device_offers_its_gpu():
    gpu = gpu_info(range(1))
    gpu["gpus"][0]["mig"] = {"devices": [{"uuid": "MIG-aaaa"}]}
    mig = device(0, device_uuid="MIG-aaaa")
    mig["attributes"]["parentUUID"] = {"string": uuid(0)}
    assert FILTERS["dra_offer"](gpu, slices([mig]), DRIVER, "gpu-01")["offered"] == 1


def test_the_claims_gpus_are_the_slices_uuid_attributes():
    found = FILTERS["dra_claim_uuids"](claim(("gpu-01", "gpu-2")), slices(), DRIVER)
    assert found == {"uuids": [uuid(2)], "note": None}


def test_a_qualified_uuid_attribute_is_read_too():
    qualified = device(1)
    qualified["attributes"] = {DRIVER + "/uuid": {"string": uuid(1)}}
    found = FILTERS["dra_claim_uuids"](claim(("gpu-01", "gpu-1")), slices([qualified]), DRIVER)
    assert found["uuids"] == [uuid(1)]


@pytest.mark.parametrize(
    "result, note",
    [
        ({"resources": []}, "the test pod's ResourceClaim could not be read"),
        (claim(allocated=False), "the test pod's ResourceClaim has no allocated device"),
        (
            claim(("gpu-01", "gpu-7")),
            "the claim's allocated device(s) gpu.gpuops.k8s/gpu-01/gpu-7 are not in the driver's "
            "ResourceSlices with a uuid attribute",
        ),
    ],
)
def test_why_the_claims_gpus_cannot_be_had(result, note):
    assert FILTERS["dra_claim_uuids"](result, slices(), DRIVER) == {"uuids": [], "note": note}


def test_results_that_are_not_dicts_are_filter_errors():
    with pytest.raises(AnsibleFilterError, match=r"^dra_offer: the registered results must be dicts$"):
        FILTERS["dra_offer"](gpu_info(), None, DRIVER, "gpu-01")
