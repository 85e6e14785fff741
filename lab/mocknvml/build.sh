#!/usr/bin/env bash
# Build a mock libnvidia-ml.so.1 for the functional tests: NVIDIA's mock NVML
# (github.com/NVIDIA/k8s-test-infra, package pkg/gpu/mocknvml/bridge) when the Go module
# proxy serves it, otherwise gpuops's stand-in (lab/mocknvml/bridge: the NVML C API
# from go-nvml's nvml.h, reading the same YAML profiles).
#
# Output: ${GPUOPS_CACHE:-<repo>/.cache}/mocknvml/<version>/libnvidia-ml.so.1 for
# upstream's mock, .../mocknvml/standin-<hash of the bridge sources>/libnvidia-ml.so.1 for
# the stand-in, each with a libnvidia-ml.so symlink beside it. The last line on stdout is
# that directory; everything else goes to stderr. An existing library is reused (delete
# the directory to rebuild); the stand-in rebuilds by itself when its sources change,
# and removes the builds of earlier sources.
#
# GPUOPS_MOCKNVML: auto (default: upstream, else the stand-in), upstream (never the
# stand-in), standin (do not ask the proxy for upstream's mock).
#
# Exit status:
#   0  built, or already there
#   3  unavailable here: upstream's module cannot be downloaded and the stand-in cannot
#      be built either, or the Go toolchain or a C compiler for cgo is missing. The one
#      stderr line starting with "mock NVML unavailable:" says which; the tests skip with
#      it as the reason.
#   1  the build broke (anything else)
set -euo pipefail

# A real upstream release tag of github.com/NVIDIA/k8s-test-infra. The Go module proxy
# this project's machines use does not serve it yet (403 "This module version is not
# available."), so until it does the stand-in is built instead.
MOCKNVML_VERSION=v0.4.0

MODULE=github.com/NVIDIA/k8s-test-infra
BRIDGE_DIR=pkg/gpu/mocknvml/bridge
LIB=libnvidia-ml.so.1
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE_ROOT=${GPUOPS_CACHE:-$REPO_ROOT/.cache}/mocknvml
OUT_DIR=$CACHE_ROOT/$MOCKNVML_VERSION
MODE=${GPUOPS_MOCKNVML:-auto}

# The stand-in: its Go module, and the go-nvml version whose nvml.h it is built from.
STANDIN_SRC=$REPO_ROOT/lab/mocknvml/bridge
GO_NVML=github.com/NVIDIA/go-nvml
GO_NVML_VERSION=v0.13.0-1

# Linker recipe from upstream pkg/gpu/mocknvml/Makefile. NVML's headers map unversioned
# names to versioned ones; callers that dlsym()/ctypes-load the unversioned names (Python's
# ctypes binds with RTLD_NOW) need these aliases, and consumers open the library by the
# soname libnvidia-ml.so.1. The stand-in is linked with the same list.
VERSION_ALIASES=(
    nvmlDeviceGetPciInfo=nvmlDeviceGetPciInfo_v3
    nvmlDeviceGetHandleByPciBusId=nvmlDeviceGetHandleByPciBusId_v2
    nvmlDeviceGetNvLinkRemotePciInfo=nvmlDeviceGetNvLinkRemotePciInfo_v2
    nvmlDeviceRemoveGpu=nvmlDeviceRemoveGpu_v2
    nvmlDeviceGetGridLicensableFeatures=nvmlDeviceGetGridLicensableFeatures_v4
    nvmlEventSetWait=nvmlEventSetWait_v2
    nvmlDeviceGetAttributes=nvmlDeviceGetAttributes_v2
    nvmlComputeInstanceGetInfo=nvmlComputeInstanceGetInfo_v2
    nvmlDeviceGetComputeRunningProcesses=nvmlDeviceGetComputeRunningProcesses_v3
    nvmlDeviceGetGraphicsRunningProcesses=nvmlDeviceGetGraphicsRunningProcesses_v3
    nvmlDeviceGetMPSComputeRunningProcesses=nvmlDeviceGetMPSComputeRunningProcesses_v3
    nvmlDeviceGetGpuInstancePossiblePlacements=nvmlDeviceGetGpuInstancePossiblePlacements_v2
    nvmlVgpuInstanceGetLicenseInfo=nvmlVgpuInstanceGetLicenseInfo_v2
    nvmlDeviceGetDriverModel=nvmlDeviceGetDriverModel_v2
)

