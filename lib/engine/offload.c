/* offload.c - ZeRO-Infinity in the engine (see offload.h): the update
 * space and its plan, the swap files, the optimizer step streamed
 * sub-group by sub-group with DeepSpeed's pipelining, the stage-3
 * parameter buffers, and the checkpoint window.
 *
 * Buffers (DeepSpeed's counts): the optimizer pool holds buffer_count
 * buffers of S fp32 elements; a sub-group in flight takes one per array
 * it swaps (the master when it is not in memory, each state) plus one for
 * its fp32 gradient, as DeepSpeed's swapper takes param, states and grad.
 * pipeline_read keeps the next sub-group's read in flight while one is
 * updated, pipeline_write the previous one's write: 1 + pipeline_read +
 * pipeline_write sub-groups in flight, each in its own buffer set.  The
 * optimizer runs on the host (as DeepSpeed's CPU Adam does for NVMe
 * offload) on these buffers, so a GPU backend only copies gradients into
 * the gradient buffer and the refreshed 16-bit slices out.
 */
#include "engine/offload.h"

#include <stdlib.h>
#include <string.h>

#include "util/half.h"
#include "util/mem.h"

#define OPT_KEY "zero_optimization.offload_optimizer"
#define PAR_KEY "zero_optimization.offload_param"

