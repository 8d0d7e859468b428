/* libFuzzer target for the Bible's readers: the verse-text parser, the EC02 container and the LZW
 * decoder under it. Every input goes through eg__kjv_parse (which decodes a container first when
 * the input starts with "EC02"); an input that starts with compress's magic (1F 9D) is also
 * decoded as a bare LZW stream. Accepted Bibles must be self-consistent (books in order, each
 * where the previous ended, the training and test texts exactly the books of each kind); decoded
 * streams must decode again to the same bytes and fail cleanly with one byte less room. Failures
 * must be EG_ERR_FORMAT (or out of memory) with the input's name and nothing left allocated.
 * Seeds: tests/fuzz_corpus/kjv/.
 *
 *   fuzz_kjv -max_total_time=60 tests/fuzz_corpus/kjv */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eagle.h"
#include "io/text_formats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_kjv: invariant failed: %s\n", #cond);                            \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

static void check_failure(eg_status status) {
    FUZZ_CHECK(status == EG_ERR_FORMAT || status == EG_ERR_OUT_OF_MEMORY);
    FUZZ_CHECK(eg_last_status() == status);
    FUZZ_CHECK(strncmp(eg_last_error(), "fuzz", 4) == 0);
    eg_clear_error();
}

static void check_bible(const eg_kjv *k) {
    int64_t offset = 0, train = 0, test = 0, verses = 0;
    for (int b = 0; b < EG_KJV_BOOKS; b++) {
        const eg_kjv_book *book = &k->books[b];
        FUZZ_CHECK(book->abbreviation && book->name);
        FUZZ_CHECK(book->offset == offset && book->length >= book->verses);
        FUZZ_CHECK(book->verses >= 1 && book->chapters >= 1 && book->chapters <= book->verses);
        const char *in = book->test ? k->test + test : k->train + train;
        FUZZ_CHECK(memcmp(in, k->text + offset, (size_t)book->length) == 0);
        /* Each verse ends its line. */
        FUZZ_CHECK(k->text[offset + book->length - 1] == '\n');
        *(book->test ? &test : &train) += book->length;
        offset += book->length;
        verses += book->verses;
    }
    FUZZ_CHECK(offset == k->length && verses == k->verses);
    FUZZ_CHECK(train == k->train_length && test == k->test_length);
    FUZZ_CHECK((int64_t)strlen(k->text) == k->length);
    FUZZ_CHECK((int64_t)strlen(k->train) == k->train_length);
    FUZZ_CHECK((int64_t)strlen(k->test) == k->test_length);
    int64_t lines = 0;
    for (int64_t i = 0; i < k->length; i++) lines += k->text[i] == '\n';
    FUZZ_CHECK(lines == k->verses);
}

static void fuzz_lzw(const uint8_t *data, size_t size) {
    size_t capacity = 1 << 20, produced = 0;
    uint8_t *out = malloc(capacity);
    if (!out) return;
    eg_status status = eg__lzw_decode(data, size, out, capacity, &produced, "fuzz.Z");
    if (status != EG_OK) {
        check_failure(status);
        FUZZ_CHECK(produced == 0);
        free(out);
        return;
    }
    FUZZ_CHECK(produced <= capacity);
    uint8_t *again = malloc(produced + 1);
    size_t again_n = 0;
    FUZZ_CHECK(again != NULL);
    FUZZ_CHECK(eg__lzw_decode(data, size, again, produced, &again_n, "fuzz.Z") == EG_OK);
    FUZZ_CHECK(again_n == produced && memcmp(again, out, produced) == 0);
    if (produced > 0) {
        FUZZ_CHECK(eg__lzw_decode(data, size, again, produced - 1, &again_n, "fuzz.Z") ==
                   EG_ERR_FORMAT);
        eg_clear_error();
    }
    free(again);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    eg_clear_error();
    eg_kjv k;
    eg_status status = eg__kjv_parse((const char *)data, size, "fuzz.bible", &k);
    if (status == EG_OK) {
        check_bible(&k);
        eg_kjv_free(&k);
        FUZZ_CHECK(k.text == NULL);
    } else {
        check_failure(status);
        FUZZ_CHECK(k.text == NULL && k.length == 0 && k.verses == 0);
    }
    if (size >= 2 && data[0] == 0x1F && data[1] == 0x9D) fuzz_lzw(data, size);
    eg_clear_error();
    return 0;
}
