/* libFuzzer target for tokenizer.json (src/io/tokenizer_json.c and src/text/tokenizer_file.c).
 * The input is the file. A refused file must fail with EG_ERR_FORMAT, EG_ERR_UNSUPPORTED or out
 * of memory and a message naming it; an accepted one must name a text for every id, encode fixed
 * texts and the input itself to ids of its vocabulary, decode them, and write itself out to a
 * file that loads to a tokenizer giving the same ids and writing the same file again.
 * Seeds: tests/fuzz_corpus/tokenizer_json/.
 *
 *   fuzz_tokenizer_json -max_total_time=60 tests/fuzz_corpus/tokenizer_json */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_tokenizer_json: invariant failed: %s\n", #cond);                 \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

/* Encoding the input itself costs time quadratic in nothing, but cap it to keep runs fast. */
#define MAX_TEXT 4096

static const char *const texts[] = {"",        "Hello world", "It's  42 naïve 😀\n\n",
                                    "<pad>",   "\xff\x00 x",  "aaaaaaaaaaaaaaaa",
                                    " \t\r\n "};
#define N_TEXTS (sizeof texts / sizeof texts[0])

/* Encodes text and checks the ids; returns them (freed by the caller). */
static int32_t *encode(const eg_tokenizer *tok, const char *text, size_t n, size_t *n_ids) {
    int32_t *ids;
    FUZZ_CHECK(eg_tokenizer_encode(tok, text, n, &ids, n_ids) == EG_OK);
    int32_t vocab = eg_tokenizer_vocab_size(tok);
    for (size_t i = 0; i < *n_ids; i++) FUZZ_CHECK(ids[i] >= 0 && ids[i] < vocab);
    char *back;
    size_t back_n;
    FUZZ_CHECK(eg_tokenizer_decode(tok, ids, *n_ids, false, &back, &back_n) == EG_OK);
    FUZZ_CHECK(back[back_n] == '\0');
    free(back);
    return ids;
}

static void check_same_ids(const eg_tokenizer *a, const eg_tokenizer *b, const char *text,
                           size_t n) {
    size_t na, nb;
    int32_t *x = encode(a, text, n, &na), *y = encode(b, text, n, &nb);
    FUZZ_CHECK(na == nb && (na == 0 || memcmp(x, y, na * sizeof *x) == 0));
    free(x);
    free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    eg_clear_error();
    eg_tokenizer *tok = eg_tokenizer_from_json((const char *)data, size);
    if (!tok) {
        eg_status status = eg_last_status();
        FUZZ_CHECK(status == EG_ERR_FORMAT || status == EG_ERR_UNSUPPORTED ||
                   status == EG_ERR_OUT_OF_MEMORY);
        FUZZ_CHECK(strncmp(eg_last_error(), "tokenizer.json: ", 16) == 0);
        eg_clear_error();
        return 0;
    }
    int32_t vocab = eg_tokenizer_vocab_size(tok);
    for (int32_t id = 0; id < vocab; id++) {
        size_t n;
        const char *text = eg_tokenizer_id_to_token(tok, id, &n);
        FUZZ_CHECK(text != NULL && text[n] == '\0');
        int32_t found = eg_tokenizer_token_to_id(tok, text, n);
        size_t found_n;
        const char *found_text = eg_tokenizer_id_to_token(tok, found, &found_n);
        FUZZ_CHECK(found_text && found_n == n && memcmp(found_text, text, n) == 0);
    }
    for (int32_t r = 0; r < eg_tokenizer_n_merges(tok); r++) {
        int32_t left, right, merged;
        FUZZ_CHECK(eg_tokenizer_merge(tok, r, &left, &right, &merged) == EG_OK);
        FUZZ_CHECK(left >= 0 && left < vocab && right >= 0 && right < vocab && merged >= 0 &&
                   merged < vocab);
    }

    char *json;
    size_t json_n;
    FUZZ_CHECK(eg_tokenizer_to_json(tok, &json, &json_n) == EG_OK);
    eg_tokenizer *again = eg_tokenizer_from_json(json, json_n);
    FUZZ_CHECK(again != NULL);
    char *json2;
    size_t json2_n;
    FUZZ_CHECK(eg_tokenizer_to_json(again, &json2, &json2_n) == EG_OK);
    FUZZ_CHECK(json2_n == json_n && memcmp(json, json2, json_n) == 0);
    for (size_t i = 0; i < N_TEXTS; i++) check_same_ids(tok, again, texts[i], strlen(texts[i]));
    check_same_ids(tok, again, (const char *)data, size < MAX_TEXT ? size : MAX_TEXT);
    free(json);
    free(json2);
    eg_tokenizer_free(again);
    eg_tokenizer_free(tok);
    FUZZ_CHECK(eg_last_status() == EG_OK);
    return 0;
}