static int64_t align_up(int64_t x, int64_t a) { return (x + a - 1) / a * a; }
static int64_t align_down(int64_t x, int64_t a) { return x / a * a; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* states per element, as ds_optim_create keeps them */
static int nstates_of(const struct ds_optim_params *p)
{
	if (p->type == DS_OPTIM_SGD)
		return p->momentum != 0 ? 1 : 0;
	return 2;
}

/* each range at a multiple of A, end to end; the aligned total */
static int64_t lay(int nseg, const int64_t *un, int64_t A, int64_t *off)
{
	int64_t u = 0;
	for (int s = 0; s < nseg; s++) {
		if (off)
			off[s] = u;
		u = align_up(u + un[s], A);
	}
	return u;
}

void ds_offload_pstores(const struct ds_engine_opts *o, int nseg, const int64_t *numel, const int64_t *un,
			int *pstore)
{
	int64_t cum = 0;
	for (int s = 0; s < nseg; s++) {
		pstore[s] = 0;
		if (!o->offload.param || o->zero_stage != 3 || numel[s] < o->stage3_param_persistence_threshold)
			continue;
		/* DeepSpeed: the first max_in_cpu elements of the partitions stay
		 * in a CPU flat buffer, the rest live on NVMe */
		cum += un[s];
		pstore[s] = cum > o->offload.max_in_cpu;
	}
}

int ds_offload_master_in_memory(const struct ds_engine_opts *o, int pstore)
{
	if (o->half != DS_HALF_NONE)
		return !o->offload.optimizer;
	return !pstore;
}

int ds_offload_plan(const struct ds_engine_opts *o, int nseg, const int64_t *un, const int *pstore,
		    struct ds_offload_plan *p, struct ds_err *err)
{
	const struct ds_engine_offload *c = &o->offload;
	const int half = o->half != DS_HALF_NONE, ns = nstates_of(&o->optim);
	int any_p = 0, any_mem_master_missing = 0;
	int64_t maxun = 0;
	memset(p, 0, sizeof *p);
	if (!c->optimizer && !c->param)
		return 0;
	for (int s = 0; s < nseg; s++) {
		any_p |= pstore[s];
		any_mem_master_missing |= !ds_offload_master_in_memory(o, pstore[s]);
		if (pstore[s])
			maxun = max64(maxun, un[s]);
	}
	if (c->optimizer && ds_optim_is_onebit(o->optim.type))
		return ds_err_set(err, DS_EINVAL, OPT_KEY ".device \"nvme\": the 1-bit optimizers keep their own "
				  "compressed state and error feedback in memory (DeepSpeed offloads none of them); use "
				  "Adam, AdamW or SGD, or device none");
	if (c->optimizer && o->optim.type == DS_OPTIM_LAMB)
		return ds_err_set(err, DS_EINVAL, OPT_KEY ".device \"nvme\": optimizer Lamb cannot stream its states "
				  "sub-group by sub-group (its trust ratios need whole tensors; DeepSpeed's NVMe offload "
				  "runs a CPU Adam); use Adam, AdamW or SGD");
	if (any_p && !half && !c->optimizer)
		return ds_err_set(err, DS_EINVAL, PAR_KEY ".device \"nvme\": in an fp32 run the parameters are the "
				  "optimizer's master weights; offload them with " OPT_KEY ".device \"nvme\" too");
	p->A = 2048 * (int64_t)(c->aio.intra_op_parallelism > 0 ? c->aio.intra_op_parallelism : 1);
	p->U = lay(nseg, un, p->A, NULL);
	p->has_master = any_mem_master_missing;
	p->has_p16 = half && any_p;
	const int opt_active = c->optimizer && (p->has_master || ns > 0);
	p->S = align_up(c->sub_group_size > 0 ? c->sub_group_size : 1, p->A);
	if (p->S > p->U)
		p->S = p->U;
	p->K = p->S ? (int)((p->U + p->S - 1) / p->S) : 0;
	if (opt_active) {
		p->per_set = p->has_master + ns + 1;
		p->nsets = 1 + (c->pipeline_read != 0) + (c->pipeline_write != 0);
		int need = p->per_set * p->nsets;
		if (c->opt_buffer_count < need)
			return ds_err_set(err, DS_EINVAL, OPT_KEY ".buffer_count %d: too few; streaming needs %d buffers (%d "
					  "per sub-group: %s%d optimizer state%s and the gradient, times %d sub-group%s in "
					  "flight with pipeline_read %s and pipeline_write %s)", c->opt_buffer_count, need,
					  p->per_set, p->has_master ? "the fp32 master, " : "", ns, ns == 1 ? "" : "s",
					  p->nsets, p->nsets > 1 ? "s" : "", c->pipeline_read ? "on" : "off",
					  c->pipeline_write ? "on" : "off");
		p->pinned_bytes += (size_t)c->opt_buffer_count * (size_t)p->S * sizeof(float);
		if (p->has_p16)
			p->pinned_bytes += (size_t)(1 + (c->pipeline_write != 0)) * (size_t)p->S * sizeof(uint16_t);
		p->nvme_opt_bytes = (uint64_t)(p->has_master + ns) * (uint64_t)p->U * sizeof(float);
	} else if (p->has_master) {  /* fp32 parameters without an optimizer swap: refused above */
		p->nvme_opt_bytes = (uint64_t)p->U * sizeof(float);
	}
	if (any_p) {
		const size_t es = half ? sizeof(uint16_t) : sizeof(float);
		if (c->param_buffer_count < 2)
			return ds_err_set(err, DS_EINVAL, PAR_KEY ".buffer_count %d: too few; a segment's slice and the "
					  "next one's need at least 2", c->param_buffer_count);
		if (c->param_buffer_size < maxun)
			return ds_err_set(err, DS_EINVAL, PAR_KEY ".buffer_size %lld: smaller than this rank's largest "
					  "offloaded parameter slice (%lld elements); raise it to at least that",
					  (long long)c->param_buffer_size, (long long)maxun);
		p->pbuf_el = align_up(maxun, p->A);  /* no buffer needs more than the largest slice */
		p->pinned_bytes += (size_t)c->param_buffer_count * (size_t)p->pbuf_el * es;
		p->nvme_param_bytes = p->has_p16 ? (uint64_t)p->U * sizeof(uint16_t) : 0;
	}
	p->nvme_bytes = p->nvme_opt_bytes + p->nvme_param_bytes;
	return 0;
}

/* ---- the object ---------------------------------------------------------- */

struct pbuf {
	void *p;
	int seg;      /* the segment whose slice it holds, or -1 */
	int reading;  /* a read into it is in flight */
	int busy;     /* users between get and put */
	long used;    /* last get, for reuse of the least recent */
};

struct ds_offload {
	struct ds_engine_offload c;
	struct ds_offload_plan pl;
	enum ds_half_kind half;
	enum ds_optim_type type;
	int ns, opt_active;
	int nseg;
	struct ds_offload_range *r;
	int64_t *off;        /* each range's first element in the update space */
	struct ds_swap *osw; /* master and states (offload_optimizer.nvme_path) */
	struct ds_swap *psw; /* 16-bit parameters (offload_param.nvme_path) */
	/* some read, some write, some read or write of either set in flight */
	struct ds_aio_busy busy[3];
	int busy_init;
	int f_master, f_st[DS_OPTIM_MAX_STATES], f_p16;
	float **pool;        /* opt_buffer_count buffers of S elements */
	int npool;
	uint16_t *stage[2];  /* 16-bit slices of a sub-group on their way to param16 */
	struct pbuf *pb;
	int npb;
	long clock;
	struct ds_swap *psrc; /* where offloaded parameter slices are read */
	int psrc_f;
	size_t pes;
	/* checkpoint window: update-space elements [w0, w1) of range wseg in set 0 */
	int wseg, wdirty;
	int64_t w0, w1;
};

/* buffer set k: its master (NULL when no master file), state j, gradient */
static float *set_master(const struct ds_offload *f, int k)
{
	return f->pl.has_master ? f->pool[k * f->pl.per_set] : NULL;
}
static float *set_state(const struct ds_offload *f, int k, int j)
{
	return f->pool[k * f->pl.per_set + f->pl.has_master + j];
}
static float *set_grad(const struct ds_offload *f, int k)
{
	return f->pool[k * f->pl.per_set + f->pl.per_set - 1];
}

void ds_offload_destroy(struct ds_offload *f)
{
	if (!f)
		return;
	ds_swap_destroy(f->osw);
	ds_swap_destroy(f->psw);
	for (int i = 0; i < f->busy_init; i++)
		pthread_mutex_destroy(&f->busy[i].mu);
	for (int i = 0; f->pool && i < f->npool; i++)
		ds_free(f->pool[i]);
	free(f->pool);
	ds_free(f->stage[0]);
	ds_free(f->stage[1]);
	for (int i = 0; f->pb && i < f->npb; i++)
		ds_free(f->pb[i].p);
	free(f->pb);
	free(f->r);
	free(f->off);
	free(f);
}

/* sub-group k: its first element and length in the update space */
static void sub_of(const struct ds_offload *f, int k, int64_t *a, int64_t *n)
{
	*a = (int64_t)k * f->pl.S;
	*n = min64(f->pl.S, f->pl.U - *a);
}

/* the part of range s inside [a, a+n): range-local [*x, *y) */
static int piece_of(const struct ds_offload *f, int s, int64_t a, int64_t n, int64_t *x, int64_t *y)
{
	*x = max64(a, f->off[s]) - f->off[s];
	*y = min64(a + n, f->off[s] + f->r[s].un) - f->off[s];
	return *y > *x;
}

/* does a piece of [a, a+n) need the master file / the param16 file */
static int needs(const struct ds_offload *f, int64_t a, int64_t n, int p16)
{
	for (int s = 0; s < f->nseg; s++) {
		int64_t x, y;
		if (!piece_of(f, s, a, n, &x, &y))
			continue;
		if (p16 ? (f->half != DS_HALF_NONE && f->r[s].pstore && !f->r[s].h16) : !f->r[s].master)
			return 1;
	}
	return 0;
}

/* queue the reads of sub-group k into set b (master if needed, states) */
static int read_sub(struct ds_offload *f, int k, int b, struct ds_err *err)
{
	int64_t a, n;
	sub_of(f, k, &a, &n);
	if (f->pl.has_master && needs(f, a, n, 0))
		DS_TRY(ds_swap_read(f->osw, f->f_master, (uint64_t)a * 4, set_master(f, b), (uint64_t)n * 4, err));
	for (int j = 0; j < f->ns; j++)
		DS_TRY(ds_swap_read(f->osw, f->f_st[j], (uint64_t)a * 4, set_state(f, b, j), (uint64_t)n * 4, err));
	return 0;
}

/* queue the writes of sub-group k from set b and, with p16, of 16-bit
 * stage st */
static int write_sub(struct ds_offload *f, int k, int b, int st, int p16, struct ds_err *err)
{
	int64_t a, n;
	sub_of(f, k, &a, &n);
	if (f->pl.has_master && needs(f, a, n, 0))
		DS_TRY(ds_swap_write(f->osw, f->f_master, (uint64_t)a * 4, set_master(f, b), (uint64_t)n * 4, err));
	for (int j = 0; j < f->ns; j++)
		DS_TRY(ds_swap_write(f->osw, f->f_st[j], (uint64_t)a * 4, set_state(f, b, j), (uint64_t)n * 4, err));
	if (p16 && f->pl.has_p16 && needs(f, a, n, 1))
		DS_TRY(ds_swap_write(f->psw, f->f_p16, (uint64_t)a * 2, f->stage[st], (uint64_t)n * 2, err));
	return 0;
}

static int wait_writes(struct ds_offload *f, struct ds_err *err)
{
	int rc = f->osw ? ds_swap_wait_writes(f->osw, err) : 0;
	int rc2 = f->psw ? ds_swap_wait_writes(f->psw, rc < 0 ? NULL : err) : 0;
	return rc < 0 ? rc : rc2;
}

/* after a failure: let everything queued finish before buffers are reused */
static void drain(struct ds_offload *f)
{
	if (f->osw) {
		ds_swap_wait_reads(f->osw, NULL);
		ds_swap_wait_writes(f->osw, NULL);
	}
	if (f->psw) {
		ds_swap_wait_reads(f->psw, NULL);
		ds_swap_wait_writes(f->psw, NULL);
	}
	for (int i = 0; i < f->npb; i++)
		if (f->pb[i].reading) {
			f->pb[i].reading = 0;
			f->pb[i].seg = -1;
		}
}

/* the 16-bit copy of piece [x, x+n) of range s from its master p: into
 * memory, or into the stage at stage offset bo */
static void publish(struct ds_offload *f, int s, int64_t x, int64_t n, const float *p, uint16_t *stage, int64_t bo)
{
	const struct ds_offload_range *r = &f->r[s];
	if (f->half == DS_HALF_NONE)
		return;
	if (r->h16)
		ds_half_pack_n(f->half, r->h16 + x, p, (size_t)n);
	else if (r->pstore && stage)
		ds_half_pack_n(f->half, stage + bo, p, (size_t)n);
}

/* ---- initial contents ------------------------------------------------------ */

static int init_files(struct ds_offload *f, const struct ds_gpt *model, uint64_t seed, struct ds_err *err)
{
	for (int k = 0; k < f->pl.K; k++) {
		int64_t a, n;
		sub_of(f, k, &a, &n);
		float *m = set_master(f, 0);
		if (m)
			memset(m, 0, (size_t)n * sizeof(float));
		for (int j = 0; j < f->ns; j++)
			memset(set_state(f, 0, j), 0, (size_t)n * sizeof(float));
		for (int s = 0; m && s < f->nseg; s++) {
			const struct ds_offload_range *r = &f->r[s];
			int64_t x, y;
			if (r->master || !piece_of(f, s, a, n, &x, &y))
				continue;
			/* segment-local elements u0+x .. u0+y, the model's below numel */
			int64_t lo = r->u0 + x, hi = min64(r->u0 + y, r->numel);
			if (hi > lo)
				ds_gpt_init(model, seed, m + (f->off[s] + x - a), r->elem0 + lo, r->elem0 + hi);
		}
		int rc = write_sub(f, k, 0, 0, 0, err);  /* the 16-bit copy: ds_offload_refresh */
		if (rc == 0)
			rc = wait_writes(f, err);
		if (rc < 0) {
			drain(f);
			return rc;
		}
	}
	return 0;
}

static int add_file(struct ds_swap *sw, const char *name, uint64_t bytes, int *idx, struct ds_err *err)
{
	int i = ds_swap_add(sw, name, bytes, err);
	if (i < 0)
		return i;
	*idx = i;
	return 0;
}

int ds_offload_create(struct ds_offload **out, const struct ds_engine_opts *o, const struct ds_offload_range *r,
		      int nseg, const struct ds_gpt *model, int rank, struct ds_err *err)
{
	int rc;
	int64_t *un = calloc((size_t)nseg + 1, sizeof *un);
	int *ps = calloc((size_t)nseg + 1, sizeof *ps);
	struct ds_offload *f = calloc(1, sizeof *f);
	*out = NULL;
	if (!un || !ps || !f) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto fail;
	}
	for (int s = 0; s < nseg; s++) {
		un[s] = r[s].un;
		ps[s] = r[s].pstore;
	}
	if ((rc = ds_offload_plan(o, nseg, un, ps, &f->pl, err)) < 0)
		goto fail;
	for (; f->busy_init < 3; f->busy_init++)
		if (pthread_mutex_init(&f->busy[f->busy_init].mu, NULL) != 0) {
			rc = ds_err_set(err, DS_ENOMEM, "out of memory");
			goto fail;
		}
	f->c = o->offload;
	f->half = o->half;
	f->type = o->optim.type;
	f->ns = nstates_of(&o->optim);
	f->opt_active = f->c.optimizer && (f->pl.has_master || f->ns > 0);
	if (!f->opt_active)
		f->ns = 0;  /* the engine keeps them */
	f->nseg = nseg;
	f->wseg = -1;
	f->r = malloc((size_t)nseg * sizeof *f->r);
	f->off = malloc((size_t)nseg * sizeof *f->off);
	if (!f->r || !f->off) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto fail;
	}
	memcpy(f->r, r, (size_t)nseg * sizeof *r);
	lay(nseg, un, f->pl.A, f->off);
	const char *names[DS_OPTIM_MAX_STATES] = { "exp_avg", "exp_avg_sq" };
	if (f->type == DS_OPTIM_SGD)
		names[0] = "momentum_buffer";
	if (f->pl.has_master || f->ns > 0) {
		struct ds_swap_opts so = { .dir = f->c.opt_path, .key = OPT_KEY ".nvme_path", .rank = rank,
					   .aio = f->c.aio, .busy_read = &f->busy[0],
					   .busy_write = &f->busy[1], .busy_io = &f->busy[2] };
		if ((rc = ds_swap_create(&f->osw, &so, err)) < 0)
			goto fail;
		if (f->pl.has_master &&
		    (rc = add_file(f->osw, "master", (uint64_t)f->pl.U * 4, &f->f_master, err)) < 0)
			goto fail;
		for (int j = 0; j < f->ns; j++)
			if ((rc = add_file(f->osw, names[j], (uint64_t)f->pl.U * 4, &f->f_st[j], err)) < 0)
				goto fail;
		ds_swap_seal(f->osw);
	}
	if (f->pl.has_p16) {
		struct ds_swap_opts so = { .dir = f->c.param_path, .key = PAR_KEY ".nvme_path", .rank = rank,
					   .aio = f->c.aio, .busy_read = &f->busy[0],
					   .busy_write = &f->busy[1], .busy_io = &f->busy[2] };
		if ((rc = ds_swap_create(&f->psw, &so, err)) < 0 ||
		    (rc = add_file(f->psw, "param16", (uint64_t)f->pl.U * 2, &f->f_p16, err)) < 0)
			goto fail;
		ds_swap_seal(f->psw);
	}
	if (f->opt_active) {
		f->npool = f->c.opt_buffer_count;
		if (!(f->pool = calloc((size_t)f->npool, sizeof *f->pool))) {
			rc = ds_err_set(err, DS_ENOMEM, "out of memory");
			goto fail;
		}
		for (int i = 0; i < f->npool; i++)
			if (!(f->pool[i] = ds_swap_buf_alloc((size_t)f->pl.S * sizeof(float)))) {
				rc = ds_err_set(err, DS_ENOMEM, "out of memory for %d optimizer swap buffers of %lld "
						"elements (" OPT_KEY ".buffer_count, zero_optimization.sub_group_size)",
						f->npool, (long long)f->pl.S);
				goto fail;
			}
		for (int i = 0; f->pl.has_p16 && i < 1 + (f->c.pipeline_write != 0); i++)
			if (!(f->stage[i] = ds_swap_buf_alloc((size_t)f->pl.S * sizeof(uint16_t)))) {
				rc = ds_err_set(err, DS_ENOMEM, "out of memory for the 16-bit swap staging");
				goto fail;
			}
	}
	if (f->pl.pbuf_el) {
		f->pes = f->half != DS_HALF_NONE ? sizeof(uint16_t) : sizeof(float);
		f->psrc = f->half != DS_HALF_NONE ? f->psw : f->osw;
		f->psrc_f = f->half != DS_HALF_NONE ? f->f_p16 : f->f_master;
		f->npb = f->c.param_buffer_count;
		if (!(f->pb = calloc((size_t)f->npb, sizeof *f->pb))) {
			rc = ds_err_set(err, DS_ENOMEM, "out of memory");
			goto fail;
		}
		for (int i = 0; i < f->npb; i++) {
			f->pb[i].seg = -1;
			if (!(f->pb[i].p = ds_swap_buf_alloc((size_t)f->pl.pbuf_el * f->pes))) {
				rc = ds_err_set(err, DS_ENOMEM, "out of memory for %d parameter swap buffers of %lld elements "
						"(" PAR_KEY ".buffer_count)", f->npb, (long long)f->pl.pbuf_el);
				goto fail;
			}
		}
	}
	if (f->opt_active && (rc = init_files(f, model, o->seed, err)) < 0)
		goto fail;
	free(un);
	free(ps);
	*out = f;
	return 0;
