/* Internal: Hugging Face's tokenizer.json, as a plain description that src/text/ turns into a
 * tokenizer and back. This file knows the format (which fields, their types, which components
 * Eagle reads); the tokenizer's own rules (ids without holes, merges naming known tokens) are
 * checked where the tokenizer is built (src/text/tokenizer_file.c).
 *
 * Reading treats the text as hostile: every field is checked for presence and type, and an
 * unknown component type is EG_ERR_UNSUPPORTED naming it; nothing is read outside the text. */
#ifndef EAGLE_SRC_IO_TOKENIZER_JSON_H
#define EAGLE_SRC_IO_TOKENIZER_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eagle/status.h"
#include "io/json.h"

/* A string that is not NUL-terminated in general (JSON strings may hold "\u0000"). */
typedef struct eg__span {
    const char *bytes;
    size_t length;
} eg__span;

typedef enum eg__tokenizer_json_pre {
    EG__TOKENIZER_JSON_PRE_NONE,
    EG__TOKENIZER_JSON_PRE_BYTE_LEVEL
} eg__tokenizer_json_pre;

typedef enum eg__tokenizer_json_decoder {
    EG__TOKENIZER_JSON_DECODER_NONE,
    EG__TOKENIZER_JSON_DECODER_BYTE_LEVEL,
    EG__TOKENIZER_JSON_DECODER_FUSE
} eg__tokenizer_json_decoder;

typedef struct eg__tokenizer_json_added {
    eg__span content;
    int64_t id;
    bool special, lstrip, rstrip, normalized;
} eg__tokenizer_json_added;

typedef struct eg__tokenizer_json {
    /* model (BPE): vocab in the file's order; merges as (left, right) texts, in rank order */
    size_t n_vocab;
    eg__span *vocab;
    int64_t *vocab_ids;
    size_t n_merges;
    eg__span (*merges)[2];
    bool has_unk_token;
    eg__span unk_token;
    bool fuse_unk, ignore_merges;
    /* added_tokens, in the file's order */
    size_t n_added;
    eg__tokenizer_json_added *added;
    /* pre_tokenizer ByteLevel's options (also written for the decoder and post-processor) */
    eg__tokenizer_json_pre pre_tokenizer;
    bool add_prefix_space, trim_offsets, use_regex;
    eg__tokenizer_json_decoder decoder;
    bool byte_level_post_processor;
    /* What the spans point into after a parse (empty for a description made to be written). */
    eg__json root;
} eg__tokenizer_json;

/* Parses text[0 .. n) into *out (free it with eg__tokenizer_json_free, also after a failure).
 * Messages start with `name` ("tokenizer.json: model.vocab: expected an object, found an
 * array"). Errors: EG_ERR_FORMAT (not JSON, or a field missing or of the wrong type),
 * EG_ERR_UNSUPPORTED (a component or option Eagle does not implement), EG_ERR_OUT_OF_MEMORY. */
eg_status eg__tokenizer_json_parse(const char *text, size_t n, const char *name,
                                   eg__tokenizer_json *out);

/* Frees what a parse allocated and zeroes *desc. */
void eg__tokenizer_json_free(eg__tokenizer_json *desc);

/* Writes desc as tokenizer.json text (the layout Hugging Face writes: version, truncation,
 * padding, added_tokens, normalizer, pre_tokenizer, post_processor, decoder, model) into a new
 * NUL-terminated buffer *text of *n bytes, freed by the caller. Merges are "a b" strings unless
 * a merged text contains a space (then ["a", "b"] pairs). EG_ERR_OUT_OF_MEMORY is raised on
 * failure (*text NULL). */
eg_status eg__tokenizer_json_write(const eg__tokenizer_json *desc, char **text, size_t *n);

#endif
