#!/usr/bin/env bash
# `eagle train` loses nothing when stopped: the first Ctrl-C (SIGINT) finishes the current step,
# writes the --save checkpoint of where the run stands (within an epoch too) and exits 130 saying
# how to resume, and --resume then gives exactly the uninterrupted run (MLP and CNN, with
# --augment); a second Ctrl-C stops at once; a --save or --profile file that cannot be written at
# the end (its directory removed during the run) goes to a rescue file in $TMPDIR.
#   test_cli_interrupt.sh EAGLE_BINARY
set -uo pipefail
eagle=$1
# A shell script's background commands start with SIGINT ignored (and so may the script, under
# some harnesses), and eagle train, like any program, leaves an ignored SIGINT ignored: the runs
# to interrupt are started through this, which restores the default and execs (keeping the pid).
launch=(python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])')
data=/usr/share/datasets/fashion-mnist
[ -f "$data/train-images-idx3-ubyte.gz" ] ||
    { echo "FAIL Fashion-MNIST not installed at $data (scripts/install-deps.sh installs it)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
check() { # description, command...
    local description=$1
    shift
    if "$@"; then echo "ok   $description"; else echo "FAIL $description"; failures=$((failures + 1)); fi
}
# wait_for FILE PATTERN: until a line of FILE matches (false when $pid ended first, or after 60 s).
wait_for() {
    local i
    for ((i = 0; i < 6000; i++)); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        kill -0 "$pid" 2>/dev/null || { grep -q -- "$2" "$1" 2>/dev/null; return; }
        sleep 0.01
    done
    return 1
}
# interrupt: SIGINT to $pid while it is stopped, so that the signal lands after the line waited
# for even on a loaded machine; then its exit status in $rc.
interrupt() {
    kill -STOP "$pid" && kill -INT "$pid" && kill -CONT "$pid"
    wait "$pid"
    rc=$?
}
numbers_of() { grep -E "loss|accuracy" | sed -E 's/[0-9.]+ samples\/s//g; s/in [0-9.]+ s//g; s/ETA [0-9:]+//g'; }
# The lines of epoch N of a log, numbers only.
epoch_lines() { sed -n "/^Epoch $2\//,/test accuracy/p" "$1" | numbers_of; }
# ends_with A B: B's lines are the last lines of A (a resumed epoch logs only its remaining steps).
ends_with() { [ "$(wc -l <<<"$2")" -ge 2 ] && [ "$(tail -n "$(wc -l <<<"$2")" <<<"$1")" = "$2" ]; }

# ---- the MLP with --augment, interrupted within an epoch ----
# A wide model, so that a step takes long enough for the interrupt to land within epoch 1.
# (Commands started with & below are not shell functions: $! must be eagle's pid.)
mlp=(train --limit 6000 --test-limit 300 --hidden 256,256 --seed 11 --threads 2)
"${launch[@]}" "$eagle" "${mlp[@]}" --augment --epochs 1000 --save "$tmp/int.safetensors" >"$tmp/int.log" 2>"$tmp/int.err" &
pid=$!
wait_for "$tmp/int.log" "step 36/188"
interrupt
check "SIGINT: exit status 130" [ "$rc" -eq 130 ]
message=$(grep "^eagle train: interrupted" "$tmp/int.err" | tail -1)
check "SIGINT: says where it stopped, where the checkpoint is and how to resume" \
    grep -Eq "^eagle train: interrupted (in epoch [0-9]+ after step [0-9]+ of 188|after epoch [0-9]+); checkpoint saved to $tmp/int.safetensors; resume with --resume $tmp/int.safetensors$" <<<"$message"
check "SIGINT: said at once that it finishes the step" grep -q "finishing the current step" "$tmp/int.err"
check "SIGINT: no temporary file left" bash -c '! compgen -G "$0.tmp.*" >/dev/null' "$tmp/int.safetensors"
# Where the interrupted run stood: within epoch E (the resumed run finishes it), or after it.
if [[ $message =~ in\ epoch\ ([0-9]+)\ after\ step\ ([0-9]+) ]]; then
    epochs=${BASH_REMATCH[1]} step=${BASH_REMATCH[2]}
elif [[ $message =~ after\ epoch\ ([0-9]+) ]]; then
    epochs=$((BASH_REMATCH[1] + 1)) step=0
    echo "note: the interrupt landed between epochs; the within-epoch resume is not exercised"
else
    epochs=1 step=0
fi
# The MLP's learning rate does not depend on --epochs, so the interrupted run's checkpoint
# continued to `epochs` epochs is the uninterrupted `epochs`-epoch run, byte for byte; one epoch
# more checks that the epoch after the resumed one starts afresh.
epochs=$((epochs + 1))
"$eagle" train --limit 6000 --test-limit 300 --threads 2 --epochs "$epochs" \
    --resume "$tmp/int.safetensors" --save "$tmp/int-resumed.safetensors" >"$tmp/resumed.log" 2>&1
check "SIGINT: the checkpoint resumes (without --augment given: it is recorded)" \
    grep -q "random flips and crops" "$tmp/resumed.log"
if [ "$step" -gt 0 ]; then
    check "SIGINT: --resume continues within the epoch" \
        grep -q "^resumed from .* in epoch $((epochs - 1)) after step $step " "$tmp/resumed.log"
fi
"$eagle" "${mlp[@]}" --augment --epochs "$epochs" --save "$tmp/int-straight.safetensors" >"$tmp/straight.log" 2>&1
check "SIGINT + --resume: the uninterrupted run's checkpoint, byte for byte" \
    cmp "$tmp/int-straight.safetensors" "$tmp/int-resumed.safetensors"
check "SIGINT + --resume: the rest of epoch $((epochs - 1)) logs the uninterrupted run's numbers" \
    ends_with "$(epoch_lines "$tmp/straight.log" $((epochs - 1)))" "$(epoch_lines "$tmp/resumed.log" $((epochs - 1)))"
check "SIGINT + --resume: epoch $epochs logs the uninterrupted run's numbers, all of them" \
    bash -c '[ "$(wc -l <<<"$0")" -ge 12 ] && [ "$0" = "$1" ]' \
    "$(epoch_lines "$tmp/straight.log" "$epochs")" "$(epoch_lines "$tmp/resumed.log" "$epochs")"

# ---- the CNN (batch normalization, dropout, cosine decay) with --augment ----
cnn=(train --model cnn --limit 320 --test-limit 100 --seed 5 --threads 2 --augment)
"${launch[@]}" "$eagle" "${cnn[@]}" --epochs 2 --save "$tmp/cnn-int.safetensors" >"$tmp/cnn-int.log" 2>"$tmp/cnn-int.err" &
pid=$!
wait_for "$tmp/cnn-int.log" "step 2/5"
interrupt
check "cnn: SIGINT: exit status 130 with a checkpoint" \
    bash -c '[ "$0" -eq 130 ] && grep -q "checkpoint saved to" "$1"' "$rc" "$tmp/cnn-int.err"
"$eagle" "${cnn[@]}" --resume "$tmp/cnn-int.safetensors" --save "$tmp/cnn-resumed.safetensors" \
    >"$tmp/cnn-resumed.log" 2>&1
"$eagle" "${cnn[@]}" --epochs 2 --save "$tmp/cnn-straight.safetensors" >"$tmp/cnn-straight.log" 2>&1
check "cnn: SIGINT + --resume: the uninterrupted run's checkpoint, byte for byte" \
    cmp "$tmp/cnn-straight.safetensors" "$tmp/cnn-resumed.safetensors"
check "cnn: SIGINT + --resume: epoch 2 logs the uninterrupted run's numbers" \
    ends_with "$(epoch_lines "$tmp/cnn-straight.log" 2)" "$(epoch_lines "$tmp/cnn-resumed.log" 2)"

# ---- without --save: the same stop, and the message says nothing was saved ----
"${launch[@]}" "$eagle" "${mlp[@]}" --epochs 1000 >"$tmp/nosave.log" 2>"$tmp/nosave.err" &
pid=$!
wait_for "$tmp/nosave.log" "^Epoch 1/"
interrupt
check "SIGINT without --save: 130, saying no checkpoint was written" \
    bash -c '[ "$0" -eq 130 ] && grep -q "no checkpoint written (no --save given)" "$1"' "$rc" "$tmp/nosave.err"

# ---- a second Ctrl-C stops at once ----
# The run's stdout is a pipe nobody reads: once it is full the run blocks in a write, so it is
# still running when the second SIGINT comes, whatever the machine's speed, and only a second
# SIGINT that stops it at once can end it.
double_interrupt() {
    python3 - "$eagle" "$tmp/double.safetensors" <<'PY'
import fcntl, os, signal, struct, subprocess, sys, termios, time
eagle, save = sys.argv[1], sys.argv[2]
run = subprocess.Popen([eagle, "train", "--limit", "600", "--test-limit", "100", "--epochs",
                        "100000", "--save", save], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
def buffered():
    return struct.unpack("i", fcntl.ioctl(run.stdout.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
# Full: more than 60 KB waiting, and no more coming for 0.3 s (a line is written every step).
deadline = time.time() + 60
last = -1
while run.poll() is None and time.time() < deadline:
    now = buffered()
    if now > 60000 and now == last:
        break
    last = now
    time.sleep(0.3)
run.send_signal(signal.SIGINT)
err = b""
fcntl.fcntl(run.stderr.fileno(), fcntl.F_SETFL, os.O_NONBLOCK)
while b"finishing the current step" not in err and time.time() < deadline:
    try:
        err += os.read(run.stderr.fileno(), 4096)
    except BlockingIOError:
        time.sleep(0.01)
run.send_signal(signal.SIGINT)
try:
    run.wait(timeout=10)
except subprocess.TimeoutExpired:
    run.kill()
    sys.exit("still running 10 s after the second SIGINT")
fcntl.fcntl(run.stderr.fileno(), fcntl.F_SETFL, 0)
err += run.stderr.read()
if run.returncode != 130 or b"interrupted again: stopped at once" not in err:
    sys.exit("exit %d: %s" % (run.returncode, err.decode(errors="replace")))
if os.path.exists(save):
    sys.exit("a checkpoint was written although the run was stopped at once")
PY
}
check "two SIGINTs: the second stops at once (130, no checkpoint)" double_interrupt

# ---- outputs that can no longer be written go to rescue files ----
mkdir -p "$tmp/gone" "$tmp/rescue"
rescue=(train --limit 3000 --test-limit 100 --seed 3 --threads 2 --save "$tmp/gone/w.safetensors"
    --profile "$tmp/gone/trace.json")
# The final save: the directory is removed while the run trains (stopped meanwhile).
TMPDIR=$tmp/rescue "$eagle" "${rescue[@]}" --epochs 3 >"$tmp/rescue.log" 2>"$tmp/rescue.err" &
pid=$!
wait_for "$tmp/rescue.log" "^Epoch 1/"
kill -STOP "$pid" && rm -rf "$tmp/gone" && kill -CONT "$pid"
wait "$pid"
rc=$?
rescued=$tmp/rescue/eagle-train-rescued-$pid-w.safetensors
check "final --save into a removed directory: exit 1, the checkpoint saved to $rescued" \
    bash -c '[ "$0" -eq 1 ] && grep -q "the checkpoint is saved to $1 instead" "$2" && [ -f "$1" ]' \
    "$rc" "$rescued" "$tmp/rescue.err"
check "... the profile trace too" \
    test -f "$tmp/rescue/eagle-train-rescued-$pid-trace.json"
check "... and the rescued checkpoint is the trained model" \
    bash -c 'out=$("$0" eval --limit 100 "$1"); grep -q "test accuracy $2" <<<"$out"' \
    "$eagle" "$rescued" "$(grep "test accuracy" "$tmp/rescue.log" | tail -1 | awk '{print $3}')"
# The save of an interrupted run.
mkdir -p "$tmp/gone"
TMPDIR=$tmp/rescue "${launch[@]}" "$eagle" "${rescue[@]}" --epochs 1000 >"$tmp/rescue2.log" 2>"$tmp/rescue2.err" &
pid=$!
wait_for "$tmp/rescue2.log" "^Epoch 1/"
kill -STOP "$pid" && rm -rf "$tmp/gone"
kill -INT "$pid" && kill -CONT "$pid"
wait "$pid"
rc=$?
rescued=$tmp/rescue/eagle-train-rescued-$pid-w.safetensors
check "SIGINT with --save into a removed directory: 130, resume with the rescue file" \
    bash -c '[ "$0" -eq 130 ] && grep -q "checkpoint saved to $1; resume with --resume $1" "$2" && [ -f "$1" ]' \
    "$rc" "$rescued" "$tmp/rescue2.err"

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