fail:
	free(un);
	free(ps);
	ds_offload_destroy(f);
	return rc;
}

const struct ds_offload_plan *ds_offload_get_plan(const struct ds_offload *f) { return &f->pl; }

int ds_offload_swapped(const struct ds_offload *f, int s)
{
	return f->opt_active && (!f->r[s].master || f->ns > 0);
}

/* ---- the optimizer step ------------------------------------------------------ */

/* update the pieces of sub-group k in set b, their 16-bit copies into stage st */
static void update_sub(struct ds_offload *f, int k, int b, int st, const struct ds_optim_params *hp,
		       const struct ds_adam_coef *coef, int64_t t, float grad_mul)
{
	int64_t a, n;
	sub_of(f, k, &a, &n);
	for (int s = 0; s < f->nseg; s++) {
		const struct ds_offload_range *r = &f->r[s];
		int64_t x, y;
		if (!piece_of(f, s, a, n, &x, &y))
			continue;
		const int64_t bo = f->off[s] + x - a, m = y - x;
		float *p = r->master ? r->master + x : set_master(f, b) + bo;
		const float *g = r->g32 ? r->g32 + x : set_grad(f, b) + bo;
		if (!r->g32)  /* 16-bit gradients, widened into the gradient buffer */
			ds_half_unpack_n(f->half, set_grad(f, b) + bo, r->g16 + x, (size_t)m);
		if (f->type == DS_OPTIM_SGD)
			ds_sgd_update(hp, t, p, g, f->ns ? set_state(f, b, 0) + bo : NULL, grad_mul, (size_t)m);
		else
			ds_adam_update(coef, p, g, set_state(f, b, 0) + bo, set_state(f, b, 1) + bo, (size_t)m,
				       DS_SIMD_AUTO);
		publish(f, s, x, m, p, f->stage[st], bo);
	}
}

