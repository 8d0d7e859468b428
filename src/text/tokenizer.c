/* The tokenizer: its vocabulary, encoding and decoding (include/eagle/text.h).
 *
 * Encoding follows Hugging Face's tokenizers step by step, because the point is the same ids for
 * the same text: split on added tokens, pre-tokenize, then run each word through the BPE merges
 * with their priority queue: repeatedly merge the adjacent pair of lowest rank, leftmost first,
 * where a queue entry made stale by an earlier merge is dropped only when the pair now at its
 * place no longer makes the same token (Hugging Face's check, reproduced with its quirks). */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "core/tensor_internal.h"
#include "io/json.h"
#include "text/internal.h"
#include "text/unicode.h"

/* Words longer than this are encoded every time rather than cached: they are rare (long runs of
 * symbols or whitespace) and would fill the cache with text that does not come back. */
#define CACHE_MAX_WORD 256
/* The cache stops taking words beyond this many (as Hugging Face's does), which bounds its
 * memory (~16 MiB) whatever the text. */
#define CACHE_MAX_WORDS (1 << 18)

/* ---- building ---- */

eg_tokenizer *eg__tokenizer_new(void) {
    eg_tokenizer *tok = calloc(1, sizeof *tok);
    eg__word_cache *cache = calloc(1, sizeof *cache);
    if (!tok || !cache || pthread_mutex_init(&cache->mutex, NULL) != 0) {
        free(tok);
        free(cache);
        eg__error(EG_ERR_OUT_OF_MEMORY, "tokenizer: out of host memory");
        return NULL;
    }
    tok->cache = cache;
    tok->unk_id = -1;
    tok->use_regex = true;
    tok->trim_offsets = true;
    for (int b = 0; b < 256; b++) tok->byte_token[b] = -1;
    return tok;
}

void eg_tokenizer_free(eg_tokenizer *tok) {
    if (!tok) return;
    free(tok->text_offsets);
    free(tok->text_lengths);
    free(tok->flags);
    free(tok->texts);
    eg__bytes_map_free(&tok->vocab);
    free(tok->merges);
    eg__pair_map_free(&tok->merge_rank);
    free(tok->added_ids);
    eg__bytes_map_free(&tok->added_by_text);
    if (tok->cache) {
        pthread_mutex_destroy(&tok->cache->mutex);
        eg__bytes_map_free(&tok->cache->words);
        free(tok->cache->ids);
        free(tok->cache);
    }
    free(tok);
}

static eg_status out_of_memory(void) {
    return eg__error(EG_ERR_OUT_OF_MEMORY, "tokenizer: out of host memory");
}

static bool grow(void **items, size_t *capacity, size_t needed, size_t size) {
    if (needed <= *capacity) return true;
    size_t n = *capacity ? *capacity : 64;
    while (n < needed) n *= 2;
    void *bigger = realloc(*items, n * size);
    if (!bigger) return false;
    *items = bigger;
    *capacity = n;
    return true;
}

static void note_added(eg_tokenizer *tok, int32_t id) {
    const uint8_t first = (uint8_t)eg__token_text(tok, id)[0];
    int pass = (tok->flags[id] & EG__TOKEN_NORMALIZED) ? 1 : 0;
    tok->added_first_bytes[pass][first >> 3] |= (uint8_t)(1u << (first & 7));
}

static eg_status add_to_added(eg_tokenizer *tok, int32_t id) {
    if (!grow((void **)&tok->added_ids, &tok->added_capacity, (size_t)tok->n_added + 1,
              sizeof(int32_t)) ||
        !eg__bytes_map_add(&tok->added_by_text, eg__token_text(tok, id), tok->text_lengths[id], id,
                           NULL))
        return out_of_memory();
    tok->added_ids[tok->n_added++] = id;
    note_added(tok, id);
    return EG_OK;
}

