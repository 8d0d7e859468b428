/* Tokenizers: GPT-2's byte table and word pattern, byte-level BPE training (merges worked out by
 * hand, the tie rule, min_frequency, the vocabulary size, a merge that makes an existing token,
 * determinism), encoding and decoding (round trips of arbitrary bytes, invalid UTF-8 included;
 * special tokens; the word cache shared by threads), the character tokenizer, and argument
 * errors. The file format is tests/test_tokenizer_json.c's; agreement with Hugging Face's
 * library is test_interop_tokenizers'. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"
#include "text/internal.h"
#include "text/unicode.h"
#include "test_util.h"

/* ---- helpers ---- */

static int32_t id_of(const eg_tokenizer *tok, const char *token) {
    int32_t id = eg_tokenizer_token_to_id(tok, token, strlen(token));
    if (id < 0) fail_msg("no token \"%s\"", token);
    return id;
}

/* Fails unless tok encodes text[0 .. n) to the n_expected ids given after it. */
static void assert_encodes(const eg_tokenizer *tok, const char *text, size_t n, size_t n_expected,
                           ...) {
    int32_t *ids;
    size_t n_ids;
    assert_int_equal(eg_tokenizer_encode(tok, text, n, &ids, &n_ids), EG_OK);
    va_list args;
    va_start(args, n_expected);
    bool same = n_ids == n_expected;
    int32_t expected[64];
    for (size_t i = 0; i < n_expected && i < 64; i++) {
        expected[i] = va_arg(args, int32_t);
        if (same && ids[i] != expected[i]) same = false;
    }
    va_end(args);
    if (!same) {
        char got[512] = "", want[512] = "";
        for (size_t i = 0; i < n_ids && strlen(got) < 480; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), " %d", (int)ids[i]);
        for (size_t i = 0; i < n_expected && i < 64 && strlen(want) < 480; i++)
            snprintf(want + strlen(want), sizeof want - strlen(want), " %d", (int)expected[i]);
        free(ids);
        fail_msg("\"%.*s\": ids%s, expected%s", (int)n, text, got, want);
    }
    free(ids);
}

/* The token texts of merge `rank` ("a" + "b"). */
static void assert_merge(const eg_tokenizer *tok, int32_t rank, const char *left,
                         const char *right) {
    int32_t l, r, m;
    assert_int_equal(eg_tokenizer_merge(tok, rank, &l, &r, &m), EG_OK);
    size_t n;
    const char *lt = eg_tokenizer_id_to_token(tok, l, &n),
               *rt = eg_tokenizer_id_to_token(tok, r, &n);
    if (strcmp(lt, left) != 0 || strcmp(rt, right) != 0)
        fail_msg("merge %d is \"%s\" + \"%s\", expected \"%s\" + \"%s\"", (int)rank, lt, rt, left,
                 right);
    char joined[128];
    snprintf(joined, sizeof joined, "%s%s", left, right);
    assert_string_equal(eg_tokenizer_id_to_token(tok, m, NULL), joined);
}

static eg_tokenizer *train(const char *text, int32_t vocab_size, int64_t min_frequency,
                           const char *const *specials, int32_t n_specials) {
    eg_bpe_options o = eg_bpe_options_default();
    o.vocab_size = vocab_size;
    o.min_frequency = min_frequency;
    o.special_tokens = specials;
    o.n_special_tokens = n_specials;
    eg_tokenizer *tok = eg_tokenizer_train_bpe(text, strlen(text), &o);
    assert_non_null(tok);
    return tok;
}

/* Pseudo-English with accents, digits and whitespace runs. */
static char *corpus(size_t n, uint32_t seed) {
    static const char *const words[] = {"the ",   "and ",  "of ",      "LORD ", "unto ",   "said, ",
                                        "he ",    "it's ", "café ",    "42 ",   "\n",      "  ",
                                        "naïve ", "😀 ",    "they'll ", "\t",    "Straße ", "ab"};
    char *text = malloc(n + 16);
    size_t used = 0;
    uint32_t state = seed;
    while (used < n) {
        state = state * 1664525u + 1013904223u;
        const char *w = words[(state >> 16) % (sizeof words / sizeof words[0])];
        size_t len = strlen(w);
        memcpy(text + used, w, len);
        used += len;
    }
    text[used] = '\0';
    return text;
}

