/* Hugging Face's tokenizer.json: reading into a description and writing one. See
 * tokenizer_json.h. Field by field what `tokenizers` writes for a BPE model; optional fields
 * take the library's defaults when absent or null, as its reader does. */
#include "io/tokenizer_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* ---- reading ---- */

typedef struct reader {
    const char *name;
} reader;

static const char *type_name(const eg__json *v) {
    return v ? eg__json_type_name(v->type) : "nothing";
}

/* An object member of the given type, or NULL when absent (or null and optional). */
static eg_status member(const reader *r, const eg__json *object, const char *path, const char *key,
                        eg__json_type type, bool required, const eg__json **out) {
    const eg__json *v = eg__json_get(object, key);
    *out = NULL;
    if (!v || (v->type == EG__JSON_NULL && !required)) {
        if (required)
            return eg__error(EG_ERR_FORMAT, "%s: %s%s%s is missing", r->name, path,
                             *path ? "." : "", key);
        return EG_OK;
    }
    bool ok = v->type == type || (type == EG__JSON_TRUE && v->type == EG__JSON_FALSE);
    if (!ok)
        return eg__error(EG_ERR_FORMAT, "%s: %s%s%s: expected %s, found %s", r->name, path,
                         *path ? "." : "", key,
                         type == EG__JSON_TRUE     ? "true or false"
                         : type == EG__JSON_OBJECT ? "an object"
                         : type == EG__JSON_ARRAY  ? "an array"
                                                   : "a string",
                         type_name(v));
    *out = v;
    return EG_OK;
}

static eg_status boolean(const reader *r, const eg__json *object, const char *path, const char *key,
                         bool fallback, bool *out) {
    const eg__json *v;
    eg_status status = member(r, object, path, key, EG__JSON_TRUE, false, &v);
    *out = v ? v->type == EG__JSON_TRUE : fallback;
    return status;
}

static eg__span span_of(const eg__json *string) {
    return (eg__span){string->string, string->length};
}

/* The "type" of a component, for messages. */
static const char *component_type(const eg__json *component) {
    const eg__json *type = eg__json_get(component, "type");
    return type && type->type == EG__JSON_STRING ? type->string : "(no type)";
}

static bool is_type(const eg__json *component, const char *type) {
    const eg__json *t = eg__json_get(component, "type");
    return t && t->type == EG__JSON_STRING && strcmp(t->string, type) == 0;
}

/* An id: a non-negative integer below 2^31. */
static eg_status read_id(const reader *r, const eg__json *v, const char *what, int64_t *out) {
    uint64_t id;
    if (!eg__json_as_u64(v, &id) || id > INT32_MAX - 1)
        return eg__error(EG_ERR_FORMAT, "%s: %s: expected an id (an integer 0 .. %d), found %s%s%s",
                         r->name, what, INT32_MAX - 1, type_name(v),
                         v->type == EG__JSON_NUMBER ? " " : "",
                         v->type == EG__JSON_NUMBER ? v->string : "");
    *out = (int64_t)id;
    return EG_OK;
}

static eg_status unsupported(const reader *r, const char *what, const char *detail) {
    return eg__error(EG_ERR_UNSUPPORTED, "%s: %s %s is not supported by Eagle", r->name, what,
                     detail);
}

static eg_status read_vocab(const reader *r, const eg__json *vocab, eg__tokenizer_json *out) {
    out->n_vocab = vocab->length;
    out->vocab = calloc(vocab->length ? vocab->length : 1, sizeof *out->vocab);
    out->vocab_ids = calloc(vocab->length ? vocab->length : 1, sizeof *out->vocab_ids);
    if (!out->vocab || !out->vocab_ids)
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", r->name);
    for (size_t i = 0; i < vocab->length; i++) {
        char what[96];
        snprintf(what, sizeof what, "model.vocab[\"%.40s\"%s]", vocab->keys[i],
                 vocab->key_lengths[i] > 40 ? "..." : "");
        eg_status status = read_id(r, &vocab->items[i], what, &out->vocab_ids[i]);
        if (status != EG_OK) return status;
        out->vocab[i] = (eg__span){vocab->keys[i], vocab->key_lengths[i]};
    }
    return EG_OK;
}

