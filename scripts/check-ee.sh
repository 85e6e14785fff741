#!/usr/bin/env bash
# Check meta/execution-environment.yml (requirements.txt, bindep.txt) the way an execution
# environment build uses it, without a container or a registry:
#  1. ansible-builder (PyPI, pinned) in a cached venv;
#  2. the collection tarball, as Galaxy would ship it, and an EE definition (version 3)
#     that installs it; `ansible-builder create` makes the build context;
#  3. the context's galaxy stage, here: the tarball installed into a collections path, with
#     kubernetes.core next to it (from make venv: Galaxy is unreachable here);
#  4. the context's builder stage, here: the context's own introspect.py over that path,
#     with the arguments its Containerfile gives it; the lists must carry our entries;
#  5. a fresh venv from ONLY that Python list (and the ansible-core the definition pins),
#     where scripts/ee-imports.py imports every module and module_utils, checks that the
#     controller-side ones have their libraries and that requirements.txt declares what
#     they import, ansible-doc documents each module, and the controller-side modules run
#     up to the point where they need a cluster (not a missing library).
# PyPI is the only network it uses. GPUOPS_EE_KEEP=1 keeps the work directory.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${GPUOPS_VENV:-$repo/.venv}/bin
cache=${GPUOPS_CACHE:-$repo/.cache}
# The dev venv's Python: the ansible-core that the definition pins (dev.txt's) needs it.
python=${PYTHON:-$bin/python}
builder_version=3.2.0
builder_venv=$cache/ansible-builder-$builder_version
work=$(mktemp -d)
if [ "${GPUOPS_EE_KEEP:-}" = 1 ]; then echo "check-ee: work directory $work"; else trap 'rm -rf "$work"' EXIT; fi
say() { printf 'check-ee: %s\n' "$*"; }
die() { printf 'check-ee: FAIL: %s\n' "$*" >&2; exit 1; }
pip_quiet=(-q --disable-pip-version-check)

# 1. ansible-builder
if ! "$builder_venv/bin/ansible-builder" --version 2>/dev/null | grep -qx "$builder_version"; then
  say "installing ansible-builder $builder_version into $builder_venv"
  rm -rf "$builder_venv"
  "$python" -m venv "$builder_venv"
  "$builder_venv/bin/python" -m pip install "${pip_quiet[@]}" "ansible-builder==$builder_version"
fi

# 2. tarball, definition, build context
"$bin/ansible-galaxy" collection build "$repo" --output-path "$work/dist" >/dev/null
tarball=$(ls "$work"/dist/gpuops-k8s-*.tar.gz)
core_pin=$(grep -E '^ansible-core==' "$repo/requirements/dev.txt")
mkdir -p "$work/definition"
cp "$tarball" "$work/definition/gpuops-k8s.tar.gz"
cat >"$work/definition/execution-environment.yml" <<EOF
---
version: 3
images:
  base_image:
    name: registry.invalid/ee-base:latest  # never pulled: no image is built here
dependencies:
  ansible_core:
    package_pip: $core_pin
  ansible_runner:
    package_pip: ansible-runner
  galaxy:
    collections:
      - name: gpuops-k8s.tar.gz
        type: file
additional_build_files:
  - src: gpuops-k8s.tar.gz
    dest: .
EOF
(cd "$work/definition" && "$builder_venv/bin/ansible-builder" create -c "$work/context" -v 1 >/dev/null)
context=$work/context
containerfile=$context/Containerfile
[ -f "$containerfile" ] || die "ansible-builder create made no Containerfile"
[ -f "$context/_build/gpuops-k8s.tar.gz" ] || die "the build context lacks the collection tarball"
grep -q 'gpuops-k8s.tar.gz' "$context/_build/requirements.yml" \
  || die "the context's requirements.yml does not install gpuops.k8s"
grep -q 'ansible-galaxy collection install .*-r requirements.yml' "$containerfile" \
  || die "the Containerfile has no galaxy stage installing requirements.yml"
introspect_line=$(grep -E 'introspect\.py introspect' "$containerfile") \
  || die "the Containerfile does not run introspect.py"

# 3. galaxy stage: what `ansible-galaxy collection install -r requirements.yml` leaves
collections=$work/collections
(cd "$context/_build" && ANSIBLE_COLLECTIONS_PATH=$collections "$bin/ansible-galaxy" collection install -r requirements.yml \
  -p "$collections" --no-deps >/dev/null)
