/* tokenizer.json to a tokenizer and back: io/tokenizer_json.c reads and writes the format; here
 * the description is checked against the tokenizer's rules (ids 0 .. N-1 naming one text each,
 * merges joining tokens of the vocabulary) and turned into one. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "io/atomic_file.h"
#include "io/text_formats.h"
#include "io/tokenizer_json.h"
#include "text/internal.h"

/* Longer texts are cut in messages. */
#define SHOWN 40

static int shown(const eg__span *s) {
    return (int)(s->length < SHOWN ? s->length : SHOWN);
}

static bool same(const eg__span *a, const eg__span *b) {
    return a->length == b->length && memcmp(a->bytes, b->bytes, a->length) == 0;
}

typedef struct slot {
    eg__span text;
    uint8_t flags;
    bool set;
} slot;

/* Which text each id names, from vocab and added_tokens together. */
static eg_status assign_ids(const eg__tokenizer_json *d, const char *name, slot **out,
                            int32_t *n_out) {
    *out = NULL;
    *n_out = 0;
    size_t total = d->n_vocab + d->n_added;
    int64_t max_id = -1;
    for (size_t i = 0; i < d->n_vocab; i++)
        if (d->vocab_ids[i] > max_id) max_id = d->vocab_ids[i];
    for (size_t i = 0; i < d->n_added; i++)
        if (d->added[i].id > max_id) max_id = d->added[i].id;
    if (max_id >= (int64_t)total)
        return eg__error(EG_ERR_FORMAT,
                         "%s: id %lld is used, but there are only %zu tokens: Eagle needs the ids "
                         "0 .. N-1 without holes",
                         name, (long long)max_id, total);
    int32_t n = (int32_t)(max_id + 1);
    slot *slots = calloc(n ? (size_t)n : 1, sizeof *slots);
    if (!slots) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
    for (size_t i = 0; i < d->n_vocab; i++) {
        slot *s = &slots[d->vocab_ids[i]];
        if (s->set) {
            eg__error(EG_ERR_FORMAT, "%s: model.vocab: id %lld is given to \"%.*s\" and \"%.*s\"",
                      name, (long long)d->vocab_ids[i], shown(&s->text), s->text.bytes,
                      shown(&d->vocab[i]), d->vocab[i].bytes);
            free(slots);
            return EG_ERR_FORMAT;
        }
        *s = (slot){d->vocab[i], EG__TOKEN_MODEL, true};
    }
    for (size_t i = 0; i < d->n_added; i++) {
        const eg__tokenizer_json_added *a = &d->added[i];
        slot *s = &slots[a->id];
        if (s->set && (!same(&s->text, &a->content) || (s->flags & EG__TOKEN_ADDED))) {
            eg__error(EG_ERR_FORMAT, "%s: added_tokens[%zu]: id %lld is \"%.*s\" already", name, i,
                      (long long)a->id, shown(&s->text), s->text.bytes);
            free(slots);
            return EG_ERR_FORMAT;
        }
        s->text = a->content;
        s->set = true;
        s->flags |=
            (uint8_t)(EG__TOKEN_ADDED | (a->special ? EG__TOKEN_SPECIAL : 0) |
                      (a->lstrip ? EG__TOKEN_LSTRIP : 0) | (a->rstrip ? EG__TOKEN_RSTRIP : 0) |
                      (a->normalized ? EG__TOKEN_NORMALIZED : 0));
    }
    for (int32_t id = 0; id < n; id++)
        if (!slots[id].set) {
            eg__error(EG_ERR_FORMAT,
                      "%s: no token has id %d (of 0 .. %d): Eagle needs the ids without holes",
                      name, (int)id, (int)n - 1);
            free(slots);
            return EG_ERR_FORMAT;
        }
    *out = slots;
    *n_out = n;
    return EG_OK;
}

static int32_t model_id(const eg_tokenizer *tok, const eg__span *text) {
    int64_t e = eg__bytes_map_find(&tok->vocab, text->bytes, text->length);
    return e < 0 ? -1 : (int32_t)tok->vocab.entries[e].value;
}

