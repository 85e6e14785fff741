#!/usr/bin/env bash
# Build NVIDIA's DRA driver for GPUs (kubernetes-sigs/dra-driver-nvidia-gpu, Go module
# sigs.k8s.io/dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin) and the nvidia-cdi-hook its
# image ships, from the Go module proxy: the benchmark peer of device_plugin_mode dra, as
# build-nvidia-plugin.sh is the peer of device_plugin_mode nvidia.
#
# Output: ${GPUOPS_LAB_CACHE:-~/.cache/gpuops-lab}/nvidia-dra/<version>/
#   gpu-kubelet-plugin   NVIDIA's kubelet plugin (cgo: go-nvml dlopens libnvidia-ml)
#   nvidia-cdi-hook      from github.com/NVIDIA/nvidia-container-toolkit at the version the
#                        driver's go.mod requires (the release image copies it from NVIDIA's
#                        toolkit image of that version, hack/toolkit-container-image.sh)
#   chart/               the release's Helm chart (deployments/helm/dra-driver-nvidia-gpu)
#   image/               what its Dockerfile copies besides binaries: LICENSE,
#                        kubelet-plugin-prestart.sh (the chart's init container), templates/
#   BUILD-INFO           provenance: every source, its hash, and what differs from a release
# outside the work tree, so a fresh clone on the same machine reuses it. The last line on
# stdout is that directory; everything else goes to stderr. A complete directory is reused
# (delete it to rebuild). NVIDIA_DRA_VERSION picks another release (default v0.5.0).
#
# Only gpu-kubelet-plugin is built: the compute-domain commands and the webhook serve
# ComputeDomains (multi-node NVLink, IMEX) and the admission webhook, which the lab deploys
# off (resources.computeDomains.enabled=false, webhook.enabled=false).
#
# Two dependencies of v0.5.0 are not fully served by the Go module proxy here (checked
# 2026-11-29):
# - github.com/NVIDIA/go-nvfm v0.1.0 (Fabric Manager bindings, used only by the alpha
#   FabricManagerPartitioning code path): .info, .mod and .zip answer 403 "This module
#   version is not available". The proxy is tried first; when it refuses, the build uses a
#   snapshot of NVIDIA/go-nvfm's main branch through a `replace` in a copy of the module
#   (never the module cache): NVIDIA_DRA_NVFM_DIR, default
#   $GPUOPS_LAB_CACHE/go-nvfm-<NVFM_COMMIT>. Its module hash is checked against the pin below
#   (it is NOT the hash go.sum records for v0.1.0: that tag's content is not available here,
#   and BUILD-INFO says so).
# - k8s.io/kubernetes v1.37.0-rc.0: its .info and .mod answer 403, its .zip is served. When
#   `go mod download` refuses it, the zip is fetched, the go.mod inside it is checked against
#   the driver's go.sum line `k8s.io/kubernetes v1.37.0-rc.0/go.mod h1:...`, and a file://
#   proxy holding .info/.mod/.zip is layered before the real one (the go command checks the
#   zip against go.sum itself).
#
# Exit status:
#   0  built, or already there
#   3  unavailable here: a module version cannot be downloaded, the go-nvfm snapshot is
#      missing, or the Go toolchain or a C compiler for cgo is missing. The one stderr line
#      starting with "NVIDIA DRA driver unavailable:" says which, and what to do.
#   1  the build broke (anything else, including a hash that does not match its pin)
set -euo pipefail

VERSION=${NVIDIA_DRA_VERSION:-v0.5.0}
MODULE=sigs.k8s.io/dra-driver-nvidia-gpu
PACKAGE=$MODULE/cmd/gpu-kubelet-plugin
BINARY=gpu-kubelet-plugin
TOOLKIT_MODULE=github.com/NVIDIA/nvidia-container-toolkit
CACHE=${GPUOPS_LAB_CACHE:-$HOME/.cache/gpuops-lab}
OUT_DIR=$CACHE/nvidia-dra/$VERSION
# The go-nvfm snapshot used when the proxy refuses the version go.mod requires: NVIDIA/go-nvfm
# main at this commit (2026-06-29, "Bump actions/checkout from 6 to 7"), and the h1 module
# hash of its tree as github.com/NVIDIA/go-nvfm (what go.sum would record for it).
NVFM_MODULE=github.com/NVIDIA/go-nvfm
NVFM_COMMIT=${NVIDIA_DRA_NVFM_COMMIT:-b587f11880ea934bcdf9fa6978405776c6c3ba16}
NVFM_H1=${NVIDIA_DRA_NVFM_H1:-h1:iT6mqKxfAYsCw35DWz4S1Z3DGST726sHrLdz4hqSwtY=}
NVFM_DIR=${NVIDIA_DRA_NVFM_DIR:-$CACHE/go-nvfm-$NVFM_COMMIT}
# That tree as `git archive` of the commit gave it (Apache-2.0, its LICENSE inside), kept in
# this repository because no proxy or registry here serves it; unpacked into NVFM_DIR when
# that is missing, and checked against NVFM_H1 like any other tree.
NVFM_ARCHIVE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/vendor/go-nvfm-$NVFM_COMMIT.tar.gz
UPSTREAM_PROXY=https://proxy.golang.org

