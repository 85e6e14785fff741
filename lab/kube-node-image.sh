#!/usr/bin/env bash
# Build a lab Kubernetes node image: the lab node image (lab/node-image.sh) plus what a
# fleet's provisioning gives a machine before gpuops runs: the distribution's containerd
# and CNI plugins, and sshd with an admin user who reaches root through sudo (Ansible
# comes in over SSH with become, as on a real fleet). Nothing of NVIDIA's. The kubelet and
# its configuration come at `lab/nodes.py up` (the lab's join, like kubeadm's).
# Cached: rebuilt when this script or the base image changes (labels carry both).
# Usage: lab/kube-node-image.sh <bookworm|trixie>; prints the image name as its last line.
set -euo pipefail
suite=${1:?usage: $0 <bookworm|trixie>}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$here/containers.conf}
base=$(bash "$here/node-image.sh" "$suite" | tail -n1)
image=localhost/gpuops-kube-node:$suite
stamp="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-16)-$(podman image inspect --format '{{.Id}}' "$base" | cut -c1-12)"

if [ "$(podman image inspect --format '{{ index .Labels "gpuops.stamp" }}' "$image" 2>/dev/null)" = "$stamp" ]; then
  echo "$image"
  exit 0
fi
echo "kube-node-image: building $image from $base (apt: containerd, CNI plugins, sshd)" >&2
builder=gpuops-kube-node-build-$suite
podman rm -f "$builder" >/dev/null 2>&1 || true
podman run --name "$builder" --entrypoint /bin/bash "$base" -euc '
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    containerd containernetworking-plugins openssh-server
  useradd --create-home --shell /bin/bash gpuops
  echo "gpuops ALL=(ALL) NOPASSWD: ALL" >/etc/sudoers.d/gpuops
  chmod 0440 /etc/sudoers.d/gpuops
  printf "PasswordAuthentication no\nPermitRootLogin no\n" >/etc/ssh/sshd_config.d/gpuops-lab.conf
  # Every node makes its own host keys when it starts (lab/nodes.py).
  rm -f /etc/ssh/ssh_host_*
  apt-get clean
  rm -rf /var/lib/apt/lists/*
  touch -d 2000-01-01 /var/lib/apt/lists' >&2
podman commit --change 'CMD ["/lib/systemd/systemd"]' --change 'ENTRYPOINT []' \
  --change "LABEL gpuops.stamp=$stamp" "$builder" "$image" >&2
podman rm -f "$builder" >/dev/null
echo "$image"
