/* A small strict JSON parser (RFC 8259) for file headers such as safetensors'. Input is treated as
 * hostile: the text must be valid UTF-8, strings may not hold lone surrogates, nesting is bounded,
 * numbers are kept as their text so that integers beyond 2^53 are not rounded, and nothing outside
 * [text, text + length) is ever read. Duplicate object keys are NOT rejected here (finding them
 * needs a sort, which callers that look keys up do anyway). Errors are returned as text, not
 * raised, so that the caller can prefix the file's name. */
#ifndef EAGLE_SRC_IO_JSON_H
#define EAGLE_SRC_IO_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Objects and arrays nested deeper than this are refused (the parser recurses). */
#define EG__JSON_MAX_DEPTH 64

typedef enum eg__json_type {
    EG__JSON_NULL,
    EG__JSON_FALSE,
    EG__JSON_TRUE,
    EG__JSON_NUMBER,
    EG__JSON_STRING,
    EG__JSON_ARRAY,
    EG__JSON_OBJECT
} eg__json_type;

typedef struct eg__json {
    eg__json_type type;
    size_t offset; /* byte offset of the value's first character in the text */
    /* STRING: the decoded UTF-8 text, NUL-terminated (it may itself contain NULs from "\u0000":
     * `length` is authoritative). NUMBER: the number's text as written. NULL otherwise. */
    char *string;
    /* STRING / NUMBER: bytes in `string`; ARRAY / OBJECT: number of items. */
    size_t length;
    /* ARRAY / OBJECT: `length` values in document order; OBJECT: `keys[i]` (decoded, NUL-
     * terminated, `key_lengths[i]` bytes) names `items[i]`. */
    struct eg__json *items;
    char **keys;
    size_t *key_lengths;
} eg__json;

/* Parses `length` bytes of JSON text holding exactly one value, optionally surrounded by
 * whitespace. On success fills *out (free it with eg__json_free) and returns true. On failure
 * returns false, leaves *out empty (safe to free) and writes a message such as
 * "expected ':' after an object key at byte 17" into error (always NUL-terminated when
 * error_size > 0). Out of memory is reported the same way ("out of memory at byte N"); *oom, when
 * not NULL, tells the two apart. text may be NULL only when length is 0. */
bool eg__json_parse(const char *text, size_t length, eg__json *out, char *error, size_t error_size,
                    bool *oom);

/* Frees what a parse allocated and empties value. Safe on an empty or zeroed value. */
void eg__json_free(eg__json *value);

/* The value named key in an OBJECT (the first one, when the key repeats), or NULL when absent or
 * when object is not an object. Linear in the number of members. */
const eg__json *eg__json_get(const eg__json *object, const char *key);

/* True when value is a NUMBER written as a plain non-negative integer (no sign, fraction or
 * exponent) that fits in a uint64_t; stores it in *result. */
bool eg__json_as_u64(const eg__json *value, uint64_t *result);

/* "null", "false", "true", "number", "string", "array", "object". */
const char *eg__json_type_name(eg__json_type type);

/* Index of the first byte that is not part of well-formed UTF-8 (overlong forms, surrogates and
 * code points above U+10FFFF are ill-formed), or `length` when all of it is well-formed. */
size_t eg__utf8_check(const uint8_t *bytes, size_t length);

#endif
