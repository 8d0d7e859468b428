#!/usr/bin/env bash
# CLI tests: usage errors exit 2 with a usage message, a missing data set names the Debian
# package, --help works everywhere, a short training run on a Fashion-MNIST subset converges
# to a stated accuracy and is deterministic for a seed (two runs print identical numbers), a run
# resumed from its epoch-1 checkpoint (--resume) is exactly the uninterrupted run (with --augment
# too), and what --resume and eval read is checked first (settings, data, hostile metadata).
# Ctrl-C and lost outputs: test_cli_interrupt.sh.
#   test_cli.sh EAGLE_BINARY
set -uo pipefail
eagle=$1
here=$(cd "$(dirname "$0")" && pwd)
failures=0
check() { # description, command...
    local description=$1
    shift
    if "$@"; then echo "ok   $description"; else echo "FAIL $description"; failures=$((failures + 1)); fi
}
expect_exit() { # code, command... (output captured in $out)
    local code=$1
    shift
    out=$("$@" 2>&1)
    local rc=$?
    [ "$rc" -eq "$code" ] || { echo "  exit $rc, expected $code: $out"; return 1; }
}

check "no command -> 2" expect_exit 2 "$eagle"
check "unknown command -> 2" expect_exit 2 "$eagle" frobnicate
check "unknown flag -> 2 with usage hint" \
    bash -c 'out=$("$0" train --frobnicate 2>&1); [ $? -eq 2 ] && grep -q "eagle train --help" <<<"$out"' "$eagle"
check "--epochs without its value -> 2, saying so" \
    bash -c 'out=$("$0" train --epochs 2>&1); [ $? -eq 2 ] && grep -q -- "--epochs needs a value" <<<"$out"' "$eagle"
check "eval --threads without its value -> 2, saying so" \
    bash -c 'out=$("$0" eval --threads 2>&1); [ $? -eq 2 ] && grep -q -- "--threads needs a value" <<<"$out"' "$eagle"
check "bad number -> 2" bash -c 'out=$("$0" train --epochs zero 2>&1); [ $? -eq 2 ] && grep -q -- "--epochs" <<<"$out"' "$eagle"
check "bad hidden list -> 2" expect_exit 2 "$eagle" train --hidden 64,,3
check "bad optimizer -> 2" expect_exit 2 "$eagle" train --optimizer lbfgs
check "bad mode -> 2" expect_exit 2 "$eagle" train --mode turbo
check "bad model -> 2" expect_exit 2 "$eagle" train --model resnet
check "bad precision -> 2" expect_exit 2 "$eagle" train --precision float16
check "... naming the policies" grep -q "mixed_bfloat16" <<<"$out"
check "train --approx int8 -> 2, naming sample:F" \
    bash -c 'out=$("$0" train --approx int8 2>&1); [ $? -eq 2 ] && grep -q "sample:F" <<<"$out"' "$eagle"
check "--model cnn with --hidden -> 2" expect_exit 2 "$eagle" train --model cnn --hidden 64
check "bench without a name -> 2" expect_exit 2 "$eagle" bench
check "eval without file -> 2" expect_exit 2 "$eagle" eval
check "info extra arg -> 2" expect_exit 2 "$eagle" info extra
for command in train eval info quantize; do
    check "$command --help -> 0" bash -c 'out=$("$0" '"$command"' --help); [ $? -eq 0 ] && grep -q "usage: eagle" <<<"$out"' "$eagle"
done
check "--help -> 0" expect_exit 0 "$eagle" --help
check "info prints version and BLAS" bash -c 'out=$("$0" info); grep -q "^eagle [0-9]" <<<"$out" && grep -q "BLAS:" <<<"$out"' "$eagle"
# The CPU path: EG_CPU=baseline forces the baseline on any machine, and an unknown value is the
# baseline too (a typo must not pick an untested path); unforced, it is one of the three.
check "info names the CPU path" \
    bash -c 'out=$("$0" info); grep -Eq "^CPU path: +(baseline|avx2|avx512) \(" <<<"$out"' "$eagle"
