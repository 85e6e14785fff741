# -*- coding: utf-8 -*-
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The CDI specification nvidia-ctk generates: its settings, its failures, what to say.

Private to the gpuops.k8s collection. Pure functions, no I/O: the nvidia_cdi_spec module
runs `nvidia-ctk cdi generate` and reads and writes the files.

The generation is run the way NVIDIA's nvidia-cdi-refresh.service runs it (the same
environment file, the same PATH), so that the spec the module writes and the one the
refresh units write are the same bytes and neither undoes the other.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# NVIDIA's nvidia-cdi-refresh.service: Environment=NVIDIA_CTK_CDI_OUTPUT_FILE_PATH=... and
# EnvironmentFile=-/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env, which overrides it.
DEFAULT_SPEC_PATH = "/var/run/cdi/nvidia.yaml"
DEFAULT_ENV_FILE = "/etc/nvidia-container-toolkit/nvidia-cdi-refresh.env"
OUTPUT_VARIABLE = "NVIDIA_CTK_CDI_OUTPUT_FILE_PATH"
# systemd's default PATH for system services: nvidia-ctk writes the path of the
# nvidia-cdi-hook it finds on PATH into the spec.
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

DRIVER_PRESENT = "present"
DRIVER_ABSENT = "absent"
DRIVER_NOT_LOADED = "not_loaded"

# How nvidia-ctk reports the two states of a node without a usable driver (seen from
# v1.17.8 and v1.20.1): go-nvml's code name when libnvidia-ml.so.1 cannot be loaded, and
# NVML's own error string when it loads but the kernel module is not there.
_NO_DRIVER = (
    (re.compile(r"failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND"), DRIVER_ABSENT),
    (re.compile(r"failed to initialize NVML: Driver Not Loaded"), DRIVER_NOT_LOADED),
)
_WHY = {
    DRIVER_ABSENT: "no NVIDIA driver is installed (NVML's library, libnvidia-ml.so.1, is not found)",
    DRIVER_NOT_LOADED: "the NVIDIA driver's libraries are installed but its kernel module is not loaded"
    " (a reboot after the driver install, or a driver that failed to build?)",
}
_LOGRUS_MESSAGE = re.compile(r'\blevel=(\w+) msg="((?:[^"\\]|\\.)*)"')


# nvidia-ctk cdi list (cmd/nvidia-ctk/cdi/list): where the CDI cache could not load a spec,
# this warning, then one warning "<spec>: [<errors>]" per spec; the devices go to stdout.
_REGISTRY_ERRORS = "The following registry errors were reported:"
_SPEC_ERRORS = re.compile(r"^(?P<spec>[^:]+): \[(?P<errors>.*)\]$", re.S)


class EnvFileError(ValueError):
    """A line of the environment file that systemd would not read as VAR=value."""


def parse_env_file(text):
    """An EnvironmentFile's variables, as systemd reads the simple forms NVIDIA documents.

    Blank lines and lines starting with # or ; are comments; `VAR=value` with optional
    surrounding whitespace; a value in matching single or double quotes loses them.
    """
    variables = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise EnvFileError("line %d is not VAR=value: %r" % (number, raw))
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        variables[name] = value
    return variables


def spec_path(explicit, env_file_variables):
    """Where the spec goes: the module's path, else the environment file's, else NVIDIA's."""
    return explicit or env_file_variables.get(OUTPUT_VARIABLE) or DEFAULT_SPEC_PATH


def generate_environment(env_file_variables):
    """What nvidia-ctk's environment gets: NVIDIA's service's PATH and environment file.

    The output path is given on the command line instead, so the variable is dropped.
    """
    env = dict(env_file_variables)
    env.pop(OUTPUT_VARIABLE, None)
    env["PATH"] = SYSTEMD_PATH
    env["LC_ALL"] = "C"
    return env


def nvidia_ctk_messages(stderr, level="error"):
    """The messages nvidia-ctk logged at one level (logrus text format), unquoted."""

    def unquote(escape):
        return "\n" if escape.group(1) == "n" else escape.group(1)

    return [
        re.sub(r"\\(.)", unquote, match.group(2))
        for match in _LOGRUS_MESSAGE.finditer(stderr)
        if match.group(1) == level
    ]


def parse_cdi_list(stdout, stderr):
    """(devices, spec_errors) of nvidia-ctk cdi list: the CDI device names it found, and each
    spec the CDI cache (the same code containerd and CRI-O resolve devices with) could not
    load, with why, on one line."""
    devices = [line.strip() for line in stdout.splitlines() if line.strip()]
    warnings = nvidia_ctk_messages(stderr, "warning")
    spec_errors = {}
    if _REGISTRY_ERRORS in warnings:
        for message in warnings[warnings.index(_REGISTRY_ERRORS) + 1 :]:
            match = _SPEC_ERRORS.match(message)
            if match:
                spec_errors[match.group("spec")] = " ".join(match.group("errors").split())
    return devices, spec_errors


def classify_failure(stderr):
    """DRIVER_ABSENT or DRIVER_NOT_LOADED when nvidia-ctk failed for want of a driver, else None."""
    for message in nvidia_ctk_messages(stderr) or [stderr]:
        for pattern, state in _NO_DRIVER:
            if pattern.search(message):
                return state
    return None


def failure_detail(stderr):
    """One line for a message: nvidia-ctk's error messages, else the end of its stderr."""
    messages = nvidia_ctk_messages(stderr)
    text = "; ".join(messages) if messages else (stderr.strip().splitlines() or ["no output"])[-1]
    return " ".join(text.split())


def no_driver_message(state, stderr, path, spec_exists, refresh_unit):
    """What the user is told when no spec could be generated for want of a driver."""
    message = "No CDI specification generated for %s: %s (nvidia-ctk: %s)." % (
        path,
        _WHY[state],
        failure_detail(stderr),
    )
    if spec_exists:
        message += " The spec already there was left as it is and may describe a driver that is gone."
    if refresh_unit:
        message += " %s generates it once the driver is installed or changes." % refresh_unit
    else:
        message += " Run this again once the driver is installed."
    return message


def generate_failed_message(rc, stderr):
    return "nvidia-ctk cdi generate failed (rc %d): %s" % (rc, failure_detail(stderr))