int ds_offload_step(struct ds_offload *f, const struct ds_optim_params *hp, int64_t t, float grad_mul,
		    struct ds_err *err)
{
	const int pr = f->c.pipeline_read != 0, pw = f->c.pipeline_write != 0, K = f->pl.K, N = f->pl.nsets;
	struct ds_adam_coef coef;
	int rc = 0;
	if (!f->opt_active)
		return ds_err_set(err, DS_EINVAL, "offload: the optimizer is not offloaded");
	if (f->type != DS_OPTIM_SGD)
		ds_adam_coef_init(&coef, hp, t, grad_mul);
	if (K > 0 && (rc = read_sub(f, 0, 0, err)) < 0)
		goto fail;
	for (int k = 0; k < K; k++) {
		const int b = k % N;
		if ((rc = ds_swap_wait_reads(f->osw, err)) < 0)
			goto fail;
		/* pipeline_read: the next sub-group's read runs during this update */
		if (pr && k + 1 < K && (rc = read_sub(f, k + 1, (k + 1) % N, err)) < 0)
			goto fail;
		update_sub(f, k, b, pw ? k % 2 : 0, hp, &coef, t, grad_mul);
		/* pipeline_write: the previous write ran during this update */
		if (pw && (rc = wait_writes(f, err)) < 0)
			goto fail;
		if ((rc = write_sub(f, k, b, pw ? k % 2 : 0, 1, err)) < 0)
			goto fail;
		if (!pw && (rc = wait_writes(f, err)) < 0)
			goto fail;
		if (!pr && k + 1 < K && (rc = read_sub(f, k + 1, (k + 1) % N, err)) < 0)
			goto fail;
	}
	if ((rc = wait_writes(f, err)) < 0)
		goto fail;
	return 0;
fail:
	drain(f);
	return rc;
}

