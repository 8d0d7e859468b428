"""Interop with Hugging Face's tokenizers (PyPI `tokenizers`): the same ids for the same text.

    check_tokenizers.py HELPER WORK_DIR

HELPER is eagle_tokenizer_interop (tests/interop/eagle_tokenizer_interop.c). Both ways:
  * Eagle trains byte-level BPE tokenizers (with and without add_prefix_space) and a character
    tokenizer (with and without an unknown token) and saves them; tokenizers.Tokenizer.from_file
    loads each, and its encode(text).ids must equal Eagle's, its decode Eagle's decode;
  * `tokenizers` trains ByteLevel BPE tokenizers (BpeTrainer with the ByteLevel alphabet, and
    ByteLevelBPETokenizer), with added tokens that strip whitespace and ones matched in the second
    pass, and saves them (merges as pairs, and rewritten as "a b" strings, the older form; and
    with the other options Eagle reads set in the file: use_regex false, ignore_merges, no
    decoder, Fuse, the ByteLevel post-processor); Eagle loads each and must give its ids;
  * Eagle's training and BpeTrainer's, on the same corpus with the same options, must give the
    same vocabulary and merges.
The texts are fixed ones (ASCII, accents, emoji, CJK, contractions, whitespace runs and unusual
spaces, newlines, special-token text) and random mixtures of the same pieces, seeded.
"""

import json
import os
import random
import subprocess
import sys

from tokenizers import AddedToken, ByteLevelBPETokenizer, Tokenizer, decoders, models
from tokenizers import pre_tokenizers, trainers

HELPER, WORK = sys.argv[1], sys.argv[2]
SPECIALS = ["<pad>", "<|endoftext|>"]
failures = []


def fail(message):
    failures.append(message)
    print("FAIL:", message, file=sys.stderr)


CORPUS = (
    "In the beginning God created the heaven and the earth.\n"
    "And the earth was without form, and void; and darkness was upon the face of the deep.\n"
    "It's 2024 and we'll see what they've done: 3.14159, 42, 1,000,000 items!\n"
    "Café, naïve, résumé, jalapeño, Ångström, Straße, smörgåsbord.\n"
    "Ελληνικά γράμματα και русский текст, 中文字符和日本語のテキスト。\n"
    "Emoji: 😀 🎉 👍🏽 ❤️ and symbols ©®™ … «quotes» “curly” ‘single’.\n"
    "    indented line\twith\ttabs   and   runs  of spaces   \n"
    "\n\n\nblank lines above; trailing spaces here   \n"
    "I'm sure you're right, he'd say, she'll go, it's theirs, 'quoted' words.\n"
    "CAPS LOCK TEXT AND MiXeD cAsE, numbers like ٣٤٥ and Ⅻ and ½.\n"
) * 40


def babble(count, seed):
    """Words made of random syllables between random punctuation and whitespace: a corpus on which
    training runs to thousands of merges, with many ties between pair counts."""
    rng = random.Random(seed)
    syllables = ["ka", "lo", "mi", "ne", "su", "ra", "te", "vo", "ché", "zü", "ñu", "ø", "the",
                 "ing", "ion", "qu", "x", "42", "7", "中", "😀", "ß", "ab", "ess"]
    separators = [" ", " ", " ", " ", ", ", ". ", "\n", "  ", "\t", "'s ", "'ll ", "! ", " - "]
    words = []
    for _ in range(count):
        words.append("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))))
        words.append(rng.choice(separators))
    return "".join(words)


CORPUS += babble(30000, 7)

FIXED = [
    "", " ", "  ", "\n", "\n\n", "\t", "a", "Hello world", "Hello  world", "Hello   world!",
    "hello\nworld", "hello \nworld", "hello\n world", "hello \n world", "  leading", "trailing  ",
    "It's", "it's we'll they've I'm you're he'd", "'s 't 're 've 'm 'll 'd", "''s", " 's", "'S",
    "don't stop", "3.14159", "1,000,000", "12345678901234567890", "x1y2z3", "Café naïve",
    "résumé\u0301", "Straße", "Ελληνικά", "русский текст", "中文字符", "日本語のテキスト。",
    "😀", "😀😀😀", "👍🏽", "❤️", "a😀b", " 😀 ", "©®™", "«quotes»", "“curly”", "…",
    "\u00a0nbsp\u00a0", "ideographic\u3000space", "thin\u2009space", "nel\u0085line",
    "ogham\u1680mark", "mongolian\u180evowel", "zero\u200bwidth", "line\u2028sep", "٣٤٥", "Ⅻ", "½",
    "<pad>", "<|endoftext|>", "a<pad>b", " <pad> ", "<|endoftext|>hello<|endoftext|>",
    "<pad><pad>", "<|endoftext", "\x00\x01\x7f", "tab\there", "\r\n", "mixed \t\n spaces",
    "CAPS LOCK", "the the the the the", "In the beginning God created the heaven",
    "<mask> here", "x <mask>", "x  <mask>  y", "[SEP] next", "[SEP]   next", "abc ess abess",
    "ab ab", "hello world ab", "ess<mask>ess",
]

PIECES = [
    "the", " the", "and", " and", "God", "earth", "It", "'s", "'ll", "'", "’", "we", " ", "  ",
    "   ", "\n", "\n\n", "\t", " \n", "3", "42", "٣", "Ⅻ", "½", ".", ",", "!", "?", "...", "é",
    "ü", "ñ", "ß", "Ω", "ж", "中", "日本", "😀", "🎉", "👍🏽", "\u0301", "\u00a0", "\u3000",
    "\u2009", "\u0085", "\u200b", "<pad>", "<|endoftext|>", "<mask>", "[SEP]", "ab", "ess",
    "x", "Q", "_", "-", "©", "\x00", "\r",
]


def random_texts(count, seed):
    rng = random.Random(seed)
    return ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 30))) for _ in range(count)]