unavailable() {
    echo "mock NVML unavailable: $*" >&2
    exit 3
}

broken() {
    echo "mock NVML build failed: $*" >&2
    exit 1
}

log() {
    echo "mocknvml: $*" >&2
}

# link_and_report DIR: the unversioned symlink, and DIR as the last stdout line.
link_and_report() {
    ln -sfn "$LIB" "$1/libnvidia-ml.so"
    echo "$1"
}

case $MODE in
auto | upstream | standin) ;;
*) broken "GPUOPS_MOCKNVML=$MODE: expected auto, upstream or standin" ;;
esac

if [[ $MODE != standin && -s $OUT_DIR/$LIB ]]; then
    log "reusing $OUT_DIR/$LIB"
    link_and_report "$OUT_DIR"
    exit 0
fi

command -v python3 >/dev/null 2>&1 ||
    unavailable "python3 not found on PATH (it reads go's JSON output)"
command -v go >/dev/null 2>&1 ||
    unavailable "go not found on PATH (building ${MODULE}@${MOCKNVML_VERSION} or the stand-in needs the Go toolchain)"
CC_CMD=$(go env CC)
command -v "${CC_CMD%% *}" >/dev/null 2>&1 ||
    unavailable "no C compiler for cgo (go env CC: ${CC_CMD})"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpuops-mocknvml.XXXXXX")
# Files copied out of the module cache are read-only: make them writable to remove them.
trap 'chmod -R u+w "$WORK" 2>/dev/null || true; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/wrapper" "$WORK/out"
(cd "$WORK/wrapper" && go mod init gpuops.invalid/mocknvml-wrapper >/dev/null 2>&1) ||
    broken "go mod init of the wrapper module failed in $WORK/wrapper"

# One field of `go mod download -json` output on stdin, multi-line values joined with "; ".
json_field() {
    python3 -c '
import json
import sys

try:
    doc = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
value = doc.get(sys.argv[1]) or ""
print("; ".join(line.strip() for line in value.splitlines() if line.strip()))
' "$1"
}

# try_download MODULE@VERSION: download into the module cache and print its directory.
# On failure return 1, with go's own error in $WORK/download.msg.
try_download() {
    local target=$1 json rc error dir
    set +e
    json=$(cd "$WORK/wrapper" && go mod download -json "$target" 2>"$WORK/download.err")
    rc=$?
    set -e
    error=$(json_field Error <<<"$json")
    if [[ $rc -ne 0 || -n $error ]]; then
        if [[ -z $error ]]; then
            error=$(grep -v '^[[:space:]]*$' "$WORK/download.err" | tail -n 1 || true)
        fi
        echo "go mod download $target failed: ${error:-exit status $rc}" >"$WORK/download.msg"
        return 1
    fi
    dir=$(json_field Dir <<<"$json")
    if [[ -z $dir || ! -d $dir ]]; then
        echo "go mod download $target reported no module directory" >"$WORK/download.msg"
        return 1
    fi
    echo "$dir"
}

# download MODULE@VERSION: try_download, exit 3 on failure.
download() {
    try_download "$1" || unavailable "$(cat "$WORK/download.msg")"
}

LDFLAGS=""
for alias in "${VERSION_ALIASES[@]}"; do
    LDFLAGS+="-Wl,--defsym,$alias "
done
LDFLAGS+="-Wl,-soname,$LIB"

# c_shared_build DIR TARGET OUT [go build flags...]: go build -buildmode=c-shared with the
# alias list; output to stderr and $WORK/build.log. Returns go's exit status.
c_shared_build() {
    local dir=$1 target=$2 out=$3 rc
    shift 3
    set +e
    (
        cd "$dir" &&
            CGO_ENABLED=1 \
                CGO_LDFLAGS_ALLOW='--defsym|-soname' \
                CGO_LDFLAGS="$LDFLAGS" \
                go build "$@" -buildmode=c-shared -o "$out" "$target"
    ) 2>&1 | tee "$WORK/build.log" >&2
    rc=${PIPESTATUS[0]}
    set -e
    return "$rc"
}

