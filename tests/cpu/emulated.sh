#!/usr/bin/env bash
# The same binaries on CPUs this machine is not: under QEMU's user-mode emulator with a CPU model
# whose CPUID lacks AVX-512 (Haswell: AVX2 + FMA) or AVX altogether (Nehalem: SSE4.2), where an
# instruction the model lacks is an illegal instruction. This catches a kernel chosen without
# asking the dispatch level, and wider code the compiler let into the baseline library, which
# EG_CPU=avx2|baseline on a wide machine cannot (it only changes what Eagle chooses).
#   emulated.sh MODEL EXPECTED_PATH TEST_BINARY...
# MODEL is a qemu -cpu name; EXPECTED_PATH what `eagle info` must call the path there (avx2 or
# baseline); the first binary must be the eagle tool. Exit 77 (skipped) without qemu-x86_64.
set -euo pipefail
model=${1:?cpu model} expected=${2:?expected path} eagle=${3:?eagle tool}
shift 3
command -v qemu-x86_64 >/dev/null || { echo "qemu-x86_64 not installed: skipped"; exit 77; }
run() { qemu-x86_64 -cpu "$model" "$@" 2> >(grep -v "TCG doesn't support requested feature" >&2); }
path=$(run "$eagle" info | sed -n 's/^CPU path: *//p')
echo "CPU model $model: $path"
case $path in
  "$expected "*) ;;
  *) echo "expected the $expected path under -cpu $model" >&2; exit 1 ;;
esac
for test in "$@"; do
  echo "== $(basename "$test") under -cpu $model"
  run "$test"
done
