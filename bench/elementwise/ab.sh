#!/usr/bin/env bash
# Two builds of bench_elementwise side by side (say main's and a branch's): runs them in turn,
# REPS times at each thread count, so load on the shared machine hits both alike, and prints the
# medians of GB/s, % of the triad measured in the same run, and ns per element.
#   bench/elementwise/ab.sh BEFORE_BINARY AFTER_BINARY [--reps N] [--threads "1 2"]
#                           [--ops exp,tanh,...] [--elems N] [--seconds S]
set -euo pipefail
[ $# -ge 2 ] || { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
before=$1 after=$2; shift 2
reps=5 threads="1 2" ops=add,exp,tanh,sigmoid,gelu,softplus,log elems=16777216 seconds=0.35
while [ $# -gt 0 ]; do
  case $1 in
    --reps) reps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --elems) elems=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    *) echo "ab.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for rep in $(seq "$reps"); do
  for t in $threads; do
    for which in before after; do
      binary=$before; [ "$which" = after ] && binary=$after
      "$binary" --threads "$t" --min-elems "$elems" --max-elems "$elems" --ops "$ops" \
        --no-layouts --seconds "$seconds" --tsv "$out/$which-$t-$rep.tsv" > /dev/null
    done
  done
done
python3 "$(dirname "$0")/ab_summary.py" "$out"
