#!/usr/bin/env bash
# Pin a Kubernetes release for the lab: writes releases/<version>/go.mod and go.sum, a
# wrapper module that builds k8s.io/kubernetes <version>'s commands. k8s.io/kubernetes
# replaces its staging modules (k8s.io/api, kubelet, ...) with ./staging paths that a
# dependent module cannot see, so each is pinned here to its published v0.X.Y, the list
# read from that release's own go.mod (1.37 added k8s.io/cri-streaming, for one).
# Usage: lab/kube/pin.sh v1.37.2   (needs the Go module proxy)
set -euo pipefail
version=${1:?usage: $0 v1.X.Y}
[[ $version =~ ^v1\.([0-9]+)\.([0-9]+)$ ]] || { echo "pin.sh: '$version' is not a release like v1.37.2" >&2; exit 2; }
staging=v0.${BASH_REMATCH[1]}.${BASH_REMATCH[2]}
out="$(cd "$(dirname "$0")" && pwd)/releases/$version"
echo "pin.sh: reading k8s.io/kubernetes@$version's go.mod" >&2
upstream=$(go mod download -json "k8s.io/kubernetes@$version" | python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT
cd "$work"
go mod init gpuops.invalid/lab/kube 2>/dev/null
awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "$upstream" | while read -r module; do
  go mod edit -replace "$module=$module@$staging"
done
go mod edit -require "k8s.io/kubernetes@$version"
for command in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
  go mod edit -tool "k8s.io/kubernetes/cmd/$command"
done
echo "pin.sh: go mod tidy (downloads what the commands import)" >&2
GOFLAGS=-mod=mod go mod tidy
mkdir -p "$out" && cp go.mod go.sum "$out/"
echo "$out"