static eg_status read_merges(const reader *r, const eg__json *merges, eg__tokenizer_json *out) {
    out->n_merges = merges->length;
    out->merges = calloc(merges->length ? merges->length : 1, sizeof *out->merges);
    if (!out->merges) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", r->name);
    for (size_t i = 0; i < merges->length; i++) {
        const eg__json *m = &merges->items[i];
        if (m->type == EG__JSON_STRING) {
            /* The older form, "left right": split at the first space, as the library does. */
            const char *space = memchr(m->string, ' ', m->length);
            if (!space)
                return eg__error(EG_ERR_FORMAT,
                                 "%s: model.merges[%zu]: \"%.40s\" is not two tokens separated by "
                                 "a space",
                                 r->name, i, m->string);
            size_t left = (size_t)(space - m->string);
            out->merges[i][0] = (eg__span){m->string, left};
            out->merges[i][1] = (eg__span){space + 1, m->length - left - 1};
        } else if (m->type == EG__JSON_ARRAY && m->length == 2 &&
                   m->items[0].type == EG__JSON_STRING && m->items[1].type == EG__JSON_STRING) {
            out->merges[i][0] = span_of(&m->items[0]);
            out->merges[i][1] = span_of(&m->items[1]);
        } else {
            return eg__error(EG_ERR_FORMAT,
                             "%s: model.merges[%zu]: expected \"left right\" or [\"left\", "
                             "\"right\"], found %s%s",
                             r->name, i, m->type == EG__JSON_ARRAY ? "an array of " : "",
                             m->type == EG__JSON_ARRAY
                                 ? (m->length == 2 ? "non-strings" : "a length other than 2")
                                 : type_name(m));
        }
    }
    return EG_OK;
}

static eg_status read_model(const reader *r, const eg__json *model, eg__tokenizer_json *out) {
    const eg__json *v;
    eg_status status = member(r, model, "model", "type", EG__JSON_STRING, false, &v);
    if (status != EG_OK) return status;
    if (v && strcmp(v->string, "BPE") != 0) {
        char detail[160];
        snprintf(detail, sizeof detail, "\"%.60s\" (Eagle reads BPE models)", v->string);
        return unsupported(r, "model type", detail);
    }
    if ((status = member(r, model, "model", "dropout", EG__JSON_NUMBER, false, &v)) != EG_OK)
        return status;
    if (v) return unsupported(r, "model.dropout", v->string);
    bool flag;
    if ((status = boolean(r, model, "model", "byte_fallback", false, &flag)) != EG_OK)
        return status;
    if (flag) return unsupported(r, "model.byte_fallback", "true");
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        if ((status = member(r, model, "model", affixes[i], EG__JSON_STRING, false, &v)) != EG_OK)
            return status;
        if (v && v->length) {
            char what[64];
            snprintf(what, sizeof what, "model.%s", affixes[i]);
            return unsupported(r, what, "other than \"\" or null");
        }
    }
    if ((status = boolean(r, model, "model", "fuse_unk", false, &out->fuse_unk)) != EG_OK ||
        (status = boolean(r, model, "model", "ignore_merges", false, &out->ignore_merges)) != EG_OK)
        return status;
    if ((status = member(r, model, "model", "unk_token", EG__JSON_STRING, false, &v)) != EG_OK)
        return status;
    out->has_unk_token = v != NULL;
    if (v) out->unk_token = span_of(v);
    if ((status = member(r, model, "model", "vocab", EG__JSON_OBJECT, true, &v)) != EG_OK ||
        (status = read_vocab(r, v, out)) != EG_OK)
        return status;
    if ((status = member(r, model, "model", "merges", EG__JSON_ARRAY, true, &v)) != EG_OK)
        return status;
    return read_merges(r, v, out);
}

