# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: changed_tasks
type: aggregate
short_description: Record which tasks changed, per host, for the molecule check-mode tests
description:
  - Test support, not shipped. At the end of each playbook run, writes
    C($GPUOPS_CHANGED_TASKS_DIR/<playbook>-<check|real>-<n>.json) with each host's changed task names
    in order, so a test can compare a check-mode converge with the real one.
options: {}
"""

import json
import os

from ansible import context
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "changed_tasks"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super(CallbackModule, self).__init__()
        self.changed = {}
        self.playbook = "playbook"

    def v2_playbook_on_start(self, playbook):
        self.playbook = os.path.splitext(os.path.basename(playbook._file_name))[0]

    def v2_runner_on_ok(self, result):
        if result._result.get("changed"):
            self.changed.setdefault(result._host.get_name(), []).append(result._task.get_name())

    def v2_playbook_on_stats(self, stats):
        directory = os.environ.get("GPUOPS_CHANGED_TASKS_DIR")
        if not directory:
            return
        os.makedirs(directory, exist_ok=True)
        prefix = "%s-%s-" % (self.playbook, "check" if context.CLIARGS.get("check") else "real")
        count = len([n for n in os.listdir(directory) if n.startswith(prefix)])
        with open(os.path.join(directory, "%s%d.json" % (prefix, count + 1)), "w") as handle:
            json.dump(self.changed, handle, indent=2, sort_keys=True)
