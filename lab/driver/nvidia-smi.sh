#!/usr/bin/env bash
# NVIDIA's nvidia-smi, as Debian ships it (non-free, package nvidia-smi 550.163.01-2 of
# trixie, NVIDIA's binary unmodified), for the lab driver package: NVIDIA's DRA driver's
# kubelet plugin waits until `nvidia-smi --version` runs under the driver root, and on the
# lab that nvidia-smi reads NVIDIA's mock NVML (libnvidia-ml.so.1 of the lab driver package)
# like any NVML user. Prints the path of the binary; cached under $GPUOPS_LAB_CACHE
# (default ~/.cache/gpuops-lab)/nvidia-smi-<version>/. Exit 3 when Debian's archive cannot
# be reached, 1 when the package's checksum is not the one below.
set -euo pipefail
VERSION=550.163.01-2
SHA256=547978bd189284911beace21d83834866026e4d5b2026d8bcb74f6cd147c8be9
URL=http://deb.debian.org/debian/pool/non-free/n/nvidia-graphics-drivers/nvidia-smi_${VERSION}_amd64.deb
cache="${GPUOPS_LAB_CACHE:-$HOME/.cache/gpuops-lab}/nvidia-smi-$VERSION"
say() { echo "nvidia-smi.sh: $*" >&2; }

if [[ ! -x $cache/nvidia-smi ]]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  say "downloading Debian's nvidia-smi $VERSION"
  curl -sSfL --retry 3 -o "$work/nvidia-smi.deb" "$URL" || { say "could not download $URL"; exit 3; }
  echo "$SHA256  $work/nvidia-smi.deb" | sha256sum --check --quiet - \
    || { say "$URL: sha256 is not $SHA256"; exit 1; }
  dpkg-deb -x "$work/nvidia-smi.deb" "$work/x"
  mkdir -p "$cache"
  cp "$work/x/usr/lib/nvidia/current/nvidia-smi" "$work/x/usr/share/doc/nvidia-smi/copyright" "$cache/"
  echo "$URL sha256 $SHA256" >"$cache/SOURCE"
fi
echo "$cache/nvidia-smi"
