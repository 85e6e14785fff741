# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whole-file writes that a reader, or a crash, sees either before or after, never halfway."""

from __future__ import annotations

import contextlib
import os
import tempfile

__all__ = ["write_atomically"]


def write_atomically(path: str, text: str, mode: int = 0o600) -> None:
    """Replace path with text: temporary file, fsync, rename, fsync of the directory.

    The temporary file is hidden and ends in .tmp, so that a directory watcher that takes
    files by extension (CDI's takes .json and .yaml) never reads one. Raises OSError, after
    removing the temporary file.
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(temporary, path)
        # The rename is durable only once the directory entry itself is on disk.
        directory_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