/* ---- GPT-2's table and pattern ---- */

static void test_byte_table(void **state) {
    (void)state;
    assert_int_equal(eg__byte_to_char(' '), 0x120);  /* 'Ġ' */
    assert_int_equal(eg__byte_to_char('\n'), 0x10A); /* 'Ċ' */
    assert_int_equal(eg__byte_to_char('a'), 'a');
    assert_int_equal(eg__byte_to_char(0x00), 0x100);
    assert_int_equal(eg__byte_to_char(0x7F), 0x121);
    assert_int_equal(eg__byte_to_char(0xA0), 0x142);
    assert_int_equal(eg__byte_to_char(0xAD), 0x143);
    assert_int_equal(eg__byte_to_char(0xFF), 0xFF);
    bool seen[0x144] = {false};
    for (int b = 0; b < 256; b++) {
        uint32_t c = eg__byte_to_char((uint8_t)b);
        assert_true(c < 0x144 && !seen[c]);
        seen[c] = true;
        assert_int_equal(eg__char_to_byte(c), b);
    }
    assert_int_equal(eg__char_to_byte(' '), -1);
    assert_int_equal(eg__char_to_byte(0x144), -1);
    assert_int_equal(eg__char_to_byte(0xAD), -1);
}

/* The words GPT-2's pattern cuts text into, joined by '|'. */
static void assert_words(const char *text, size_t n, const char *expected) {
    char got[512] = "";
    size_t used = 0;
    for (size_t at = 0; at < n;) {
        size_t len = eg__gpt2_word_length((const uint8_t *)text, n, at);
        assert_true(len >= 1 && at + len <= n);
        if (used) got[used++] = '|';
        memcpy(got + used, text + at, len);
        used += len;
        at += len;
    }
    got[used] = '\0';
    if (strcmp(got, expected) != 0)
        fail_msg("\"%s\" splits as \"%s\", expected \"%s\"", text, got, expected);
}

