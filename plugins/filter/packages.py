# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
# Documentation: packages_missing.yml, selections_to_change.yml and requirements_missing.yml
# beside this file.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.k8s.plugins.module_utils import _packages as packages


def _filter(name, decide):
    def run(*args):
        try:
            return decide(*args)
        except packages.PackagesInputError as error:
            raise AnsibleFilterError("%s: %s" % (name, error)) from error

    return run


class FilterModule:
    def filters(self):
        return {
            "packages_missing": _filter("packages_missing", packages.packages_missing),
            "selections_to_change": _filter("selections_to_change", packages.selections_to_change),
            "requirements_missing": _filter("requirements_missing", packages.requirements_missing),
        }
