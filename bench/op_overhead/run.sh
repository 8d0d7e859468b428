#!/usr/bin/env bash
# Eagle vs PyTorch eager: per-op dispatch cost and a small MLP step, side by side, with ratios
# (wall-clock and per-thread CPU time, medians; the ratio is of CPU times, which a machine shared
# with other jobs disturbs far less).
#   bench/op_overhead/run.sh [threads]
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${1:-1}
./bench/setup.sh
eagle_out=$(./build/release/bench/bench_op_overhead "$threads")
torch_out=$(bench/.venv/bin/python bench/op_overhead/torch_op_overhead.py "$threads")
echo "$eagle_out" | head -1
echo "$torch_out" | head -1
printf '%-28s %10s %10s %10s %10s %9s %s\n' case "eagle ns" "torch ns" "eagle cpu" "torch cpu" \
  "torch/eagle cpu" "eagle system allocs"
paste <(echo "$eagle_out" | tail -n +2) <(echo "$torch_out" | tail -n +2) | python3 -c '
import sys
for line in sys.stdin:
    left, right = line.rstrip("\n").split("\t")
    name = left[:28].strip()
    e, ec = (float(v) for v in left[28:].split()[0:3:2])
    t, tc = (float(v) for v in right[28:].split()[0:3:2])
    allocs = left.split("cpu-ns", 1)[1].strip()
    print(f"{name:<28} {e:10.1f} {t:10.1f} {ec:10.1f} {tc:10.1f} {tc / ec:14.1f}x  {allocs}")
'
