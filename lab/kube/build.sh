#!/usr/bin/env bash
# Build the lab cluster's Kubernetes binaries from the k8s.io/kubernetes Go module
# (through the module proxy) and print the directory that holds them.
#
# The release is KUBE_VERSION (default and pins: release.sh). The result is cached per
# go.mod/go.sum hash under $GPUOPS_LAB_CACHE (default
# ~/.cache/gpuops-lab), outside the work tree, so that a fresh clone on the same
# machine (CI) reuses it; delete that directory to force a rebuild.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=lab/kube/release.sh
source "$here/release.sh"
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
cache="${GPUOPS_LAB_CACHE:-$HOME/.cache/gpuops-lab}"
key="$(cat "$kube_module/go.mod" "$kube_module/go.sum" "$0" | sha256sum | cut -c1-12)"
out="$cache/kube-$KUBE_VERSION-$key"
# One build at a time: make test's lanes (the daemon's private API server, the lab) may
# ask at once on a cold cache, and the second would remove the first one's half-built tree.
mkdir -p "$cache"
exec 9>"$cache/.kube-build.lock"
flock 9

if [[ -f "$out/.complete" ]]; then
  echo "$out/bin"
  exit 0
fi
command -v go >/dev/null || { echo "build.sh: no Go toolchain on PATH (Go >= 1.24 is needed)" >&2; exit 3; }

rm -rf "$out" && mkdir -p "$out/bin"
major="${KUBE_VERSION#v}" && major="${major%%.*}"
minor="${KUBE_VERSION#v*.}" && minor="${minor%%.*}"
# What `make` in kubernetes/kubernetes stamps in; without it every component
# reports v0.0.0-master and the kubelet/apiserver version skew checks read nonsense.
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
ldflags+=" -X ${pkg/component-base/client-go\/pkg}.gitVersion=$KUBE_VERSION"

start=$SECONDS
for c in "${COMPONENTS[@]}"; do
  echo "build.sh: building $c $KUBE_VERSION" >&2
  (cd "$kube_module" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" \
    -o "$out/bin/$c" "k8s.io/kubernetes/cmd/$c")
done
echo "build.sh: built ${COMPONENTS[*]} in $((SECONDS - start)) s" >&2
touch "$out/.complete"
echo "$out/bin"
