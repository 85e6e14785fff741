# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Documentation: gpu_serving_mode.yml, dra_driver.yml, dra_offer.yml and dra_claim_uuids.yml
# beside this file.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s.plugins.module_utils import _dra_view as view


def _dicts(name, *values):
    if not all(isinstance(value, dict) for value in values):
        raise AnsibleFilterError("%s: the registered results must be dicts" % name)


def gpu_serving_mode(gpu, node_state, registration_socket):
    """dra or device_plugin; see module_utils/_dra_view.py serving_mode."""
    _dicts("gpu_serving_mode", gpu, node_state)
    return view.serving_mode(gpu, node_state, registration_socket)


def dra_driver(gpu, own_driver):
    """{mode, driver}: the DRA driver recorded serving the node; see _dra_view.recorded_dra."""
    _dicts("dra_driver", gpu)
    return view.recorded_dra(gpu, own_driver)


def dra_offer(gpu, slices, driver, node_name):
    """{offered, devices, tainted}: the driver's slice for the node against NVML's GPUs."""
    _dicts("dra_offer", gpu, slices)
    offer = view.Offer(gpu, slices, driver, node_name)
    return dict(offer.summary(), published=offer.devices is not None)


def dra_claim_uuids(claim, slices, driver):
    """{uuids, note}: the GPUs a ResourceClaim was allocated, by the slice's uuid attribute."""
    _dicts("dra_claim_uuids", claim, slices)
    return view.claim_uuids(claim, slices, driver)


class FilterModule:
    def filters(self):
        return {
            "gpu_serving_mode": gpu_serving_mode,
            "dra_driver": dra_driver,
            "dra_offer": dra_offer,
            "dra_claim_uuids": dra_claim_uuids,
        }
