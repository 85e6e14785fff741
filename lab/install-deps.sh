#!/usr/bin/env bash
# Install the host packages the lab needs, from Debian, when they are missing.
#   install-deps.sh           podman lab nodes (molecule)
#   install-deps.sh cluster   also the lab cluster on this host (lab/cluster.py)
#   install-deps.sh sanity    only the linter for shell scripts (Debian's shellcheck), which
#                             ansible-test sanity otherwise skips with a mere warning
set -euo pipefail
# gcc, libc6-dev (cgo) and apt-utils (apt-ftparchive): lab/toolkit/build.sh.
pkgs=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs gcc libc6-dev apt-utils)
if [[ "${1:-}" == sanity ]]; then
  pkgs=(shellcheck)
elif [[ "${1:-}" == cluster ]]; then
  # etcd comes from lab/kube/etcd.sh (3.5; bookworm has 3.4), Kubernetes from lab/kube/build.sh.
  pkgs+=(containerd containernetworking-plugins iproute2)
fi
need=()
for pkg in "${pkgs[@]}"; do
  dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "lab: these Debian packages are needed: ${need[*]} (run as root, or install them)" >&2
    exit 1
  fi
  echo "lab: installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends "${need[@]}" >&2
fi
