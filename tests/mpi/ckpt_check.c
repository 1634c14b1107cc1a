/* ckpt_check.c - run under mpirun -np N by tests/mpi/ckpt.bats: a parallel
 * save of tensors cut into uneven rank ranges that do not follow the CRC
 * chunks (24-byte chunks: most have two writers, some ranks write nothing),
 * next to a serial save of the same values by rank 0.
 *   ckpt_check DIR          DIR/par (parallel) and DIR/ser (serial); rank
 *                           0 reads DIR/par back and checks every value and
 *                           every chunk; the bats file h5diffs the two files
 *   ckpt_check DIR fail R   rank R's write fails (DS_TEST_FAULT_CKPT_FAIL_RANK):
 *                           commit must fail on every rank with rank R's
 *                           message, DIR/par must keep its previous `latest`
 * Prints one line per failed check and exits 1 if any failed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "io/ckpt.h"

static int bad, rank;
#define CHECK(cond, ...) do { if (!(cond)) { bad++; fprintf(stderr, "rank %d: ", rank); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* the values every rank can compute alone */
static float fval(int t, uint64_t i) { return (float)i * 0.25f - 3.0f * (float)t; }
static int64_t ival(uint64_t i) { return (int64_t)(i * 7919u) - 5000; }

struct tdef { const char *name; int dtype, ndim; uint64_t shape[2]; };
static const struct tdef T[] = {
	{ "model/a", DS_CKPT_F32, 2, { 37, 53 } },
	{ "optimizer/exp_avg/a", DS_CKPT_F32, 2, { 37, 53 } },
	{ "model/b", DS_CKPT_I64, 1, { 1000, 0 } },
	{ "model/tiny", DS_CKPT_F32, 1, { 5, 0 } },
};
enum { NT = sizeof T / sizeof T[0] };

static uint64_t numel(const struct tdef *t) { return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1]; }

/* rank r's range of n elements: quadratic cuts (uneven, not chunk aligned);
 * "tiny" belongs to the last rank alone */
static void range(int t, int r, int W, uint64_t *b, uint64_t *e)
{
	uint64_t n = numel(&T[t]);
	if (strcmp(T[t].name, "model/tiny") == 0) {
		*b = r == W - 1 ? 0 : n;
		*e = n;
		return;
	}
	*b = n * (uint64_t)r * (uint64_t)r / ((uint64_t)W * (uint64_t)W) + (r ? 1 : 0);
	*e = r == W - 1 ? n : n * (uint64_t)(r + 1) * (uint64_t)(r + 1) / ((uint64_t)W * (uint64_t)W) + 1;
	if (*b > *e)
		*b = *e;
}

static void *values(int t, uint64_t b, uint64_t e)
{
	size_t es = ds_ckpt_dtype_size(T[t].dtype);
	uint8_t *p = malloc((e - b ? e - b : 1) * es);
	for (uint64_t i = b; i < e; i++) {
		if (T[t].dtype == DS_CKPT_I64)
			((int64_t *)p)[i - b] = ival(i);
		else
			((float *)p)[i - b] = fval(t, i);
	}
	return p;
}

static int save(struct ds_comm *comm, const char *dir, int64_t step, int serial, struct ds_err *err)
{
	struct ds_ckpt_meta meta = { .step = step, .world_size = 1, .dtype = "fp32", .config_json = "{}",
				     .model_json = "{}" };
	struct ds_ckpt *ck;
	int W = ds_comm_size(comm), rc;
	if ((rc = ds_ckpt_create_comm(&ck, dir, &meta, serial ? NULL : comm, err)) < 0)
		return rc;
	rc = ds_ckpt_set_chunk_bytes(ck, 24, err);
	for (int t = 0; t < NT; t++) {
		uint64_t b, e;
		int r;
		if ((r = ds_ckpt_tensor_create(ck, T[t].name, T[t].dtype, T[t].ndim, T[t].shape, err)) < 0 && !rc)
			rc = r;
		if (serial) {
			b = 0;
			e = numel(&T[t]);
		} else {
			range(t, rank, W, &b, &e);
		}
		void *p = values(t, b, e);
		if ((r = ds_ckpt_tensor_write(ck, T[t].name, b, e, p, err)) < 0 && !rc)
			rc = r;
		free(p);
	}
	int r = ds_ckpt_attr_set_i64(ck, "data", "seed", 42, err);
	if (r < 0 && !rc)
		rc = r;
	r = ds_ckpt_commit(ck, err);  /* collective even after a failure */
	if (!rc)
		rc = r;
	ds_ckpt_close(ck);
	return rc;
}

