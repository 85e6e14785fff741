#!/usr/bin/env bash
# Make the dev environment on a fresh machine, offline from Ansible Galaxy:
#  1. a venv from the pinned requirements/dev.txt;
#  2. the collections we depend on, taken from the `ansible` PyPI wheel
#     (requirements/collections.txt), plus this repo linked in as gpuops.k8s, under
#     .build/collections so ANSIBLE_COLLECTIONS_PATH finds everything;
#  3. ansible-test's pip bootstrap script, which it would otherwise download from a host
#     that is unreachable here: a stand-in that runs pip from a PyPI wheel
#     (scripts/ansible-test-pip.sh, also used by scripts/ansible-matrix.py).
# Every step is skipped when its inputs have not changed, so re-running costs ~0.1 s.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${GPUOPS_VENV:-$repo/.venv}
cache=${GPUOPS_CACHE:-$repo/.cache}
collections=$repo/.build/collections

log() { printf 'bootstrap: %s\n' "$*" >&2; }
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }

# The dev line's controller Python (ansible-core 2.21 needs 3.12 or newer): the one
# scripts/ansible-matrix.py names for it, from pyenv or pythonX.Y on PATH; PYTHON=... wins.
python=${PYTHON:-$(python3 "$repo/scripts/ansible-matrix.py" --python dev)} || {
  log "no Python for the dev line (install it with pyenv, or set PYTHON=...)"
  exit 1
}
"$python" - <<'PY' || { log "$python: Python >= 3.12 is required (set PYTHON=...)"; exit 1; }
import sys
sys.exit(0 if sys.version_info >= (3, 12) else 1)
PY

# 1. venv (made again from scratch when its Python is another one)
want="$(stamp_of "$repo/requirements/dev.txt") $("$python" -V)"
if [ "$(cat "$venv/.gpuops-stamp" 2>/dev/null)" != "$want" ]; then
  if [ -x "$venv/bin/python" ] && [ "$("$venv/bin/python" -V)" != "$("$python" -V)" ]; then
    log "$venv has $("$venv/bin/python" -V), not $("$python" -V): making it again"
    rm -rf "$venv"
  fi
  log "creating venv $venv ($("$python" -V), requirements/dev.txt)"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$repo/requirements/dev.txt"
  echo "$want" >"$venv/.gpuops-stamp"
fi

# 2. collections
want=$(stamp_of "$repo/requirements/collections.txt")
if [ "$(cat "$collections/.gpuops-stamp" 2>/dev/null)" != "$want" ]; then
  mapfile -t lines < <(grep -v -e '^\s*#' -e '^\s*$' "$repo/requirements/collections.txt")
  wheel_req=${lines[0]}
  mkdir -p "$cache/wheels"
  wheel=$(compgen -G "$cache/wheels/${wheel_req%%==*}-${wheel_req##*==}-*.whl" | head -n 1 || true)
  if [ -z "$wheel" ]; then
    log "downloading $wheel_req (collections only are extracted)"
    "$venv/bin/python" -m pip download -q --disable-pip-version-check --no-deps -d "$cache/wheels" "$wheel_req"
    wheel=$(compgen -G "$cache/wheels/${wheel_req%%==*}-${wheel_req##*==}-*.whl" | head -n 1)
  fi
  rm -rf "$collections"
  mkdir -p "$collections/ansible_collections/gpuops"
  "$venv/bin/python" - "$wheel" "$collections" "${lines[@]:1}" <<'PY'
import sys
import zipfile

wheel, dest, names = sys.argv[1], sys.argv[2], sys.argv[3:]
prefixes = tuple('ansible_collections/%s/' % n.replace('.', '/') for n in names)
with zipfile.ZipFile(wheel) as archive:
    members = [m for m in archive.namelist() if m.startswith(prefixes)]
    missing = [n for n, p in zip(names, prefixes) if not any(m.startswith(p) for m in members)]
    if missing:
        sys.exit('bootstrap: %s does not carry %s' % (wheel, ', '.join(missing)))
    archive.extractall(dest, members)
PY
  echo "$want" >"$collections/.gpuops-stamp"
fi
ln -sfn "$repo" "$collections/ansible_collections/gpuops/k8s"

# 3. ansible-test's pip bootstrap
bash "$repo/scripts/ansible-test-pip.sh" "$venv/bin/python"
log "ready: venv $venv, collections $collections"
