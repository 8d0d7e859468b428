#!/usr/bin/env bash
# The GPU check: Eagle's `cuda` tests and GPU benchmarks on a machine with an NVIDIA GPU, in one
# run with one summary at the end.
#
#   scripts/gpu-check.sh prepare   on a build machine (no GPU needed): builds with CUDA into
#                                  build/gpu and packs build/gpu-bundle — the test and bench
#                                  binaries, the shared libraries a bare GPU machine may lack
#                                  (OpenBLAS, cmocka, zlib) and a 10 000-image Fashion-MNIST
#                                  subset — and build/gpu-bundle.tar.xz, the same in ~25 MB:
#                                  small enough to travel (device tool: carry that file).
#   scripts/gpu-check.sh [run]     on the GPU machine, from the repository root: runs the bundle
#                                  (or, with no bundle, builds one first when the machine can);
#                                  exit 0 when every test passed.
#
# GPU time is short (about 15 minutes per issue), so `run` reuses the bundle and stays under
# 8 minutes: the tests first (each with a timeout), then the benchmarks (bench/gpu/run.sh).
# The CUDA libraries Eagle opens at run time (cuBLASLt, cuDNN, NVRTC) are looked for under
# /usr/local/cuda and in the Python packages of the machine's PyTorch (nvidia-*).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bundle=$root/build/gpu-bundle
mode=${1:-run}

# The test programs the bundle carries, with the environment each runs under (what
# tests/CMakeLists.txt gives the `cuda` label).
cuda_tests=(
  "test_cuda_devices|"
  "test_cuda_unavailable|"
  "test_cuda_fusion|EG_CUDA_CACHE_DIR=$bundle/cache"
  "test_op_devices|EG_TEST_DEVICE=cuda:0"
  "test_modes|EG_TEST_DEVICE=cuda:0"
  "test_lazy|EG_FUSION_CHECK=1 EG_CUDA_CACHE_DIR=$bundle/cache"
)

prepare() {
  set -e
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DEAGLE_CUDA=ON >/dev/null
  local targets=(eagle bench_gpu)
  for t in "${cuda_tests[@]}"; do targets+=("${t%%|*}"); done
  cmake --build build/gpu -j "$(nproc)" --target "${targets[@]}"
  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/data" "$bundle/cache"
  cp build/gpu/tools/eagle/eagle "$bundle/bin/"
  cp build/gpu/bench/bench_gpu "$bundle/bin/" 2>/dev/null || echo "note: no bench_gpu built"
  for t in "${cuda_tests[@]}"; do cp "build/gpu/tests/${t%%|*}" "$bundle/bin/"; done
  # eagle and bench_gpu keep their symbols: a crash there is shown with a backtrace (run)
  for t in "${cuda_tests[@]}"; do strip "$bundle/bin/${t%%|*}" 2>/dev/null || true; done
  # Shared libraries outside the CUDA toolkit and glibc: a bare GPU machine may lack them.
  ldd "$bundle"/bin/* 2>/dev/null | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux|libgcc_s|libstdc\+\+|libcuda|libcudart)[.-]' |
    while read -r lib; do cp -L "$lib" "$bundle/lib/"; done
  # Fashion-MNIST's first 10 000 training images (and all 10 000 test images), as idx files.
  python3 - "$bundle/data" <<'PY'
import gzip, struct, sys, shutil
src, dst = "/usr/share/datasets/fashion-mnist", sys.argv[1]
for name, keep in [("train-images-idx3-ubyte", 10000), ("train-labels-idx1-ubyte", 10000)]:
    data = gzip.open(f"{src}/{name}.gz").read()
    dims = data[3]
    shape = list(struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims]))
    per = 1
    for s in shape[1:]: per *= s
    shape[0] = keep
    head = data[:4] + struct.pack(">" + "I" * dims, *shape)
    body = data[4 + 4 * dims:4 + 4 * dims + keep * per]
    with gzip.open(f"{dst}/{name}.gz", "wb") as f: f.write(head + body)
for name in ["t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]:
    shutil.copy(f"{src}/{name}.gz", f"{dst}/{name}.gz")
PY
  cp tests/cli/test_cuda_train.sh "$bundle/bin/"
  tar -C build -cf - gpu-bundle | xz -T0 -6 >"$bundle.tar.xz"
  du -sh "$bundle" "$bundle.tar.xz"
  echo "bundle ready: carry build/gpu-bundle.tar.xz and run scripts/gpu-check.sh on the GPU machine"
}

# Directories holding the CUDA libraries Eagle opens at run time, for LD_LIBRARY_PATH.
cuda_library_path() {
  local dirs=() d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/nvidia/lib64; do
    [ -d "$d" ] && dirs+=("$d")
  done
  local site
  site=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null)
  if [ -n "$site" ]; then
    for d in "$site"/nvidia/*/lib "$site"/nvidia/cu13/lib; do [ -d "$d" ] && dirs+=("$d"); done
  fi
  (IFS=:; echo "${dirs[*]}")
}

