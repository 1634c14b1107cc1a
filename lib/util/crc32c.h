/* crc32c.h - CRC-32C (Castagnoli, reflected poly 0x82F63B78).
 * Used for checkpoint chunk checksums and TensorBoard's TFRecord framing.
 * crc32c("123456789") = 0xE3069283. */
#ifndef DS_UTIL_CRC32C_H
#define DS_UTIL_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extend crc (start with 0) over buf[0..n). Uses SSE4.2 when the CPU has it. */
uint32_t ds_crc32c(uint32_t crc, const void *buf, size_t n);

/* The same without the SSE4.2 instruction (the reference the fast path is
 * tested against). */
uint32_t ds_crc32c_portable(uint32_t crc, const void *buf, size_t n);

/* TFRecord's masked crc: ((c >> 15) | (c << 17)) + 0xa282ead8. */
static inline uint32_t ds_crc32c_mask(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

#endif
