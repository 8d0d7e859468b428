#!/usr/bin/env bash
# f32 GEMM: Eagle's matmul (its own AVX2 kernel, and the old OpenBLAS-per-tile path) vs OpenBLAS,
# BLIS, libxsmm and oneDNN (Debian 12 packages, bench/gemm/setup.sh), on square n = 64..2048 and
# the exact shapes of the 784-64-10 (batch 32, "s.") and 784-512-512-10 (batch 128, "L.") MLPs'
# forward and backward passes, 1 and 2 threads.
#   bench/gemm/run.sh [--libs LIST] [--threads 1,2] [--seconds S] [--square|--mlp|--dense]
#     --libs LIST   of eagle,eagle-openblas-tiles,openblas,blis,libxsmm,onednn (default all)
#     --seconds S   minimum timing per shape (default 0.3; at least 5 samples)
#     --sample-ms M work per sample at peak speed (default 20; less on a crowded machine)
#     --dense       instead: Eagle's Dense forward (relu) fused vs unfused, CPU time per call
# Columns: median wall GFLOP/s and % of the FMA peak of that many cores (101 GFLOP/s each, --peak
# to change), then GFLOP/s per CPU-second of the process and % of one core's peak (the steadier
# figure on a shared machine; libraries whose threads spin count their spinning, so the OpenMP
# ones run with OMP_WAIT_POLICY=passive).
# libxsmm runs single-threaded (its BLAS interface JITs small shapes, hands large ones to BLAS).
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/../.."
libs="eagle,eagle-openblas-tiles,openblas,blis,libxsmm,onednn" pass=()
while [ $# -gt 0 ]; do
  case $1 in
    --libs) libs=$2; shift 2 ;;
    --threads|--seconds|--peak|--sample-ms) pass+=("$1" "$2"); shift 2 ;;
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
echo "$(nproc) cores; $(uptime)"
for lib in ${libs//,/ }; do
  case $lib in
    eagle) "$bin/eagle" "${pass[@]}" ;;
    eagle-openblas-tiles) EG_MATMUL=openblas "$bin/eagle" "${pass[@]}" ;;
    openblas) "$bin/openblas" "${pass[@]}" ;;
    blis) OMP_WAIT_POLICY=passive "$bin/blis" "${pass[@]}" ;;
    libxsmm) "$bin/libxsmm" --threads 1 "${pass[@]}" ;;
    onednn) OMP_WAIT_POLICY=passive "$bin/onednn" "${pass[@]}" ;;
    *) echo "run.sh: unknown library '$lib'" >&2; exit 2 ;;
  esac
done
echo "bench/gemm/summarize.py < this output: medians per shape, ratios to OpenBLAS"