check "EG_CPU=baseline forces the baseline path" \
    bash -c 'out=$(EG_CPU=baseline "$0" info); grep -q "^CPU path: *baseline (" <<<"$out"' "$eagle"
check "an unknown EG_CPU value is the baseline" \
    bash -c 'out=$(EG_CPU=avx9000 "$0" info); grep -q "^CPU path: *baseline (" <<<"$out"' "$eagle"
# eagle info --ops: the op x device x dtype table. The matmul row has an x in the column that the
# header names f32 (the first device's); with EG_CPU_DEVICES=2 both devices head a column group.
ops_matmul_f32() {
    local out header row column
    out=$("$eagle" info --ops) || return 1
    header=$(grep -m1 ' f32 ' <<<"$out") || return 1
    row=$(grep -m1 '^matmul ' <<<"$out") || return 1
    column=$(awk -v h="$header" 'BEGIN { print index(h, " f32 ") }') # 1-based, the blank before f32
    [ "${row:column:1}" = x ] || { echo "  matmul row '$row' has no x under f32"; return 1; }
}
check "info --ops -> 0 with an x for matmul under f32" ops_matmul_f32
check "info --ops with EG_CPU_DEVICES=2 shows cpu:0 and cpu:1" \
    bash -c 'out=$(EG_CPU_DEVICES=2 "$0" info --ops); [ $? -eq 0 ] && grep -q "^op .*| cpu:0 .*| cpu:1" <<<"$out"' "$eagle"
check "info with EG_CPU_DEVICES=2 lists both devices" \
    bash -c 'out=$(EG_CPU_DEVICES=2 "$0" info); grep -q "^devices: *cpu:0, cpu:1$" <<<"$out"' "$eagle"
check "EG_VISIBLE_DEVICES hides cpu:1 of three" \
    bash -c 'out=$(EG_CPU_DEVICES=3 EG_VISIBLE_DEVICES=cpu:0,cpu:2 "$0" info); grep -q "^devices: *cpu:0, cpu:2$" <<<"$out"' "$eagle"
check "an unusable EG_VISIBLE_DEVICES (no host) is ignored, with a warning" \
    bash -c 'out=$(EG_CPU_DEVICES=2 EG_VISIBLE_DEVICES=cpu:1 "$0" info); grep -q "^devices: *cpu:0, cpu:1$" <<<"$out" && grep -q "^warning: .*EG_VISIBLE_DEVICES=.cpu:1. leaves out cpu:0" <<<"$out"' "$eagle"
check "an unusable EG_CPU_DEVICES leaves one device, with a warning" \
    bash -c 'out=$(EG_CPU_DEVICES=many "$0" info); grep -q "^devices: *cpu$" <<<"$out" && grep -q "^warning: .*EG_CPU_DEVICES=.many. is not a count" <<<"$out"' "$eagle"
check "info --help mentions --ops" bash -c '"$0" info --help | grep -q -- "--ops"' "$eagle"
check "missing data set -> 1 naming the package" \
    bash -c 'out=$("$0" train --data /nonexistent/fashion 2>&1); [ $? -eq 1 ] && grep -q "dataset-fashion-mnist" <<<"$out"' "$eagle"