static void test_gpt2_pattern(void **state) {
    (void)state;
    /* The same splits as tokenizers' ByteLevel(add_prefix_space=False).pre_tokenize_str. */
    static const char *const cases[][2] = {
        {"Hello world", "Hello| world"},
        {"it's", "it|'s"},
        {"don't we'll they've I'm you're he'd", "don|'t| we|'ll| they|'ve| I|'m| you|'re| he|'d"},
        {"a   b", "a|  | b"},
        {"a\n\nb", "a|\n|\n|b"},
        {"a \n b", "a| \n| b"},
        {"x  ", "x|  "},
        {"3.14", "3|.|14"},
        {" 😀!", " 😀!"},
        {"é1", "é|1"},
        {"''s", "''|s"},
        {" 's", " '|s"},
        {"'S", "'|S"},
        {"\xc2\xa0"
         "a",
         "\xc2\xa0|a"},
        {"A\xe2\x80\x89"
         "B",
         "A|\xe2\x80\x89|B"},
        {"x1y2", "x|1|y|2"},
        {"  leading", " | leading"},
        {"Ⅻ½٣", "Ⅻ½٣"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_words(cases[i][0], strlen(cases[i][0]), cases[i][1]);
    /* Ill-formed bytes are characters of their own class; a NUL is one too. */
    assert_words("\xff\xfe a", 4, "\xff\xfe| a");
    assert_words("a\0b", 3, "a|\0|b");
    assert_words("\xe2\x82 x", 4, "\xe2\x82| x");
}

static void test_unicode_classes(void **state) {
    (void)state;
    assert_int_equal(eg__unicode_classify('a'), EG__UNICODE_LETTER);
    assert_int_equal(eg__unicode_classify(0xE9), EG__UNICODE_LETTER);   /* é */
    assert_int_equal(eg__unicode_classify(0x4E2D), EG__UNICODE_LETTER); /* 中 */
    assert_int_equal(eg__unicode_classify(0x0663), EG__UNICODE_NUMBER); /* ٣ */
    assert_int_equal(eg__unicode_classify(0x216B), EG__UNICODE_NUMBER); /* Ⅻ (Nl) */
    assert_int_equal(eg__unicode_classify(0xBD), EG__UNICODE_NUMBER);   /* ½ (No) */
    assert_int_equal(eg__unicode_classify(0x0301), EG__UNICODE_OTHER);  /* a combining mark */
    assert_int_equal(eg__unicode_classify(0x1F600), EG__UNICODE_OTHER); /* 😀 */
    assert_int_equal(eg__unicode_classify(0x3000), EG__UNICODE_SPACE);
    assert_int_equal(eg__unicode_classify(0x85), EG__UNICODE_SPACE);
    assert_int_equal(eg__unicode_classify(0x200B), EG__UNICODE_OTHER); /* zero width: Cf */
    assert_int_equal(eg__unicode_classify(0x180E), EG__UNICODE_OTHER); /* not Zs since 6.3 */
    assert_int_equal(eg__unicode_classify(EG__UTF8_INVALID), EG__UNICODE_OTHER);
    assert_int_equal(eg__unicode_classify(0x10FFFF), EG__UNICODE_OTHER);
    for (size_t i = 1; i < eg__unicode_n_ranges; i++)
        assert_true(eg__unicode_ranges[i - 1].last < eg__unicode_ranges[i].first);
    uint32_t cp;
    assert_int_equal(eg__utf8_next((const uint8_t *)"\xc0\x80", 2, &cp), 1); /* overlong */
    assert_int_equal(cp, EG__UTF8_INVALID);
    assert_int_equal(eg__utf8_next((const uint8_t *)"\xed\xa0\x80", 3, &cp), 1); /* surrogate */
    assert_int_equal(eg__utf8_next((const uint8_t *)"\xf0\x9f\x98\x80", 4, &cp), 4);
    assert_int_equal(cp, 0x1F600);
    assert_int_equal(eg__utf8_next((const uint8_t *)"\xf0\x9f\x98", 3, &cp), 1); /* cut short */
}

/* ---- training ---- */

/* The 256 byte tokens in code point order: '!' .. '~' are 0 .. 93, 'Ġ' (U+0120) is 220. */
#define BYTE_ID(c) ((int32_t)(c) - '!')
#define SPACE_ID   220

static void test_train_by_hand(void **state) {
    (void)state;
    /* Words "ab" (1), " ab" (2), " abc" (1): (a, b) occurs 4 times, (Ġ, a) 3, (b, c) 1. Then
     * (Ġ, ab) 3 times, (ab, c) once; then (Ġab, c) once; then nothing is left to merge. */
    eg_tokenizer *tok = train("ab ab ab abc", 1000, 1, NULL, 0);
    assert_int_equal(eg_tokenizer_vocab_size(tok), 259);
    assert_int_equal(eg_tokenizer_n_merges(tok), 3);
    assert_merge(tok, 0, "a", "b");
    assert_merge(tok, 1, "Ġ", "ab");
    assert_merge(tok, 2, "Ġab", "c");
    assert_int_equal(id_of(tok, "a"), BYTE_ID('a'));
    assert_int_equal(id_of(tok, "Ġ"), SPACE_ID);
    assert_int_equal(id_of(tok, "ab"), 256);
    assert_int_equal(id_of(tok, "Ġab"), 257);
    assert_int_equal(id_of(tok, "Ġabc"), 258);
    assert_encodes(tok, "ab abc abx", 10, 4, 256, 258, 257, BYTE_ID('x'));
    assert_encodes(tok, "cab", 3, 2, BYTE_ID('c'), 256);
    eg_tokenizer_free(tok);

    /* min_frequency 2: after (a, b) (4 times) and (Ġ, ab) (3), (Ġab, c) occurs once. */
    tok = train("ab ab ab abc", 1000, 2, NULL, 0);
    assert_int_equal(eg_tokenizer_n_merges(tok), 2);
    eg_tokenizer_free(tok);
    /* min_frequency 4 keeps only the first; the vocabulary size can stop earlier still. */
    tok = train("ab ab ab abc", 1000, 4, NULL, 0);
    assert_int_equal(eg_tokenizer_n_merges(tok), 1);
    eg_tokenizer_free(tok);
    tok = train("ab ab ab abc", 258, 1, NULL, 0);
    assert_int_equal(eg_tokenizer_n_merges(tok), 2);
    assert_int_equal(eg_tokenizer_vocab_size(tok), 258);
    eg_tokenizer_free(tok);
    tok = train("ab ab ab abc", 10, 1, NULL, 0); /* below the alphabet: no merges */
    assert_int_equal(eg_tokenizer_n_merges(tok), 0);
    assert_int_equal(eg_tokenizer_vocab_size(tok), 256);
    eg_tokenizer_free(tok);
}

static void test_train_ties(void **state) {
    (void)state;
    /* Every pair of "ab cd" occurs once: (a, b) = (64, 65) comes first, then (c, d) = (66, 67)
     * before (Ġ, c) = (220, 66), then (Ġ, cd). */
    eg_tokenizer *tok = train("ab cd", 1000, 1, NULL, 0);
    assert_int_equal(eg_tokenizer_n_merges(tok), 3);
    assert_merge(tok, 0, "a", "b");
    assert_merge(tok, 1, "c", "d");
    assert_merge(tok, 2, "Ġ", "cd");
    eg_tokenizer_free(tok);
    /* Overlapping pairs: "aaaa" holds (a, a) three times but merges into two "aa" at once. */
    tok = train("aaaa", 1000, 1, NULL, 0);
    assert_int_equal(eg_tokenizer_n_merges(tok), 2);
    assert_merge(tok, 0, "a", "a");
    assert_merge(tok, 1, "aa", "aa");
    assert_encodes(tok, "aaaaa", 5, 2, id_of(tok, "aaaa"), BYTE_ID('a'));
    assert_encodes(tok, "aaa", 3, 2, id_of(tok, "aa"), BYTE_ID('a'));
    eg_tokenizer_free(tok);
}

static void test_train_specials(void **state) {
    (void)state;
    /* A merge whose text is already a token (here the special token "ab") reuses its id. */
    const char *specials[] = {"ab", "<pad>"};
    eg_tokenizer *tok = train("ab ab", 1000, 1, specials, 2);
    assert_int_equal(eg_tokenizer_vocab_size(tok), 2 + 256 + 1);
    int32_t left, right, merged;
    assert_int_equal(eg_tokenizer_merge(tok, 0, &left, &right, &merged), EG_OK);
    assert_int_equal(merged, 0);
    assert_merge(tok, 1, "Ġ", "ab");
    assert_true(eg_tokenizer_is_special(tok, 0) && eg_tokenizer_is_special(tok, 1));
    assert_false(eg_tokenizer_is_special(tok, 2));
    assert_false(eg_tokenizer_is_special(tok, -1));
    assert_int_equal(id_of(tok, "a"), 2 + BYTE_ID('a'));
    /* In text the special tokens win over the merges: "<pad>" is one token, not five bytes, and
     * " ab" is a space and the special "ab", although training merged "Ġab". */
    assert_encodes(tok, "x<pad>y ab", 10, 5, 2 + BYTE_ID('x'), 1, 2 + BYTE_ID('y'), 2 + SPACE_ID,
                   0);
    assert_int_equal(id_of(tok, "Ġab"), 258);
    eg_tokenizer_free(tok);
}

static void test_train_deterministic(void **state) {
    (void)state;
    char *text = corpus(200000, 3);
    eg_bpe_options o = eg_bpe_options_default();
    o.vocab_size = 350;
    char *json[2];
    size_t n[2];
    for (int i = 0; i < 2; i++) {
        eg_tokenizer *tok = eg_tokenizer_train_bpe(text, strlen(text), &o);
        assert_non_null(tok);
        assert_int_equal(eg_tokenizer_vocab_size(tok), 350);
        assert_int_equal(eg_tokenizer_to_json(tok, &json[i], &n[i]), EG_OK);
        eg_tokenizer_free(tok);
    }
    assert_int_equal(n[0], n[1]);
    assert_memory_equal(json[0], json[1], n[0]);
    free(json[0]);
    free(json[1]);
    free(text);
}

/* ---- encoding and decoding ---- */

static void assert_round_trip(const eg_tokenizer *tok, const char *text, size_t n) {
    int32_t *ids;
    size_t n_ids;
    assert_int_equal(eg_tokenizer_encode(tok, text, n, &ids, &n_ids), EG_OK);
    for (size_t i = 0; i < n_ids; i++)
        assert_true(ids[i] >= 0 && ids[i] < eg_tokenizer_vocab_size(tok));
    char *back;
    size_t back_n;
    assert_int_equal(eg_tokenizer_decode(tok, ids, n_ids, false, &back, &back_n), EG_OK);
    assert_int_equal(back_n, n);
    assert_memory_equal(back, text, n);
    assert_int_equal(back[back_n], '\0');
    free(back);
    free(ids);
}

static void test_round_trip(void **state) {
    (void)state;
    char *text = corpus(100000, 5);
    const char *specials[] = {"<|endoftext|>"};
    eg_tokenizer *tok = train(text, 600, 2, specials, 1);
    assert_round_trip(tok, text, strlen(text));
    static const char *const fixed[] = {"",
                                        " ",
                                        "\n\n\n",
                                        "Hello, world!",
                                        "naïve café 😀",
                                        "   spaces   ",
                                        "<|endoftext|>",
                                        "a<|endoftext|>b",
                                        "中文字符",
                                        "\t\r\n",
                                        "the the the"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        assert_round_trip(tok, fixed[i], strlen(fixed[i]));
    /* Arbitrary bytes: ill-formed UTF-8, NULs, lone continuation bytes, all 256 values. */
    uint32_t seed = 12345;
    char bytes[300];
    for (int round = 0; round < 2000; round++) {
        size_t n = (size_t)(round % 97);
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            /* Half the time from a small set, so that words and merges occur. */
            bytes[i] =
                (seed >> 24) & 1 ? "ab  \n\xc3\xa9\xff\x80"[(seed >> 8) % 10] : (char)(seed >> 16);
        }
        assert_round_trip(tok, bytes, n);
    }
    for (int b = 0; b < 256; b++) bytes[b] = (char)b;
    assert_round_trip(tok, bytes, 256);
    eg_tokenizer_free(tok);
    free(text);
}

static void test_decode(void **state) {
    (void)state;
    const char *specials[] = {"<pad>", "<my token>"};
    eg_tokenizer *tok = train("hello world", 300, 1, specials, 2);
    int32_t ids[] = {0, id_of(tok, "hello"), 1, id_of(tok, "Ġworld"), 0};
    char *text;
    size_t n;
    assert_int_equal(eg_tokenizer_decode(tok, ids, 5, false, &text, &n), EG_OK);
    /* A token with a character outside GPT-2's table (the space) is its own text. */
    assert_string_equal(text, "<pad>hello<my token> world<pad>");
    free(text);
    assert_int_equal(eg_tokenizer_decode(tok, ids, 5, true, &text, &n), EG_OK);
    assert_string_equal(text, "hello world");
    assert_int_equal(n, 11);
    free(text);
    assert_int_equal(eg_tokenizer_decode(tok, NULL, 0, true, &text, &n), EG_OK);
    assert_string_equal(text, "");
    free(text);
    int32_t bad[] = {0, 4000};
    assert_int_equal(eg_tokenizer_decode(tok, bad, 2, false, &text, &n), EG_ERR_INVALID_ARGUMENT);
    assert_null(text);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "tokenizer_decode: ids[1] is 4000",
                            "outside the vocabulary", NULL);
    assert_int_equal(eg_tokenizer_decode(tok, ids, 1, false, NULL, &n), EG_ERR_NULL_ARGUMENT);
    expect_error(EG_ERR_NULL_ARGUMENT);
    eg_tokenizer_free(tok);
}

static void test_add_special_token(void **state) {
    (void)state;
    eg_tokenizer *tok = train("hello world", 300, 1, NULL, 0);
    int32_t n = eg_tokenizer_vocab_size(tok), id;
    assert_int_equal(eg_tokenizer_add_special_token(tok, "<eos>", &id), EG_OK);
    assert_int_equal(id, n);
    assert_int_equal(eg_tokenizer_vocab_size(tok), n + 1);
    assert_true(eg_tokenizer_is_special(tok, id));
    assert_encodes(tok, "hello<eos>", 10, 2, id_of(tok, "hello"), n);
    /* An existing token becomes special and is then split out of text whole. */
    int32_t hello = id_of(tok, "hello");
    assert_int_equal(eg_tokenizer_add_special_token(tok, "hello", &id), EG_OK);
    assert_int_equal(id, hello);
    assert_true(eg_tokenizer_is_special(tok, hello));
    assert_int_equal(eg_tokenizer_vocab_size(tok), n + 1);
    assert_encodes(tok, "xhellox", 7, 3, BYTE_ID('x'), hello, BYTE_ID('x'));
    /* The longest special token wins where two start. */
    assert_int_equal(eg_tokenizer_add_special_token(tok, "hello world", &id), EG_OK);
    assert_encodes(tok, "hello world!", 12, 2, id, BYTE_ID('!'));
    assert_int_equal(eg_tokenizer_add_special_token(tok, "", &id), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "special token 0 is empty", NULL);
    assert_int_equal(eg_tokenizer_add_special_token(tok, "\xff", &id), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "not well-formed UTF-8", NULL);
    assert_int_equal(eg_tokenizer_add_special_token(NULL, "x", &id), EG_ERR_NULL_ARGUMENT);
    expect_error(EG_ERR_NULL_ARGUMENT);
    eg_tokenizer_free(tok);
}

static void test_char_tokenizer(void **state) {
    (void)state;
    const char *specials[] = {"<pad>", "<unk>", "d"};
    eg_char_options o = {specials, 3, "<unk>"};
    const char *text = "hello wörld\n";
    eg_tokenizer *tok = eg_tokenizer_train_char(text, strlen(text), &o);
    assert_non_null(tok);
    /* The specials, then "\n", " ", e, h, l, o, r, w, ö by code point ("d" is a special). */
    static const char *const vocab[] = {"<pad>", "<unk>", "d", "\n", " ", "e",
                                        "h",     "l",     "o", "r",  "w", "ö"};
    assert_int_equal(eg_tokenizer_vocab_size(tok), 12);
    for (int32_t i = 0; i < 12; i++)
        assert_string_equal(eg_tokenizer_id_to_token(tok, i, NULL), vocab[i]);
    assert_int_equal(eg_tokenizer_n_merges(tok), 0);
    assert_encodes(tok, "hold ö", 7, 6, 6, 8, 7, 2, 4, 11);
    /* Unknown characters, and bytes that are not UTF-8, become <unk> one by one. */
    assert_encodes(tok, "hz\xff<pad>", 8, 4, 6, 1, 1, 0);
    char *back;
    size_t n;
    int32_t ids[] = {6, 5, 7, 7, 8, 0};
    assert_int_equal(eg_tokenizer_decode(tok, ids, 6, false, &back, &n), EG_OK);
    assert_string_equal(back, "hello<pad>");
    free(back);
    eg_tokenizer_free(tok);

    /* Without an unknown token they are left out, as Hugging Face's BPE model does. */
    tok = eg_tokenizer_train_char(text, strlen(text), NULL);
    assert_int_equal(eg_tokenizer_vocab_size(tok), 10);
    assert_encodes(tok, "hzo", 3, 2, id_of(tok, "h"), id_of(tok, "o"));
    eg_tokenizer_free(tok);
    tok = eg_tokenizer_train_char(NULL, 0, &o);
    assert_int_equal(eg_tokenizer_vocab_size(tok), 3);
    eg_tokenizer_free(tok);

    assert_null(eg_tokenizer_train_char("ab\xc3", 3, NULL));
    expect_error_containing(EG_ERR_FORMAT, "not well-formed UTF-8 at byte 2", NULL);
    const char *repeated[] = {"<pad>", "<pad>"};
    eg_char_options bad = {repeated, 2, NULL};
    assert_null(eg_tokenizer_train_char("ab", 2, &bad));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "\"<pad>\" is given twice", NULL);
    eg_char_options bad_unk = {specials, 3, "<oov>"};
    assert_null(eg_tokenizer_train_char("ab", 2, &bad_unk));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "unk_token \"<oov>\" is not one of", NULL);
    assert_null(eg_tokenizer_train_char(NULL, 2, NULL));
    expect_error(EG_ERR_NULL_ARGUMENT);
    assert_null(eg_tokenizer_train_char_file("/nonexistent/corpus", NULL));
    expect_error_containing(EG_ERR_IO, "/nonexistent/corpus: cannot open", NULL);
}

