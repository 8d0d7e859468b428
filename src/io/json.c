/* Strict JSON parser: recursive descent over a bounded buffer, producing a small tree. See json.h.
 */
#include "io/json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct parser {
    const char *text;
    size_t length;
    size_t pos;
    char *error;
    size_t error_size;
    bool failed;
    bool oom;
} parser;

__attribute__((format(printf, 2, 3))) static bool fail(parser *p, const char *fmt, ...) {
    if (p->failed) return false;
    p->failed = true;
    if (p->error_size == 0) return false;
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(p->error, p->error_size, fmt, args);
    va_end(args);
    if (n >= 0 && (size_t)n < p->error_size)
        snprintf(p->error + n, p->error_size - (size_t)n, " at byte %zu", p->pos);
    return false;
}

static bool out_of_memory(parser *p) {
    if (!p->failed) p->oom = true;
    return fail(p, "out of memory");
}

size_t eg__utf8_check(const uint8_t *s, size_t length) {
    size_t i = 0;
    while (i < length) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            cp = c & 0x07;
        } else {
            return i; /* continuation byte, overlong 2-byte lead (C0, C1) or beyond F4 */
        }
        if (length - i <= n) return i;
        for (size_t k = 1; k <= n; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return i;
            cp = cp << 6 | (s[i + k] & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return i;
        i += n + 1;
    }
    return length;
}

