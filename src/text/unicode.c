/* UTF-8 decoding and character classes for the pre-tokenizer. See unicode.h. */
#include "text/unicode.h"

size_t eg__utf8_next(const uint8_t *s, size_t n, uint32_t *cp) {
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t more;
    uint32_t value;
    if (c >= 0xC2 && c <= 0xDF) {
        more = 1;
        value = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        more = 2;
        value = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        more = 3;
        value = c & 0x07;
    } else {
        *cp = EG__UTF8_INVALID;
        return 1;
    }
    if (n <= more) {
        *cp = EG__UTF8_INVALID;
        return 1;
    }
    for (size_t k = 1; k <= more; k++) {
        if ((s[k] & 0xC0) != 0x80) {
            *cp = EG__UTF8_INVALID;
            return 1;
        }
        value = value << 6 | (s[k] & 0x3F);
    }
    if ((more == 2 && value < 0x800) || (more == 3 && (value < 0x10000 || value > 0x10FFFF)) ||
        (value >= 0xD800 && value <= 0xDFFF)) {
        *cp = EG__UTF8_INVALID;
        return 1;
    }
    *cp = value;
    return more + 1;
}

size_t eg__utf8_encode(uint32_t cp, uint8_t *out) {
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | cp >> 6);
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12);
        out[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18);
    out[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

bool eg__unicode_is_space(uint32_t cp) {
    if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

eg__unicode_class eg__unicode_classify(uint32_t cp) {
    /* ASCII first: it is most of any text, and needs no search. */
    if (cp < 0x80) {
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return EG__UNICODE_LETTER;
        if (cp >= '0' && cp <= '9') return EG__UNICODE_NUMBER;
        return eg__unicode_is_space(cp) ? EG__UNICODE_SPACE : EG__UNICODE_OTHER;
    }
    if (cp == EG__UTF8_INVALID) return EG__UNICODE_OTHER;
    if (eg__unicode_is_space(cp)) return EG__UNICODE_SPACE;
    size_t lo = 0, hi = eg__unicode_n_ranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (eg__unicode_ranges[mid].last < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < eg__unicode_n_ranges && eg__unicode_ranges[lo].first <= cp)
        return eg__unicode_ranges[lo].cls;
    return EG__UNICODE_OTHER;
}
