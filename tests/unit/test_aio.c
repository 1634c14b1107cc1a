/* test_aio.c - the async-I/O engine: bytes written and read back through
 * every engine and mode combination are identical (odd sizes, short last
 * blocks, offsets), checked against plain pread of the file; errors come
 * back as status codes with the numbers in the message; a queue deeper
 * than queue_depth loses nothing; the O_DIRECT refusal path by injection.
 */
#include "config.h"
#include "unit.h"

#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/aio.h"
#include "util/mem.h"

static char dir[256];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "test_aio.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[300];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd);
}

static void path_of(char *p, size_t n, const char *name)
{
	snprintf(p, n, "%s/%s", dir, name);
}

/* Deterministic bytes that differ per position and seed. */
static void fill(unsigned char *b, size_t n, unsigned seed)
{
	uint32_t x = 2463534242u ^ seed;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		b[i] = (unsigned char)x;
	}
}

/* Independent check: the file's bytes [off, off+n) as plain pread sees them. */
static void assert_file_equals(const char *path, uint64_t off, const unsigned char *want, size_t n)
{
	unsigned char *got = malloc(n);
	int fd = open(path, O_RDONLY);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, got, n, (off_t)off), (ssize_t)n);
	close(fd);
	assert_memory_equal(got, want, n);
	free(got);
}

struct mode {
	const char *engine;
	int buffered;
};

static const char *engines_built[] = {
#ifdef HAVE_LIBAIO
	"aio",
#endif
	"posix", NULL
};

/* One write + read-back; the file holds a 4096-byte 0xEE prefix before off
 * that must survive. */
static void roundtrip(const struct ds_aio_opts *o, uint64_t nbytes, uint64_t off, unsigned seed)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_aio *h;
	char path[300];
	unsigned char *src = ds_alloc_aligned(nbytes, DS_AIO_ALIGN), *dst = ds_alloc_aligned(nbytes, DS_AIO_ALIGN);
	unsigned char pre[4096];

	snprintf(path, sizeof(path), "%s/rt.%u", dir, seed);
	unlink(path);
	memset(pre, 0xEE, sizeof(pre));
	int fd = open(path, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, pre, sizeof(pre), 0), (ssize_t)sizeof(pre));
	close(fd);

	fill(src, nbytes, seed);
	int rc = ds_aio_create(&h, o, &err);
	if (rc < 0)
		fail_msg("create %s: %s", o->engine, err.msg);
	rc = ds_aio_sync_pwrite(h, src, nbytes, path, off, &err);
	if (rc != 1)
		fail_msg("write %s bs %llu qd %d ss %d ov %d p %d buf %d n %llu off %llu: rc %d %s", o->engine,
			 (unsigned long long)o->block_size, o->queue_depth, o->single_submit, o->overlap_events,
			 o->intra_op_parallelism, o->buffered, (unsigned long long)nbytes, (unsigned long long)off, rc,
			 err.msg);
	assert_int_equal(ds_aio_async_pread(h, dst, nbytes, path, off, &err), 0);
	rc = ds_aio_wait(h, &err);
	if (rc != 1)
		fail_msg("read %s: rc %d %s", o->engine, rc, err.msg);
	assert_memory_equal(dst, src, nbytes);
	assert_file_equals(path, off, src, nbytes);
	if (off >= sizeof(pre))
		assert_file_equals(path, 0, pre, sizeof(pre));
	ds_aio_destroy(h);
	unlink(path);
	ds_free(src);
	ds_free(dst);
}

/* Every engine x single_submit x overlap_events x threads x queue depth x
 * block size, O_DIRECT with a short last block per chunk and an offset. */
static void test_roundtrip_direct(void **state)
{
	(void)state;
	static const uint64_t bss[] = { 4096, 12288 };
	static const int qds[] = { 1, 2, 32 };
	static const int ps[] = { 1, 2, 4 };
	unsigned seed = 1;

	for (int e = 0; engines_built[e]; e++)
		for (int ss = 0; ss < 2; ss++)
			for (int ov = 0; ov < 2; ov++)
				for (size_t pi = 0; pi < 3; pi++)
					for (size_t qi = 0; qi < 3; qi++)
						for (size_t bi = 0; bi < 2; bi++) {
							struct ds_aio_opts o = DS_AIO_OPTS_INIT;
							o.engine = engines_built[e];
							o.single_submit = ss;
							o.overlap_events = ov;
							o.intra_op_parallelism = ps[pi];
							o.queue_depth = qds[qi];
							o.block_size = bss[bi];
							/* chunk of 7 pages: 12288-byte blocks leave a
							 * short 4096-byte last block */
							uint64_t n = (uint64_t)ps[pi] * 7 * 4096;
							roundtrip(&o, n, seed % 2 ? 8192 : 0, seed);
							seed++;
						}
}

