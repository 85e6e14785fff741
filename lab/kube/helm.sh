#!/usr/bin/env bash
# Build Helm (helm.sh/helm/v3, cmd/helm) from the Go module proxy and print the directory
# that holds it: the lab has no helm otherwise, and NVIDIA's DRA driver is installed with its
# own chart (lab/peer/build-nvidia-dra.sh copies it out of the driver's module).
#
# Built as helm's Makefile builds it (`make build`: CGO_ENABLED=0, -trimpath, its -ldflags):
# the version stamped in so `helm version` prints it, and the default Kubernetes version of
# `helm template` and lint (chartutil/rules k8sVersionMajor/Minor) from the client-go minor
# that release's go.mod requires, as the Makefile computes it. No git metadata in a module
# zip: gitCommit and gitTreeState are empty, as for a build outside a git tree.
#
# HELM_VERSION picks the release (default v3.22.0). Cached under $GPUOPS_LAB_CACHE
# (default ~/.cache/gpuops-lab)/helm/<version>/ with a BUILD-INFO; delete it to rebuild.
# Exit 3 when the Go toolchain or the module is unavailable here, 1 when the build breaks.
set -euo pipefail
VERSION=${HELM_VERSION:-v3.22.0}
MODULE=helm.sh/helm/v3
cache="${GPUOPS_LAB_CACHE:-$HOME/.cache/gpuops-lab}"
out="$cache/helm/$VERSION"
say() { echo "helm.sh: $*" >&2; }

if [[ -f "$out/.complete" ]]; then
  echo "$out"
  exit 0
fi
command -v go >/dev/null || { say "no Go toolchain on PATH"; exit 3; }
[[ $VERSION =~ ^v3\.[0-9]+\.[0-9]+$ ]] || { say "$VERSION is not a Helm 3 release like v3.22.0"; exit 2; }

say "downloading $MODULE@$VERSION (module proxy)"
json=$(go mod download -json "$MODULE@$VERSION" 2>&1) || { say "go mod download $MODULE@$VERSION failed: $json"; exit 3; }
read -r src sum < <(python3 -c 'import json, sys; d = json.load(sys.stdin); print(d["Dir"], d["Sum"])' <<<"$json")

# The Makefile's LDFLAGS, which this script repeats: fail loudly if a release changes them.
# shellcheck disable=SC2016  # the Makefile's own text, $(...) included: not for bash to expand
for line in 'LDFLAGS     := -w -s' \
  'LDFLAGS += -X helm.sh/helm/v3/internal/version.version=${BINARY_VERSION}' \
  'LDFLAGS += -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(K8S_MODULES_MINOR_VER)' \
  "K8S_MODULES_MAJOR_VER=\$(shell echo \$\$((\$(firstword \$(K8S_MODULES_VER)) + 1)))"; do
  grep -qF "$line" "$src/Makefile" || { say "$VERSION: its Makefile no longer has: $line"; exit 1; }
done
client_go=$(awk '$1 == "k8s.io/client-go" {print $2; exit}' "$src/go.mod")
[[ $client_go =~ ^v0\.([0-9]+)\.[0-9]+ ]] || { say "$VERSION: go.mod requires client-go '$client_go'"; exit 1; }
k8s_minor=${BASH_REMATCH[1]}
ldflags="-w -s -X $MODULE/internal/version.version=$VERSION -X $MODULE/internal/version.metadata="
ldflags+=" -X $MODULE/internal/version.gitCommit= -X $MODULE/internal/version.gitTreeState="
for pkg in pkg/lint/rules pkg/chartutil; do
  ldflags+=" -X $MODULE/$pkg.k8sVersionMajor=1 -X $MODULE/$pkg.k8sVersionMinor=$k8s_minor"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuops-helm.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "building $MODULE/cmd/helm $VERSION ($(go env GOVERSION); about 5 min cold on 2 cores)"
start=$SECONDS
(cd "$src" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" \
  go build -trimpath -ldflags "$ldflags" -o "$work/helm" ./cmd/helm) || { say "go build failed (output above)"; exit 1; }
printed=$("$work/helm" version --template '{{.Version}}')
[[ $printed == "$VERSION" ]] || { say "helm version prints '$printed', not $VERSION"; exit 1; }
say "built helm $VERSION in $((SECONDS - start)) s"
rm -rf "$out" && mkdir -p "$out"
mv "$work/helm" "$out/helm"
{
  echo "Helm, built by the gpuops.k8s lab (lab/kube/helm.sh) from $MODULE@$VERSION (Go module proxy, module hash $sum)"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) with $(go env GOVERSION)"
  echo "go build -trimpath -ldflags \"$ldflags\" ./cmd/helm  (CGO_ENABLED=0: helm's Makefile)"
  echo "default Kubernetes version 1.$k8s_minor (client-go $client_go in its go.mod)"
  echo "helm version: $("$out/helm" version)"
  echo "sha256: $(cd "$out" && sha256sum helm)"
} >"$out/BUILD-INFO"
touch "$out/.complete"
echo "$out"