static eg_status read_added(const reader *r, const eg__json *list, eg__tokenizer_json *out) {
    out->n_added = list->length;
    out->added = calloc(list->length ? list->length : 1, sizeof *out->added);
    if (!out->added) return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory", r->name);
    for (size_t i = 0; i < list->length; i++) {
        const eg__json *item = &list->items[i];
        char path[48];
        snprintf(path, sizeof path, "added_tokens[%zu]", i);
        if (item->type != EG__JSON_OBJECT)
            return eg__error(EG_ERR_FORMAT, "%s: %s: expected an object, found %s", r->name, path,
                             type_name(item));
        eg__tokenizer_json_added *a = &out->added[i];
        const eg__json *id, *content;
        eg_status status = member(r, item, path, "id", EG__JSON_NUMBER, true, &id);
        if (status == EG_OK)
            status = member(r, item, path, "content", EG__JSON_STRING, true, &content);
        char what[64];
        snprintf(what, sizeof what, "%s.id", path);
        if (status == EG_OK) status = read_id(r, id, what, &a->id);
        if (status != EG_OK) return status;
        a->content = span_of(content);
        if (a->content.length == 0)
            return eg__error(EG_ERR_FORMAT, "%s: %s.content is empty", r->name, path);
        bool single_word;
        if ((status = boolean(r, item, path, "special", false, &a->special)) != EG_OK ||
            (status = boolean(r, item, path, "lstrip", false, &a->lstrip)) != EG_OK ||
            (status = boolean(r, item, path, "rstrip", false, &a->rstrip)) != EG_OK ||
            (status = boolean(r, item, path, "normalized", !a->special, &a->normalized)) != EG_OK ||
            (status = boolean(r, item, path, "single_word", false, &single_word)) != EG_OK)
            return status;
        if (single_word) {
            snprintf(what, sizeof what, "%s.single_word", path);
            return unsupported(r, what, "true");
        }
    }
    return EG_OK;
}

/* A component that must be absent or null. */
static eg_status absent(const reader *r, const eg__json *root, const char *key) {
    const eg__json *v = eg__json_get(root, key);
    if (!v || v->type == EG__JSON_NULL) return EG_OK;
    char detail[160];
    snprintf(detail, sizeof detail, "%s%s%s", v->type == EG__JSON_OBJECT ? "of type \"" : "",
             v->type == EG__JSON_OBJECT ? component_type(v) : "(other than null)",
             v->type == EG__JSON_OBJECT ? "\"" : "");
    return unsupported(r, key, detail);
}

static eg_status read_components(const reader *r, const eg__json *root, eg__tokenizer_json *out) {
    eg_status status;
    if ((status = absent(r, root, "normalizer")) != EG_OK ||
        (status = absent(r, root, "truncation")) != EG_OK ||
        (status = absent(r, root, "padding")) != EG_OK)
        return status;
    const eg__json *pre, *post, *decoder;
    if ((status = member(r, root, "", "pre_tokenizer", EG__JSON_OBJECT, false, &pre)) != EG_OK ||
        (status = member(r, root, "", "post_processor", EG__JSON_OBJECT, false, &post)) != EG_OK ||
        (status = member(r, root, "", "decoder", EG__JSON_OBJECT, false, &decoder)) != EG_OK)
        return status;
    out->add_prefix_space = false;
    out->trim_offsets = out->use_regex = true;
    if (pre) {
        if (!is_type(pre, "ByteLevel")) {
            char detail[160];
            snprintf(detail, sizeof detail, "of type \"%.60s\" (Eagle reads ByteLevel)",
                     component_type(pre));
            return unsupported(r, "pre_tokenizer", detail);
        }
        out->pre_tokenizer = EG__TOKENIZER_JSON_PRE_BYTE_LEVEL;
        /* The library's defaults for a ByteLevel written without them. */
        if ((status = boolean(r, pre, "pre_tokenizer", "add_prefix_space", true,
                              &out->add_prefix_space)) != EG_OK ||
            (status = boolean(r, pre, "pre_tokenizer", "trim_offsets", true, &out->trim_offsets)) !=
                EG_OK ||
            (status = boolean(r, pre, "pre_tokenizer", "use_regex", true, &out->use_regex)) !=
                EG_OK)
            return status;
    }
    if (post) {
        if (!is_type(post, "ByteLevel")) {
            char detail[160];
            snprintf(detail, sizeof detail, "of type \"%.60s\" (it would change the ids)",
                     component_type(post));
            return unsupported(r, "post_processor", detail);
        }
        out->byte_level_post_processor = true;
    }
    if (decoder) {
        if (is_type(decoder, "ByteLevel")) {
            out->decoder = EG__TOKENIZER_JSON_DECODER_BYTE_LEVEL;
        } else if (is_type(decoder, "Fuse")) {
            out->decoder = EG__TOKENIZER_JSON_DECODER_FUSE;
        } else {
            char detail[160];
            snprintf(detail, sizeof detail, "of type \"%.60s\" (Eagle reads ByteLevel and Fuse)",
                     component_type(decoder));
            return unsupported(r, "decoder", detail);
        }
    }
    return EG_OK;
}