/* Buffered: odd sizes, odd offsets, odd block sizes, short last blocks. */
static void test_roundtrip_buffered_odd(void **state)
{
	(void)state;
	static const uint64_t ns[] = { 1, 3 * 7777, 100003 };
	static const int ps[] = { 1, 3 };
	unsigned seed = 1000;

	for (int e = 0; engines_built[e]; e++)
		for (int ss = 0; ss < 2; ss++)
			for (int ov = 0; ov < 2; ov++)
				for (size_t pi = 0; pi < 2; pi++)
					for (size_t ni = 0; ni < 3; ni++) {
						struct ds_aio_opts o = DS_AIO_OPTS_INIT;
						uint64_t n = ns[ni] * (uint64_t)ps[pi];
						o.engine = engines_built[e];
						o.buffered = 1;
						o.single_submit = ss;
						o.overlap_events = ov;
						o.intra_op_parallelism = ps[pi];
						o.queue_depth = 3;
						o.block_size = 1000;
						roundtrip(&o, n, 4096 + 123, seed++);
					}
}

/* 40 async writes to distinct regions with queue_depth 1 and 2 threads,
 * then one wait: every one lands, and one read of the whole file agrees. */
static void test_queue_full_loses_nothing(void **state)
{
	(void)state;
	enum { NOPS = 40, OPB = 2 * 3 * 4096 };
	for (int e = 0; engines_built[e]; e++) {
		struct ds_aio_opts o = DS_AIO_OPTS_INIT;
		struct ds_err err = DS_ERR_INIT;
		struct ds_aio *h;
		char path[300];
		unsigned char *src = ds_alloc_aligned((size_t)NOPS * OPB, DS_AIO_ALIGN);
		unsigned char *dst = ds_alloc_aligned((size_t)NOPS * OPB, DS_AIO_ALIGN);

		o.engine = engines_built[e];
		o.queue_depth = 1;
		o.block_size = 4096;
		o.intra_op_parallelism = 2;
		o.overlap_events = 1;
		path_of(path, sizeof(path), "qfull");
		unlink(path);
		fill(src, (size_t)NOPS * OPB, 77);
		assert_int_equal(ds_aio_create(&h, &o, &err), 0);
		ds_aio_lat_enable(h, 1);
		for (int i = NOPS - 1; i >= 0; i--) /* backwards: order must not matter */
			assert_int_equal(ds_aio_async_pwrite(h, src + (size_t)i * OPB, OPB, path, (uint64_t)i * OPB, &err), 0);
		assert_int_equal(ds_aio_wait(h, &err), NOPS);
		/* one request per 4096-byte block, each with a latency */
		struct ds_aio_lat lat = DS_AIO_LAT_INIT;
		ds_aio_lat_take(h, &lat);
		assert_int_equal(lat.n, (size_t)NOPS * OPB / 4096);
		assert_true(ds_aio_lat_quantile(&lat, 0.99) >= ds_aio_lat_quantile(&lat, 0.5));
		ds_aio_lat_release(&lat);
		struct stat st;
		assert_int_equal(stat(path, &st), 0);
		assert_int_equal(st.st_size, (off_t)NOPS * OPB);
		assert_int_equal(ds_aio_sync_pread(h, dst, (uint64_t)NOPS * OPB, path, 0, &err), 1);
		assert_memory_equal(dst, src, (size_t)NOPS * OPB);
		assert_int_equal(ds_aio_wait(h, &err), 0); /* nothing left */
		ds_aio_destroy(h);
		unlink(path);
		ds_free(src);
		ds_free(dst);
	}
}

/* The kernel queue full (test fault): io_submit takes one request per call
 * and refuses every third call with EAGAIN; nothing may be lost or
 * reordered, in either submission mode. */
