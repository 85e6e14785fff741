# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Debian's real container runtimes (lab/runtimes/fetch-runtime.sh) as config validators.

containerd 1.6 (bookworm), 1.7 (trixie) and 2.x (sid) parse and merge a config, imports
included, with `config dump`; docker.io 26 (trixie) checks a daemon.json with
`dockerd --validate`. Neither needs root or a running daemon, and neither writes anything.
"""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FETCH = REPO / "lab" / "runtimes" / "fetch-runtime.sh"
CONTAINERD_SUITES = ("bookworm", "trixie", "sid")  # containerd 1.6, 1.7, 2.x
DOCKER_SUITE = "trixie"  # docker.io 26.1


class FetchError(RuntimeError):
    """fetch-runtime.sh failed (no network, package gone from the suite, ...)."""


@functools.lru_cache(maxsize=None)
def runtime_root(package: str, suite: str) -> Path:
    """Root of the extracted package (fetched once, then cached on disk and per process)."""
    proc = subprocess.run(
        [str(FETCH), package, suite], capture_output=True, text=True, check=False, timeout=600
    )
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise FetchError("%s %s: rc %d\n%s" % (package, suite, proc.returncode, proc.stderr[-2000:]))
    return Path(lines[-1])


def fetched_version(package: str, suite: str) -> str:
    """Debian version of the fetched package, e.g. '1.7.24~ds1-6+deb13u1'."""
    return (runtime_root(package, suite) / ".gpuops-fetched").read_text().split()[1]


def _run(command: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    # cwd "/" as under systemd: containerd 1.6 resolves relative imports against the cwd.
    proc = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60, cwd="/", env=env)
    return proc.returncode, proc.stdout, proc.stderr


def containerd_dump(suite: str, config_path: Path | str) -> tuple[int, str, str]:
    """`containerd --config PATH config dump` of the suite's containerd: (rc, stdout, stderr).

    rc 1 with the reason on stderr for bad TOML or an unsupported version; unknown keys
    are only warnings (stderr, rc 0), so check the dumped values, not just rc.
    """
    binary = runtime_root("containerd", suite) / "usr" / "bin" / "containerd"
    return _run([str(binary), "--config", str(Path(config_path).resolve()), "config", "dump"])


def dockerd_validate(config_path: Path | str, suite: str = DOCKER_SUITE) -> tuple[int, str, str]:
    """`dockerd --validate --config-file PATH`: (rc, stdout, stderr); messages go to stderr.

    rc 0 prints 'configuration OK'. It does not check that default-runtime names a
    defined runtime (only the starting daemon does), nor keys inside `runtimes.<name>`.
    """
    root = runtime_root("docker.io", suite)
    # dockerd looks up docker-proxy on PATH; without it every config fails validation.
    path = os.pathsep.join(
        [str(root / "usr" / "sbin"), str(root / "usr" / "bin"), os.environ.get("PATH", "")]
    )
    command = [
        str(root / "usr" / "sbin" / "dockerd"),
        "--validate",
        "--config-file",
        str(Path(config_path).resolve()),
    ]
    return _run(command, env={**os.environ, "PATH": path})
