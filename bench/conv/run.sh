#!/usr/bin/env bash
# Eagle's convolution kernels (its AVX2 implicit GEMM, im2col + OpenBLAS sgemm, the small direct
# kernel, col2im; forward, input and filter gradients), oneDNN called from C (bench/conv/onednn/
# dnnl_conv.c, plain NHWC/HWIO and its preferred blocked layouts) and PyTorch's conv2d (oneDNN
# inside) on the CNN's layer shapes, side by side.
#   bench/conv/run.sh [--threads N] [--repeats N] [--no-torch] [--no-onednn]
# Rates are GFLOP/s (2 * multiply-adds of the forward convolution per second) by wall time, by
# process CPU time per thread (steadier on a shared machine) and by the fastest single call's CPU
# time ("best": the least disturbed by other jobs; Eagle and oneDNN only). CPU time is summed over
# threads: every rate is per busy core.
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=1 repeats=10 torch=1 onednn=1
while [ $# -gt 0 ]; do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --no-torch) torch=0; shift ;;
    --no-onednn) onednn=0; shift ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ -x build/release/bench/bench_conv ] || { cmake --preset release >/dev/null && cmake --build --preset release --target bench_conv; }
build/release/bench/bench_conv --threads "$threads" --repeats "$repeats"
if [ "$onednn" = 1 ]; then
  [ -x build/release/bench/dnnl_conv ] || ./bench/conv/setup.sh
  OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE build/release/bench/dnnl_conv \
    --threads "$threads" --repeats "$repeats"
fi
if [ "$torch" = 1 ]; then
  [ -x bench/.venv/bin/python ] || ./bench/setup.sh
  bench/.venv/bin/python bench/conv/torch_conv.py --threads "$threads" --repeats "$repeats"
fi
