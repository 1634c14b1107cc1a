/* comm_check.c - run under mpirun -np N by tests/mpi/comm.bats, and on a GPU
 * by tests/gpu/comm.bats: every collective of the mpi backend against values
 * each rank can compute alone; then, with --mem devsim (a simulated device,
 * tests/unit/comm_devsim.h) or --mem cuda (a real one), every collective,
 * data type and non-blocking variant again on device buffers handed to
 * ds_comm_set_devmem: each result equal to the same call on host buffers,
 * sums of small integers equal to their closed form, the comms logger's
 * device byte counts, the pinned staging buffers reused and freed.  Prints
 * one line per failed check and exits 1 if any failed.
 *
 *   comm_check [--mem host|devsim|cuda] [--nccl never|auto|require]
 *              [--own-device] [--expect BACKEND] [--expect-error TEXT]
 *   comm_check --devices     (CUDA devices this process sees, then exit)
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CUDA
#include <cuda_runtime.h>
#endif

#include "comm/comm.h"
#include "comm/topo.h"
#include "util/half.h"
#include "util/timer.h"
#include "../unit/comm_devsim.h"

static int bad, rank;
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

/* The mpi backend's collectives on host memory against values each rank
 * computes alone, and the logger's records (run again after
 * ds_comm_set_devmem: host buffers still go to the host backend). */
static void host_checks(struct ds_comm *c)
{
	struct ds_err err = DS_ERR_INIT;
	int n = ds_comm_size(c);
	enum { K = 1000 };
	float *a = malloc(sizeof(float) * K * n), *b = malloc(sizeof(float) * K * n);

	nrec = 0;
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
	/* long 16-bit sums (the bulk conversions' chunks and tails, ties,
	 * subnormals, overflow to inf): at 2 ranks the one sum is each
	 * element's fp32 sum rounded once, as the scalar conversions give it */
	if (n == 2) {
		enum { H = 3001 };
		static uint16_t hv[2][H], all[2][2][H];
		for (int k = 0; k < 2; k++)
			for (int r = 0; r < 2; r++)
				for (int i = 0; i < H; i++) {
					uint32_t x = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 40503u + k * 7u);
					all[k][r][i] = (uint16_t)(x >> 9);
					if (i % 5 == 0)   /* same magnitude on both ranks: sums that tie, cancel or overflow */
						all[k][r][i] = (uint16_t)((all[k][0][i] & 0x7fffu) | (r ? 0x8000u & x : 0));
				}
		for (int k = 0; k < 2; k++) {
			memcpy(hv[k], all[k][rank], sizeof hv[k]);
			ds_comm_allreduce(c, hv[k], H, k ? DS_BF16 : DS_F16, DS_SUM, &err);
		}
		int bad = 0;
		for (int i = 0; i < H; i++) {
			uint16_t w16 = ds_fp32_to_fp16(ds_fp16_to_fp32(all[0][0][i]) + ds_fp16_to_fp32(all[0][1][i]));
			uint16_t wb = ds_fp32_to_bf16(ds_bf16_to_fp32(all[1][0][i]) + ds_bf16_to_fp32(all[1][1][i]));
			bad += hv[0][i] != w16 && !(isnan(ds_fp16_to_fp32(w16)) && isnan(ds_fp16_to_fp32(hv[0][i])));
			bad += hv[1][i] != wb && !(isnan(ds_bf16_to_fp32(wb)) && isnan(ds_bf16_to_fp32(hv[1][i])));
		}
		CHECK(bad == 0, "long fp16/bf16 sums: %d elements differ from the scalar sums", bad);
	}

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
	CHECK(last.caller && !strcmp(last.caller, "host_checks"), "caller %s", last.caller ? last.caller : "(null)");
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

	/* groups: even and odd ranks, ordered backwards by key; a sum inside
	 * each group, and its records reach the world's logger */
	struct ds_comm *g = NULL;
	int rc = ds_comm_split(c, rank % 2, -rank, &g, &err);
	CHECK(rc == 0 && g, "split: %s", err.msg);
	if (g) {
		int gn = (n - rank % 2 + 1) / 2, want = 0;
		CHECK(ds_comm_size(g) == gn, "group size %d want %d", ds_comm_size(g), gn);
		CHECK(ds_comm_rank(g) == gn - 1 - rank / 2, "group rank %d (key -rank)", ds_comm_rank(g));
		int64_t v = rank;
		for (int r = rank % 2; r < n; r += 2)
			want += r;
		int before = nrec;
		ds_comm_allreduce(g, &v, 1, DS_I64, DS_SUM, &err);
		CHECK(v == want, "group sum %lld want %d", (long long)v, want);
		CHECK(nrec == before + 1 && !strcmp(last.op, "all_reduce"), "group record (%d records)", nrec);
		ds_comm_destroy(g);
	}
	CHECK(ds_comm_split(c, -1, 0, &g, &err) == DS_EINVAL && !g, "split with color -1");

	/* point to point: a ring, blocking one way (even ranks send first) and
	 * non-blocking the other way; records named as DeepSpeed's */
	if (n > 1) {
		int next = (rank + 1) % n, prev = (rank + n - 1) % n;
		float out[5], in[5];
		for (int i = 0; i < 5; i++)
			out[i] = (float)(100 * rank + i);
		if (rank % 2 == 0) {
			rc = ds_comm_send(c, out, 5, DS_F32, next, 7, &err);
			rc |= ds_comm_recv(c, in, 5, DS_F32, prev, 7, &err);
		} else {
			rc = ds_comm_recv(c, in, 5, DS_F32, prev, 7, &err);
			rc |= ds_comm_send(c, out, 5, DS_F32, next, 7, &err);
		}
		CHECK(rc == 0 && in[4] == (float)(100 * prev + 4), "ring recv %g from %d", in[4], prev);
		CHECK(!strcmp(last.op, "send") || !strcmp(last.op, "recv"), "p2p record %s", last.op);
		CHECK(last.bytes == 20, "p2p record bytes %zu", last.bytes);
		struct ds_comm_req *rs = NULL, *rr = NULL;
		rc = ds_comm_irecv(c, in, 5, DS_F32, next, 8, &rr, &err);
		rc |= ds_comm_isend(c, out, 5, DS_F32, prev, 8, &rs, &err);
		rc |= ds_comm_wait(c, rs, &err);
		CHECK(rc == 0 && !strcmp(last.op, "isend"), "isend record %s", last.op);
		rc |= ds_comm_wait(c, rr, &err);
		CHECK(rc == 0 && !strcmp(last.op, "irecv") && in[0] == (float)(100 * next), "irecv %g from %d", in[0],
		      next);
	}
	CHECK(ds_comm_send(c, a, 1, DS_F32, rank, 0, &err) == DS_EINVAL, "send to itself is refused");
	CHECK(ds_comm_recv(c, a, 1, DS_F32, n, 0, &err) == DS_EINVAL, "recv from rank %d is refused", n);
	ds_comm_set_logger(c, NULL, NULL);
	free(a);
	free(b);
}

