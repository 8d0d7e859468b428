/* Internal: the tokenizer's representation, shared by the files of src/text/:
 *   tokenizer.c  building blocks, the vocabulary, encoding (with its word cache) and decoding;
 *   pretokenize.c  GPT-2's byte table and pattern, the split on added tokens;
 *   train.c  the character vocabulary and byte-level BPE training;
 *   tokenizer_file.c  conversion from and to io's tokenizer.json description;
 *   maps.c  the hash maps below. */
#ifndef EAGLE_SRC_TEXT_INTERNAL_H
#define EAGLE_SRC_TEXT_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eagle/text.h"

/* ---- maps ---- */

/* Byte strings (keys copied into the map) to int64 values; entries keep their insertion order
 * and index. */
typedef struct eg__bytes_entry {
    size_t offset;   /* of the key in arena (followed by a NUL) */
    uint32_t length; /* of the key */
    uint32_t hash;
    int64_t value;
} eg__bytes_entry;

typedef struct eg__bytes_map {
    char *arena;
    size_t arena_used, arena_capacity;
    eg__bytes_entry *entries;
    size_t n_entries, entries_capacity;
    uint32_t *slots; /* 0: empty, else entry index + 1 */
    size_t n_slots;  /* a power of two, or 0 */
} eg__bytes_map;

/* The entry index of key, or -1. */
int64_t eg__bytes_map_find(const eg__bytes_map *map, const void *key, size_t length);
/* Adds key (which must be absent; length < 2^32) with value; its entry index goes to *index (when
 * not NULL). false: out of host memory (the map is unchanged). */
bool eg__bytes_map_add(eg__bytes_map *map, const void *key, size_t length, int64_t value,
                       size_t *index);
void eg__bytes_map_clear(eg__bytes_map *map);
void eg__bytes_map_free(eg__bytes_map *map);

static inline const char *eg__bytes_map_key(const eg__bytes_map *map, size_t index) {
    return map->arena + map->entries[index].offset;
}

/* Pairs of token ids (as eg__pair_key) to int64 values. */
typedef struct eg__pair_map {
    uint64_t *keys; /* EG__PAIR_EMPTY: empty slot */
    int64_t *values;
    size_t capacity, count;
} eg__pair_map;

#define EG__PAIR_EMPTY UINT64_MAX