check "eval of a missing file -> 1" expect_exit 1 "$eagle" eval /nonexistent/w.safetensors
check "--save-every-epoch without --save -> 2" expect_exit 2 "$eagle" train --save-every-epoch
check "--resume of a missing file -> 1" expect_exit 1 "$eagle" train --resume /nonexistent/c.safetensors
# --hidden's mistakes are named: a trailing comma is no size, nine layers are one too many.
hidden_error() { # list, what the message must say
    out=$("$eagle" train --data /nonexistent/fashion --hidden "$1" 2>&1) # no training if accepted
    local rc=$?
    [ "$rc" -eq 2 ] && grep -q -- "$2" <<<"$out" || { echo "  exit $rc: $out"; return 1; }
}
check "--hidden 64, (trailing comma) -> 2, saying so" hidden_error 64, "missing after the last ','"
check "--hidden with 9 layers -> 2, naming the limit" hidden_error 1,2,3,4,5,6,7,8,9 "9 hidden layers, at most 8"
check "--hidden 64x -> 2, naming the character" hidden_error 64x "'x' at position 3"
check "--hidden ' 64' -> 2" hidden_error " 64" "position 1"
# Output paths are checked before anything else (here before the missing data set would be
# noticed), so a run cannot end with its result unwritable; exit 1 like an unusable --logdir.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
touch "$tmp/regular"
output_error() { # flag, path, what the message must say
    out=$("$eagle" train --data /nonexistent/fashion "$1" "$2" 2>&1)
    local rc=$?
    [ "$rc" -eq 1 ] && grep -q -- "$1 '$2': .*$3.*the run was not started" <<<"$out" &&
        ! grep -q "data directory" <<<"$out" || { echo "  exit $rc: $out"; return 1; }
}
check "--save under a missing directory -> 1 before any work" \
    output_error --save /nonexistent/dir/w.safetensors "No such file or directory"
check "--save under a regular file -> 1" output_error --save "$tmp/regular/w.safetensors" "is not a directory"
check "--save naming a directory -> 1" output_error --save "$tmp" "is a directory"
check "--profile under a missing directory -> 1" output_error --profile /nonexistent/dir/trace.json "No such file"
check "--save in an existing directory leaves no probe file behind" \
    bash -c '"$0" train --data /nonexistent/fashion --save "$1/w.safetensors" >/dev/null 2>&1; [ -z "$(ls -A "$1" | grep -v regular)" ]' "$eagle" "$tmp"
# A data error is printed once, not once by the loader and again by the command.
check "missing data set: the error printed once" \
    bash -c 'out=$("$0" train --data /nonexistent/fashion 2>&1); [ "$(grep -c "data directory not found" <<<"$out")" -eq 1 ]' "$eagle"
check "... without a call site of the CLI's own" \
    bash -c 'out=$("$0" train --data /nonexistent/fashion 2>&1); ! grep -qE " at [a-z_]+\.c:[0-9]+" <<<"$out"' "$eagle"