static void skip_whitespace(parser *p) {
    while (p->pos < p->length) {
        char c = p->text[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

/* A growable byte buffer for decoded strings. */
typedef struct buffer {
    char *data;
    size_t used, capacity;
} buffer;

static bool buffer_reserve(parser *p, buffer *b, size_t extra) {
    if (b->capacity - b->used > extra) return true; /* keeps a byte for the terminator */
    size_t capacity = b->capacity ? b->capacity : 16;
    while (capacity - b->used <= extra) {
        if (capacity > SIZE_MAX / 2) return out_of_memory(p);
        capacity *= 2;
    }
    char *grown = realloc(b->data, capacity);
    if (!grown) return out_of_memory(p);
    b->data = grown;
    b->capacity = capacity;
    return true;
}

static bool buffer_append(parser *p, buffer *b, const char *bytes, size_t n) {
    if (!buffer_reserve(p, b, n)) return false;
    memcpy(b->data + b->used, bytes, n);
    b->used += n;
    return true;
}

static bool append_code_point(parser *p, buffer *b, uint32_t cp) {
    char out[4];
    size_t n;
    if (cp < 0x80) {
        out[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        out[0] = (char)(0xF0 | cp >> 18);
        out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
        out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return buffer_append(p, b, out, n);
}

/* Four hex digits after "\u"; p->pos is on the first digit. */
static bool read_hex4(parser *p, uint32_t *value) {
    if (p->length - p->pos < 4) return fail(p, "truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->text[p->pos + (size_t)i];
        uint32_t digit;
        if (c >= '0' && c <= '9')
            digit = (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            digit = (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            digit = (uint32_t)(c - 'A' + 10);
        else
            return fail(p, "invalid hex digit in \\u escape");
        v = v << 4 | digit;
    }
    p->pos += 4;
    *value = v;
    return true;
}

/* A string; p->pos is on the opening quote. The text was checked as UTF-8 beforehand. */
static bool parse_string(parser *p, char **out, size_t *out_length) {
    buffer b = {0};
    p->pos++;
    for (;;) {
        if (p->pos >= p->length) {
            free(b.data);
            return fail(p, "unterminated string");
        }
        size_t start = p->pos;
        while (p->pos < p->length) {
            unsigned char c = (unsigned char)p->text[p->pos];
            if (c == '"' || c == '\\' || c < 0x20) break;
            p->pos++;
        }
        if (!buffer_append(p, &b, p->text + start, p->pos - start)) break;
        if (p->pos >= p->length) continue;
        unsigned char c = (unsigned char)p->text[p->pos];
        if (c == '"') {
            p->pos++;
            if (!buffer_reserve(p, &b, 0)) break;
            b.data[b.used] = '\0';
            *out = b.data;
            *out_length = b.used;
            return true;
        }
        if (c < 0x20) {
            fail(p, "unescaped control character 0x%02x in a string", c);
            break;
        }
        /* backslash */
        if (p->length - p->pos < 2) {
            p->pos++;
            fail(p, "unterminated string");
            break;
        }
        char e = p->text[p->pos + 1];
        static const char plain_in[] = "\"\\/bfnrt", plain_out[] = "\"\\/\b\f\n\r\t";
        const char *found = e ? strchr(plain_in, e) : NULL;
        if (found) {
            p->pos += 2;
            if (!buffer_append(p, &b, &plain_out[found - plain_in], 1)) break;
            continue;
        }
        if (e != 'u') {
            fail(p, "invalid escape '\\%c' in a string", e >= 0x20 && e < 0x7f ? e : '?');
            break;
        }
        p->pos += 2;
        uint32_t cp;
        if (!read_hex4(p, &cp)) break;
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail(p, "lone low surrogate \\u%04x in a string", (unsigned)cp);
            break;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low = 0;
            if (p->length - p->pos < 2 || p->text[p->pos] != '\\' || p->text[p->pos + 1] != 'u') {
                fail(p, "lone high surrogate \\u%04x in a string", (unsigned)cp);
                break;
            }
            p->pos += 2;
            if (!read_hex4(p, &low)) break;
            if (low < 0xDC00 || low > 0xDFFF) {
                fail(p, "high surrogate \\u%04x not followed by a low one", (unsigned)cp);
                break;
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        if (!append_code_point(p, &b, cp)) break;
    }
    free(b.data);
    return false;
}

static bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

static bool parse_number(parser *p, eg__json *out) {
    size_t start = p->pos;
    if (p->pos < p->length && p->text[p->pos] == '-') p->pos++;
    if (p->pos >= p->length || !is_digit(p->text[p->pos])) return fail(p, "invalid number");
    if (p->text[p->pos] == '0') {
        p->pos++;
        if (p->pos < p->length && is_digit(p->text[p->pos]))
            return fail(p, "invalid number: leading zero");
    } else {
        while (p->pos < p->length && is_digit(p->text[p->pos])) p->pos++;
    }
    if (p->pos < p->length && p->text[p->pos] == '.') {
        p->pos++;
        if (p->pos >= p->length || !is_digit(p->text[p->pos]))
            return fail(p, "invalid number: no digit after '.'");
        while (p->pos < p->length && is_digit(p->text[p->pos])) p->pos++;
    }
    if (p->pos < p->length && (p->text[p->pos] == 'e' || p->text[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->length && (p->text[p->pos] == '+' || p->text[p->pos] == '-')) p->pos++;
        if (p->pos >= p->length || !is_digit(p->text[p->pos]))
            return fail(p, "invalid number: no digit in the exponent");
        while (p->pos < p->length && is_digit(p->text[p->pos])) p->pos++;
    }
    size_t n = p->pos - start;
    out->string = malloc(n + 1);
    if (!out->string) return out_of_memory(p);
    memcpy(out->string, p->text + start, n);
    out->string[n] = '\0';
    out->length = n;
    out->type = EG__JSON_NUMBER;
    return true;
}

static bool parse_value(parser *p, eg__json *out, int depth);

/* Appends item to a container being built (items grow geometrically). */
static bool push_item(parser *p, eg__json *container, size_t *capacity, const eg__json *item,
                      char *key, size_t key_length) {
    if (container->length == *capacity) {
        size_t next = *capacity ? *capacity * 2 : 4;
        if (next > SIZE_MAX / sizeof(eg__json)) return out_of_memory(p);
        eg__json *items = realloc(container->items, next * sizeof *items);
        if (!items) return out_of_memory(p);
        container->items = items;
        if (container->type == EG__JSON_OBJECT) {
            char **keys = realloc(container->keys, next * sizeof *keys);
            if (!keys) return out_of_memory(p);
            container->keys = keys;
            size_t *lengths = realloc(container->key_lengths, next * sizeof *lengths);
            if (!lengths) return out_of_memory(p);
            container->key_lengths = lengths;
        }
        *capacity = next;
    }
    container->items[container->length] = *item;
    if (container->type == EG__JSON_OBJECT) {
        container->keys[container->length] = key;
        container->key_lengths[container->length] = key_length;
    }
    container->length++;
    return true;
}

/* An array or object; p->pos is on '[' or '{'. On failure, out holds what was built so far. */
static bool parse_container(parser *p, eg__json *out, int depth) {
    bool is_object = p->text[p->pos] == '{';
    char close = is_object ? '}' : ']';
    if (depth >= EG__JSON_MAX_DEPTH)
        return fail(p, "nesting deeper than %d levels", EG__JSON_MAX_DEPTH);
    out->type = is_object ? EG__JSON_OBJECT : EG__JSON_ARRAY;
    p->pos++;
    size_t capacity = 0;
    skip_whitespace(p);
    if (p->pos < p->length && p->text[p->pos] == close) {
        p->pos++;
        return true;
    }
    for (;;) {
        char *key = NULL;
        size_t key_length = 0;
        skip_whitespace(p);
        if (is_object) {
            if (p->pos >= p->length || p->text[p->pos] != '"')
                return fail(p, "expected a string key in an object");
            if (!parse_string(p, &key, &key_length)) return false;
            skip_whitespace(p);
            if (p->pos >= p->length || p->text[p->pos] != ':') {
                free(key);
                return fail(p, "expected ':' after an object key");
            }
            p->pos++;
            skip_whitespace(p);
        }
        eg__json item = {0};
        bool ok = parse_value(p, &item, depth + 1);
        if (!push_item(p, out, &capacity, &item, key, key_length)) {
            eg__json_free(&item);
            free(key);
            return false;
        }
        if (!ok) return false;
        skip_whitespace(p);
        if (p->pos >= p->length) return fail(p, "unterminated %s", is_object ? "object" : "array");
        char c = p->text[p->pos];
        if (c == close) {
            p->pos++;
            return true;
        }
        if (c != ',')
            return fail(p, "expected ',' or '%c' in %s", close,
                        is_object ? "an object" : "an array");
        p->pos++;
    }
}

static bool parse_literal(parser *p, const char *word, eg__json_type type, eg__json *out) {
    size_t n = strlen(word);
    if (p->length - p->pos < n || memcmp(p->text + p->pos, word, n) != 0)
        return fail(p, "invalid literal");
    p->pos += n;
    out->type = type;
    return true;
}

static bool parse_value(parser *p, eg__json *out, int depth) {
    memset(out, 0, sizeof *out);
    out->offset = p->pos;
    if (p->pos >= p->length) return fail(p, "expected a value, found the end of the text");
    char c = p->text[p->pos];
    switch (c) {
    case '{':
    case '[':
        return parse_container(p, out, depth);
    case '"':
        out->type = EG__JSON_STRING;
        return parse_string(p, &out->string, &out->length);
    case 't':
        return parse_literal(p, "true", EG__JSON_TRUE, out);
    case 'f':
        return parse_literal(p, "false", EG__JSON_FALSE, out);
    case 'n':
        return parse_literal(p, "null", EG__JSON_NULL, out);
    default:
        if (c == '-' || is_digit(c)) return parse_number(p, out);
        if (c >= 0x20 && c < 0x7f) return fail(p, "unexpected character '%c'", c);
        return fail(p, "unexpected byte 0x%02x", (unsigned char)c);
    }
}

bool eg__json_parse(const char *text, size_t length, eg__json *out, char *error, size_t error_size,
                    bool *oom) {
    parser p = {.text = text, .length = length, .error = error, .error_size = error_size};
    if (error_size) error[0] = '\0';
    if (oom) *oom = false;
    if (!out) return false;
    memset(out, 0, sizeof *out);
    if (!text && length) return fail(&p, "no text");
    size_t bad = eg__utf8_check((const uint8_t *)text, length);
    if (bad < length) {
        p.pos = bad;
        return fail(&p, "invalid UTF-8 (byte 0x%02x)", (unsigned char)text[bad]);
    }
    skip_whitespace(&p);
    bool ok = parse_value(&p, out, 0);
    if (ok) {
        skip_whitespace(&p);
        if (p.pos < length) ok = fail(&p, "unexpected text after the JSON value");
    }
    if (!ok) {
        eg__json_free(out);
        if (oom) *oom = p.oom;
    }
    return ok;
}

void eg__json_free(eg__json *value) {
    if (!value) return;
    for (size_t i = 0; i < value->length && value->items; i++) {
        eg__json_free(&value->items[i]);
        if (value->keys) free(value->keys[i]);
    }
    free(value->items);
    free(value->keys);
    free(value->key_lengths);
    free(value->string);
    memset(value, 0, sizeof *value);
}

const eg__json *eg__json_get(const eg__json *object, const char *key) {
    if (!object || object->type != EG__JSON_OBJECT || !key) return NULL;
    size_t n = strlen(key);
    for (size_t i = 0; i < object->length; i++)
        if (object->key_lengths[i] == n && memcmp(object->keys[i], key, n) == 0)
            return &object->items[i];
    return NULL;
}

bool eg__json_as_u64(const eg__json *value, uint64_t *result) {
    if (!value || value->type != EG__JSON_NUMBER) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < value->length; i++) {
        char c = value->string[i];
        if (!is_digit(c)) return false;
        uint64_t digit = (uint64_t)(c - '0');
        if (v > (UINT64_MAX - digit) / 10) return false;
        v = v * 10 + digit;
    }
    if (value->length == 0) return false;
    *result = v;
    return true;
}

const char *eg__json_type_name(eg__json_type type) {
    static const char *const names[] = {"null",   "false", "true",  "number",
                                        "string", "array", "object"};
    return (unsigned)type < sizeof names / sizeof names[0] ? names[type] : "invalid";
}
