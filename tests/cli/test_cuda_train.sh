#!/usr/bin/env bash
# Training on the GPU (label cuda; EAGLE_DATA=DIR reads Fashion-MNIST from DIR): `eagle train --device cuda` for the MLP in all three modes and
# for the CNN reaches the CPU's test accuracy on the same Fashion-MNIST subset (within 1.5
# points: the GPU sums in other orders, so the runs are not bit-identical). Exits 77 (skipped)
# where no GPU is usable; a missing GPU in a CUDA build must also be a clear error, exit 1.
#   test_cuda_train.sh EAGLE_BINARY
set -uo pipefail
eagle=$1
if ! "$eagle" info | grep -q '^  cuda:0 '; then
    out=$("$eagle" train --device cuda:0 2>&1)
    rc=$?
    if [ "$rc" -ne 1 ] || ! grep -q "no device 'cuda:0'" <<<"$out"; then
        echo "FAIL without a GPU, --device cuda:0 should exit 1 naming the device: exit $rc: $out"
        exit 1
    fi
    echo "skipped: no usable GPU ($("$eagle" info | grep '^CUDA:'))"
    exit 77
fi
failures=0
data=()
[ -n "${EAGLE_DATA:-}" ] && data=(--data "$EAGLE_DATA") # scripts/gpu-check.sh: a carried subset
# (tee -a: the log is stderr's file, which a plain tee would truncate at each run)
accuracy() { # the last epoch's test accuracy of: eagle train ARGS...
    "$eagle" train "${data[@]}" "$@" 2>&1 | tee -a /dev/stderr | sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' | tail -1
}
# The CNN's batch norm statistics are far from settled after one epoch of 4000 images (test
# accuracy about 0.1 on the CPU too), so its runs compare the epoch's training accuracy.
train_accuracy() { # the last epoch's training accuracy of: eagle train ARGS...
    "$eagle" train "${data[@]}" "$@" 2>&1 | tee -a /dev/stderr |
        sed -n 's/.*samples in .* accuracy \([0-9.]*\).*/\1/p' | tail -1
}
close() { # name, reference, value
    if [ -z "$3" ] || ! awk -v a="$2" -v b="$3" 'BEGIN { d = a - b; exit !(d < 0.015 && d > -0.015) }'; then
        echo "FAIL $1: accuracy '$3' on the GPU, '$2' on the CPU"
        failures=$((failures + 1))
    else
        echo "ok   $1: $3 on the GPU, $2 on the CPU"
    fi
}
mlp=(--limit 10000 --test-limit 2000 --epochs 2 --seed 3)
cpu=$(accuracy "${mlp[@]}")
for mode in eager lazy graph; do
    close "mlp $mode" "$cpu" "$(accuracy "${mlp[@]}" --mode "$mode" --device cuda)"
done
cnn=(--model cnn --limit 4000 --test-limit 1000 --epochs 1 --seed 3)
cpu=$(train_accuracy "${cnn[@]}")
for mode in eager graph; do
    close "cnn $mode" "$cpu" "$(train_accuracy "${cnn[@]}" --mode "$mode" --device cuda)"
done
[ "$failures" -eq 0 ]