# check_library FILE: without the aliases Python's ctypes cannot load the library at all
# (RTLD_NOW): check one, and that no NVML function stayed undefined.
check_library() {
    local defined undefined
    [[ -s $1 ]] || broken "go build produced no $LIB"
    command -v nm >/dev/null 2>&1 || return 0
    # awk reads all of nm's output: `nm | grep -q` fails under pipefail when grep quits early.
    defined=$(nm -D --defined-only "$1" | awk '$3 == "nvmlDeviceGetGraphicsRunningProcesses"')
    [[ -n $defined ]] ||
        broken "$LIB lacks the nvmlDeviceGetGraphicsRunningProcesses alias (linker flags not applied)"
    undefined=$(nm -D --undefined-only "$1" | awk '$2 ~ /^nvml/ {print $2}' | tr '\n' ' ')
    [[ -z $undefined ]] || broken "$LIB leaves NVML functions undefined (dlopen would fail): $undefined"
}

# install_library FILE DIR: put the library in the cache atomically and report DIR.
install_library() {
    mkdir -p "$2"
    cp "$1" "$2/.$LIB.$$"
    mv -f "$2/.$LIB.$$" "$2/$LIB"
    log "built $2/$LIB"
    link_and_report "$2"
}

# --- NVIDIA's mock (pinned upstream) ---------------------------------------------------

build_upstream() {
    local root_dir=$1 src build_dir target bridge_mod_dir sibling sibling_dir toolchain
    # The module cache is read-only and `go build -mod=mod` may need to write go.mod/go.sum:
    # build in a writable copy.
    src=$WORK/src
    mkdir -p "$src"
    cp -R "$root_dir/." "$src/"
    chmod -R u+w "$src"

    if [[ ! -d $src/$BRIDGE_DIR ]]; then
        # At versions where bridge/ is a module of its own (bridge/go.mod, with a replace of
        # its sibling ../engine), the root module's zip leaves it out: fetch the nested module
        # and every sibling it replaces at the same version, and lay them out as in the repo.
        log "the bridge is not in the root module: fetching it as a nested module"
        bridge_mod_dir=$(download "${MODULE}/${BRIDGE_DIR}@${MOCKNVML_VERSION}")
        mkdir -p "$src/$BRIDGE_DIR"
        cp -R "$bridge_mod_dir/." "$src/$BRIDGE_DIR/"
        chmod -R u+w "$src/$BRIDGE_DIR"
        while read -r sibling; do
            [[ -n $sibling ]] || continue
            sibling_dir=$(download "${MODULE}/${BRIDGE_DIR%/*}/${sibling}@${MOCKNVML_VERSION}")
            mkdir -p "$src/${BRIDGE_DIR%/*}/$sibling"
            cp -R "$sibling_dir/." "$src/${BRIDGE_DIR%/*}/$sibling/"
            chmod -R u+w "$src/${BRIDGE_DIR%/*}/$sibling"
        done < <(sed -n 's|.*=>[[:space:]]*\.\./\([A-Za-z0-9_.-]*\)[[:space:]]*$|\1|p' "$src/$BRIDGE_DIR/go.mod")
    fi

    if [[ -f $src/$BRIDGE_DIR/go.mod ]]; then
        # Nested module: build from inside it so its replace ../engine resolves.
        build_dir=$src/$BRIDGE_DIR
        target=.
    else
        build_dir=$src
        target=./$BRIDGE_DIR
    fi

    log "building $target in $build_dir ($(go env GOVERSION), -tags nopadding)"
    if ! GOFLAGS="-mod=mod -buildvcs=false" c_shared_build "$build_dir" "$target" "$WORK/out/$LIB" -tags nopadding; then
        toolchain=$(grep -m 1 'requires go >=' "$WORK/build.log" || true)
        [[ -z $toolchain ]] || unavailable "${MODULE}@${MOCKNVML_VERSION} needs a newer Go: $toolchain"
        broken "go build of ${MODULE}/${BRIDGE_DIR}@${MOCKNVML_VERSION} failed (output above)"
    fi
    check_library "$WORK/out/$LIB"
    install_library "$WORK/out/$LIB" "$OUT_DIR"
}