static void test_bpe_arguments(void **state) {
    (void)state;
    eg_bpe_options o = eg_bpe_options_default();
    assert_int_equal(o.vocab_size, 1000);
    assert_int_equal(o.min_frequency, 2);
    o.vocab_size = 0;
    assert_null(eg_tokenizer_train_bpe("ab", 2, &o));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "vocab_size 0", NULL);
    o = eg_bpe_options_default();
    o.min_frequency = -1;
    assert_null(eg_tokenizer_train_bpe("ab", 2, &o));
    expect_error(EG_ERR_INVALID_ARGUMENT);
    o = eg_bpe_options_default();
    o.n_special_tokens = -1;
    assert_null(eg_tokenizer_train_bpe("ab", 2, &o));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "n_special_tokens is -1", NULL);
    o.n_special_tokens = 1;
    assert_null(eg_tokenizer_train_bpe("ab", 2, &o));
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "special_tokens is NULL", NULL);
    assert_null(eg_tokenizer_train_bpe(NULL, 1, NULL));
    expect_error(EG_ERR_NULL_ARGUMENT);
    assert_null(eg_tokenizer_train_bpe_file(NULL, NULL));
    expect_error(EG_ERR_NULL_ARGUMENT);
    eg_tokenizer *tok = eg_tokenizer_train_bpe(NULL, 0, NULL); /* an empty corpus: bytes only */
    assert_int_equal(eg_tokenizer_vocab_size(tok), 256);

    int32_t *ids = (int32_t *)1;
    size_t n = 7;
    assert_int_equal(eg_tokenizer_encode(NULL, "a", 1, &ids, &n), EG_ERR_NULL_ARGUMENT);
    assert_null(ids);
    assert_int_equal(n, 0);
    expect_error_containing(EG_ERR_NULL_ARGUMENT, "tokenizer_encode: tok is NULL", NULL);
    assert_int_equal(eg_tokenizer_encode(tok, NULL, 1, &ids, &n), EG_ERR_NULL_ARGUMENT);
    expect_error(EG_ERR_NULL_ARGUMENT);
    assert_int_equal(eg_tokenizer_encode(tok, NULL, 0, &ids, &n), EG_OK);
    assert_null(ids);
    assert_int_equal(n, 0);
    assert_int_equal(eg_tokenizer_merge(tok, 0, NULL, NULL, NULL), EG_ERR_INVALID_ARGUMENT);
    expect_error_containing(EG_ERR_INVALID_ARGUMENT, "rank 0 is outside", NULL);
    assert_int_equal(eg_tokenizer_merge(NULL, 0, NULL, NULL, NULL), EG_ERR_NULL_ARGUMENT);
    expect_error(EG_ERR_NULL_ARGUMENT);
    assert_null(eg_tokenizer_id_to_token(tok, 256, NULL));
    assert_null(eg_tokenizer_id_to_token(NULL, 0, NULL));
    assert_int_equal(eg_tokenizer_token_to_id(tok, "zz", 2), -1);
    assert_int_equal(eg_tokenizer_token_to_id(NULL, "a", 1), -1);
    assert_int_equal(eg_tokenizer_vocab_size(NULL), 0);
    assert_int_equal(eg_tokenizer_n_merges(NULL), 0);
    eg_tokenizer_free(tok);
    eg_tokenizer_free(NULL);
}

