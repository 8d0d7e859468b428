#!/usr/bin/env bash
# The main job: installs what is needed, builds Eagle (release) and trains the seed model on
# Fashion-MNIST. Arguments are passed on to `eagle train`.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target eagle
exec ./build/release/tools/eagle/eagle train "$@"
