/* mem.c - aligned allocation with accounting, size parsing (see mem.h). */

#include "util/mem.h"
#include "util/err.h"

#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

/* A header in front of each block records its size so ds_free can account.
 * The header is one alignment unit so the user pointer stays aligned. */
struct blk { size_t size; size_t off; };

static atomic_size_t held;
static atomic_size_t peak;

void *ds_alloc_aligned(size_t size, size_t align)
{
	void *raw;
	size_t off = align < sizeof(struct blk) ? sizeof(struct blk) : align;
	if (align < sizeof(void *) || (align & (align - 1)))
		return NULL;
	if (size > SIZE_MAX - off)
		return NULL;
	if (posix_memalign(&raw, align, size + off))
		return NULL;
	memset((char *)raw + off, 0, size);
	struct blk *b = (struct blk *)((char *)raw + off - sizeof(struct blk));
	b->size = size;
	b->off = off;
	size_t now = atomic_fetch_add(&held, size) + size;
	size_t p = atomic_load(&peak);
	while (now > p && !atomic_compare_exchange_weak(&peak, &p, now))
		;
	return (char *)raw + off;
}

void ds_free(void *p)
{
	if (!p)
		return;
	struct blk *b = (struct blk *)((char *)p - sizeof(struct blk));
	atomic_fetch_sub(&held, b->size);
	free((char *)p - b->off);
}

size_t ds_mem_held(void) { return atomic_load(&held); }
size_t ds_mem_peak(void) { return atomic_load(&peak); }
void ds_mem_peak_reset(void) { atomic_store(&peak, atomic_load(&held)); }

size_t ds_mem_peak_rss(void)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return (size_t)ru.ru_maxrss * 1024;  /* Linux reports KiB */
}

int ds_parse_double(const char *s, double *out)
{
	char *end;
	if (!s || !*s)
		return DS_EINVAL;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || *end || !isfinite(v))
		return DS_EINVAL;
	*out = v;
	return 0;
}

int ds_parse_size(const char *s, uint64_t *out)
{
	char *end;
	double mult = 1;
	if (!s || !*s || *s == '-')
		return DS_EINVAL;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || !isfinite(v) || v < 0)
		return DS_EINVAL;
	switch (*end) {
	case 'k': case 'K': mult = 1024.0; end++; break;
	case 'm': case 'M': mult = 1024.0 * 1024; end++; break;
	case 'g': case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
	case 't': case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
	default: break;
	}
	if (*end == 'i' && mult > 1)
		end++;
	if ((*end == 'B' || *end == 'b') && end[1] == '\0')
		end++;
	if (*end)
		return DS_EINVAL;
	v *= mult;
	if (v != floor(v) || v > 18446744073709549568.0)
		return DS_EINVAL;
	*out = (uint64_t)v;
	return 0;
}

int ds_parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
	char *end;
	if (!s || !*s || *s == '-' || *s == '+')
		return DS_EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return DS_EINVAL;
	*out = v;
	return 0;
}

char *ds_fmt_bytes(double bytes, char *buf, size_t n)
{
	static const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int i = 0;
	while (bytes >= 1024 && i < 4) {
		bytes /= 1024;
		i++;
	}
	if (i == 0)
		snprintf(buf, n, "%.0f B", bytes);
	else
		snprintf(buf, n, "%.1f %s", bytes, u[i]);
	return buf;
}