#ifdef HAVE_LIBAIO
static void test_aio_queue_full_fault(void **state)
{
	(void)state;
	setenv("DS_TEST_FAULT_AIO_QUEUE_FULL", "1", 1);
	for (int ov = 0; ov < 2; ov++)
		for (int qd = 1; qd <= 16; qd *= 4) {
			struct ds_aio_opts o = DS_AIO_OPTS_INIT;
			o.engine = "aio";
			o.block_size = 4096;
			o.queue_depth = qd;
			o.overlap_events = ov;
			o.intra_op_parallelism = 2;
			roundtrip(&o, 2 * 37 * 4096, 4096, 5000 + (unsigned)(ov * 100 + qd));
		}
	unsetenv("DS_TEST_FAULT_AIO_QUEUE_FULL");
}
#endif

/* Write 12 pages as 4096-byte requests and count what the threads did. */
static struct ds_aio_counters counted(const char *engine, int ss, int ov, int qd, int p, uint64_t bs)
{
	struct ds_aio_opts o = DS_AIO_OPTS_INIT;
	struct ds_err err = DS_ERR_INIT;
	struct ds_aio_counters c;
	struct ds_aio *h;
	char path[300];
	unsigned char *buf = ds_alloc_aligned(12 * 4096, DS_AIO_ALIGN);

	path_of(path, sizeof(path), "counted");
	o.engine = engine;
	o.single_submit = ss;
	o.overlap_events = ov;
	o.queue_depth = qd;
	o.intra_op_parallelism = p;
	o.block_size = bs;
	assert_int_equal(ds_aio_create(&h, &o, &err), 0);
	assert_int_equal(ds_aio_sync_pwrite(h, buf, 12 * 4096, path, 0, &err), 1);
	ds_aio_counters(h, &c);
	ds_aio_destroy(h);
	unlink(path);
	ds_free(buf);
	return c;
}

/* DeepSpeed's meanings, counted: block_size requests, single_submit one
 * request per io_submit, batches of queue_depth without overlap_events,
 * never more than queue_depth in flight per thread. */
static void test_modes_counted(void **state)
{
	(void)state;
	struct ds_aio_counters c;
#ifdef HAVE_LIBAIO
	c = counted("aio", 1, 1, 4, 1, 4096);
	assert_int_equal(c.requests, 12);
	assert_int_equal(c.submit_calls, 12);
	assert_int_equal(c.max_inflight, 4);
	c = counted("aio", 0, 0, 4, 1, 4096);
	assert_int_equal(c.requests, 12);
	assert_int_equal(c.submit_calls, 3);
	assert_int_equal(c.max_inflight, 4);
	c = counted("aio", 0, 1, 4, 1, 4096);
	assert_true(c.submit_calls >= 3 && c.submit_calls <= 9);
	assert_int_equal(c.max_inflight, 4);
	c = counted("aio", 0, 0, 32, 1, 4096);
	assert_int_equal(c.submit_calls, 1);
	assert_int_equal(c.max_inflight, 12);
	/* two threads of 6 pages; 3-page blocks: 2 requests each */
	c = counted("aio", 0, 0, 8, 2, 12288);
	assert_int_equal(c.requests, 4);
	assert_int_equal(c.submit_calls, 2);
	assert_int_equal(c.max_inflight, 2);
	/* 5-page blocks: 6 pages = 5 + a short 1 per thread */
	c = counted("aio", 1, 0, 8, 2, 20480);
	assert_int_equal(c.requests, 4);
	assert_int_equal(c.submit_calls, 4);
#endif
	c = counted("posix", 0, 0, 8, 3, 8192);
	assert_int_equal(c.requests, 6); /* 4 pages per thread = 2 requests x 3 */
	assert_int_equal(c.submit_calls, 0);
	assert_int_equal(c.max_inflight, 1);
	c = counted("null", 0, 0, 8, 1, 4096);
	assert_int_equal(c.requests, 12);
}

