#!/usr/bin/env bash
# Builds Eagle (release) and a Python environment with the peers the benchmarks compare against
# (PyTorch and TensorFlow from PyPI) in bench/.venv. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
if [ ! -x bench/.venv/bin/python ]; then
  python3 -m venv bench/.venv
  bench/.venv/bin/pip install -q --upgrade pip
fi
bench/.venv/bin/python -c "import torch, tensorflow, numpy" 2>/dev/null ||
  bench/.venv/bin/pip install -q numpy torch tensorflow-cpu
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" >/dev/null