int ds_offload_refresh(struct ds_offload *f, struct ds_err *err)
{
	int rc = 0;
	if (f->half == DS_HALF_NONE)
		return 0;
	if (!f->opt_active) {
		/* masters in memory: each range's 16-bit copy into memory, or
		 * through the first parameter buffer into param16 */
		for (int s = 0; s < f->nseg; s++) {
			const struct ds_offload_range *r = &f->r[s];
			if (r->h16 || !r->pstore) {
				publish(f, s, 0, r->un, r->master, NULL, 0);
				continue;
			}
			uint16_t *st = f->pb[0].p;
			f->pb[0].seg = -1;
			int64_t len = align_up(r->un, f->pl.A);
			memset(st + r->un, 0, (size_t)(len - r->un) * sizeof(uint16_t));
			ds_half_pack_n(f->half, st, r->master, (size_t)r->un);
			if ((rc = ds_swap_write(f->psw, f->f_p16, (uint64_t)f->off[s] * 2, st, (uint64_t)len * 2, err)) < 0 ||
			    (rc = ds_swap_wait_writes(f->psw, err)) < 0)
				goto fail;
		}
		return 0;
	}
	for (int k = 0; k < f->pl.K; k++) {
		int64_t a, n;
		sub_of(f, k, &a, &n);
		if (f->pl.has_master && needs(f, a, n, 0)) {
			if ((rc = ds_swap_read(f->osw, f->f_master, (uint64_t)a * 4, set_master(f, 0), (uint64_t)n * 4,
					       err)) < 0 ||
			    (rc = ds_swap_wait_reads(f->osw, err)) < 0)
				goto fail;
		}
		for (int s = 0; s < f->nseg; s++) {
			int64_t x, y;
			if (!piece_of(f, s, a, n, &x, &y))
				continue;
			const int64_t bo = f->off[s] + x - a;
			publish(f, s, x, y - x, f->r[s].master ? f->r[s].master + x : set_master(f, 0) + bo, f->stage[0], bo);
		}
		if (f->pl.has_p16 && needs(f, a, n, 1) &&
		    ((rc = ds_swap_write(f->psw, f->f_p16, (uint64_t)a * 2, f->stage[0], (uint64_t)n * 2, err)) < 0 ||
		     (rc = ds_swap_wait_writes(f->psw, err)) < 0))
			goto fail;
	}
	return 0;
fail:
	drain(f);
	return rc;
}

