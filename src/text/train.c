/* Training: the character vocabulary of a corpus, and byte-level BPE.
 *
 * BPE keeps, for every adjacent pair of tokens, its count over the corpus's distinct words (each
 * weighted by how often it occurs) and a max-heap of candidates ordered by count, then by the
 * smaller (left, right) ids. A merge rewrites only the words that hold its pair and adjusts the
 * counts of the pairs beside each occurrence; a candidate whose count has changed since it was
 * queued is re-queued with the new count when it comes up, so the corpus is read once, not once
 * per merge. The candidates carry the words they were queued for, and the pairs a merge creates
 * are queued with the words it created them in, as Hugging Face's BpeTrainer does: the two then
 * agree merge for merge on the same corpus and options (tests/interop/tokenizers.sh checks it). */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "io/json.h"
#include "io/text_formats.h"
#include "text/internal.h"
#include "text/unicode.h"

eg_char_options eg_char_options_default(void) {
    return (eg_char_options){NULL, 0, NULL};
}

eg_bpe_options eg_bpe_options_default(void) {
    return (eg_bpe_options){1000, 2, NULL, 0, false};
}

/* The special tokens, ids 0 .. n - 1, in the model's vocabulary and among the added tokens. */
static eg_status add_specials(eg_tokenizer *tok, const char *const *tokens, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        eg_status status =
            eg__tokenizer_append(tok, tokens[i], strlen(tokens[i]),
                                 EG__TOKEN_MODEL | EG__TOKEN_ADDED | EG__TOKEN_SPECIAL, NULL);
        if (status != EG_OK) return status;
    }
    return EG_OK;
}

/* Appends a model token unless its text is one already. */
static eg_status add_unless_present(eg_tokenizer *tok, const char *text, size_t n) {
    if (eg__bytes_map_find(&tok->vocab, text, n) >= 0) return EG_OK;
    return eg__tokenizer_append(tok, text, n, EG__TOKEN_MODEL, NULL);
}

/* ---- characters ---- */