/* ---- device memory: simulated, or CUDA's ---------------------------------- */

struct mem {
	void *(*alloc)(size_t n);
	void (*release)(void *p);
	void (*put)(void *d, const void *h, size_t n); /* the test's upload: may still be running */
	void (*get)(void *h, const void *d, size_t n); /* finished when it returns */
	long (*pinned_live)(void);
	struct ds_comm_devmem dm;
};

static struct devsim sim;
static long sim_live(void) { return sim.pinned_live; }
static void sim_put(void *d, const void *h, size_t n) { devsim_put(d, h, n); }
static void sim_get(void *h, const void *d, size_t n) { devsim_get(h, d, n); }

#ifdef HAVE_CUDA
/* The engine's side of a CUDA run: its own stream, uploads queued there
 * without waiting (a collective that did not order itself after them would
 * read stale data), pinned buffers counted. */
static cudaStream_t stream;
static long cu_pinned;

#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
	fprintf(stderr, "rank %d: %s: %s\n", rank, #call, cudaGetErrorString(e_)); exit(1); } } while (0)

static void *cu_alloc(size_t n)
{
	void *p = NULL;
	CU(cudaMalloc(&p, n ? n : 1));
	CU(cudaMemsetAsync(p, 0xa5, n ? n : 1, stream));
	return p;
}
static void cu_release(void *p) { CU(cudaFree(p)); }
static void cu_put(void *d, const void *h, size_t n) { CU(cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, stream)); }
static void cu_get(void *h, const void *d, size_t n)
{
	CU(cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, stream));
	CU(cudaStreamSynchronize(stream));
}
static long cu_live(void) { return cu_pinned; }

