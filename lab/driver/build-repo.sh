#!/usr/bin/env bash
# A local apt repository of lab "driver" packages, one per version given:
#   lab/driver/build-repo.sh OUT_DIR 550.163.01 560.35.03
# Package gpuops-lab-driver, version <driver>-1, installs the mock NVML profile the lab
# node's GPUs read (lab/profiles/h100-8x-nvswitch.yaml reporting that driver) at
# /usr/share/gpuops-lab-driver/profile.yaml. Use it as: deb [trusted=yes] file:OUT_DIR ./
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
  mkdir -p "$pkg/DEBIAN" "$pkg/usr/share/gpuops-lab-driver"
  sed -e "s/^  driver_version: .*/  driver_version: \"$version\"/" \
      -e "s/^  nvml_version: .*/  nvml_version: \"12.$version\"/" \
      "$profile" >"$pkg/usr/share/gpuops-lab-driver/profile.yaml"
  grep -q "driver_version: \"$version\"" "$pkg/usr/share/gpuops-lab-driver/profile.yaml"
  cat >"$pkg/DEBIAN/control" <<CONTROL
Package: gpuops-lab-driver
Version: $version-1
Architecture: all
Maintainer: gpuops.k8s maintainers <dev@gpuops.invalid>
Section: misc
Priority: optional
Description: gpuops lab: mock NVIDIA driver $version
 The mock NVML profile of the gpuops lab node, reporting driver $version.
CONTROL
  dpkg-deb --root-owner-group -Zxz --build "$pkg" "$out/gpuops-lab-driver_${version}-1_all.deb" >/dev/null
done
(cd "$out" && dpkg-scanpackages --multiversion . /dev/null 2>/dev/null >Packages)
echo "$out"
