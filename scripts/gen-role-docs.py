# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Generate docs/variables.md from the roles' meta/argument_specs.yml.

    .venv/bin/python scripts/gen-role-docs.py            # rewrite docs/variables.md (make docs)
    .venv/bin/python scripts/gen-role-docs.py --check    # exit 1 with a diff if it is stale

Roles are sorted by name; entry point main comes first, then the others by name; options
keep the order of the spec, where their authors group them. Before writing anything it
checks each role's defaults/main.yml against its specs: every default variable must be an
option, every option that is not required must have a default, and the two defaults must
be equal (types included). A disagreement is an error naming the role, the variable and
both values (exit 2). tests/functional/test_role_docs.py runs it.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
ROLES = ROOT / "roles"
OUTPUT = ROOT / "docs" / "variables.md"
SPEC = Path("meta") / "argument_specs.yml"
DEFAULTS = Path("defaults") / "main.yml"
# Longest rendered default shown whole; longer lists and dicts keep their first items.
DEFAULT_WIDTH = 80
_NO_DEFAULT = object()
# Ansible's documentation markup: C(code), O(option), V(value), M(module), ...
# The argument may hold one level of balanced parentheses, as in C($(ARCH)) (apt's variable).
_MARKUP = re.compile(r"\b(RV|[CEIBLMOPRUV])\(([^()]*(?:\([^()]*\)[^()]*)*)\)")
_CODE_MARKUP = frozenset({"C", "E", "M", "O", "P", "RV", "V"})


class SpecError(Exception):
    """A role's specs and defaults disagree, or a file cannot be read as expected."""


def _load_yaml(path: Path):
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SpecError(f"{path}: not valid YAML: {exc}") from exc


def _show(value) -> str:
    """A value as one line of flow-style YAML, as a reader would write it in a vars file."""
    if value is _NO_DEFAULT:
        return "(none)"
    text = yaml.safe_dump(
        value, default_flow_style=True, width=float("inf"), allow_unicode=True, sort_keys=False
    )
    text = text.strip()
    # A scalar document ends with the explicit end marker.
    return text[: -len("\n...")].strip() if text.endswith("\n...") else text


def _same(left, right) -> bool:
    """Equality that also tells true from 1 and '8' from 8."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_same(left[key], right[key]) for key in left)
    if isinstance(left, list):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right))
    return left == right


def load_role(role_dir: Path) -> tuple[dict | None, dict]:
    """The role's entry points (name -> spec; None without a spec file) and its defaults/main.yml."""
    spec_path = role_dir / SPEC
    entry_points = None
    if spec_path.is_file():
        data = _load_yaml(spec_path)
        if not isinstance(data, dict) or not isinstance(data.get("argument_specs"), dict):
            raise SpecError(f"role {role_dir.name}: {SPEC} has no argument_specs mapping")
        entry_points = data["argument_specs"]
    for name, entry in (entry_points or {}).items():
        if not isinstance(entry, dict) or not isinstance(entry.get("options") or {}, dict):
            raise SpecError(f"role {role_dir.name}: entry point {name} has no options mapping")
    defaults_path = role_dir / DEFAULTS
    defaults = _load_yaml(defaults_path) if defaults_path.is_file() else None
    if defaults is None:
        defaults = {}
    if not isinstance(defaults, dict):
        raise SpecError(f"role {role_dir.name}: {DEFAULTS} is not a mapping")
    return entry_points, defaults


def check_role(role: str, entry_points: dict, defaults: dict) -> list[str]:
    """Every way the role's defaults/main.yml and its argument specs disagree."""
    problems = []
    documented = set()
    for entry_name, entry in entry_points.items():
        for name, spec in (entry.get("options") or {}).items():
            documented.add(name)
            option = spec or {}
            where = f"role {role}, entry point {entry_name}, variable {name}"
            spec_default = option.get("default", _NO_DEFAULT)
            if name not in defaults:
                if not option.get("required", False):
                    problems.append(
                        f"{where}: not required but missing from {DEFAULTS}"
                        f" (spec default: {_show(spec_default)})"
                    )
                continue
            value = defaults[name]
            if option.get("required", False) and spec_default is _NO_DEFAULT:
                problems.append(
                    f"{where}: required in the spec, yet {DEFAULTS} sets it (value {_show(value)}),"
                    " which satisfies the requirement: drop one of the two"
                )
                continue
            # No default in the spec means None to Ansible; defaults/main.yml may say null.
            expected = None if spec_default is _NO_DEFAULT else spec_default
            if not _same(expected, value):
                problems.append(
                    f"{where}: spec default {_show(spec_default)} != {DEFAULTS} value {_show(value)}"
                )
    problems.extend(
        f"role {role}, variable {name}: in {DEFAULTS} (value {_show(defaults[name])})"
        f" but in no entry point of {SPEC}"
        for name in defaults
        if name not in documented
    )
    return problems


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell: pipes escaped, no raw HTML (callers make it one line)."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def _code(text: str) -> str:
    """A code span for a table cell (pipes still need escaping there in GFM tables)."""
    text = " ".join(text.split()).replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _description(value) -> str:
    """Ansible markup to Markdown, paragraphs joined with a space."""
    parts = value if isinstance(value, list) else [value or ""]
    text = " ".join(" ".join(str(part).split()) for part in parts)
    out, position = [], 0
    for match in _MARKUP.finditer(text):
        out.append(_cell(text[position : match.start()]))
        kind, inner = match.groups()
        if kind in _CODE_MARKUP:
            out.append(_code(inner))
        elif kind == "I":
            out.append(f"*{_cell(inner)}*")
        elif kind == "B":
            out.append(f"**{_cell(inner)}**")
        elif kind == "U":
            out.append(f"<{inner.strip()}>")
        else:  # L(text,url) and R(text,anchor)
            label, _comma, target = inner.partition(",")
            out.append(f"[{_cell(label)}]({target.strip()})" if kind == "L" else _cell(label))
        position = match.end()
    out.append(_cell(text[position:]))
    return " ".join("".join(out).split())