static int cu_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind k)
{
	if (cudaMemcpyAsync(dst, src, n, k, stream) != cudaSuccess || cudaStreamSynchronize(stream) != cudaSuccess)
		return (int)cudaGetLastError() | 1;
	return 0;
}
static int cu_to_host(void *h, const void *d, size_t n, void *ctx) { return cu_copy(h, d, n, cudaMemcpyDeviceToHost); }
static int cu_to_dev(void *d, const void *h, size_t n, void *ctx) { return cu_copy(d, h, n, cudaMemcpyHostToDevice); }
static int cu_dev_copy(void *d, const void *s, size_t n, void *ctx) { return cu_copy(d, s, n, cudaMemcpyDeviceToDevice); }
static void *cu_host_alloc(size_t n, void *ctx)
{
	void *p = NULL;
	if (cudaMallocHost(&p, n) != cudaSuccess)
		return NULL;
	cu_pinned++;
	return p;
}
static void cu_host_free(void *p, void *ctx)
{
	if (p && cudaFreeHost(p) == cudaSuccess)
		cu_pinned--;
}
static int cu_is_dev(const void *p, void *ctx)
{
	struct cudaPointerAttributes a;
	if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static int cuda_devices(char *why, size_t n)
{
	int count = 0;
	cudaError_t e = cudaGetDeviceCount(&count);
	if (e != cudaSuccess) {
		snprintf(why, n, "%s", cudaGetErrorString(e));
		return 0;
	}
	if (!count)
		snprintf(why, n, "no CUDA device");
	return count;
}

/* rank r uses device local_rank % count, named by its PCI bus id */
static int cuda_mem(struct mem *m, struct ds_comm *c)
{
	char why[160];
	int count = cuda_devices(why, sizeof why);
	if (!count) {
		fprintf(stderr, "rank %d: %s\n", rank, why);
		return -1;
	}
	int dev = ds_comm_local_rank(c) % count;
	CU(cudaSetDevice(dev));
	CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
	*m = (struct mem){ cu_alloc, cu_release, cu_put, cu_get, cu_live,
			   { .device = dev, .stream = stream, .to_host = cu_to_host, .to_dev = cu_to_dev,
			     .dev_copy = cu_dev_copy, .host_alloc = cu_host_alloc, .host_free = cu_host_free,
			     .is_dev = cu_is_dev } };
	CU(cudaDeviceGetPCIBusId(m->dm.dev_id, sizeof m->dm.dev_id, dev));
	return 0;
}
#else
static int cuda_devices(char *why, size_t n)
{
	snprintf(why, n, "built without CUDA");
	return 0;
}
static int cuda_mem(struct mem *m, struct ds_comm *c)
{
	fprintf(stderr, "rank %d: built without CUDA\n", rank);
	return -1;
}
#endif

/* ---- the device suite: each call on host and on device buffers --------- */

enum { NE = 1037 };                   /* elements per rank block: not a round number */
enum { K_AR, K_RS, K_AG, K_AGIP, K_BC, K_N };
static const char *kind_name[K_N] = { "all_reduce", "reduce_scatter", "all_gather", "all_gather", "broadcast" };
static const char *kind_label[K_N] = { "allreduce", "reduce_scatter", "allgather", "allgather in place", "broadcast" };
static const int dtypes[] = { DS_F32, DS_F64, DS_I64, DS_I32, DS_U8, DS_F16, DS_BF16 };

/* Element i of rank r's input: small integers (exact sums in every type),
 * with frac scaled into fractions that 16-bit sums must round. */
static double val(int dtype, int r, size_t i, int frac)
{
	if (dtype == DS_U8)
		return (double)((r + i) % 7);
	double v = (double)((r + 1) * (int)(i % 13)) - 20;
	if (frac && (dtype == DS_F32 || dtype == DS_F64 || dtype == DS_F16 || dtype == DS_BF16))
		v = v * 0.3127 + 0.0011 * r;
	return v;
}

static void store(int dtype, void *b, size_t i, double v)
{
	switch (dtype) {
	case DS_F32: ((float *)b)[i] = (float)v; break;
	case DS_F64: ((double *)b)[i] = v; break;
	case DS_I64: ((int64_t *)b)[i] = (int64_t)v; break;
	case DS_I32: ((int32_t *)b)[i] = (int32_t)v; break;
	case DS_U8: ((uint8_t *)b)[i] = (uint8_t)v; break;
	case DS_F16: ((uint16_t *)b)[i] = ds_fp32_to_fp16((float)v); break;
	default: ((uint16_t *)b)[i] = ds_fp32_to_bf16((float)v); break;
	}
}

static double load(int dtype, const void *b, size_t i)
{
	switch (dtype) {
	case DS_F32: return ((const float *)b)[i];
	case DS_F64: return ((const double *)b)[i];
	case DS_I64: return (double)((const int64_t *)b)[i];
	case DS_I32: return ((const int32_t *)b)[i];
	case DS_U8: return ((const uint8_t *)b)[i];
	case DS_F16: return ds_fp16_to_fp32(((const uint16_t *)b)[i]);
	default: return ds_bf16_to_fp32(((const uint16_t *)b)[i]);
	}
}

/* elements in and out of one call of kind on a world of n */
static size_t in_elems(int kind, int n) { return kind == K_RS || kind == K_AGIP ? (size_t)n * NE : NE; }
static size_t out_elems(int kind, int n) { return kind == K_AG || kind == K_AGIP ? (size_t)n * NE : NE; }
/* where the result lands: in place for allreduce, broadcast and the in-place allgather */
static int result_in_input(int kind) { return kind == K_AR || kind == K_BC || kind == K_AGIP; }

/* rank r's input of one call into host buffer h */
static void fill(int kind, int dtype, int op, int frac, int n, void *h)
{
	size_t es = ds_dtype_size(dtype);
	if (kind == K_AGIP) {
		memset(h, 0x5a, (size_t)n * NE * es); /* the other blocks must be overwritten */
		for (size_t i = 0; i < NE; i++)
			store(dtype, (char *)h + (size_t)rank * NE * es, i, val(dtype, rank, i, frac));
		return;
	}
	for (size_t i = 0; i < in_elems(kind, n); i++)
		store(dtype, h, i, val(dtype, rank, i, frac));
}

/* The closed form of element i of this rank's result. */
static double expect(int kind, int dtype, int op, int n, size_t i)
{
	double acc = 0;
	switch (kind) {
	case K_AR:
	case K_RS: {
		size_t j = kind == K_RS ? (size_t)rank * NE + i : i;
		acc = val(dtype, 0, j, 0);
		for (int q = 1; q < n; q++) {
			double v = val(dtype, q, j, 0);
			acc = op == DS_MAX ? fmax(acc, v) : op == DS_MIN ? fmin(acc, v) : acc + v;
		}
		return acc;
	}
	case K_AG:
	case K_AGIP:
		return val(dtype, (int)(i / NE), i % NE, 0);
	default:
		return val(dtype, n - 1, i, 0);
	}
}

/* One call of kind on (in, out); with req, started non-blocking. */
static int call(struct ds_comm *c, int kind, int dtype, int op, void *in, void *out, struct ds_comm_req **req,
		struct ds_err *err)
{
	int n = ds_comm_size(c);
	size_t es = ds_dtype_size(dtype);
	switch (kind) {
	case K_AR:
		return req ? ds_comm_iallreduce(c, in, NE, dtype, op, req, err)
			   : ds_comm_allreduce(c, in, NE, dtype, op, err);
	case K_RS:
		return req ? ds_comm_ireduce_scatter(c, in, out, NE, dtype, op, req, err)
			   : ds_comm_reduce_scatter(c, in, out, NE, dtype, op, err);
	case K_AG:
		return req ? ds_comm_iallgather(c, in, out, NE, dtype, req, err)
			   : ds_comm_allgather(c, in, out, NE, dtype, err);
	case K_AGIP: {
		char *blk = (char *)in + (size_t)rank * NE * es;
		return req ? ds_comm_iallgather(c, blk, in, NE, dtype, req, err)
			   : ds_comm_allgather(c, blk, in, NE, dtype, err);
	}
	default:
		return ds_comm_broadcast(c, in, NE, dtype, n - 1, err);
	}
}

struct suite {
	struct ds_comm *c;
	struct mem *m;
	int exact;         /* device results must equal the host run bit for bit */
	size_t max_bytes;  /* of one buffer */
	char *hin, *hout, *href, *hdev;  /* host buffers */
	void *din[3], *dout[3];          /* device buffers (3 for calls in flight together) */
};

/* got (from device) against ref (the host run), and against the closed
 * form when frac is 0 */
static void compare(struct suite *s, int kind, int dtype, int op, int frac, const char *how, const void *got,
		    const void *ref)
{
	int n = ds_comm_size(s->c);
	size_t cnt = out_elems(kind, n), es = ds_dtype_size(dtype);
	const char *opn = op == DS_MAX ? "max" : op == DS_MIN ? "min" : "sum";
	int shown = 0;

	if (s->exact) {
		CHECK(!memcmp(got, ref, cnt * es), "%s %s %s %s%s: device result differs from the host run",
		      how, kind_label[kind], ds_dtype_name(dtype), opn, frac ? " (fractions)" : "");
	} else {
		double tol = dtype == DS_F16 || dtype == DS_BF16 ? 1e-2 : dtype == DS_F32 ? 1e-6 : 1e-12;
		for (size_t i = 0; i < cnt && shown < 3; i++) {
			double a = load(dtype, got, i), b = load(dtype, ref, i);
			if (fabs(a - b) > tol * fmax(1.0, fabs(b))) {
				CHECK(0, "%s %s %s %s: [%zu] %g, host run %g", how, kind_label[kind], ds_dtype_name(dtype),
				      opn, i, a, b);
				shown++;
			}
		}
	}
	if (frac)
		return;
	char one[8];
	for (size_t i = 0; i < cnt && shown < 3; i++) {
		store(dtype, one, 0, expect(kind, dtype, op, n, i));
		double want = load(dtype, one, 0), a = load(dtype, got, i);
		if (a != want) {
			CHECK(0, "%s %s %s %s: [%zu] = %g, want %g", how, kind_label[kind], ds_dtype_name(dtype), opn, i,
			      a, want);
			shown++;
		}
	}
}

/* Every blocking call of every type on host, then device buffers. */
static void blocking_pass(struct suite *s, int frac)
{
	struct ds_err err = DS_ERR_INIT;
	int n = ds_comm_size(s->c);

	for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++) {
		int dt = dtypes[t];
		size_t es = ds_dtype_size(dt);
		for (int kind = 0; kind < K_N; kind++) {
			for (int op = DS_SUM; op <= DS_MIN; op++) {
				if (op != DS_SUM && (kind != K_AR || dt == DS_F16 || dt == DS_BF16))
					continue;
				size_t inb = in_elems(kind, n) * es, outb = out_elems(kind, n) * es;
				void *ref = result_in_input(kind) ? s->hin : s->hout;
				fill(kind, dt, op, frac, n, s->hin);
				s->m->put(s->din[0], s->hin, inb);
				if (call(s->c, kind, dt, op, s->hin, s->hout, NULL, &err) < 0)
					CHECK(0, "host %s %s: %s", kind_label[kind], ds_dtype_name(dt), err.msg);
				nrec = 0;
				if (call(s->c, kind, dt, op, s->din[0], s->dout[0], NULL, &err) < 0) {
					CHECK(0, "device %s %s: %s", kind_label[kind], ds_dtype_name(dt), err.msg);
					continue;
				}
				/* DeepSpeed's names and the device tensor's bytes */
				size_t want = kind == K_RS ? (size_t)n * NE * es : NE * es;
				CHECK(nrec == 1 && !strcmp(last.op, kind_name[kind]) && last.bytes == want,
				      "device %s %s: logged %d records, last %s of %zu bytes (want %s, %zu)",
				      kind_label[kind], ds_dtype_name(dt), nrec, nrec ? last.op : "-",
				      nrec ? last.bytes : 0, kind_name[kind], want);
				s->m->get(s->hdev, result_in_input(kind) ? s->din[0] : s->dout[0], outb);
				compare(s, kind, dt, op, frac, "device", s->hdev, ref);
			}
		}
	}
}