static void test_encode_tensor(void **state) {
    (void)state;
    eg_tokenizer *tok = train("ab ab ab abc", 1000, 1, NULL, 0);
    eg_tensor *t = eg_tokenizer_encode_tensor(tok, "ab abc", 6, EG_DTYPE_I64);
    assert_non_null(t);
    assert_int_equal(eg_tensor_n_dims(t), 1);
    assert_int_equal(eg_tensor_shape(t)[0], 2);
    const int64_t *v = eg_tensor_data(t);
    assert_int_equal(v[0], 256);
    assert_int_equal(v[1], 258);
    eg_tensor *t32 = eg_tokenizer_encode_tensor(tok, "ab", 2, EG_DTYPE_I32);
    assert_int_equal(((const int32_t *)eg_tensor_data(t32))[0], 256);
    eg_tensor *empty = eg_tokenizer_encode_tensor(tok, "", 0, EG_DTYPE_I32);
    assert_int_equal(eg_tensor_shape(empty)[0], 0);
    assert_null(eg_tokenizer_encode_tensor(tok, "ab", 2, EG_DTYPE_F32));
    expect_error_containing(EG_ERR_DTYPE, "dtype f32", NULL);
    eg_tokenizer_free(tok);
}

/* ---- threads ---- */

typedef struct encode_job {
    const eg_tokenizer *tok;
    const char *text;
    int32_t *ids;
    size_t n;
    eg_status status;
} encode_job;