# --- gpuops stand-in (lab/mocknvml/bridge) --------------------------------------------

# The stand-in's cache key: its sources (not generated files) and the alias list.
standin_hash() {
    (
        cd "$STANDIN_SRC" &&
            find . -type f ! -path './include/*' ! -name stubs_gen.c ! -name '*.so*' -print0 |
            LC_ALL=C sort -z | xargs -0 sha256sum
        printf '%s\n' "${VERSION_ALIASES[@]}"
    ) | sha256sum | cut -c1-12
}

build_standin() {
    local upstream_error=${1:-upstream not tried (GPUOPS_MOCKNVML=standin)} dir nvml_dir src skip started old
    dir=$CACHE_ROOT/standin-$(standin_hash)
    if [[ -s $dir/$LIB ]]; then
        log "reusing $dir/$LIB"
        link_and_report "$dir"
        return 0
    fi
    started=$SECONDS
    if ! nvml_dir=$(try_download "${GO_NVML}@${GO_NVML_VERSION}"); then
        unavailable "${upstream_error}; and the stand-in cannot be built: $(cat "$WORK/download.msg")"
    fi
    [[ -f $nvml_dir/pkg/nvml/nvml.h ]] || broken "$GO_NVML@$GO_NVML_VERSION has no pkg/nvml/nvml.h"

    # Build in a copy: nvml.h and the generated stubs are not part of the sources.
    src=$WORK/standin
    mkdir -p "$src"
    cp -R "$STANDIN_SRC/." "$src/"
    rm -rf "$src/include" "$src/stubs_gen.c"
    mkdir -p "$src/include"
    cp "$nvml_dir/pkg/nvml/nvml.h" "$src/include/nvml.h"
    chmod -R u+w "$src"

    skip=$(printf '%s\n' "${VERSION_ALIASES[@]}" | cut -d= -f1 | paste -sd, -)
    (cd "$src" && GOFLAGS=-mod=readonly go run ./internal/genstubs -header include/nvml.h -skip "$skip" -out stubs_gen.c) >&2 ||
        broken "generating the stand-in's NVML stubs failed (output above)"

    log "building the stand-in in $src ($(go env GOVERSION), go-nvml $GO_NVML_VERSION)"
    if ! GOFLAGS="-mod=readonly -buildvcs=false" c_shared_build "$src" . "$WORK/out/$LIB" -trimpath; then
        if grep -q 'go mod download\|reading https://\|403\|404' "$WORK/build.log"; then
            unavailable "${upstream_error}; and the stand-in's modules cannot be downloaded: $(grep -m 1 'reading https://\|go: ' "$WORK/build.log")"
        fi
        broken "go build of the stand-in (lab/mocknvml/bridge) failed (output above)"
    fi
    check_library "$WORK/out/$LIB"
    log "stand-in built in $((SECONDS - started)) s"
    install_library "$WORK/out/$LIB" "$dir"
    # Stand-ins built from earlier sources are never used again.
    for old in "$CACHE_ROOT"/standin-*; do
        [[ $old == "$dir" || ! -d $old ]] || rm -rf "$old"
    done
}

# --- main -------------------------------------------------------------------------------

UPSTREAM_ERROR=""
if [[ $MODE != standin ]]; then
    log "downloading ${MODULE}@${MOCKNVML_VERSION}"
    if ROOT_DIR=$(try_download "${MODULE}@${MOCKNVML_VERSION}"); then
        build_upstream "$ROOT_DIR"
        exit 0
    fi
    UPSTREAM_ERROR=$(cat "$WORK/download.msg")
    [[ $MODE != upstream ]] || unavailable "$UPSTREAM_ERROR"
    if [[ $UPSTREAM_ERROR == *"403"* ]]; then
        echo "mock NVML: NVIDIA's k8s-test-infra is not served by the module proxy (403); using the gpuops stand-in built from go-nvml ${GO_NVML_VERSION} (lab/mocknvml/bridge)" >&2
    else
        echo "mock NVML: NVIDIA's k8s-test-infra cannot be downloaded ($UPSTREAM_ERROR); using the gpuops stand-in built from go-nvml ${GO_NVML_VERSION} (lab/mocknvml/bridge)" >&2
    fi
fi
build_standin "$UPSTREAM_ERROR"
