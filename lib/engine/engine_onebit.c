/* engine_onebit.c - the 1-bit optimizers inside the engine (see
 * engine_onebit.h): the model's tensors as the optimizer's, the momentum
 * exchange as ds_comm_compressed_allreduce on the run's communicator.
 */
#include "engine/engine_onebit.h"

#include <stdlib.h>

#include "util/mem.h"

struct ds_engine_onebit {
	struct ds_onebit *opt;
	struct ds_comm *comm;
	struct ds_comm_onebit *cw;   /* the compressed allreduce's scratch */
	enum ds_half_kind half;
	float *gwide;                /* 16-bit gradients widened (total floats) */
	int64_t total;
};

static int exchange(void *ctx, float *buf, size_t padded, float *worker_error, float *server_error,
		    struct ds_err *err)
{
	struct ds_engine_onebit *b = ctx;
	return ds_comm_compressed_allreduce(b->comm, b->cw, buf, padded, worker_error, server_error, err);
}

int ds_engine_onebit_create(struct ds_engine_onebit **out, const struct ds_optim_params *hp,
			    const struct ds_gpt *model, const int64_t *seg_off, int64_t total, enum ds_half_kind half,
			    struct ds_comm *comm, struct ds_err *err)
{
	int rc, nt = ds_gpt_num_tensors(model);
	struct ds_onebit_tensor *t = NULL;
	struct ds_engine_onebit *b = calloc(1, sizeof *b);
	*out = NULL;
	if (!b || !(t = calloc((size_t)(nt ? nt : 1), sizeof *t))) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory for the 1-bit optimizer");
		goto fail;
	}
	b->comm = comm;
	b->half = half;
	b->total = total;
	/* registry order, as DeepSpeed's optimizer sees model.parameters() */
	for (int i = 0; i < nt; i++) {
		const struct ds_gpt_tensor *gt = ds_gpt_tensor(model, i);
		int64_t in_seg = gt->offset - ds_gpt_segment(model, gt->segment)->offset;
		t[i] = (struct ds_onebit_tensor){ (size_t)(seg_off[gt->segment] + in_seg), (size_t)gt->numel };
	}
	if ((rc = ds_comm_onebit_create(&b->cw, err)) < 0)
		goto fail;
	struct ds_onebit_comm x = { ds_comm_size(comm), exchange, b };
	if ((rc = ds_onebit_create(&b->opt, hp, (size_t)total, t, nt, half != DS_HALF_NONE, &x, err)) < 0)
		goto fail;
	if (half != DS_HALF_NONE && !(b->gwide = ds_alloc((size_t)(total ? total : 1) * sizeof(float)))) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory for the 1-bit optimizer's gradients");
		goto fail;
	}
	free(t);
	*out = b;
	return 0;
fail:
	free(t);
	ds_engine_onebit_destroy(b);
	return rc;
}

void ds_engine_onebit_destroy(struct ds_engine_onebit *b)
{
	if (!b)
		return;
	ds_onebit_destroy(b->opt);
	ds_comm_onebit_destroy(b->cw);
	ds_free(b->gwide);
	free(b);
}

void ds_engine_onebit_set_lr(struct ds_engine_onebit *b, double lr, int has_betas, double beta1, double beta2)
{
	struct ds_optim_params *hp = ds_onebit_params(b->opt);
	hp->lr = lr;
	if (has_betas) {
		hp->beta1 = beta1;
		hp->beta2 = beta2;
	}
}

int ds_engine_onebit_step(struct ds_engine_onebit *b, float *params, const float *grads, const uint16_t *gh,
			  float grad_mul, struct ds_err *err)
{
	if (!grads) {
		ds_half_unpack_n(b->half, b->gwide, gh, (size_t)b->total);
		grads = b->gwide;
	}
	return ds_onebit_step(b->opt, params, grads, grad_mul, err);
}

struct ds_onebit *ds_engine_onebit_optim(struct ds_engine_onebit *b) { return b->opt; }
