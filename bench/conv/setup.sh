#!/usr/bin/env bash
# bench/conv's own peer: oneDNN from Debian (libdnnl-dev), bench-only (the library never links
# it). Installs it with apt-get when missing (root or sudo needed), then builds the C harness
# bench/conv/onednn/dnnl_conv.c into build/release/bench/dnnl_conv. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -f /usr/include/dnnl.h ]; then
  if [ "$(id -u)" -eq 0 ]; then apt-get install -y --no-install-recommends libdnnl-dev
  elif command -v sudo >/dev/null; then sudo apt-get install -y --no-install-recommends libdnnl-dev
  else echo "bench/conv/setup.sh: libdnnl-dev is missing (apt-get install libdnnl-dev)" >&2; exit 1
  fi
fi
mkdir -p build/release/bench
cc -O2 -Wall -Wextra -Werror bench/conv/onednn/dnnl_conv.c -ldnnl -o build/release/bench/dnnl_conv
