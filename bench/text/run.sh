#!/usr/bin/env bash
# Eagle vs PyTorch (CPU, eager) training the same character language models on the same batches,
# side by side: the LSTM of `eagle train --model charlm` and a 4-block causal Transformer (see
# text_bench.c and torch_text.py), batch 32 x 128 characters of the King James Bible, Adam with
# global clipnorm 1; then a causal attention's memory at T = 4096 (one head of 64).
#   bench/text/run.sh [--quick] [--models LIST] [--threads LIST] [--repeat N] [--steps N]
#                     [--warmup N] [--seq-len N]
#     --quick         3 timed steps after 1 warm-up step, 1 run (a smoke test)
#     --models LIST   of lstm,transformer (default both)
#     --threads LIST  thread counts (default 1,2)
#     --repeat N      timed runs per framework x model x thread count (default 3; medians)
#     --steps N       training steps per timed run (default 20)
#     --warmup N      untimed steps first (default 3)
#     --seq-len N     characters per window (default 128)
#     --precision L   of f32,bf16 (default f32): bf16 is Eagle's mixed_bfloat16 policy beside
#                     PyTorch's autocast to bf16, both with the loss in f32
# One process per framework x model x thread count, Eagle's then PyTorch's; each draws the same
# windows (splitmix64 offsets from seed 42 into the text text_bench --dump-text writes). PyTorch
# runs with torch.set_num_threads(N), OMP_NUM_THREADS=N and OMP_WAIT_POLICY=PASSIVE (its OpenMP
# threads otherwise spin on a loaded machine). Attention memory: Eagle's allocator peak beyond the
# inputs (tests/test_attention.c's figure), and for both frameworks the resident set's peak
# growth (VmHWM after clear_refs) over the forward and backward, each in its own process.
# EAGLE_BUILD picks the build directory (default build/release; built here when it is the default
# and has no bench_text). Logs go to bench/out/text/<time>/.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/../.."
models=lstm,transformer threads=1,2 repeat=3 steps=20 warmup=3 seq_len=128 precisions=f32
while [ $# -gt 0 ]; do
  case $1 in
    --quick) repeat=1 steps=3 warmup=1; shift ;;
    --models) models=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --seq-len) seq_len=$2; shift 2 ;;
    --precision) precisions=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
for m in ${models//,/ }; do
  case $m in lstm|transformer) ;;
    *) echo "run.sh: unknown model '$m' (lstm, transformer)" >&2; exit 2 ;;
  esac
done
py=bench/.venv/bin/python
[ -x "$py" ] && "$py" -c "import torch, numpy" 2>/dev/null || ./bench/setup.sh
build=${EAGLE_BUILD:-build/release}
bin=$build/bench/bench_text
if [ ! -x "$bin" ] && [ -z "${EAGLE_BUILD:-}" ]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target bench_text
fi
[ -x "$bin" ] || { echo "run.sh: no $bin (cmake --build $build --target bench_text)" >&2; exit 1; }
out=bench/out/text/$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
text=$out/kjv_train.txt
"$bin" --dump-text "$text"
common=(--steps "$steps" --warmup "$warmup" --repeat "$repeat" --seq-len "$seq_len" --seed 42)
for p in ${precisions//,/ }; do
  case $p in
    f32) policy=() ;;
    bf16) policy=(--policy mixed_bfloat16) ;;
    *) echo "run.sh: unknown precision '$p' (f32, bf16)" >&2; exit 2 ;;
  esac
  for m in ${models//,/ }; do
    for t in ${threads//,/ }; do
      echo "run.sh: $m, $p, $t thread(s): eagle" >&2
      "$bin" --model "$m" --threads "$t" "${policy[@]}" "${common[@]}" \
        >"$out/eagle.$m.$p.$t.log" 2>&1 || echo "run.sh: eagle failed, see $out/eagle.$m.$p.$t.log" >&2
      echo "run.sh: $m, $p, $t thread(s): torch" >&2
      OMP_NUM_THREADS=$t OMP_WAIT_POLICY=PASSIVE "$py" bench/text/torch_text.py --text "$text" \
        --model "$m" --threads "$t" --precision "$p" "${common[@]}" >"$out/torch.$m.$p.$t.log" 2>&1 ||
        echo "run.sh: torch failed, see $out/torch.$m.$p.$t.log" >&2
    done
  done
done
rm -f "$text"
t=${threads##*,}
echo "run.sh: attention memory, $t thread(s)" >&2
"$bin" --attention-memory --threads "$t" >"$out/eagle.memory.log" 2>&1 ||
  echo "run.sh: eagle failed, see $out/eagle.memory.log" >&2
for a in naive sdpa; do
  OMP_NUM_THREADS=$t OMP_WAIT_POLICY=PASSIVE "$py" bench/text/torch_text.py --attention-memory "$a" \
    --threads "$t" >"$out/torch.memory-$a.log" 2>&1 ||
    echo "run.sh: torch failed, see $out/torch.memory-$a.log" >&2
done
echo "batch 32 x $seq_len characters, $steps steps x $repeat run(s) after $warmup warm-up step(s), logs in $out"
"$py" bench/text/report.py "$out"
