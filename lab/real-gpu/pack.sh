#!/usr/bin/env bash
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Packs, in .devcarry/ (git-ignored through .git/info/exclude), what lab/real-gpu/on-device.sh
# needs on a lent GPU machine that can fetch nothing: the Python packages of
# requirements/dev.txt that record.py and the daemon import (cp312 wheels, unpacked: one
# xz tarball is half their size), NVIDIA's nvidia-ctk and nvidia-cdi-hook and device plugin
# built by the lab's scripts, and the lab's etcd and kube-apiserver. About 55 MB, under the
# device tool's 64 MiB.
#
#   lab/real-gpu/pack.sh        then: device run, carry [".devcarry"], command on-device.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.devcarry/' .git/info/exclude 2>/dev/null || echo '/.devcarry/' >>.git/info/exclude
packages=(ansible-core resolvelib cryptography cffi pycparser PyYAML grpcio protobuf prometheus_client
  inotify-simple nvidia-ml-py kubernetes durationpy websocket-client requests-oauthlib oauthlib
  python-dateutil urllib3 certifi requests Jinja2 MarkupSafe packaging pydantic pydantic_core
  annotated-types typing-inspection typing_extensions idna charset-normalizer)
pins=()
for name in "${packages[@]}"; do
  pins+=("$(grep -i "^${name}==" requirements/dev.txt)")
done
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
platforms=()
for p in manylinux_2_34_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 \
  manylinux2014_x86_64 manylinux1_x86_64; do platforms+=(--platform "$p"); done
echo "pack: downloading ${#pins[@]} wheels (cp312)" >&2
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d "$scratch/wheels" "${pins[@]}" six
for wheel in "$scratch"/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$scratch/site"; done
mkdir -p .devcarry "$scratch/bin"
tar -C "$scratch/site" -cf - . | xz -T2 -6 >.devcarry/site.tar.xz
echo "pack: binaries (the lab's builds; each script reuses its cache)" >&2
bash lab/toolkit/build.sh v1.20.2 >/dev/null
toolkits=("$HOME"/.cache/gpuops-lab/toolkit-bin-v1.20.2-*/bin)
toolkit=${toolkits[0]}
plugin=$(bash lab/peer/build-nvidia-plugin.sh | tail -1)
kube=$(bash lab/kube/build.sh | tail -1)
etcd=$(bash lab/kube/etcd.sh | tail -1)
cp "$toolkit/nvidia-ctk" "$toolkit/nvidia-cdi-hook" "$plugin/nvidia-device-plugin" "$kube/kube-apiserver" \
  "$etcd/etcd" "$scratch/bin/"
tar -C "$scratch/bin" -cf - . | xz -T2 -9 >.devcarry/bin.tar.xz
du -ch .devcarry/* >&2