eg_status eg__tokenizer_append(eg_tokenizer *tok, const char *text, size_t length, uint8_t flags,
                               int32_t *id) {
    if (tok->n_tokens == INT32_MAX || length >= UINT32_MAX)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "tokenizer: too many or too long tokens");
    size_t n = (size_t)tok->n_tokens, capacity = tok->tokens_capacity;
    if (!grow((void **)&tok->text_offsets, &capacity, n + 1, sizeof(size_t)))
        return out_of_memory();
    capacity = tok->tokens_capacity;
    if (!grow((void **)&tok->text_lengths, &capacity, n + 1, sizeof(uint32_t)))
        return out_of_memory();
    capacity = tok->tokens_capacity;
    if (!grow((void **)&tok->flags, &capacity, n + 1, sizeof(uint8_t))) return out_of_memory();
    tok->tokens_capacity = capacity;
    if (!grow((void **)&tok->texts, &tok->texts_capacity, tok->texts_used + length + 1, 1))
        return out_of_memory();
    if ((flags & EG__TOKEN_MODEL) &&
        !eg__bytes_map_add(&tok->vocab, text, length, (int64_t)n, NULL))
        return out_of_memory();
    tok->text_offsets[n] = tok->texts_used;
    tok->text_lengths[n] = (uint32_t)length;
    tok->flags[n] = flags;
    if (length) memcpy(tok->texts + tok->texts_used, text, length);
    tok->texts[tok->texts_used + length] = '\0';
    tok->texts_used += length + 1;
    tok->n_tokens++;
    if (id) *id = (int32_t)n;
    if (flags & EG__TOKEN_ADDED) return add_to_added(tok, (int32_t)n);
    return EG_OK;
}

eg_status eg__tokenizer_mark_added(eg_tokenizer *tok, int32_t id, uint8_t flags) {
    /* A token that moves to the other pass leaves its first byte in the old pass's bitmap,
     * which is only a hint: the matcher checks each token's pass. */
    bool was_added = tok->flags[id] & EG__TOKEN_ADDED;
    tok->flags[id] = (uint8_t)((tok->flags[id] & EG__TOKEN_MODEL) | flags | EG__TOKEN_ADDED);
    if (was_added) {
        note_added(tok, id);
        return EG_OK;
    }
    return add_to_added(tok, id);
}

eg_status eg__tokenizer_add_merge(eg_tokenizer *tok, int32_t left, int32_t right, int32_t merged) {
    uint64_t key = eg__pair_key(left, right);
    int64_t *rank = eg__pair_map_find(&tok->merge_rank, key);
    if (rank) {
        /* A repeated pair takes its last place: close the gap its first one leaves. */
        int32_t old = (int32_t)*rank;
        memmove(&tok->merges[old], &tok->merges[old + 1],
                (size_t)(tok->n_merges - old - 1) * sizeof tok->merges[0]);
        tok->n_merges--;
        for (int32_t r = old; r < tok->n_merges; r++)
            *eg__pair_map_find(&tok->merge_rank,
                               eg__pair_key(tok->merges[r][0], tok->merges[r][1])) = r;
    }
    if (!grow((void **)&tok->merges, &tok->merges_capacity, (size_t)tok->n_merges + 1,
              sizeof tok->merges[0]))
        return out_of_memory();
    int64_t *slot = eg__pair_map_upsert(&tok->merge_rank, key, tok->n_merges);
    if (!slot) return out_of_memory();
    *slot = tok->n_merges;
    tok->merges[tok->n_merges][0] = left;
    tok->merges[tok->n_merges][1] = right;
    tok->merges[tok->n_merges][2] = merged;
    tok->n_merges++;
    return EG_OK;
}

eg_status eg__tokenizer_finish(eg_tokenizer *tok) {
    for (int b = 0; b < 256; b++) {
        uint8_t byte = (uint8_t)b;
        char spelled[2];
        size_t n = eg__byte_level_spell(&byte, 1, spelled);
        int64_t e = eg__bytes_map_find(&tok->vocab, spelled, n);
        tok->byte_token[b] = e < 0 ? -1 : (int32_t)tok->vocab.entries[e].value;
    }
    pthread_mutex_lock(&tok->cache->mutex);
    eg__bytes_map_clear(&tok->cache->words);
    tok->cache->n_ids = 0;
    pthread_mutex_unlock(&tok->cache->mutex);
    return EG_OK;
}