TEXTS = FIXED + random_texts(600, 20240601)


def path(name):
    return os.path.join(WORK, name)


def run(*args):
    result = subprocess.run([HELPER, *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"check_tokenizers.py: {' '.join(args[:2])} failed:\n{result.stderr}")
    return result.stdout


def eagle_encode(tokenizer_path, texts):
    """[(ids, decoded bytes, decoded bytes skipping special tokens)] from Eagle."""
    with open(path("texts.hex"), "w") as f:
        for text in texts:
            f.write(text.encode("utf-8").hex() + "\n")
    out = []
    for line in run("encode", tokenizer_path, path("texts.hex")).splitlines():
        ids, decoded, skipped = line.split(" | ")
        out.append(([int(i) for i in ids.split()], bytes.fromhex(decoded), bytes.fromhex(skipped)))
    if len(out) != len(texts):
        raise SystemExit(f"check_tokenizers.py: {len(out)} results for {len(texts)} texts")
    return out


def compare(label, tokenizer_path, hf, check_round_trip):
    """Eagle's ids and decodes against Hugging Face's for every text."""
    mismatches = 0
    for text, (ids, decoded, skipped) in zip(TEXTS, eagle_encode(tokenizer_path, TEXTS)):
        want = hf.encode(text).ids
        if ids != want:
            mismatches += 1
            if mismatches <= 5:
                fail(f"{label}: {text!r}: Eagle {ids}, tokenizers {want}")
            continue
        for skip, got in ((False, decoded), (True, skipped)):
            hf_text = hf.decode(want, skip_special_tokens=skip)
            if got.decode("utf-8", errors="replace") != hf_text:
                mismatches += 1
                if mismatches <= 5:
                    fail(f"{label}: {text!r}: decode(skip_special={skip}) Eagle {got!r}, "
                         f"tokenizers {hf_text!r}")
        if check_round_trip and decoded != text.encode("utf-8"):
            mismatches += 1
            if mismatches <= 5:
                fail(f"{label}: {text!r}: decodes to {decoded!r}")
    if mismatches > 5:
        fail(f"{label}: {mismatches} mismatches in all")
    print(f"{label}: {len(TEXTS)} texts, {mismatches} mismatches")


def hf_bpe(vocab_size, min_frequency, add_prefix_space):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                  special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([CORPUS], trainer=trainer)
    return tok


def legacy_merges(src, dst):
    """The file with its merges as "a b" strings, as tokenizers before 0.20 wrote them."""
    with open(src, encoding="utf-8") as f:
        data = json.load(f)
    data["model"]["merges"] = [" ".join(pair) for pair in data["model"]["merges"]]
    with open(dst, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)


def main():
    with open(path("corpus.txt"), "w", encoding="utf-8") as f:
        f.write(CORPUS)

    # Eagle writes, tokenizers reads.
    for prefix in (0, 1):
        out = path(f"eagle_bpe_{prefix}.json")
        run("train-bpe", path("corpus.txt"), out, "700", "2", str(prefix), *SPECIALS)
        compare(f"eagle bpe (add_prefix_space={bool(prefix)})", out, Tokenizer.from_file(out),
                check_round_trip=not prefix)
    for unk in (True, False):
        out = path(f"eagle_char_{unk}.json")
        run("train-char", path("corpus.txt"), out, "<pad>", "<unk>", *(["--unk", "<unk>"] if unk
                                                                        else []))
        compare(f"eagle char (unk={unk})", out, Tokenizer.from_file(out), check_round_trip=False)

    # tokenizers writes, Eagle reads.
    for prefix in (False, True):
        hf = hf_bpe(700, 2, prefix)
        out = path(f"hf_bpe_{prefix}.json")
        hf.save(out)
        compare(f"tokenizers bpe (add_prefix_space={prefix})", out, hf, check_round_trip=False)
        legacy = path(f"hf_bpe_{prefix}_legacy.json")
        legacy_merges(out, legacy)
        compare(f"tokenizers bpe, \"a b\" merges (add_prefix_space={prefix})", legacy,
                Tokenizer.from_file(legacy), check_round_trip=False)
    # The options Eagle reads, each set in the file tokenizers wrote.
    variants = {
        "use_regex=false": lambda d: d["pre_tokenizer"].update(use_regex=False),
        "ignore_merges": lambda d: d["model"].update(ignore_merges=True),
        "no decoder": lambda d: d.update(decoder=None),
        "Fuse decoder": lambda d: d.update(decoder={"type": "Fuse"}),
        "ByteLevel post-processor": lambda d: d.update(post_processor={
            "type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
            "use_regex": True}),
    }
    for label, change in variants.items():
        with open(path("hf_bpe_False.json"), encoding="utf-8") as f:
            data = json.load(f)
        change(data)
        out = path("variant.json")
        with open(out, "w", encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
        compare(f"tokenizers bpe, {label}", out, Tokenizer.from_file(out), check_round_trip=False)
    hf = hf_bpe(500, 3, False)
    hf.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True),
                           AddedToken("[SEP]", rstrip=True, special=True)])
    hf.add_tokens([AddedToken("ab", normalized=True), AddedToken("ess", normalized=False)])
    out = path("hf_added.json")
    hf.save(out)
    compare("tokenizers bpe with added tokens", out, hf, check_round_trip=False)
    classic = ByteLevelBPETokenizer()
    classic.train_from_iterator([CORPUS], vocab_size=600, min_frequency=2,
                                special_tokens=SPECIALS, show_progress=False)
    out = path("hf_classic.json")
    classic.save(out)
    compare("tokenizers ByteLevelBPETokenizer", out, Tokenizer.from_file(out),
            check_round_trip=False)

    # The two trainers agree.
    for vocab_size, min_frequency in ((700, 2), (3000, 1), (400, 5), (5000, 50)):
        mine = path(f"eagle_train_{vocab_size}.json")
        run("train-bpe", path("corpus.txt"), mine, str(vocab_size), str(min_frequency), "0",
            *SPECIALS)
        theirs = path(f"hf_train_{vocab_size}.json")
        hf_bpe(vocab_size, min_frequency, False).save(theirs)
        models_ = []
        for name in (mine, theirs):
            with open(name, encoding="utf-8") as f:
                model = json.load(f)["model"]
            merges = [m if isinstance(m, list) else m.split(" ", 1) for m in model["merges"]]
            models_.append((model["vocab"], merges))
        (v1, m1), (v2, m2) = models_
        if v1 != v2 or m1 != m2:
            first = next((i for i, (a, b) in enumerate(zip(m1, m2)) if a != b), min(len(m1),
                                                                                     len(m2)))
            fail(f"training (vocab_size={vocab_size}, min_frequency={min_frequency}): Eagle made "
                 f"{len(m1)} merges, tokenizers {len(m2)}; first difference at merge {first}: "
                 f"{m1[first:first + 1]} vs {m2[first:first + 1]}")
        else:
            print(f"training (vocab_size={vocab_size}, min_frequency={min_frequency}): same "
                  f"{len(v1)} tokens and {len(m1)} merges")

    if failures:
        print(f"check_tokenizers.py: {len(failures)} failures", file=sys.stderr)
        sys.exit(1)
    print("check_tokenizers.py: ok")


if __name__ == "__main__":
    main()
