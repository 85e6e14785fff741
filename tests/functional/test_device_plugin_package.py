# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The daemon's package and the device_plugin role agree: the files the role copies to the
node (resolved by the real ansible-playbook), the wheel the node's build makes of them,
one set of pins, one version, and a build backend the package accepts."""

import compileall
import email
import os
import tomllib
import zipfile

import pytest
import yaml
from conftest import REPO
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from resolve import resolve, role_file_tree

ROLE = REPO / "roles" / "device_plugin"
PACKAGE = ROLE / "files" / "gpuops-device-plugin"
PYPROJECT = tomllib.loads((PACKAGE / "pyproject.toml").read_text())
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def package_files():
    """Every file of the package but its tests and bytecode, relative to its root."""
    found = set()
    for root, dirs, files in os.walk(PACKAGE):
        dirs[:] = [d for d in dirs if d not in ("tests", "__pycache__")]
        found.update(os.path.relpath(os.path.join(root, f), PACKAGE) for f in files if not f.endswith(".pyc"))
    return found


@pytest.fixture(scope="module")
def resolved(tmp_path_factory):
    """__device_plugin_source_files and __device_plugin_source (what the role's file_tree
    task copies: name -> content) as a play resolves them."""
    # Bytecode next to the sources, as any import of them leaves it: it must not travel.
    compileall.compile_dir(PACKAGE / "gpuops_device_plugin", quiet=1)
    return resolve(
        "localhost,",
        ["__device_plugin_source_files", "__device_plugin_source"],
        extra={"role_path": str(ROLE)},
        tmp_path=tmp_path_factory.mktemp("resolve"),
    )["localhost"]


@pytest.fixture(scope="module")
def copied(resolved):
    """The names of the files the role copies."""
    return resolved["__device_plugin_source_files"]


def test_the_role_copies_the_whole_package_and_nothing_else(copied):
    assert list((PACKAGE / "gpuops_device_plugin").glob("__pycache__/*.pyc"))
    assert copied == sorted(package_files())
    assert "pyproject.toml" in copied
    assert not [f for f in copied if f.startswith("tests/") or "__pycache__" in f]


def test_the_role_copies_each_files_content_links_followed(resolved, copied):
    source = resolved["__device_plugin_source"]
    assert sorted(source) == copied
    assert all(source[name] == (PACKAGE / name).read_text(encoding="utf-8") for name in copied)


def test_the_wheel_built_from_that_copy(copied, tmp_path, monkeypatch):
    buildapi = pytest.importorskip("flit_core.buildapi", reason="flit_core: requirements/dev.txt (make venv)")
    source = tmp_path / "src"
    # The copy the role's task makes: gpuops.k8s.file_tree with the same dict.
    result = role_file_tree("device_plugin", "__device_plugin_source", source)
    assert result["changed"] is True and result["removed"] == [], result
    monkeypatch.chdir(source)
    wheel = zipfile.ZipFile(tmp_path / buildapi.build_wheel(str(tmp_path)))
    version = "gpuops_device_plugin-%s" % yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    assert wheel.filename.endswith("/%s-py3-none-any.whl" % version)
    assert {n for n in wheel.namelist() if not n.startswith(version + ".dist-info/")} == {
        n for n in copied if n != "pyproject.toml"
    }
    # The linked module_utils travel as their contents: gpu_info and the daemon share them.
    assert (
        wheel.read("gpuops_device_plugin/_nvml_discovery.py")
        == (REPO / "plugins" / "module_utils" / "_nvml_discovery.py").read_bytes()
    )
    metadata = email.message_from_bytes(wheel.read(version + ".dist-info/METADATA"))
    assert metadata["Name"] == "gpuops-device-plugin"
    assert metadata.get_all("Requires-Dist") == DEFAULTS["device_plugin_requirements"]
    assert (
        "gpuops-device-plugin=gpuops_device_plugin.daemon:main"
        in wheel.read(version + ".dist-info/entry_points.txt").decode().splitlines()
    )


def test_the_package_pins_what_the_role_installs():
    assert PYPROJECT["project"]["dependencies"] == DEFAULTS["device_plugin_requirements"]


def test_the_package_version_is_the_collections():
    from gpuops_device_plugin import __version__  # noqa: PLC0415

    assert __version__ == yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    assert PYPROJECT["project"]["dynamic"] == ["version"]  # read from __version__, one place


def test_the_roles_build_backend_pin_satisfies_the_package():
    build = DEFAULTS["device_plugin_build_requirements"]
    pins = {canonicalize_name(r.name): r for r in map(Requirement, build)}
    for wanted in map(Requirement, PYPROJECT["build-system"]["requires"]):
        pin = pins[canonicalize_name(wanted.name)]
        (exact,) = pin.specifier
        assert exact.operator == "=="
        assert wanted.specifier.contains(exact.version), (str(pin), str(wanted))
    assert PYPROJECT["build-system"]["build-backend"].split(".")[0] == "flit_core"
