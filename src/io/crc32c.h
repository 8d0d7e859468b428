/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by TFRecord files, and the
 * "masked" form TFRecord stores. Computed with the SSE4.2 crc32 instruction when the CPU has it
 * (detected at run time), otherwise by slicing-by-8 tables; both give the same values. All
 * functions are thread-safe. */
#ifndef EAGLE_SRC_IO_CRC32C_H
#define EAGLE_SRC_IO_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of data[0, n) appended to bytes whose CRC-32C was crc (0 to start):
 * eg__crc32c_extend(eg__crc32c_extend(0, a, n), b, m) is the CRC of a followed by b.
 * data may be NULL when n == 0. eg__crc32c_extend(0, "123456789", 9) == 0xE3069283. */
uint32_t eg__crc32c_extend(uint32_t crc, const void *data, size_t n);

/* Shorthand for eg__crc32c_extend(0, data, n). */
uint32_t eg__crc32c(const void *data, size_t n);

/* The table implementation alone, whatever the CPU (for tests that compare the two). */
uint32_t eg__crc32c_extend_portable(uint32_t crc, const void *data, size_t n);

/* True when eg__crc32c_extend uses the crc32 instruction on this machine. */
bool eg__crc32c_uses_hardware(void);

/* TFRecord's masking, so that the CRC of data holding CRCs is not degenerate:
 * ((crc >> 15) | (crc << 17)) + 0xa282ead8 (32-bit arithmetic), and its inverse. */
uint32_t eg__crc32c_mask(uint32_t crc);
uint32_t eg__crc32c_unmask(uint32_t masked);

#endif