unavailable() {
    echo "NVIDIA DRA driver unavailable: $*" >&2
    exit 3
}

broken() {
    echo "NVIDIA DRA driver build failed: $*" >&2
    exit 1
}

log() {
    echo "nvidia-dra: $*" >&2
}

# shellcheck source=lab/go-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../go-build.sh"
# A missing toolchain or module is "unavailable here" (exit 3), as below.
fail() { unavailable "$@"; }

if [[ -f $OUT_DIR/.complete ]]; then
    log "reusing $OUT_DIR"
    echo "$OUT_DIR"
    exit 0
fi

go_require_cgo "${PACKAGE}@${VERSION} (go-nvml)"
command -v curl >/dev/null 2>&1 || fail "curl not found on PATH (it fetches a module zip the go command cannot)"
go_workdir nvidia-dra

# h1_gomod FILE: the go.sum hash of a go.mod file (golang.org/x/mod/sumdb/dirhash Hash1 over
# the single file "go.mod").
h1_gomod() {
    python3 - "$1" <<'EOF'
import base64, hashlib, sys
data = open(sys.argv[1], "rb").read()
line = "%s  go.mod\n" % hashlib.sha256(data).hexdigest()
print("h1:" + base64.b64encode(hashlib.sha256(line.encode()).digest()).decode())
EOF
}

# h1_tree DIR MODULE@VERSION: the go.sum hash of DIR as that module's zip (Hash1 over every
# regular file, without nested modules and vendor/ trees, named MODULE@VERSION/PATH).
h1_tree() {
    python3 - "$1" "$2" <<'EOF'
import base64, hashlib, os, sys
root, prefix = sys.argv[1], sys.argv[2] + "/"
files = []
for top, dirs, names in os.walk(root):
    rel = os.path.relpath(top, root)
    if rel != "." and ("go.mod" in names or os.path.basename(top) in ("vendor", ".git", ".hg", ".svn", ".bzr")):
        dirs[:] = []
        continue
    for name in names:
        path = os.path.join(top, name)
        if os.path.isfile(path) and not os.path.islink(path):
            files.append(os.path.normpath(os.path.join(rel, name)))
lines = []
for name in sorted(files, key=lambda n: prefix + n):
    with open(os.path.join(root, name), "rb") as f:
        lines.append("%s  %s%s\n" % (hashlib.sha256(f.read()).hexdigest(), prefix, name))
print("h1:" + base64.b64encode(hashlib.sha256("".join(lines).encode()).digest()).decode())
EOF
}

# go_sum_line MODULE VERSION[/go.mod]: the hash the driver's go.sum records for it.
go_sum_line() {
    awk -v m="$1" -v v="$2" '$1 == m && $2 == v {print $3; exit}' "$src/go.sum"
}

started=$SECONDS
log "downloading ${MODULE}@${VERSION}"
module_dir=$(go_download "${MODULE}@${VERSION}") || unavailable "$(go_download_error)"
module_sum=$(cd "$WORK/wrapper" && go mod download -json "${MODULE}@${VERSION}" | go_json_field Sum)
src=$WORK/src
mkdir -p "$src"
cp -R "$module_dir/." "$src/"
chmod -R u+w "$src"
[[ $(tr -d '[:space:]' <"$src/VERSION") == "$VERSION" ]] || broken "the module's VERSION file says $(cat "$src/VERSION"), not $VERSION"
export GOPROXY=$UPSTREAM_PROXY
PROVENANCE=()

# --- go-nvfm: the version go.mod requires, else the pinned snapshot --------------------------
nvfm_version=$(awk -v m="$NVFM_MODULE" '$1 == m {print $2; exit}' "$src/go.mod")
if [[ -z $nvfm_version ]]; then
    PROVENANCE+=("$NVFM_MODULE: not required by this release")