eg_status eg__tokenizer_json_parse(const char *text, size_t n, const char *name,
                                   eg__tokenizer_json *out) {
    memset(out, 0, sizeof *out);
    reader r = {name ? name : "tokenizer.json"};
    char message[256];
    bool oom = false;
    if (!eg__json_parse(text, n, &out->root, message, sizeof message, &oom))
        return eg__error(oom ? EG_ERR_OUT_OF_MEMORY : EG_ERR_FORMAT, "%s: not valid JSON: %s",
                         r.name, message);
    if (out->root.type != EG__JSON_OBJECT)
        return eg__error(EG_ERR_FORMAT, "%s: the top level is %s, expected an object", r.name,
                         type_name(&out->root));
    const eg__json *model, *added;
    eg_status status = member(&r, &out->root, "", "model", EG__JSON_OBJECT, true, &model);
    if (status == EG_OK) status = read_model(&r, model, out);
    if (status == EG_OK)
        status = member(&r, &out->root, "", "added_tokens", EG__JSON_ARRAY, false, &added);
    if (status == EG_OK && added) status = read_added(&r, added, out);
    if (status == EG_OK) status = read_components(&r, &out->root, out);
    return status;
}

void eg__tokenizer_json_free(eg__tokenizer_json *desc) {
    free(desc->vocab);
    free(desc->vocab_ids);
    free(desc->merges);
    free(desc->added);
    eg__json_free(&desc->root);
    memset(desc, 0, sizeof *desc);
}

/* ---- writing ---- */

typedef struct writer {
    char *text;
    size_t n, capacity;
    bool failed;
} writer;

static void put(writer *w, const char *bytes, size_t n) {
    if (w->failed || n == 0) return;
    if (w->n + n + 1 > w->capacity) {
        size_t capacity = w->capacity ? w->capacity : 4096;
        while (capacity < w->n + n + 1) capacity *= 2;
        char *bigger = realloc(w->text, capacity);
        if (!bigger) {
            w->failed = true;
            return;
        }
        w->text = bigger;
        w->capacity = capacity;
    }
    memcpy(w->text + w->n, bytes, n);
    w->n += n;
    w->text[w->n] = '\0';
}

static void puts_(writer *w, const char *s) {
    put(w, s, strlen(s));
}

/* A JSON string's content: quotes, backslashes and control characters escaped; other bytes
 * (well-formed UTF-8, as every token is) as they are. */
static void put_escaped(writer *w, const char *s, size_t n) {
    size_t plain = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        put(w, s + plain, i - plain);
        char escape[8];
        switch (c) {
        case '"':
            puts_(w, "\\\"");
            break;
        case '\\':
            puts_(w, "\\\\");
            break;
        case '\n':
            puts_(w, "\\n");
            break;
        case '\r':
            puts_(w, "\\r");
            break;
        case '\t':
            puts_(w, "\\t");
            break;
        case '\b':
            puts_(w, "\\b");
            break;
        case '\f':
            puts_(w, "\\f");
            break;
        default:
            snprintf(escape, sizeof escape, "\\u%04x", c);
            puts_(w, escape);
        }
        plain = i + 1;
    }
    put(w, s + plain, n - plain);
}

static void put_string(writer *w, const char *s, size_t n) {
    put(w, "\"", 1);
    put_escaped(w, s, n);
    put(w, "\"", 1);
}

static const char *boolean_text(bool b) {
    return b ? "true" : "false";
}

static void put_byte_level(writer *w, const eg__tokenizer_json *d) {
    char line[160];
    snprintf(
        line, sizeof line,
        "{\n    \"type\": \"ByteLevel\",\n    \"add_prefix_space\": %s,\n    \"trim_offsets\": "
        "%s,\n    \"use_regex\": %s\n  }",
        boolean_text(d->add_prefix_space), boolean_text(d->trim_offsets),
        boolean_text(d->use_regex));
    puts_(w, line);
}

