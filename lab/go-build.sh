# shellcheck shell=bash
# Sourced, not run, by the lab's Go builds (lab/mocknvml, lab/mig-nvml-standin,
# lab/peer): the toolchain check, a scratch directory, `go mod download` of one module
# version, and the vendored tarball a refused module falls back to. The sourcing script
# defines fail MESSAGE (print it and exit).

# go_require_cgo WHAT: Go, a C compiler for cgo and python3 (it reads go's JSON), or fail.
go_require_cgo() {
    local cc
    command -v go >/dev/null 2>&1 || fail "go not found on PATH ($1 needs the Go toolchain)"
    cc=$(go env CC)
    command -v "${cc%% *}" >/dev/null 2>&1 || fail "no C compiler for cgo (go env CC: $cc); $1 links with cgo"
    command -v python3 >/dev/null 2>&1 || fail "python3 not found on PATH (it reads go's JSON output)"
}

# go_workdir NAME: a scratch directory in $WORK with a wrapper module in $WORK/wrapper
# (`go mod download` needs one), removed on exit.
go_workdir() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpuops-$1.XXXXXX")
    # Files copied out of the module cache are read-only: make them writable to remove them.
    trap 'chmod -R u+w "$WORK" 2>/dev/null || true; rm -rf "$WORK"' EXIT
    mkdir -p "$WORK/wrapper"
    (cd "$WORK/wrapper" && go mod init "gpuops.invalid/$1-wrapper" >/dev/null 2>&1) ||
        fail "go mod init of the wrapper module failed in $WORK/wrapper"
}

# go_json_field NAME: one field of the JSON document on stdin, its lines joined with "; ".
go_json_field() {
    python3 -c '
import json
import sys

try:
    doc = json.loads(sys.stdin.read() or "{}")
except ValueError:
    sys.exit(0)
value = str(doc.get(sys.argv[1]) or "")
print("; ".join(line.strip() for line in value.splitlines() if line.strip()))
' "$1"
}

# go_download MODULE@VERSION: download into the module cache and print its directory. On
# failure return 1; go_download_error then prints go's own error (it runs in the caller's
# $(...) subshell, so the message goes through a file, not a variable).
go_download() {
    local json rc error dir
    set +e
    json=$(cd "$WORK/wrapper" && go mod download -json "$1" 2>"$WORK/download.err")
    rc=$?
    set -e
    error=$(go_json_field Error <<<"$json")
    if [[ $rc -ne 0 || -n $error ]]; then
        [[ -n $error ]] || error=$(grep -v '^[[:space:]]*$' "$WORK/download.err" | tail -n 1 || true)
        echo "go mod download $1 failed: ${error:-exit status $rc}" >"$WORK/download.msg"
        return 1
    fi
    dir=$(go_json_field Dir <<<"$json")
    if [[ -z $dir || ! -d $dir ]]; then
        echo "go mod download $1 reported no module directory" >"$WORK/download.msg"
        return 1
    fi
    echo "$dir"
}

go_download_error() {
    cat "$WORK/download.msg" 2>/dev/null || echo "go mod download failed with no message"
}

# go_vendored_tarball NAME: where the vendored copy NAME of a module the proxy refuses lies:
# $GPUOPS_VENDOR_DIR/NAME, else the first shared/vendor/NAME beside the checkout or one of
# its parents (../shared/vendor for /work/main).
go_vendored_tarball() {
    local dir
    if [[ -n ${GPUOPS_VENDOR_DIR:-} ]]; then
        echo "$GPUOPS_VENDOR_DIR/$1"
        return
    fi
    dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    local top=$dir
    while [[ $dir != / ]]; do
        dir=$(dirname "$dir")
        if [[ -e $dir/shared/vendor/$1 ]]; then
            echo "$dir/shared/vendor/$1"
            return
        fi
    done
    echo "$(dirname "$top")/shared/vendor/$1"
}

# go_unpack_vendored NAME SHA256 WHAT PROXY_ERROR: unpack the vendored tarball NAME into
# $WORK/src after checking its sha256; a missing file or another digest fails, naming both
# (never a silent switch to something else).
go_unpack_vendored() {
    local tarball actual
    tarball=$(go_vendored_tarball "$1")
    [[ -f $tarball ]] ||
        fail "the module proxy refused $3 ($4) and the vendored copy $tarball does not exist (set GPUOPS_VENDOR_DIR to the directory holding $1)"
    actual=$(sha256sum "$tarball" | cut -d' ' -f1)
    [[ $actual == "$2" ]] ||
        fail "$tarball has sha256 $actual, but this build pins $2 ($3): refusing to build from it"
    mkdir -p "$WORK/src"
    tar -xzf "$tarball" -C "$WORK/src"
    echo "$tarball"
}
