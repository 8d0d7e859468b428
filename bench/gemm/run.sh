#!/usr/bin/env bash
# f32 GEMM: Eagle's matmul (its own AVX2 kernel, and the old OpenBLAS-per-tile path) vs OpenBLAS,
# BLIS, libxsmm and oneDNN (Debian 12 packages, bench/gemm/setup.sh), on square n = 64..2048 and
# the exact shapes of the 784-64-10 (batch 32, "s.") and 784-512-512-10 (batch 128, "L.") MLPs'
# forward and backward passes, 1 and 2 threads; PyTorch (torch.mm: MKL) on the square sizes.
#   bench/gemm/run.sh [--libs LIST] [--threads 1,2] [--seconds S] [--rounds R] [--square|--mlp|--dense]
#     --libs LIST   of eagle,eagle-openblas-tiles,openblas,blis,libxsmm,onednn,torch (default
#                   all; torch needs bench/setup.sh's bench/.venv)
#     --rounds R    run the libraries R times in turn (default 1): summarize.py takes medians
#     --seconds S   minimum timing per shape (default 0.3; at least 5 samples)
#     --sample-ms M work per sample at peak speed (default 20; less on a crowded machine)
#     --dense       instead: Eagle's Dense forward (relu) fused vs unfused, CPU time per call
# Columns: median wall GFLOP/s and % of the FMA peak of that many cores (each binary measures one
# core's peak at start with the widest FMA the CPU has, zmm or ymm; --peak G fixes it), then GFLOP/s per CPU-second of the process and % of one core's peak (the steadier
# figure on a shared machine; libraries whose threads spin count their spinning, so the OpenMP
# ones run with OMP_WAIT_POLICY=passive).
# libxsmm runs single-threaded (its BLAS interface JITs small shapes, hands large ones to BLAS).
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/../.."
libs="eagle,eagle-openblas-tiles,openblas,blis,libxsmm,onednn,torch" pass=() rounds=1 peak=
while [ $# -gt 0 ]; do
  case $1 in
    --libs) libs=$2; shift 2 ;;
    --peak) peak=$2; pass+=("$1" "$2"); shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads|--seconds|--sample-ms) pass+=("$1" "$2"); shift 2 ;;
    --square|--mlp) pass+=("$1"); shift ;;
    --dense) libs=eagle; pass+=("$1"); shift ;;
    -h|--help) sed -n '2,15p' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
./bench/gemm/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release --target eagle_static bench_gemm >/dev/null
bin=build/release/bench/gemm
mkdir -p "$bin"
src=bench/gemm/gemm_bench.c
cc=(cc -O2 -std=c11 -w)
cp build/release/bench/bench_gemm "$bin/eagle"
"${cc[@]}" -DLIB_OPENBLAS -I/usr/include/x86_64-linux-gnu/openblas-pthread "$src" -o "$bin/openblas" -lopenblas
"${cc[@]}" -DLIB_BLIS -I/usr/include/x86_64-linux-gnu/blis-openmp "$src" -o "$bin/blis" \
  /usr/lib/x86_64-linux-gnu/blis-openmp/libblis.so -fopenmp -lm
"${cc[@]}" -DLIB_XSMM "$src" -o "$bin/libxsmm" /usr/lib/libxsmm.a -lopenblas -ldl -lm -lpthread
"${cc[@]}" -DLIB_DNNL -fopenmp "$src" -o "$bin/onednn" -ldnnl
echo "$(nproc) cores; $(uptime); $(lscpu | sed -n 's/^Model name: *//p')"
# One measured peak for every library (torch's script cannot measure it itself).
if [ -z "$peak" ]; then
  peak=$("$bin/eagle" --peak-only | sed -n "s/^# one core's f32 FMA peak: \([0-9.]*\).*/\1/p")
  pass+=(--peak "$peak")
fi
torch_pass=()
for ((i = 0; i < ${#pass[@]}; i++)); do
  case ${pass[i]} in
    --threads|--seconds|--peak) torch_pass+=("${pass[i]}" "${pass[i + 1]}"); i=$((i + 1)) ;;
  esac
done
for ((round = 0; round < rounds; round++)); do
for lib in ${libs//,/ }; do
  case $lib in
    eagle) "$bin/eagle" "${pass[@]}" ;;
    eagle-openblas-tiles) EG_MATMUL=openblas "$bin/eagle" "${pass[@]}" ;;
    openblas) "$bin/openblas" "${pass[@]}" ;;
    blis) OMP_WAIT_POLICY=passive "$bin/blis" "${pass[@]}" ;;
    libxsmm) "$bin/libxsmm" --threads 1 "${pass[@]}" ;;
    onednn) OMP_WAIT_POLICY=passive "$bin/onednn" "${pass[@]}" ;;
    torch)
      if [ -x bench/.venv/bin/python ]; then
        OMP_WAIT_POLICY=passive bench/.venv/bin/python bench/gemm/torch_gemm.py "${torch_pass[@]}"
      else
        echo "torch: skipped (no bench/.venv: run bench/setup.sh)"
      fi ;;
    *) echo "run.sh: unknown library '$lib'" >&2; exit 2 ;;
  esac
done
done
echo "bench/gemm/summarize.py < this output: medians per shape, ratios to OpenBLAS"