static void test_getters_and_defaults(void **state)
{
	(void)state;
	struct ds_aio_opts o = DS_AIO_OPTS_INIT;
	struct ds_err err = DS_ERR_INIT;
	struct ds_aio *h;

	/* DeepSpeed's aio_handle constructor defaults */
	assert_int_equal(o.block_size, 1048576);
	assert_int_equal(o.queue_depth, 128);
	assert_int_equal(o.single_submit, 0);
	assert_int_equal(o.overlap_events, 0);
	assert_int_equal(o.intra_op_parallelism, 1);
	o.engine = "posix";
	o.block_size = 8192;
	o.queue_depth = 5;
	o.single_submit = 1;
	o.overlap_events = 1;
	o.intra_op_parallelism = 3;
	assert_int_equal(ds_aio_create(&h, &o, &err), 0);
	assert_int_equal(ds_aio_get_block_size(h), 8192);
	assert_int_equal(ds_aio_get_queue_depth(h), 5);
	assert_int_equal(ds_aio_get_single_submit(h), 1);
	assert_int_equal(ds_aio_get_overlap_events(h), 1);
	assert_int_equal(ds_aio_get_intra_op_parallelism(h), 3);
	assert_int_equal(ds_aio_get_buffered(h), 0);
	assert_string_equal(ds_aio_get_engine(h), "posix");
	ds_aio_destroy(h);
	ds_aio_destroy(NULL);
	/* the config section's defaults (DeepSpeed constants.py) in the table */
	assert_int_equal(ds_aio_optdef_find("queue_depth")->def, 8);
	assert_int_equal(ds_aio_optdef_find("overlap_events")->def, 1);
	assert_ptr_equal(ds_aio_optdef_find("io_parallel"), ds_aio_optdef_find("intra_op_parallelism"));
	assert_null(ds_aio_optdef_find("queue_dpth"));
}

#define ASSERT_ERR(expr, code, text) do { \
		int rc_ = (expr); \
		assert_int_equal(rc_, code); \
		if (!strstr(err.msg, text)) \
			fail_msg("message '%s' lacks '%s'", err.msg, text); \
		ds_err_clear(&err); \
	} while (0)

static void test_errors_with_numbers(void **state)
{
	(void)state;
	struct ds_aio_opts o = DS_AIO_OPTS_INIT;
	struct ds_err err = DS_ERR_INIT;
	struct ds_aio *h = NULL;
	char path[300];
	unsigned char *buf = ds_alloc_aligned(65536, DS_AIO_ALIGN);

	path_of(path, sizeof(path), "err");
	o.engine = "posix";
	o.block_size = 1000;
	ASSERT_ERR(ds_aio_create(&h, &o, &err), DS_EINVAL, "aio.block_size: 1000 is not a multiple of 4096");
	o.block_size = 4096;
	o.queue_depth = 0;
	ASSERT_ERR(ds_aio_create(&h, &o, &err), DS_EINVAL, "aio.queue_depth: 0 is out of range [1, 4096]");
	o.queue_depth = 4;
	o.engine = "spdk";
	ASSERT_ERR(ds_aio_create(&h, &o, &err), DS_EINVAL, "unknown engine 'spdk'");
#ifndef HAVE_LIBAIO
	o.engine = "aio";
	ASSERT_ERR(ds_aio_create(&h, &o, &err), DS_ENOTSUP, "--with-libaio");
#endif
	for (int e = 0; engines_built[e]; e++) {
		o.engine = engines_built[e];
		o.intra_op_parallelism = 3;
		assert_int_equal(ds_aio_create(&h, &o, &err), 0);
		ASSERT_ERR(ds_aio_sync_pwrite(h, buf, 4096, path, 0, &err), DS_EINVAL,
			   "4096 bytes are not divisible by intra_op_parallelism 3");
		ASSERT_ERR(ds_aio_sync_pwrite(h, buf, 3 * 1000, path, 0, &err), DS_EINVAL,
			   "3000 bytes / intra_op_parallelism 3 = 1000 bytes per thread, not a multiple of 4096");
		ASSERT_ERR(ds_aio_sync_pwrite(h, buf + 512, 3 * 4096, path, 0, &err), DS_EINVAL,
			   "is not aligned to 4096 bytes");
		ASSERT_ERR(ds_aio_sync_pwrite(h, buf, 3 * 4096, path, 100, &err), DS_EINVAL,
			   "offset 100 is not a multiple of 4096");
		ASSERT_ERR(ds_aio_sync_pwrite(h, buf, 0, path, 0, &err), DS_EINVAL, "0 bytes requested");
		/* a missing file to read, and a read past the end */
		ASSERT_ERR(ds_aio_sync_pread(h, buf, 3 * 4096, "no/such/file", 0, &err), DS_EIO,
			   "open no/such/file: No such file or directory");
		unlink(path);
		assert_int_equal(ds_aio_sync_pwrite(h, buf, 3 * 4096, path, 0, &err), 1);
		ASSERT_ERR(ds_aio_sync_pread(h, buf, 3 * 8192, path, 0, &err), DS_EIO, "(the file ends there)");
		/* the handle still works after failures */
		assert_int_equal(ds_aio_sync_pread(h, buf, 3 * 4096, path, 0, &err), 1);
		ds_aio_destroy(h);
		h = NULL;
	}
	unlink(path);
	ds_free(buf);
}

