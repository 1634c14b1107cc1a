/* compressed.c - DeepSpeed's compressed allreduce (comm.h) on any
 * backend: the element work is kernels/cpu/onebit.c, the exchanges are
 * this communicator's all_to_all_single and all_gather, so the comms logger
 * records the bytes that really travel.
 */
#include "comm/comm_int.h"

#include <stdlib.h>

#include "cpu/onebit.h"
#include "util/mem.h"

struct ds_comm_onebit {
	size_t cap;          /* padded elements the buffers below hold */
	int world;
	uint8_t *bits;       /* this worker's signs (padded/8), later the gathered server signs */
	uint8_t *recv;       /* the signs of my chunk from every worker (padded/8) */
	uint8_t *sbits;      /* my server chunk's signs (padded/8/world) */
	float *tmp;          /* my compensated server chunk (padded/world) */
	float *scales, *sscales;  /* the workers' and the servers' scales (world each) */
};

int ds_comm_onebit_create(struct ds_comm_onebit **out, struct ds_err *err)
{
	*out = calloc(1, sizeof **out);
	return *out ? 0 : ds_err_set(err, DS_ENOMEM, "out of memory for the compressed allreduce");
}

static void release(struct ds_comm_onebit *w)
{
	ds_free(w->bits);
	ds_free(w->recv);
	ds_free(w->sbits);
	ds_free(w->tmp);
	free(w->scales);
	free(w->sscales);
	w->bits = w->recv = w->sbits = NULL;
	w->tmp = w->scales = w->sscales = NULL;
	w->cap = 0;
}

void ds_comm_onebit_destroy(struct ds_comm_onebit *w)
{
	if (!w)
		return;
	release(w);
	free(w);
}

static int reserve(struct ds_comm_onebit *w, size_t padded, int world, struct ds_err *err)
{
	if (w->cap >= padded && w->world == world)
		return 0;
	release(w);
	w->bits = ds_alloc(padded / 8);
	w->recv = ds_alloc(padded / 8);
	w->sbits = ds_alloc(padded / 8 / (size_t)world);
	w->tmp = ds_alloc(padded / (size_t)world * sizeof(float));
	w->scales = calloc((size_t)world, sizeof(float));
	w->sscales = calloc((size_t)world, sizeof(float));
	if (!w->bits || !w->recv || !w->sbits || !w->tmp || !w->scales || !w->sscales) {
		release(w);
		return ds_err_set(err, DS_ENOMEM, "out of memory for the compressed allreduce of %zu elements", padded);
	}
	w->cap = padded;
	w->world = world;
	return 0;
}

int ds_comm_compressed_allreduce(struct ds_comm *c, struct ds_comm_onebit *w, float *buf, size_t padded,
				 float *worker_error, float *server_error, struct ds_err *err)
{
	const int W = c->size;
	if (padded == 0 || padded % (8 * (size_t)W))
		return ds_err_set(err, DS_EINVAL, "compressed allreduce of %zu elements: not a multiple of 8 x %d ranks "
				  "(use ds_onebit_padded)", padded, W);
	DS_TRY(reserve(w, padded, W, err));
	const size_t chunk = padded / (size_t)W;
	/* phase 1: compress, signs of chunk r to rank r, scales to everyone */
	float ws = ds_onebit_compress(buf, worker_error, padded, w->bits);
	DS_TRY(ds_comm_alltoall(c, w->bits, w->recv, chunk / 8, DS_U8, err));
	DS_TRY(ds_comm_allgather(c, &ws, w->scales, 1, DS_F32, err));
	/* server of my chunk: average, compensate, compress */
	float ss = ds_onebit_server(w->recv, w->scales, W, chunk, server_error, w->tmp, w->sbits);
	/* phase 2: every server's signs and scale to everyone */
	DS_TRY(ds_comm_allgather(c, w->sbits, w->bits, chunk / 8, DS_U8, err));
	DS_TRY(ds_comm_allgather(c, &ss, w->sscales, 1, DS_F32, err));
	ds_onebit_decode(w->bits, w->sscales, W, chunk, buf);
	return 0;
}
