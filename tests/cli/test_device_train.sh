#!/usr/bin/env bash
# `eagle train --device` end to end without a GPU: with EG_CPU_DEVICES=2 EG_CPU_DEVICES_OPAQUE=1,
# cpu:1 is a device whose memory the host may not touch (as a GPU's), computed on by the CPU's
# kernels. Training there in each mode, the CNN, a checkpoint saved from it and resumed onto it,
# and eval must print exactly what the same runs on the host print: every staging copy and
# read-back a GPU needs is taken, and none may change a bit.
#   test_device_train.sh EAGLE_BINARY
set -uo pipefail
eagle=$1
export EG_CPU_DEVICES=2 EG_CPU_DEVICES_OPAQUE=1
failures=0
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
results() { # the test accuracy and loss lines of: eagle train ARGS...
    "$eagle" train "$@" 2>&1 | grep -E 'test accuracy|error|cannot' || echo "no result"
}
same() { # name, host result, device result
    if [ "$2" = "$3" ] && ! grep -q "no result\|error\|cannot" <<<"$2"; then
        echo "ok   $1"
    else
        echo "FAIL $1: host '$2', cpu:1 '$3'"
        failures=$((failures + 1))
    fi
}
mlp=(--limit 2000 --test-limit 500 --epochs 2 --seed 5)
host=$(results "${mlp[@]}")
for mode in eager lazy graph; do
    same "mlp $mode on cpu:1" "$host" "$(results "${mlp[@]}" --mode "$mode" --device cpu:1)"
done
cnn=(--model cnn --limit 300 --test-limit 100 --epochs 1 --seed 5)
host_cnn=$(results "${cnn[@]}")
same "cnn eager on cpu:1" "$host_cnn" "$(results "${cnn[@]}" --device cpu:1)"
same "cnn graph on cpu:1" "$host_cnn" "$(results "${cnn[@]}" --mode graph --device cpu:1)"
first=$(results "${mlp[@]}" --device cpu:1 --stop-after 1 --save "$dir/run.safetensors")
second=$(results "${mlp[@]}" --device cpu:1 --resume "$dir/run.safetensors")
same "saved on cpu:1, resumed onto cpu:1" "$host" "$(printf '%s\n%s' "$first" "$second")"
out=$("$eagle" eval "$dir/run.safetensors" --limit 500 2>&1)
grep -q "test accuracy $(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' <<<"$first")" <<<"$out" &&
    echo "ok   eval of the checkpoint" || { echo "FAIL eval: $out"; failures=$((failures + 1)); }
[ "$failures" -eq 0 ]