elif go_download "$NVFM_MODULE@$nvfm_version" >/dev/null; then
    PROVENANCE+=("$NVFM_MODULE $nvfm_version: from the Go module proxy, as go.sum pins it")
else
    nvfm_error=$(go_download_error)
    log "the proxy refused $NVFM_MODULE@$nvfm_version ($nvfm_error)"
    if [[ ! -f $NVFM_DIR/go.mod && -f $NVFM_ARCHIVE && -z ${NVIDIA_DRA_NVFM_DIR:-} ]]; then
        mkdir -p "$NVFM_DIR" && tar -xzf "$NVFM_ARCHIVE" -C "$NVFM_DIR"
    fi
    [[ -f $NVFM_DIR/go.mod ]] || unavailable "$nvfm_error (the build needs $NVFM_MODULE@$nvfm_version (required by ${MODULE}@${VERSION}, used only by its alpha FabricManagerPartitioning code); instead it can use NVIDIA's go-nvfm source at commit $NVFM_COMMIT: run \`git clone https://github.com/NVIDIA/go-nvfm && mkdir -p $NVFM_DIR && git -C go-nvfm archive $NVFM_COMMIT | tar -x -C $NVFM_DIR\`, or set NVIDIA_DRA_NVFM_DIR to a directory holding that tree (set NVIDIA_DRA_NVFM_COMMIT and NVIDIA_DRA_NVFM_H1 for another commit))"
    nvfm_h1=$(h1_tree "$NVFM_DIR" "$NVFM_MODULE@$nvfm_version")
    [[ $nvfm_h1 == "$NVFM_H1" ]] ||
        broken "$NVFM_DIR has module hash $nvfm_h1, but the pin for go-nvfm commit $NVFM_COMMIT is $NVFM_H1: refusing to build from it"
    [[ $(awk '$1 == "module" {print $2; exit}' "$NVFM_DIR/go.mod") == "$NVFM_MODULE" ]] ||
        broken "$NVFM_DIR/go.mod is not module $NVFM_MODULE"
    (cd "$src" && go mod edit -replace "$NVFM_MODULE=$NVFM_DIR")
    gomod_sum=$(go_sum_line "$NVFM_MODULE" "$nvfm_version/go.mod")
    PROVENANCE+=("$NVFM_MODULE $nvfm_version: REFUSED by the Go module proxy ($nvfm_error)."
        "  Used instead: NVIDIA/go-nvfm commit $NVFM_COMMIT (upstream main, git archive), from $NVFM_DIR,"
        "  through \`replace $NVFM_MODULE => $NVFM_DIR\` in a copy of the module."
        "  Its module hash $nvfm_h1 differs from go.sum's $(go_sum_line "$NVFM_MODULE" "$nvfm_version") for $nvfm_version:"
        "  this is NOT the v0.1.0 tree. Its go.mod hash $(h1_gomod "$NVFM_DIR/go.mod") (go.sum for $nvfm_version/go.mod: $gomod_sum)."
        "  Only the alpha FabricManagerPartitioning code path uses go-nvfm.")
fi

# --- k8s.io/kubernetes: served as a zip only -----------------------------------------------
kube_version=$(awk '$1 == "k8s.io/kubernetes" {print $2; exit}' "$src/go.mod")
if [[ -n $kube_version ]] && ! go_download "k8s.io/kubernetes@$kube_version" >/dev/null; then
    kube_error=$(go_download_error)
    log "the proxy refused k8s.io/kubernetes@$kube_version ($kube_error); overlaying its .mod from its served .zip"
    overlay=$WORK/goproxy-overlay
    at=$overlay/k8s.io/kubernetes/@v
    mkdir -p "$at"
    curl -fsS -o "$at/$kube_version.zip" "$UPSTREAM_PROXY/k8s.io/kubernetes/@v/$kube_version.zip" ||
        unavailable "$kube_error, and its .zip cannot be downloaded either"
    python3 - "$at/$kube_version.zip" "k8s.io/kubernetes@$kube_version/go.mod" "$at/$kube_version.mod" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, open(sys.argv[3], "wb") as out:
    out.write(z.read(sys.argv[2]))