eg_status eg__check_special_tokens(const char *what, const char *const *tokens, int32_t n,
                                   const char *unk) {
    if (n < 0)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: n_special_tokens is %d", what, (int)n);
    if (n > 0 && !tokens)
        return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: special_tokens is NULL with %d of them",
                         what, (int)n);
    bool unk_found = unk == NULL;
    for (int32_t i = 0; i < n; i++) {
        const char *t = tokens[i];
        if (!t || !*t)
            return eg__error(EG_ERR_INVALID_ARGUMENT, "%s: special token %d is %s", what, (int)i,
                             t ? "empty" : "NULL");
        size_t len = strlen(t);
        if (eg__utf8_check((const uint8_t *)t, len) != len)
            return eg__error(EG_ERR_INVALID_ARGUMENT,
                             "%s: special token %d is not well-formed UTF-8", what, (int)i);
        for (int32_t j = 0; j < i; j++)
            if (strcmp(tokens[j], t) == 0)
                return eg__error(EG_ERR_INVALID_ARGUMENT,
                                 "%s: special token \"%s\" is given twice (%d and %d)", what, t,
                                 (int)j, (int)i);
        if (unk && strcmp(unk, t) == 0) unk_found = true;
    }
    if (!unk_found)
        return eg__error(EG_ERR_INVALID_ARGUMENT,
                         "%s: unk_token \"%s\" is not one of the special tokens", what, unk);
    return EG_OK;
}

/* ---- the vocabulary ---- */

int32_t eg_tokenizer_vocab_size(const eg_tokenizer *tok) {
    return tok ? tok->n_tokens : 0;
}

const char *eg_tokenizer_id_to_token(const eg_tokenizer *tok, int32_t id, size_t *length) {
    if (!tok || id < 0 || id >= tok->n_tokens) return NULL;
    if (length) *length = tok->text_lengths[id];
    return eg__token_text(tok, id);
}

int32_t eg_tokenizer_token_to_id(const eg_tokenizer *tok, const char *token, size_t length) {
    if (!tok || (!token && length)) return -1;
    if (!token) token = "";
    int64_t e = eg__bytes_map_find(&tok->added_by_text, token, length);
    if (e >= 0) return (int32_t)tok->added_by_text.entries[e].value;
    e = eg__bytes_map_find(&tok->vocab, token, length);
    return e >= 0 ? (int32_t)tok->vocab.entries[e].value : -1;
}

bool eg_tokenizer_is_special(const eg_tokenizer *tok, int32_t id) {
    return tok && id >= 0 && id < tok->n_tokens && (tok->flags[id] & EG__TOKEN_SPECIAL);
}

int32_t eg_tokenizer_n_merges(const eg_tokenizer *tok) {
    return tok ? tok->n_merges : 0;
}

eg_status eg_tokenizer_merge(const eg_tokenizer *tok, int32_t rank, int32_t *left, int32_t *right,
                             int32_t *merged) {
    if (!tok) return eg__error(EG_ERR_NULL_ARGUMENT, "tokenizer_merge: tok is NULL");
    if (rank < 0 || rank >= tok->n_merges)
        return eg__error(
            EG_ERR_INVALID_ARGUMENT,
            "tokenizer_merge: rank %d is outside 0 .. %d (the tokenizer has %d merges)", (int)rank,
            (int)tok->n_merges - 1, (int)tok->n_merges);
    if (left) *left = tok->merges[rank][0];
    if (right) *right = tok->merges[rank][1];
    if (merged) *merged = tok->merges[rank][2];
    return EG_OK;
}

