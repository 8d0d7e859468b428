#!/usr/bin/env bash
# Interop with Hugging Face's tokenizers (test_interop_tokenizers):
#   tokenizers.sh BUILD_DIR EAGLE_TOKENIZER_INTEROP
# Uses the Python of BUILD_DIR/interop-tokenizers-venv, created on first use with
# `python3 -m venv` and `pip install tokenizers` (EG_INTEROP_PYTHON=/path/to/python overrides it
# with an interpreter that has tokenizers). tests/interop/check_tokenizers.py does the checks.
# Unlike run.sh, a pip install that fails (PyPI out of reach) SKIPS the test (exit 77, ctest's
# SKIP_RETURN_CODE): the comparison needs the package, and an offline build is not broken. A
# missing python3 or venv module still fails.
set -euo pipefail

fail() {
  echo "tokenizers.sh: FAILED: $*" >&2
  exit 1
}

[ $# -eq 2 ] || fail "usage: tokenizers.sh BUILD_DIR EAGLE_TOKENIZER_INTEROP"
build_dir=$1
helper=$2
here=$(cd "$(dirname "$0")" && pwd)
[ -x "$helper" ] || fail "$helper is not an executable (build the eagle_tokenizer_interop target)"

if [ -n "${EG_INTEROP_PYTHON:-}" ]; then
  python=$EG_INTEROP_PYTHON
else
  venv="$build_dir/interop-tokenizers-venv"
  python="$venv/bin/python"
  if ! "$python" -c "import tokenizers" >/dev/null 2>&1; then
    if ! "$python" -m pip --version >/dev/null 2>&1; then
      command -v python3 >/dev/null || fail "python3 not found (needed for the interop test)"
      python3 -m venv --clear "$venv" ||
        fail "python3 -m venv $venv failed (on Debian: apt-get install python3-venv)"
    fi
    if ! "$python" -m pip install --quiet --disable-pip-version-check tokenizers; then
      echo "tokenizers.sh: SKIPPED: pip install tokenizers failed (no network access to PyPI?)" >&2
      exit 77
    fi
  fi
fi
"$python" -c "import tokenizers" || fail "$python cannot import tokenizers"
"$python" -c "import tokenizers; print('interop with tokenizers', tokenizers.__version__)"

work=$(mktemp -d "${TMPDIR:-/tmp}/eagle-tokenizers-XXXXXX")
trap 'rm -rf "$work"' EXIT
"$python" "$here/check_tokenizers.py" "$helper" "$work"
echo "tokenizers.sh: tokenizers interop ok"