EOF
    want=$(go_sum_line k8s.io/kubernetes "$kube_version/go.mod")
    got=$(h1_gomod "$at/$kube_version.mod")
    [[ -n $want && $got == "$want" ]] ||
        broken "the go.mod in k8s.io/kubernetes@$kube_version's zip hashes to $got, but the driver's go.sum says ${want:-nothing}"
    printf '{"Version":"%s"}\n' "$kube_version" >"$at/$kube_version.info"
    echo "$kube_version" >"$at/list"
    export GOPROXY=file://$overlay,$UPSTREAM_PROXY
    PROVENANCE+=("k8s.io/kubernetes $kube_version: the proxy refuses its .info/.mod ($kube_error);"
        "  its .zip is served: the go.mod inside it hashes to $got, the driver's go.sum line, and was"
        "  served with the zip from a file:// proxy layered before $UPSTREAM_PROXY (go checks the zip against go.sum: $(go_sum_line k8s.io/kubernetes "$kube_version"))")
elif [[ -n $kube_version ]]; then
    PROVENANCE+=("k8s.io/kubernetes $kube_version: from the Go module cache/proxy, checked against go.sum")
fi

# --- gpu-kubelet-plugin: the Makefile's cmd-% recipe, plus -trimpath ------------------------
# shellcheck disable=SC2016  # the Makefile's own text, $(...) included: not for bash to expand
recipe='go build -ldflags "-s -w -X $(CLI_VERSION_PACKAGE).gitCommit=$(GIT_COMMIT) -X $(CLI_VERSION_PACKAGE).version=$(CLI_VERSION)" $(COMMAND_BUILD_OPTIONS) $(MODULE)/cmd/$(*)'
grep -qF "$recipe" "$src/Makefile" || broken "$VERSION: the Makefile's cmd-% recipe is not the one this script knows"
# No git metadata in a module zip: GIT_COMMIT is empty, as `make` outside a git tree leaves it.
ldflags="-s -w -X $MODULE/internal/info.gitCommit= -X $MODULE/internal/info.version=$VERSION"
log "building ${PACKAGE}@${VERSION} ($(go env GOVERSION), cgo; about 2 min warm, 4 to 7 cold on 2 busy cores)"
t=$SECONDS
set +e
# CGO_CFLAGS: Go's default plus silence for go-nvml's hundreds of deprecation warnings.
(cd "$src" && CGO_LDFLAGS_ALLOW='-Wl,--unresolved-symbols=ignore-in-object-files' CGO_ENABLED=1 \
    CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" GOFLAGS="-mod=mod -buildvcs=false" \
    go build -trimpath -ldflags "$ldflags" -o "$WORK/bin/$BINARY" "./${PACKAGE#"$MODULE"/}") 2>&1 |
    tee "$WORK/build.log" >&2
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]]; then
    reason=$(grep -m 1 -E '403|404|410|Forbidden|not available|reading https://|module lookup disabled|requires go >=' "$WORK/build.log" || true)
    [[ -z $reason ]] || unavailable "go build of ${PACKAGE}@${VERSION} failed: ${reason}"
    broken "go build of ${PACKAGE}@${VERSION} exited $rc (output above)"
fi
[[ -x $WORK/bin/$BINARY ]] || broken "go build produced no $BINARY"
log "built $BINARY in $((SECONDS - t)) s"
printed=$("$WORK/bin/$BINARY" --version 2>&1 | head -n 1) || broken "$BINARY --version failed: $printed"
[[ $printed == *"$VERSION"* ]] || broken "$BINARY --version prints '$printed', not $VERSION"

# --- nvidia-cdi-hook: the toolkit version go.mod requires, as its Makefile builds it --------
toolkit_version=$(awk -v m="$TOOLKIT_MODULE" '$1 == m {print $2; exit}' "$src/go.mod")
[[ -n $toolkit_version ]] || broken "the driver's go.mod requires no $TOOLKIT_MODULE (hack/toolkit-container-image.sh reads it)"
log "downloading $TOOLKIT_MODULE@$toolkit_version (nvidia-cdi-hook)"
toolkit_dir=$(GOPROXY=$UPSTREAM_PROXY go_download "$TOOLKIT_MODULE@$toolkit_version") || unavailable "$(go_download_error)"
toolkit_sum=$(cd "$WORK/wrapper" && go mod download -json "$TOOLKIT_MODULE@$toolkit_version" | go_json_field Sum)
# The same recipe check as lab/toolkit/build.sh (which builds the toolkit releases the nodes
# install, not necessarily this one).
# shellcheck disable=SC2016
recipe='go build -ldflags "-s -w '"'"'-extldflags=$(EXTLDFLAGS)'"'"' -X $(CLI_VERSION_PACKAGE).gitCommit=$(GIT_COMMIT) -X $(CLI_VERSION_PACKAGE).version=$(CLI_VERSION)" $(COMMAND_BUILD_OPTIONS) $(MODULE)/cmd/$(*)'
grep -qF "$recipe" "$toolkit_dir/Makefile" || broken "$TOOLKIT_MODULE $toolkit_version: the Makefile's cmd recipe is not the one this script knows"
grep -qF 'EXTLDFLAGS = -Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy' "$toolkit_dir/Makefile" ||
    broken "$TOOLKIT_MODULE $toolkit_version: the Makefile's EXTLDFLAGS changed"