eg_status eg_tokenizer_add_special_token(eg_tokenizer *tok, const char *token, int32_t *id) {
    if (!tok || !token)
        return eg__error(EG_ERR_NULL_ARGUMENT, "tokenizer_add_special_token: %s is NULL",
                         tok ? "token" : "tok");
    const char *list[1] = {token};
    eg_status status = eg__check_special_tokens("tokenizer_add_special_token", list, 1, NULL);
    if (status != EG_OK) return status;
    size_t length = strlen(token);
    int32_t existing = eg_tokenizer_token_to_id(tok, token, length);
    if (existing >= 0) {
        status = eg__tokenizer_mark_added(tok, existing, EG__TOKEN_SPECIAL);
        if (status == EG_OK && id) *id = existing;
        return status;
    }
    return eg__tokenizer_append(tok, token, length, EG__TOKEN_ADDED | EG__TOKEN_SPECIAL, id);
}

/* ---- encoding ---- */

typedef struct id_buffer {
    int32_t *ids;
    size_t n, capacity;
} id_buffer;

static bool push_id(id_buffer *b, int32_t id) {
    if (!grow((void **)&b->ids, &b->capacity, b->n + 1, sizeof(int32_t))) return false;
    b->ids[b->n++] = id;
    return true;
}

/* A queued merge: the pair starting at symbol pos makes new_id; the lowest rank, then the
 * leftmost position, comes first. */
typedef struct queued {
    int32_t rank, pos, new_id;
} queued;

