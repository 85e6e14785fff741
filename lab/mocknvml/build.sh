#!/usr/bin/env bash
# Build NVIDIA's mock NVML ("Mokka") and NVIDIA's mock CUDA library from
# github.com/NVIDIA/k8s-test-infra at a pinned commit, the way upstream's Makefiles do.
#
# Source, in this order:
#   1. the Go module proxy (`go mod download github.com/NVIDIA/k8s-test-infra@<commit>`),
#      what a machine on the public internet gets;
#   2. the vendored tarball NVIDIA's sources are kept in for machines whose proxy refuses
#      that module (403 here): k8s-test-infra-mocknvml-<commit>.tar.gz in
#      $GPUOPS_VENDOR_DIR, else the first shared/vendor/ found beside the checkout or one
#      of its parents (../shared/vendor for /work/main). Its sha256 must equal the one
#      pinned below: a mismatch or a missing file is an error naming both, never a
#      silent switch to something else.
#
# Output: ${GPUOPS_CACHE:-<repo>/.cache}/mocknvml/nvidia-<commit>-<recipe hash>/ holding
# libnvidia-ml.so.<driver> (+ .so.1, .so) and libcuda.so.<driver> (+ .so.1, .so). The
# last line on stdout is that directory; progress goes to stderr. A complete build is
# reused; builds of other commits or recipes are removed.
#
# Exit status: 0 built or reused; 1 anything else (the message says what to do).
set -euo pipefail

MODULE=github.com/NVIDIA/k8s-test-infra
COMMIT=3b2b865d91b1844baa9feeca2820d2fab65414c7
TARBALL=k8s-test-infra-mocknvml-${COMMIT:0:8}.tar.gz
TARBALL_SHA256=7a7f1d75b720a9ce313604c32af332191928c1883441c64eaf43b9f066ec1222
# The driver version the libraries are named after (upstream's LIB_VERSION default); the
# profiles in lab/profiles report the same one.
DRIVER_VERSION=550.163.01

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=lab/go-build.sh
source "$REPO_ROOT/lab/go-build.sh"
CACHE_ROOT=${GPUOPS_CACHE:-$REPO_ROOT/.cache}/mocknvml
RECIPE_HASH=$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-8)
OUT_DIR=$CACHE_ROOT/nvidia-${COMMIT:0:8}-$RECIPE_HASH

log() { echo "mocknvml: $*" >&2; }
fail() {
    echo "mock NVML build failed: $*" >&2
    exit 1
}

complete() {
    [[ -s $1/libnvidia-ml.so.$DRIVER_VERSION && -s $1/libcuda.so.$DRIVER_VERSION ]]
}

if complete "$OUT_DIR"; then
    log "reusing NVIDIA's mock NVML and CUDA ($MODULE@${COMMIT:0:12}) in $OUT_DIR"
    echo "$OUT_DIR"
    exit 0
fi

go_require_cgo "NVIDIA's mock NVML (a Go c-shared library)"
command -v make >/dev/null 2>&1 || fail "make not found on PATH: the build follows upstream's Makefile"
go_workdir mocknvml
started=$SECONDS

# --- 1. the module proxy ------------------------------------------------------------------
from_proxy() {
    local dir
    dir=$(go_download "$MODULE@${COMMIT:0:12}") || {
        PROXY_ERROR=$(go_download_error)
        return 1
    }
    mkdir -p "$WORK/src"
    cp -R "$dir/." "$WORK/src/k8s-test-infra/"
    chmod -R u+w "$WORK/src"
    # Module zips carry no vendor/ directory: build against the module cache instead.
    BUILD_GOFLAGS="-buildvcs=false -mod=mod"
    SOURCE="the Go module proxy ($MODULE@${COMMIT:0:12})"
}

# --- 2. the vendored tarball -----------------------------------------------------------------
from_tarball() {
    local tarball
    tarball=$(go_unpack_vendored "$TARBALL" "$TARBALL_SHA256" "$MODULE at $COMMIT" "$PROXY_ERROR")
    BUILD_GOFLAGS="-buildvcs=false -mod=vendor"
    SOURCE="$tarball (sha256 ok)"
}

PROXY_ERROR=""
log "asking the Go module proxy for $MODULE@${COMMIT:0:12}"
if ! from_proxy; then
    log "the proxy refused it ($PROXY_ERROR); building from the vendored tarball"
    from_tarball
fi
SRC=$WORK/src/k8s-test-infra/pkg/gpu
[[ -d $SRC/mocknvml && -d $SRC/mockcuda ]] || fail "$SOURCE has no pkg/gpu/mocknvml and pkg/gpu/mockcuda"
log "building from $SOURCE ($(go env GOVERSION), 2 libraries, about 2 min with a cold Go build cache)"

# Upstream's recipe: its Makefiles add the --defsym aliases for the versioned NVML
# names (Python's ctypes needs them) and the sonames. REPO_ROOT= keeps them from asking
# git for a checkout this copy is not; NO_PADDING=1 skips the 14 MiB size padding.
build() {
    local dir=$1
    shift
    (cd "$dir" && GOFLAGS="$BUILD_GOFLAGS" make REPO_ROOT= LIB_VERSION="$DRIVER_VERSION" "$@") >&2 ||
        fail "make in $dir failed (output above)"
}
build "$SRC/mocknvml" NO_PADDING=1
build "$SRC/mockcuda"

STAGE=$WORK/out
mkdir -p "$STAGE"
cp "$SRC/mocknvml/libnvidia-ml.so.$DRIVER_VERSION" "$SRC/mockcuda/libcuda.so.$DRIVER_VERSION" "$STAGE/"
for lib in libnvidia-ml libcuda; do
    ln -sfn "$lib.so.$DRIVER_VERSION" "$STAGE/$lib.so.1"
    ln -sfn "$lib.so.1" "$STAGE/$lib.so"
done

# Without the aliases Python's ctypes cannot bind the library at all (RTLD_NOW).
if command -v nm >/dev/null 2>&1; then
    nm -D --defined-only "$STAGE/libnvidia-ml.so.$DRIVER_VERSION" |
        awk '$3 == "nvmlDeviceGetGraphicsRunningProcesses" {found = 1} END {exit !found}' ||
        fail "libnvidia-ml.so.$DRIVER_VERSION lacks the nvmlDeviceGetGraphicsRunningProcesses alias (upstream's linker flags not applied)"
fi

mkdir -p "$CACHE_ROOT"
rm -rf "$OUT_DIR.tmp"
mv "$STAGE" "$OUT_DIR.tmp"
rm -rf "$OUT_DIR"
mv "$OUT_DIR.tmp" "$OUT_DIR"
for old in "$CACHE_ROOT"/nvidia-*; do
    [[ $old == "$OUT_DIR" || ! -d $old ]] || rm -rf "$old"
done
log "built NVIDIA's mock NVML and CUDA in $((SECONDS - started)) s into $OUT_DIR"
echo "$OUT_DIR"