/* ---- stage-3 parameter buffers ---------------------------------------------- */

static struct pbuf *holding(struct ds_offload *f, int s)
{
	for (int i = 0; i < f->npb; i++)
		if (f->pb[i].seg == s)
			return &f->pb[i];
	return NULL;
}

/* a buffer no one uses and no read targets: an empty one, else the least
 * recently used */
static struct pbuf *victim(struct ds_offload *f)
{
	struct pbuf *v = NULL;
	for (int i = 0; i < f->npb; i++) {
		struct pbuf *b = &f->pb[i];
		if (b->busy || b->reading)
			continue;
		if (b->seg < 0)
			return b;
		if (!v || b->used < v->used)
			v = b;
	}
	return v;
}

static int start_read(struct ds_offload *f, struct pbuf *b, int s, struct ds_err *err)
{
	const int64_t len = align_up(f->r[s].un, f->pl.A);
	b->seg = -1;
	DS_TRY(ds_swap_read(f->psrc, f->psrc_f, (uint64_t)f->off[s] * f->pes, b->p, (uint64_t)len * f->pes, err));
	b->seg = s;
	b->reading = 1;
	return 0;
}

static int finish_reads(struct ds_offload *f, struct ds_err *err)
{
	int rc = ds_swap_wait_reads(f->psrc, err);
	for (int i = 0; i < f->npb; i++)
		if (f->pb[i].reading) {
			f->pb[i].reading = 0;
			if (rc < 0)
				f->pb[i].seg = -1;
		}
	return rc;
}