static bool before(const queued *a, const queued *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

typedef struct scratch {
    int32_t *symbols, *prev, *next;
    size_t capacity, links_capacity;
    queued *heap;
    size_t heap_n, heap_capacity;
    char *spelled;
    size_t spelled_capacity;
} scratch;

static void scratch_free(scratch *s) {
    free(s->symbols);
    free(s->prev);
    free(s->next);
    free(s->heap);
    free(s->spelled);
}

static bool heap_push(scratch *s, queued q) {
    if (!grow((void **)&s->heap, &s->heap_capacity, s->heap_n + 1, sizeof q)) return false;
    size_t i = s->heap_n++;
    while (i > 0 && before(&q, &s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = q;
    return true;
}

static queued heap_pop(scratch *s) {
    queued top = s->heap[0], last = s->heap[--s->heap_n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= s->heap_n) break;
        if (child + 1 < s->heap_n && before(&s->heap[child + 1], &s->heap[child])) child++;
        if (!before(&s->heap[child], &last)) break;
        s->heap[i] = s->heap[child];
        i = child;
    }
    if (s->heap_n) s->heap[i] = last;
    return top;
}

/* Queues the merge of symbols pos and next[pos], if the pair has one. */
static bool queue_pair(const eg_tokenizer *tok, scratch *s, int32_t pos) {
    int32_t right = s->next[pos];
    if (right < 0) return true;
    const int64_t *rank =
        eg__pair_map_find(&tok->merge_rank, eg__pair_key(s->symbols[pos], s->symbols[right]));
    if (!rank) return true;
    return heap_push(s, (queued){(int32_t)*rank, pos, tok->merges[*rank][2]});
}

/* The model's initial symbols for word (one per byte for byte-level, else one per character),
 * with unknown ones becoming the unknown token (fused when fuse_unk) or left out. */
static bool initial_symbols(const eg_tokenizer *tok, const uint8_t *word, size_t n, scratch *s,
                            size_t *count) {
    if (!grow((void **)&s->symbols, &s->capacity, n + 1, sizeof(int32_t))) return false;
    size_t k = 0;
    bool pending_unk = false;
    for (size_t i = 0; i < n;) {
        int32_t id;
        size_t len = 1;
        if (tok->pre_tokenizer == EG__PRE_BYTE_LEVEL) {
            id = tok->byte_token[word[i]];
        } else {
            uint32_t cp;
            len = eg__utf8_next(word + i, n - i, &cp);
            int64_t e = eg__bytes_map_find(&tok->vocab, word + i, len);
            id = e < 0 ? -1 : (int32_t)tok->vocab.entries[e].value;
        }
        i += len;
        if (id >= 0) {
            if (pending_unk) s->symbols[k++] = tok->unk_id;
            pending_unk = false;
            s->symbols[k++] = id;
        } else if (tok->unk_id >= 0) {
            if (pending_unk && !tok->fuse_unk) s->symbols[k++] = tok->unk_id;
            pending_unk = true;
        }
    }
    if (pending_unk) s->symbols[k++] = tok->unk_id;
    *count = k;
    return true;
}

/* Appends the ids of one pre-tokenized word. */
static bool encode_word(const eg_tokenizer *tok, const uint8_t *word, size_t n, scratch *s,
                        id_buffer *out) {
    if (tok->ignore_merges) {
        /* A word that is a token of its own is that token, whatever the merges would make. */
        const char *spelled = (const char *)word;
        size_t spelled_n = n;
        if (tok->pre_tokenizer == EG__PRE_BYTE_LEVEL) {
            if (!grow((void **)&s->spelled, &s->spelled_capacity, 2 * n + 1, 1)) return false;
            spelled_n = eg__byte_level_spell(word, n, s->spelled);
            spelled = s->spelled;
        }
        int64_t e = eg__bytes_map_find(&tok->vocab, spelled, spelled_n);
        if (e >= 0) return push_id(out, (int32_t)tok->vocab.entries[e].value);
    }
    size_t count;
    if (!initial_symbols(tok, word, n, s, &count)) return false;
    if (tok->n_merges > 0 && count > 1) {
        /* The links only where there are merges to make: a character tokenizer encodes a whole
         * text as one word. The same start and need give both the same capacity. */
        size_t c1 = s->links_capacity, c2 = s->links_capacity;
        if (!grow((void **)&s->prev, &c1, count, sizeof(int32_t)) ||
            !grow((void **)&s->next, &c2, count, sizeof(int32_t)))
            return false;
        s->links_capacity = c1;
        s->heap_n = 0;
        for (size_t i = 0; i < count; i++) {
            s->prev[i] = (int32_t)i - 1;
            s->next[i] = i + 1 < count ? (int32_t)i + 1 : -1;
        }
        for (size_t i = 0; i + 1 < count; i++)
            if (!queue_pair(tok, s, (int32_t)i)) return false;
        while (s->heap_n) {
            queued top = heap_pop(s);
            int32_t pos = top.pos, right = s->next[pos];
            if (s->symbols[pos] < 0 || right < 0) continue;
            const int64_t *rank = eg__pair_map_find(
                &tok->merge_rank, eg__pair_key(s->symbols[pos], s->symbols[right]));
            if (!rank || tok->merges[*rank][2] != top.new_id) continue;
            s->symbols[pos] = top.new_id;
            s->symbols[right] = -1; /* gone */
            s->next[pos] = s->next[right];
            if (s->next[right] >= 0) s->prev[s->next[right]] = pos;
            if (s->prev[pos] >= 0 && !queue_pair(tok, s, s->prev[pos])) return false;
            if (!queue_pair(tok, s, pos)) return false;
        }
    }
    for (size_t i = 0; i < count; i++)
        if (s->symbols[i] >= 0 && !push_id(out, s->symbols[i])) return false;
    return true;
}

/* encode_word through the cache. */
static bool encode_cached(const eg_tokenizer *tok, const uint8_t *word, size_t n, scratch *s,
                          id_buffer *out) {
    if (n > CACHE_MAX_WORD || (tok->n_merges == 0 && !tok->ignore_merges))
        return encode_word(tok, word, n, s, out);
    eg__word_cache *cache = tok->cache;
    pthread_mutex_lock(&cache->mutex);
    int64_t e = eg__bytes_map_find(&cache->words, word, n);
    if (e >= 0) {
        const int32_t *hit = cache->ids + cache->words.entries[e].value;
        bool ok =
            grow((void **)&out->ids, &out->capacity, out->n + (size_t)hit[0], sizeof(int32_t));
        if (ok && hit[0]) {
            memcpy(out->ids + out->n, hit + 1, (size_t)hit[0] * sizeof(int32_t));
            out->n += (size_t)hit[0];
        }
        pthread_mutex_unlock(&cache->mutex);
        return ok;
    }
    pthread_mutex_unlock(&cache->mutex);
    size_t first = out->n;
    if (!encode_word(tok, word, n, s, out)) return false;
    size_t produced = out->n - first;
    pthread_mutex_lock(&cache->mutex);
    /* Another thread may have cached the word meanwhile; a full cache takes nothing more. Failing
     * to cache costs only time. */
    if (cache->words.n_entries < CACHE_MAX_WORDS &&
        eg__bytes_map_find(&cache->words, word, n) < 0 &&
        grow((void **)&cache->ids, &cache->ids_capacity, cache->n_ids + produced + 1,
             sizeof(int32_t)) &&
        eg__bytes_map_add(&cache->words, word, n, (int64_t)cache->n_ids, NULL)) {
        cache->ids[cache->n_ids] = (int32_t)produced;
        if (produced)
            memcpy(cache->ids + cache->n_ids + 1, out->ids + first, produced * sizeof(int32_t));
        cache->n_ids += produced + 1;
    }
    pthread_mutex_unlock(&cache->mutex);
    return true;
}

/* Pre-tokenizes one plain piece and encodes its words. */
static bool encode_piece(const eg_tokenizer *tok, const uint8_t *text, size_t n, scratch *s,
                         id_buffer *out) {
    if (tok->pre_tokenizer != EG__PRE_BYTE_LEVEL) return encode_cached(tok, text, n, s, out);
    uint8_t *prefixed = NULL;
    if (tok->add_prefix_space && text[0] != ' ') {
        prefixed = malloc(n + 1);
        if (!prefixed) return false;
        prefixed[0] = ' ';
        memcpy(prefixed + 1, text, n);
        text = prefixed;
        n++;
    }
    bool ok = true;
    if (!tok->use_regex) {
        ok = encode_cached(tok, text, n, s, out);
    } else {
        for (size_t at = 0; ok && at < n;) {
            size_t length = eg__gpt2_word_length(text, n, at);
            ok = encode_cached(tok, text + at, length, s, out);
            at += length;
        }
    }
    free(prefixed);
    return ok;
}

static eg_status encode(const eg_tokenizer *tok, const char *text, size_t length, id_buffer *out) {
    eg__text_piece *pieces;
    size_t n_pieces;
    eg_status status = eg__split_added(tok, (const uint8_t *)text, length, &pieces, &n_pieces);
    if (status != EG_OK) return status;
    scratch s = {0};
    bool ok = true;
    for (size_t i = 0; ok && i < n_pieces; i++) {
        const eg__text_piece *p = &pieces[i];
        ok = p->id >= 0
                 ? push_id(out, p->id)
                 : encode_piece(tok, (const uint8_t *)text + p->begin, p->end - p->begin, &s, out);
    }
    scratch_free(&s);
    free(pieces);
    if (!ok) return eg__error(EG_ERR_OUT_OF_MEMORY, "tokenizer_encode: out of host memory");
    return EG_OK;
}

eg_status eg_tokenizer_encode(const eg_tokenizer *tok, const char *text, size_t length,
                              int32_t **ids, size_t *n_ids) {
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!tok || !ids || !n_ids || (!text && length))
        return eg__error(EG_ERR_NULL_ARGUMENT, "tokenizer_encode: %s is NULL",
                         !tok     ? "tok"
                         : !ids   ? "ids"
                         : !n_ids ? "n_ids"
                                  : "text");
    id_buffer out = {0};
    eg_status status = length ? encode(tok, text, length, &out) : EG_OK;
    if (status != EG_OK) {
        free(out.ids);
        return status;
    }
    *ids = out.ids;
    *n_ids = out.n;
    return EG_OK;
}

eg_tensor *eg_tokenizer_encode_tensor(const eg_tokenizer *tok, const char *text, size_t length,
                                      eg_dtype dtype) {
    if (dtype != EG_DTYPE_I32 && dtype != EG_DTYPE_I64) {
        eg__error(EG_ERR_DTYPE, "tokenizer_encode_tensor: dtype %s; token ids are i32 or i64",
                  eg_dtype_name(dtype));
        return NULL;
    }
    int32_t *ids;
    size_t n;
    if (eg_tokenizer_encode(tok, text, length, &ids, &n) != EG_OK) return NULL;
    int64_t shape[1] = {(int64_t)n};
    eg_tensor *t = eg__tensor_alloc(dtype, 1, shape, eg_device_cpu());
    if (t && n) {
        if (dtype == EG_DTYPE_I32)
            memcpy(eg__data(t), ids, n * sizeof(int32_t));
        else
            for (size_t i = 0; i < n; i++) ((int64_t *)eg__data(t))[i] = ids[i];
    }
    free(ids);
    return t;
}

/* ---- decoding ---- */

typedef struct byte_buffer {
    char *bytes;
    size_t n, capacity;
} byte_buffer;

static bool append_bytes(byte_buffer *b, const void *bytes, size_t n) {
    if (!grow((void **)&b->bytes, &b->capacity, b->n + n + 1, 1)) return false;
    if (n) memcpy(b->bytes + b->n, bytes, n);
    b->n += n;
    return true;
}

/* The ByteLevel decoder's rule: every character of the token stands for a byte, or the token is
 * its own text. */
static bool append_byte_level(byte_buffer *b, const char *text, size_t n) {
    if (!grow((void **)&b->bytes, &b->capacity, b->n + n + 1, 1)) return false;
    size_t used = b->n;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += eg__utf8_next((const uint8_t *)text + i, n - i, &cp);
        int byte = cp == EG__UTF8_INVALID ? -1 : eg__char_to_byte(cp);
        if (byte < 0) return append_bytes(b, text, n);
        b->bytes[used++] = (char)byte;
    }
    b->n = used;
    return true;
}