/* The refusal path: injected, the probe says refused, an O_DIRECT open is
 * refused with a message that says what to do, and buffered still works. */
static void test_no_odirect_injection(void **state)
{
	(void)state;
	struct ds_aio_opts o = DS_AIO_OPTS_INIT;
	struct ds_err err = DS_ERR_INIT;
	struct ds_aio *h;
	char path[300];
	unsigned char *buf = ds_alloc_aligned(8192, DS_AIO_ALIGN);

	path_of(path, sizeof(path), "nodirect");
	assert_int_equal(ds_aio_probe_direct(dir, &err), 1);
	ASSERT_ERR(ds_aio_probe_direct("no/such/dir", &err), DS_EINVAL, "no/such/dir: not writable (cannot create a file there: No such file or directory)");
	setenv("DS_TEST_FAULT_NO_ODIRECT", "1", 1);
	assert_int_equal(ds_aio_probe_direct(dir, &err), 0);
	o.engine = "posix";
	o.block_size = 4096;
	assert_int_equal(ds_aio_create(&h, &o, &err), 0);
	ASSERT_ERR(ds_aio_sync_pwrite(h, buf, 8192, path, 0, &err), DS_EINVAL, "refuses O_DIRECT");
	ds_aio_destroy(h);
	o.buffered = 1;
	assert_int_equal(ds_aio_create(&h, &o, &err), 0);
	assert_int_equal(ds_aio_sync_pwrite(h, buf, 8192, path, 0, &err), 1);
	ds_aio_destroy(h);
	unsetenv("DS_TEST_FAULT_NO_ODIRECT");
	unlink(path);
	ds_free(buf);
}

/* null: succeeds, touches neither the buffer nor the disk. */
static void test_null_engine(void **state)
{
	(void)state;
	struct ds_aio_opts o = DS_AIO_OPTS_INIT;
	struct ds_err err = DS_ERR_INIT;
	struct ds_aio *h;
	char path[300];
	unsigned char *buf = ds_alloc_aligned(16384, DS_AIO_ALIGN);
	struct stat st;

	memset(buf, 0x5A, 16384);
	path_of(path, sizeof(path), "null");
	o.engine = "null";
	o.intra_op_parallelism = 2;
	o.block_size = 4096;
	assert_int_equal(ds_aio_create(&h, &o, &err), 0);
	assert_int_equal(ds_aio_sync_pwrite(h, buf, 16384, path, 0, &err), 1);
	assert_int_equal(ds_aio_sync_pread(h, buf, 16384, path, 0, &err), 1);
	assert_int_equal(stat(path, &st), -1);
	for (int i = 0; i < 16384; i++)
		assert_int_equal(buf[i], 0x5A);
	/* the up-front checks still apply */
	ASSERT_ERR(ds_aio_sync_pread(h, buf, 4097, path, 0, &err), DS_EINVAL, "4097 bytes are not divisible");
	ds_aio_destroy(h);
	assert_int_equal(ds_aio_engine_nofile("null"), 1);
	assert_int_equal(ds_aio_engine_nofile("posix"), 0);
	ds_free(buf);
}

/* A busy group counts the union of its handles' in-flight time: one after
 * the other, the sum of theirs; at once, no less than the longer and no
 * more than the sum; read again at once, nothing. */
