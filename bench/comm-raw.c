/* comm-raw.c - benchmark helper (not a test), run under mpirun by
 * bench/comm-busbw.sh: MPI_Allreduce (in place, fp32 sum) straight on
 * MPI_COMM_WORLD, no libds communicator in between, called back to back
 * as the engine calls its gradient buckets (with SPAN, call k reduces the
 * k-th BYTES-long bucket of a SPAN-byte buffer, cycling, as the engine
 * walks its flat gradients; without, one buffer stays hot in cache).  Each
 * call is timed alone and
 * its busbw computed with DeepSpeed's formula (lib/monitor/comms.h); the
 * figure is the 10%-trimmed mean over the calls, as comms_logger's summary
 * reports it, so the two compare like for like.
 *
 * The same calls then go through libds's communicator with the comms
 * logger's hook, recording like ds-train does (ds_monitor_comms_add): the
 * logger's busbw for the same pattern in a tight loop, which separates
 * what the logger and the comm layer cost from what a training step's
 * timing (ranks arriving apart after compute) does to the figure.  Raw and
 * logged loops alternate ROUNDS times; each figure is the best round.
 *
 *   mpirun -np N bench/comm-raw BYTES [CALLS] [WARMUP] [SPAN] [ROUNDS]
 *
 * Rank 0 prints:
 *   raw MPI_Allreduce: bytes B | ranks N | calls K | buckets M | avg latency (ms) X | busbw (Gbps) Y
 *   ds_comm + comms_logger: bytes B | ranks N | calls K | buckets M | avg latency (ms) X | busbw (Gbps) Y
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/comm.h"
#include "monitor/comms.h"
#include "util/timer.h"

/* the logged loop: each record goes into the logger's table as ds-train's
 * does, and its busbw is kept for the trimmed mean */
struct logged {
	struct ds_monitor_comms *tab;
	double *lat, *bus;
	int k;
};

static void on_record(void *ctx, const struct ds_comm_record *r)
{
	struct logged *g = ctx;
	struct ds_err err = DS_ERR_INIT;
	double alg, ms = r->seconds * 1e3;
	if (ds_monitor_comms_add(g->tab, r->op, NULL, r->bytes, ms, &alg, &g->bus[g->k], &err) == 0)
		g->lat[g->k++] = ms;
}

int main(int argc, char **argv)
{
	MPI_Init(&argc, &argv);
	int rank, n;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (argc < 2 || atol(argv[1]) < 4) {
		if (rank == 0)
			fprintf(stderr, "usage: mpirun -np N %s BYTES [CALLS] [WARMUP] [SPAN] [ROUNDS]  (BYTES >= 4, a multiple of 4)\n",
				argv[0]);
		MPI_Finalize();
		return 2;
	}
	long bytes = atol(argv[1]) / 4 * 4;
	int calls = argc > 2 ? atoi(argv[2]) : 200, warm = argc > 3 ? atoi(argv[3]) : 20;
	int rounds = argc > 5 && atoi(argv[5]) > 0 ? atoi(argv[5]) : 1;
	if (calls < 1)
		calls = 1;
	int count = (int)(bytes / 4);
	long nb = argc > 4 && atol(argv[4]) > bytes ? atol(argv[4]) / bytes : 1;  /* buckets in the span */
	float *buf = malloc(sizeof(float) * (size_t)count * (size_t)nb);
	double *lat = malloc(sizeof(double) * (size_t)calls), *bus = malloc(sizeof(double) * (size_t)calls);
	if (!buf || !lat || !bus) {
		fprintf(stderr, "comm-raw: out of memory\n");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	for (long i = 0; i < (long)count * nb; i++)
		buf[i] = 1e-3f * (float)(i % 1000);
	for (int i = 0; i < warm; i++)
		MPI_Allreduce(MPI_IN_PLACE, buf + (size_t)(i % nb) * (size_t)count, count, MPI_FLOAT, MPI_SUM,
			      MPI_COMM_WORLD);
	struct ds_comm *c;
	struct ds_err err = DS_ERR_INIT;
	struct logged g = { NULL, malloc(sizeof(double) * (size_t)calls), malloc(sizeof(double) * (size_t)calls), 0 };
	if (ds_comm_create(&c, "mpi", &err) < 0 || ds_monitor_comms_create(&g.tab, n, &err) < 0 || !g.lat || !g.bus) {
		fprintf(stderr, "comm-raw: %s\n", err.msg[0] ? err.msg : "out of memory");
		MPI_Abort(MPI_COMM_WORLD, 1);
	}
	double best_raw[2] = { 0, 0 }, best_log[2] = { 0, 0 };  /* latency, busbw of the best round */
	for (int round = 0; round < rounds; round++) {
		MPI_Barrier(MPI_COMM_WORLD);
		for (int i = 0; i < calls; i++) {
			double t0 = ds_now();
			MPI_Allreduce(MPI_IN_PLACE, buf + (size_t)(i % nb) * (size_t)count, count, MPI_FLOAT, MPI_SUM,
				      MPI_COMM_WORLD);
			lat[i] = (ds_now() - t0) * 1e3;
			double alg;
			ds_monitor_comms_bw("all_reduce", (double)bytes, lat[i], n, &alg, &bus[i]);
		}
		double l = ds_monitor_trim_mean(lat, (size_t)calls, 0.1), b = ds_monitor_trim_mean(bus, (size_t)calls, 0.1);
		if (b > best_raw[1])
			best_raw[0] = l, best_raw[1] = b;
		MPI_Barrier(MPI_COMM_WORLD);
		g.k = 0;
		ds_comm_set_logger(c, on_record, &g);
		for (int i = 0; i < calls; i++)
			ds_comm_allreduce(c, buf + (size_t)(i % nb) * (size_t)count, (size_t)count, DS_F32, DS_SUM, &err);
		ds_comm_set_logger(c, NULL, NULL);
		l = ds_monitor_trim_mean(g.lat, (size_t)g.k, 0.1);
		b = ds_monitor_trim_mean(g.bus, (size_t)g.k, 0.1);
		if (b > best_log[1])
			best_log[0] = l, best_log[1] = b;
	}
	if (rank == 0) {
		printf("raw MPI_Allreduce: bytes %ld | ranks %d | calls %d | buckets %ld | avg latency (ms) %.4f | "
		       "busbw (Gbps) %.2f\n", bytes, n, calls, nb, best_raw[0], best_raw[1]);
		printf("ds_comm + comms_logger: bytes %ld | ranks %d | calls %d | buckets %ld | avg latency (ms) %.4f | "
		       "busbw (Gbps) %.2f\n", bytes, n, calls, nb, best_log[0], best_log[1]);
	}
	ds_monitor_comms_destroy(g.tab);
	free(g.lat);
	free(g.bus);
	ds_comm_destroy(c);
	free(buf);
	free(lat);
	free(bus);
	MPI_Finalize();
	return 0;
}
