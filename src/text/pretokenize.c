/* Pre-tokenization: GPT-2's byte table, its word pattern, and the split on added tokens. Written
 * as hand-made matchers rather than a regex engine: the pattern is fixed, and a direct scanner is
 * both faster and easier to prove equal to Oniguruma's backtracking than a general engine. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "text/internal.h"
#include "text/unicode.h"

/* ---- GPT-2's bytes-to-characters table ---- */

static bool stands_for_itself(unsigned b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t eg__byte_to_char(uint8_t byte) {
    if (stands_for_itself(byte)) return byte;
    /* The others, in increasing order, take U+0100 onwards: 0x00..0x20 (33 of them), 0x7F..0xA0
     * (34), 0xAD (1). */
    if (byte <= 0x20) return 0x100u + byte;
    if (byte >= 0x7F && byte <= 0xA0) return 0x100u + 33 + (byte - 0x7Fu);
    return 0x100u + 33 + 34; /* 0xAD */
}

int eg__char_to_byte(uint32_t cp) {
    if (cp < 0x100) return stands_for_itself(cp) ? (int)cp : -1;
    if (cp < 0x100 + 33) return (int)(cp - 0x100);
    if (cp < 0x100 + 33 + 34) return (int)(cp - 0x100 - 33 + 0x7F);
    if (cp == 0x100 + 33 + 34) return 0xAD;
    return -1;
}

size_t eg__byte_level_spell(const uint8_t *bytes, size_t n, char *out) {
    size_t used = 0;
    for (size_t i = 0; i < n; i++)
        used += eg__utf8_encode(eg__byte_to_char(bytes[i]), (uint8_t *)out + used);
    return used;
}

/* ---- GPT-2's pattern ---- */

typedef struct character {
    size_t length;
    eg__unicode_class cls;
} character;

static character char_at(const uint8_t *text, size_t n, size_t at) {
    uint32_t cp;
    character c;
    c.length = eg__utf8_next(text + at, n - at, &cp);
    c.cls = eg__unicode_classify(cp);
    return c;
}

/* The end of the run of characters of class cls that starts at `at`. */
static size_t run_end(const uint8_t *text, size_t n, size_t at, eg__unicode_class cls) {
    while (at < n) {
        character c = char_at(text, n, at);
        if (c.cls != cls) break;
        at += c.length;
    }
    return at;
}

/* 's|'t|'re|'ve|'m|'ll|'d: the length of the contraction at text[at] == '\'', or 0. */
static size_t contraction_length(const uint8_t *text, size_t n, size_t at) {
    if (at + 1 >= n) return 0;
    uint8_t a = text[at + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (at + 2 >= n) return 0;
    uint8_t b = text[at + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

size_t eg__gpt2_word_length(const uint8_t *text, size_t n, size_t at) {
    if (text[at] == '\'') {
        size_t k = contraction_length(text, n, at);
        if (k) return k;
    }
    character first = char_at(text, n, at);
    /* " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+": an optional U+0020, then a run of one class
     * (OTHER covers the last alternative, ill-formed bytes included). */
    if (text[at] == ' ' && at + 1 < n) {
        character next = char_at(text, n, at + 1);
        if (next.cls != EG__UNICODE_SPACE) return run_end(text, n, at + 1, next.cls) - at;
    }
    if (first.cls != EG__UNICODE_SPACE) return run_end(text, n, at, first.cls) - at;
    /* "\s+(?!\S)": the whole run of whitespace when it ends the text; before anything else the
     * greedy run backs off one character, so that the last whitespace character is left to
     * start the next word (" word"); a run of one character falls to "\s+" and is taken whole. */
    size_t end = run_end(text, n, at, EG__UNICODE_SPACE);
    if (end == n) return end - at;
    size_t last = end - 1;
    while (last > at && (text[last] & 0xC0) == 0x80) last--; /* whitespace is well-formed */
    return (last > at ? last : end) - at;
}

/* ---- added tokens ---- */

typedef struct piece_list {
    eg__text_piece *items;
    size_t n, capacity;
} piece_list;

static bool push_piece(piece_list *list, size_t begin, size_t end, int32_t id) {
    if (id < 0 && begin >= end) return true;
    if (list->n == list->capacity) {
        size_t capacity = list->capacity ? list->capacity * 2 : 16;
        eg__text_piece *items = realloc(list->items, capacity * sizeof *items);
        if (!items) return false;
        list->items = items;
        list->capacity = capacity;
    }
    list->items[list->n++] = (eg__text_piece){begin, end, id};
    return true;
}

/* The id of the longest added token of this pass that starts at text[at], or -1. */
static int32_t longest_added(const eg_tokenizer *tok, int pass, const uint8_t *text, size_t end,
                             size_t at, size_t *length) {
    int32_t best = -1;
    size_t best_length = 0;
    for (int32_t k = 0; k < tok->n_added; k++) {
        int32_t id = tok->added_ids[k];
        if (((tok->flags[id] & EG__TOKEN_NORMALIZED) != 0) != (pass == 1)) continue;
        size_t len = tok->text_lengths[id];
        if (len > best_length && len <= end - at &&
            memcmp(text + at, eg__token_text(tok, id), len) == 0) {
            best = id;
            best_length = len;
        }
    }
    *length = best_length;
    return best;
}

/* Whitespace (eg__unicode_is_space) before `at` back to `floor`: the new start. */
static size_t strip_left(const uint8_t *text, size_t floor, size_t at) {
    while (at > floor) {
        size_t start = at - 1;
        while (start > floor && (text[start] & 0xC0) == 0x80) start--;
        uint32_t cp;
        size_t len = eg__utf8_next(text + start, at - start, &cp);
        if (start + len != at || !eg__unicode_is_space(cp)) break;
        at = start;
    }
    return at;
}

static size_t strip_right(const uint8_t *text, size_t end, size_t at) {
    while (at < end) {
        uint32_t cp;
        size_t len = eg__utf8_next(text + at, end - at, &cp);
        if (!eg__unicode_is_space(cp)) break;
        at += len;
    }
    return at;
}

/* One pass over the plain piece [begin, end): its matches and the plain text between them. */
static bool split_pass(const eg_tokenizer *tok, int pass, const uint8_t *text, size_t begin,
                       size_t end, piece_list *out) {
    const uint8_t *first_bytes = tok->added_first_bytes[pass];
    size_t plain = begin; /* where the current plain text starts */
    size_t at = begin;
    while (at < end) {
        if (!(first_bytes[text[at] >> 3] & 1u << (text[at] & 7))) {
            at++;
            continue;
        }
        size_t length;
        int32_t id = longest_added(tok, pass, text, end, at, &length);
        if (id < 0) {
            at++;
            continue;
        }
        size_t start = at, stop = at + length;
        if (tok->flags[id] & EG__TOKEN_LSTRIP) start = strip_left(text, plain, start);
        if (tok->flags[id] & EG__TOKEN_RSTRIP) stop = strip_right(text, end, stop);
        if (!push_piece(out, plain, start, -1) || !push_piece(out, start, stop, id)) return false;
        plain = at = stop;
    }
    return push_piece(out, plain, end, -1);
}

eg_status eg__split_added(const eg_tokenizer *tok, const uint8_t *text, size_t n,
                          eg__text_piece **pieces, size_t *n_pieces) {
    piece_list first = {0}, second = {0};
    bool ok = split_pass(tok, 0, text, 0, n, &first);
    for (size_t i = 0; ok && i < first.n; i++) {
        const eg__text_piece *p = &first.items[i];
        ok = p->id >= 0 ? push_piece(&second, p->begin, p->end, p->id)
                        : split_pass(tok, 1, text, p->begin, p->end, &second);
    }
    free(first.items);
    if (!ok) {
        free(second.items);
        *pieces = NULL;
        *n_pieces = 0;
        return eg__error(EG_ERR_OUT_OF_MEMORY, "tokenizer_encode: out of host memory");
    }
    *pieces = second.items;
    *n_pieces = second.n;
    return EG_OK;
}