int ds_offload_param_get(struct ds_offload *f, int s, void **p, struct ds_err *err)
{
	struct pbuf *b = holding(f, s);
	if (!b) {
		if (!(b = victim(f)))
			return ds_err_set(err, DS_EINVAL, PAR_KEY ".buffer_count %d: every parameter buffer is in use "
					  "(segment %d needs one); raise it", f->npb, s);
		DS_TRY(start_read(f, b, s, err));
	}
	if (b->reading)
		DS_TRY(finish_reads(f, err));
	b->busy++;
	b->used = ++f->clock;
	*p = b->p;
	return 0;
}

void ds_offload_param_put(struct ds_offload *f, int s)
{
	struct pbuf *b = holding(f, s);
	if (b && b->busy)
		b->busy--;
}

void ds_offload_param_put_all(struct ds_offload *f)
{
	for (int i = 0; f && i < f->npb; i++)
		f->pb[i].busy = 0;
}

int ds_offload_param_prefetch(struct ds_offload *f, int s, struct ds_err *err)
{
	struct pbuf *b;
	if (s < 0 || s >= f->nseg || !f->r[s].pstore || holding(f, s) || !(b = victim(f)))
		return 0;
	return start_read(f, b, s, err);
}

int ds_offload_param_idle(struct ds_offload *f, struct ds_err *err)
{
	int rc = 0;
	if (!f->npb)
		return 0;
	if (ds_swap_reads_pending(f->psrc))
		rc = finish_reads(f, err);
	for (int i = 0; i < f->npb; i++) {
		f->pb[i].seg = -1;
		f->pb[i].busy = 0;
	}
	return rc;
}

/* ---- the checkpoint window ------------------------------------------------------ */

