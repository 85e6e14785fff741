#!/usr/bin/env bash
# Build the collection as Galaxy would ship it, install the tarball into an empty
# collections path, and check the installed copy documents and runs its modules.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${GPUOPS_VENV:-$repo/.venv}/bin
dist=$repo/.build/dist
clean=$(mktemp -d)
trap 'rm -rf "$clean"' EXIT

rm -rf "$dist"
"$bin/ansible-galaxy" collection build "$repo" --output-path "$dist" --force
tarball=$(ls "$dist"/gpuops-k8s-*.tar.gz)
# Only the clean path: the dev tree's .build/collections already holds gpuops.k8s.
export ANSIBLE_COLLECTIONS_PATH=$clean
# --no-deps: Galaxy (where kubernetes.core comes from) is unreachable here.
"$bin/ansible-galaxy" collection install "$tarball" -p "$clean" --no-deps
# ... so its declared dependency comes from the same place make venv took it (the ansible
# wheel), next to it, as Galaxy would install it.
mkdir -p "$clean/ansible_collections/kubernetes"
cp -a "$repo/.build/collections/ansible_collections/kubernetes/core" "$clean/ansible_collections/kubernetes/core"
installed=$clean/ansible_collections/gpuops/k8s
for dev_only in .venv .build .cache bench scripts requirements Makefile lab inventories; do
  if [ -e "$installed/$dev_only" ]; then echo "check-build: $dev_only leaked into the tarball" >&2; exit 1; fi
done
modules=$("$bin/ansible-doc" -t module -l gpuops.k8s | awk '{print $1}')
[ -n "$modules" ] || { echo "check-build: ansible-doc lists no gpuops.k8s modules" >&2; exit 1; }
for module in $modules; do
  "$bin/ansible-doc" "$module" >/dev/null
done
# The installed copy runs: with no NVML library here it must say so, not trace back.
out=$(ANSIBLE_PYTHON_INTERPRETER="$bin/python" LD_LIBRARY_PATH='' "$bin/ansible" localhost \
  -m gpuops.k8s.gpu_info -a require_nvml=false 2>&1)
grep -q '"reason": "library_not_found"' <<<"$out" || { echo "$out" >&2; exit 1; }
echo "check-build: $(basename "$tarball") ($(du -h "$tarball" | cut -f1)) installs; modules: ${modules//$'\n'/ }"
