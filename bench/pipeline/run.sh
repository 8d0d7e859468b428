#!/usr/bin/env bash
# The input pipeline: Eagle's AUTOTUNE against fixed parallelism and against tf.data and the
# PyTorch DataLoader on the same synthetic pipeline (a map doing ~200 us of CPU work per element),
# side by side; then the seed model trained with the pipeline feeding batches, and the share of the
# step loop spent waiting for data. Medians (the machine may be shared: single runs are noisy).
#   bench/pipeline/run.sh [--elements N] [--rounds R] [--work-us US] [--epochs E] [--limit N]
#                         [--no-peers] [--no-train]
set -euo pipefail
self=$(realpath "$0")
cd "$(dirname "$0")/../.."
elements=2000 rounds=5 work=200 epochs=3 limit=0 peers=1 train=1
while [ $# -gt 0 ]; do
  case $1 in
    --elements) elements=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --work-us) work=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --limit) limit=$2; shift 2 ;;
    --no-peers) peers=0; shift ;;
    --no-train) train=0; shift ;;
    -h|--help) sed -n '2,7p' "$self" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
./bench/setup.sh
bin=./build/release/bench/bench_pipeline
py=bench/.venv/bin/python

results=$(mktemp)
trap 'rm -f "$results"' EXIT
"$bin" synthetic "$elements" "$rounds" "$work" | tee -a "$results" | grep '^#'
if [ "$peers" = 1 ]; then
  "$py" bench/pipeline/tf_pipeline.py "$elements" "$rounds" "$work" 2>/dev/null |
    tee -a "$results" | grep '^#'
  "$py" bench/pipeline/torch_pipeline.py "$elements" "$rounds" "$work" 2>/dev/null |
    tee -a "$results" | grep '^#'
fi
python3 - "$results" <<'EOF'
import sys
rows = []
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.strip():
        continue
    parts = line.split()
    # "name words... rate [chosen]": the rate is the first number after the name.
    numbers = [i for i, p in enumerate(parts) if p.replace(".", "", 1).isdigit()]
    i = numbers[-2] if parts[0] == "eagle" else numbers[-1]
    rows.append((" ".join(parts[:i]), float(parts[i]), parts[i + 1] if parts[0] == "eagle" else ""))
eagle = {name: rate for name, rate, _ in rows if name.startswith("eagle")}
auto = eagle.get("eagle AUTOTUNE", 0)
best = max(rate for name, rate in eagle.items() if name.startswith("eagle fixed"))
print(f"\n{'pipeline':<34} {'elements/s':>11} {'vs eagle AUTOTUNE':>18} {'chosen':>7}")
for name, rate, chosen in rows:
    print(f"{name:<34} {rate:11.0f} {rate / auto if auto else 0:17.2f}x {chosen:>7}")
print(f"\nAUTOTUNE / best fixed Eagle parallelism: {auto / best:.2f} (goal >= 0.90)")
EOF
if [ "$train" = 1 ]; then
  echo
  "$bin" train "$epochs" "$limit" 2>/dev/null >"$results"
  python3 - "$results" <<'EOF'
import sys
for line in open(sys.argv[1]):
    if line.startswith("#"):
        print(line.strip())
        print("%-20s %10s %14s %9s" % ("batches made", "samples/s", "time on data", "starved"))
        continue
    name, rate, wait, starved = line.rsplit(None, 3)
    print("%-20s %10.0f %13.1f%% %8.1f%%" % (name, float(rate), 100 * float(wait),
                                           100 * float(starved)))
print("(time on data: making batches inline, or wall time in eg_dataset_iterator_next, which on a")
print(" loaded machine includes being descheduled; starved: blocked on an empty prefetch buffer.")
print(" Goal: the pipeline waits <= 5% of the step loop.)")
EOF
fi
