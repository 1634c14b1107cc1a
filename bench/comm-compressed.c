/* comm-compressed.c - benchmark helper (not a test), run under mpirun by
 * bench/comm-busbw.sh: the compressed allreduce of the 1-bit optimizers
 * (ds_comm_compressed_allreduce) against a raw MPI_Allreduce (in place,
 * fp32 sum, straight on MPI_COMM_WORLD) of the same fp32 buffer on the same
 * ranks.  Each call is timed alone; the figure is the 10%-trimmed mean of
 * the per-call busbw computed with DeepSpeed's all_reduce formula on the
 * fp32 size S (S/t x 2(n-1)/n), so for the compressed call it is an
 * effective bandwidth: the fp32 allreduce it stands in for, per second.
 * The two loops alternate ROUNDS times; each figure is the best round.
 * Also printed: the bytes each rank hands the compressed call's collectives
 * (all_to_all_single and all_gather message sizes, as comms_logger counts
 * them) against S.
 *
 *   mpirun -np N bench/comm-compressed BYTES [CALLS] [WARMUP] [ROUNDS]
 *
 * Rank 0 prints:
 *   raw MPI_Allreduce: bytes S | ranks N | calls K | avg latency (ms) X | busbw (Gbps) Y
 *   compressed allreduce: bytes S | ranks N | calls K | avg latency (ms) X | effective busbw (Gbps) Y | sent B (S/R)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "cpu/onebit.h"
#include "monitor/comms.h"
#include "util/timer.h"

static size_t sent;
static void on_record(void *ctx, const struct ds_comm_record *r)
{
	(void)ctx;
	sent += r->bytes;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, n;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (argc < 2 || atol(argv[1]) < 32) {
		if (rank == 0)
			fprintf(stderr, "usage: mpirun -np N %s BYTES [CALLS] [WARMUP] [ROUNDS]  (BYTES >= 32)\n", argv[0]);
		MPI_Finalize();
		return 2;
	}
	const size_t count = (size_t)atol(argv[1]) / 4, padded = ds_onebit_padded(count, n);
	const long bytes = (long)count * 4;
	int calls = argc > 2 ? atoi(argv[2]) : 50, warm = argc > 3 ? atoi(argv[3]) : 5;
	int rounds = argc > 4 && atoi(argv[4]) > 0 ? atoi(argv[4]) : 3;
	if (calls < 1)
		calls = 1;
	/* the raw sums grow call by call; the compressed call averages */
	float *buf = calloc(padded, sizeof(float)), *werr = calloc(padded, sizeof(float)), *rbuf = calloc(count, sizeof(float));
	float *serr = calloc(padded / (size_t)n, sizeof(float));
	double *lat = malloc(sizeof(double) * (size_t)calls), *bus = malloc(sizeof(double) * (size_t)calls);
	struct ds_comm *c;
	struct ds_comm_onebit *w;
	struct ds_err err = DS_ERR_INIT;
	if (!buf || !werr || !serr || !rbuf || !lat || !bus || ds_comm_create(&c, "mpi", &err) < 0 ||
	    ds_comm_onebit_create(&w, &err) < 0) {
		fprintf(stderr, "comm-compressed: %s\n", err.msg[0] ? err.msg : "out of memory");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	for (size_t i = 0; i < count; i++)
		buf[i] = 1e-3f * (float)((i * 7 + (size_t)rank) % 1000) - 0.5f;
	for (int i = 0; i < warm; i++) {
		MPI_Allreduce(MPI_IN_PLACE, rbuf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		ds_comm_compressed_allreduce(c, w, buf, padded, werr, serr, &err);
	}
	double best[2][2] = { { 0, 0 }, { 0, 0 } };  /* raw, compressed: latency, busbw of the best round */
	for (int round = 0; round < rounds; round++) {
		for (int kind = 0; kind < 2; kind++) {
			MPI_Barrier(MPI_COMM_WORLD);
			for (int i = 0; i < calls; i++) {
				double t0 = ds_now(), alg;
				if (kind == 0) {
					MPI_Allreduce(MPI_IN_PLACE, rbuf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
				} else if (ds_comm_compressed_allreduce(c, w, buf, padded, werr, serr, &err) < 0) {
					fprintf(stderr, "comm-compressed: %s\n", err.msg);
					MPI_Abort(MPI_COMM_WORLD, 1);
				}
				lat[i] = (ds_now() - t0) * 1e3;
				ds_monitor_comms_bw("all_reduce", (double)bytes, lat[i], n, &alg, &bus[i]);
			}
			double l = ds_monitor_trim_mean(lat, (size_t)calls, 0.1), b = ds_monitor_trim_mean(bus, (size_t)calls, 0.1);
			if (b > best[kind][1])
				best[kind][0] = l, best[kind][1] = b;
		}
	}
	/* what one call hands its collectives, as comms_logger counts it */
	ds_comm_set_logger(c, on_record, NULL);
	ds_comm_compressed_allreduce(c, w, buf, padded, werr, serr, &err);
	ds_comm_set_logger(c, NULL, NULL);
	if (rank == 0) {
		printf("raw MPI_Allreduce: bytes %ld | ranks %d | calls %d | avg latency (ms) %.4f | busbw (Gbps) %.2f\n", bytes,
		       n, calls, best[0][0], best[0][1]);
		printf("compressed allreduce: bytes %ld | ranks %d | calls %d | avg latency (ms) %.4f | effective busbw (Gbps) "
		       "%.2f | sent %zu (1/%.1f)\n", bytes, n, calls, best[1][0], best[1][1], sent, (double)bytes / (double)sent);
	}
	ds_comm_onebit_destroy(w);
	ds_comm_destroy(c);
	free(buf), free(werr), free(serr), free(rbuf), free(lat), free(bus);
	MPI_Finalize();
	return 0;
}