/* allreduce, reduce-scatter and allgather of one type in flight together,
 * driven by test, ended by wait; each against the host's blocking run. */
static void nonblocking_pass(struct suite *s, int dt, int frac)
{
	struct ds_err err = DS_ERR_INIT;
	static const int kinds[3] = { K_AR, K_RS, K_AG };
	struct ds_comm_req *req[3] = { NULL };
	int n = ds_comm_size(s->c), done[3] = { 0 }, ndone = 0;
	size_t es = ds_dtype_size(dt);
	char *ref[3];

	for (int k = 0; k < 3; k++) {
		int kind = kinds[k];
		ref[k] = malloc(s->max_bytes);
		fill(kind, dt, DS_SUM, frac, n, s->hin);
		s->m->put(s->din[k], s->hin, in_elems(kind, n) * es);
		/* the host run of the same non-blocking call: MPI's non-blocking
		 * reductions may add in another order than its blocking ones */
		struct ds_comm_req *hr = NULL;
		if (call(s->c, kind, dt, DS_SUM, s->hin, s->hout, &hr, &err) < 0 || ds_comm_wait(s->c, hr, &err) < 0)
			CHECK(0, "host i%s %s: %s", kind_label[kind], ds_dtype_name(dt), err.msg);
		memcpy(ref[k], result_in_input(kind) ? s->hin : s->hout, out_elems(kind, n) * es);
	}
	nrec = 0;
	for (int k = 0; k < 3; k++)
		if (call(s->c, kinds[k], dt, DS_SUM, s->din[k], s->dout[k], &req[k], &err) < 0) {
			CHECK(0, "device i%s %s: %s", kind_label[kinds[k]], ds_dtype_name(dt), err.msg);
			done[k] = 1;
			ndone++;
		}
	CHECK(nrec == 0, "%d records before any wait", nrec);
	double t0 = ds_now();
	while (ndone < 3 && ds_now() - t0 < 120)
		for (int k = 0; k < 3; k++)
			if (req[k] && !done[k]) {
				if (ds_comm_test(s->c, req[k], &done[k], &err) < 0) {
					CHECK(0, "test: %s", err.msg);
					done[k] = 1;
				}
				ndone += done[k];
			}
	CHECK(ndone == 3, "ds_comm_test saw %d of 3 non-blocking %s calls finish in 120 s", ndone,
	      ds_dtype_name(dt));
	for (int k = 2; k >= 0; k--) /* waited for out of order */
		if (req[k] && ds_comm_wait(s->c, req[k], &err) < 0)
			CHECK(0, "wait: %s", err.msg);
	CHECK(nrec == 3, "%d records after 3 waits", nrec);
	for (int k = 0; k < 3; k++) {
		int kind = kinds[k];
		s->m->get(s->hdev, result_in_input(kind) ? s->din[k] : s->dout[k], out_elems(kind, n) * es);
		compare(s, kind, dt, DS_SUM, frac, "non-blocking", s->hdev, ref[k]);
		free(ref[k]);
	}
}

