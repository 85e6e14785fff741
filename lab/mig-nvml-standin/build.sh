#!/usr/bin/env bash
# Build gpuops's MIG NVML stand-in: OUR OWN NVML library, not NVIDIA's. It exists only
# for the tests that need MIG instances, which NVIDIA's mock NVML (lab/mocknvml) does not
# model; README.md beside this script lists them. Everything else runs on NVIDIA's mock.
#
# The NVML C API exported from Go (go build -buildmode=c-shared) over go-nvml's nvml.h,
# reading the YAML profile schema of NVIDIA's mock (lab/profiles) plus a MIG table.
#
# Output: ${GPUOPS_CACHE:-<repo>/.cache}/mig-nvml-standin/<hash of the sources>/
# libnvidia-ml.so.1 (+ libnvidia-ml.so). The last line on stdout is that directory;
# everything else goes to stderr. An existing build of the same sources is reused;
# builds of earlier sources are removed.
#
# Exit status: 0 built or reused; 1 anything else (the message says what).
set -euo pipefail

LIB=libnvidia-ml.so.1
SRC_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SRC_DIR/../.." && pwd)
CACHE_ROOT=${GPUOPS_CACHE:-$REPO_ROOT/.cache}/mig-nvml-standin
STANDIN_SRC=$SRC_DIR

# The go-nvml version whose nvml.h the stand-in is built from.
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

broken() {
    echo "MIG NVML stand-in build failed: $*" >&2
    exit 1
}

log() {
    echo "mig-nvml-standin: $*" >&2
}

# link_and_report DIR: the unversioned symlink, and DIR as the last stdout line.
link_and_report() {
    ln -sfn "$LIB" "$1/libnvidia-ml.so"
    echo "$1"
}

# shellcheck source=lab/go-build.sh
source "$REPO_ROOT/lab/go-build.sh"
fail() { broken "$@"; }

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
    local dir nvml_dir src skip started old
    dir=$CACHE_ROOT/$(standin_hash)
    if [[ -s $dir/$LIB ]]; then
        log "reusing $dir/$LIB"
        link_and_report "$dir"
        return 0
    fi
    go_require_cgo "the MIG NVML stand-in (a Go c-shared library)"
    go_workdir mig-standin
    mkdir -p "$WORK/out"
    started=$SECONDS
    nvml_dir=$(go_download "${GO_NVML}@${GO_NVML_VERSION}") || broken "$(go_download_error)"
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
            broken "the stand-in's modules cannot be downloaded: $(grep -m 1 'reading https://\|go: ' "$WORK/build.log")"
        fi
        broken "go build of the stand-in (lab/mig-nvml-standin) failed (output above)"
    fi
    check_library "$WORK/out/$LIB"
    log "stand-in built in $((SECONDS - started)) s"
    install_library "$WORK/out/$LIB" "$dir"
    # Stand-ins built from earlier sources are never used again.
    for old in "$CACHE_ROOT"/*; do
        [[ $old == "$dir" || ! -d $old ]] || rm -rf "$old"
    done
}

build_standin
