#!/usr/bin/env bash
# Mixed precision, Eagle beside PyTorch's CPU autocast: the same models trained in float32,
# mixed_bfloat16 and mixed_float16 (PyTorch: torch.autocast("cpu", bf16 / f16), GradScaler from
# 2^15 for f16, as Eagle's dynamic loss scale), one process per framework x model x precision,
# the same batches in the same order, in one run. Prints samples/s, each precision's speed over
# the same framework's float32, the last test accuracy and its difference from float32.
#   bench/mixed_precision/run.sh [--models LIST] [--precisions LIST] [--threads N]
#                                [--epochs N] [--limit N] [--frameworks LIST]
#     --models LIST      of seed (784-64-10, batch 32), mlp512 (784-512-512-10, batch 128),
#                        cnn (tools/eagle/cnn.c, batch 64); default seed,mlp512,cnn
#     --precisions LIST  default float32,mixed_bfloat16,mixed_float16
#     --threads N        default 2
#     --epochs N         default 1 (accuracy runs: e.g. --epochs 5 --limit 0)
#     --limit N          training examples (default 12800; 0 = all 60000)
#     --frameworks LIST  of eagle,torch (default both)
# Logs go to bench/out/mixed_precision/<time>/.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/../.."
models=seed,mlp512,cnn precisions=float32,mixed_bfloat16,mixed_float16 threads=2 epochs=1
limit=12800 frameworks=eagle,torch
while [ $# -gt 0 ]; do
  case $1 in
    --models) models=$2; shift 2 ;;
    --precisions) precisions=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --frameworks) frameworks=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ -x bench/.venv/bin/python ] || ./bench/setup.sh
if [ ! -x build/release/tools/eagle/eagle ]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target eagle
fi
out=bench/out/mixed_precision/$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
py=bench/.venv/bin/python
common=(--epochs "$epochs" --threads "$threads" --seed 42)
[ "$limit" -gt 0 ] && common+=(--limit "$limit")
for model in ${models//,/ }; do
  case $model in
    seed) eagle_args=(--hidden 64 --batch-size 32); torch_cmd=(bench/train_mlp/torch_train.py --hidden 64 --batch-size 32) ;;
    mlp512) eagle_args=(--hidden 512,512 --batch-size 128)
            torch_cmd=(bench/train_mlp/torch_train.py --hidden 512,512 --batch-size 128) ;;
    cnn) eagle_args=(--model cnn --batch-size 64 --epochs "$epochs")
         torch_cmd=(bench/train_cnn/torch_train_cnn.py --batch-size 64 --channels-last) ;;
    *) echo "run.sh: unknown model '$model' (seed, mlp512, cnn)" >&2; exit 2 ;;
  esac
  for precision in ${precisions//,/ }; do
    for fw in ${frameworks//,/ }; do
      case $fw in
        eagle) cmd=(build/release/tools/eagle/eagle train "${eagle_args[@]}" "${common[@]}"
                    --precision "$precision") ;;
        torch) cmd=(env OMP_WAIT_POLICY=PASSIVE "$py" "${torch_cmd[@]}" "${common[@]}"
                    --precision "$precision") ;;
        *) echo "run.sh: unknown framework '$fw' (eagle, torch)" >&2; exit 2 ;;
      esac
      echo "run.sh: $fw $model $precision" >&2
      "${cmd[@]}" >"$out/$fw.$model.$precision.log" 2>&1 ||
        echo "run.sh: $fw $model $precision failed, see $out/$fw.$model.$precision.log" >&2
    done
  done
done
lscpu | sed -n 's/^Model name: *//p' >"$out/cpu"
echo "$epochs epoch(s), $([ "$limit" -gt 0 ] && echo "first $limit examples" || echo "all 60000 examples"), $threads thread(s), $(cat "$out/cpu"); logs in $out"
"$py" bench/mixed_precision/report.py "$out"
