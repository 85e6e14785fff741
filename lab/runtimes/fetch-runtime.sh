#!/usr/bin/env bash
# Fetch one Debian package (component main) from bookworm, trixie or sid into the cache
# without installing it or touching the system's apt configuration, e.g. containerd 1.6 /
# 1.7 / 2.x or docker.io, so tests can run the real binaries (`containerd config dump`,
# `dockerd --validate`). Usage: fetch-runtime.sh <package> <suite>
# Extracts into ${GPUOPS_CACHE:-<repo>/.cache}/runtimes/<suite>/<package>/ and prints that
# root as its last line; the fetched version is in <root>/.gpuops-fetched. No network once
# extracted. The keyring of bookworm's debian-archive-keyring also verifies trixie and sid.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 <package> <bookworm|trixie|sid>" >&2
  exit 2
fi
package=$1 suite=$2
case $suite in
  bookworm | trixie | sid) ;;
  *) echo "unsupported suite: $suite (bookworm, trixie or sid)" >&2; exit 2 ;;
esac
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
base=${GPUOPS_CACHE:-$repo/.cache}/runtimes/$suite
root=$base/$package
stamp=$root/.gpuops-fetched

if [ ! -e "$stamp" ]; then
  mkdir -p "$base"
  exec 9>"$base/.lock" && flock 9  # one apt run per suite at a time (parallel tests)
  if [ ! -e "$stamp" ]; then
    state=$base/.apt
    mkdir -p "$state"/{etc,prefs,lists/partial,archives/partial}
    cat >"$state/etc/main.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$state/etc"
         -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts="$state/prefs"
         -o Dir::State::Lists="$state/lists" -o Dir::Cache="$state" -o Debug::NoLocking=1
         -o APT::Sandbox::User=root -q)
    apt-get "${apt[@]}" update >&2
    work=$(mktemp -d "$base/.tmp.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    (cd "$work" && apt-get "${apt[@]}" download "$package" >&2)
    deb=$(echo "$work"/*.deb)
    dpkg -x "$deb" "$work/root"
    printf '%s %s %s\n' "$package" "$(dpkg-deb -f "$deb" Version)" "$suite" >"$work/root/.gpuops-fetched"
    rm -rf "$root" && mv "$work/root" "$root"
    echo "fetched $(cat "$stamp")" >&2
  fi
fi
echo "$root"
