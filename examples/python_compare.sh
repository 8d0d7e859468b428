#!/usr/bin/env bash
# The ctest example_python_compare_interop: examples/python_compare.c trains and saves, then
# examples/python_compare.py recomputes its predictions with numpy.
#   python_compare.sh BUILD_DIR PYTHON_COMPARE [ARGS...]   (ARGS: data directory, examples)
# Uses the Python of BUILD_DIR/interop-venv, the venv of tests/interop/run.sh (numpy and
# safetensors), creating it on first use; EG_INTEROP_PYTHON=/path/to/python overrides it, as for
# run.sh. Without python3, venv or pip (e.g. offline) this FAILS, never skips.
set -euo pipefail

fail() {
  echo "python_compare.sh: FAILED: $*" >&2
  exit 1
}

[ $# -ge 2 ] || fail "usage: python_compare.sh BUILD_DIR PYTHON_COMPARE [ARGS...]"
build_dir=$1
program=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$program" ] || fail "$program is not an executable (build the python_compare target)"

python=${EG_INTEROP_PYTHON:-$build_dir/interop-venv/bin/python}
if [ -z "${EG_INTEROP_PYTHON:-}" ] && ! "$python" -c "import safetensors, numpy" 2>/dev/null; then
  if ! "$python" -m pip --version >/dev/null 2>&1; then
    command -v python3 >/dev/null || fail "python3 not found"
    python3 -m venv --clear "$build_dir/interop-venv" ||
      fail "python3 -m venv failed (on Debian: apt-get install python3-venv)"
  fi
  "$python" -m pip install --quiet --disable-pip-version-check safetensors numpy ||
    fail "pip install safetensors numpy failed (no network access to PyPI?)"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/eagle-python-compare-XXXXXX")
trap 'rm -rf "$work"' EXIT
"$program" "${1:-}" "${2:-3000}" "$work" || fail "$program failed"
"$python" "$here/python_compare.py" "$work"