hook_ldflags="-s -w '-extldflags=-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy'"
hook_ldflags+=" -X $TOOLKIT_MODULE/internal/info.gitCommit= -X $TOOLKIT_MODULE/internal/info.version=${toolkit_version#v}"
t=$SECONDS
(cd "$toolkit_dir" && GOPROXY=$UPSTREAM_PROXY GOFLAGS="-buildvcs=false -mod=readonly" \
    CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
    go build -trimpath -ldflags "$hook_ldflags" -o "$WORK/bin/nvidia-cdi-hook" "$TOOLKIT_MODULE/cmd/nvidia-cdi-hook") ||
    broken "go build of $TOOLKIT_MODULE/cmd/nvidia-cdi-hook@$toolkit_version failed (output above)"
log "built nvidia-cdi-hook $toolkit_version in $((SECONDS - t)) s"
hook_printed=$("$WORK/bin/nvidia-cdi-hook" --version 2>&1 | head -n 1) || broken "nvidia-cdi-hook --version failed: $hook_printed"
[[ $hook_printed == *"${toolkit_version#v}"* ]] || broken "nvidia-cdi-hook --version prints '$hook_printed', not $toolkit_version"

# --- the chart and the image's other files, then BUILD-INFO -----------------------------------
mkdir -p "$WORK/out/image"
cp -R "$src/deployments/helm/dra-driver-nvidia-gpu" "$WORK/out/chart"
cp "$src/LICENSE" "$src/hack/kubelet-plugin-prestart.sh" "$WORK/out/image/"
cp -R "$src/templates" "$WORK/out/image/templates"
cp "$src/deployments/container/Dockerfile" "$WORK/out/image/Dockerfile.upstream"
mv "$WORK/bin/$BINARY" "$WORK/bin/nvidia-cdi-hook" "$WORK/out/"
{
    echo "NVIDIA DRA driver for GPUs, built by the gpuops.k8s lab (lab/peer/build-nvidia-dra.sh), not by NVIDIA"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m) with $(go env GOVERSION), $(go env CC) ($("$(go env CC)" -dumpfullversion 2>/dev/null || echo '?'))"
    echo "driver: ${MODULE}@${VERSION} from the Go module proxy, module hash $module_sum"
    echo "  gpu-kubelet-plugin: go build -trimpath -ldflags \"$ldflags\" ./cmd/gpu-kubelet-plugin"
    echo "  (the Makefile's cmd-% recipe, GIT_COMMIT empty: a module zip has no git metadata; -trimpath added)"
    echo "  --version: $printed"
    echo "nvidia-cdi-hook: $TOOLKIT_MODULE@$toolkit_version (the driver's go.mod), module hash $toolkit_sum"
    echo "  go build -trimpath -ldflags \"$hook_ldflags\" ./cmd/nvidia-cdi-hook"
    echo "  --version: $hook_printed"
    echo "dependencies not taken as go.sum pins them:"
    printf '  %s\n' "${PROVENANCE[@]}"
    echo "not built: compute-domain-controller, compute-domain-kubelet-plugin, compute-domain-daemon,"
    echo "  webhook (the lab deploys with resources.computeDomains.enabled=false, webhook.enabled=false)"
    echo "chart: deployments/helm/dra-driver-nvidia-gpu of the same module (chart/)"
    echo "sha256:"
    (cd "$WORK/out" && sha256sum "$BINARY" nvidia-cdi-hook | sed 's/^/  /')
} >"$WORK/out/BUILD-INFO"

rm -rf "$OUT_DIR"
mkdir -p "$(dirname "$OUT_DIR")"
mv "$WORK/out" "$OUT_DIR.$$"
mv "$OUT_DIR.$$" "$OUT_DIR"
touch "$OUT_DIR/.complete"
log "built $OUT_DIR in $((SECONDS - started)) s"
echo "$OUT_DIR"
