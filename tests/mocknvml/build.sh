#!/usr/bin/env bash
# Build NVIDIA's mock NVML (github.com/NVIDIA/k8s-test-infra, package
# pkg/gpu/mocknvml/bridge) as a libnvidia-ml.so.1 for the functional tests.
#
# Output: ${GPUOPS_CACHE:-<repo>/.cache}/mocknvml/<version>/libnvidia-ml.so.1, with a
# libnvidia-ml.so symlink beside it. The last line on stdout is that directory; everything
# else goes to stderr. An existing library is reused (delete the directory to rebuild).
#
# Exit status:
#   0  built, or already there
#   3  unavailable here: the module version cannot be downloaded, or the Go toolchain or
#      a C compiler for cgo is missing. The one stderr line starting with
#      "mock NVML unavailable:" says which; the tests skip with it as the reason.
#   1  the build broke (anything else)
set -euo pipefail

# A real upstream release tag of github.com/NVIDIA/k8s-test-infra. The Go module proxy
# this project's machines use does not serve it yet (403 "This module version is not
# available."), so until it does this script exits 3.
MOCKNVML_VERSION=v0.4.0

MODULE=github.com/NVIDIA/k8s-test-infra
BRIDGE_DIR=pkg/gpu/mocknvml/bridge
LIB=libnvidia-ml.so.1
REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT_DIR=${GPUOPS_CACHE:-$REPO_ROOT/.cache}/mocknvml/$MOCKNVML_VERSION

# Linker recipe from upstream pkg/gpu/mocknvml/Makefile. NVML's headers map unversioned
# names to versioned ones; callers that dlsym()/ctypes-load the unversioned names (Python's
# ctypes binds with RTLD_NOW) need these aliases, and consumers open the library by the
# soname libnvidia-ml.so.1.
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

link_and_report() {
    ln -sfn "$LIB" "$OUT_DIR/libnvidia-ml.so"
    echo "$OUT_DIR"
}

if [[ -s $OUT_DIR/$LIB ]]; then
    log "reusing $OUT_DIR/$LIB"
    link_and_report
    exit 0
fi

command -v python3 >/dev/null 2>&1 ||
    unavailable "python3 not found on PATH (it reads go's JSON output)"
command -v go >/dev/null 2>&1 ||
    unavailable "go not found on PATH (building ${MODULE}@${MOCKNVML_VERSION} needs the Go toolchain)"
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

# Download MODULE@VERSION into the module cache and print its directory. On failure exit 3
# with go's own error in the message.
download() {
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
        unavailable "go mod download $target failed: ${error:-exit status $rc}"
    fi
    dir=$(json_field Dir <<<"$json")
    [[ -n $dir && -d $dir ]] || unavailable "go mod download $target reported no module directory"
    echo "$dir"
}

log "downloading ${MODULE}@${MOCKNVML_VERSION}"
ROOT_DIR=$(download "${MODULE}@${MOCKNVML_VERSION}")

# The module cache is read-only and `go build -mod=mod` may need to write go.mod/go.sum:
# build in a writable copy.
SRC=$WORK/src
mkdir -p "$SRC"
cp -R "$ROOT_DIR/." "$SRC/"
chmod -R u+w "$SRC"

if [[ ! -d $SRC/$BRIDGE_DIR ]]; then
    # At versions where bridge/ is a module of its own (bridge/go.mod, with a replace of
    # its sibling ../engine), the root module's zip leaves it out: fetch the nested module
    # and every sibling it replaces at the same version, and lay them out as in the repo.
    log "the bridge is not in the root module: fetching it as a nested module"
    BRIDGE_MOD_DIR=$(download "${MODULE}/${BRIDGE_DIR}@${MOCKNVML_VERSION}")
    mkdir -p "$SRC/$BRIDGE_DIR"
    cp -R "$BRIDGE_MOD_DIR/." "$SRC/$BRIDGE_DIR/"
    chmod -R u+w "$SRC/$BRIDGE_DIR"
    for sibling in $(sed -n 's|.*=>[[:space:]]*\.\./\([A-Za-z0-9_.-]*\)[[:space:]]*$|\1|p' "$SRC/$BRIDGE_DIR/go.mod"); do
        SIBLING_DIR=$(download "${MODULE}/${BRIDGE_DIR%/*}/${sibling}@${MOCKNVML_VERSION}")
        mkdir -p "$SRC/${BRIDGE_DIR%/*}/$sibling"
        cp -R "$SIBLING_DIR/." "$SRC/${BRIDGE_DIR%/*}/$sibling/"
        chmod -R u+w "$SRC/${BRIDGE_DIR%/*}/$sibling"
    done
fi

if [[ -f $SRC/$BRIDGE_DIR/go.mod ]]; then
    # Nested module: build from inside it so its replace ../engine resolves.
    BUILD_DIR=$SRC/$BRIDGE_DIR
    TARGET=.
else
    BUILD_DIR=$SRC
    TARGET=./$BRIDGE_DIR
fi

LDFLAGS=""
for alias in "${VERSION_ALIASES[@]}"; do
    LDFLAGS+="-Wl,--defsym,$alias "
done
LDFLAGS+="-Wl,-soname,$LIB"

log "building $TARGET in $BUILD_DIR ($(go env GOVERSION), -tags nopadding)"
set +e
(
    cd "$BUILD_DIR" &&
        CGO_ENABLED=1 \
            CGO_LDFLAGS_ALLOW='--defsym|-soname' \
            CGO_LDFLAGS="$LDFLAGS" \
            GOFLAGS="-mod=mod -buildvcs=false" \
            go build -tags nopadding -buildmode=c-shared -o "$WORK/out/$LIB" "$TARGET"
) 2>&1 | tee "$WORK/build.log" >&2
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]]; then
    toolchain=$(grep -m 1 'requires go >=' "$WORK/build.log" || true)
    [[ -z $toolchain ]] || unavailable "${MODULE}@${MOCKNVML_VERSION} needs a newer Go: $toolchain"
    broken "go build of ${MODULE}/${BRIDGE_DIR}@${MOCKNVML_VERSION} exited $rc (output above)"
fi
[[ -s $WORK/out/$LIB ]] || broken "go build produced no $LIB"

# Without the aliases Python's ctypes cannot load the library at all (RTLD_NOW): check one.
if command -v nm >/dev/null 2>&1; then
    nm -D --defined-only "$WORK/out/$LIB" | grep -q ' nvmlDeviceGetGraphicsRunningProcesses$' ||
        broken "$LIB lacks the nvmlDeviceGetGraphicsRunningProcesses alias (linker flags not applied)"
fi

mkdir -p "$OUT_DIR"
cp "$WORK/out/$LIB" "$OUT_DIR/.$LIB.$$"
mv -f "$OUT_DIR/.$LIB.$$" "$OUT_DIR/$LIB"
log "built $OUT_DIR/$LIB"
link_and_report
