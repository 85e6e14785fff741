# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Documentation: doctor_findings.yml beside this file.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s.plugins.module_utils._doctor import DoctorInputError, diagnose


def doctor_findings(observed, settings, skip=None, only=None):
    """The gpu_doctor findings for one node; see module_utils/_doctor.py."""
    if not isinstance(observed, dict) or not isinstance(settings, dict):
        raise AnsibleFilterError("doctor_findings: the observations and the settings must be dicts")
    try:
        return diagnose(observed, settings, skip or (), only)
    except DoctorInputError as error:
        raise AnsibleFilterError("doctor_findings: %s" % error) from error


class FilterModule:
    def filters(self):
        return {"doctor_findings": doctor_findings}
