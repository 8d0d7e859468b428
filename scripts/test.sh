#!/usr/bin/env bash
# The test command: installs dependencies, then builds and runs the whole suite three ways —
# under ThreadSanitizer (threaded tests), under AddressSanitizer + UndefinedBehaviorSanitizer,
# and as the release build — and, in between, builds the libFuzzer targets with clang and replays
# their seed corpora (so that the fuzzers keep building). Stops at the first failing
# configuration; ctest's pass/fail summary of the release build is the last thing printed.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
jobs=$(nproc)
fuzz_targets=$(cd fuzz && ls fuzz_*.c | sed 's/\.c$//')
for preset in tsan asan-ubsan fuzz release; do
  echo "=== ${preset} ==="
  cmake --preset "$preset" >/dev/null
  if [ "$preset" = fuzz ]; then
    # shellcheck disable=SC2086 # one target per word
    cmake --build --preset fuzz -j "$jobs" --target $fuzz_targets
    ctest --preset fuzz -R '_corpus$' -j "$jobs"
    continue
  fi
  cmake --build --preset "$preset" -j "$jobs"
  if [ "$preset" = tsan ]; then
    # ThreadSanitizer runs only the tests that exercise threads (label "threads").
    ctest --preset "$preset" -L threads -j "$jobs"
  else
    ctest --preset "$preset" -j "$jobs"
  fi
done
