#!/usr/bin/env bash
# eagle train --model charlm and eagle generate end to end on a tiny model: a short run reports
# bits per character on the held-out books and saves the weights; two runs with one seed print the
# same figure; generation from the saved weights prints the prompt and the requested number of
# characters, the same for one seed; usage errors exit 2. Needs bible-kjv-text (the install script
# installs it): without it the test is skipped (exit 77).
#   test_charlm.sh EAGLE_BINARY
set -uo pipefail
eagle=$1
[ -r /usr/lib/bible.data ] || { echo "bible-kjv-text is not installed: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
check() {
    local description=$1
    shift
    if "$@"; then echo "ok   $description"; else echo "FAIL $description"; failures=$((failures + 1)); fi
}
tiny=(--hidden 16 --embedding 8 --seq-len 16 --batch 4 --steps 3 --eval-chars 400 --threads 1)
"$eagle" train --model charlm "${tiny[@]}" --save "$dir/a.safetensors" >"$dir/a.txt" 2>&1
rc=$?
check "a short run ends with 0" [ "$rc" -eq 0 ]
bpc() { sed -n 's/^held-out books: \([0-9.]*\) bits per character.*/\1/p' "$1"; }
bpc_of() { bpc "$1"; }
export -f bpc bpc_of
check "it reports bits per character on the held-out books" \
    bash -c '[ -n "$(sed -n "s/^held-out books: \([0-9.]*\) bits.*/\1/p" "$0")" ]' "$dir/a.txt"
"$eagle" train --model charlm "${tiny[@]}" >"$dir/b.txt" 2>&1
check "the same seed gives the same figure" [ "$(bpc "$dir/a.txt")" = "$(bpc "$dir/b.txt")" ]
gen=(generate --checkpoint "$dir/a.safetensors" --hidden 16 --embedding 8 --prompt "And God"
     --length 40 --seed 5 --threads 1)
out1=$("$eagle" "${gen[@]}" 2>&1)
rc=$?
out2=$("$eagle" "${gen[@]}" 2>&1)
check "generate ends with 0" [ "$rc" -eq 0 ]
check "generate prints the prompt and 40 characters" \
    bash -c '[[ "$0" == "And God"* ]] && [ "$(printf %s "$0" | head -c 2000 | wc -c)" -ge 47 ]' "$out1"
check "generate is the same for one seed" [ "$out1" = "$out2" ]
"$eagle" generate --prompt x >/dev/null 2>&1
check "generate without --checkpoint exits 2" [ $? -eq 2 ]
"$eagle" generate --checkpoint "$dir/a.safetensors" --prompt x >"$dir/err.txt" 2>&1
rc=$?
check "a checkpoint of another size is refused, naming the shape" \
    bash -c '[ "$1" -eq 1 ] && grep -q "the model.s variable is f32" "$0"' "$dir/err.txt" "$rc"
"$eagle" train --model charlm "${tiny[@]}" --state carry >"$dir/c.txt" 2>&1
rc=$?
check "carried states over streams of the text (--state carry) train too" \
    bash -c '[ "$1" -eq 0 ] && [ -n "$(sed -n "s/^held-out books: \([0-9.]*\) bits.*/\1/p" "$0")" ]' \
    "$dir/c.txt" "$rc"
check "... on other batches than the random windows" [ "$(bpc "$dir/a.txt")" != "$(bpc "$dir/c.txt")" ]
ev=(eval --model charlm --checkpoint "$dir/a.safetensors" --hidden 16 --embedding 8
    --eval-chars 5000 --threads 1)
"$eagle" "${ev[@]}" --seq-len 16 >"$dir/e16.txt" 2>&1
rc=$?
"$eagle" "${ev[@]}" --seq-len 50 >"$dir/e50.txt" 2>&1
"$eagle" "${ev[@]}" --seq-len 16 --state reset >"$dir/r16.txt" 2>&1
check "eval scores a saved model" bash -c '[ "$1" -eq 0 ] && [ -n "$(bpc_of "$0")" ]' "$dir/e16.txt" "$rc"
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; exit !(a != "" && d < 0.0005 && d > -0.0005) }'; }
check "carrying the states, the score does not depend on the window" \
    close "$(bpc "$dir/e16.txt")" "$(bpc "$dir/e50.txt")"
check "each window from zero states scores otherwise" \
    bash -c '! [ "$0" = "$1" ]' "$(bpc "$dir/e16.txt")" "$(bpc "$dir/r16.txt")"
"$eagle" eval --model charlm >/dev/null 2>&1
check "eval without --checkpoint exits 2" [ $? -eq 2 ]
"$eagle" train --model charlm --seq-len 1 >/dev/null 2>&1
check "--seq-len 1 exits 2" [ $? -eq 2 ]
"$eagle" train --model charlm --state sometimes >/dev/null 2>&1
check "--state sometimes exits 2" [ $? -eq 2 ]
"$eagle" train --model charlm "${tiny[@]}" --precision bf16 >"$dir/h.txt" 2>&1
rc=$?
check "a bf16 run (mixed_bfloat16) trains and scores too" \
    bash -c '[ "$1" -eq 0 ] && [ -n "$(bpc_of "$0")" ]' "$dir/h.txt" "$rc"
"$eagle" train --model charlm --precision f8 >/dev/null 2>&1
check "--precision f8 exits 2" [ $? -eq 2 ]
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
