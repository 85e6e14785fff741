#!/usr/bin/env bash
# A local apt repository of lab "driver" packages, one per version given:
#   lab/driver/build-repo.sh OUT_DIR 550.163.01 560.35.03
# Package gpuops-lab-driver, version <driver>-1, behaves like a driver above the kernel:
# NVIDIA's mock libnvidia-ml.so.<driver> and libcuda.so.<driver> (+ .so.1) where the
# driver's libraries go, the mock NVML profile its GPUs read
# (lab/profiles/h100-8x-nvswitch.yaml reporting that driver) at
# /usr/share/gpuops-lab-driver/profile.yaml (linked from /usr/config/config.yaml, where the
# mock finds it without MOCK_NVML_CONFIG), and, made by its postinst with mknod as NVIDIA's
# mock deployment does, /dev/nvidia0..7 (195/i), /dev/nvidiactl (195/255) and
# /dev/nvidia-uvm(-tools) (510/0-1), removed again by its postrm (lab/driver/driver-root.sh
# lays the files out). It provides libnvidia-ml.so.1 and libcuda.so.1, as Debian's driver
# library packages do, so that what depends on NVML (python3-pynvml) takes it.
# Use it as: deb [trusted=yes] file:OUT_DIR ./
set -euo pipefail
out=${1:?usage: build-repo.sh OUT_DIR VERSION...}
shift
[ $# -gt 0 ] || { echo "build-repo.sh: give at least one driver version" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
profile="$root/lab/profiles/h100-8x-nvswitch.yaml"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for version in "$@"; do
  [[ $version =~ ^[0-9]+(\.[0-9]+)+$ ]] || { echo "build-repo.sh: $version is not a driver version" >&2; exit 2; }
  pkg="$work/gpuops-lab-driver_$version"
  mkdir -p "$pkg/DEBIAN"
  sed -e "s/^  driver_version: .*/  driver_version: \"$version\"/" \
      -e "s/^  nvml_version: .*/  nvml_version: \"12.$version\"/" \
      "$profile" >"$work/profile-$version.yaml"
  grep -q "driver_version: \"$version\"" "$work/profile-$version.yaml"
  bash "$root/lab/driver/driver-root.sh" "$pkg" "$work/profile-$version.yaml" --no-devices >/dev/null
  count=$(grep -c '^  - index:' "$work/profile-$version.yaml")
  cat >"$pkg/DEBIAN/postinst" <<POSTINST
#!/bin/sh
# Device nodes as NVIDIA's mock deployment makes them; no kernel module backs them.
set -e
if [ "\$1" = configure ]; then
  i=0
  while [ \$i -lt $count ]; do
    [ -c /dev/nvidia\$i ] || mknod -m 0666 /dev/nvidia\$i c 195 \$i
    i=\$((i + 1))
  done
  [ -c /dev/nvidiactl ] || mknod -m 0666 /dev/nvidiactl c 195 255
  [ -c /dev/nvidia-uvm ] || mknod -m 0666 /dev/nvidia-uvm c 510 0
  [ -c /dev/nvidia-uvm-tools ] || mknod -m 0666 /dev/nvidia-uvm-tools c 510 1
fi
POSTINST
  cat >"$pkg/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
if [ "$1" = remove ] || [ "$1" = purge ]; then
  rm -f /dev/nvidia[0-9]* /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools
fi
POSTRM
  chmod 0755 "$pkg/DEBIAN/postinst" "$pkg/DEBIAN/postrm"
  cat >"$pkg/DEBIAN/control" <<CONTROL
Package: gpuops-lab-driver
Version: $version-1
Architecture: all
Provides: libnvidia-ml.so.1, libcuda.so.1
Maintainer: gpuops.k8s maintainers <dev@gpuops.invalid>
Section: misc
Priority: optional
Description: gpuops lab: mock NVIDIA driver $version
 NVIDIA's mock NVML and CUDA libraries named for driver $version, the mock
 NVML profile of the gpuops lab node reporting that driver, and device nodes.
CONTROL
  dpkg-deb --root-owner-group -Zxz --build "$pkg" "$out/gpuops-lab-driver_${version}-1_all.deb" >/dev/null
done
(cd "$out" && dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages)
echo "$out"