def _shorten(value) -> str:
    """The rendered default, shortened to DEFAULT_WIDTH by keeping the first items."""
    text = _show(value)
    if len(text) <= DEFAULT_WIDTH:
        return _code(text)
    if isinstance(value, (list, dict)) and value:
        items = list(value.items()) if isinstance(value, dict) else list(value)
        kept = 1
        while kept < len(items):
            head = dict(items[: kept + 1]) if isinstance(value, dict) else items[: kept + 1]
            if len(_show(head)) > DEFAULT_WIDTH:
                break
            kept += 1
        head = dict(items[:kept]) if isinstance(value, dict) else items[:kept]
        shown = _show(head)
        close = shown[-1]
        shown = f"{shown[:-1]}, ...{close}" if kept < len(items) else shown
        noun = "keys" if isinstance(value, dict) else "items"
        return f"{_code(shown)} ({len(items)} {noun}, see defaults/main.yml)"
    return f"{_code(text[: DEFAULT_WIDTH - 3] + '...')} (see defaults/main.yml)"


def _type(option: dict) -> str:
    kind = option.get("type", "str")
    elements = option.get("elements")
    return f"{kind} of {elements}" if kind == "list" and elements else str(kind)


def _row(name: str, option: dict, defaults: dict) -> str:
    required = bool(option.get("required", False))
    if name in defaults:
        default = _shorten(defaults[name])
    elif "default" in option:
        default = _shorten(option["default"])
    else:
        default = ""
    description = _description(option.get("description"))
    choices = option.get("choices")
    if choices:
        listed = ", ".join(_code(_show(choice)) for choice in choices)
        description = f"{description} Choices: {listed}.".strip()
    cells = [_code(name), _cell(_type(option)), default, "yes" if required else "no", description]
    return "| " + " | ".join(cells) + " |"


def render(roles_dir: Path) -> str:
    """docs/variables.md for the roles under roles_dir; SpecError lists every disagreement."""
    roles, problems = [], []
    for role_dir in sorted(path for path in roles_dir.iterdir() if path.is_dir()):
        try:
            entry_points, defaults = load_role(role_dir)
        except SpecError as exc:
            problems.append(str(exc))
            continue
        if entry_points is None:
            problems.append(f"role {role_dir.name}: no {SPEC}, so its variables would be undocumented")
            entry_points = {}
        problems.extend(check_role(role_dir.name, entry_points, defaults))
        roles.append((role_dir.name, entry_points, defaults))
    if problems:
        raise SpecError("\n".join(problems))

    lines = [
        "# Role variables",
        "",
        "<!-- Generated by scripts/gen-role-docs.py from roles/*/meta/argument_specs.yml. -->",
        "<!-- Do not edit: change the specs (and defaults/main.yml) and run `make docs`. -->",
        "",
        "Every variable of the collection's roles, generated from each role's",
        "`meta/argument_specs.yml` by `scripts/gen-role-docs.py`. Regenerate it with `make docs`;",
        "`make lint` fails when it is stale. The generator also checks that each role's",
        "`defaults/main.yml` sets exactly the specs' defaults. Roles are in alphabetical order,",
        "variables in the order of the spec. Long defaults are shortened: the role's",
        "`defaults/main.yml` has them in full.",
        "",
    ]
    lines.extend(f"- [{role[0]}](#{role[0]})" for role in roles)
    for role, entry_points, defaults in roles:
        lines.extend(["", f"## {role}"])
        ordered = sorted(entry_points, key=lambda name: (name != "main", name))
        for entry_name in ordered:
            entry = entry_points[entry_name]
            if entry_name != "main" or len(ordered) > 1:
                lines.extend(["", f"### Entry point `{entry_name}`"])
            short = " ".join(str(entry.get("short_description") or "").split())
            if short:
                lines.extend(["", _cell(short if short.endswith(".") else short + ".")])
            options = entry.get("options") or {}
            if not options:
                lines.extend(["", "No variables."])
                continue
            lines.extend(
                [
                    "",
                    "| Variable | Type | Default | Required | Description |",
                    "| --- | --- | --- | --- | --- |",
                ]
            )
            lines.extend(_row(name, option or {}, defaults) for name, option in options.items())
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 if stale")
    parser.add_argument("--roles-dir", type=Path, default=ROLES, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, default=OUTPUT, help=argparse.SUPPRESS)
    options = parser.parse_args()
    try:
        fresh = render(options.roles_dir)
    except SpecError as exc:
        print(
            f"roles' argument specs and defaults disagree:\n{exc}\n"
            f"fix meta/argument_specs.yml or defaults/main.yml of the role, then run `make docs`",
            file=sys.stderr,
        )
        return 2
    current = options.output.read_text(encoding="utf-8") if options.output.is_file() else ""
    if options.check:
        if current == fresh:
            return 0
        name = options.output.name
        sys.stdout.writelines(
            difflib.unified_diff(
                current.splitlines(keepends=True),
                fresh.splitlines(keepends=True),
                fromfile=f"{name} (checked in)",
                tofile=f"{name} (generated)",
            )
        )
        shown = os.path.relpath(options.output.resolve(), ROOT)
        print(f"{shown} is stale: run `make docs` and commit the result", file=sys.stderr)
        return 1
    if current != fresh:
        options.output.parent.mkdir(parents=True, exist_ok=True)
        options.output.write_text(fresh, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