static eg_status add_merges(eg_tokenizer *tok, const eg__tokenizer_json *d, const char *name) {
    char stack[256];
    for (size_t i = 0; i < d->n_merges; i++) {
        const eg__span *parts = d->merges[i];
        int32_t ids[2];
        for (int k = 0; k < 2; k++) {
            ids[k] = model_id(tok, &parts[k]);
            if (ids[k] < 0)
                return eg__error(EG_ERR_FORMAT,
                                 "%s: model.merges[%zu]: \"%.*s\" is not in model.vocab", name, i,
                                 shown(&parts[k]), parts[k].bytes);
        }
        size_t n = parts[0].length + parts[1].length;
        char *joined = n <= sizeof stack ? stack : malloc(n);
        if (!joined) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", name);
        memcpy(joined, parts[0].bytes, parts[0].length);
        memcpy(joined + parts[0].length, parts[1].bytes, parts[1].length);
        eg__span whole = {joined, n};
        int32_t merged = model_id(tok, &whole);
        if (joined != stack) free(joined);
        if (merged < 0)
            return eg__error(EG_ERR_FORMAT,
                             "%s: model.merges[%zu]: \"%.*s\" + \"%.*s\" makes a token that is not "
                             "in model.vocab",
                             name, i, shown(&parts[0]), parts[0].bytes, shown(&parts[1]),
                             parts[1].bytes);
        eg_status status = eg__tokenizer_add_merge(tok, ids[0], ids[1], merged);
        if (status != EG_OK) return status;
    }
    return EG_OK;
}

static eg_tokenizer *from_description(const eg__tokenizer_json *d, const char *name) {
    slot *slots = NULL;
    int32_t n = 0;
    if (assign_ids(d, name, &slots, &n) != EG_OK) return NULL;
    eg_tokenizer *tok = eg__tokenizer_new();
    eg_status status = tok ? EG_OK : EG_ERR_OUT_OF_MEMORY;
    for (int32_t id = 0; status == EG_OK && id < n; id++) {
        const slot *s = &slots[id];
        if ((s->flags & EG__TOKEN_MODEL) && model_id(tok, &s->text) >= 0)
            status = eg__error(EG_ERR_FORMAT, "%s: model.vocab: \"%.*s\" appears twice", name,
                               shown(&s->text), s->text.bytes);
        else if ((s->flags & EG__TOKEN_ADDED) &&
                 eg__bytes_map_find(&tok->added_by_text, s->text.bytes, s->text.length) >= 0)
            status = eg__error(EG_ERR_FORMAT, "%s: added_tokens: \"%.*s\" appears twice", name,
                               shown(&s->text), s->text.bytes);
        else
            status = eg__tokenizer_append(tok, s->text.bytes, s->text.length, s->flags, NULL);
    }
    free(slots);
    if (status == EG_OK && d->has_unk_token) {
        tok->unk_id = model_id(tok, &d->unk_token);
        if (tok->unk_id < 0)
            status = eg__error(EG_ERR_FORMAT, "%s: model.unk_token \"%.*s\" is not in model.vocab",
                               name, shown(&d->unk_token), d->unk_token.bytes);
    }
    if (status == EG_OK) status = add_merges(tok, d, name);
    if (status == EG_OK) {
        tok->fuse_unk = d->fuse_unk;
        tok->ignore_merges = d->ignore_merges;
        tok->pre_tokenizer = d->pre_tokenizer == EG__TOKENIZER_JSON_PRE_BYTE_LEVEL
                                 ? EG__PRE_BYTE_LEVEL
                                 : EG__PRE_NONE;
        tok->add_prefix_space = d->add_prefix_space;
        tok->use_regex = d->use_regex;
        tok->trim_offsets = d->trim_offsets;
        tok->decoder = d->decoder == EG__TOKENIZER_JSON_DECODER_BYTE_LEVEL ? EG__DECODER_BYTE_LEVEL
                       : d->decoder == EG__TOKENIZER_JSON_DECODER_FUSE     ? EG__DECODER_FUSE
                                                                           : EG__DECODER_NONE;
        tok->byte_level_post_processor = d->byte_level_post_processor;
        status = eg__tokenizer_finish(tok);
    }
    if (status != EG_OK) {
        eg_tokenizer_free(tok);
        return NULL;
    }
    return tok;
}

static eg_tokenizer *parse(const char *json, size_t length, const char *name) {
    eg__tokenizer_json d;
    eg_tokenizer *tok = NULL;
    if (eg__tokenizer_json_parse(json, length, name, &d) == EG_OK) tok = from_description(&d, name);
    eg__tokenizer_json_free(&d);
    return tok;
}

eg_tokenizer *eg_tokenizer_from_json(const char *json, size_t length) {
    if (!json && length) {
        eg__error(EG_ERR_NULL_ARGUMENT, "tokenizer_from_json: json is NULL");
        return NULL;
    }
    return parse(json, length, "tokenizer.json");
}

