#!/usr/bin/env bash
# Eagle as a library: `cmake --install` into a temporary prefix, then the out-of-tree project in
# tests/install/consumer is built against that copy twice — with find_package(Eagle) (shared and
# static targets) and with `cc $(pkg-config --cflags --libs eagle)` (shared, and static through
# Libs.private) — and every program is run: each trains a tiny model and fails unless its loss
# went down. Finally the prefix is moved, and pkg-config must still find everything there.
#   test_install.sh BUILD_DIR CMAKE C_COMPILER
set -uo pipefail
build=$1
cmake=$2
cc=$3
here=$(cd "$(dirname "$0")" && pwd)
failures=0
check() { # description, command...
    local description=$1
    shift
    if "$@"; then echo "ok   $description"; else echo "FAIL $description"; failures=$((failures + 1)); fi
}
quiet() { # runs a command, printing its output only when it fails
    local out
    if ! out=$("$@" 2>&1); then
        echo "$out" | tail -40
        return 1
    fi
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

check "cmake --install into a temporary prefix" quiet "$cmake" --install "$build" --prefix "$prefix"
pc=$(find "$prefix" -name eagle.pc | head -1)
libdir=$(dirname "$(dirname "${pc:-/nonexistent/x/y}")")
has() { [ -e "$prefix/$1" ] || [ -e "$1" ] || { echo "  missing: $1"; return 1; }; }
check "headers installed" has include/eagle.h
check "dlpack.h installed" has include/eagle/dlpack.h
check "eagle tool installed and runs" quiet "$prefix/bin/eagle" info
check "libeagle.a installed" has "$libdir/libeagle.a"
check "libeagle.so -> soname -> versioned file" \
    bash -c '[ -L "$0/libeagle.so" ] && [ -L "$0/libeagle.so.0" ] && [ -f "$(readlink -f "$0/libeagle.so")" ] && ls "$0"/libeagle.so.0.* >/dev/null' "$libdir"
check "soname is libeagle.so.0" \
    bash -c 'objdump -p "$0/libeagle.so" | grep -q "SONAME *libeagle.so.0"' "$libdir"
for file in EagleConfig.cmake EagleConfigVersion.cmake EagleTargets.cmake; do
    check "$file installed" has "$libdir/cmake/Eagle/$file"
done
check "eagle.pc installed" has "${pc:-eagle.pc}"
check "the CMake package names no build-tree path" \
    bash -c '! grep -rqF "$0" "$1/cmake/Eagle"' "$(cd "$here/../.." && pwd)" "$libdir"

# find_package(Eagle): Eagle::eagle (shared) and Eagle::eagle_static.
consumer=$tmp/consumer-build
check "consumer configures with find_package(Eagle)" \
    quiet "$cmake" -S "$here/consumer" -B "$consumer" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release
check "consumer builds" quiet "$cmake" --build "$consumer"
check "consumer (Eagle::eagle, shared) trains" "$consumer/train_tiny_shared"
check "consumer (Eagle::eagle_static) trains" "$consumer/train_tiny_static"
check "the shared consumer uses the installed libeagle.so" \
    bash -c 'ldd "$0" | grep -q "libeagle.so.0 => $1"' "$consumer/train_tiny_shared" "$libdir"
check "the static consumer does not need libeagle.so" \
    bash -c '! ldd "$0" | grep -q libeagle' "$consumer/train_tiny_static"

# pkg-config, shared and static.
export PKG_CONFIG_PATH=$libdir/pkgconfig
pkg() { pkg-config "$@" eagle; }
check "pkg-config knows eagle 0.1.0" bash -c '[ "$(pkg-config --modversion eagle)" = 0.1.0 ]'
check "eagle-static lists libeagle.a, OpenBLAS, zlib, libm, pthread" \
    bash -c 'l=$(pkg-config --libs eagle-static); grep -q "libeagle\.a" <<<"$l" || exit 1; for x in -lopenblas -lz -lm -lpthread; do grep -q -- "$x" <<<"$l" || exit 1; done'
check "cc \$(pkg-config --cflags --libs eagle) builds" \
    quiet "$cc" -std=c11 "$here/consumer/train_tiny.c" $(pkg --cflags --libs) -o "$tmp/pc_shared"
# the README's commands, as they are: no LD_LIBRARY_PATH, no editing of the flags
check "pkg-config build (shared) trains as built (run path)" env -u LD_LIBRARY_PATH "$tmp/pc_shared"
check "... with the installed libeagle.so" \
    bash -c 'ldd "$0" | grep -q "libeagle.so.0 => $1"' "$tmp/pc_shared" "$libdir"
check "cc \$(pkg-config --cflags --libs eagle-static) builds" \
    quiet "$cc" -std=c11 "$here/consumer/train_tiny.c" $(pkg-config --cflags --libs eagle-static) \
    -o "$tmp/pc_static"
check "pkg-config build (static) trains" "$tmp/pc_static"
check "... without libeagle.so" bash -c '! ldd "$0" | grep -q libeagle' "$tmp/pc_static"

# Relocated: eagle.pc finds its prefix from its own place.
mv "$prefix" "$tmp/moved"
export PKG_CONFIG_PATH=$tmp/moved/${libdir#"$prefix"/}/pkgconfig
check "after moving the prefix, pkg-config points into the new place" \
    bash -c 'd=$(pkg-config --variable=includedir eagle); [[ $d == "$0"/moved/* ]] && [ -f "$d/eagle.h" ]' "$tmp"
check "after moving the prefix, a pkg-config build (static) trains" \
    bash -c '"$0" -std=c11 "$1" $(pkg-config --cflags --libs eagle-static) -o "$2" && "$2" >/dev/null' \
    "$cc" "$here/consumer/train_tiny.c" "$tmp/pc_moved"
check "after moving the prefix, a pkg-config build (shared) trains" \
    bash -c '"$0" -std=c11 "$1" $(pkg-config --cflags --libs eagle) -o "$2" && env -u LD_LIBRARY_PATH "$2" >/dev/null' \
    "$cc" "$here/consumer/train_tiny.c" "$tmp/pc_moved_shared"

echo "$failures failure(s)"
[ "$failures" -eq 0 ]
