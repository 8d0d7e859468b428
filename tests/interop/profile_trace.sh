#!/usr/bin/env bash
# ctest test_profile_trace: `eagle profile --steps 5 --trace FILE` prints the per-op table and
# writes a trace that Python's json module parses and that has Perfetto's required fields.
#   profile_trace.sh EAGLE_BINARY
set -euo pipefail
eagle=$1
here=$(cd "$(dirname "$0")" && pwd)
command -v python3 >/dev/null || { echo "profile_trace.sh: FAILED: python3 not found" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# usage: --help exits 0, bad flags 2
"$eagle" profile --help | grep -q "usage: eagle profile" || { echo "profile_trace.sh: FAILED: --help" >&2; exit 1; }
for bad in "--steps 0" "--hidden 64,,3" "--frobnicate" "extra"; do
  rc=0
  "$eagle" profile $bad >/dev/null 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || { echo "profile_trace.sh: FAILED: 'eagle profile $bad' exited $rc, expected 2" >&2; exit 1; }
done
out=$("$eagle" profile --steps 5 --threads 2 --trace "$tmp/trace.json")
echo "$out"
grep -q "% step" <<<"$out" || { echo "profile_trace.sh: FAILED: no '% step' column" >&2; exit 1; }
grep -q "^matmul " <<<"$out" || { echo "profile_trace.sh: FAILED: no matmul row" >&2; exit 1; }
python3 -c 'import json, sys; json.load(open(sys.argv[1]))' "$tmp/trace.json"
python3 "$here/check_trace.py" "$tmp/trace.json" 5
