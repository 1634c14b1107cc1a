/* comm_check.c - run under mpirun -np N by tests/mpi/comm.bats: every
 * collective of the mpi backend against values each rank can compute
 * alone.  Prints one line per failed check and exits 1 if any failed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "util/half.h"

static int bad;
/* the last record the communicator gave its logger */
static struct ds_comm_record last;
static int nrec;
static void logger(void *ctx, const struct ds_comm_record *r)
{
	last = *r;
	nrec++;
}

#define CHECK(cond, ...) do { if (!(cond)) { bad++; fprintf(stderr, "rank %d: ", rank); \
	fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

int main(void)
{
	struct ds_comm *c;
	struct ds_err err = DS_ERR_INIT;
	if (ds_comm_create(&c, "mpi", &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	int rank = ds_comm_rank(c), n = ds_comm_size(c);
	enum { K = 1000 };
	float *a = malloc(sizeof(float) * K * n), *b = malloc(sizeof(float) * K * n);

	/* allreduce: sum over ranks of (r+1)*i */
	for (int i = 0; i < K; i++)
		a[i] = (float)((rank + 1) * i);
	ds_comm_allreduce(c, a, K, DS_F32, DS_SUM, &err);
	for (int i = 0; i < K; i++)
		CHECK(a[i] == (float)(n * (n + 1) / 2 * i), "allreduce[%d] = %g", i, a[i]);

	/* reduce-scatter: block r of the sum */
	for (int i = 0; i < K * n; i++)
		a[i] = (float)(rank + i);
	ds_comm_reduce_scatter(c, a, b, K, DS_F32, DS_SUM, &err);
	for (int i = 0; i < K; i++) {
		float want = (float)(n * (rank * K + i) + n * (n - 1) / 2);
		CHECK(b[i] == want, "reduce_scatter[%d] = %g want %g", i, b[i], want);
	}

	/* allgather, in place and not */
	for (int i = 0; i < K; i++)
		a[i] = (float)(rank * 10000 + i);
	ds_comm_allgather(c, a, b, K, DS_F32, &err);
	for (int r = 0; r < n; r++)
		for (int i = 0; i < K; i++)
			CHECK(b[r * K + i] == (float)(r * 10000 + i), "allgather[%d][%d]", r, i);
	for (int i = 0; i < K; i++)
		b[rank * K + i] = -1.0f * (float)(rank + 1);
	ds_comm_allgather(c, b + rank * K, b, K, DS_F32, &err);
	for (int r = 0; r < n; r++)
		CHECK(b[r * K] == -1.0f * (float)(r + 1), "allgather in place [%d]", r);

	/* broadcast from the last rank */
	double d = rank == n - 1 ? 3.25 : 0;
	ds_comm_broadcast(c, &d, 1, DS_F64, n - 1, &err);
	CHECK(d == 3.25, "broadcast %g", d);

	/* max of an int64 flag: how ranks agree on "stop" */
	int64_t flag = rank == 1 % n;
	ds_comm_allreduce(c, &flag, 1, DS_I64, DS_MAX, &err);
	CHECK(flag == 1, "max flag %lld", (long long)flag);

	/* fp16 and bf16 sums */
	uint16_t h = ds_fp32_to_fp16(0.5f), bh = ds_fp32_to_bf16(1.5f);
	ds_comm_allreduce(c, &h, 1, DS_F16, DS_SUM, &err);
	ds_comm_allreduce(c, &bh, 1, DS_BF16, DS_SUM, &err);
	CHECK(ds_fp16_to_fp32(h) == 0.5f * n, "fp16 sum %g", ds_fp16_to_fp32(h));
	CHECK(ds_bf16_to_fp32(bh) == 1.5f * n, "bf16 sum %g", ds_bf16_to_fp32(bh));

	/* non-blocking allreduce overlapping local work */
	struct ds_comm_req *req;
	for (int i = 0; i < K; i++)
		a[i] = 1.0f;
	ds_comm_iallreduce(c, a, K, DS_F32, DS_SUM, &req, &err);
	double local = 0;
	for (int i = 0; i < 100000; i++)
		local += sqrt((double)i);
	ds_comm_wait(c, req, &err);
	CHECK(a[K - 1] == (float)n && local > 0, "iallreduce %g", a[K - 1]);

	/* the logger's records: DeepSpeed's message sizes (the tensor each
	 * rank passes in) and the calling function */
	ds_comm_set_logger(c, logger, NULL);
	ds_comm_allreduce(c, a, 10, DS_F32, DS_SUM, &err);
	CHECK(nrec == 1 && !strcmp(last.op, "all_reduce") && last.bytes == 40 && last.seconds >= 0,
	      "all_reduce record %s %zu", last.op, last.bytes);
	CHECK(last.caller && !strcmp(last.caller, "main"), "caller %s", last.caller ? last.caller : "(null)");
	ds_comm_reduce_scatter(c, a, b, 10, DS_F32, DS_SUM, &err);
	CHECK(!strcmp(last.op, "reduce_scatter") && last.bytes == (size_t)40 * n, "reduce_scatter record %s %zu",
	      last.op, last.bytes);
	ds_comm_allgather(c, a, b, 10, DS_F32, &err);
	CHECK(!strcmp(last.op, "all_gather") && last.bytes == 40, "all_gather record %s %zu", last.op, last.bytes);
	ds_comm_broadcast(c, a, 3, DS_F32, 0, &err);
	CHECK(!strcmp(last.op, "broadcast") && last.bytes == 12, "broadcast record %s %zu", last.op, last.bytes);
	ds_comm_barrier(c, &err);
	CHECK(!strcmp(last.op, "barrier") && last.bytes == 0, "barrier record %s %zu", last.op, last.bytes);
	/* non-blocking: recorded once, at the wait; test drives it to the end */
	ds_comm_ireduce_scatter(c, a, b, 10, DS_F32, DS_SUM, &req, &err);
	CHECK(nrec == 5, "a started operation was recorded (%d records)", nrec);
	int done = 0;
	for (long spin = 0; !done && spin < 100000000; spin++)
		ds_comm_test(c, req, &done, &err);
	CHECK(done, "ds_comm_test never saw the reduce_scatter finish");
	ds_comm_wait(c, req, &err);
	CHECK(nrec == 6 && !strcmp(last.op, "reduce_scatter") && last.bytes == (size_t)40 * n,
	      "ireduce_scatter record %s %zu (%d records)", last.op, last.bytes, nrec);
	ds_comm_set_logger(c, NULL, NULL);

	int64_t nbad = bad;
	ds_comm_allreduce(c, &nbad, 1, DS_I64, DS_SUM, &err);
	if (rank == 0)
		printf("comm_check: %d ranks, %lld failed checks\n", n, (long long)nbad);
	free(a);
	free(b);
	ds_comm_destroy(c);
	return nbad ? 1 : 0;
}
