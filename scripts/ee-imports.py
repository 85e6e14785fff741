# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Import the installed collection in an execution environment's Python (scripts/check-ee.sh).

    PYTHONPATH=COLLECTIONS EE_PYTHON scripts/ee-imports.py COLLECTIONS/ansible_collections/gpuops/k8s

Every module and module_utils must be placed on a side: CONTROLLER (runs in the EE:
delegated to the API host) or NODE (runs with the GPU node's Python; its libraries are not
the EE's business). Each one must import. For the controller side, every third-party top-level
package it imports (directly or through our module_utils) must be installed in this venv AND
be provided by a distribution that the collection's own requirements.txt names: relying on
kubernetes.core's list for a package we import ourselves would break the day they drop it.
Exit 1 with one line per problem.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import re
import sys
from pathlib import Path

PACKAGE = "ansible_collections.gpuops.k8s.plugins"
# Which side each plugin runs on, by file name (module_utils are matched by prefix).
CONTROLLER_MODULES = {"gpu_node", "k8s_objects_info"}
NODE_MODULES = {
    "gpu_info",
    "nvidia_runtime",
    "nvidia_cdi_spec",
    "kubelet_info",
    "file_tree",
    "node_state_info",
}
# _doctor (and its rooms _doctor_*): the doctor_findings filter's diagnosis, run by the
# controller; _kubelet and _node_state too, which it reads with (kubelet_info and
# node_state_info also take them to the node: the stricter side checks them); _dra_view,
# the DRA filters' and the doctor's reading of slices and claims; _packages, the package
# filters' decisions (node_state_info takes its readers to the node).
CONTROLLER_UTILS_PREFIXES = (
    "_node_labels",
    "_node_api",
    "_k8s_reads",
    "_doctor",
    "_kubelet",
    "_node_state",
    "_dra_view",
    "_packages",
)
NODE_UTILS_PREFIXES = (
    "_gpu_facts",
    "_gpu_info",
    "_gfd_labels",
    "_plugin_",
    "_cdi_spec",
    "_nvml_",
    "_runtime",
    "_file_tree",
)
# Flags the controller-side plugins set when a library failed to import.
IMPORT_FLAGS = {"_node_api": ("K8S_CORE_ERROR", "KUBERNETES_ERROR"), "k8s_objects_info": ("K8S_CORE_ERROR",)}


def side(kind, name):
    if kind == "modules":
        if name in CONTROLLER_MODULES:
            return "controller"
        return "node" if name in NODE_MODULES else None
    if name.startswith(CONTROLLER_UTILS_PREFIXES):
        return "controller"
    return "node" if name.startswith(NODE_UTILS_PREFIXES) else None


def requirement_names(path):
    names = set()
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            names.add(canonical(re.split(r"[\s<>=!~;\[]", line, maxsplit=1)[0]))
    return names


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def third_party_imports(path, root, seen):
    """Top-level third-party packages a file imports, following our own module_utils."""
    if path in seen:
        return set()
    seen.add(path)
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if name.startswith(PACKAGE + ".module_utils."):
                util = root / "plugins" / "module_utils" / (name.rsplit(".", 1)[1] + ".py")
                found |= third_party_imports(util, root, seen)
            elif top not in sys.stdlib_module_names and top not in ("ansible", "ansible_collections"):
                found.add(top)
    return found


def main(root):
    root = Path(root)
    declared = requirement_names(root / "requirements.txt")
    providers = importlib.metadata.packages_distributions()
    problems = []
    report = []
    for kind in ("module_utils", "modules"):
        for path in sorted((root / "plugins" / kind).glob("*.py")):
            name = path.stem
            if name == "__init__":
                continue
            where = side(kind, name)
            if where is None:
                problems.append(
                    "%s/%s.py is on no side: add it to CONTROLLER_* or NODE_* in scripts/ee-imports.py"
                    % (kind, name)
                )
                continue
            try:
                module = importlib.import_module("%s.%s.%s" % (PACKAGE, kind, name))
            except Exception as error:  # any import failure is the finding
                problems.append("%s/%s.py does not import: %r" % (kind, name, error))
                continue
            report.append("%s %s/%s" % (where, kind, name))
            if where != "controller":
                continue
            for flag in IMPORT_FLAGS.get(name, ()):
                if getattr(module, flag, None):
                    problems.append("%s/%s.py: %s is set:\n%s" % (kind, name, flag, getattr(module, flag)))
            for top in sorted(third_party_imports(path, root, set())):
                dists = {canonical(d) for d in providers.get(top, [])}
                if not dists:
                    problems.append("%s/%s.py imports %s, which is not installed" % (kind, name, top))
                elif not dists & declared:
                    problems.append(
                        "%s/%s.py imports %s (distribution %s), which requirements.txt does not name"
                        % (kind, name, top, ", ".join(sorted(dists)))
                    )
    print("ee-imports: " + "; ".join(report))
    for problem in problems:
        print("ee-imports: " + problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
