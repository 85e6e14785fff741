#!/usr/bin/env bash
# Install the host packages the lab needs, from Debian, when they are missing.
set -euo pipefail
need=()
for pkg in podman runc debootstrap uidmap slirp4netns fuse-overlayfs; do
  dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "lab: these Debian packages are needed: ${need[*]} (run as root, or install them)" >&2
    exit 1
  fi
  echo "lab: installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi
