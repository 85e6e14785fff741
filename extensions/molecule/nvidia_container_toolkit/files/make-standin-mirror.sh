#!/usr/bin/env bash
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Build, on a lab node, a signed flat apt repository laid out like NVIDIA's
# (<root>/stable/deb/<arch>/ with InRelease, Release.gpg, Packages) and its armored key at
# <root>/gpgkey, as a mirror of https://nvidia.github.io/libnvidia-container would be.
#
# The packages are STAND-INS, not NVIDIA's: NVIDIA's repository cannot be reached from the
# lab (no internet). They carry the real names, versions and dependency shape
# (nvidia-container-toolkit = base, >= tools; tools >= libnvidia-container1) and a few
# lines of shell in place of the real binaries. The key is a throwaway one made here, in
# a temporary GNUPGHOME that is deleted afterwards.
#
# Usage: make-standin-mirror.sh ROOT VERSION...   (versions like 1.18.2-1)
set -euo pipefail
root=${1:?usage: $0 ROOT VERSION...}
shift
[ $# -gt 0 ] || { echo "usage: $0 ROOT VERSION..." >&2; exit 2; }
arch=$(dpkg --print-architecture)
repo=$root/stable/deb/$arch
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GNUPGHOME=$work/gnupg
mkdir -m 700 "$GNUPGHOME" "$work/pkgs"
mkdir -p "$repo"

gpg --batch --quiet --passphrase '' \
  --quick-gen-key 'gpuops lab stand-in mirror <lab@gpuops.invalid>' ed25519 sign never

# package VERSION NAME DEPENDS: a .deb whose files come from stdin as "path|body" lines.
package() {
  local version=$1 name=$2 depends=$3 tree path body
  tree=$work/pkgs/${name}_$version
  mkdir -p "$tree/DEBIAN" "$tree/usr/share/doc/$name"
  printf 'STAND-IN package built by the gpuops.k8s molecule lab, not NVIDIA software.\n' \
    >"$tree/usr/share/doc/$name/README.stand-in"
  while IFS="|" read -r path body; do
    mkdir -p "$tree$(dirname "$path")"
    printf '#!/bin/sh\n%s\n' "$body" >"$tree$path"
    chmod 0755 "$tree$path"
  done
  {
    printf 'Package: %s\nVersion: %s\nArchitecture: %s\n' "$name" "$version" "$arch"
    printf 'Maintainer: gpuops lab <lab@gpuops.invalid>\n'
    [ -z "$depends" ] || printf 'Depends: %s\n' "$depends"
    printf 'Description: STAND-IN for NVIDIA %s (molecule lab)\n' "$name"
    printf ' Same name, version and dependencies as NVIDIA'"'"'s package; not NVIDIA software.\n'
  } >"$tree/DEBIAN/control"
  dpkg-deb --root-owner-group --build "$tree" "$repo/${name}_${version}_$arch.deb" >/dev/null
}

for version in "$@"; do
  upstream=${version%-*}
  package "$version" libnvidia-container1 "" </dev/null
  package "$version" libnvidia-container-tools "libnvidia-container1 (>= $version)" <<TREE
/usr/bin/nvidia-container-cli|echo "cli-version: $upstream (stand-in)"
TREE
  package "$version" nvidia-container-toolkit-base "" <<TREE
/usr/bin/nvidia-ctk|echo "NVIDIA Container Toolkit CLI version $upstream (stand-in)"
/usr/bin/nvidia-container-runtime|echo "stand-in nvidia-container-runtime $upstream: no runtime here" >&2; exit 1
TREE
  package "$version" nvidia-container-toolkit \
    "nvidia-container-toolkit-base (= $version), libnvidia-container-tools (>= $version), libnvidia-container-tools (<< 2.0.0)" <<TREE
/usr/bin/nvidia-container-runtime-hook|echo "stand-in nvidia-container-runtime-hook $upstream" >&2; exit 1
TREE
done

cd "$repo"
apt-ftparchive packages . >Packages
gzip -9kf Packages
apt-ftparchive release . >Release
gpg --batch --yes --clearsign -o InRelease Release
gpg --batch --yes -abs -o Release.gpg Release
gpg --armor --export >"$root/gpgkey"
