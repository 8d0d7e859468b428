#!/usr/bin/env bash
# Eagle's int8 products beside PyTorch's (FBGEMM: dynamic quantization for Dense, static for the
# convolutions) on the CNN's layer shapes, batch 500, in one run: each side's f32 and int8 times
# and error, then per layer Eagle's speed over PyTorch's (> 1: Eagle is faster) in f32 and int8.
#   bench/approx/run.sh [THREADS] [REPEAT]      (bench/setup.sh makes the build and bench/.venv)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
threads=${1:-1} repeat=${2:-5}
eagle_bin=${EAGLE_BENCH_APPROX:-$root/build/release/bench/bench_approx}
[ -x "$eagle_bin" ] || eagle_bin=$root/build/cpu/bench/bench_approx
python=$root/bench/.venv/bin/python
[ -x "$python" ] || { echo "run.sh: no bench/.venv (run bench/setup.sh)" >&2; exit 2; }
lscpu | sed -n 's/^Model name: *//p' | head -1
eagle_out=$("$eagle_bin" --threads "$threads" --repeat "$repeat")
torch_out=$("$python" "$here/torch_int8.py" --threads "$threads" --repeat "$repeat" 2>/dev/null)
echo "$eagle_out"
echo
echo "$torch_out"
echo
"$python" - "$eagle_out" "$torch_out" <<'PY'
import re, sys
def rows(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r"^((?:conv|dense) \S+(?: \S+)?)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+x", line)
        if m:
            out[m.group(1).strip()] = (float(m.group(2)), float(m.group(3)))
    return out
eagle, torch = rows(sys.argv[1]), rows(sys.argv[2])
print(f"{'layer':<24} {'Eagle/torch f32':>16} {'Eagle/torch int8':>17}")
for name, (tf, ti) in torch.items():
    if name in eagle:
        ef, ei = eagle[name]
        print(f"{name:<24} {tf / ef:15.2f}x {ti / ei:16.2f}x")
PY
