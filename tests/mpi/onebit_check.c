/* onebit_check.c - the compressed allreduce between real ranks
 * (tests/mpi/onebit.bats runs it under mpirun).
 *
 *   onebit_check example   2 ranks: the worked 2-step example of
 *                          tests/unit/onebit_example.h; every rank checks
 *                          its result and its worker and server errors
 *                          against the hand-computed values, exactly.
 *   onebit_check simulate  any number of ranks: 3 steps on a 1000-element
 *                          buffer (padded to DeepSpeed's size), each rank
 *                          checking its result and errors against all the
 *                          ranks played in one process with the same
 *                          kernels, so what is tested is the exchange: which
 *                          chunk reaches which rank, in which order.
 * Prints "ok" and exits 0, or names the first mismatch and exits 1. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/onebit_example.h"
#include "comm/comm.h"
#include "cpu/onebit.h"

static int fail(int rank, const char *what, int step, size_t i, float got, float want)
{
	fprintf(stderr, "rank %d step %d: %s[%zu] = %g, expected %g\n", rank, step, what, i, got, want);
	return 1;
}

static int cmp(int rank, const char *what, int step, const float *a, const float *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float)))
			return fail(rank, what, step, i, a[i], b[i]);
	return 0;
}

static int example(struct ds_comm *c, struct ds_comm_onebit *w)
{
	struct ds_err err = DS_ERR_INIT;
	int r = ds_comm_rank(c);
	if (ds_comm_size(c) != 2) {
		fprintf(stderr, "the example needs 2 ranks\n");
		return 2;
	}
	float werr[EX_N] = { 0 }, serr[EX_N / 2] = { 0 }, buf[EX_N];
	for (int s = 0; s < 2; s++) {
		memcpy(buf, ex_in[s][r], sizeof buf);
		if (ds_comm_compressed_allreduce(c, w, buf, EX_N, werr, serr, &err) < 0) {
			fprintf(stderr, "rank %d: %s\n", r, err.msg);
			return 1;
		}
		if (cmp(r, "result", s + 1, buf, ex_out[s], EX_N) || cmp(r, "worker_error", s + 1, werr, ex_werr[s][r], EX_N) ||
		    cmp(r, "server_error", s + 1, serr, ex_serr[s][r], EX_N / 2))
			return 1;
	}
	return 0;
}

/* rank q's input at step s, element i: a fixed mix of magnitudes and signs */
static float input(int q, int s, size_t i)
{
	return (float)sin(0.37 * (double)i + 1.3 * q + 0.7 * s) * (1.0f + (float)((i * 7 + (size_t)q) % 5));
}

static int simulate(struct ds_comm *c, struct ds_comm_onebit *w)
{
	struct ds_err err = DS_ERR_INIT;
	const int W = ds_comm_size(c), me = ds_comm_rank(c);
	const size_t n = 1000, P = ds_onebit_padded(n, W), C = P / (size_t)W;
	float *buf = calloc(P, sizeof(float)), *werr = calloc(P, sizeof(float)), *serr = calloc(C, sizeof(float));
	/* the simulation: every rank's errors, buffers and signs */
	float *swerr = calloc(P * (size_t)W, sizeof(float)), *sserr = calloc(P, sizeof(float));
	float *sbuf = calloc(P * (size_t)W, sizeof(float)), *tmp = calloc(C, sizeof(float)), *out = calloc(P, sizeof(float));
	float *wsc = calloc((size_t)W, sizeof(float)), *ssc = calloc((size_t)W, sizeof(float));
	uint8_t *bits = calloc(P / 8 * (size_t)W, 1), *recv = calloc(P / 8, 1), *sbits = calloc(P / 8, 1);
	int rc = 1;
	if (!buf || !werr || !serr || !swerr || !sserr || !sbuf || !tmp || !out || !wsc || !ssc || !bits || !recv || !sbits)
		goto out;
	for (int s = 0; s < 3; s++) {
		for (int q = 0; q < W; q++) {
			float *b = sbuf + (size_t)q * P;
			memset(b, 0, P * sizeof(float));
			for (size_t i = 0; i < n; i++)
				b[i] = input(q, s, i);
			wsc[q] = ds_onebit_compress(b, swerr + (size_t)q * P, P, bits + (size_t)q * (P / 8));
		}
		for (int r = 0; r < W; r++) {
			for (int q = 0; q < W; q++)
				memcpy(recv + (size_t)q * (C / 8), bits + (size_t)q * (P / 8) + (size_t)r * (C / 8), C / 8);
			ssc[r] = ds_onebit_server(recv, wsc, W, C, sserr + (size_t)r * C, tmp, sbits + (size_t)r * (C / 8));
		}
		ds_onebit_decode(sbits, ssc, W, C, out);
		/* the real thing */
		memset(buf, 0, P * sizeof(float));
		for (size_t i = 0; i < n; i++)
			buf[i] = input(me, s, i);
		if (ds_comm_compressed_allreduce(c, w, buf, P, werr, serr, &err) < 0) {
			fprintf(stderr, "rank %d: %s\n", me, err.msg);
			goto out;
		}
		if (cmp(me, "result", s + 1, buf, out, P) || cmp(me, "worker_error", s + 1, werr, swerr + (size_t)me * P, P) ||
		    cmp(me, "server_error", s + 1, serr, sserr + (size_t)me * C, C))
			goto out;
	}
	rc = 0;
out:
	free(buf), free(werr), free(serr), free(swerr), free(sserr), free(sbuf), free(tmp), free(out);
	free(wsc), free(ssc), free(bits), free(recv), free(sbits);
	return rc;
}

int main(int argc, char **argv)
{
	struct ds_comm *c;
	struct ds_comm_onebit *w;
	struct ds_err err = DS_ERR_INIT;
	if (argc != 2 || (strcmp(argv[1], "example") && strcmp(argv[1], "simulate"))) {
		fprintf(stderr, "usage: mpirun -np N onebit_check example|simulate\n");
		return 2;
	}
	if (ds_comm_create(&c, "mpi", &err) < 0 || ds_comm_onebit_create(&w, &err) < 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	int rc = !strcmp(argv[1], "example") ? example(c, w) : simulate(c, w);
	/* every rank's verdict, so that rank 0's line speaks for all */
	int64_t bad = rc != 0;
	if (ds_comm_allreduce(c, &bad, 1, DS_I64, DS_SUM, &err) < 0)
		bad = 1;
	if (ds_comm_rank(c) == 0 && !bad)
		printf("ok\n");
	ds_comm_onebit_destroy(w);
	ds_comm_destroy(c);
	return bad ? 1 : 0;
}
