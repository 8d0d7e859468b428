#!/usr/bin/env bash
# Eagle vs PyTorch eager training the same CNN (tools/eagle/cnn.c; torch_train_cnn.py mirrors it)
# on Fashion-MNIST, batch 64, Adam 1e-3, the same shuffled batches, one process per framework x
# thread count, side by side.
#   bench/train_cnn/run.sh [--epochs N] [--steps N] [--threads "1 2"] [--frameworks LIST]
#     --epochs N      epochs per run (default 1)
#     --steps N       steps per epoch, 0 = the whole training set (default 100: a throughput run;
#                     use --epochs 12 --steps 0 for the accuracy run)
#     --threads LIST  thread counts (default "2")
#     --frameworks L  of eagle,torch,torch-cl (channels_last) (default eagle,torch)
# Prints samples/s by wall time and samples per CPU-second of the training steps (the second
# is the fair one on a shared machine), the last test accuracy, and Eagle / PyTorch ratios.
# PyTorch runs with OMP_WAIT_POLICY=PASSIVE: its OpenMP threads otherwise spin on a loaded machine.
# Logs go to bench/out/train_cnn/<time>/.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/../.."
epochs=1 steps=100 threads="2" frameworks="eagle,torch"
while [ $# -gt 0 ]; do
  case $1 in
    --epochs) epochs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --frameworks) frameworks=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
[ -x bench/.venv/bin/python ] || ./bench/setup.sh
if [ ! -x build/release/bench/bench_train_cnn ]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target bench_train_cnn
fi
out=bench/out/train_cnn/$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
py=bench/.venv/bin/python
for t in $threads; do
  for fw in ${frameworks//,/ }; do
    args=(--epochs "$epochs" --threads "$t" --batch-size 64 --seed 42)
    case $fw in
      eagle) cmd=(build/release/bench/bench_train_cnn "${args[@]}" --steps "$steps") ;;
      torch) cmd=(env OMP_WAIT_POLICY=PASSIVE "$py" bench/train_cnn/torch_train_cnn.py "${args[@]}"
                  --steps "$steps") ;;
      torch-cl) cmd=(env OMP_WAIT_POLICY=PASSIVE "$py" bench/train_cnn/torch_train_cnn.py "${args[@]}"
                     --steps "$steps" --channels-last) ;;
      *) echo "run.sh: unknown framework '$fw'" >&2; exit 2 ;;
    esac
    echo "run.sh: $fw, $t thread(s)" >&2
    "${cmd[@]}" >"$out/$fw.$t.log" 2>&1 || echo "run.sh: $fw failed, see $out/$fw.$t.log" >&2
  done
done
echo "epochs $epochs, $([ "$steps" -gt 0 ] && echo "$steps steps of 64 per epoch" || echo "full epochs"), logs in $out"
printf '%-10s %7s %12s %16s %9s\n' framework threads samples/s samples/cpu-s test_acc
for t in $threads; do
  for fw in ${frameworks//,/ }; do
    log=$out/$fw.$t.log
    line=$(grep '^trained' "$log" || true)
    wall=$(echo "$line" | sed -n 's/.*: \([0-9]*\) samples\/s.*/\1/p')
    cpu=$(echo "$line" | sed -n 's/.*: \([0-9]*\) samples per cpu-second.*/\1/p')
    acc=$(grep 'test accuracy' "$log" | tail -1 | awk '{print $3}')
    printf '%-10s %7s %12s %16s %9s\n' "$fw" "$t" "${wall:-?}" "${cpu:-?}" "${acc:-?}"
    echo "$fw $t ${wall:-0} ${cpu:-0}" >>"$out/summary"
  done
done
awk '{wall[$1" "$2]=$3; cpu[$1" "$2]=$4; th[$2]=1}
     END {for (t in th) if (wall["torch "t] > 0 && cpu["torch "t] > 0)
            printf "eagle / torch, %s thread(s): %.2fx samples/s, %.2fx samples per cpu-second\n",
                   t, wall["eagle "t] / wall["torch "t], cpu["eagle "t] / cpu["torch "t]}' "$out/summary"
