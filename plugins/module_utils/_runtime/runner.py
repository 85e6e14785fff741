# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""nvidia_runtime's run: plan, report what the plan changes, apply it unless in check mode.

Private to the gpuops.k8s collection. Raises typed errors (errors.py); the module turns
them into fail_json. Not shipped with the drift guard (it runs without Ansible).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tempfile

from .errors import MissingTomlkit
from .plan import apply, plan
from .toml_edit import UNRENDERED
from .toml_text import HAS_TOMLKIT, TOMLKIT_IMPORT_ERROR


class ModuleFiles:
    """apply()'s io through AnsibleModule: atomic_move, backup_local."""

    def __init__(self, module):
        self.module = module

    def backup(self, path):
        return self.module.backup_local(path)

    def write(self, path, text):
        """Atomically replace path with text; a new file (and its directory) is made 0644/0755."""
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        existed = os.path.exists(path)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        self.module.atomic_move(tmp, path)
        if not existed:
            self.module.set_mode_if_different(path, "0644", False)

    def remove(self, path):
        os.remove(path)


def run(module):
    """The module's result for module.params; writes only outside check mode."""
    params = module.params
    without_tomlkit = params["runtime"] != "docker" and not HAS_TOMLKIT
    if without_tomlkit and not module.check_mode:
        raise MissingTomlkit(TOMLKIT_IMPORT_ERROR)
    planned = plan(params)
    changes = planned.changes()
    for warning in planned.warnings:
        module.warn(warning)
    if without_tomlkit:
        unrendered = sorted(path for path, text in changes.items() if text is UNRENDERED)
        module.warn(
            "tomlkit is not installed on this node yet (the real run needs it): the same plan, read "
            "with Python's tomllib, predicts changed, restart_required and the files%s"
            % (
                "; the new text of %s only tomlkit writes: the diff leaves it out" % ", ".join(unrendered)
                if unrendered
                else ""
            )
        )
    result = {
        "changed": bool(changes),
        "restart_required": planned.restart_required(),
        "changed_files": sorted(changes),
        "created_files": sorted(path for path in changes if not planned.existed[path]),
        "backup_files": {},
        "config_mode": planned.config_mode,
        "parameters": planned.parameters,
        "planned_files": planned.planned_files,
        "distribution": planned.distribution,
        "diff": [
            {"before_header": path, "after_header": path, "before": planned.before[path], "after": text or ""}
            for path, text in sorted(changes.items())
            if text is not UNRENDERED
        ],
    }
    if planned.config_version is not None:
        result["config_version"] = planned.config_version
    if planned.msg:
        result["msg"] = planned.msg
    if changes and not module.check_mode:
        result["backup_files"] = apply(changes, params["backup"], ModuleFiles(module))
    return result
