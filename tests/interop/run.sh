#!/usr/bin/env bash
# Interop test with the reference readers and writers (ctest: test_interop_python).
#   run.sh BUILD_DIR EAGLE_INTEROP
# Uses the Python in BUILD_DIR/interop-venv, created on first use with `python3 -m venv` and
# `pip install safetensors numpy` (EG_INTEROP_PYTHON=/path/to/python overrides it with an
# interpreter that already has both). Builds nothing: EAGLE_INTEROP is the C helper that CMake
# built. Every step must succeed; a missing python3, venv or pip (e.g. offline) is a FAILURE,
# never a skip.
set -euo pipefail

fail() {
  echo "run.sh: FAILED: $*" >&2
  exit 1
}

[ $# -eq 2 ] || fail "usage: run.sh BUILD_DIR EAGLE_INTEROP"
build_dir=$1
helper=$2
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$helper" ] || fail "$helper is not an executable (build the eagle_interop target)"

if [ -n "${EG_INTEROP_PYTHON:-}" ]; then
  python=$EG_INTEROP_PYTHON
else
  venv="$build_dir/interop-venv"
  python="$venv/bin/python"
  if ! "$python" -c "import safetensors, numpy" >/dev/null 2>&1; then
    if ! "$python" -m pip --version >/dev/null 2>&1; then
      command -v python3 >/dev/null || fail "python3 not found (needed for the interop test)"
      python3 -m venv --clear "$venv" ||
        fail "python3 -m venv $venv failed (on Debian: apt-get install python3-venv)"
    fi
    "$python" -m pip install --quiet --disable-pip-version-check safetensors numpy ||
      fail "pip install safetensors numpy failed (no network access to PyPI?)"
  fi
fi
"$python" -c "import safetensors, numpy" || fail "$python cannot import safetensors and numpy"
"$python" -c "import safetensors, numpy; print('interop with safetensors', \
safetensors.__version__, 'numpy', numpy.__version__)"

work=$(mktemp -d "${TMPDIR:-/tmp}/eagle-interop-XXXXXX")
trap 'rm -rf "$work"' EXIT

# Eagle writes, the reference reads.
"$helper" write-safetensors "$work"
"$python" "$here/check_safetensors.py" check-eagle "$work"
"$helper" write-npy "$work"
"$python" "$here/check_npy.py" check-eagle "$work"

# The reference writes, Eagle reads.
"$python" "$here/check_safetensors.py" write "$work"
"$helper" check-safetensors "$work"
"$python" "$here/check_npy.py" write "$work"
"$helper" check-npy "$work"

echo "run.sh: interop ok"