static inline uint64_t eg__pair_key(int32_t left, int32_t right) {
    return (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
}

/* The value stored for key, or NULL. The pointer lasts until the next insertion. */
int64_t *eg__pair_map_find(const eg__pair_map *map, uint64_t key);
/* The value for key, inserted with `initial` when absent; NULL when out of host memory. */
int64_t *eg__pair_map_upsert(eg__pair_map *map, uint64_t key, int64_t initial);
void eg__pair_map_free(eg__pair_map *map);

/* ---- the tokenizer ---- */

typedef enum eg__pre_tokenizer { EG__PRE_NONE, EG__PRE_BYTE_LEVEL } eg__pre_tokenizer;
typedef enum eg__decoder { EG__DECODER_NONE, EG__DECODER_BYTE_LEVEL, EG__DECODER_FUSE } eg__decoder;

/* Token flags. */
enum {
    EG__TOKEN_MODEL = 1,       /* in the BPE model's vocabulary */
    EG__TOKEN_ADDED = 2,       /* an added token (split out of the text before pre-tokenizing) */
    EG__TOKEN_SPECIAL = 4,     /* an added token that decoding may skip */
    EG__TOKEN_LSTRIP = 8,      /* an added token that takes the whitespace before it */
    EG__TOKEN_RSTRIP = 16,     /* ... and after it */
    EG__TOKEN_NORMALIZED = 32, /* matched in the second pass (Hugging Face's "normalized") */
};

/* Encoding results per word (the pre-tokenizer's pieces): word bytes -> offset in ids of
 * [count, id, id, ...]. Shared by the threads that encode with one tokenizer. */
typedef struct eg__word_cache {
    pthread_mutex_t mutex;
    eg__bytes_map words;
    int32_t *ids;
    size_t n_ids, ids_capacity;
} eg__word_cache;

struct eg_tokenizer {
    /* Every token by id: text in `texts` (arena, each followed by a NUL) at text_offsets[id]. */
    int32_t n_tokens;
    size_t *text_offsets;
    uint32_t *text_lengths;
    uint8_t *flags;
    char *texts;
    size_t texts_used, texts_capacity;
    size_t tokens_capacity;

    /* The BPE model: its vocabulary (text -> id) and merges (by rank; (left, right) -> rank). */
    eg__bytes_map vocab;
    int32_t n_merges;
    size_t merges_capacity;
    int32_t (*merges)[3]; /* left, right, merged */
    eg__pair_map merge_rank;
    int32_t unk_id; /* -1: none */
    bool fuse_unk, ignore_merges;

    /* Added tokens, in the order they were added, and which first bytes start one (per pass). */
    int32_t n_added;
    size_t added_capacity;
    int32_t *added_ids;
    uint8_t added_first_bytes[2][32];
    eg__bytes_map added_by_text; /* text -> id */

    eg__pre_tokenizer pre_tokenizer;
    bool add_prefix_space, use_regex, trim_offsets;
    eg__decoder decoder;
    bool byte_level_post_processor;

    /* The model's id of the character GPT-2's table gives each byte, or -1. */
    int32_t byte_token[256];

    eg__word_cache *cache;
};

/* A new empty tokenizer (no tokens, pre-tokenizer NONE, decoder NONE); NULL with an error when
 * out of memory. */
eg_tokenizer *eg__tokenizer_new(void);

/* Appends a token with the next id; flags as above; *id (when not NULL) gets it. A MODEL token is
 * entered in the vocabulary (its text must not be there yet), an ADDED one among the added tokens
 * (likewise). EG_ERR_OUT_OF_MEMORY is raised on failure. */
eg_status eg__tokenizer_append(eg_tokenizer *tok, const char *text, size_t length, uint8_t flags,
                               int32_t *id);

/* Marks existing token id as an added token with flags (ADDED | SPECIAL ...). */
eg_status eg__tokenizer_mark_added(eg_tokenizer *tok, int32_t id, uint8_t flags);

/* Appends merge (left, right) -> merged as the next rank; a pair already present is moved to the
 * new rank (the ranks of the others after it move down by one), as a repeated merge in
 * Hugging Face's files takes its last place. */
eg_status eg__tokenizer_add_merge(eg_tokenizer *tok, int32_t left, int32_t right, int32_t merged);

/* Fills byte_token from the vocabulary and makes the word cache: call once the vocabulary is
 * complete (before the first encode). */
eg_status eg__tokenizer_finish(eg_tokenizer *tok);

static inline const char *eg__token_text(const eg_tokenizer *tok, int32_t id) {
    return tok->texts + tok->text_offsets[id];
}

/* ---- pre-tokenization ---- */

/* GPT-2's table from bytes to the characters that stand for them in byte-level tokens:
 * '!' .. '~', U+00A1 .. U+00AC and U+00AE .. U+00FF stand for themselves, the other bytes in
 * increasing order for U+0100 .. U+0143. */
uint32_t eg__byte_to_char(uint8_t byte);
/* The byte that character cp stands for, or -1 when it stands for none. */
int eg__char_to_byte(uint32_t cp);

/* Writes the byte-level spelling of bytes[0 .. n) into out (room for 2 * n bytes); returns its
 * length. */
size_t eg__byte_level_spell(const uint8_t *bytes, size_t n, char *out);

/* The length of the word of GPT-2's pattern that starts at text[at] (at < n): the pattern's
 * alternatives in order, each greedy, as Oniguruma matches them; ill-formed bytes are
 * characters of class OTHER. */
size_t eg__gpt2_word_length(const uint8_t *text, size_t n, size_t at);

/* One piece of a text split on added tokens: a token (id >= 0) or plain text (id -1). */
typedef struct eg__text_piece {
    size_t begin, end;
    int32_t id;
} eg__text_piece;

/* Splits text[0 .. n) on tok's added tokens as Hugging Face does: first the tokens matched on the
 * raw text (normalized false), then, inside the plain pieces, the others; each pass takes the
 * leftmost match, the longest of those starting there, and lstrip / rstrip tokens take the
 * whitespace beside them. Plain pieces are never empty. *pieces is malloc'd (freed by the
 * caller); EG_ERR_OUT_OF_MEMORY is raised on failure. */
eg_status eg__split_added(const eg_tokenizer *tok, const uint8_t *text, size_t n,
                          eg__text_piece **pieces, size_t *n_pieces);

/* ---- validation shared by training and loading ---- */

/* Checks options' special tokens (count >= 0, each non-NULL, non-empty, well-formed UTF-8,
 * distinct) and that unk (may be NULL) is one of them; raises EG_ERR_INVALID_ARGUMENT naming
 * `what` ("train_bpe") otherwise. */
eg_status eg__check_special_tokens(const char *what, const char *const *tokens, int32_t n,
                                   const char *unk);

#endif
