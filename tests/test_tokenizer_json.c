/* tokenizer.json: a file Hugging Face's tokenizers wrote (tests/data/hf_bpe_tokenizer.json, with
 * the ids that library gives, recorded), save -> load giving the same ids and the same file, both
 * forms of merges, the BPE model's options (fuse_unk, ignore_merges, a repeated merge, no
 * decoder) with the ids the library gives for them, and malformed files: each gives its error
 * and message, every truncation of a good file is refused, none crashes. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "eagle.h"
#include "test_util.h"

static void assert_ids(const eg_tokenizer *tok, const char *text, const int32_t *expected,
                       size_t n_expected) {
    int32_t *ids;
    size_t n;
    assert_int_equal(eg_tokenizer_encode(tok, text, strlen(text), &ids, &n), EG_OK);
    bool same = n == n_expected && (n == 0 || memcmp(ids, expected, n * sizeof *ids) == 0);
    if (!same) {
        char got[1024] = "";
        for (size_t i = 0; i < n && strlen(got) < 1000; i++)
            snprintf(got + strlen(got), sizeof got - strlen(got), " %d", (int)ids[i]);
        free(ids);
        fail_msg("\"%s\": ids%s (%zu ids, expected %zu)", text, got, n, n_expected);
    }
    free(ids);
}

#define ASSERT_IDS(tok, text, ...)                                                                 \
    do {                                                                                           \
        const int32_t expected_[] = {__VA_ARGS__};                                                 \
        assert_ids(tok, text, expected_, sizeof expected_ / sizeof expected_[0]);                  \
    } while (0)

static char *temp_path(const char *name) {
    static char path[256];
    snprintf(path, sizeof path, "/tmp/eagle_tokenizer_json_%d_%s", (int)getpid(), name);
    return path;
}

/* ---- files Hugging Face wrote ---- */

static void test_hf_file(void **state) {
    (void)state;
    eg_tokenizer *tok = eg_tokenizer_load(EG_TEST_DATA_DIR "/hf_bpe_tokenizer.json");
    assert_non_null(tok);
    assert_int_equal(eg_tokenizer_vocab_size(tok), 291);
    /* tokenizers 0.23's Tokenizer.encode(text).ids for the same texts. */
    ASSERT_IDS(tok, "In the beginning God created the heaven", 281, 259, 221, 287, 71, 267, 78, 267,
               71, 277, 221, 288, 260, 84, 289, 259, 221, 72, 260, 86, 69, 78);
    /* "<mask>" takes the spaces before it (lstrip). */
    ASSERT_IDS(tok, "It's the earth's  <mask> face.<|endoftext|>", 282, 279, 259, 276, 279, 290,
               271, 284, 69, 14, 0);
    ASSERT_IDS(tok, "naïve 😀\n\n  x", 78, 65, 128, 108, 86, 69, 221, 173, 254, 247, 223, 199, 199,
               221, 221, 88);
    const int32_t ids[] = {282, 279, 259, 276, 279, 290, 271, 284, 69, 14, 0};
    char *text;
    size_t n;
    assert_int_equal(eg_tokenizer_decode(tok, ids, 11, true, &text, &n), EG_OK);
    assert_string_equal(text, "It's the earth's face.");
    free(text);
    assert_true(eg_tokenizer_is_special(tok, 0) && eg_tokenizer_is_special(tok, 290));
    eg_tokenizer_free(tok);
}

/* A BPE model without pre-tokenizer over vocab {<unk> a b c ab abc bc}. */
static eg_tokenizer *small_model(const char *merges, const char *options) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"<unk>\": 0, \"a\": 1, \"b\": 2, \"c\": "
             "3, \"ab\": 4, \"abc\": 5, \"bc\": 6}, \"merges\": [%s]%s%s}}",
             merges, *options ? ", " : "", options);
    eg_tokenizer *tok = eg_tokenizer_from_json(json, strlen(json));
    if (!tok) fail_msg("%s: %s", json, eg_last_error());
    return tok;
}

