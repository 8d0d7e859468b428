/* libFuzzer target for the CMUdict parser. The first byte picks the test fraction (byte / 255)
 * and the seed; the rest is the file. An accepted dictionary must be self-consistent (every
 * entry in its word's run, each word's variants distinct, phoneme ids in range, the test set
 * exactly round(fraction * words) words with all their entries) and must print back, in the
 * file's format without stress digits, to text that parses to the same dictionary and split.
 * Failures must be EG_ERR_FORMAT (or out of memory) with the input's name, *out zeroed.
 * Seeds: tests/fuzz_corpus/cmudict/ (each starts with its selector byte).
 *
 *   fuzz_cmudict -max_total_time=60 tests/fuzz_corpus/cmudict */
#include <math.h>
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
            fprintf(stderr, "fuzz_cmudict: invariant failed: %s\n", #cond);                        \
            __builtin_trap();                                                                      \
        }                                                                                          \
    } while (0)

static void check_dictionary(const eg_cmudict *d, double fraction) {
    int64_t next = 0, test_entries = 0, test_words = 0;
    for (int64_t w = 0; w < d->n_words; w++) {
        const eg_cmudict_word *word = &d->words[w];
        FUZZ_CHECK(word->first_entry == next && word->n_entries >= 1);
        FUZZ_CHECK((int64_t)strlen(word->spelling) == word->length && word->length >= 1);
        FUZZ_CHECK(!strpbrk(word->spelling, " \t#("));
        for (int32_t i = 0; i < word->n_entries; i++) {
            const eg_cmudict_entry *e = &d->entries[word->first_entry + i];
            FUZZ_CHECK(e->word == w && e->n_phonemes >= 1 && e->variant >= 1);
            for (int32_t j = 0; j < i; j++)
                FUZZ_CHECK(d->entries[word->first_entry + j].variant != e->variant);
            for (int32_t p = 0; p < e->n_phonemes; p++)
                FUZZ_CHECK(e->phonemes[p] < EG_CMUDICT_PHONEMES);
        }
        next += word->n_entries;
        test_words += word->test;
        test_entries += word->test ? word->n_entries : 0;
    }
    FUZZ_CHECK(next == d->n_entries);
    FUZZ_CHECK(test_words == d->n_test_words && test_entries == d->n_test_entries);
    FUZZ_CHECK(d->n_test_words == (int64_t)llround(fraction * (double)d->n_words));
}

/* Prints d in cmudict.dict's format (variants as "word(n)", no stress digits). */
static char *print_dictionary(const eg_cmudict *d, size_t *n) {
    size_t capacity = 16, used = 0;
    for (int64_t e = 0; e < d->n_entries; e++)
        capacity +=
            (size_t)d->words[d->entries[e].word].length + 16 + 3 * (size_t)d->entries[e].n_phonemes;
    char *text = malloc(capacity);
    FUZZ_CHECK(text != NULL);
    for (int64_t e = 0; e < d->n_entries; e++) {
        const eg_cmudict_entry *entry = &d->entries[e];
        used +=
            (size_t)snprintf(text + used, capacity - used, "%s", d->words[entry->word].spelling);
        if (entry->variant > 1)
            used += (size_t)snprintf(text + used, capacity - used, "(%d)", (int)entry->variant);
        for (int32_t p = 0; p < entry->n_phonemes; p++)
            used += (size_t)snprintf(text + used, capacity - used, " %s",
                                     eg_cmudict_phoneme_name(entry->phonemes[p]));
        text[used++] = '\n';
    }
    *n = used;
    return text;
}

static void check_same(const eg_cmudict *a, const eg_cmudict *b) {
    FUZZ_CHECK(a->n_words == b->n_words && a->n_entries == b->n_entries);
    for (int64_t w = 0; w < a->n_words; w++) {
        FUZZ_CHECK(strcmp(a->words[w].spelling, b->words[w].spelling) == 0);
        FUZZ_CHECK(a->words[w].test == b->words[w].test);
    }
    for (int64_t e = 0; e < a->n_entries; e++) {
        const eg_cmudict_entry *x = &a->entries[e], *y = &b->entries[e];
        FUZZ_CHECK(x->word == y->word && x->variant == y->variant &&
                   x->n_phonemes == y->n_phonemes);
        FUZZ_CHECK(memcmp(x->phonemes, y->phonemes, (size_t)x->n_phonemes) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    double fraction = data[0] / 255.0;
    uint64_t seed = data[0] * 0x9E3779B97F4A7C15ull;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    eg_clear_error();
    eg_cmudict d;
    eg_status status = eg__cmudict_parse(text, n, fraction, seed, "fuzz.dict", &d);
    if (status != EG_OK) {
        FUZZ_CHECK(status == EG_ERR_FORMAT || status == EG_ERR_OUT_OF_MEMORY);
        FUZZ_CHECK(eg_last_status() == status);
        FUZZ_CHECK(strncmp(eg_last_error(), "fuzz.dict: ", 11) == 0);
        FUZZ_CHECK(d.words == NULL && d.entries == NULL && d.storage == NULL && d.n_words == 0);
        eg_clear_error();
        return 0;
    }
    check_dictionary(&d, fraction);
    size_t printed_n;
    char *printed = print_dictionary(&d, &printed_n);
    eg_cmudict again;
    FUZZ_CHECK(eg__cmudict_parse(printed, printed_n, fraction, seed, "fuzz.dict", &again) == EG_OK);
    check_same(&d, &again);
    eg_cmudict_free(&again);
    free(printed);
    eg_cmudict_free(&d);
    FUZZ_CHECK(d.words == NULL && d.n_entries == 0);
    eg_clear_error();
    return 0;
}
