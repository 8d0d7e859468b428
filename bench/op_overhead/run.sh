#!/usr/bin/env bash
# Eagle vs PyTorch eager: per-op dispatch cost and a small MLP step, side by side, with ratios.
#   bench/op_overhead/run.sh [threads]
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${1:-1}
./bench/setup.sh
eagle_out=$(./build/release/bench/bench_op_overhead "$threads")
torch_out=$(bench/.venv/bin/python bench/op_overhead/torch_op_overhead.py "$threads")
echo "$eagle_out" | head -1
echo "$torch_out" | head -1
printf '%-28s %12s %12s %10s %s\n' case "eagle ns" "torch ns" "torch/eagle" "eagle system allocs"
paste <(echo "$eagle_out" | tail -n +2) <(echo "$torch_out" | tail -n +2) | python3 -c '
import sys
for line in sys.stdin:
    left, right = line.rstrip("\n").split("\t")
    name = left[:28].strip()
    e = float(left[28:].split()[0]); t = float(right[28:].split()[0])
    allocs = left.split("ns", 1)[1].strip()
    print(f"{name:<28} {e:12.1f} {t:12.1f} {t / e:10.1f}x  {allocs}")
'