static void test_model_options(void **state) {
    (void)state;
    /* Each expectation is what tokenizers 0.23 gives for the same file and text. */
    eg_tokenizer *tok =
        small_model("[\"a\", \"b\"]", "\"unk_token\": \"<unk>\", \"fuse_unk\": true");
    ASSERT_IDS(tok, "xyab zq", 0, 4, 0);
    eg_tokenizer_free(tok);
    tok = small_model("[\"a\", \"b\"]", "\"unk_token\": \"<unk>\"");
    ASSERT_IDS(tok, "xyab zq", 0, 0, 4, 0, 0, 0);
    eg_tokenizer_free(tok);
    tok = small_model("[\"a\", \"b\"]", "\"unk_token\": null");
    ASSERT_IDS(tok, "xyab zq", 4);
    /* No decoder: the tokens joined with spaces. */
    char *text;
    size_t n;
    assert_int_equal(eg_tokenizer_decode(tok, (const int32_t[]){1, 2, 3}, 3, false, &text, &n),
                     EG_OK);
    assert_string_equal(text, "a b c");
    free(text);
    eg_tokenizer_free(tok);
    tok = small_model("\"a b\", \"b c\"", "\"ignore_merges\": true");
    ASSERT_IDS(tok, "abc", 5);
    eg_tokenizer_free(tok);
    tok = small_model("\"a b\", \"b c\"", "");
    ASSERT_IDS(tok, "abc", 4, 3);
    eg_tokenizer_free(tok);
    tok = small_model("\"b c\", \"a b\"", "");
    ASSERT_IDS(tok, "abc", 1, 6);
    eg_tokenizer_free(tok);
    /* A repeated pair takes its last place: (b, c) now comes before (a, b). */
    tok = small_model("[\"a\", \"b\"], [\"b\", \"c\"], [\"a\", \"b\"]", "");
    assert_int_equal(eg_tokenizer_n_merges(tok), 2);
    ASSERT_IDS(tok, "abc", 1, 6);
    int32_t left, right;
    assert_int_equal(eg_tokenizer_merge(tok, 1, &left, &right, NULL), EG_OK);
    assert_int_equal(left, 1);
    assert_int_equal(right, 2);
    eg_tokenizer_free(tok);
}

/* ---- save and load ---- */

static char *to_json(const eg_tokenizer *tok, size_t *n) {
    char *json;
    assert_int_equal(eg_tokenizer_to_json(tok, &json, n), EG_OK);
    assert_int_equal(strlen(json), *n);
    return json;
}

static void assert_same_ids(const eg_tokenizer *a, const eg_tokenizer *b) {
    static const char *const texts[] = {"",           "hello world",    "It's 42 <pad> naïve  😀\n",
                                        "<pad><unk>", "\xff\xfe bytes", "the the the   \n\n"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t *x, *y;
        size_t nx, ny;
        assert_int_equal(eg_tokenizer_encode(a, texts[i], strlen(texts[i]), &x, &nx), EG_OK);
        assert_int_equal(eg_tokenizer_encode(b, texts[i], strlen(texts[i]), &y, &ny), EG_OK);
        assert_int_equal(nx, ny);
        if (nx) assert_memory_equal(x, y, nx * sizeof *x);
        free(x);
        free(y);
    }
}