run() {
  if [ ! -d "$bundle/bin" ] && [ -f "$bundle.tar.xz" ]; then
    tar -C build -xJf "$bundle.tar.xz" 2>/dev/null ||
      python3 -m tarfile -e "$bundle.tar.xz" build || echo "could not unpack $bundle.tar.xz"
  fi
  if [ ! -d "$bundle/bin" ]; then
    echo "no bundle at $bundle: building one here"
    prepare || { echo "SUMMARY: could not build (no bundle carried, no toolchain here)"; return 1; }
  fi
  export LD_LIBRARY_PATH="$bundle/lib:$(cuda_library_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
  "$bundle/bin/eagle" info
  local passed=() failed=() skipped=()
  for t in "${cuda_tests[@]}"; do
    local name=${t%%|*} env=${t#*|} started rc
    started=$(date +%s.%N)
    # shellcheck disable=SC2086 # env is a list of assignments
    env $env timeout 300 "$bundle/bin/$name" >"$bundle/$name.log" 2>&1
    rc=$?
    local took
    took=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    case $rc in
      0) passed+=("$name"); echo "PASS $name (${took} s)" ;;
      77) skipped+=("$name"); echo "SKIP $name: $(tail -1 "$bundle/$name.log")" ;;
      *) failed+=("$name"); echo "FAIL $name (exit $rc, ${took} s); last lines:"; tail -25 "$bundle/$name.log" ;;
    esac
  done
  EAGLE_DATA=$bundle/data timeout 420 bash "$bundle/bin/test_cuda_train.sh" "$bundle/bin/eagle" \
    >"$bundle/train.log" 2>&1
  case $? in
    0) passed+=(test_cuda_train); grep -E '^(ok|FAIL)' "$bundle/train.log" ;;
    77) skipped+=(test_cuda_train); tail -1 "$bundle/train.log" ;;
    *) failed+=(test_cuda_train); tail -25 "$bundle/train.log" ;;
  esac
  if [ -x "$bundle/bin/bench_gpu" ] && [ -f bench/gpu/run.sh ]; then
    EAGLE_BENCH_GPU=$bundle/bin/bench_gpu timeout 240 bash bench/gpu/run.sh "$bundle/bench.txt" \
      2>&1 | tee "$bundle/bench.log"
    local bench_rc=${PIPESTATUS[0]}
    [ "$bench_rc" -eq 0 ] || echo "benchmarks: exit $bench_rc"
    # A crashed benchmark loses the rest of its run: show where, with every op waited for so
    # that a GPU fault is reported by the op that caused it (cuda-gdb debugs host code too).
    if grep -q "exit 139" "$bundle/bench.log" 2>/dev/null && command -v cuda-gdb >/dev/null; then
      echo "a benchmark crashed; its backtrace (the training steps, 5 of each):"
      EG_CUDA_SYNC=1 timeout 120 cuda-gdb -batch -ex run -ex bt --args "$bundle/bin/bench_gpu" \
        --only mlp,cnn --steps 5 >"$bundle/crash.log" 2>&1
      grep -E "^#[0-9]|signal|RESULT|error" "$bundle/crash.log" | head -40
    fi
  fi
  echo "SUMMARY: ${#passed[@]} passed, ${#failed[@]} failed (${failed[*]:-none}), ${#skipped[@]} skipped (${skipped[*]:-none})"
  [ ${#failed[@]} -eq 0 ]
}

case $mode in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh [prepare|run]" >&2; exit 2 ;;
esac
