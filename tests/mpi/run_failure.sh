#!/usr/bin/env bash
# Runs test_mpi_failures MODE on 2 ranks and passes when both ranks report PASS, no sanitizer
# reported anything and mpirun ended within 25 s. mpirun's own status is not the verdict: the
# ranks exit without MPI_Finalize (their group broke), which mpirun reports as a failed job.
#   run_failure.sh MPIEXEC PROGRAM MODE
set -u
mpiexec=$1 program=$2 mode=$3
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s%N)
timeout -k 5 25 "$mpiexec" -np 2 --oversubscribe --allow-run-as-root "$program" "$mode" \
  >"$log" 2>&1
status=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
cat "$log"
echo "--- mpirun exited with $status after ${elapsed_ms} ms"
if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
  echo "FAIL: the job still ran after 25 s (a rank hangs)"
  exit 1
fi
if grep -qE "ERROR: [A-Za-z]+Sanitizer|runtime error:|^FAIL" "$log"; then
  echo "FAIL: a check or a sanitizer failed (above)"
  exit 1
fi
for rank in 0 1; do
  if ! grep -q "^PASS $mode rank $rank:" "$log"; then
    echo "FAIL: rank $rank did not report PASS"
    exit 1
  fi
done
echo "ok: both ranks checked their own failure"
