#!/usr/bin/env bash
# Build NVIDIA's device plugin (github.com/NVIDIA/k8s-device-plugin, cmd/nvidia-device-plugin)
# from the Go module proxy, to run next to ours against the mock NVML
# (lab/mocknvml/build.sh).
#
# Output: ${GPUOPS_LAB_CACHE:-~/.cache/gpuops-lab}/nvidia-device-plugin/<version>/nvidia-device-plugin,
# outside the work tree so that a fresh clone on the same machine (CI) reuses it.
# The last line on stdout is that directory; everything else goes to stderr. An existing
# binary is reused (delete the directory to rebuild). NVIDIA_PLUGIN_VERSION picks another
# release; the default is the one roles/device_plugin's device_plugin_nvidia_version pins,
# so the lab's DaemonSet image and the benchmark's peer are the release users run.
#
# Source, in this order: the Go module proxy (what a machine on the public internet gets);
# else, for a release pinned in VENDORED below, NVIDIA's source kept in shared/vendor (the
# proxy here lists no versions and refuses v0.19.2, v0.20.0 and v0.20.1 with 403 "This module
# version is not available", checked 2026-11-28), its sha256 checked.
#
# Exit status:
#   0  built, or already there
#   3  unavailable here: the module version cannot be downloaded, or the Go toolchain or a
#      C compiler for cgo (go-nvml) is missing. The one stderr line starting with
#      "NVIDIA device plugin unavailable:" says which.
#   1  the build broke (anything else)
set -euo pipefail

VERSION=${NVIDIA_PLUGIN_VERSION:-v0.20.0}
# Releases with a vendored tarball (k8s-device-plugin-<version>.tar.gz, `git archive` of the
# tag with its vendor/ tree; provenance in shared/vendor/README.md) and its sha256.
declare -A VENDORED=(
    [v0.20.0]=66aa7f49eb22d68e25629836bbef35fccc89dbae546554069d5b24e5f2f5c431
)
MODULE=github.com/NVIDIA/k8s-device-plugin
PACKAGE=$MODULE/cmd/nvidia-device-plugin
BINARY=nvidia-device-plugin
OUT_DIR=${GPUOPS_LAB_CACHE:-$HOME/.cache/gpuops-lab}/nvidia-device-plugin/$VERSION

unavailable() {
    echo "NVIDIA device plugin unavailable: $*" >&2
    exit 3
}

broken() {
    echo "NVIDIA device plugin build failed: $*" >&2
    exit 1
}

log() {
    echo "nvidia-device-plugin: $*" >&2
}

# shellcheck source=lab/go-build.sh
source "$(dirname "${BASH_SOURCE[0]}")/../go-build.sh"
# A missing toolchain or module is "unavailable here" (exit 3), as below.
fail() { unavailable "$@"; }

if [[ -x $OUT_DIR/$BINARY ]]; then
    log "reusing $OUT_DIR/$BINARY"
    echo "$OUT_DIR"
    exit 0
fi

go_require_cgo "${PACKAGE}@${VERSION} (go-nvml)"
go_workdir nvidia-plugin

# Not `go install ${PACKAGE}@${VERSION}`: that also reads the module's version list (for
# deprecation notices), which the allowlist proxy here refuses (403) although it serves
# the version itself. Download the version and build it in a writable copy instead: its
# own go.mod and go.sum pin every dependency, and it has no replace directives.
log "downloading ${MODULE}@${VERSION}"
src=$WORK/src
if module_dir=$(go_download "${MODULE}@${VERSION}"); then
    mkdir -p "$src"
    cp -R "$module_dir/." "$src/"
    chmod -R u+w "$src"
    BUILD_GOFLAGS="-mod=readonly -buildvcs=false"
    SOURCE="the Go module proxy"
else
    proxy_error=$(go_download_error)
    [[ -n ${VENDORED[$VERSION]:-} ]] ||
        unavailable "$proxy_error, and no vendored copy is pinned for $VERSION (pinned: ${!VENDORED[*]})"
    log "the proxy refused it ($proxy_error); building from the vendored tarball"
    # A missing or altered tarball is an error, not "unavailable": the pin says it is there.
    fail() { broken "$@"; }
    tarball=$(go_unpack_vendored "k8s-device-plugin-$VERSION.tar.gz" "${VENDORED[$VERSION]}" \
        "${MODULE}@${VERSION}" "$proxy_error")
    src=$WORK/src/k8s-device-plugin-$VERSION
    [[ -d $src/cmd/nvidia-device-plugin ]] || broken "$tarball has no k8s-device-plugin-$VERSION/cmd/nvidia-device-plugin"
    BUILD_GOFLAGS="-mod=vendor -buildvcs=false"
    SOURCE="$tarball (sha256 ok)"
fi

log "building ${PACKAGE}@${VERSION} from $SOURCE ($(go env GOVERSION); a few minutes the first time)"
started=$SECONDS
set +e
# The version NVIDIA's Makefile stamps in (the plugin logs it and GFD labels with it).
(cd "$src" && CGO_ENABLED=1 GOFLAGS="$BUILD_GOFLAGS" go build \
    -ldflags "-X $MODULE/internal/info.version=$VERSION" -o "$WORK/bin/$BINARY" "./${PACKAGE#"$MODULE"/}") 2>&1 |
    tee "$WORK/build.log" >&2
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]]; then
    reason=$(grep -m 1 -E '403|404|410|Forbidden|not available|reading https://|module lookup disabled|requires go >=' "$WORK/build.log" || true)
    [[ -z $reason ]] || unavailable "go build of ${PACKAGE}@${VERSION} failed: ${reason}"
    broken "go build of ${PACKAGE}@${VERSION} exited $rc (output above)"
fi
[[ -x $WORK/bin/$BINARY ]] || broken "go build produced no $BINARY"

mkdir -p "$OUT_DIR"
cp "$WORK/bin/$BINARY" "$OUT_DIR/.$BINARY.$$"
mv -f "$OUT_DIR/.$BINARY.$$" "$OUT_DIR/$BINARY"
log "built $OUT_DIR/$BINARY in $((SECONDS - started)) s"
echo "$OUT_DIR"