static void test_save_load(void **state) {
    (void)state;
    const char *specials[] = {"<pad>", "<unk>"};
    eg_bpe_options o = eg_bpe_options_default();
    o.vocab_size = 400;
    o.min_frequency = 1;
    o.special_tokens = specials;
    o.n_special_tokens = 2;
    const char *corpus = "hello world, it's a \"quoted\" \\ back\\slash\ttab\n naïve 😀 the the";
    eg_tokenizer *bpe = eg_tokenizer_train_bpe(corpus, strlen(corpus), &o);
    eg_char_options c = {specials, 2, "<unk>"};
    eg_tokenizer *chars = eg_tokenizer_train_char(corpus, strlen(corpus), &c);
    eg_tokenizer *both[] = {bpe, chars};
    for (int k = 0; k < 2; k++) {
        const char *path = temp_path("save.json");
        assert_int_equal(eg_tokenizer_save(both[k], path), EG_OK);
        eg_tokenizer *loaded = eg_tokenizer_load(path);
        assert_non_null(loaded);
        assert_int_equal(eg_tokenizer_vocab_size(loaded), eg_tokenizer_vocab_size(both[k]));
        assert_int_equal(eg_tokenizer_n_merges(loaded), eg_tokenizer_n_merges(both[k]));
        assert_same_ids(both[k], loaded);
        size_t n1, n2;
        char *j1 = to_json(both[k], &n1), *j2 = to_json(loaded, &n2);
        assert_int_equal(n1, n2);
        assert_memory_equal(j1, j2, n1);
        if (k == 0) {
            assert_non_null(strstr(j1, "\"type\": \"ByteLevel\""));
            assert_non_null(strstr(j1, "\"merges\": [\n      \"")); /* "a b" strings */
            assert_non_null(strstr(j1, "\"\\\"\": 3")); /* '"' escaped: byte token 1, after 2 */
        } else {
            assert_non_null(strstr(j1, "\"type\": \"Fuse\""));
            assert_non_null(strstr(j1, "\"unk_token\": \"<unk>\""));
            assert_non_null(strstr(j1, "\"\\t\": 2")); /* the corpus's first code points */
            assert_non_null(strstr(j1, "\"\\n\": 3"));
            assert_non_null(strstr(j1, "\"pre_tokenizer\": null"));
        }
        free(j1);
        free(j2);
        eg_tokenizer_free(loaded);
        unlink(path);
    }
    assert_int_equal(eg_tokenizer_save(bpe, ""), EG_ERR_INVALID_ARGUMENT);
    expect_error(EG_ERR_INVALID_ARGUMENT);
    assert_int_equal(eg_tokenizer_save(bpe, "/nonexistent/dir/t.json"), EG_ERR_IO);
    expect_error_containing(EG_ERR_IO, "/nonexistent/dir/t.json", NULL);
    assert_int_equal(eg_tokenizer_save(NULL, "x.json"), EG_ERR_NULL_ARGUMENT);
    expect_error(EG_ERR_NULL_ARGUMENT);
    char *json = (char *)1;
    size_t n = 3;
    assert_int_equal(eg_tokenizer_to_json(NULL, &json, &n), EG_ERR_NULL_ARGUMENT);
    assert_null(json);
    expect_error(EG_ERR_NULL_ARGUMENT);
    eg_tokenizer_free(bpe);
    eg_tokenizer_free(chars);
}

static void test_merges_with_spaces(void **state) {
    (void)state;
    /* A token with a space cannot be written as "a  b": the pairs form is used instead. */
    const char *json = "{\"model\": {\"vocab\": {\"a\": 0, \" \": 1, \"b\": 2, \"a \": 3, \"a b\": "
                       "4}, \"merges\": [[\"a\", \" \"], [\"a \", \"b\"]]}, \"decoder\": "
                       "{\"type\": \"Fuse\"}}";
    eg_tokenizer *tok = eg_tokenizer_from_json(json, strlen(json));
    assert_non_null(tok);
    ASSERT_IDS(tok, "a b", 4);
    ASSERT_IDS(tok, "a ba", 4, 0);
    ASSERT_IDS(tok, "ab a", 0, 2, 1, 0);
    size_t n;
    char *written = to_json(tok, &n);
    assert_non_null(strstr(written, "[\"a \", \"b\"]"));
    eg_tokenizer *again = eg_tokenizer_from_json(written, n);
    assert_non_null(again);
    ASSERT_IDS(again, "a b", 4);
    free(written);
    eg_tokenizer_free(again);
    eg_tokenizer_free(tok);
}

/* ---- malformed files ---- */

typedef struct bad_case {
    const char *json;
    eg_status status;
    const char *message; /* after "tokenizer.json: " */
} bad_case;

#define VOCAB       "\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}"
#define MODEL(rest) "{\"model\": {" VOCAB ", \"merges\": [\"a b\"]" rest "}"

