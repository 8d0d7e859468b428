#!/usr/bin/env bash
# Two builds of Eagle side by side, alternating, in one run: the 1-element add of
# bench_op_overhead and the seed model's eager training step (bench_modes_step all, 64 hidden
# units, batch 32), each ROUNDS times per build, then medians and new/old ratios. For restructurings that
# must not cost time: build the old commit elsewhere (git worktree add /tmp/old <commit> && cmake
# --preset release there), then
#   bench/builds/run.sh /tmp/old/build/release build/release [ROUNDS] [THREADS]
set -euo pipefail
old=${1:?old build dir}
new=${2:?new build dir}
rounds=${3:-9}
threads=${4:-1}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for ((r = 0; r < rounds; r++)); do
  for build in "$old" "$new"; do
    tag=$([ "$build" = "$old" ] && echo old || echo new)
    add=$("$build/bench/bench_op_overhead" "$threads" | awk '/^add 1 element/ {print $6}')
    step=$("$build/bench/bench_modes_step" all 600 64 32 "$threads" |
      sed -n 's/^eager:.*median step \([0-9.]*\) us cpu.*/\1/p')
    echo "$tag $add $step" >>"$out"
  done
done
python3 - "$out" "$rounds" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
def med(tag, col):
    return statistics.median(float(r[col]) for r in rows if r[0] == tag)
print(f"{sys.argv[2]} alternating rounds; medians of the per-round medians (thread CPU time)")
for name, col, unit in (("add, 1 element", 1, "ns"), ("seed step", 2, "us")):
    old, new = med("old", col), med("new", col)
    print(f"{name:16s} old {old:9.1f} {unit}  new {new:9.1f} {unit}  new/old {new / old:.3f}")
PY