data=/usr/share/datasets/fashion-mnist
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
    run() { "$eagle" train --limit 6000 --epochs 2 --seed 7 --threads "$1" --save "$tmp/w$1.safetensors" 2>&1; }
    first=$(run 1)
    second=$(run 2)
    # The 6000-example, 2-epoch run of the seed model reaches about 80% on the test split.
    accuracy=$(grep "test accuracy" <<<"$first" | tail -1 | awk '{print $3}')
    check "subset training converges: test accuracy $accuracy >= 0.78" \
        python3 -c "import sys; sys.exit(0 if float('$accuracy') >= 0.78 else 1)"
    # Deterministic: same seed, 1 vs 2 threads -> identical losses and accuracies (timings
    # removed; the comparison must see real lines, so an empty log fails).
    numbers_of() { grep -E "loss|accuracy" <<<"$1" | grep -v "^eagle " | sed -E 's/[0-9.]+ samples\/s//g; s/in [0-9.]+ s//g; s/ETA [0-9:]+//g'; }
    first_numbers=$(numbers_of "$first")
    second_numbers=$(numbers_of "$second")
    same_log() { [ "$(wc -l <<<"$first_numbers")" -ge 4 ] && [ "$first_numbers" = "$second_numbers" ]; }
    check "same seed, 1 vs 2 threads: identical training log" same_log
    # Eager, lazy and graph mode compute the same bits: identical logs.
    mode_numbers() { numbers_of "$("$eagle" train --limit 3000 --epochs 1 --seed 5 --mode "$1" 2>&1)"; }
    eager_numbers=$(mode_numbers eager)
    same_as_eager() { local other; other=$(mode_numbers "$1"); [ "$(wc -l <<<"$eager_numbers")" -ge 4 ] && [ "$other" = "$eager_numbers" ]; }
    check "--mode lazy gives eager's training log" same_as_eager lazy
    # --logdir writes a TensorBoard event file; --profile a Chrome trace that parses as JSON.
    logged_run() { "$eagle" train --limit 1000 --epochs 1 --logdir "$tmp/logs" --profile "$tmp/trace.json" >/dev/null 2>&1; }
    check "--logdir and --profile run" logged_run
    check "--logdir wrote an event file" bash -c 'ls "$0"/logs/events.out.tfevents.* >/dev/null 2>&1' "$tmp"
    check "--profile wrote a JSON trace with op spans" \
        python3 -c 'import json,sys; t=json.load(open(sys.argv[1])); assert any(e.get("ph")=="X" and e.get("name")=="matmul" for e in t["traceEvents"])' "$tmp/trace.json"
    check "--mode graph gives eager's training log" same_as_eager graph
    cpu_profile() { "$eagle" profile --steps 5 --threads 1 --cpu-time | grep -q "CPU time of the calling thread"; }
    check "eagle profile --cpu-time reports thread CPU time" cpu_profile
    check "--profile-cpu-time without --profile -> 2" expect_exit 2 "$eagle" train --profile-cpu-time
    check "... saying it needs --profile" grep -q "needs --profile FILE" <<<"$out"
    check "eval of the saved weights reproduces the test accuracy" \
        bash -c 'out=$("$0" eval "$1"); grep -q "test accuracy $2" <<<"$out"' "$eagle" "$tmp/w1.safetensors" "$accuracy"

    # --resume: 1 epoch saved, then resumed up to 2, must equal 2 epochs straight: the same
    # epoch-2 log and byte-identical final checkpoints (weights, optimizer slots, metadata).
    train3000() { "$eagle" train --limit 3000 --seed 7 --threads 2 "$@" 2>&1; }
    straight=$(train3000 --epochs 2 --save "$tmp/straight.safetensors")
    train3000 --epochs 1 --save "$tmp/half.safetensors" --save-every-epoch >/dev/null
    cp "$tmp/half.safetensors" "$tmp/half-kept.safetensors"
    resumed=$("$eagle" train --limit 3000 --threads 2 --epochs 2 --resume "$tmp/half.safetensors" \
        --save "$tmp/resumed.safetensors" 2>&1)
    epoch2_of() { sed -n '/^Epoch 2\/2/,$p' <<<"$1" | grep -E "loss|accuracy" | sed -E 's/[0-9.]+ samples\/s//g; s/in [0-9.]+ s//g; s/ETA [0-9:]+//g'; }
    straight_epoch2=$(epoch2_of "$straight")
    resumed_epoch2=$(epoch2_of "$resumed")
    same_resume() { [ "$(wc -l <<<"$straight_epoch2")" -ge 3 ] && [ "$straight_epoch2" = "$resumed_epoch2" ]; }
    check "--resume after epoch 1: epoch 2 identical to the uninterrupted run" same_resume
    check "--resume: final checkpoint byte-identical to the uninterrupted run's" \
        cmp "$tmp/straight.safetensors" "$tmp/resumed.safetensors"
    check "--resume says where it continues" grep -q "resumed from .* after epoch 1 (94 steps)" <<<"$resumed"
    check "--resume with a different --hidden -> 2" \
        expect_exit 2 "$eagle" train --limit 3000 --hidden 32 --resume "$tmp/half-kept.safetensors"
    check "--resume with a different --limit -> 1" \
        expect_exit 1 "$eagle" train --limit 2000 --resume "$tmp/half-kept.safetensors"
    check "eval: a data error printed once" \
        bash -c 'out=$("$0" eval --data /nonexistent/fashion "$1" 2>&1); [ $? -eq 1 ] && [ "$(grep -c "data directory not found" <<<"$out")" -eq 1 ]' \
        "$eagle" "$tmp/half-kept.safetensors"

    # --augment is part of the run: recorded, taken from the checkpoint by --resume (here not
    # given again), and the flips and crops of a resumed epoch are the uninterrupted run's (their
    # randomness follows the run's epoch, not the pipeline's count of passes, which restarts).
    aug_straight=$(train3000 --augment --epochs 2 --save "$tmp/aug-straight.safetensors")
    train3000 --augment --epochs 2 --stop-after 1 --save "$tmp/aug-half.safetensors" >/dev/null
    aug_resumed=$("$eagle" train --limit 3000 --threads 2 --resume "$tmp/aug-half.safetensors" \
        --save "$tmp/aug-resumed.safetensors" 2>&1)
    check "--augment: --resume without the flag continues augmented (it is recorded)" \
        grep -q "random flips and crops" <<<"$aug_resumed"
    check "--augment: --resume after epoch 1: epoch 2 identical to the uninterrupted run" \
        bash -c '[ "$(wc -l <<<"$1")" -ge 3 ] && [ "$1" = "$2" ]' _ "$(epoch2_of "$aug_straight")" "$(epoch2_of "$aug_resumed")"
    check "--augment: --resume gives the uninterrupted run's checkpoint, byte for byte" \
        cmp "$tmp/aug-straight.safetensors" "$tmp/aug-resumed.safetensors"
    check "--augment on resuming a run trained without it -> 2" \
        expect_exit 2 "$eagle" train --limit 3000 --augment --resume "$tmp/half-kept.safetensors"
    check "... naming --augment" grep -q -- "--augment differs" <<<"$out"
    # The training examples themselves are checked, not only their number: the same count of
    # other examples (one label changed) is another run.
    mkdir -p "$tmp/other-data"
    for f in train-images-idx3-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
        ln -s "$data/$f" "$tmp/other-data/$f"
    done
    python3 -c 'import gzip,sys; b=bytearray(gzip.open(sys.argv[1]).read()); b[8]=(b[8]+1)%10; open(sys.argv[2],"wb").write(b)' \
        "$data/train-labels-idx1-ubyte.gz" "$tmp/other-data/train-labels-idx1-ubyte"
    check "--resume on other examples (same --limit) -> 1" \
        expect_exit 1 "$eagle" train --limit 3000 --data "$tmp/other-data" --resume "$tmp/half-kept.safetensors"
    check "... saying so" grep -q "trained on other examples" <<<"$out"

    # A checkpoint whose metadata asks for a huge model (eagle.hidden=1048576: 6.4 GB) is refused
    # from its header's shapes before anything is built: fast, in little memory.
    python3 - "$tmp/half-kept.safetensors" "$tmp/hostile.safetensors" <<'PY'