/* Calls whose buffers are partly host, partly device memory (staged). */
static void mixed_pass(struct suite *s)
{
	struct ds_err err = DS_ERR_INIT;
	int n = ds_comm_size(s->c);
	size_t es = sizeof(float);

	fill(K_RS, DS_F32, DS_SUM, 1, n, s->hin);
	s->m->put(s->din[0], s->hin, (size_t)n * NE * es);
	ds_comm_reduce_scatter(s->c, s->hin, s->href, NE, DS_F32, DS_SUM, &err);
	if (ds_comm_reduce_scatter(s->c, s->din[0], s->hout, NE, DS_F32, DS_SUM, &err) < 0)
		CHECK(0, "reduce_scatter device to host: %s", err.msg);
	compare(s, K_RS, DS_F32, DS_SUM, 1, "device-to-host", s->hout, s->href);
	if (ds_comm_reduce_scatter(s->c, s->hin, s->dout[0], NE, DS_F32, DS_SUM, &err) < 0)
		CHECK(0, "reduce_scatter host to device: %s", err.msg);
	s->m->get(s->hdev, s->dout[0], NE * es);
	compare(s, K_RS, DS_F32, DS_SUM, 1, "host-to-device", s->hdev, s->href);

	fill(K_AG, DS_F32, DS_SUM, 1, n, s->hin);
	s->m->put(s->din[1], s->hin, NE * es);
	ds_comm_allgather(s->c, s->hin, s->href, NE, DS_F32, &err);
	if (ds_comm_allgather(s->c, s->din[1], s->hout, NE, DS_F32, &err) < 0)
		CHECK(0, "allgather device to host: %s", err.msg);
	compare(s, K_AG, DS_F32, DS_SUM, 1, "device-to-host", s->hout, s->href);
	if (ds_comm_allgather(s->c, s->hin, s->dout[1], NE, DS_F32, &err) < 0)
		CHECK(0, "allgather host to device: %s", err.msg);
	s->m->get(s->hdev, s->dout[1], (size_t)n * NE * es);
	compare(s, K_AG, DS_F32, DS_SUM, 1, "host-to-device", s->hdev, s->href);
}

