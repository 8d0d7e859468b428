/* compress(1)'s LZW streams (".Z"), decoded into memory: the Bible package's container stores
 * its text in them (src/io/kjv.c).
 *
 * Codes are packed least significant bit first, starting 9 bits wide; the width grows by one as
 * soon as the next table entry would not fit, up to the header's maximum. compress writes codes
 * in groups of eight (one group is `width` bytes) and, when the width changes or a clear code
 * (256, in block mode) resets the table, pads the group it was filling to its full size; the
 * decoder skips that padding. Instead of prefix chains, each table entry is kept as a place in
 * the output already written: an entry is the previous code's string plus the first byte of the
 * current one, which lie side by side in the output, so decoding a code is one copy. */

#ifndef EG_NO_CALLSITE
#define EG_NO_CALLSITE
#endif

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "io/text_formats.h"

#define LZW_FIRST_WIDTH 9
#define LZW_CLEAR       256

/* The `width` bits at bit `position` of `codes`, least significant first. */
static uint32_t read_code(const uint8_t *codes, size_t position, int width) {
    size_t byte = position >> 3;
    int shift = (int)(position & 7);
    /* width + shift <= 16 + 7 bits: at most three bytes, all inside the stream (checked). */
    uint32_t bits = codes[byte];
    if (shift + width > 8) bits |= (uint32_t)codes[byte + 1] << 8;
    if (shift + width > 16) bits |= (uint32_t)codes[byte + 2] << 16;
    return (bits >> shift) & ((1u << width) - 1);
}

/* The first bit after the current group of eight codes: where compress resumes after padding. */
static size_t skip_group_padding(size_t segment_start, int64_t segment_codes, int width) {
    int64_t groups = (segment_codes + 7) / 8;
    return segment_start + (size_t)groups * 8 * (size_t)width;
}

eg_status eg__lzw_decode(const uint8_t *in, size_t n, uint8_t *out, size_t capacity,
                         size_t *produced, const char *name) {
    if (!name) name = "data";
    *produced = 0;
    if (n < 3 || in[0] != 0x1F || in[1] != 0x9D)
        return eg__error(EG_ERR_FORMAT, "%s: not a compress (LZW) stream: no 1F 9D magic", name);
    int max_width = in[2] & 0x1F;
    bool block_mode = in[2] & 0x80;
    if ((in[2] & 0x60) || max_width < LZW_FIRST_WIDTH || max_width > 16)
        return eg__error(EG_ERR_FORMAT,
                         "%s: LZW header flags 0x%02X: the code width must be 9 to 16 bits and "
                         "bits 5-6 clear",
                         name, in[2]);
    const uint8_t *codes = in + 3;
    size_t total_bits = (n - 3) * 8;
    uint32_t table_size = 1u << max_width;
    uint32_t first_entry = block_mode ? 257 : 256;
    /* Entry e is out[start[e] .. start[e] + length[e]). */
    size_t *start = malloc(table_size * sizeof *start);
    uint32_t *length = malloc(table_size * sizeof *length);
    if (!start || !length) {
        free(start);
        free(length);
        return eg__error(EG_ERR_OUT_OF_MEMORY, "%s: out of host memory decoding LZW", name);
    }
    eg_status status = EG_OK;
    size_t position = 0, segment_start = 0, written = 0;
    int64_t segment_codes = 0, index = 0;
    int width = LZW_FIRST_WIDTH;
    uint32_t next_entry = first_entry;
    bool have_previous = false;
    size_t previous_start = 0;
    uint32_t previous_length = 0;
    for (;; index++) {
        if (next_entry >= (1u << width) && width < max_width) {
            position = skip_group_padding(segment_start, segment_codes, width);
            segment_start = position;
            segment_codes = 0;
            width++;
        }
        if (position > total_bits || total_bits - position < (size_t)width) break;
        uint32_t code = read_code(codes, position, width);
        position += (size_t)width;
        segment_codes++;
        if (block_mode && code == LZW_CLEAR) {
            position = skip_group_padding(segment_start, segment_codes, width);
            segment_start = position;
            segment_codes = 0;
            width = LZW_FIRST_WIDTH;
            next_entry = first_entry;
            have_previous = false;
            continue;
        }
        size_t from;
        uint32_t count;
        if (code < 256) {
            from = SIZE_MAX;
            count = 1;
        } else if (code < next_entry && code >= first_entry) {
            from = start[code];
            count = length[code];
        } else if (code == next_entry && have_previous) {
            /* The entry this code is about to define: the previous string and its first byte. */
            from = previous_start;
            count = previous_length + 1;
        } else {
            status = eg__error(EG_ERR_FORMAT,
                               "%s: LZW code %u (number %lld, %d bits) is not in the table "
                               "(%u entries)",
                               name, code, (long long)index, width, next_entry);
            break;
        }
        if (count > capacity - written) {
            status = eg__error(EG_ERR_FORMAT, "%s: LZW stream decodes to more than %zu bytes", name,
                               capacity);
            break;
        }
        if (from == SIZE_MAX) {
            out[written] = (uint8_t)code;
        } else {
            /* The source ends at or before `written`; only the entry being defined reaches it,
             * and its last byte is the first one written here. */
            memcpy(out + written, out + from, count - (code == next_entry ? 1 : 0));
            if (code == next_entry) out[written + count - 1] = out[from];
        }
        if (have_previous && next_entry < table_size) {
            start[next_entry] = previous_start;
            length[next_entry] = previous_length + 1;
            next_entry++;
        }
        have_previous = true;
        previous_start = written;
        previous_length = count;
        written += count;
    }
    free(start);
    free(length);
    if (status == EG_OK) *produced = written;
    return status;
}
