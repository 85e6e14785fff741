#!/usr/bin/env bash
# Build a lab node image: Debian (bookworm or trixie) by debootstrap, systemd as PID 1,
# imported into podman as localhost/gpuops-node:<suite>. Cached: rebuilt only when this
# script changes (the image carries a label with this script's hash).
# Usage: lab/node-image.sh <bookworm|trixie>; prints the image name as its last line.
# (No sid image: sid's systemd no longer boots on this host's cgroup v1 hybrid layout;
# nodes that need containerd 2.x take it from sid on a trixie node, see
# extensions/molecule/container_runtime_fresh/prepare.yml.)
set -euo pipefail
suite=${1:?usage: $0 <bookworm|trixie>}
case $suite in bookworm | trixie) ;; *) echo "unsupported suite: $suite" >&2; exit 2 ;; esac
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}
image=localhost/gpuops-node:$suite
stamp=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)

if [ "$(podman image inspect --format '{{ index .Labels "gpuops.stamp" }}' "$image" 2>/dev/null)" = "$stamp" ]; then
  echo "$image"
  exit 0
fi
root=$(mktemp -d /var/tmp/gpuops-node.XXXXXX)
trap 'rm -rf "$root"' EXIT
# python3 for Ansible; apt-transport bits and ca-certificates for package installs;
# iproute2 and procps so daemons and tests have their usual tools.
debootstrap --variant=minbase \
  --include=systemd,systemd-sysv,dbus,python3,python3-apt,sudo,ca-certificates,iproute2,procps,gnupg \
  "$suite" "$root" http://deb.debian.org/debian >&2
# Units that cannot work in a container, and a machine id systemd makes on first boot.
for unit in getty.target console-getty.service systemd-logind.service systemd-firstboot.service \
  sys-kernel-config.mount sys-kernel-debug.mount sys-kernel-tracing.mount dev-hugepages.mount \
  systemd-remount-fs.service; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
: >"$root/etc/machine-id"
# The non-free components carry the NVIDIA driver packages the driver role installs.
sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' \
  "$root/etc/apt/sources.list.d/debian.sources" 2>/dev/null || true
if [ -f "$root/etc/apt/sources.list" ]; then
  sed -i 's/ main$/ main contrib non-free non-free-firmware/' "$root/etc/apt/sources.list"
fi
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
# An empty package index must not look fresh: apt's cache_valid_time reads this mtime.
touch -d 2000-01-01 "$root/var/lib/apt/lists"
tar -C "$root" -c . | podman import \
  --change 'CMD ["/lib/systemd/systemd"]' --change 'ENV container=podman' \
  --change 'STOPSIGNAL SIGRTMIN+3' --change "LABEL gpuops.stamp=$stamp" - "$image" >&2
echo "$image"