eg_tokenizer *eg_tokenizer_train_char(const char *text, size_t length,
                                      const eg_char_options *options) {
    eg_char_options o = options ? *options : eg_char_options_default();
    if (!text && length) {
        eg__error(EG_ERR_NULL_ARGUMENT, "tokenizer_train_char: text is NULL");
        return NULL;
    }
    if (eg__check_special_tokens("tokenizer_train_char", o.special_tokens, o.n_special_tokens,
                                 o.unk_token) != EG_OK)
        return NULL;
    const uint8_t *bytes = (const uint8_t *)text;
    size_t bad = length ? eg__utf8_check(bytes, length) : 0;
    if (bad < length) {
        eg__error(EG_ERR_FORMAT,
                  "tokenizer_train_char: the text is not well-formed UTF-8 at byte %zu (0x%02X)",
                  bad, bytes[bad]);
        return NULL;
    }
    /* One bit per code point: sorting for free, 136 KiB whatever the corpus. */
    uint8_t *seen = calloc(0x110000 / 8, 1);
    eg_tokenizer *tok = eg__tokenizer_new();
    if (!seen || !tok) {
        free(seen);
        eg_tokenizer_free(tok);
        if (!seen) eg__error(EG_ERR_OUT_OF_MEMORY, "tokenizer_train_char: out of host memory");
        return NULL;
    }
    for (size_t i = 0; i < length;) {
        uint32_t cp;
        i += eg__utf8_next(bytes + i, length - i, &cp);
        seen[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    }
    eg_status status = add_specials(tok, o.special_tokens, o.n_special_tokens);
    for (uint32_t cp = 0; status == EG_OK && cp < 0x110000; cp++) {
        if (!(seen[cp >> 3] & (1u << (cp & 7)))) continue;
        uint8_t utf8[4];
        status = add_unless_present(tok, (const char *)utf8, eg__utf8_encode(cp, utf8));
    }
    free(seen);
    if (status == EG_OK && o.unk_token)
        tok->unk_id = eg_tokenizer_token_to_id(tok, o.unk_token, strlen(o.unk_token));
    tok->pre_tokenizer = EG__PRE_NONE;
    tok->decoder = EG__DECODER_FUSE;
    if (status == EG_OK) status = eg__tokenizer_finish(tok);
    if (status != EG_OK) {
        eg_tokenizer_free(tok);
        return NULL;
    }
    return tok;
}

eg_tokenizer *eg_tokenizer_train_char_file(const char *path, const eg_char_options *options) {
    if (!path) {
        eg__error(EG_ERR_NULL_ARGUMENT, "tokenizer_train_char_file: path is NULL");
        return NULL;
    }
    char *text;
    size_t n;
    if (eg__read_whole_file(path, EG__TEXT_MAX_BYTES, "a text file", NULL, &text, &n) != EG_OK)
        return NULL;
    eg_tokenizer *tok = eg_tokenizer_train_char(text, n, options);
    free(text);
    return tok;
}

/* ---- byte-level BPE ---- */

typedef struct word {
    size_t offset;  /* of its symbols in trainer.symbols */
    int32_t length; /* symbols now */
    int64_t count;  /* occurrences in the corpus */
} word;

typedef struct word_list {
    int32_t *items;
    size_t n, capacity;
} word_list;

/* A queued pair: its count when queued and the words to merge it in. */
typedef struct candidate {
    int64_t count;
    uint64_t pair;
    word_list words;
} candidate;

typedef struct trainer {
    eg_tokenizer *tok;
    word *words;
    size_t n_words;
    int32_t *symbols;
    eg__pair_map counts;
    candidate *heap;
    size_t heap_n, heap_capacity;
    /* This merge's new pairs (x, new) and (new, x): list index by x, or -1; reset after each. */
    int32_t *left_slot, *right_slot;
    size_t slots_capacity;
    word_list *round;
    uint64_t *round_pairs;
    size_t round_n, round_capacity;
    bool oom;
} trainer;

static bool grow_array(void **items, size_t *capacity, size_t needed, size_t size) {
    if (needed <= *capacity) return true;
    size_t n = *capacity ? *capacity : 64;
    while (n < needed) n *= 2;
    void *bigger = realloc(*items, n * size);
    if (!bigger) return false;
    *items = bigger;
    *capacity = n;
    return true;
}

static bool list_add(word_list *list, int32_t w) {
    /* Words are visited one at a time, so a word already listed is the last one. */
    if (list->n && list->items[list->n - 1] == w) return true;
    if (!grow_array((void **)&list->items, &list->capacity, list->n + 1, sizeof(int32_t)))
        return false;
    list->items[list->n++] = w;
    return true;
}

static bool ranks_higher(const candidate *a, const candidate *b) {
    return a->count != b->count ? a->count > b->count : a->pair < b->pair;
}

static bool heap_push(trainer *t, candidate c) {
    if (!grow_array((void **)&t->heap, &t->heap_capacity, t->heap_n + 1, sizeof c)) {
        free(c.words.items);
        return false;
    }
    size_t i = t->heap_n++;
    while (i > 0 && ranks_higher(&c, &t->heap[(i - 1) / 2])) {
        t->heap[i] = t->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    t->heap[i] = c;
    return true;
}

static candidate heap_pop(trainer *t) {
    candidate top = t->heap[0], last = t->heap[--t->heap_n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= t->heap_n) break;
        if (child + 1 < t->heap_n && ranks_higher(&t->heap[child + 1], &t->heap[child])) child++;
        if (!ranks_higher(&t->heap[child], &last)) break;
        t->heap[i] = t->heap[child];
        i = child;
    }
    if (t->heap_n) t->heap[i] = last;
    return top;
}

static void add_count(trainer *t, int32_t left, int32_t right, int64_t delta) {
    int64_t *count = eg__pair_map_upsert(&t->counts, eg__pair_key(left, right), 0);
    if (!count) {
        t->oom = true;
        return;
    }
    *count += delta;
}

/* A pair the current merge (making `made`) created in word w: note w for the pair's candidate. */
static void note_new_pair(trainer *t, int32_t left, int32_t right, int32_t made, int32_t w) {
    int32_t other = left == made ? right : left;
    int32_t *slot = left == made && right != made ? &t->right_slot[other] : &t->left_slot[other];
    if (*slot < 0) {
        size_t c1 = t->round_capacity, c2 = t->round_capacity; /* grown alike */
        if (!grow_array((void **)&t->round, &c1, t->round_n + 1, sizeof *t->round) ||
            !grow_array((void **)&t->round_pairs, &c2, t->round_n + 1, sizeof *t->round_pairs)) {
            t->oom = true;
            return;
        }
        t->round_capacity = c1;
        *slot = (int32_t)t->round_n;
        t->round[t->round_n] = (word_list){0};
        t->round_pairs[t->round_n] = eg__pair_key(left, right);
        t->round_n++;
    }
    if (!list_add(&t->round[*slot], w)) t->oom = true;
}

/* Replaces every (a, b) in word w by made, left to right, adjusting the counts of the pairs
 * beside each occurrence (the merged pair's own count is left as it is: nothing queues it
 * again). */
static void merge_in_word(trainer *t, int32_t w, int32_t a, int32_t b, int32_t made) {
    word *wd = &t->words[w];
    int32_t *s = t->symbols + wd->offset;
    int32_t n = wd->length, out = 0;
    int64_t c = wd->count;
    for (int32_t r = 0; r < n;) {
        if (r + 1 < n && s[r] == a && s[r + 1] == b) {
            if (out > 0) {
                add_count(t, s[out - 1], a, -c);
                add_count(t, s[out - 1], made, c);
                note_new_pair(t, s[out - 1], made, made, w);
            }
            if (r + 2 < n) {
                add_count(t, b, s[r + 2], -c);
                add_count(t, made, s[r + 2], c);
                note_new_pair(t, made, s[r + 2], made, w);
            }
            s[out++] = made;
            r += 2;
        } else {
            s[out++] = s[r++];
        }
    }
    wd->length = out;
}

static bool grow_slots(trainer *t, size_t n_tokens) {
    size_t old = t->slots_capacity, c1 = old, c2 = old;
    if (!grow_array((void **)&t->left_slot, &c1, n_tokens, sizeof(int32_t)) ||
        !grow_array((void **)&t->right_slot, &c2, n_tokens, sizeof(int32_t)))
        return false;
    for (size_t i = old; i < c1; i++) t->left_slot[i] = t->right_slot[i] = -1;
    t->slots_capacity = c1;
    return true;
}

/* Counts the corpus's words (by their bytes) and lays out their byte tokens. */
static bool count_words(trainer *t, const uint8_t *text, size_t n) {
    eg__bytes_map index = {0};
    size_t words_capacity = 0, total = 0;
    bool ok = true;
    for (size_t at = 0; ok && at < n;) {
        size_t length = eg__gpt2_word_length(text, n, at);
        int64_t e = eg__bytes_map_find(&index, text + at, length);
        if (e >= 0) {
            t->words[e].count++;
        } else {
            ok = grow_array((void **)&t->words, &words_capacity, t->n_words + 1, sizeof(word)) &&
                 eg__bytes_map_add(&index, text + at, length, 0, NULL);
            if (ok) t->words[t->n_words++] = (word){total, (int32_t)length, 1};
            total += length;
        }
        at += length;
    }
    if (ok) ok = (t->symbols = malloc((total ? total : 1) * sizeof(int32_t))) != NULL;
    for (size_t w = 0; ok && w < t->n_words; w++) {
        const uint8_t *bytes = (const uint8_t *)eg__bytes_map_key(&index, w);
        for (int32_t i = 0; i < t->words[w].length; i++)
            t->symbols[t->words[w].offset + (size_t)i] = t->tok->byte_token[bytes[i]];
    }
    eg__bytes_map_free(&index);
    return ok;
}

/* The first candidates: every pair of every word. */
static bool queue_initial_pairs(trainer *t) {
    eg__pair_map list_of = {0};
    word_list *lists = NULL;
    uint64_t *pairs = NULL;
    size_t n_lists = 0, capacity = 0, pairs_capacity = 0;
    bool ok = true;
    for (size_t w = 0; ok && w < t->n_words; w++) {
        const int32_t *s = t->symbols + t->words[w].offset;
        for (int32_t i = 0; ok && i + 1 < t->words[w].length; i++) {
            uint64_t key = eg__pair_key(s[i], s[i + 1]);
            add_count(t, s[i], s[i + 1], t->words[w].count);
            int64_t *slot = eg__pair_map_upsert(&list_of, key, -1);
            ok = slot && !t->oom;
            if (ok && *slot < 0) {
                ok = grow_array((void **)&lists, &capacity, n_lists + 1, sizeof *lists) &&
                     grow_array((void **)&pairs, &pairs_capacity, n_lists + 1, sizeof *pairs);
                if (ok) {
                    lists[n_lists] = (word_list){0};
                    pairs[n_lists] = key;
                    *slot = (int64_t)n_lists++;
                }
            }
            ok = ok && list_add(&lists[*slot], (int32_t)w);
        }
    }
    for (size_t i = 0; i < n_lists; i++) {
        int64_t count = ok ? *eg__pair_map_find(&t->counts, pairs[i]) : 0;
        if (ok && count > 0)
            ok = heap_push(t, (candidate){count, pairs[i], lists[i]});
        else
            free(lists[i].items);
    }
    free(lists);
    free(pairs);
    eg__pair_map_free(&list_of);
    return ok;
}

/* The id of left's text followed by right's, appended when it is not a token yet. */
static eg_status joined_token(eg_tokenizer *tok, int32_t left, int32_t right, int32_t *id) {
    size_t a = tok->text_lengths[left], b = tok->text_lengths[right];
    char stack[256], *joined = a + b <= sizeof stack ? stack : malloc(a + b);
    if (!joined) return eg__error(EG_ERR_OUT_OF_MEMORY, "tokenizer_train_bpe: out of host memory");
    memcpy(joined, eg__token_text(tok, left), a);
    memcpy(joined + a, eg__token_text(tok, right), b);
    int64_t e = eg__bytes_map_find(&tok->vocab, joined, a + b);
    eg_status status = EG_OK;
    if (e >= 0)
        *id = (int32_t)tok->vocab.entries[e].value;
    else
        status = eg__tokenizer_append(tok, joined, a + b, EG__TOKEN_MODEL, id);
    if (joined != stack) free(joined);
    return status;
}

static eg_status run_merges(trainer *t, const eg_bpe_options *o) {
    eg_tokenizer *tok = t->tok;
    while (tok->n_tokens < o->vocab_size && t->heap_n > 0) {
        candidate top = heap_pop(t);
        int64_t now = *eg__pair_map_find(&t->counts, top.pair);
        if (top.count != now) {
            top.count = now;
            if (!heap_push(t, top)) t->oom = true;
            if (t->oom) break;
            continue;
        }
        if (top.count < 1 || top.count < o->min_frequency) {
            free(top.words.items);
            break;
        }
        int32_t a = (int32_t)(top.pair >> 32), b = (int32_t)(top.pair & 0xFFFFFFFFu), made;
        eg_status status = joined_token(tok, a, b, &made);
        if (status == EG_OK) status = eg__tokenizer_add_merge(tok, a, b, made);
        if (status == EG_OK && !grow_slots(t, (size_t)tok->n_tokens)) t->oom = true;
        if (status != EG_OK || t->oom) {
            free(top.words.items);
            return status != EG_OK ? status : EG_ERR_OUT_OF_MEMORY;
        }
        for (size_t i = 0; i < top.words.n && !t->oom; i++)
            merge_in_word(t, top.words.items[i], a, b, made);
        free(top.words.items);
        for (size_t i = 0; i < t->round_n; i++) {
            uint64_t pair = t->round_pairs[i];
            int32_t left = (int32_t)(pair >> 32), right = (int32_t)(pair & 0xFFFFFFFFu);
            int32_t other = left == made ? right : left;
            if (left == made && right != made)
                t->right_slot[other] = -1;
            else
                t->left_slot[other] = -1;
            int64_t count = t->oom ? 0 : *eg__pair_map_find(&t->counts, pair);
            if (count > 0) {
                if (!heap_push(t, (candidate){count, pair, t->round[i]})) t->oom = true;
            } else {
                free(t->round[i].items);
            }
        }
        t->round_n = 0;
        if (t->oom) break;
    }
    return t->oom ? EG_ERR_OUT_OF_MEMORY : EG_OK;
}

static void trainer_free(trainer *t) {
    free(t->words);
    free(t->symbols);
    eg__pair_map_free(&t->counts);
    for (size_t i = 0; i < t->heap_n; i++) free(t->heap[i].words.items);
    free(t->heap);
    free(t->left_slot);
    free(t->right_slot);
    for (size_t i = 0; i < t->round_n; i++) free(t->round[i].items);
    free(t->round);
    free(t->round_pairs);
}

/* The 256 byte tokens, in the order of the characters that stand for them. */
static eg_status add_byte_alphabet(eg_tokenizer *tok) {
    uint32_t chars[256];
    for (int b = 0; b < 256; b++) chars[b] = eg__byte_to_char((uint8_t)b);
    /* Insertion sort: 256 items, once. */
    for (int i = 1; i < 256; i++)
        for (int j = i; j > 0 && chars[j - 1] > chars[j]; j--) {
            uint32_t swap = chars[j];
            chars[j] = chars[j - 1];
            chars[j - 1] = swap;
        }
    for (int i = 0; i < 256; i++) {
        uint8_t utf8[4];
        eg_status status =
            add_unless_present(tok, (const char *)utf8, eg__utf8_encode(chars[i], utf8));
        if (status != EG_OK) return status;
    }
    return EG_OK;
}

eg_tokenizer *eg_tokenizer_train_bpe(const char *text, size_t length,
                                     const eg_bpe_options *options) {
    eg_bpe_options o = options ? *options : eg_bpe_options_default();
    if (!text && length) {
        eg__error(EG_ERR_NULL_ARGUMENT, "tokenizer_train_bpe: text is NULL");
        return NULL;
    }
    if (o.vocab_size < 1 || o.min_frequency < 0) {
        eg__error(EG_ERR_INVALID_ARGUMENT,
                  "tokenizer_train_bpe: vocab_size %d and min_frequency %lld; they must be >= 1 "
                  "and >= 0",
                  (int)o.vocab_size, (long long)o.min_frequency);
        return NULL;
    }
    if (eg__check_special_tokens("tokenizer_train_bpe", o.special_tokens, o.n_special_tokens,
                                 NULL) != EG_OK)
        return NULL;
    eg_tokenizer *tok = eg__tokenizer_new();
    if (!tok) return NULL;
    tok->pre_tokenizer = EG__PRE_BYTE_LEVEL;
    tok->add_prefix_space = o.add_prefix_space;
    tok->decoder = EG__DECODER_BYTE_LEVEL;
    eg_status status = add_specials(tok, o.special_tokens, o.n_special_tokens);
    if (status == EG_OK) status = add_byte_alphabet(tok);
    if (status == EG_OK) status = eg__tokenizer_finish(tok);
    /* The corpus is one text: with add_prefix_space it gets one space in front, as one sequence
     * does in Hugging Face's trainer. */
    uint8_t *prefixed = NULL;
    const uint8_t *bytes = (const uint8_t *)text;
    if (status == EG_OK && o.add_prefix_space && length && bytes[0] != ' ') {
        prefixed = malloc(length + 1);
        if (prefixed) {
            prefixed[0] = ' ';
            memcpy(prefixed + 1, bytes, length);
            bytes = prefixed;
            length++;
        } else {
            status = EG_ERR_OUT_OF_MEMORY;
        }
    }
    trainer t = {.tok = tok};
    if (status == EG_OK && (!count_words(&t, bytes, length) || !queue_initial_pairs(&t) ||
                            !grow_slots(&t, (size_t)tok->n_tokens)))
        status = EG_ERR_OUT_OF_MEMORY;
    free(prefixed);
    if (status == EG_OK) status = run_merges(&t, &o);
    trainer_free(&t);
    if (status == EG_OK) status = eg__tokenizer_finish(tok);
    if (status != EG_OK) {
        if (status == EG_ERR_OUT_OF_MEMORY && eg_last_status() != EG_ERR_OUT_OF_MEMORY)
            eg__error(EG_ERR_OUT_OF_MEMORY, "tokenizer_train_bpe: out of host memory");
        eg_tokenizer_free(tok);
        return NULL;
    }
    return tok;
}

eg_tokenizer *eg_tokenizer_train_bpe_file(const char *path, const eg_bpe_options *options) {
    if (!path) {
        eg__error(EG_ERR_NULL_ARGUMENT, "tokenizer_train_bpe_file: path is NULL");
        return NULL;
    }
    char *text;
    size_t n;
    if (eg__read_whole_file(path, EG__TEXT_MAX_BYTES, "a text file", NULL, &text, &n) != EG_OK)
        return NULL;
    eg_tokenizer *tok = eg_tokenizer_train_bpe(text, n, options);
    free(text);
    return tok;
}