eg_status eg_tokenizer_decode(const eg_tokenizer *tok, const int32_t *ids, size_t n_ids,
                              bool skip_special, char **text, size_t *length) {
    if (text) *text = NULL;
    if (length) *length = 0;
    if (!tok || !text || !length || (!ids && n_ids))
        return eg__error(EG_ERR_NULL_ARGUMENT, "tokenizer_decode: %s is NULL",
                         !tok      ? "tok"
                         : !text   ? "text"
                         : !length ? "length"
                                   : "ids");
    byte_buffer out = {0};
    bool ok = append_bytes(&out, "", 0), first = true;
    for (size_t i = 0; ok && i < n_ids; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= tok->n_tokens) {
            free(out.bytes);
            return eg__error(EG_ERR_INVALID_ARGUMENT,
                             "tokenizer_decode: ids[%zu] is %d, outside the vocabulary (0 .. %d)",
                             i, (int)id, (int)tok->n_tokens - 1);
        }
        if (skip_special && (tok->flags[id] & EG__TOKEN_SPECIAL)) continue;
        const char *t = eg__token_text(tok, id);
        size_t len = tok->text_lengths[id];
        if (tok->decoder == EG__DECODER_BYTE_LEVEL) {
            ok = append_byte_level(&out, t, len);
        } else {
            if (tok->decoder == EG__DECODER_NONE && !first) ok = append_bytes(&out, " ", 1);
            ok = ok && append_bytes(&out, t, len);
        }
        first = false;
    }
    if (!ok) {
        free(out.bytes);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "tokenizer_decode: out of host memory");
    }
    out.bytes[out.n] = '\0';
    *text = out.bytes;
    *length = out.n;
    return EG_OK;
}