mkdir -p "$collections/ansible_collections/kubernetes"
cp -a "$repo/.build/collections/ansible_collections/kubernetes/core" "$collections/ansible_collections/kubernetes/core"
installed=$collections/ansible_collections/gpuops/k8s
for file in meta/execution-environment.yml requirements.txt bindep.txt; do
  [ -f "$installed/$file" ] || die "$file is not in the built collection (galaxy.yml build_ignore?)"
done

# 4. builder stage: the context's introspect.py, as the Containerfile runs it
pip_list=$context/_build/requirements.introspected.txt
bindep_list=$context/_build/bindep.introspected.txt
"$builder_venv/bin/python" "$context/_build/scripts/introspect.py" introspect "$collections" \
  --write-pip="$pip_list" --write-bindep="$bindep_list" >"$work/introspect.log"
while IFS= read -r req; do
  grep -qE "^${req%%[<>=!~ ;]*}([<>=!~ ;]|$).*from collection .*gpuops\.k8s" "$pip_list" \
    || die "the build context's Python list does not carry '$req' from gpuops.k8s:"$'\n'"$(cat "$pip_list")"
done < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$repo/requirements.txt" | grep -v '^$')
while IFS= read -r pkg; do
  grep -qF "$pkg" "$bindep_list" || die "the build context's system list does not carry '$pkg'"
done < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' "$repo/bindep.txt" | grep -v '^$')
"$builder_venv/bin/python" -c 'import sys; from bindep.depends import Depends; Depends(open(sys.argv[1]).read())' \
  "$bindep_list" || die "bindep cannot parse the build context's system list"
say "build context: ${introspect_line#RUN } lists"
sed 's/^/  /' "$pip_list"
sed 's/^/  /' "$bindep_list"

# 5. a venv from only that list (plus the base stage's ansible-core and ansible-runner)
install_refs=$(sed -nE 's/^ARG ANSIBLE_INSTALL_REFS="(.*)"$/\1/p' "$containerfile")
[ -n "$install_refs" ] || die "no ANSIBLE_INSTALL_REFS in the Containerfile"
ee=$work/ee-venv
"$python" -m venv "$ee"
# shellcheck disable=SC2086  # ANSIBLE_INSTALL_REFS is a space-separated list
"$ee/bin/python" -m pip install "${pip_quiet[@]}" $install_refs -r "$pip_list"
# Not the dev tree's ansible.cfg: only what the EE would have.
printf '[defaults]\n' >"$work/ansible.cfg"
export ANSIBLE_COLLECTIONS_PATH=$collections ANSIBLE_CONFIG=$work/ansible.cfg
PYTHONPATH=$collections "$ee/bin/python" "$repo/scripts/ee-imports.py" "$installed" \
  || die "the collection does not import in a venv made from the build context's list"
modules=$("$ee/bin/ansible-doc" -t module -l gpuops.k8s | awk '{print $1}')
[ -n "$modules" ] || die "ansible-doc lists no gpuops.k8s modules in the EE venv"
for module in $modules; do
  "$ee/bin/ansible-doc" "$module" >/dev/null || die "ansible-doc $module fails in the EE venv"
done
# The controller-side modules, run by that venv's ansible against an API server that is not
# there (loopback, a closed port): "Connection refused" means every library they load is in.
cat >"$work/kubeconfig" <<'EOF'
apiVersion: v1
kind: Config
clusters: [{name: nowhere, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: nobody, user: {token: none}}]
contexts: [{name: nowhere, context: {cluster: nowhere, user: nobody}}]
current-context: nowhere
EOF
for call in "gpuops.k8s.gpu_node name=gpu-node-1" "kubernetes.core.k8s_info kind=Node"; do
  module=${call%% *}
  out=$("$ee/bin/ansible" localhost -m "$module" -a "${call#* } kubeconfig=$work/kubeconfig" \
    -e "{\"ansible_python_interpreter\": \"$ee/bin/python\"}" 2>&1 || true)
  grep -q 'Connection refused' <<<"$out" || die "$module did not get as far as the API server:"$'\n'"$out"
done
say "ok: ansible-builder $builder_version context lists our requirements; modules import, document and run in a venv made from it (${modules//$'\n'/ })"