eg_tokenizer *eg_tokenizer_load(const char *path) {
    if (!path) {
        eg__error(EG_ERR_NULL_ARGUMENT, "tokenizer_load: path is NULL");
        return NULL;
    }
    char *json;
    size_t n;
    if (eg__read_whole_file(path, EG__TEXT_MAX_BYTES, "a tokenizer.json file", NULL, &json, &n) !=
        EG_OK)
        return NULL;
    eg_tokenizer *tok = parse(json, n, path);
    free(json);
    return tok;
}

/* ---- writing ---- */

eg_status eg_tokenizer_to_json(const eg_tokenizer *tok, char **json, size_t *length) {
    if (json) *json = NULL;
    if (length) *length = 0;
    if (!tok || !json || !length)
        return eg__error(EG_ERR_NULL_ARGUMENT, "tokenizer_to_json: %s is NULL",
                         !tok    ? "tok"
                         : !json ? "json"
                                 : "length");
    eg__tokenizer_json d = {0};
    size_t n = (size_t)tok->n_tokens ? (size_t)tok->n_tokens : 1;
    d.vocab = malloc(n * sizeof *d.vocab);
    d.vocab_ids = malloc(n * sizeof *d.vocab_ids);
    d.added = malloc(n * sizeof *d.added);
    d.merges = malloc((tok->n_merges ? (size_t)tok->n_merges : 1) * sizeof *d.merges);
    eg_status status = EG_OK;
    if (!d.vocab || !d.vocab_ids || !d.added || !d.merges) {
        status = eg__error(EG_ERR_OUT_OF_MEMORY, "tokenizer_to_json: out of host memory");
    } else {
        for (int32_t id = 0; id < tok->n_tokens; id++) {
            eg__span text = {eg__token_text(tok, id), tok->text_lengths[id]};
            uint8_t f = tok->flags[id];
            if (f & EG__TOKEN_MODEL) {
                d.vocab[d.n_vocab] = text;
                d.vocab_ids[d.n_vocab++] = id;
            }
            if (f & EG__TOKEN_ADDED)
                d.added[d.n_added++] = (eg__tokenizer_json_added){text,
                                                                  id,
                                                                  (f & EG__TOKEN_SPECIAL) != 0,
                                                                  (f & EG__TOKEN_LSTRIP) != 0,
                                                                  (f & EG__TOKEN_RSTRIP) != 0,
                                                                  (f & EG__TOKEN_NORMALIZED) != 0};
        }
        for (int32_t r = 0; r < tok->n_merges; r++)
            for (int k = 0; k < 2; k++) {
                int32_t id = tok->merges[r][k];
                d.merges[r][k] = (eg__span){eg__token_text(tok, id), tok->text_lengths[id]};
            }
        d.n_merges = (size_t)tok->n_merges;
        if (tok->unk_id >= 0) {
            d.has_unk_token = true;
            d.unk_token =
                (eg__span){eg__token_text(tok, tok->unk_id), tok->text_lengths[tok->unk_id]};
        }
        d.fuse_unk = tok->fuse_unk;
        d.ignore_merges = tok->ignore_merges;
        d.pre_tokenizer = tok->pre_tokenizer == EG__PRE_BYTE_LEVEL
                              ? EG__TOKENIZER_JSON_PRE_BYTE_LEVEL
                              : EG__TOKENIZER_JSON_PRE_NONE;
        d.add_prefix_space = tok->add_prefix_space;
        d.trim_offsets = tok->trim_offsets;
        d.use_regex = tok->use_regex;
        d.decoder = tok->decoder == EG__DECODER_BYTE_LEVEL ? EG__TOKENIZER_JSON_DECODER_BYTE_LEVEL
                    : tok->decoder == EG__DECODER_FUSE     ? EG__TOKENIZER_JSON_DECODER_FUSE
                                                           : EG__TOKENIZER_JSON_DECODER_NONE;
        d.byte_level_post_processor = tok->byte_level_post_processor;
        status = eg__tokenizer_json_write(&d, json, length);
    }
    free(d.vocab);
    free(d.vocab_ids);
    free(d.added);
    free(d.merges);
    return status;
}

eg_status eg_tokenizer_save(const eg_tokenizer *tok, const char *path) {
    if (!tok || !path)
        return eg__error(EG_ERR_NULL_ARGUMENT, "tokenizer_save: %s is NULL", tok ? "path" : "tok");
    if (!*path) return eg__error(EG_ERR_INVALID_ARGUMENT, "tokenizer_save: path is empty");
    char *json;
    size_t n;
    eg_status status = eg_tokenizer_to_json(tok, &json, &n);
    if (status != EG_OK) return status;
    eg__atomic_file file;
    status = eg__atomic_open(&file, path);
    if (status == EG_OK) {
        eg__atomic_write(&file, json, n);
        status = eg__atomic_commit(&file);
    }
    free(json);
    return status;
}
