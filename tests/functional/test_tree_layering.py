# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Calls go one way: tests and bench use lab/, lab/ uses the product; never back.

Lab equipment (mock NVML builds, GPU profiles, the NVIDIA peer build, Debian runtimes,
the daemon harness and kubelet stand-in) lives under lab/. A script or module under lab/
or bench/ that reaches into tests/ would make the benchmarks and `make site` depend on
the test suite's layout, which is what issue 17 point 5 undid.
"""

import re

from conftest import REPO

# A path into tests/ as code writes it: "tests/x", ROOT / "tests" / ..., or an import of
# a module that only exists under tests/ (conftest, the functional helpers).
_REACHES_INTO_TESTS = re.compile(
    r"""(?<![\w.-])tests/|["']tests["']|^\s*(?:from|import)\s+(?:conftest|_mock|resolve|runtimes|gpus)\b"""
)
_CODE_SUFFIXES = {".py", ".sh", ".yml", ".yaml", ".go", ".mk"}


def _code_lines(path):
    """(number, line) for lines that are code, not comments or docstring prose."""
    in_docstring = False
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        stripped = line.strip()
        if path.suffix == ".py" and stripped.count('"""') % 2 == 1:
            in_docstring = not in_docstring
            continue
        if in_docstring or stripped.startswith(("#", "//")):
            continue
        yield number, line


def offending_lines(roots):
    found = []
    for root in roots:
        for path in sorted(root.rglob("*")):
            if not path.is_file() or (path.suffix not in _CODE_SUFFIXES and path.name != "Makefile"):
                continue
            found.extend(
                "%s:%d: %s" % (path.relative_to(root.parent), number, line.strip())
                for number, line in _code_lines(path)
                if _REACHES_INTO_TESTS.search(line)
            )
    return found


def test_lab_and_bench_do_not_reach_into_tests():
    assert offending_lines([REPO / "lab", REPO / "bench"]) == []


def test_the_check_sees_a_reach_into_tests(tmp_path):
    """The check itself can fail: each way of reaching into tests/ is reported."""
    (tmp_path / "bench.py").write_text(
        'import sys\nsys.path.insert(0, str(ROOT / "tests" / "daemon"))\n'
        "from gpus import node\n"
        "# tests/daemon in a comment is prose, not a dependency\n"
    )
    (tmp_path / "build.sh").write_text('profile="$root/tests/profiles/t4-1x.yaml"\n')
    found = offending_lines([tmp_path])
    assert [entry.split(":", 2)[1] for entry in found] == ["2", "3", "1"]