static void device_suite(struct ds_comm *c, struct mem *m, int devsim)
{
	struct ds_err err = DS_ERR_INIT;
	struct suite s = { .c = c, .m = m };
	int n = ds_comm_size(c), nccl = !strcmp(ds_comm_backend(c), "nccl");

	/* NCCL's ring may add 16-bit values in another order than MPI's from
	 * three ranks on (DESIGN.md, "Communicators") */
	s.exact = !(nccl && n > 2);
	s.max_bytes = (size_t)n * NE * 8;
	s.hin = malloc(s.max_bytes);
	s.hout = malloc(s.max_bytes);
	s.href = malloc(s.max_bytes);
	s.hdev = malloc(s.max_bytes);
	for (int k = 0; k < 3; k++) {
		s.din[k] = m->alloc(s.max_bytes);
		s.dout[k] = m->alloc(s.max_bytes);
	}
	ds_comm_set_logger(c, logger, NULL);

	blocking_pass(&s, 0);
	size_t pinned = ds_comm_pinned_bytes(c);
	long allocs = sim.pinned_calls;
	/* one call at a time: one pinned buffer, grown to the largest call's
	 * plan (an fp64 reduce-scatter: the input and the block) */
	size_t plan = 0;
	for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++) {
		size_t b[4] = { ds_comm_staged_bytes(DS_COMM_ALLREDUCE, NE, dtypes[t], n),
				ds_comm_staged_bytes(DS_COMM_REDUCE_SCATTER, NE, dtypes[t], n),
				ds_comm_staged_bytes(DS_COMM_ALLGATHER, NE, dtypes[t], n),
				ds_comm_staged_bytes(DS_COMM_BROADCAST, NE, dtypes[t], n) };
		for (int k = 0; k < 4; k++)
			plan = b[k] > plan ? b[k] : plan;
	}
	CHECK(nccl || n == 1 ? pinned == 0 : pinned == plan && plan >= (size_t)(n + 1) * NE * 8,
	      "%zu bytes pinned for staging after the first pass, planned %zu", pinned, plan);
	blocking_pass(&s, 1);
	/* the same sizes again: the pinned buffers are reused, none added */
	CHECK(ds_comm_pinned_bytes(c) == pinned, "pinned bytes grew from %zu to %zu on the same sizes", pinned,
	      ds_comm_pinned_bytes(c));
	CHECK(!devsim || sim.pinned_calls == allocs, "%ld pinned allocations on the same sizes",
	      sim.pinned_calls - allocs);
	for (size_t t = 0; t < sizeof dtypes / sizeof dtypes[0]; t++) {
		nonblocking_pass(&s, dtypes[t], 0);
		nonblocking_pass(&s, dtypes[t], 1);
	}
	mixed_pass(&s);
	if (devsim && n > 1) {
		/* a failed copy is an error on the rank it happened on (here all) */
		sim.fail_copies = 7;
		int rc = ds_comm_allreduce(c, s.din[0], NE, DS_F32, DS_SUM, &err);
		CHECK(rc == DS_EIO && strstr(err.msg, "all_reduce on device buffers: copying"),
		      "a failing copy gave %d: %s", rc, err.msg);
		sim.fail_copies = 0;
	}
	ds_comm_set_logger(c, NULL, NULL);
	for (int k = 0; k < 3; k++) {
		m->release(s.din[k]);
		m->release(s.dout[k]);
	}
	free(s.hin);
	free(s.hout);
	free(s.href);
	free(s.hdev);
}

