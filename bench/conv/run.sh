#!/usr/bin/env bash
# Eagle's convolution kernels (im2col + OpenBLAS sgemm, the direct AVX2 kernel, the input and
# filter gradients) and PyTorch's conv2d (oneDNN) on the CNN's layer shapes, side by side.
#   bench/conv/run.sh [--threads N] [--repeats N]
# Rates are GFLOP/s (2 * multiply-adds of the forward convolution per second) by wall time and by
# process CPU time per thread; the second is the steadier one on a shared machine.
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=1 repeats=10
while [ $# -gt 0 ]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ -x build/release/bench/bench_conv ] || { cmake --preset release >/dev/null && cmake --build --preset release --target bench_conv; }
build/release/bench/bench_conv --threads "$threads" --repeats "$repeats"
[ -x bench/.venv/bin/python ] || ./bench/setup.sh
bench/.venv/bin/python bench/conv/torch_conv.py --threads "$threads" --repeats "$repeats"
