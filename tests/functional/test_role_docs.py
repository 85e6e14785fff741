# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""scripts/gen-role-docs.py: docs/variables.md is current, and the specs/defaults check bites."""

import importlib.util
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gen-role-docs.py"


def _load_generator():
    spec = importlib.util.spec_from_file_location("gen_role_docs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen = _load_generator()


def _generate(roles_dir, output, *args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--roles-dir", str(roles_dir), "--output", str(output), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def _copy_role(tmp_path, role):
    roles = tmp_path / "roles"
    shutil.copytree(REPO / "roles" / role, roles / role)
    return roles, roles / role


def _edit_yaml(path, change):
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def test_checked_in_docs_equal_generator_output():
    assert (REPO / "docs" / "variables.md").read_text(encoding="utf-8") == gen.render(REPO / "roles"), (
        "docs/variables.md is stale: run `make docs`"
    )
    result = _generate(REPO / "roles", REPO / "docs" / "variables.md", "--check")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_role_and_option_is_documented():
    text = (REPO / "docs" / "variables.md").read_text(encoding="utf-8")
    for spec_path in sorted((REPO / "roles").glob("*/meta/argument_specs.yml")):
        assert f"\n## {spec_path.parts[-3]}\n" in text
        for entry in yaml.safe_load(spec_path.read_text())["argument_specs"].values():
            for name in entry.get("options") or {}:
                assert f"| `{name}` |" in text


def test_check_mode_fails_with_a_diff_when_stale(tmp_path):
    roles = _copy_role(tmp_path, "container_runtime")[0]
    output = tmp_path / "variables.md"
    assert _generate(roles, output).returncode == 0
    output.write_text(output.read_text().replace("| int |", "| integer |"))
    result = _generate(roles, output, "--check")
    assert result.returncode == 1
    assert result.stdout.startswith("--- variables.md (checked in)\n+++ variables.md (generated)\n")
    assert "-| `container_runtime_config_version` | integer |" in result.stdout
    assert "+| `container_runtime_config_version` | int |" in result.stdout
    assert "make docs" in result.stderr


def test_default_value_mismatch_names_role_variable_and_both_values(tmp_path):
    roles, role = _copy_role(tmp_path, "container_runtime")
    _edit_yaml(role / "defaults" / "main.yml", lambda d: d.update(container_runtime_verify_timeout=90))
    output = tmp_path / "variables.md"
    result = _generate(roles, output)
    assert result.returncode == 2
    assert (
        "role container_runtime, entry point main, variable container_runtime_verify_timeout:"
        " spec default 60 != defaults/main.yml value 90"
    ) in result.stderr
    assert not output.exists()


def test_type_only_mismatch_is_reported(tmp_path):
    roles, role = _copy_role(tmp_path, "container_runtime")
    _edit_yaml(role / "defaults" / "main.yml", lambda d: d.update(container_runtime_config_version="2"))
    result = _generate(roles, tmp_path / "variables.md", "--check")
    assert result.returncode == 2
    assert "variable container_runtime_config_version: spec default 2 != defaults/main.yml value '2'" in (
        result.stderr
    )


def test_variables_missing_on_either_side_are_reported(tmp_path):
    roles, role = _copy_role(tmp_path, "container_runtime")

    def change(defaults):
        del defaults["container_runtime_backup"]
        defaults["container_runtime_undocumented"] = "x"

    _edit_yaml(role / "defaults" / "main.yml", change)
    result = _generate(roles, tmp_path / "variables.md")
    assert result.returncode == 2
    assert (
        "role container_runtime, entry point main, variable container_runtime_backup:"
        " not required but missing from defaults/main.yml (spec default: true)"
    ) in result.stderr
    assert (
        "role container_runtime, variable container_runtime_undocumented: in defaults/main.yml"
        " (value x) but in no entry point of meta/argument_specs.yml"
    ) in result.stderr


def test_required_option_needs_no_default(tmp_path):
    roles, role = _copy_role(tmp_path, "container_runtime")
    _edit_yaml(
        role / "meta" / "argument_specs.yml",
        lambda d: d["argument_specs"]["main"]["options"].update(
            container_runtime_token={"description": "A token.", "type": "str", "required": True}
        ),
    )
    output = tmp_path / "variables.md"
    assert _generate(roles, output).returncode == 0
    assert "| `container_runtime_token` | str |  | yes | A token. |" in output.read_text()


@pytest.fixture
def piped_role(tmp_path):
    role = tmp_path / "roles" / "piped"
    (role / "meta").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "meta" / "argument_specs.yml").write_text(
        textwrap.dedent(
            """\
            ---
            argument_specs:
              main:
                short_description: Pipes | everywhere
                options:
                  piped_filter:
                    description:
                      - A Jinja filter such as C({{ x | default(1) }}), or a|b
                        on two lines.
                      - Second paragraph.
                    type: str
                    default: "a | b"
                    choices: ["a | b", c]
                  piped_items:
                    description: Items.
                    type: list
                    elements: str
                    default: [one, two]
            """
        )
    )
    (role / "defaults" / "main.yml").write_text('---\npiped_filter: "a | b"\npiped_items: [one, two]\n')
    return tmp_path / "roles"


def test_pipes_are_escaped_and_paragraphs_joined(piped_role):
    text = gen.render(piped_role)
    rows = {line.split(" | ")[0]: line for line in text.splitlines() if line.startswith("| `piped_")}
    filter_row = rows["| `piped_filter`"]
    assert filter_row == (
        r"| `piped_filter` | str | `a \| b` | no | A Jinja filter such as `{{ x \| default(1) }}`,"
        r" or a\|b on two lines. Second paragraph. Choices: `a \| b`, `c`. |"
    )
    assert rows["| `piped_items`"] == "| `piped_items` | list of str | `[one, two]` | no | Items. |"
    # Every row has the header's five cells: no unescaped pipe splits one.
    for row in rows.values():
        assert row.replace("\\|", "").count("|") == 6
    assert "\nPipes \\| everywhere.\n" in text


def test_long_defaults_are_shortened():
    shown = gen._shorten([f"item-{n:02d}-with-a-long-name" for n in range(10)])
    assert shown.startswith("`[item-00-with-a-long-name, ")
    assert shown.endswith(", ...]` (10 items, see defaults/main.yml)")
    assert len(shown.split("`")[1]) <= gen.DEFAULT_WIDTH + len(", ...")
    assert gen._shorten({"version": "v1"}) == "`{version: v1}`"
    assert gen._shorten("") == "`''`"
    assert gen._shorten("535") == "`'535'`"


def test_role_without_specs_is_reported_with_its_defaults(tmp_path):
    role = tmp_path / "roles" / "bare"
    (role / "defaults").mkdir(parents=True)
    (role / "defaults" / "main.yml").write_text("---\nbare_timeout: 5\n")
    result = _generate(tmp_path / "roles", tmp_path / "variables.md")
    assert result.returncode == 2
    assert "role bare: no meta/argument_specs.yml" in result.stderr
    assert "role bare, variable bare_timeout: in defaults/main.yml (value 5)" in result.stderr


def test_required_option_set_in_defaults_is_reported(tmp_path):
    roles, role = _copy_role(tmp_path, "container_runtime")

    def change(specs):
        option = specs["argument_specs"]["main"]["options"]["container_runtime_engine"]
        del option["default"]
        option["required"] = True

    _edit_yaml(role / "meta" / "argument_specs.yml", change)
    result = _generate(roles, tmp_path / "variables.md")
    assert result.returncode == 2
    assert (
        "role container_runtime, entry point main, variable container_runtime_engine: required in the spec,"
        " yet defaults/main.yml sets it (value containerd)"
    ) in result.stderr
