#!/usr/bin/env bash
# Data-parallel `eagle train` end to end, two replicas: mirrored over logical CPU devices
# (--replicas 2) and two MPI processes (mpirun -np 2 ... --distributed).
#   - the same replicas give the same bits: mirrored and multi-worker write identical
#     checkpoints, in eager and graph mode, with any bucket size (EG_DIST_BUCKET_BYTES);
#   - two replicas print one replica's losses and accuracies on the same global batches (to the
#     printed digits: the sums differ from one replica's in the last bits only) for the MLP; the
#     CNN (dropout, batch normalization per replica or synchronized) gives the same bits
#     mirrored and over MPI;
#   - rank 0 alone prints and saves; a resumed distributed run continues the uninterrupted one;
#   - a rank that dies ends the job; a rank that hangs makes the other fail after the timeout
#     naming it; ranks whose models differ fail at the first step naming the variable.
#   test_distributed.sh EAGLE_BINARY MPIEXEC
set -uo pipefail
eagle=$1
mpiexec=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun=("$mpiexec" -np 2 --oversubscribe)
failures=0
check() { # description, command...
    local description=$1
    shift
    if "$@"; then echo "ok   $description"; else echo "FAIL $description"; failures=$((failures + 1)); fi
}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--limit 1536 --test-limit 500 --epochs 2 --hidden 48 --batch-size 64 --threads 1)
# the epochs' losses, accuracies and test results, without the timings
numbers() { grep -E "^  (test accuracy|[0-9]+ samples in)" "$1" | sed 's/in [0-9.]* s ([0-9]* samples\/s)//'; }
export -f numbers

"$eagle" train "${common[@]}" --save "$work/one.st" >"$work/one.log" 2>&1
"$eagle" train "${common[@]}" --replicas 2 --save "$work/mirrored.st" >"$work/mirrored.log" 2>&1
"${mpirun[@]}" "$eagle" train "${common[@]}" --distributed --save "$work/mpi.st" \
    >"$work/mpi.log" 2>&1
"${mpirun[@]}" "$eagle" train "${common[@]}" --distributed --mode graph \
    --save "$work/mpi_graph.st" >"$work/mpi_graph.log" 2>&1
EG_DIST_BUCKET_BYTES=2048 "${mpirun[@]}" -x EG_DIST_BUCKET_BYTES "$eagle" train "${common[@]}" \
    --distributed --save "$work/mpi_buckets.st" >"$work/mpi_buckets.log" 2>&1
check "the runs succeed" bash -c 'for f in "$@"; do [ -s "$f" ] || exit 1; done' _ \
    "$work"/{one,mirrored,mpi,mpi_graph,mpi_buckets}.st
check "mirrored and multi-worker write the same bits" cmp -s "$work/mirrored.st" "$work/mpi.st"
check "graph mode writes the same bits" cmp -s "$work/mpi.st" "$work/mpi_graph.st"
check "2 KiB buckets write the same bits" cmp -s "$work/mpi.st" "$work/mpi_buckets.st"
check "two replicas print one replica's numbers" \
    bash -c '[ "$(numbers "$1")" = "$(numbers "$2")" ] && [ -n "$(numbers "$1")" ]' _ \
    "$work/one.log" "$work/mpi.log"
check "rank 0 alone prints" bash -c '[ "$(grep -c "^trained " "$1")" -eq 1 ]' _ "$work/mpi.log"
check "the strategy is named" grep -q "multi_worker strategy: 2 replicas" "$work/mpi.log"
# 48 steps of one bucket (the 38,218 gradients are under the first bucket's 1 MiB) and the
# step's loss, accuracy and stop request, and per epoch the validation's one batch of sums
check "the all-reduces are counted" \
    grep -q "^all-reduce (this process): 98 reductions, 7.0 MiB; in flight" "$work/mpi.log"

# The CNN: per-replica batch statistics (averaged over the replicas before evaluating) and
# dropout masks from each replica's own stream: not one replica's numbers, but the same bits
# mirrored and multi-worker.
cnn=(--model cnn --limit 512 --test-limit 200 --epochs 1 --batch-size 32 --threads 1)
"$eagle" train "${cnn[@]}" --replicas 2 --save "$work/cnn_mirrored.st" >"$work/cnn_mirrored.log" 2>&1
"${mpirun[@]}" "$eagle" train "${cnn[@]}" --distributed --save "$work/cnn_mpi.st" \
    >"$work/cnn_mpi.log" 2>&1
