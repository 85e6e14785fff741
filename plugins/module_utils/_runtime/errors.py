# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Typed errors of the runtime configuration: the file must stay untouched.

Private to the gpuops.k8s collection. The module maps them to fail_json; the drift guard
logs them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class RuntimeConfigError(Exception):
    """The configuration cannot be edited as asked; the file must stay untouched."""


class ConfigParseError(RuntimeConfigError):
    pass


class ConfigShapeError(RuntimeConfigError):
    pass


class UnsupportedOption(RuntimeConfigError):
    pass


class MissingTomlkit(RuntimeConfigError):
    """tomlkit is needed to write TOML and is not installed; traceback: the import's."""

    def __init__(self, traceback):
        super(MissingTomlkit, self).__init__("tomlkit is required")
        self.traceback = traceback
