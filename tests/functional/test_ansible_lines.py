# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ansible-core lines are written in several places; scripts/ansible-matrix.py's LINES
is the one table. The dev environment's pin, the floor in meta/runtime.yml and galaxy.yml's
words about support must say what it says, or a line bump leaves one of them behind."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import ansible.release
import yaml

ROOT = Path(__file__).resolve().parents[2]


def matrix():
    spec = importlib.util.spec_from_file_location("ansible_matrix", ROOT / "scripts" / "ansible-matrix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pinned_core(path):
    (pin,) = re.findall(r"^ansible-core==(\S+)$", path.read_text(), re.MULTILINE)
    return pin


def test_the_dev_line_is_the_newest_and_the_dev_environment_runs_its_pin():
    table = matrix()
    newest, core, _python = table.LINES[-1]
    assert newest == table.DEV_LINE
    assert pinned_core(ROOT / "requirements" / "dev.in") == core
    assert pinned_core(ROOT / "requirements" / "dev.txt") == core
    # This test runs in the dev venv (make pytest).
    assert ansible.release.__version__ == core


def test_the_floor_and_the_words_about_support_name_the_matrix_lines():
    lines = [line for line, _core, _python in matrix().LINES]
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"] == ">=%s.0" % lines[0]
    description = yaml.safe_load((ROOT / "galaxy.yml").read_text())["description"]
    assert "ansible-core %s to %s" % (lines[0], lines[-1]) in description, description
