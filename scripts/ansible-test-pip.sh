#!/usr/bin/env bash
# ansible-test's pip bootstrap, offline: ansible-test puts pip into the venvs it makes with
# a get-pip script it downloads from ci-files.testing.ansible.com, a host that is
# unreachable here. Write a stand-in that runs pip from its PyPI wheel instead, for the
# pip version that the ansible-test next to PYTHON wants (each ansible-core line pins its
# own: 2.17 23.1.2, 2.18 and 2.19 24.2, 2.20 and 2.21 25.2). Idempotent.
# Usage: ansible-test-pip.sh PYTHON   (a Python that imports ansible_test)
set -euo pipefail

python=$1
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${GPUOPS_CACHE:-$repo/.cache}

# The version from ansible-test's get_venv_packages.
pip_version=$("$python" - <<'PY'
import inspect
import re

from ansible_test._internal.python_requirements import get_venv_packages

print(re.search(r"pip='([0-9.]+)'", inspect.getsource(get_venv_packages)).group(1))
PY
)
get_pip=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
grep -q 'gpuops.k8s' "$get_pip" 2>/dev/null && exit 0

mkdir -p "$cache/wheels" "$(dirname "$get_pip")"
pip_wheel=$(compgen -G "$cache/wheels/pip-$pip_version-*.whl" | head -n 1 || true)
if [ -z "$pip_wheel" ]; then
  "$python" -m pip download -q --disable-pip-version-check --no-deps -d "$cache/wheels" "pip==$pip_version"
  pip_wheel=$(compgen -G "$cache/wheels/pip-$pip_version-*.whl" | head -n 1)
fi
cp "$pip_wheel" "$(dirname "$get_pip")/"
cat >"$get_pip" <<PY
# Offline stand-in for get-pip.py, written by gpuops.k8s scripts/ansible-test-pip.sh.
# ansible-test runs this to put pip into the venvs it makes; the real script lives on a
# host that is unreachable here, so run pip from its PyPI wheel instead.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "$(basename "$pip_wheel")"))
from pip._internal.cli.main import main  # noqa: E402

# get-pip.py takes pip-install arguments plus options of its own that pip does not know.
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install"] + args))
PY
echo "ansible-test-pip: wrote $get_pip (pip $pip_version from its wheel)" >&2
