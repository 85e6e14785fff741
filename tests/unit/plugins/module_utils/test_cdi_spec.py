# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.gpuops.k8s.plugins.module_utils import _cdi_spec as cdi

# The ends of nvidia-ctk's stderr for `nvidia-ctk cdi generate`, copied from runs of the
# binaries lab/toolkit/build.sh builds (2026-11-24): v1.20.1 on a host without
# libnvidia-ml.so.1; v1.17.8 with Debian's libnvidia-ml1 535 and no kernel module; v1.20.1
# over NVIDIA's mock NVML without its driver files (a failure that is not "no driver").
NO_LIBRARY_1_20_1 = (
    'time="2026-11-24T15:27:36Z" level=info msg="Auto-detected mode as \'nvml\'"\n'
    'time="2026-11-24T15:27:36Z" level=warning msg="Could not determine driver version: libnvsandboxutils'
    ' is not available\\nfailed to initialize nvml: ERROR_LIBRARY_NOT_FOUND"\n'
    'time="2026-11-24T15:27:36Z" level=error msg="failed to generate CDI spec: failed to create device CDI'
    " specs: failed to construct device spec generators: failed to initialize NVML:"
    ' ERROR_LIBRARY_NOT_FOUND"\n'
)
NOT_LOADED_1_17_8 = (
    'time="2026-11-24T15:27:36Z" level=info msg="Auto-detected mode as \'nvml\'"\n'
    'time="2026-11-24T15:27:36Z" level=error msg="failed to generate CDI spec: failed to create device CDI'
    ' specs: failed to initialize NVML: Driver Not Loaded"\n'
)
MOCK_WITHOUT_DRIVER_FILES_1_20_1 = (
    'time="2026-11-24T15:20:57Z" level=info msg="Using driver version 550.163.01"\n'
    'time="2026-11-24T15:20:57Z" level=error msg="failed to generate CDI spec: failed to create edits common'
    " for entities: failed to create discoverer for common entities: failed to create discoverer for driver"
    " files: failed to create discoverer for driver libraries: failed to get libraries for driver version:"
    " failed to get driver library locator: failed to get libcuda.so parent directory: failed to locate"
    ' \\"libcuda.so.\\": libcuda.so.550.163.01: not found\\nlibcuda.so.550.163.01: not found\\nfailed to'
    ' locate \\"libnvidia-ml.so.\\": libnvidia-ml.so.550.163.01: not found\\nlibnvidia-ml.so.550.163.01:'
    ' not found"\n'
)


def test_env_file_as_nvidia_ships_it_has_no_variables():
    shipped = (
        "# This file can be used to override the configuration of the\n"
        "#   nvidia-ctk cdi generate\n"
        "# NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=/var/run/cdi/nvidia.yaml\n"
        "\n"
        "# NVIDIA_DRIVER_ROOT=/\n"
    )
    assert cdi.parse_env_file(shipped) == {}


def test_env_file_variables_keep_their_values_without_quotes():
    text = "; a comment\nNVIDIA_CTK_CDI_OUTPUT_FILE_PATH = /etc/cdi/nvidia.json\nA='x y'\nB=\"z\"\nC=\n"
    assert cdi.parse_env_file(text) == {
        "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH": "/etc/cdi/nvidia.json",
        "A": "x y",
        "B": "z",
        "C": "",
    }


@pytest.mark.parametrize("line", ["export A=1", "no equals sign", "1A=2"])
def test_env_file_line_that_is_not_an_assignment_is_an_error_naming_the_line(line):
    with pytest.raises(cdi.EnvFileError, match="line 2 is not VAR=value"):
        cdi.parse_env_file("# ok\n%s\n" % line)


def test_spec_path_prefers_the_module_then_the_env_file_then_nvidias_default():
    from_file = {cdi.OUTPUT_VARIABLE: "/etc/cdi/nvidia.yaml"}
    assert cdi.spec_path("/tmp/x.yaml", from_file) == "/tmp/x.yaml"
    assert cdi.spec_path(None, from_file) == "/etc/cdi/nvidia.yaml"
    assert cdi.spec_path(None, {}) == "/var/run/cdi/nvidia.yaml"


def test_generation_runs_with_the_services_path_and_without_the_output_variable():
    env = cdi.generate_environment({cdi.OUTPUT_VARIABLE: "/x.yaml", "NVIDIA_CTK_DEBUG": "true"})
    assert env == {"NVIDIA_CTK_DEBUG": "true", "PATH": cdi.SYSTEMD_PATH, "LC_ALL": "C"}


def test_error_messages_are_unquoted_and_other_levels_left_out():
    assert cdi.nvidia_ctk_messages(NOT_LOADED_1_17_8) == [
        "failed to generate CDI spec: failed to create device CDI specs:"
        " failed to initialize NVML: Driver Not Loaded"
    ]
    (message,) = cdi.nvidia_ctk_messages(MOCK_WITHOUT_DRIVER_FILES_1_20_1)
    assert '"libcuda.so.": libcuda.so.550.163.01: not found\nlibcuda.so.550.163.01' in message