static void *encode_thread(void *arg) {
    encode_job *job = arg;
    job->status = eg_tokenizer_encode(job->tok, job->text, strlen(job->text), &job->ids, &job->n);
    return NULL;
}

static void test_threads_share_the_cache(void **state) {
    (void)state;
    char *text = corpus(300000, 9);
    eg_tokenizer *tok = train(text, 500, 2, NULL, 0);
    encode_job jobs[4];
    pthread_t threads[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (encode_job){tok, text, NULL, 0, EG_OK};
        assert_int_equal(pthread_create(&threads[i], NULL, encode_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(threads[i], NULL);
    int32_t *alone;
    size_t n;
    assert_int_equal(eg_tokenizer_encode(tok, text, strlen(text), &alone, &n), EG_OK);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(jobs[i].status, EG_OK);
        assert_int_equal(jobs[i].n, n);
        assert_memory_equal(jobs[i].ids, alone, n * sizeof(int32_t));
        free(jobs[i].ids);
    }
    free(alone);
    eg_tokenizer_free(tok);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define CASE(name) cmocka_unit_test_setup_teardown(name, fresh_scope_setup, strict_scope_teardown)
        CASE(test_byte_table),
        CASE(test_gpt2_pattern),
        CASE(test_unicode_classes),
        CASE(test_train_by_hand),
        CASE(test_train_ties),
        CASE(test_train_specials),
        CASE(test_train_deterministic),
        CASE(test_round_trip),
        CASE(test_decode),
        CASE(test_add_special_token),
        CASE(test_char_tokenizer),
        CASE(test_bpe_arguments),
        CASE(test_encode_tensor),
        CASE(test_threads_share_the_cache),
#undef CASE
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