eg_status eg__tokenizer_json_write(const eg__tokenizer_json *d, char **text, size_t *n) {
    writer w = {0};
    char line[256];
    puts_(&w, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n"
              "  \"added_tokens\": [");
    for (size_t i = 0; i < d->n_added; i++) {
        const eg__tokenizer_json_added *a = &d->added[i];
        snprintf(line, sizeof line,
                 "%s\n    {\n      \"id\": %lld,\n      \"content\": ", i ? "," : "",
                 (long long)a->id);
        puts_(&w, line);
        put_string(&w, a->content.bytes, a->content.length);
        snprintf(line, sizeof line,
                 ",\n      \"single_word\": false,\n      \"lstrip\": %s,\n      \"rstrip\": %s,\n"
                 "      \"normalized\": %s,\n      \"special\": %s\n    }",
                 boolean_text(a->lstrip), boolean_text(a->rstrip), boolean_text(a->normalized),
                 boolean_text(a->special));
        puts_(&w, line);
    }
    puts_(&w, d->n_added ? "\n  ],\n" : "],\n");
    puts_(&w, "  \"normalizer\": null,\n  \"pre_tokenizer\": ");
    if (d->pre_tokenizer == EG__TOKENIZER_JSON_PRE_BYTE_LEVEL)
        put_byte_level(&w, d);
    else
        puts_(&w, "null");
    puts_(&w, ",\n  \"post_processor\": ");
    if (d->byte_level_post_processor)
        put_byte_level(&w, d);
    else
        puts_(&w, "null");
    puts_(&w, ",\n  \"decoder\": ");
    if (d->decoder == EG__TOKENIZER_JSON_DECODER_BYTE_LEVEL)
        put_byte_level(&w, d);
    else if (d->decoder == EG__TOKENIZER_JSON_DECODER_FUSE)
        puts_(&w, "{\n    \"type\": \"Fuse\"\n  }");
    else
        puts_(&w, "null");
    puts_(&w, ",\n  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n"
              "    \"unk_token\": ");
    if (d->has_unk_token)
        put_string(&w, d->unk_token.bytes, d->unk_token.length);
    else
        puts_(&w, "null");
    snprintf(line, sizeof line,
             ",\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n"
             "    \"fuse_unk\": %s,\n    \"byte_fallback\": false,\n    \"ignore_merges\": %s,\n"
             "    \"vocab\": {",
             boolean_text(d->fuse_unk), boolean_text(d->ignore_merges));
    puts_(&w, line);
    for (size_t i = 0; i < d->n_vocab; i++) {
        puts_(&w, i ? ",\n      " : "\n      ");
        put_string(&w, d->vocab[i].bytes, d->vocab[i].length);
        snprintf(line, sizeof line, ": %lld", (long long)d->vocab_ids[i]);
        puts_(&w, line);
    }
    puts_(&w, d->n_vocab ? "\n    },\n    \"merges\": [" : "},\n    \"merges\": [");
    bool pairs = false;
    for (size_t i = 0; i < d->n_merges && !pairs; i++)
        pairs = memchr(d->merges[i][0].bytes, ' ', d->merges[i][0].length) ||
                memchr(d->merges[i][1].bytes, ' ', d->merges[i][1].length);
    for (size_t i = 0; i < d->n_merges; i++) {
        puts_(&w, i ? ",\n      " : "\n      ");
        if (pairs) {
            puts_(&w, "[");
            put_string(&w, d->merges[i][0].bytes, d->merges[i][0].length);
            puts_(&w, ", ");
            put_string(&w, d->merges[i][1].bytes, d->merges[i][1].length);
            puts_(&w, "]");
        } else {
            put(&w, "\"", 1);
            put_escaped(&w, d->merges[i][0].bytes, d->merges[i][0].length);
            put(&w, " ", 1);
            put_escaped(&w, d->merges[i][1].bytes, d->merges[i][1].length);
            put(&w, "\"", 1);
        }
    }
    puts_(&w, d->n_merges ? "\n    ]\n  }\n}\n" : "]\n  }\n}\n");
    if (w.failed) {
        free(w.text);
        *text = NULL;
        *n = 0;
        return eg__error(EG_ERR_OUT_OF_MEMORY, "tokenizer_save: out of host memory");
    }
    *text = w.text;
    *n = w.n;
    return EG_OK;
}