int main(int argc, char **argv)
{
	const char *memkind = "host", *expect_backend = NULL, *expect_error = NULL;
	int prefer = DS_COMM_NCCL_AUTO, own = 0;
	struct ds_comm *c;
	struct ds_err err = DS_ERR_INIT;
	struct mem m;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--devices")) {
			char why[160] = "";
			int count = cuda_devices(why, sizeof why);
			printf("devices %d%s%s\n", count, count ? "" : ": ", why);
			return 0;
		} else if (!strcmp(argv[i], "--mem") && i + 1 < argc) {
			memkind = argv[++i];
		} else if (!strcmp(argv[i], "--nccl") && i + 1 < argc) {
			const char *v = argv[++i];
			prefer = !strcmp(v, "never") ? DS_COMM_NCCL_NEVER
			       : !strcmp(v, "require") ? DS_COMM_NCCL_REQUIRE : DS_COMM_NCCL_AUTO;
		} else if (!strcmp(argv[i], "--own-device")) {
			own = 1;
		} else if (!strcmp(argv[i], "--expect") && i + 1 < argc) {
			expect_backend = argv[++i];
		} else if (!strcmp(argv[i], "--expect-error") && i + 1 < argc) {
			expect_error = argv[++i];
		} else {
			fprintf(stderr, "comm_check: unknown argument '%s'\n", argv[i]);
			return 2;
		}
	}
	if (ds_comm_create(&c, "mpi", &err)) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	rank = ds_comm_rank(c);
	int n = ds_comm_size(c);
	host_checks(c);

	if (strcmp(memkind, "host")) {
		if (!strcmp(memkind, "devsim")) {
			char id[32];
			/* one simulated device for all (as two ranks on one GPU), or one each */
			snprintf(id, sizeof id, "devsim%d", own ? rank : 0);
			m = (struct mem){ devsim_malloc, devsim_free, sim_put, sim_get, sim_live,
					  devsim_devmem(&sim, own ? rank : 0, id) };
		} else if (cuda_mem(&m, c) < 0) {
			ds_comm_destroy(c);
			return 1;
		}
		int rc = ds_comm_set_devmem(c, &m.dm, prefer, &err);
		if (expect_error) {
			CHECK(rc < 0 && strstr(err.msg, expect_error), "set_devmem gave %d '%s', want an error with '%s'",
			      rc, err.msg, expect_error);
		} else if (rc < 0) {
			CHECK(0, "set_devmem: %s", err.msg);
		} else {
			if (rank == 0)
				printf("comm_check: device buffers over %s: %s\n", ds_comm_backend(c), ds_comm_devpath_why(c));
			CHECK(!expect_backend || !strcmp(ds_comm_backend(c), expect_backend), "backend %s, want %s",
			      ds_comm_backend(c), expect_backend);
			device_suite(c, &m, !strcmp(memkind, "devsim"));
			host_checks(c); /* host buffers still go to the host backend */
		}
	}

	/* 3D groups: the members of each group, summed as 2^rank, are the
	 * ranks DeepSpeed's topology puts there */
	static const int layouts[][2] = { { 2, 1 }, { 1, 2 }, { 2, 2 }, { 4, 1 }, { 1, 4 } };
	for (size_t k = 0; k < sizeof layouts / sizeof layouts[0]; k++) {
		struct ds_topo t;
		struct ds_groups gr;
		int tp = layouts[k][0], pp = layouts[k][1];
		if (n % (tp * pp))
			continue;
		CHECK(ds_topo_init(&t, n, rank, tp, pp, &err) == 0, "topo %s", err.msg);
		CHECK(ds_groups_create(&gr, c, &t, &err) == 0, "groups %s", err.msg);
		int64_t m[4] = { 1 << rank, 1 << rank, 1 << rank, 1 << rank }, w[4] = { 0, 0, 0, 0 };
		for (int q = 0; q < tp; q++)
			w[0] |= 1 << ds_topo_rank_of(&t, t.pp_rank, t.dp_rank, q);
		for (int q = 0; q < pp; q++)
			w[1] |= 1 << ds_topo_rank_of(&t, q, t.dp_rank, t.tp_rank);
		for (int q = 0; q < t.dp; q++)
			w[2] |= 1 << ds_topo_rank_of(&t, t.pp_rank, q, t.tp_rank);
		w[3] = pp > 1 && (t.pp_rank == 0 || t.pp_rank == pp - 1)
			? (1 << ds_topo_rank_of(&t, 0, t.dp_rank, t.tp_rank)) | (1 << ds_topo_rank_of(&t, pp - 1, t.dp_rank, t.tp_rank))
			: 1 << rank;
		struct ds_comm *gs[4] = { gr.tp, gr.pp, gr.dp, gr.tie };
		for (int q = 0; q < 4; q++) {
			ds_comm_allreduce(gs[q], &m[q], 1, DS_I64, DS_SUM, &err);
			CHECK(m[q] == w[q], "tp %d pp %d: group %d holds ranks %llx, want %llx", tp, pp, q,
			      (long long)m[q], (long long)w[q]);
		}
		CHECK(ds_comm_rank(gr.pp) == t.pp_rank, "pipe group rank %d is not the stage %d", ds_comm_rank(gr.pp),
		      t.pp_rank);
		ds_groups_release(&gr);
	}

	int64_t nbad = bad;
	ds_comm_allreduce(c, &nbad, 1, DS_I64, DS_SUM, &err);
	if (rank == 0)
		printf("comm_check: %d ranks, %lld failed checks\n", n, (long long)nbad);
	ds_comm_destroy(c);
	if (strcmp(memkind, "host")) {
		long live = !strcmp(memkind, "devsim") ? sim.pinned_live : m.pinned_live();
		if (live) {
			fprintf(stderr, "rank %d: %ld pinned buffers left after ds_comm_destroy\n", rank, live);
			return 1;
		}
	}
	return nbad ? 1 : 0;
}
