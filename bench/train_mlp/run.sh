#!/usr/bin/env bash
# Eagle vs PyTorch eager vs TensorFlow eager training the same MLPs on Fashion-MNIST, side by side:
# glorot-uniform kernels and zero biases, Adam with Keras' defaults (lr 1e-3, eps 1e-7), the same
# batches in the same order (train.c's shuffle, reimplemented in fashion.py), one process per
# framework x model x thread count, each run once (no medians: a full run is already minutes).
#   bench/train_mlp/run.sh [--epochs N] [--quick] [--threads "1 2"] [--frameworks LIST]
#     --epochs N      epochs per run (default 5)
#     --quick         1 epoch on the first 10000 training examples (a smoke test)
#     --threads LIST  thread counts to run (default "1 2")
#     --frameworks L  which to run, of eagle,torch,tf,tf.function (default eagle,torch,tf);
#                     tf.function is TensorFlow with the step in tf.function (graph mode)
# samples/s counts the training steps only (as `eagle train` does: no data loading, shuffling or
# evaluation); peak RSS is /usr/bin/time -v's maximum resident set size of the whole process.
# Logs go to bench/out/train_mlp/<time>/.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/../.."
epochs=5 limit=0 threads="1 2" frameworks="eagle,torch,tf"
while [ $# -gt 0 ]; do
  case $1 in
    --epochs) epochs=$2; shift 2 ;;
    --quick) epochs=1 limit=10000; shift ;;
    --threads) threads=$2; shift 2 ;;
    --frameworks) frameworks=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
for fw in ${frameworks//,/ }; do
  case $fw in eagle|torch|tf|tf.function) ;;
    *) echo "run.sh: unknown framework '$fw' (eagle, torch, tf, tf.function)" >&2; exit 2 ;;
  esac
done
./bench/setup.sh
out=bench/out/train_mlp/$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
py=bench/.venv/bin/python
common=(--epochs "$epochs" --seed 42)
[ "$limit" -gt 0 ] && common+=(--limit "$limit")
for model in 64:32 512,512:128; do
  hidden=${model%:*} batch=${model#*:}
  for t in $threads; do
    for fw in ${frameworks//,/ }; do
      args=(--hidden "$hidden" --batch-size "$batch" --threads "$t" "${common[@]}")
      case $fw in
        eagle) cmd=(build/release/tools/eagle/eagle train "${args[@]}") ;;
        torch) cmd=("$py" bench/train_mlp/torch_train.py "${args[@]}") ;;
        tf) cmd=("$py" bench/train_mlp/tf_train.py "${args[@]}") ;;
        tf.function) cmd=("$py" bench/train_mlp/tf_train.py --function "${args[@]}") ;;
      esac
      log=$out/$fw.$hidden.$batch.$t
      echo "run.sh: $fw 784-${hidden/,/-}-10 batch $batch, $t thread(s)" >&2
      /usr/bin/time -v -o "$log.time" "${cmd[@]}" >"$log.log" 2>&1 ||
        echo "run.sh: $fw failed, see $log.log" >&2
    done
  done
done
echo "epochs $epochs$([ "$limit" -gt 0 ] && echo ", first $limit training examples"), one run each, logs in $out"
"$py" bench/train_mlp/report.py "$out"
