# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""_packages: dpkg-query's and a venv's reads, and what apt, dpkg_selections and pip would
still do after them. Each decision leaves in what the read cannot vouch for."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _packages as packages

# dpkg-query --show --showformat=DPKG_QUERY_FORMAT on Debian 12, one name not found (it is
# said on stderr only), one held, one known but not installed, one removed with its
# configuration left, one Multi-Arch on two architectures.
DPKG_QUERY = (
    "containerd\t1.6.20~ds1-1+b1\tinstall ok installed\n"
    "nvidia-container-toolkit\t1.20.1-1\thold ok installed\n"
    "libgcc-10-dev\t\tunknown ok not-installed\n"
    "docker.io\t20.10.24+dfsg1-1+b3\tdeinstall ok config-files\n"
    "libnvidia-container1\t1.20.1-1\tinstall ok installed\n"
    "libnvidia-container1\t1.20.1-1\thold ok installed\n"
)
NAMES = [
    "containerd",
    "nvidia-container-toolkit",
    "libgcc-10-dev",
    "docker.io",
    "libnvidia-container1",
    "python3-tomlkit",
]


def read(text=DPKG_QUERY, names=None):
    items = packages.parse_dpkg_query(text, NAMES if names is None else names)
    return {"packages": {"available": True, "error": None, "by_name": items}}


def test_dpkg_querys_lines_are_read_per_name():
    items = read()["packages"]["by_name"]
    assert items == {
        "containerd": {"installed": True, "version": "1.6.20~ds1-1+b1", "selection": "install"},
        "nvidia-container-toolkit": {"installed": True, "version": "1.20.1-1", "selection": "hold"},
        "libgcc-10-dev": {"installed": False, "version": None, "selection": "unknown"},
        "docker.io": {"installed": False, "version": None, "selection": "deinstall"},
        "libnvidia-container1": {"installed": True, "version": "1.20.1-1", "selection": "hold"},
        "python3-tomlkit": {"installed": False, "version": None, "selection": None},
    }


def test_apt_is_left_only_what_is_installed_at_a_matching_version():
    wanted = [
        "containerd",
        "nvidia-container-toolkit=1.20.1-1",
        "libnvidia-container1=1.17.*",  # installed, another version
        "docker.io",  # configuration files only
        "python3-tomlkit",  # dpkg does not know it
        "containerd:amd64",  # an architecture: apt's to judge
        "nvidia-container-toolkit=1.20.*",
    ]
    assert packages.packages_missing(wanted, read()) == [
        "libnvidia-container1=1.17.*",
        "docker.io",
        "python3-tomlkit",
        "containerd:amd64",
    ]


def test_without_a_read_apt_judges_every_package():
    no_dpkg = {"packages": {"available": False, "error": "dpkg-query is not installed", "by_name": {}}}
    assert packages.packages_missing(["containerd"], no_dpkg) == ["containerd"]
    assert packages.selections_to_change(["containerd"], "hold", no_dpkg) == ["containerd"]


def test_only_the_selections_that_differ_are_changed():
    names = ["containerd", "nvidia-container-toolkit", "libnvidia-container1", "python3-tomlkit"]
    assert packages.selections_to_change(names, "hold", read()) == ["containerd", "python3-tomlkit"]
    assert packages.selections_to_change(names, "install", read()) == [
        "nvidia-container-toolkit",
        "libnvidia-container1",
        "python3-tomlkit",
    ]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: packages.packages_missing("containerd", read()), "non-empty string"),
        (lambda: packages.packages_missing(["containerd"], {}), "read with packages"),
        (lambda: packages.selections_to_change(["containerd"], "purge", read()), "valid: hold, install"),
        (lambda: packages.requirements_missing(["grpcio==1"], {"exists": True}), "python_envs"),
    ],
)
def test_bad_input_says_what_is_valid(call, message):
    with pytest.raises(packages.PackagesInputError, match=message):
        call()


def make_venv(root, dists, version="3.11"):
    """A venv's layout: bin/python3 -> bin/python<version> (the interpreter), site-packages."""
    site = os.path.join(str(root), "lib", "python" + version, "site-packages")
    os.makedirs(site)
    os.makedirs(os.path.join(str(root), "bin"))
    open(os.path.join(str(root), "bin", "python" + version), "w").close()
    os.symlink("python" + version, os.path.join(str(root), "bin", "python3"))
    for name in dists:
        os.makedirs(os.path.join(site, name + ".dist-info"))
    os.makedirs(os.path.join(site, "grpc"))  # a package's own directory is not a distribution
    return str(root)


def test_a_venvs_distributions_are_read_by_normalized_name(tmp_path):
    venv = make_venv(tmp_path / "venv", ["grpcio-1.85.1", "PyYAML-6.0.3", "inotify_simple-2.0.1"])
    assert packages.read_python_env(venv) == {
        "exists": True,
        "distributions": {"grpcio": "1.85.1", "pyyaml": "6.0.3", "inotify-simple": "2.0.1"},
    }
    assert packages.read_python_env(str(tmp_path / "none")) == {"exists": False, "distributions": {}}


def test_a_venv_whose_python_is_gone_or_another_version_is_left_to_pip(tmp_path):
    venv = make_venv(tmp_path / "venv", ["grpcio-1.85.1"])
    os.remove(os.path.join(venv, "bin", "python3.11"))  # python3 now dangles
    assert packages.read_python_env(venv) == {"exists": False, "distributions": {}}
    # The system's Python moved to 3.13: the 3.11 site-packages is not what python3 reads.
    open(os.path.join(venv, "bin", "python3.13"), "w").close()
    os.remove(os.path.join(venv, "bin", "python3"))
    os.symlink("python3.13", os.path.join(venv, "bin", "python3"))
    assert packages.read_python_env(venv) == {"exists": True, "distributions": {}}
    assert packages.requirements_missing(["grpcio==1.85.1"], packages.read_python_env(venv)) == [
        "grpcio==1.85.1"
    ]


def test_pip_is_left_the_pins_the_venv_does_not_hold(tmp_path):
    env = packages.read_python_env(make_venv(tmp_path / "venv", ["grpcio-1.85.1", "PyYAML-6.0.3"]))
    wanted = ["grpcio==1.85.1", "PyYAML==6.0.3", "pyyaml == 6.0.3", "protobuf==7.36.2", "grpcio==1.85.0"]
    assert packages.requirements_missing(wanted, env) == ["protobuf==7.36.2", "grpcio==1.85.0"]
    assert packages.requirements_missing(["grpcio==1.85.1"], env) == []


@pytest.mark.parametrize(
    "other", ["grpcio>=1.80", "grpcio[extra]==1.85.1", "grpcio==1.85.1; python_version>'3'"]
)
def test_a_requirement_that_is_not_an_exact_pin_leaves_pip_every_one(tmp_path, other):
    env = packages.read_python_env(make_venv(tmp_path / "venv", ["grpcio-1.85.1", "PyYAML-6.0.3"]))
    assert packages.requirements_missing(["PyYAML==6.0.3", other], env) == ["PyYAML==6.0.3", other]


def test_a_venv_that_is_not_there_leaves_pip_every_requirement():
    env = {"exists": False, "distributions": {}}
    assert packages.requirements_missing(["grpcio==1.85.1"], env) == ["grpcio==1.85.1"]
