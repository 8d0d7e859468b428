#!/usr/bin/env bash
# Interop tests with the reference readers and writers.
#   run.sh BUILD_DIR EAGLE_INTEROP                       safetensors and .npy (test_interop_python)
#   run.sh --tensorboard BUILD_DIR EAGLE_SUMMARY_DEMO    TensorBoard event files
#                                                        (test_interop_tensorboard)
# Uses the Python in BUILD_DIR/interop-venv (safetensors, numpy) or, for --tensorboard,
# BUILD_DIR/interop-tensorboard-venv (tensorboard; a separate venv, so that the two tests can run
# in parallel), created on first use with `python3 -m venv` and `pip install`.
# EG_INTEROP_PYTHON=/path/to/python overrides it with an interpreter that already has the
# packages. Builds nothing: EAGLE_INTEROP / EAGLE_SUMMARY_DEMO are the C helpers that CMake built.
# Every step must succeed; a missing python3, venv or pip (e.g. offline) is a FAILURE, never a
# skip.
set -euo pipefail

fail() {
  echo "run.sh: FAILED: $*" >&2
  exit 1
}

mode=safetensors
if [ "${1:-}" = --tensorboard ]; then
  mode=tensorboard
  shift
fi
[ $# -eq 2 ] || fail "usage: run.sh [--tensorboard] BUILD_DIR EAGLE_INTEROP|EAGLE_SUMMARY_DEMO"
build_dir=$1
helper=$2
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$helper" ] || fail "$helper is not an executable (build the $(basename "$helper") target)"

# Sets $python to an interpreter that can import $2 (comma-separated), installing the packages
# $3... with pip into the venv BUILD_DIR/$1 when needed.
setup_python() {
  local venv="$build_dir/$1" imports=$2
  shift 2
  if [ -n "${EG_INTEROP_PYTHON:-}" ]; then
    python=$EG_INTEROP_PYTHON
  else
    python="$venv/bin/python"
    if ! "$python" -c "import $imports" >/dev/null 2>&1; then
      if ! "$python" -m pip --version >/dev/null 2>&1; then
        command -v python3 >/dev/null || fail "python3 not found (needed for the interop test)"
        python3 -m venv --clear "$venv" ||
          fail "python3 -m venv $venv failed (on Debian: apt-get install python3-venv)"
      fi
      "$python" -m pip install --quiet --disable-pip-version-check "$@" ||
        fail "pip install $* failed (no network access to PyPI?)"
    fi
  fi
  "$python" -c "import $imports" || fail "$python cannot import $imports"
}

work=$(mktemp -d "${TMPDIR:-/tmp}/eagle-interop-XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ "$mode" = tensorboard ]; then
  setup_python interop-tensorboard-venv "tensorboard, numpy" tensorboard
  "$python" -c "import tensorboard; print('interop with tensorboard', tensorboard.__version__)"
  # Eagle writes an event file, TensorBoard's readers check it.
  event_file=$("$helper" "$work/logs/run1") || fail "$helper failed"
  "$python" "$here/check_tensorboard.py" "$work/logs/run1" "$event_file"
  echo "run.sh: tensorboard interop ok"
  exit 0
fi

setup_python interop-venv "safetensors, numpy" safetensors numpy
"$python" -c "import safetensors, numpy; print('interop with safetensors', \
safetensors.__version__, 'numpy', numpy.__version__)"

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