check "the CNN trains on two ranks" grep -q "test accuracy" "$work/cnn_mpi.log"
check "... with the bits of two mirrored replicas" cmp -s "$work/cnn_mirrored.st" "$work/cnn_mpi.st"
check "... printing the same numbers" \
    bash -c '[ "$(numbers "$1")" = "$(numbers "$2")" ]' _ "$work/cnn_mirrored.log" "$work/cnn_mpi.log"
# Synchronized batch normalization: the statistics of the global batch on every replica (its
# equality with one replica on the whole batch is tests/test_sync_batch_norm.c).
"$eagle" train "${cnn[@]}" --sync-batch-norm --replicas 2 --save "$work/cnn_sync_mirrored.st" \
    >"$work/cnn_sync_mirrored.log" 2>&1
"${mpirun[@]}" "$eagle" train "${cnn[@]}" --sync-batch-norm --distributed \
    --save "$work/cnn_sync_mpi.st" >"$work/cnn_sync_mpi.log" 2>&1
check "synchronized batch norm trains on two ranks" grep -q "test accuracy" "$work/cnn_sync_mpi.log"
check "... with the bits of two mirrored replicas" \
    cmp -s "$work/cnn_sync_mirrored.st" "$work/cnn_sync_mpi.st"
"$eagle" train "${cnn[@]}" --sync-batch-norm --replicas 2 --mode graph \
    --save "$work/cnn_sync_graph.st" >"$work/cnn_sync_graph.log" 2>&1
check "... and of a traced step" cmp -s "$work/cnn_sync_mirrored.st" "$work/cnn_sync_graph.st"
check "... and not the per-replica statistics' bits" \
    bash -c '[ -s "$1" ] && ! cmp -s "$1" "$2"' _ "$work/cnn_sync_mpi.st" "$work/cnn_mpi.st"

# Resume: every rank reads the same checkpoint; the resumed run ends where the whole one did.
"${mpirun[@]}" "$eagle" train "${common[@]}" --distributed --stop-after 1 --save "$work/half.st" \
    >"$work/half.log" 2>&1
"${mpirun[@]}" "$eagle" train "${common[@]}" --distributed --resume "$work/half.st" \
    --save "$work/resumed.st" >"$work/resumed.log" 2>&1
check "a resumed run continues the whole one" cmp -s "$work/mpi.st" "$work/resumed.st"

# Ranks whose models differ.
"$mpiexec" --oversubscribe -np 1 "$eagle" train "${common[@]}" --distributed : \
    -np 1 "$eagle" train "${common[@]}" --hidden 40 --distributed >"$work/mismatch.log" 2>&1
rc=$?
check "different models fail" test "$rc" -ne 0
check "... naming the variable and the ranks" \
    grep -q "models differ at variable 0: rank 0 has 'dense/kernel' f32 (784, 48), rank 1 has 'dense/kernel' f32 (784, 40)" \
    "$work/mismatch.log"

# A rank that hangs (stopped with SIGSTOP) or dies (SIGKILL) while the other trains.
long=(--limit 60000 --epochs 50 --hidden 48 --batch-size 64 --threads 1)
rank_pid() { # the pid of the eagle process of rank $1
    for p in $(pgrep -f "$eagle train"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1" &&
            echo "$p" && return
    done
}
for how in STOP KILL; do
    start=$(date +%s)
    EG_DIST_TIMEOUT=3 "${mpirun[@]}" -x EG_DIST_TIMEOUT "$eagle" train "${long[@]}" --distributed \
        >"$work/fail_$how.log" 2>&1 &
    job=$!
    victim=""
    for _ in $(seq 100); do
        sleep 0.2
        victim=$(rank_pid 1)
        [ -n "$victim" ] && grep -q "step\|/[0-9]" "$work/fail_$how.log" 2>/dev/null && break
    done
    sleep 1
    [ -n "$victim" ] && kill -"$how" "$victim"
    wait "$job"
    rc=$?
    seconds=$(($(date +%s) - start))
    check "rank 1 ${how}ped: the job ends with an error" test "$rc" -ne 0
    check "... within a minute ($seconds s)" test "$seconds" -lt 60
done
# Stopped between two messages it sent nothing more; stopped within one, part of it; stopped
# after sending its part but before taking rank 0's, it left rank 0's send pending.
check "the hung rank is named by the other" \
    grep -qE "rank 1 (sent (nothing|[0-9]+ of [0-9]+ bytes)|did not take what this rank sent) within 3 s" \
    "$work/fail_STOP.log"

if [ "$failures" -ne 0 ]; then
    echo "$failures check(s) failed; logs:"
    for f in "$work"/*.log; do echo "== $f"; tail -5 "$f"; done
    exit 1
fi
echo "all distributed CLI checks passed"
