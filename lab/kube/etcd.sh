#!/usr/bin/env bash
# etcd 3.5 for the lab cluster, from Debian's etcd-server package, and print the
# directory holding the `etcd` binary. Kubernetes 1.34 wants etcd 3.5; bookworm ships
# 3.4, so on bookworm the package comes from trixie (same archive keyring, checked by
# apt) and is unpacked into the cache instead of being installed over the host's.
set -euo pipefail
ETCD_SUITE="${ETCD_SUITE:-trixie}"
cache="${GPUOPS_LAB_CACHE:-$HOME/.cache/gpuops-lab}"
out="$cache/etcd-$ETCD_SUITE"
# One build at a time: make test's lanes (the daemon's private API server, the lab) may
# ask at once on a cold cache, and the second would remove the first one's half-built tree.
mkdir -p "$cache"
exec 9>"$cache/.etcd-build.lock"
flock 9
if [[ -x "$out/usr/bin/etcd" && -f "$out/.complete" ]]; then
  echo "$out/usr/bin"
  exit 0
fi
rm -rf "$out" && mkdir -p "$out/apt/lists/partial" "$out/apt/cache/archives/partial"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $ETCD_SUITE main" \
  > "$out/apt/sources.list"
apt_opts=(
  -o "Dir::Etc::SourceList=$out/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o "Dir::State::Lists=$out/apt/lists" -o "Dir::Cache=$out/apt/cache"
  -o APT::Sandbox::User=root -q
)
apt-get "${apt_opts[@]}" update >&2
(cd "$out" && apt-get "${apt_opts[@]}" download etcd-server >&2)
dpkg-deb -x "$out"/etcd-server_*.deb "$out"
version="$("$out/usr/bin/etcd" --version | awk '/etcd Version/ {print $3}')"
case "$version" in
  3.5.* | 3.6.*) ;;
  *) echo "etcd.sh: $ETCD_SUITE's etcd-server is $version; Kubernetes 1.34 needs 3.5 or 3.6" >&2; exit 1 ;;
esac
rm -rf "$out/apt" "$out"/etcd-server_*.deb
touch "$out/.complete"
echo "$out/usr/bin"