static void test_busy_group(void **state)
{
	(void)state;
	const size_t n = 8u << 20;
	struct ds_aio_opts o = DS_AIO_OPTS_INIT;
	struct ds_aio_busy g = DS_AIO_BUSY_INIT;
	struct ds_err err = DS_ERR_INIT;
	struct ds_aio *h[2];
	unsigned char *b[2];
	char path[2][300];

	o.engine = "posix";
	o.buffered = 1;
	o.block_size = 1u << 16;
	for (int i = 0; i < 2; i++) {
		assert_int_equal(ds_aio_create(&h[i], &o, &err), 0);
		assert_int_equal(ds_aio_add_busy_group(h[i], &g), 0);
		b[i] = ds_alloc_aligned(n, DS_AIO_ALIGN);
		fill(b[i], n, 7u + (unsigned)i);
		snprintf(path[i], sizeof(path[i]), "%s/busy.%d", dir, i);
	}
	/* one after the other */
	for (int i = 0; i < 2; i++) {
		assert_int_equal(ds_aio_async_pwrite(h[i], b[i], n, path[i], 0, &err), 0);
		assert_int_equal(ds_aio_wait(h[i], &err), 1);
	}
	double b0 = ds_aio_busy_seconds(h[0]), b1 = ds_aio_busy_seconds(h[1]), u = ds_aio_busy_group_seconds(&g);
	assert_true(b0 > 0 && b1 > 0);
	if (!(fabs(u - (b0 + b1)) <= 1e-3 * (b0 + b1) + 1e-5))
		fail_msg("sequential: group %.6f s, handles %.6f + %.6f s", u, b0, b1);
	assert_true(ds_aio_busy_group_seconds(&g) < 1e-3);
	/* at once: several operations each, both handles queued before either waits */
	for (int k = 0; k < 4; k++)
		for (int i = 0; i < 2; i++)
			assert_int_equal(ds_aio_async_pread(h[i], b[i], n, path[i], 0, &err), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(ds_aio_wait(h[i], &err), 4);
	b0 = ds_aio_busy_seconds(h[0]), b1 = ds_aio_busy_seconds(h[1]), u = ds_aio_busy_group_seconds(&g);
	if (!(u >= fmax(b0, b1) - 1e-5 && u <= b0 + b1 + 1e-5))
		fail_msg("together: group %.6f s, handles %.6f and %.6f s", u, b0, b1);
	/* a handle joins no group while busy, nor more than DS_AIO_BUSY_MAX;
	 * one left busy when destroyed leaves its groups idle */
	struct ds_aio_busy g2 = DS_AIO_BUSY_INIT, g3 = DS_AIO_BUSY_INIT;
	assert_int_equal(ds_aio_async_pwrite(h[0], b[0], n, path[0], 0, &err), 0);
	assert_int_equal(ds_aio_add_busy_group(h[0], &g2), -1);
	assert_int_equal(ds_aio_wait(h[0], &err), 1);
	assert_int_equal(ds_aio_add_busy_group(h[0], &g2), 0);
	assert_int_equal(ds_aio_add_busy_group(h[0], &g3), -1);
	assert_int_equal(ds_aio_async_pwrite(h[0], b[0], n, path[0], 0, &err), 0);
	ds_aio_destroy(h[0]);
	assert_int_equal(g.nbusy, 0);
	assert_int_equal(g2.nbusy, 0);
	ds_aio_destroy(h[1]);
	for (int i = 0; i < 2; i++)
		ds_free(b[i]);
}

/* Nearest-rank quantiles of 1..100 us, fed in shuffled order. */
static void test_latency_quantiles(void **state)
{
	(void)state;
	struct ds_aio_lat l = DS_AIO_LAT_INIT;
	assert_true(ds_aio_lat_quantile(&l, 0.5) == 0);
	for (int i = 0; i < 100; i++)
		ds_aio_lat_add(&l, ((i * 37) % 100 + 1) * 1e-6);
	assert_int_equal(l.n, 100);
	assert_float_equal(ds_aio_lat_quantile(&l, 0.50), 50, 1e-3);
	assert_float_equal(ds_aio_lat_quantile(&l, 0.99), 99, 1e-3);
	assert_float_equal(ds_aio_lat_quantile(&l, 1.0), 100, 1e-3);
	assert_float_equal(ds_aio_lat_quantile(&l, 0.0), 1, 1e-3);
	ds_aio_lat_release(&l);
	assert_int_equal(l.n, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_getters_and_defaults),
		cmocka_unit_test(test_roundtrip_direct),
		cmocka_unit_test(test_roundtrip_buffered_odd),
		cmocka_unit_test(test_queue_full_loses_nothing),
#ifdef HAVE_LIBAIO /* the aio engine's own fault; absent without libaio */
		cmocka_unit_test(test_aio_queue_full_fault),
#endif
		cmocka_unit_test(test_modes_counted),
		cmocka_unit_test(test_errors_with_numbers),
		cmocka_unit_test(test_no_odirect_injection),
		cmocka_unit_test(test_null_engine),
		cmocka_unit_test(test_latency_quantiles),
		cmocka_unit_test(test_busy_group),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
