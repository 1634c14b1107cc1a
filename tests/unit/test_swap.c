/* test_swap.c - ZeRO-Infinity's swap files (lib/io/swap.h): what is
 * written comes back, reads and writes run on their own handles at the
 * same time, nothing is left under nvme_path (not while the files are
 * open, not after), and each unusable directory is one clear error.
 */
#include "config.h"
#include "unit.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/swap.h"
#include "util/mem.h"

static char dir[256];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "test_swap.XXXXXX");
	return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[300];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd);
}

/* entries of d other than . and .. */
static int entries(const char *d)
{
	DIR *h = opendir(d);
	struct dirent *e;
	int n = 0;
	assert_non_null(h);
	while ((e = readdir(h)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(h);
	return n;
}

static struct ds_swap_opts opts(const char *d, int threads)
{
	struct ds_aio_opts a = DS_AIO_OPTS_INIT;
	a.block_size = 8192;
	a.queue_depth = 4;
	a.intra_op_parallelism = threads;
	return (struct ds_swap_opts){ .dir = d, .key = "test.nvme_path", .rank = 3, .aio = a };
}

static void fill(float *p, size_t n, float base)
{
	for (size_t i = 0; i < n; i++)
		p[i] = base + (float)i * 0.25f;
}

/* Two files written in pieces and read back in other pieces, a read of one
 * file in flight with a write of the other; the bytes come back; no name
 * under the directory at any time after ds_swap_seal. */
static void test_roundtrip_private(void **state)
{
	(void)state;
	struct ds_err err = DS_ERR_INIT;
	for (int threads = 1; threads <= 2; threads++) {
		struct ds_swap_opts o = opts(dir, threads);
		struct ds_swap *s = NULL;
		const uint64_t al = ds_swap_align(&o.aio);
		assert_int_equal(al, 4096u * (unsigned)threads);
		const size_t n = 6 * al / sizeof(float);  /* floats per file */
		assert_int_equal(ds_swap_create(&s, &o, &err), 0);
		assert_int_equal(entries(dir), 1);  /* the private directory */
		int a = ds_swap_add(s, "a", n * 4, &err), b = ds_swap_add(s, "b", n * 4, &err);
		assert_int_equal(a, 0);
		assert_int_equal(b, 1);
		ds_swap_seal(s);
		assert_int_equal(entries(dir), 0);  /* unlinked and removed: nothing to find, nothing to clean up */
		assert_int_equal(ds_swap_bytes(s), 2 * n * 4);
		float *w = ds_swap_buf_alloc(n * 4), *r = ds_swap_buf_alloc(n * 4), *w2 = ds_swap_buf_alloc(n * 4);
		fill(w, n, 1.0f);
		fill(w2, n, -7.0f);
		/* file a in two writes (2 + 4 blocks of al bytes) */
		assert_int_equal(ds_swap_write(s, a, 0, w, 2 * al, &err), 0);
		assert_int_equal(ds_swap_write(s, a, 2 * al, (char *)w + 2 * al, 4 * al, &err), 0);
		assert_true(ds_swap_writes_pending(s));
		assert_int_equal(ds_swap_wait_writes(s, &err), 0);
		assert_false(ds_swap_writes_pending(s));
		/* read a back while b is written */
		assert_int_equal(ds_swap_read(s, a, 0, r, n * 4, &err), 0);
		assert_int_equal(ds_swap_write(s, b, 0, w2, n * 4, &err), 0);
		assert_int_equal(ds_swap_wait_reads(s, &err), 0);
		assert_int_equal(ds_swap_wait_writes(s, &err), 0);
		assert_memory_equal(r, w, n * 4);
		/* b's middle block */
		memset(r, 0, n * 4);
		assert_int_equal(ds_swap_read(s, b, al, r, al, &err), 0);
		assert_int_equal(ds_swap_wait_reads(s, &err), 0);
		assert_memory_equal(r, (char *)w2 + al, al);
		struct ds_swap_stats st;
		ds_swap_take_stats(s, &st);
		assert_int_equal(st.bytes_written, 2 * n * 4);
		assert_int_equal(st.bytes_read, n * 4 + al);
		assert_int_equal(st.reads, 2);
		assert_int_equal(st.writes, 3);
		/* the time the device was at work for each was counted */
		assert_true(st.busy_read_s > 0 && st.busy_write_s > 0);
		ds_swap_take_stats(s, &st);
		assert_int_equal(st.bytes_read + st.bytes_written, 0);
		assert_true(st.busy_read_s == 0 && st.busy_write_s == 0);
		/* outside the file, misaligned: refused before anything is queued */
		assert_int_equal(ds_swap_read(s, a, 0, r, n * 4 + al, &err), DS_EINVAL);
		assert_non_null(strstr(err.msg, "swap file a (rank 3)"));
		assert_int_equal(ds_swap_write(s, a, 100, w, al, &err), DS_EINVAL);
		assert_int_equal(ds_swap_read(s, 7, 0, r, al, &err), DS_EINVAL);
		assert_int_equal(ds_swap_add(s, "late", al, &err), DS_EINVAL);  /* sealed */
		ds_free(w);
		ds_free(w2);
		ds_free(r);
		ds_swap_destroy(s);
		assert_int_equal(entries(dir), 0);
	}
}

/* Destroyed before ds_swap_seal (a failed set-up): the directory goes too. */
static void test_destroy_unsealed(void **state)
{
	(void)state;
	struct ds_err err = DS_ERR_INIT;
	struct ds_swap_opts o = opts(dir, 1);
	struct ds_swap *s = NULL;
	assert_int_equal(ds_swap_create(&s, &o, &err), 0);
	assert_int_equal(ds_swap_add(s, "x", 4096, &err), 0);
	assert_int_equal(ds_swap_add(s, "odd", 100, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "not a multiple of 4096"));
	ds_swap_destroy(s);
	assert_int_equal(entries(dir), 0);
}

/* Each unusable directory: DS_EINVAL, one line naming the key and path. */
static void test_check_dir(void **state)
{
	(void)state;
	struct ds_err err = DS_ERR_INIT;
	char p[300];
	assert_int_equal(ds_swap_check_dir(dir, "k.nvme_path", 4096, &err), 0);
	snprintf(p, sizeof p, "%s/missing", dir);
	assert_int_equal(ds_swap_check_dir(p, "k.nvme_path", 0, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "k.nvme_path: '"));
	assert_non_null(strstr(err.msg, "No such file or directory; create it"));
	snprintf(p, sizeof p, "%s/file", dir);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fclose(f);
	assert_int_equal(ds_swap_check_dir(p, "k.nvme_path", 0, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "is not a directory"));
	unlink(p);
	/* not writable: sysfs refuses new files to root as well */
	assert_int_equal(ds_swap_check_dir("/sys/kernel", "k.nvme_path", 0, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "not writable"));
	/* too small (the test hook stands in for a full device) */
	setenv("DS_TEST_NVME_FREE_BYTES", "1048576", 1);
	assert_int_equal(ds_swap_check_dir(dir, "k.nvme_path", 1048576, &err), 0);
	assert_int_equal(ds_swap_check_dir(dir, "k.nvme_path", 1048577, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "(1048576 bytes) free but the swap files need 1.0 MiB (1048577 bytes)"));
	unsetenv("DS_TEST_NVME_FREE_BYTES");
	/* O_DIRECT refused */
	setenv("DS_TEST_FAULT_NO_ODIRECT", "1", 1);
	assert_int_equal(ds_swap_check_dir(dir, "k.nvme_path", 0, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "refuses O_DIRECT"));
	struct ds_swap *s = NULL;
	struct ds_swap_opts o = opts(dir, 1);
	assert_int_equal(ds_swap_create(&s, &o, &err), DS_EINVAL);
	assert_null(s);
	unsetenv("DS_TEST_FAULT_NO_ODIRECT");
	assert_null(strchr(err.msg, '\n'));
	assert_int_equal(entries(dir), 0);  /* the probes left nothing */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_private),
		cmocka_unit_test(test_destroy_unsealed),
		cmocka_unit_test(test_check_dir),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
