/* mem.h - aligned allocation with accounting, and size parsing.
 *
 * Every large buffer libds owns (parameters, gradients, optimizer states,
 * communication buffers, I/O buffers) comes from ds_alloc so that the bytes
 * held per rank can be compared with the memory estimator.
 */
#ifndef DS_UTIL_MEM_H
#define DS_UTIL_MEM_H

#include <stddef.h>
#include <stdint.h>

#define DS_ALIGN 64  /* cache line and AVX-512 width */

/* Zeroed allocation aligned to `align` (power of two >= sizeof(void*)).
 * Returns NULL on failure.  Free with ds_free. */
void *ds_alloc_aligned(size_t size, size_t align);
static inline void *ds_alloc(size_t size) { return ds_alloc_aligned(size, DS_ALIGN); }
void ds_free(void *p);  /* accepts NULL */

/* Bytes currently held and the high-water mark through ds_alloc*. */
size_t ds_mem_held(void);
size_t ds_mem_peak(void);
/* Restart the high-water mark at the bytes held now (e.g. after setup, so
 * that ds_mem_peak then measures the training loop alone). */
void ds_mem_peak_reset(void);

/* Peak resident set size of this process in bytes (0 if unknown). */
size_t ds_mem_peak_rss(void);

/* Parse "4096", "4K", "1M", "2G", "1.5G", "5e8" (K=1024). Returns 0 or DS_EINVAL. */
int ds_parse_size(const char *s, uint64_t *out);
/* Parse a non-negative decimal integer with range check [lo, hi]. */
int ds_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out);
/* Parse a finite double. */
int ds_parse_double(const char *s, double *out);

/* Format bytes as "1.2 GiB" into buf; returns buf. */
char *ds_fmt_bytes(double bytes, char *buf, size_t n);

#endif
