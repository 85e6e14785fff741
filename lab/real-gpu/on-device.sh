#!/usr/bin/env bash
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# On a lent GPU machine (the device tool), from the repository root, with .devcarry carried
# (lab/real-gpu/pack.sh): record.py's fixtures in $OUT/NAME, then bench/device_plugin.py on
# the real GPU, gpuops's daemon beside NVIDIA's plugin. Reads the GPU; sets nothing on it.
#
#   lab/real-gpu/on-device.sh NAME [CALLS RESTARTS IDLE_S]
set -uo pipefail
name=${1:?fixture name, e.g. h200-141gb}
out=${OUT:?set by the device tool}/$name
mkdir -p "$out" /tmp/site /tmp/devbin
export PYTHONUNBUFFERED=1 LC_ALL=C.UTF-8
tar -C /tmp/site -xJf .devcarry/site.tar.xz && tar -C /tmp/devbin -xJf .devcarry/bin.tar.xz || exit 1
# nvidia-ctk finds nvidia-cdi-hook beside it or on PATH, as a packaged install does.
install -m 0755 /tmp/devbin/nvidia-ctk /tmp/devbin/nvidia-cdi-hook /usr/bin/
export PYTHONPATH=/tmp/site GPUOPS_LAB_KUBE_BIN=/tmp/devbin GPUOPS_LAB_ETCD_BIN=/tmp/devbin
python3 --version
nvidia-smi -L | sed 's/(UUID: [^)]*)/(UUID removed)/'
started=$SECONDS
python3 lab/real-gpu/record.py "$out" /usr/bin/nvidia-ctk
recorded=$?
echo "record.py: rc $recorded in $((SECONDS - started)) s"
started=$SECONDS
python3 bench/device_plugin.py --real-gpu --nvidia-binary /tmp/devbin/nvidia-device-plugin \
  --calls "${2:-2000}" --restarts "${3:-20}" --idle "${4:-20}" >"$out/bench-device-plugin.md"
benched=$?
cat "$out/bench-device-plugin.md"
echo "bench/device_plugin.py: rc $benched in $((SECONDS - started)) s"
exit $((recorded || benched))
