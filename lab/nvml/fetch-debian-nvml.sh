#!/usr/bin/env bash
# Fetch Debian's real NVML library (package libnvidia-ml1, non-free) into the cache
# without installing it or touching the system's apt configuration. On a machine without
# the NVIDIA kernel module, nvmlInit on this library fails exactly as on a node whose
# driver is installed but not loaded. Prints the library directory as its last line.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache=${GPUOPS_CACHE:-$repo/.cache}/debian-nvml
suite=${DEBIAN_SUITE:-bookworm}
libdir=$cache/root/usr/lib/x86_64-linux-gnu/nvidia/current

if [ ! -e "$libdir/libnvidia-ml.so.1" ]; then
  rm -rf "$cache" && mkdir -p "$cache"/{etc,lists/partial,archives/partial}
  cat >"$cache/etc/nonfree.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite
Components: non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$cache/etc"
       -o Dir::State::Lists="$cache/lists" -o Dir::Cache="$cache" -o Debug::NoLocking=1
       -o APT::Sandbox::User=root -q)
  apt-get "${apt[@]}" update >&2
  (cd "$cache" && apt-get "${apt[@]}" download libnvidia-ml1 >&2)
  dpkg -x "$cache"/libnvidia-ml1_*.deb "$cache/root"
fi
echo "$libdir"
