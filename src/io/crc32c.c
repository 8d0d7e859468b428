/* CRC-32C: SSE4.2 crc32 instruction when available, slicing-by-8 tables otherwise. See crc32c.h. */
#include "io/crc32c.h"

#include <pthread.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define EG_CRC32C_X86 1
#include <nmmintrin.h>
#endif

#define POLYNOMIAL 0x82F63B78u /* reflected 0x1EDC6F41 */

static uint32_t tables[8][256];
static bool hardware;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void initialize(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t crc = i;
        for (int bit = 0; bit < 8; bit++) crc = (crc >> 1) ^ (POLYNOMIAL & (0u - (crc & 1)));
        tables[0][i] = crc;
    }
    for (int k = 1; k < 8; k++)
        for (int i = 0; i < 256; i++)
            tables[k][i] = (tables[k - 1][i] >> 8) ^ tables[0][tables[k - 1][i] & 0xff];
#ifdef EG_CRC32C_X86
    __builtin_cpu_init();
    hardware = __builtin_cpu_supports("sse4.2");
#endif
}

static uint32_t load32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* crc is the running (inverted) register. */
static uint32_t update_portable(uint32_t crc, const uint8_t *p, size_t n) {
    for (; n >= 8; p += 8, n -= 8) {
        uint32_t lo = crc ^ load32(p), hi = load32(p + 4);
        crc = tables[7][lo & 0xff] ^ tables[6][(lo >> 8) & 0xff] ^ tables[5][(lo >> 16) & 0xff] ^
              tables[4][lo >> 24] ^ tables[3][hi & 0xff] ^ tables[2][(hi >> 8) & 0xff] ^
              tables[1][(hi >> 16) & 0xff] ^ tables[0][hi >> 24];
    }
    while (n--) crc = (crc >> 8) ^ tables[0][(crc ^ *p++) & 0xff];
    return crc;
}

#ifdef EG_CRC32C_X86
__attribute__((target("sse4.2"))) static uint32_t update_hardware(uint32_t crc, const uint8_t *p,
                                                                  size_t n) {
#ifdef __x86_64__
    uint64_t wide = crc;
    for (; n >= 8; p += 8, n -= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        wide = _mm_crc32_u64(wide, word);
    }
    crc = (uint32_t)wide;
#endif
    for (; n >= 4; p += 4, n -= 4) {
        uint32_t word;
        memcpy(&word, p, 4);
        crc = _mm_crc32_u32(crc, word);
    }
    while (n--) crc = _mm_crc32_u8(crc, *p++);
    return crc;
}
#endif

uint32_t eg__crc32c_extend_portable(uint32_t crc, const void *data, size_t n) {
    pthread_once(&once, initialize);
    if (n == 0) return crc;
    return ~update_portable(~crc, data, n);
}

uint32_t eg__crc32c_extend(uint32_t crc, const void *data, size_t n) {
    pthread_once(&once, initialize);
    if (n == 0) return crc;
#ifdef EG_CRC32C_X86
    if (hardware) return ~update_hardware(~crc, data, n);
#endif
    return ~update_portable(~crc, data, n);
}

uint32_t eg__crc32c(const void *data, size_t n) {
    return eg__crc32c_extend(0, data, n);
}

bool eg__crc32c_uses_hardware(void) {
    pthread_once(&once, initialize);
    return hardware;
}

#define MASK_DELTA 0xa282ead8u

uint32_t eg__crc32c_mask(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + MASK_DELTA;
}

uint32_t eg__crc32c_unmask(uint32_t masked) {
    uint32_t rotated = masked - MASK_DELTA;
    return (rotated >> 17) | (rotated << 15);
}
