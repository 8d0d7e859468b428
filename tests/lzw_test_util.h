/* A compress(1)-format LZW encoder for tests: it makes the streams that src/io/lzw.c must decode,
 * with the width changes, the clear codes and the group padding compress writes. Its output was
 * checked against gzip -d, an independent decoder of the format. */
#ifndef EAGLE_TESTS_LZW_TEST_UTIL_H
#define EAGLE_TESTS_LZW_TEST_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct lzw_writer {
    uint8_t *bytes; /* header + codes; bits past `bits` are zero */
    size_t bits, capacity;
    size_t segment_start;
    int64_t segment_codes;
    int width;
} lzw_writer;

static void lzw_put(lzw_writer *w, uint32_t code) {
    size_t need = (w->bits + (size_t)w->width + 7) / 8 + 8;
    if (need > w->capacity) {
        size_t capacity = w->capacity * 2 > need ? w->capacity * 2 : need;
        w->bytes = realloc(w->bytes, capacity);
        memset(w->bytes + w->capacity, 0, capacity - w->capacity);
        w->capacity = capacity;
    }
    for (int b = 0; b < w->width; b++, w->bits++)
        if (code >> b & 1) w->bytes[w->bits >> 3] |= (uint8_t)(1u << (w->bits & 7));
    w->segment_codes++;
}

/* compress pads the group of eight codes it was filling before a width change and after a clear. */
static void lzw_pad(lzw_writer *w) {
    w->bits = w->segment_start + (size_t)((w->segment_codes + 7) / 8) * 8 * (size_t)w->width;
    w->segment_start = w->bits;
    w->segment_codes = 0;
}

/* Encodes in[0 .. n) into a new malloc'd stream (*out_n bytes). block_mode allows clear codes:
 * one is written after every clear_every codes (0: never) and whenever the table fills. */
static uint8_t *lzw_encode(const uint8_t *in, size_t n, int max_width, bool block_mode,
                           int64_t clear_every, size_t *out_n) {
    lzw_writer w = {.capacity = 64, .width = 9};
    w.bytes = calloc(w.capacity, 1);
    w.bytes[0] = 0x1F;
    w.bytes[1] = 0x9D;
    w.bytes[2] = (uint8_t)(max_width | (block_mode ? 0x80 : 0));
    w.bits = w.segment_start = 24;
    uint32_t first = block_mode ? 257 : 256, table_size = 1u << max_width, next = first;
    /* (prefix code << 8 | byte) -> code + 1, open addressing */
    size_t n_slots = (size_t)table_size * 4;
    uint64_t *keys = calloc(n_slots, sizeof *keys);
    uint32_t *values = calloc(n_slots, sizeof *values);
    int64_t since_clear = 0;
    if (n > 0) {
        uint32_t current = in[0];
        for (size_t i = 1; i <= n; i++) {
            uint64_t key = 0;
            size_t slot = 0;
            if (i < n) {
                key = ((uint64_t)current << 8 | in[i]) + 1;
                slot = (size_t)(key * 0x9E3779B97F4A7C15ull >> 20) % n_slots;
                while (keys[slot] && keys[slot] != key) slot = (slot + 1) % n_slots;
                if (keys[slot]) {
                    current = values[slot] - 1;
                    continue;
                }
            }
            /* The decoder widens once it has more entries than the width holds; it adds one
             * fewer than the encoder has (none for the first code after a clear). */
            if (next > (1u << w.width) && w.width < max_width) {
                lzw_pad(&w);
                w.width++;
            }
            lzw_put(&w, current);
            since_clear++;
            if (i == n) break;
            if (next < table_size) {
                keys[slot] = key;
                values[slot] = next++ + 1;
            }
            if (block_mode && (next == table_size || (clear_every && since_clear >= clear_every))) {
                if (next > (1u << w.width) && w.width < max_width) {
                    lzw_pad(&w);
                    w.width++;
                }
                lzw_put(&w, 256);
                lzw_pad(&w);
                w.width = 9;
                next = first;
                since_clear = 0;
                memset(keys, 0, n_slots * sizeof *keys);
            }
            current = in[i];
        }
    }
    free(keys);
    free(values);
    *out_n = (w.bits + 7) / 8;
    return w.bytes;
}

#endif
