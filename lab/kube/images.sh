#!/usr/bin/env bash
# The lab cluster's images, built here because no registry can be reached:
#   localhost/gpuops-lab/pause:1       Kubernetes' own pause.c (from the k8s.io/kubernetes
#                                       module the binaries come from, stamped with the
#                                       release's pause TAG), static;
#   localhost/gpuops-lab/tools:1       Debian's static busybox, for test pods.
#   localhost/gpuops-lab/nvml-query:1  the lab node image's Debian python3 with NVIDIA's
#                                       nvidia-ml-py, running lab/kube/nvml-query.py: what
#                                       a container sees of the GPUs, for GPU proofs in pods.
#   nvcr.io/nvidia/k8s-device-plugin:<v> NVIDIA's device plugin built from its Go source
#                                       (lab/peer/build-nvidia-plugin.sh), laid out as
#                                       NVIDIA's own Dockerfile lays it out (binary, ENV,
#                                       ENTRYPOINT) on the same Debian base, under NVIDIA's
#                                       name, so that device_plugin_mode nvidia serves a
#                                       real kubelet with no registry.
# Prints "NAME ARCHIVE" per image (docker-archive tarballs for `ctr images import`).
# Cached under $GPUOPS_LAB_CACHE (default ~/.cache/gpuops-lab).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${GPUOPS_LAB_CACHE:-$HOME/.cache/gpuops-lab}"
export CONTAINERS_CONF="${CONTAINERS_CONF:-$here/../containers.conf}"
# shellcheck source=lab/kube/release.sh
source "$here/release.sh"
nvml_py=13.615.71  # nvidia-ml-py, as requirements/dev.txt pins it
key="$(cat "$0" "$here/nvml-query.py" | sha256sum | cut -c1-12)"
out="$cache/images-$KUBE_VERSION-$key"
pause=localhost/gpuops-lab/pause:1
tools=localhost/gpuops-lab/tools:1
query=localhost/gpuops-lab/nvml-query:1
# NVIDIA's plugin: the release device_plugin_nvidia_version pins (build-nvidia-plugin.sh).
plugin_dir="$(bash "$here/../peer/build-nvidia-plugin.sh" | tail -n1)"
plugin_version="$(basename "$plugin_dir")"
plugin=nvcr.io/nvidia/k8s-device-plugin:$plugin_version
plugin_out="$cache/nvidia-device-plugin-image-$plugin_version-$key"

if [[ ! -f "$out/.complete" ]]; then
  rm -rf "$out" && mkdir -p "$out"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  src="$(cd "$kube_module" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause"
  tag=$(awk '$1 == "TAG" && $2 == "?=" {print $3; exit}' "$src/Makefile")
  mkdir -p "$work/pause"
  gcc -Os -static -DVERSION="v$tag-gpuops-lab" -o "$work/pause/pause" "$src/linux/pause.c"
  tar -C "$work/pause" -c . | podman import --change 'ENTRYPOINT ["/pause"]' \
    --change 'USER 65535:65535' - "$pause" >&2
  podman save --format docker-archive -o "$out/pause.tar" "$pause" >&2

  (cd "$work" && apt-get download -q busybox-static >&2)
  dpkg -x "$work"/busybox-static_*.deb "$work/pkg"
  mkdir -p "$work/tools/bin"
  cp "$work/pkg/bin/busybox" "$work/tools/bin/"
  for applet in sh env cat grep ls sleep echo true; do ln -s busybox "$work/tools/bin/$applet"; done
  tar -C "$work/tools" -c . | podman import --change 'CMD ["/bin/sh"]' - "$tools" >&2
  podman save --format docker-archive -o "$out/tools.tar" "$tools" >&2

  base=$(bash "$here/../node-image.sh" bookworm | tail -n1)
  python3 -m pip download -q --no-deps -d "$work/wheel" "nvidia-ml-py==$nvml_py" >&2
  builder=gpuops-lab-nvml-query-build
  podman rm -f "$builder" >/dev/null 2>&1 || true
  podman create --name "$builder" "$base" >/dev/null
  # A wheel of pure Python imports as it is (zipimport): no pip in the image.
  podman cp "$work"/wheel/nvidia_ml_py-*.whl "$builder:/opt/nvidia_ml_py.whl"
  podman cp "$here/nvml-query.py" "$builder:/opt/nvml-query.py"
  podman commit --change 'ENV PYTHONPATH=/opt/nvidia_ml_py.whl' --change 'ENTRYPOINT []' \
    --change 'CMD ["python3", "/opt/nvml-query.py"]' "$builder" "$query" >&2
  podman rm -f "$builder" >/dev/null
  podman save --format docker-archive -o "$out/nvml-query.tar" "$query" >&2
  touch "$out/.complete"
fi
if [[ ! -f "$plugin_out/.complete" ]]; then
  rm -rf "$plugin_out" && mkdir -p "$plugin_out"
  base=$(bash "$here/../node-image.sh" bookworm | tail -n1)
  builder=gpuops-lab-nvidia-plugin-build
  podman rm -f "$builder" >/dev/null 2>&1 || true
  podman create --name "$builder" "$base" >/dev/null
  podman cp "$plugin_dir/nvidia-device-plugin" "$builder:/usr/bin/nvidia-device-plugin"
  # NVIDIA's deployments/container/Dockerfile: the runtime gives the plugin every GPU and
  # the driver's utility libraries (NVML).
  podman commit --change 'ENV NVIDIA_DISABLE_REQUIRE=true' --change 'ENV NVIDIA_VISIBLE_DEVICES=all' \
    --change 'ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility' --change 'CMD []' \
    --change 'ENTRYPOINT ["nvidia-device-plugin"]' "$builder" "$plugin" >&2
  podman rm -f "$builder" >/dev/null
  podman save --format docker-archive -o "$plugin_out/nvidia-device-plugin.tar" "$plugin" >&2
  touch "$plugin_out/.complete"
fi
echo "$pause $out/pause.tar"
echo "$tools $out/tools.tar"
echo "$query $out/nvml-query.tar"
echo "$plugin $plugin_out/nvidia-device-plugin.tar"