static const bad_case bad_cases[] = {
    {"", EG_ERR_FORMAT, "not valid JSON: "},
    {"{\"model\": {", EG_ERR_FORMAT, "not valid JSON: "},
    {"[]", EG_ERR_FORMAT, "the top level is array, expected an object"},
    {"{}", EG_ERR_FORMAT, "model is missing"},
    {"{\"model\": []}", EG_ERR_FORMAT, "model: expected an object, found array"},
    {"{\"model\": {\"merges\": []}}", EG_ERR_FORMAT, "model.vocab is missing"},
    {"{\"model\": {" VOCAB "}}", EG_ERR_FORMAT, "model.merges is missing"},
    {"{\"model\": {\"vocab\": [], \"merges\": []}}", EG_ERR_FORMAT,
     "model.vocab: expected an object, found array"},
    {"{\"model\": {" VOCAB ", \"merges\": {}}}", EG_ERR_FORMAT,
     "model.merges: expected an array, found object"},
    {"{\"model\": {\"type\": \"WordPiece\", " VOCAB ", \"merges\": []}}", EG_ERR_UNSUPPORTED,
     "model type \"WordPiece\" (Eagle reads BPE models) is not supported"},
    {"{\"model\": {\"type\": 3, " VOCAB ", \"merges\": []}}", EG_ERR_FORMAT,
     "model.type: expected a string, found number"},
    {"{\"model\": {\"vocab\": {\"a\": -1}, \"merges\": []}}", EG_ERR_FORMAT,
     "model.vocab[\"a\"]: expected an id (an integer 0 .. 2147483646), found number -1"},
    {"{\"model\": {\"vocab\": {\"a\": 0.5}, \"merges\": []}}", EG_ERR_FORMAT,
     "model.vocab[\"a\"]: expected an id"},
    {"{\"model\": {\"vocab\": {\"a\": \"0\"}, \"merges\": []}}", EG_ERR_FORMAT,
     "model.vocab[\"a\"]: expected an id (an integer 0 .. 2147483646), found string"},
    {"{\"model\": {\"vocab\": {\"a\": 0, \"b\": 2}, \"merges\": []}}", EG_ERR_FORMAT,
     "id 2 is used, but there are only 2 tokens"},
    {"{\"model\": {\"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", EG_ERR_FORMAT,
     "model.vocab: id 0 is given to \"a\" and \"b\""},
    {"{\"model\": {\"vocab\": {\"a\": 0, \"a\": 1}, \"merges\": []}}", EG_ERR_FORMAT,
     "model.vocab: \"a\" appears twice"},
    {"{\"model\": {\"vocab\": {\"a\": 1, \"b\": 2}, \"merges\": []}, \"added_tokens\": [{\"id\": "
     "1, \"content\": \"z\"}]}",
     EG_ERR_FORMAT, "added_tokens[0]: id 1 is \"a\" already"},
    {"{\"model\": {" VOCAB ", \"merges\": [\"ab\"]}}", EG_ERR_FORMAT,
     "model.merges[0]: \"ab\" is not two tokens separated by a space"},
    {"{\"model\": {" VOCAB ", \"merges\": [[\"a\"]]}}", EG_ERR_FORMAT,
     "model.merges[0]: expected \"left right\" or [\"left\", \"right\"], found an array of a "
     "length other than 2"},
    {"{\"model\": {" VOCAB ", \"merges\": [[\"a\", 1]]}}", EG_ERR_FORMAT,
     "model.merges[0]: expected \"left right\" or [\"left\", \"right\"], found an array of "
     "non-strings"},
    {"{\"model\": {" VOCAB ", \"merges\": [\"a b\", 7]}}", EG_ERR_FORMAT,
     "model.merges[1]: expected \"left right\" or [\"left\", \"right\"], found number"},
    {"{\"model\": {" VOCAB ", \"merges\": [[\"a\", \"x\"]]}}", EG_ERR_FORMAT,
     "model.merges[0]: \"x\" is not in model.vocab"},
    {"{\"model\": {" VOCAB ", \"merges\": [\"b a\"]}}", EG_ERR_FORMAT,
     "model.merges[0]: \"b\" + \"a\" makes a token that is not in model.vocab"},
    {MODEL(", \"unk_token\": \"<unk>\"}"), EG_ERR_FORMAT,
     "model.unk_token \"<unk>\" is not in model.vocab"},
    {MODEL(", \"unk_token\": 0}"), EG_ERR_FORMAT,
     "model.unk_token: expected a string, found number"},
    {MODEL(", \"fuse_unk\": \"yes\"}"), EG_ERR_FORMAT,
     "model.fuse_unk: expected true or false, found string"},
    {MODEL(", \"dropout\": 0.1}"), EG_ERR_UNSUPPORTED, "model.dropout 0.1 is not supported"},
    {MODEL(", \"byte_fallback\": true}"), EG_ERR_UNSUPPORTED, "model.byte_fallback true"},
    {MODEL(", \"continuing_subword_prefix\": \"##\"}"), EG_ERR_UNSUPPORTED,
     "model.continuing_subword_prefix other than \"\" or null is not supported"},
    {MODEL("}, \"added_tokens\": {}"), EG_ERR_FORMAT,
     "added_tokens: expected an array, found object"},
    {MODEL("}, \"added_tokens\": [3]"), EG_ERR_FORMAT,
     "added_tokens[0]: expected an object, found number"},
    {MODEL("}, \"added_tokens\": [{\"content\": \"x\"}]"), EG_ERR_FORMAT,
     "added_tokens[0].id is missing"},
    {MODEL("}, \"added_tokens\": [{\"id\": 3}]"), EG_ERR_FORMAT,
     "added_tokens[0].content is missing"},
    {MODEL("}, \"added_tokens\": [{\"id\": 3, \"content\": \"\"}]"), EG_ERR_FORMAT,
     "added_tokens[0].content is empty"},
    {MODEL("}, \"added_tokens\": [{\"id\": 3, \"content\": \"x\", \"special\": 1}]"), EG_ERR_FORMAT,
     "added_tokens[0].special: expected true or false, found number"},
    {MODEL("}, \"added_tokens\": [{\"id\": 3, \"content\": \"x\", \"single_word\": true}]"),
     EG_ERR_UNSUPPORTED, "added_tokens[0].single_word true is not supported"},
    {MODEL("}, \"added_tokens\": [{\"id\": 3, \"content\": \"x\"}, {\"id\": 4, \"content\": "
           "\"x\"}]"),
     EG_ERR_FORMAT, "added_tokens: \"x\" appears twice"},
    {MODEL("}, \"normalizer\": {\"type\": \"NFC\"}"), EG_ERR_UNSUPPORTED,
     "normalizer of type \"NFC\" is not supported"},
    {MODEL("}, \"truncation\": {}"), EG_ERR_UNSUPPORTED, "truncation of type \"(no type)\""},
    {MODEL("}, \"padding\": 3"), EG_ERR_UNSUPPORTED, "padding (other than null) is not supported"},
    {MODEL("}, \"pre_tokenizer\": {\"type\": \"Whitespace\"}"), EG_ERR_UNSUPPORTED,
     "pre_tokenizer of type \"Whitespace\" (Eagle reads ByteLevel) is not supported"},
    {MODEL("}, \"pre_tokenizer\": \"ByteLevel\""), EG_ERR_FORMAT,
     "pre_tokenizer: expected an object, found string"},
    {MODEL("}, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"use_regex\": 1}"), EG_ERR_FORMAT,
     "pre_tokenizer.use_regex: expected true or false, found number"},
    {MODEL("}, \"post_processor\": {\"type\": \"TemplateProcessing\"}"), EG_ERR_UNSUPPORTED,
     "post_processor of type \"TemplateProcessing\" (it would change the ids)"},
    {MODEL("}, \"decoder\": {\"type\": \"WordPiece\"}"), EG_ERR_UNSUPPORTED,
     "decoder of type \"WordPiece\" (Eagle reads ByteLevel and Fuse) is not supported"},
    {MODEL("}, \"decoder\": {}"), EG_ERR_UNSUPPORTED, "decoder of type \"(no type)\""},
};