@pytest.mark.parametrize(
    "stderr, state",
    [
        (NO_LIBRARY_1_20_1, cdi.DRIVER_ABSENT),
        (NOT_LOADED_1_17_8, cdi.DRIVER_NOT_LOADED),
        (MOCK_WITHOUT_DRIVER_FILES_1_20_1, None),
        ("", None),
        ("segmentation fault\n", None),
    ],
)
def test_only_nvml_finding_no_driver_counts_as_no_driver(stderr, state):
    assert cdi.classify_failure(stderr) == state


def test_a_warning_about_nvml_alone_is_not_taken_for_the_failure():
    # v1.20.1 also logs "failed to initialize nvml: ERROR_LIBRARY_NOT_FOUND" as a warning
    # about the driver version; only the error decides.
    warning_only = NO_LIBRARY_1_20_1.splitlines(True)[1] + (
        'time="x" level=error msg="failed to generate CDI spec: open /x: permission denied"\n'
    )
    assert cdi.classify_failure(warning_only) is None


def test_no_driver_message_says_why_what_was_left_and_what_refreshes_it():
    message = cdi.no_driver_message(
        cdi.DRIVER_ABSENT, NO_LIBRARY_1_20_1, "/var/run/cdi/nvidia.yaml", False, "nvidia-cdi-refresh.path"
    )
    assert message == (
        "No CDI specification generated for /var/run/cdi/nvidia.yaml: no NVIDIA driver is installed"
        " (NVML's library, libnvidia-ml.so.1, is not found) (nvidia-ctk: failed to generate CDI spec:"
        " failed to create device CDI specs: failed to construct device spec generators: failed to"
        " initialize NVML: ERROR_LIBRARY_NOT_FOUND). nvidia-cdi-refresh.path generates it once the"
        " driver is installed or changes."
    )


def test_no_driver_message_for_a_module_not_loaded_with_an_old_spec_in_place():
    message = cdi.no_driver_message(
        cdi.DRIVER_NOT_LOADED, NOT_LOADED_1_17_8, "/etc/cdi/nvidia.yaml", True, None
    )
    assert "kernel module is not loaded" in message
    assert "The spec already there was left as it is" in message
    assert message.endswith("Run this again once the driver is installed.")


def test_other_failures_name_nvidia_ctks_error_on_one_line():
    message = cdi.generate_failed_message(1, MOCK_WITHOUT_DRIVER_FILES_1_20_1)
    assert message.startswith("nvidia-ctk cdi generate failed (rc 1): failed to generate CDI spec:")
    assert "libcuda.so.550.163.01: not found libcuda.so.550.163.01: not found" in message
    assert "\n" not in message
    assert cdi.generate_failed_message(2, "boom\n") == "nvidia-ctk cdi generate failed (rc 2): boom"


# `nvidia-ctk cdi list` (v1.20.2, the lab's node 1, 2026-11-30) with a line of broken YAML
# appended to /var/run/cdi/nvidia.yaml: its stderr, and its stdout once the spec was restored.
LIST_BROKEN_STDERR = (
    'time="2026-11-30T10:43:19Z" level=warning msg="The following registry errors were reported:"\n'
    'time="2026-11-30T10:43:19Z" level=warning msg="/var/run/cdi/nvidia.yaml: [failed to load CDI Spec'
    ' failed to parse CDI Spec \\"/var/run/cdi/nvidia.yaml\\": failed to unmarshal CDI Spec: yaml: line 547:'
    " did not find expected ',' or '}']\"\n"
    'time="2026-11-30T10:43:19Z" level=info msg="Found 0 CDI devices"\n'
)
LIST_STDOUT = "nvidia.com/gpu=0\nnvidia.com/gpu=1\nnvidia.com/gpu=all\n"
LIST_STDERR = 'time="2026-11-30T10:43:19Z" level=info msg="Found 3 CDI devices"\n'


def test_cdi_list_gives_the_devices_and_no_spec_errors_when_every_spec_loads():
    assert cdi.parse_cdi_list(LIST_STDOUT, LIST_STDERR) == (
        ["nvidia.com/gpu=0", "nvidia.com/gpu=1", "nvidia.com/gpu=all"],
        {},
    )


def test_cdi_list_names_each_spec_the_cache_could_not_load_and_why():
    assert cdi.parse_cdi_list("", LIST_BROKEN_STDERR) == (
        [],
        {
            "/var/run/cdi/nvidia.yaml": "failed to load CDI Spec failed to parse CDI Spec"
            ' "/var/run/cdi/nvidia.yaml": failed to unmarshal CDI Spec: yaml: line 547: did not'
            " find expected ',' or '}'"
        },
    )


def test_a_warning_before_the_registry_errors_is_not_a_spec_error():
    stderr = 'level=warning msg="/etc/cdi/x.yaml: [looks like one]"\n' + LIST_STDERR
    assert cdi.parse_cdi_list(LIST_STDOUT, stderr)[1] == {}