/* the window's update-space bounds for piece j of [ta, tb) of range s */
static void window_of(const struct ds_offload *f, int s, int64_t ta, int64_t tb, int j, int64_t *w0, int64_t *w1)
{
	const int64_t F0 = align_down(f->off[s] + ta, f->pl.A), F1 = align_up(f->off[s] + tb, f->pl.A);
	*w0 = F0 + (int64_t)j * f->pl.S;
	*w1 = min64(*w0 + f->pl.S, F1);
}

int ds_offload_ckpt_pieces(const struct ds_offload *f, int s, int64_t ta, int64_t tb)
{
	if (!ds_offload_swapped(f, s) || tb <= ta)
		return 1;
	const int64_t F0 = align_down(f->off[s] + ta, f->pl.A), F1 = align_up(f->off[s] + tb, f->pl.A);
	return (int)((F1 - F0 + f->pl.S - 1) / f->pl.S);
}

static int window_io(struct ds_offload *f, int write, struct ds_err *err)
{
	const int s = f->wseg;
	const uint64_t a = (uint64_t)f->w0 * 4, n = (uint64_t)(f->w1 - f->w0) * 4;
	if (!f->r[s].master)
		DS_TRY(write ? ds_swap_write(f->osw, f->f_master, a, set_master(f, 0), n, err)
			     : ds_swap_read(f->osw, f->f_master, a, set_master(f, 0), n, err));
	for (int j = 0; j < f->ns; j++)
		DS_TRY(write ? ds_swap_write(f->osw, f->f_st[j], a, set_state(f, 0, j), n, err)
			     : ds_swap_read(f->osw, f->f_st[j], a, set_state(f, 0, j), n, err));
	return write ? ds_swap_wait_writes(f->osw, err) : ds_swap_wait_reads(f->osw, err);
}

int ds_offload_ckpt_flush(struct ds_offload *f, struct ds_err *err)
{
	int rc = 0;
	if (f->wseg >= 0 && f->wdirty) {
		/* the parameter buffers may hold what was just replaced */
		if ((rc = ds_offload_param_idle(f, err)) == 0)
			rc = window_io(f, 1, err);
	}
	f->wseg = -1;
	f->wdirty = 0;
	if (rc < 0)
		drain(f);
	return rc;
}

int ds_offload_ckpt_piece(struct ds_offload *f, int s, int64_t ta, int64_t tb, int j, int writing, int64_t *pa,
			  int64_t *pb, struct ds_err *err)
{
	int64_t w0, w1;
	*pa = ta;
	*pb = tb;
	if (!ds_offload_swapped(f, s) || tb <= ta)
		return 0;
	window_of(f, s, ta, tb, j, &w0, &w1);
	*pa = max64(ta, w0 - f->off[s]);
	*pb = min64(tb, w1 - f->off[s]);
	if (f->wseg != s || f->w0 != w0 || f->w1 != w1) {
		DS_TRY(ds_offload_ckpt_flush(f, err));
		f->wseg = s;
		f->w0 = w0;
		f->w1 = w1;
		int rc = window_io(f, 0, err);
		if (rc < 0) {
			f->wseg = -1;
			drain(f);
			return rc;
		}
	}
	f->wdirty |= writing;
	return 0;
}

float *ds_offload_ckpt_master(struct ds_offload *f, int s, int64_t a)
{
	if (f->r[s].master || f->wseg != s)
		return NULL;
	return set_master(f, 0) + (f->off[s] + a - f->w0);
}

float *ds_offload_ckpt_state(struct ds_offload *f, int s, int k, int64_t a)
{
	if (k >= f->ns || f->wseg != s)
		return NULL;
	return set_state(f, 0, k) + (f->off[s] + a - f->w0);
}

void ds_offload_take_stats(struct ds_offload *f, struct ds_offload_stats *st)
{
	struct ds_swap_stats a;
	memset(st, 0, sizeof *st);
	struct ds_swap *sw[2] = { f->osw, f->psw };
	for (int i = 0; i < 2; i++) {
		if (!sw[i])
			continue;
		ds_swap_take_stats(sw[i], &a);
		st->bytes_read += a.bytes_read;
		st->bytes_written += a.bytes_written;
		st->wait_s += a.wait_read_s + a.wait_write_s;
	}
	/* both sets on one device: their reads (writes) overlap, so the busy
	 * groups' unions, not the sum of the sets' own times */
	st->busy_read_s = ds_aio_busy_group_seconds(&f->busy[0]);
	st->busy_write_s = ds_aio_busy_group_seconds(&f->busy[1]);
	st->busy_io_s = ds_aio_busy_group_seconds(&f->busy[2]);
}