import json, struct, sys
b = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', b[:8])[0]
header = json.loads(b[8:8 + n])
header['__metadata__']['eagle.hidden'] = '1048576'
text = json.dumps(header).encode()
text += b' ' * (-len(text) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(text)) + text + b[8 + n:])
PY
    hostile() { # command...: exit 1 naming the mismatch (a memory limit keeps a failure cheap)
        out=$(EG_MEMORY_LIMIT=512M "$@" 2>&1)
        local rc=$?
        [ "$rc" -eq 1 ] && grep -q "do not match eagle.hidden = 1048576: tensor 'dense/kernel' is f32 (784, 64)" <<<"$out" ||
            { echo "  exit $rc: $out"; return 1; }
    }
    check "eval of a checkpoint whose eagle.hidden its tensors do not fit -> 1 before building" \
        hostile "$eagle" eval --limit 100 "$tmp/hostile.safetensors"
    check "--resume of that checkpoint -> 1 before building" \
        hostile "$eagle" train --limit 3000 --resume "$tmp/hostile.safetensors"

    printf '\x08\x00\x00\x00\x00\x00\x00\x00{}      ' >"$tmp/plain.safetensors" # no tensors, no metadata
    check "--resume of a file without training state -> 1" \
        bash -c 'out=$("$0" train --limit 3000 --resume "$1" 2>&1); [ $? -eq 1 ] && grep -q "cannot be resumed" <<<"$out"' \
        "$eagle" "$tmp/plain.safetensors"

    # The CNN: lazy mode gives eager's log (dropout included); --resume continues exactly (batch
    # normalization's moving statistics, the cosine schedule and the dropout masks too); eval
    # reads all of it back.
    cnn() { "$eagle" train --model cnn --limit 192 --test-limit 300 --seed 3 --threads 2 "$@" 2>&1; }
    cnn_straight=$(cnn --epochs 2 --save "$tmp/cnn-straight.safetensors")
    cnn --epochs 2 --stop-after 1 --save "$tmp/cnn-half.safetensors" >/dev/null
    cnn_resumed=$(cnn --resume "$tmp/cnn-half.safetensors" --save "$tmp/cnn-resumed.safetensors")
    check "cnn: --resume gives the uninterrupted run's checkpoint, byte for byte" \
        cmp "$tmp/cnn-straight.safetensors" "$tmp/cnn-resumed.safetensors"
    cnn_epoch2() { epoch2_of "$cnn_straight"; }
    check "cnn: --resume after epoch 1: epoch 2 identical" \
        bash -c '[ "$(wc -l <<<"$1")" -ge 3 ] && [ "$1" = "$2" ]' _ "$(epoch2_of "$cnn_straight")" "$(epoch2_of "$cnn_resumed")"
    # The same with --augment: the CNN's flips and crops of epoch 2 are the uninterrupted run's.
    cnn --augment --epochs 2 --save "$tmp/cnn-aug-straight.safetensors" >/dev/null
    cnn --augment --epochs 2 --stop-after 1 --save "$tmp/cnn-aug-half.safetensors" >/dev/null
    cnn --resume "$tmp/cnn-aug-half.safetensors" --save "$tmp/cnn-aug-resumed.safetensors" >/dev/null
    check "cnn --augment: --resume gives the uninterrupted run's checkpoint, byte for byte" \
        cmp "$tmp/cnn-aug-straight.safetensors" "$tmp/cnn-aug-resumed.safetensors"
    cnn_accuracy=$(grep "test accuracy" <<<"$cnn_straight" | tail -1 | awk '{print $3}')
    check "cnn: eval of the checkpoint reproduces the test accuracy $cnn_accuracy" \
        bash -c 'out=$("$0" eval --limit 300 "$1"); grep -q "test accuracy $2" <<<"$out"' "$eagle" "$tmp/cnn-straight.safetensors" "$cnn_accuracy"
    check "cnn: eval --approx int8 compares 5 int8 layers (the first convolution stays f32)" \
        bash -c 'out=$("$0" eval --limit 300 --approx int8 "$1"); grep -q "test accuracy $2" <<<"$out" && grep -q "^int8 (5 layers" <<<"$out" && [ "$(grep -c " Conv2D " <<<"$out")" -eq 3 ]' "$eagle" "$tmp/cnn-straight.safetensors" "$cnn_accuracy"
    check "eval --approx with an unknown policy -> 2" expect_exit 2 "$eagle" eval --approx lowrank "$tmp/cnn-straight.safetensors"
    check "cnn: eval --approx lowrank:16 factorizes the one Dense layer it makes smaller" \
        bash -c 'out=$("$0" eval --limit 300 --approx lowrank:16 "$1"); grep -q "^lowrank (rank 16, 1 Dense layer, no fine-tuning): 123434 parameters against 871978 " <<<"$out"' \
        "$eagle" "$tmp/cnn-straight.safetensors"
    check "eval --approx lowrank:1.5 -> 2" expect_exit 2 "$eagle" eval --approx lowrank:1.5 "$tmp/cnn-straight.safetensors"
    check "cnn: eval --approx budget:0 keeps all 6 layers exact, the accuracy too" \
        bash -c 'out=$("$0" eval --limit 300 --approx budget:0 "$1"); [ "$(grep -cE "^(conv2d|dense)[_0-9]* +exact " <<<"$out")" -eq 6 ] && grep -q "^chosen: 871978 parameters, test accuracy $2 (+0.0000)" <<<"$out"' \
        "$eagle" "$tmp/cnn-straight.safetensors" "$cnn_accuracy"
    check "cnn: eval --approx budget:0.05 holds every chosen layer within 5 %" \
        bash -c 'out=$("$0" eval --limit 300 --approx budget:0.05 "$1"); [ "$(grep -cE "^(conv2d|dense)[_0-9]* " <<<"$out")" -eq 6 ] && awk "/^(conv2d|dense)/ { if (\$3 > 0.05) bad = 1 } END { exit bad }" <<<"$out"' \
        "$eagle" "$tmp/cnn-straight.safetensors"
    check "train --approx sample:0.5: the 64-unit Dense layer samples; the shadow check prints its error" \
        bash -c 'out=$("$0" train --limit 1000 --test-limit 300 --epochs 1 --approx sample:0.5 2>&1); grep -q "^approx: sample:0.5 on 1 Dense layer " <<<"$out" && grep -qE "^    dense +kernel gradient: relative error [0-9.]+" <<<"$out"' \
        "$eagle"
    check "eval --approx budget:-1 -> 2" expect_exit 2 "$eagle" eval --approx budget:-1 "$tmp/cnn-straight.safetensors"
    # Post-training quantization: an int8 checkpoint another program reads, which eval runs with
    # the int8 products (the accuracy --approx int8 gave: the same snapshots).
    cnn_int8_accuracy=$("$eagle" eval --limit 300 --approx int8 "$tmp/cnn-straight.safetensors" |
        sed -n 's/^int8 .*test accuracy \([0-9.]*\).*/\1/p')
    check "quantize: the CNN's 5 larger layers in int8" \
        bash -c 'out=$("$0" quantize --checkpoint "$1" --out "$2"); grep -q ": 5 of the model" <<<"$out"' \
        "$eagle" "$tmp/cnn-straight.safetensors" "$tmp/cnn-int8.safetensors"
    check "quantize: Python reads its I8 kernels and scales (within half a step of f32)" \
        python3 "$here/read_int8_checkpoint.py" "$tmp/cnn-straight.safetensors" "$tmp/cnn-int8.safetensors" 5
    check "quantize: eval runs the int8 checkpoint at --approx int8's accuracy $cnn_int8_accuracy" \
        bash -c 'out=$("$0" eval --limit 300 "$1"); grep -q "int8 (5 layers from the checkpoint): test accuracy $2 " <<<"$out"' \
        "$eagle" "$tmp/cnn-int8.safetensors" "$cnn_int8_accuracy"
    check "quantize: train --resume of an int8 checkpoint -> 1, naming it" \
        bash -c 'out=$("$0" train --model cnn --limit 192 --resume "$1" 2>&1); [ $? -eq 1 ] && grep -q "int8 checkpoint" <<<"$out"' \
        "$eagle" "$tmp/cnn-int8.safetensors"
    check "quantize without --out -> 2" expect_exit 2 "$eagle" quantize --checkpoint "$tmp/cnn-straight.safetensors"
    check "quantize --bits 9 -> 2" expect_exit 2 "$eagle" quantize --bits 9 --checkpoint "$tmp/cnn-straight.safetensors" --out "$tmp/x.safetensors"
    echo "not a checkpoint" >"$tmp/junk.safetensors"
    check "quantize of a file that is no checkpoint -> 1" expect_exit 1 "$eagle" quantize --checkpoint "$tmp/junk.safetensors" --out "$tmp/x.safetensors"
    cnn_eager=$(numbers_of "$(cnn --epochs 1)")
    cnn_lazy=$(numbers_of "$(cnn --epochs 1 --mode lazy)")
    check "cnn: --mode lazy gives eager's training log" \
        bash -c '[ "$(wc -l <<<"$1")" -ge 3 ] && [ "$1" = "$2" ]' _ "$cnn_eager" "$cnn_lazy"
    # graph mode draws new dropout masks at every replay, as the eager steps do
    cnn_graph=$(numbers_of "$(cnn --epochs 1 --mode graph)")
    check "cnn: --mode graph gives eager's training log" \
        bash -c '[ "$(wc -l <<<"$1")" -ge 3 ] && [ "$1" = "$2" ]' _ "$cnn_eager" "$cnn_graph"
    # Mixed precision: each policy trains (the summary names it, the profile shows bf16 ops),
    # the three modes agree, mixed_float16 prints its loss scale, and --resume keeps the policy
    # and the loss scale state (byte-identical checkpoints).
    for policy in mixed_bfloat16 mixed_float16; do
        mp() { "$eagle" train --limit 2000 --test-limit 500 --epochs 1 --seed 4 --threads 2 --precision "$policy" "$@" 2>&1; }
        mp_eager=$(mp)
        check "$policy: the summary names the policy" grep -q "Policy: $policy" <<<"$mp_eager"
        mp_accuracy=$(grep "test accuracy" <<<"$mp_eager" | tail -1 | awk '{print $3}')
        check "$policy: trains (test accuracy $mp_accuracy >= 0.70)" \
            python3 -c "import sys; sys.exit(0 if float('$mp_accuracy') >= 0.70 else 1)"
        for mode in lazy graph; do
            check "$policy: --mode $mode gives eager's training log" \
                bash -c '[ "$(wc -l <<<"$1")" -ge 3 ] && [ "$1" = "$2" ]' _ "$(numbers_of "$mp_eager")" "$(numbers_of "$(mp --mode $mode)")"
        done
    done
    check "mixed_float16: the loss scale is printed" grep -q "loss scale 32768" <<<"$mp_eager"
    check "mixed_bfloat16: the profile's table has bf16 dense ops" \
        bash -c '"$0" train --limit 500 --epochs 1 --precision mixed_bfloat16 --profile "$1/mp.json" 2>&1 | grep -qE "^dense +bf16"' "$eagle" "$tmp"
    mp_cnn() { "$eagle" train --model cnn --limit 128 --test-limit 200 --seed 3 --threads 2 --precision mixed_float16 "$@" 2>&1; }
    mp_cnn --epochs 2 --save "$tmp/mp-straight.safetensors" >/dev/null
    mp_cnn --epochs 2 --stop-after 1 --save "$tmp/mp-half.safetensors" >/dev/null
    mp_resumed=$(mp_cnn --resume "$tmp/mp-half.safetensors" --save "$tmp/mp-resumed.safetensors")
    check "cnn mixed_float16: --resume gives the uninterrupted run's checkpoint, byte for byte" \
        cmp "$tmp/mp-straight.safetensors" "$tmp/mp-resumed.safetensors"
    check "... and keeps the policy" grep -q "precision mixed_float16" <<<"$mp_resumed"
    check "--resume with another --precision -> 2" \
        expect_exit 2 "$eagle" train --resume "$tmp/mp-half.safetensors" --precision float32
    # Under a memory limit the pipeline's AUTOTUNE stages run on the training thread, so a run
    # that hits the limit fails at the same place, with the same numbers, every time.
    limited_run() { EG_MEMORY_LIMIT=6M "$eagle" train --epochs 1 --threads 2 2>&1 | grep -i "out of memory"; }
    first_failure=$(limited_run)
    check "EG_MEMORY_LIMIT=6M: out of memory, the same way in three runs" \
        bash -c '[ -n "$0" ] && for i in 1 2; do [ "$(EG_MEMORY_LIMIT=6M "$1" train --epochs 1 --threads 2 2>&1 | grep -i "out of memory")" = "$0" ] || exit 1; done' \
        "$first_failure" "$eagle"
else
    echo "FAIL Fashion-MNIST not installed at $data (scripts/install-deps.sh installs it)"
    failures=$((failures + 1))
fi
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
