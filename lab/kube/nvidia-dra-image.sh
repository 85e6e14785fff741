#!/usr/bin/env bash
# The lab nodes' image of NVIDIA's DRA driver for GPUs, built here because no registry can
# be reached (as lab/kube/images.sh builds NVIDIA's device plugin's):
#   registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:<v>  the chart's default image
#     name and tag, so the release's own Helm chart runs it unchanged. Laid out as the
#     release's deployments/container/Dockerfile lays it out (gpu-kubelet-plugin and
#     nvidia-cdi-hook in /usr/bin, kubelet-plugin-prestart.sh for the chart's init
#     container, /templates, /LICENSE, its ENV, root) on the lab's Debian node base
#     (bookworm: bash, coreutils, findutils, mount and sed, which the chart's commands
#     use), not on distroless/cc:debug. Binaries from lab/peer/build-nvidia-dra.sh; the
#     compute-domain commands and the webhook are not in it (see that script).
# Separate from images.sh on purpose: the driver takes minutes to build cold, and only make
# test's DRA test needs it (device_plugin_mode nvidia_dra on one lab node), not make site.
# Prints "NAME ARCHIVE" (a docker-archive tarball for `ctr -n k8s.io images import`); it
# imports nothing into any node (`lab/nodes.py nvidia-dra NODE` does). Cached under $GPUOPS_LAB_CACHE (default
# ~/.cache/gpuops-lab), keyed by the driver's version and this script: delete the
# directory to rebuild. Exits 3 (with build-nvidia-dra.sh's message) when the driver
# cannot be built here.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${GPUOPS_LAB_CACHE:-$HOME/.cache/gpuops-lab}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/../containers.conf}"
say() { echo "nvidia-dra-image: $*" >&2; }

set +e
dra_dir="$(bash "$here/../peer/build-nvidia-dra.sh" | tail -n1)"
rc=${PIPESTATUS[0]}
set -e
[[ $rc -eq 0 ]] || exit "$rc"
version="$(basename "$dra_dir")"
key="$(cat "$0" "$dra_dir/BUILD-INFO" | sha256sum | cut -c1-12)"
image=registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:$version
out="$cache/nvidia-dra-image-$version-$key"

if [[ ! -f "$out/.complete" ]]; then
  started=$SECONDS
  rm -rf "$out" && mkdir -p "$out"
  base=$(bash "$here/../node-image.sh" bookworm | tail -n1)
  builder=gpuops-lab-nvidia-dra-build
  podman rm -f "$builder" >/dev/null 2>&1 || true
  trap 'podman rm -f "$builder" >/dev/null 2>&1 || true' EXIT
  podman create --name "$builder" "$base" >/dev/null
  podman cp "$dra_dir/gpu-kubelet-plugin" "$builder:/usr/bin/gpu-kubelet-plugin"
  podman cp "$dra_dir/nvidia-cdi-hook" "$builder:/usr/bin/nvidia-cdi-hook"
  podman cp "$dra_dir/image/kubelet-plugin-prestart.sh" "$builder:/usr/bin/kubelet-plugin-prestart.sh"
  podman cp "$dra_dir/image/templates" "$builder:/templates"
  podman cp "$dra_dir/image/LICENSE" "$builder:/LICENSE"
  podman cp "$dra_dir/BUILD-INFO" "$builder:/BUILD-INFO.gpuops-lab"
  # The release Dockerfile's ENV, labels and user; no ENTRYPOINT or CMD (its base has none
  # that the chart uses: every container in the chart gives its command). STOPSIGNAL: the
  # node base's SIGRTMIN+3 (for systemd) would be what containerd stops the plugin with;
  # the release image has none, so SIGTERM, which the plugin handles.
  podman commit \
    --change 'ENV NVIDIA_DISABLE_REQUIRE=true' --change 'ENV NVIDIA_VISIBLE_DEVICES=all' \
    --change 'ENV NVIDIA_DRIVER_CAPABILITIES=utility' \
    --change 'LABEL name="DRA Driver for NVIDIA GPUs"' --change 'LABEL vendor=NVIDIA' \
    --change "LABEL version=$version" \
    --change 'LABEL org.opencontainers.image.source=https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu' \
    --change 'LABEL gpuops.lab-build="built by the gpuops.k8s lab from the Go module, not by NVIDIA; see /BUILD-INFO.gpuops-lab"' \
    --change 'USER root:root' --change 'ENTRYPOINT []' --change 'CMD []' --change 'STOPSIGNAL SIGTERM' \
    "$builder" "$image" >&2
  podman rm -f "$builder" >/dev/null
  trap - EXIT
  podman save --format docker-archive -o "$out/dra-driver-nvidia-gpu.tar" "$image" >&2
  touch "$out/.complete"
  say "saved $image in $((SECONDS - started)) s"
fi
echo "$image $out/dra-driver-nvidia-gpu.tar"
