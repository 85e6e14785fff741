# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Generate the device plugin daemon's gRPC stubs from the kubelet's protos.

    .venv/bin/python scripts/gen-deviceplugin-stubs.py            # rewrite the stubs
    .venv/bin/python scripts/gen-deviceplugin-stubs.py --check    # exit 1 if they are stale

The protos are k8s.io/kubelet's pkg/apis/<api>/api.proto (PROTOS maps each file to its
<api>), renamed but for api.proto so that one folder holds them: api.proto is
deviceplugin/v1beta1 (the daemon serves it), podresources.proto is podresources/v1 (the
kubelet's pod-resources API, which the pod-resources client reads). For the DRA front end,
from k8s.io/kubelet v0.37.2 (Kubernetes 1.37.2): dra_v1.proto and dra_v1beta1.proto (the
DRAPlugin service the kubelet calls), pluginregistration.proto (the plugin watcher's
registration), dra_health_v1.proto and dra_health_v1alpha1.proto (the DRAResourceHealth
stream: a 1.37 kubelet prefers v1, 1.35 and 1.36 know only v1alpha1). The package lines are
upstream's, so the services keep the names the kubelet calls
(/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/..., pluginregistration, v1, v1alpha1). Nothing is
stripped from them: they are byte-for-byte copies, because none of these protos imports
gogoproto or sets a gogoproto option any more (one that did would make protoc fail on the
missing import, not pass unnoticed).

protoc's output is post-processed only in form: the serialized descriptor (one long line) is
split into short byte-string pieces and the result is run through `ruff format`, so the files
pass the collection's linters without ignore entries. tests/daemon/test_stubs.py runs --check.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FILES = ROOT / "roles" / "device_plugin" / "files" / "gpuops-device-plugin"
# proto file name -> the k8s.io/kubelet API it is, unchanged.
PROTOS = {
    "api.proto": "deviceplugin/v1beta1",
    "podresources.proto": "podresources/v1",
    "dra_v1.proto": "dra/v1",
    "dra_v1beta1.proto": "dra/v1beta1",
    "pluginregistration.proto": "pluginregistration/v1",
    "dra_health_v1alpha1.proto": "dra-health/v1alpha1",
    "dra_health_v1.proto": "dra-health/v1",
}
SUFFIXES = ("_pb2.py", "_pb2_grpc.py")
OUTPUTS = tuple(name.removesuffix(".proto") + suffix for name in PROTOS for suffix in SUFFIXES)
HEADER = (
    "# Generated from {proto} (k8s.io/kubelet {api})\n"
    "# by scripts/gen-deviceplugin-stubs.py. Do not edit: change the generator and run it again.\n"
)
WIDTH = 96


def _split_descriptor(source: str) -> str:
    """Rewrite `AddSerializedFile(b'...')` as a parenthesized run of short byte strings."""
    marker = "AddSerializedFile("
    lines = []
    for line in source.splitlines():
        start = line.find(marker)
        if start < 0 or not line.endswith(")"):
            lines.append(line)
            continue
        data = ast.literal_eval(line[start + len(marker) : -1])
        pieces, piece = [], b""
        for byte in data:
            # Escapes make a byte up to 4 characters wide: measure the literal, not the bytes.
            if len(repr(piece + bytes([byte]))) > WIDTH:
                pieces.append(repr(piece))
                piece = b""
            piece += bytes([byte])
        pieces.append(repr(piece))
        lines.append(line[: start + len(marker)])
        lines.extend("    " + piece for piece in pieces)
        lines.append(")")
    return "\n".join(lines) + "\n"


def generate(out_dir: Path) -> None:
    """Write the formatted stubs into out_dir/gpuops_device_plugin/api/."""
    from grpc_tools import protoc  # noqa: PLC0415 - only the generator needs grpcio-tools

    api = out_dir / "gpuops_device_plugin" / "api"
    for proto, upstream in PROTOS.items():
        source = f"gpuops_device_plugin/api/{proto}"
        args = ["protoc", f"-I{FILES}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}", source]
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {FILES / source}")
        header = HEADER.format(proto=proto, api=upstream)
        for suffix in SUFFIXES:
            path = api / (proto.removesuffix(".proto") + suffix)
            path.write_text(header + _split_descriptor(path.read_text()))
    ruff = str(Path(sys.executable).parent / "ruff")
    common = ["--quiet", "--config", str(ROOT / "pyproject.toml"), *(str(api / name) for name in OUTPUTS)]
    # Sort imports and drop protoc's unused `import warnings`; then format.
    subprocess.run([ruff, "check", "--fix-only", "--select", "I,F401", *common], check=True)
    subprocess.run([ruff, "format", *common], check=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    options = parser.parse_args()
    target = FILES / "gpuops_device_plugin" / "api"
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        fresh = Path(tmp) / "gpuops_device_plugin" / "api"
        stale = [
            name
            for name in OUTPUTS
            if not (target / name).exists() or (target / name).read_bytes() != (fresh / name).read_bytes()
        ]
        if options.check:
            for name in stale:
                print(f"stale: {target / name} (run scripts/gen-deviceplugin-stubs.py)", file=sys.stderr)
            return 1 if stale else 0
        for name in OUTPUTS:
            (target / name).write_bytes((fresh / name).read_bytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
