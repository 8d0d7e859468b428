#!/usr/bin/env bash
# Installs the GEMM libraries bench/gemm compares against Eagle (bench-only: the library needs
# none of them). Debian 12 packages; run as root. Idempotent.
set -euo pipefail
packages=(libopenblas-dev libblis-dev libxsmm-dev libdnnl-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
