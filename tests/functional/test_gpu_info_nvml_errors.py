# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_info on nodes where NVML is unusable, with real libraries and the real CLI.

- no libnvidia-ml.so.1 at all: the driver is not installed;
- Debian's real libnvidia-ml1 without the kernel module: the driver is not loaded;
- an interpreter without nvidia-ml-py.
"""

import ctypes.util
import subprocess
import venv

import pytest
from conftest import REPO, run_module

FETCH_NVML = REPO / "lab" / "nvml" / "fetch-debian-nvml.sh"


@pytest.fixture(scope="module")
def no_nvml_dir(tmp_path_factory):
    if ctypes.util.find_library("nvidia-ml"):
        # A developer box with a real driver: these cases cannot be produced there.
        pytest.skip("this host has a real libnvidia-ml; the no-driver cases need a host without one")
    return tmp_path_factory.mktemp("empty-libdir")


@pytest.fixture(scope="module")
def debian_nvml_dir(no_nvml_dir):
    out = subprocess.run(["bash", str(FETCH_NVML)], check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def test_no_library_fails_saying_the_driver_is_not_installed(no_nvml_dir):
    result = run_module(env={"LD_LIBRARY_PATH": no_nvml_dir})
    assert result["failed"] is True
    assert "NVIDIA driver is not installed" in result["msg"]
    assert result["nvml"]["available"] is False
    assert result["nvml"]["reason"] == "library_not_found"
    assert "Traceback" not in str(result) and 'File "' not in str(result)


def test_driver_not_loaded_fails_with_what_to_check(debian_nvml_dir):
    result = run_module(env={"LD_LIBRARY_PATH": debian_nvml_dir})
    assert result["failed"] is True
    assert result["nvml"]["reason"] == "init_failed"
    assert "kernel driver is not loaded" in result["msg"]
    assert "lsmod" in result["msg"]
    assert "Traceback" not in str(result)


@pytest.mark.parametrize("check_mode", [False, True])
@pytest.mark.parametrize("case", ["no_nvml_dir", "debian_nvml_dir"])
def test_require_nvml_false_reports_instead_of_failing(request, case, check_mode):
    libdir = request.getfixturevalue(case)
    result = run_module({"require_nvml": False}, env={"LD_LIBRARY_PATH": libdir}, check=check_mode)
    assert not result.get("failed")
    assert result["changed"] is False
    assert result["nvml"]["available"] is False
    assert (
        result["nvml"]["reason"]
        == {"no_nvml_dir": "library_not_found", "debian_nvml_dir": "init_failed"}[case]
    )
    assert result["gpu_count"] == 0
    assert result["gpus"] == [] and result["labels"] == {} and result["links"] == []


def test_missing_nvidia_ml_py_names_the_package(tmp_path):
    bare = tmp_path / "bare"
    venv.create(bare, with_pip=False)  # an interpreter without nvidia-ml-py
    result = run_module(python=bare / "bin" / "python")
    assert result["failed"] is True
    assert "nvidia-ml-py" in result["msg"]


def test_bad_option_is_rejected_with_its_name():
    result = run_module({"require_nvml": "sometimes"})
    assert result["failed"] is True
    assert "require_nvml" in result["msg"]
