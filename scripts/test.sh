#!/usr/bin/env bash
# The test command: installs dependencies, then builds and runs the whole suite three ways —
# under ThreadSanitizer (threaded tests), under AddressSanitizer + UndefinedBehaviorSanitizer,
# and as the release build. Stops at the first failing configuration; ctest's pass/fail summary
# is the last thing printed.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
jobs=$(nproc)
for preset in tsan asan-ubsan release; do
  echo "=== ${preset} ==="
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  if [ "$preset" = tsan ]; then
    # ThreadSanitizer runs only the tests that exercise threads (label "threads").
    ctest --preset "$preset" -L threads -j "$jobs"
  else
    ctest --preset "$preset" -j "$jobs"
  fi
done
