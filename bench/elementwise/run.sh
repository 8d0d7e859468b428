#!/usr/bin/env bash
# Eagle's elementwise ops and reductions (add, mul, exp, relu, sum, tanh, sigmoid, gelu, log,
# softplus on 1K ... 64M f32 elements, plus row/column broadcast, transposed views and axis sums)
# against the STREAM copy/triad measured in the same run, and PyTorch on the same ops and sizes.
#   bench/elementwise/run.sh [--threads "1 2"] [--max-elems N] [--seconds S] [--wall]
#                            [--dtypes "f32 bf16 f16"]
# Rates are GB/s by process CPU time per thread (steadier on a shared machine) unless --wall.
set -euo pipefail
cd "$(dirname "$0")/../.."
threads="1 2" max_elems=$((64 << 20)) seconds=0.35 wall=() dtypes=f32
while [ $# -gt 0 ]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --max-elems) max_elems=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --wall) wall=(--wall); shift ;;
    --dtypes) dtypes=$2; shift 2 ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ -x build/release/bench/bench_elementwise ] || { cmake --preset release >/dev/null && cmake --build --preset release --target bench_elementwise; }
[ -x bench/.venv/bin/python ] || ./bench/setup.sh
mkdir -p bench/out
tsv=bench/out/elementwise.tsv
: > "$tsv"
for t in $threads; do
  for d in $dtypes; do
    build/release/bench/bench_elementwise --threads "$t" --max-elems "$max_elems" \
      --seconds "$seconds" "${wall[@]}" --dtype "$d" --tsv "$tsv"
    bench/.venv/bin/python bench/elementwise/torch_elementwise.py --threads "$t" \
      --max-elems "$max_elems" --seconds "$seconds" "${wall[@]}" --dtype "$d" --tsv "$tsv"
  done
done
bench/.venv/bin/python bench/elementwise/compare.py "$tsv"