/* rank 0: every value and every chunk of DIR/par, and a few odd slices */
static void check_read(const char *dir)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_ckpt *ck;
	if (ds_ckpt_open(&ck, dir, NULL, &err) < 0) {
		CHECK(0, "open %s: %s", dir, err.msg);
		return;
	}
	CHECK(ds_ckpt_verify(ck, NULL, NULL, &err) == 0, "verify: %s", err.msg);
	for (int t = 0; t < NT; t++) {
		struct ds_ckpt_tensor_info info;
		uint64_t n = numel(&T[t]);
		CHECK(ds_ckpt_tensor_info(ck, T[t].name, &info, &err) == 0 && info.numel == n &&
		      info.ndim == T[t].ndim && info.shape[0] == T[t].shape[0] && info.dtype == T[t].dtype,
		      "%s: shape/dtype", T[t].name);
		void *want = values(t, 0, n), *got = calloc(n, 8);
		CHECK(ds_ckpt_tensor_read(ck, T[t].name, 0, n, got, &err) == 0, "read %s: %s", T[t].name, err.msg);
		CHECK(memcmp(want, got, n * ds_ckpt_dtype_size(T[t].dtype)) == 0, "%s: values differ", T[t].name);
		/* a slice starting and ending inside chunks */
		if (n > 20) {
			CHECK(ds_ckpt_tensor_read(ck, T[t].name, 7, n - 5, got, &err) == 0, "slice %s: %s", T[t].name,
			      err.msg);
			CHECK(memcmp((uint8_t *)want + 7 * ds_ckpt_dtype_size(T[t].dtype), got,
				     (n - 12) * ds_ckpt_dtype_size(T[t].dtype)) == 0, "%s: slice values differ", T[t].name);
		}
		free(want);
		free(got);
	}
	ds_ckpt_close(ck);
}

int main(int argc, char **argv)
{
	struct ds_comm *c;
	struct ds_err err = DS_ERR_INIT;
	char par[4096], ser[4096];
	if (argc < 2) {
		fprintf(stderr, "usage: ckpt_check DIR [fail RANK]\n");
		return 2;
	}
	if (ds_comm_create(&c, "mpi", &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	rank = ds_comm_rank(c);
	snprintf(par, sizeof par, "%s/par", argv[1]);
	snprintf(ser, sizeof ser, "%s/ser", argv[1]);
	if (argc >= 4 && strcmp(argv[2], "fail") == 0) {
		/* a good save at step 1, then step 2 with one rank failing */
		int rc = save(c, par, 1, 0, &err);
		CHECK(rc == 0, "save step 1: %s", err.msg);
		setenv("DS_TEST_FAULT_CKPT_FAIL_RANK", argv[3], 1);
		rc = save(c, par, 2, 0, &err);
		CHECK(rc < 0, "save step 2 succeeded although rank %s failed", argv[3]);
		/* every rank returns the failing rank's own message, and the tag
		 * that is still latest */
		char want[64];
		snprintf(want, sizeof want, "rank %s: planted write failure", argv[3]);
		CHECK(strstr(err.msg, want) != NULL, "error: %s", err.msg);
		CHECK(strstr(err.msg, "latest still names global_step1") != NULL, "error: %s", err.msg);
		fprintf(stderr, "rank %d: %s\n", rank, err.msg);
	} else {
		CHECK(save(c, par, 7, 0, &err) == 0, "parallel save: %s", err.msg);
		if (rank == 0)
			CHECK(save(c, ser, 7, 1, &err) == 0, "serial save: %s", err.msg);
		if (rank == 0)
			check_read(par);
	}
	ds_comm_destroy(c);
	return bad ? 1 : 0;
}
