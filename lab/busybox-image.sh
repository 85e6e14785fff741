#!/usr/bin/env bash
# A tiny OCI image (Debian's static busybox) for containers run inside lab nodes, where
# no registry can be reached. Cached; prints the archive's path as its last line.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${GPUOPS_CACHE:-$here/../.cache}/lab
archive=$cache/busybox-oci.tar
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}
if [ ! -s "$archive" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$cache" "$work/rootfs/bin"
  (cd "$work" && apt-get download -q busybox-static >&2)
  dpkg -x "$work"/busybox-static_*.deb "$work/pkg"
  cp "$work/pkg/bin/busybox" "$work/rootfs/bin/"
  for applet in sh sleep echo; do ln -s busybox "$work/rootfs/bin/$applet"; done
  tar -C "$work/rootfs" -c . | podman import --change 'CMD ["/bin/sleep","3600"]' - localhost/gpuops-busybox:lab >&2
  podman save --format oci-archive -o "$archive.tmp" localhost/gpuops-busybox:lab >&2
  mv "$archive.tmp" "$archive"
fi
echo "$archive"
