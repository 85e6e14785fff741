# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A GPU's time-slice, set as NVIDIA's DRA driver sets it: through the driver's nvidia-smi.

NVML has no public call for the time-slice a GPU gives each context, so NVIDIA's driver
(cmd/gpu-kubelet-plugin, TimeSlicingManager) runs, per full GPU,

    nvidia-smi -i <uuid> -c DEFAULT                        # compute mode shared
    nvidia-smi compute-policy -i <uuid> --set-timeslice N  # Default 0, Short 1, Medium 2, Long 3

at Prepare, and the same with Default at Unprepare. These are the same commands, from the
same binary: a claim gets the behaviour it would get from NVIDIA's driver.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Sequence

__all__ = ["DEFAULT", "SLICES", "TimeSliceError", "TimeSlicer"]

DEFAULT = "Default"
# The GpuConfig interval -> nvidia-smi's --set-timeslice value (NVIDIA's TimeSliceInterval.Int).
SLICES = {DEFAULT: 0, "Short": 1, "Medium": 2, "Long": 3}
# nvidia-smi answers in well under a second; a hung driver must not hold a Prepare forever.
TIMEOUT_S = 30.0

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


class TimeSliceError(Exception):
    """nvidia-smi could not be run or refused: the message names the GPU, the command and why."""


def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


class TimeSlicer:
    """Sets GPUs' time-slices with nvidia-smi (a path, or a name looked up on PATH at use)."""

    def __init__(self, nvidia_smi: str, runner: Runner = run):
        self.nvidia_smi = nvidia_smi
        self.runner = runner

    def apply(self, uuid: str, interval: str) -> None:
        """Compute mode DEFAULT, then the interval's time-slice, on the GPU of this UUID."""
        if interval not in SLICES:
            raise ValueError(f"time-slice interval {interval!r}: expected one of {', '.join(SLICES)}")
        binary = self._binary(uuid, interval)
        self._run(uuid, interval, [binary, "-i", uuid, "-c", "DEFAULT"])
        self._run(
            uuid, interval, [binary, "compute-policy", "-i", uuid, "--set-timeslice", str(SLICES[interval])]
        )

    def _binary(self, uuid: str, interval: str) -> str:
        found = shutil.which(self.nvidia_smi)
        if found is None:
            raise TimeSliceError(
                f"GPU {uuid}: time-slice {interval} needs NVIDIA's nvidia-smi, and {self.nvidia_smi!r}"
                " is not an executable here: install the driver's nvidia-smi, or set dra.nvidiaSmi"
                " (device_plugin_dra_nvidia_smi) to its path"
            )
        return found

    def _run(self, uuid: str, interval: str, argv: list[str]) -> None:
        try:
            done = self.runner(argv)
        except (OSError, subprocess.SubprocessError) as error:
            raise TimeSliceError(f"GPU {uuid}: time-slice {interval}: {' '.join(argv)}: {error}") from error
        if done.returncode != 0:
            said = " ".join(f"{done.stdout or ''} {done.stderr or ''}".split()) or "no output"
            raise TimeSliceError(
                f"GPU {uuid}: time-slice {interval}: {' '.join(argv)} exited {done.returncode}: {said}"
            )
