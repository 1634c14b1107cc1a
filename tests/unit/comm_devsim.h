/* comm_devsim.h - a simulated device for the communicator's tests: device
 * memory is host memory handed out at its address plus DEVSIM_TAG, which
 * makes it non-canonical on x86-64, so any host dereference of a "device"
 * pointer faults at once; the copy functions translate it back.  Pinned
 * allocations are counted, so a test can see the staging buffers freed.
 * The same trick as the compute backend's devsim (issue 18). */
#ifndef DS_TESTS_COMM_DEVSIM_H
#define DS_TESTS_COMM_DEVSIM_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

#define DEVSIM_TAG ((uintptr_t)1 << 62)

struct devsim {
	long pinned_live;   /* host_alloc minus host_free */
	long pinned_calls;  /* host_alloc calls */
	long copies;        /* to_host + to_dev + dev_copy calls */
	int fail_copies;    /* nonzero: every copy fails with this code */
};

static inline void *devsim_real(const void *p) { return (void *)((uintptr_t)p - DEVSIM_TAG); }

/* size bytes of "device memory", or NULL */
static inline void *devsim_malloc(size_t size)
{
	void *p = calloc(1, size ? size : 1);
	return p ? (void *)((uintptr_t)p + DEVSIM_TAG) : NULL;
}

static inline void devsim_free(void *d)
{
	if (d)
		free(devsim_real(d));
}

/* the test's own host <-> device copies */
static inline void devsim_put(void *d, const void *h, size_t n) { memcpy(devsim_real(d), h, n); }
static inline void devsim_get(void *h, const void *d, size_t n) { memcpy(h, devsim_real(d), n); }

static inline int devsim_is_dev(const void *p, void *ctx)
{
	(void)ctx;
	return ((uintptr_t)p & DEVSIM_TAG) != 0;
}

static inline int devsim_to_host(void *h, const void *d, size_t n, void *ctx)
{
	struct devsim *s = ctx;
	s->copies++;
	if (s->fail_copies)
		return s->fail_copies;
	if (devsim_is_dev(h, ctx) || !devsim_is_dev(d, ctx))
		return 99; /* the wrong kind of memory: the staged path mixed them up */
	memcpy(h, devsim_real(d), n);
	return 0;
}

static inline int devsim_to_dev(void *d, const void *h, size_t n, void *ctx)
{
	struct devsim *s = ctx;
	s->copies++;
	if (s->fail_copies)
		return s->fail_copies;
	if (!devsim_is_dev(d, ctx) || devsim_is_dev(h, ctx))
		return 99;
	memcpy(devsim_real(d), h, n);
	return 0;
}

static inline int devsim_dev_copy(void *dst, const void *src, size_t n, void *ctx)
{
	struct devsim *s = ctx;
	s->copies++;
	if (s->fail_copies)
		return s->fail_copies;
	if (!devsim_is_dev(dst, ctx) || !devsim_is_dev(src, ctx))
		return 99;
	memmove(devsim_real(dst), devsim_real(src), n);
	return 0;
}

static inline void *devsim_host_alloc(size_t n, void *ctx)
{
	struct devsim *s = ctx;
	void *p = malloc(n);
	if (p) {
		s->pinned_live++;
		s->pinned_calls++;
	}
	return p;
}

static inline void devsim_host_free(void *p, void *ctx)
{
	struct devsim *s = ctx;
	if (p)
		s->pinned_live--;
	free(p);
}

/* dm for a simulated device called dev_id ("" for the ordinal) */
static inline struct ds_comm_devmem devsim_devmem(struct devsim *s, int device, const char *dev_id)
{
	struct ds_comm_devmem dm = {
		.device = device,
		.to_host = devsim_to_host,
		.to_dev = devsim_to_dev,
		.dev_copy = devsim_dev_copy,
		.host_alloc = devsim_host_alloc,
		.host_free = devsim_host_free,
		.is_dev = devsim_is_dev,
		.ctx = s,
	};
	if (dev_id)
		strncpy(dm.dev_id, dev_id, sizeof dm.dev_id - 1);
	return dm;
}

#endif
