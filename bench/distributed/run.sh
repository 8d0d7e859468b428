#!/usr/bin/env bash
# Data-parallel training on the CPU, side by side in one run: Eagle on one process (1 and 2
# threads), on 2 MPI processes (`eagle train --distributed`), mirrored over 2 logical CPU devices
# (`eagle train --replicas 2`), and PyTorch on one process (1 and 2 threads) and under
# DistributedDataParallel (gloo) on 2 processes (torch_ddp.py), for the wide MLP (784-512-512-10)
# and the CNN of `eagle train --model cnn`. The same global batch and the same shuffled order
# everywhere (train.c's shuffle; torch_ddp.py reimplements it), each rank a contiguous slice.
#   bench/distributed/run.sh [--epochs N] [--quick] [--models "mlp cnn"] [--batch-size N]
#                            [--repeat N] [--configs LIST]
#     --epochs N      epochs per run (default 2)
#     --quick         1 epoch on the first 10000 training examples (a smoke test)
#     --models LIST   of mlp, cnn (default "mlp cnn")
#     --batch-size N  the global batch of every run (default 128)
#     --repeat N      runs of each configuration; the report gives the median (default 1)
#     --configs LIST  which runs, of eagle.1x1 eagle.1x2 eagle.2x1 eagle.mirrored2 torch.1x1
#                     torch.2x1 torch.1x2 (default: all); PxT is processes x threads per process
# samples/s counts the training steps only, in global examples per second (as `eagle train`
# prints it). EAGLE=path picks the eagle binary (default build/release/tools/eagle/eagle, built
# when missing); runs needing a flag that binary lacks (--distributed, --replicas) are skipped
# with a note. PyTorch runs with OMP_WAIT_POLICY=PASSIVE (its OpenMP threads otherwise spin on a
# loaded machine). Logs go to bench/out/distributed/<time>/.
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/../.."
epochs=2 limit=0 models="mlp cnn" batch=128 repeat=1
all_configs="eagle.1x1 eagle.1x2 eagle.2x1 eagle.mirrored2 torch.1x1 torch.2x1 torch.1x2"
configs=$all_configs
while [ $# -gt 0 ]; do
  case $1 in
    --epochs) epochs=$2; shift 2 ;;
    --quick) epochs=1 limit=10000; shift ;;
    --models) models=$2; shift 2 ;;
    --batch-size) batch=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    -h|--help) sed -n '2,21p' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
for m in $models; do
  case $m in mlp|cnn) ;; *) echo "run.sh: unknown model '$m' (mlp, cnn)" >&2; exit 2 ;; esac
done
for c in ${configs//,/ }; do
  case " $all_configs " in *" $c "*) ;;
    *) echo "run.sh: unknown configuration '$c' (of $all_configs)" >&2; exit 2 ;;
  esac
done
[ -x bench/.venv/bin/python ] || ./bench/setup.sh
eagle=${EAGLE:-build/release/tools/eagle/eagle}
if [ -z "${EAGLE:-}" ] && [ ! -x "$eagle" ]; then
  cmake --preset release >/dev/null
  cmake --build --preset release --target eagle
fi
help=$("$eagle" train --help 2>&1 || true)
has_flag() { grep -q -- "$1" <<<"$help"; }
out=bench/out/distributed/$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
py=bench/.venv/bin/python
# Open MPI's shared-memory transport moves large messages with one copy (cross-memory attach)
# where the kernel allows it, and falls back to two (printing a warning) where a container
# forbids it; the tests silence that warning with single_copy_mechanism=none, the bench keeps the
# faster default (EG_BENCH_MPI_ARGS adds mpirun arguments, e.g. "--mca
# btl_vader_single_copy_mechanism none" to measure the two-copy path).
# shellcheck disable=SC2206 # word splitting of the extra arguments is intended
mpi=(mpirun -np 2 --oversubscribe --allow-run-as-root ${EG_BENCH_MPI_ARGS:-})
common=(--epochs "$epochs" --batch-size "$batch" --seed 42)
[ "$limit" -gt 0 ] && common+=(--limit "$limit")
{
  echo "epochs $epochs, global batch $batch$([ "$limit" -gt 0 ] && echo ", first $limit training examples"), $repeat run(s) each"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) core(s)"
  echo "mpirun: ${mpi[*]}"
} >"$out/about"
for model in $models; do
  margs=(--model "$model")
  [ "$model" = mlp ] && margs+=(--hidden 512,512)
  for config in ${configs//,/ }; do
    case $config in
      eagle.1x1) cmd=("$eagle" train "${margs[@]}" --threads 1) ;;
      eagle.1x2) cmd=("$eagle" train "${margs[@]}" --threads 2) ;;
      eagle.2x1) cmd=("${mpi[@]}" "$eagle" train --distributed "${margs[@]}" --threads 1) ;;
      eagle.mirrored2) cmd=("$eagle" train --replicas 2 "${margs[@]}" --threads 1) ;;
      torch.1x1) cmd=("$py" bench/distributed/torch_ddp.py "${margs[@]}" --processes 1 --threads 1) ;;
      torch.2x1) cmd=("$py" bench/distributed/torch_ddp.py "${margs[@]}" --processes 2 --threads 1) ;;
      torch.1x2) cmd=("$py" bench/distributed/torch_ddp.py "${margs[@]}" --processes 1 --threads 2) ;;
    esac
    case $config in
      eagle.2x1) need=--distributed ;;
      eagle.mirrored2) need=--replicas ;;
      *) need= ;;
    esac
    if [ -n "$need" ] && ! has_flag "$need"; then
      echo "run.sh: $eagle has no 'train $need': $config skipped" >&2
      continue
    fi
    for r in $(seq 1 "$repeat"); do
      log=$out/$config.$model.$r.log
      echo "run.sh: $model, $config, run $r of $repeat" >&2
      env OMP_WAIT_POLICY=PASSIVE "${cmd[@]}" "${common[@]}" >"$log" 2>&1 ||
        echo "run.sh: $config ($model) failed, see $log" >&2
    done
  done
done
echo "logs in $out"
"$py" bench/distributed/report.py "$out"
