#!/usr/bin/env bash
# Crash safety of checkpoints: `eagle train --save FILE --save-every-epoch` (a model big enough
# that each save takes a while, epochs of a few steps, so the process spends much of its time
# writing) is killed with SIGKILL at a random moment, many times. Each time FILE must either not
# exist yet or be a complete checkpoint: it opens, every tensor reads back, the metadata and the
# optimizer slots are all there — whether read while the writer is still running or after the
# kill. Half-written data may only ever sit in temporary files, never under FILE's name. Then
# the run is resumed from what the final kill left behind. Last, one more save into the
# directories of killed runs: it must remove every temporary file a killed writer left there
# (one of a dead process is planted too, so this is tested even when no kill landed mid-write),
# keep a live process's, and leave a complete checkpoint.
#   test_crash_safety.sh EAGLE_BINARY CRASH_HELPER [TRIALS]
set -uo pipefail
eagle=$1
helper=$2
trials=${3:-30}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

mkdir -p "$tmp/data" && "$helper" data "$tmp/data" 96 || { echo "FAIL cannot write the data set"; exit 1; }

existed=0 live_checks=0 leftovers=0 left_dirs=()
for trial in $(seq 1 "$trials"); do
    dir=$tmp/trial$trial
    mkdir -p "$dir"
    file=$dir/checkpoint.safetensors
    "$eagle" train --data "$tmp/data" --hidden 384,384 --batch-size 32 --epochs 100000 \
        --threads 1 --seed "$trial" --save "$file" --save-every-epoch >"$dir/log" 2>&1 &
    pid=$!
    # Random moments: odd trials from the start (start-up included), even ones from the first
    # save on, so that slow machines (sanitizers, parallel tests) still kill mid-training.
    if ((trial % 2 == 0)); then
        for ((waited = 0; waited < 600; waited++)); do
            [ -e "$file" ] && break
            sleep 0.05
        done
    fi
    sleep "$(printf '0.%03d' $((RANDOM % 500)))"
    if [ -e "$file" ]; then # read while the writer keeps replacing it
        live_checks=$((live_checks + 1))
        "$helper" check "$file" || fail "trial $trial: live read of $file"
    fi
    if ! kill -0 "$pid" 2>/dev/null; then # it should still be training
        wait "$pid"
        fail "trial $trial: eagle train exited by itself ($?): $(tail -3 "$dir/log")"
        continue
    fi
    kill -9 "$pid"
    wait "$pid" 2>/dev/null
    if [ -e "$file" ]; then
        existed=$((existed + 1))
        "$helper" check "$file" || fail "trial $trial: $file after kill -9"
    fi
    if compgen -G "$file.tmp.*" >/dev/null; then
        leftovers=$((leftovers + 1))
        left_dirs+=("$dir")
    fi
    last_dir=$dir
done
echo "$trials kills: checkpoint present after $existed, read live $live_checks times," \
    "killed mid-write (temporary file left) $leftovers times"
# The test only means something when most kills land after the first save.
[ "$existed" -ge $((trials / 2)) ] || fail "only $existed of $trials runs had saved a checkpoint"

# The last killed run continues from its checkpoint.
if [ -n "${last_dir:-}" ] && [ -e "$last_dir/checkpoint.safetensors" ]; then
    epochs=$(($(grep -c '^  test accuracy' "$last_dir/log") + 2)) # beyond the checkpoint's
    out=$("$eagle" train --data "$tmp/data" --epochs "$epochs" --threads 1 \
        --resume "$last_dir/checkpoint.safetensors" --save "$tmp/resumed.safetensors" 2>&1) ||
        fail "resuming the killed run: $(tail -3 <<<"$out")"
    grep -q "^resumed from" <<<"$out" || fail "resume did not say where it continued"
    "$helper" check "$tmp/resumed.safetensors" || fail "checkpoint of the resumed run"
fi
# One more save where kills left temporary files (at most 4 of those, to stay fast), and in the
# last trial's directory with planted ones: a dead process's (a subshell that has exited) must go,
# the live one (this script's pid) must stay.
cleaned=0
if [ -n "${last_dir:-}" ]; then
    (exit 0) &
    dead_pid=$!
    wait "$dead_pid"
    touch "$last_dir/checkpoint.safetensors.tmp.$dead_pid.0" \
        "$last_dir/checkpoint.safetensors.tmp.$$.0"
    for dir in "${left_dirs[@]:0:4}" "$last_dir"; do
        file=$dir/checkpoint.safetensors
        "$eagle" train --data "$tmp/data" --hidden 384,384 --batch-size 32 --epochs 1 \
            --threads 1 --save "$file" >"$dir/log.final" 2>&1 ||
            fail "final save in $dir: $(tail -3 "$dir/log.final")"
        "$helper" check "$file" || fail "$file after the final save"
        for temp in "$file".tmp.*; do
            [ -e "$temp" ] || continue
            [ "$temp" = "$file.tmp.$$.0" ] || fail "left after the final save: $temp"
        done
        cleaned=$((cleaned + 1))
    done
    [ -e "$last_dir/checkpoint.safetensors.tmp.$$.0" ] ||
        fail "the final save removed a live process's temporary file"
    rm -f "$last_dir/checkpoint.safetensors.tmp.$$.0"
fi
echo "one more save in $cleaned directories of killed runs"
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