static void test_malformed(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const bad_case *c = &bad_cases[i];
        eg_clear_error();
        eg_tokenizer *tok = eg_tokenizer_from_json(c->json, strlen(c->json));
        if (tok) fail_msg("case %zu loaded: %s", i, c->json);
        char expected[512];
        snprintf(expected, sizeof expected, "tokenizer.json: %s", c->message);
        if (eg_last_status() != c->status || strncmp(eg_last_error(), expected, strlen(expected)))
            fail_msg("case %zu (%s):\n  got %s \"%s\"\n  expected %s \"%s...\"", i, c->json,
                     eg_status_string(eg_last_status()), eg_last_error(),
                     eg_status_string(c->status), expected);
        eg_clear_error();
    }
    /* The good file those cases spoil loads; so do the optional parts given as null. */
    const char *good = MODEL("}, \"normalizer\": null, \"pre_tokenizer\": null, \"decoder\": null, "
                             "\"added_tokens\": null, \"truncation\": null");
    eg_tokenizer *tok = eg_tokenizer_from_json(good, strlen(good));
    assert_non_null(tok);
    ASSERT_IDS(tok, "abba", 2, 1, 0);
    eg_tokenizer_free(tok);
}

static void test_truncated(void **state) {
    (void)state;
    const char *specials[] = {"<pad>"};
    eg_bpe_options o = eg_bpe_options_default();
    o.vocab_size = 300;
    o.min_frequency = 1;
    o.special_tokens = specials;
    o.n_special_tokens = 1;
    const char *corpus = "hello world, hello there";
    eg_tokenizer *tok = eg_tokenizer_train_bpe(corpus, strlen(corpus), &o);
    size_t n;
    char *json = to_json(tok, &n);
    /* Every cut of the file but the whitespace after its last '}' is refused. */
    size_t end = n;
    while (end > 0 && json[end - 1] != '}') end--;
    for (size_t cut = 0; cut < end; cut += cut < 64 || cut + 300 > end ? 1 : 13) {
        eg_tokenizer *t = eg_tokenizer_from_json(json, cut);
        if (t) fail_msg("the first %zu of %zu bytes loaded", cut, n);
        if (eg_last_status() != EG_ERR_FORMAT ||
            strncmp(eg_last_error(), "tokenizer.json: not valid JSON: ", 32) != 0)
            fail_msg("cut at %zu: %s", cut, eg_last_error());
        eg_clear_error();
    }
    eg_tokenizer *whole = eg_tokenizer_from_json(json, n);
    assert_non_null(whole);
    eg_tokenizer_free(whole);
    /* A file of that text, cut, names the file. */
    const char *path = temp_path("cut.json");
    FILE *f = fopen(path, "wb");
    fwrite(json, 1, n / 2, f);
    fclose(f);
    assert_null(eg_tokenizer_load(path));
    expect_error_containing(EG_ERR_FORMAT, path, ": not valid JSON: ", NULL);
    unlink(path);
    free(json);
    eg_tokenizer_free(tok);

    assert_null(eg_tokenizer_load("/nonexistent/tokenizer.json"));
    expect_error_containing(EG_ERR_IO, "/nonexistent/tokenizer.json: cannot open", NULL);
    assert_null(eg_tokenizer_load("/tmp"));
    expect_error_containing(EG_ERR_IO, "is a directory", NULL);
    assert_null(eg_tokenizer_load(NULL));
    expect_error(EG_ERR_NULL_ARGUMENT);
    assert_null(eg_tokenizer_from_json(NULL, 3));
    expect_error(EG_ERR_NULL_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define CASE(name) cmocka_unit_test_setup_teardown(name, fresh_scope_setup, strict_scope_teardown)
        CASE(test_hf_file),   CASE(test_model_options),
        CASE(test_save_load), CASE(test_merges_with_spaces),
        CASE(test_malformed), CASE(test_truncated),
#undef CASE
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
