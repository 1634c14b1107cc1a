/* engine.c - the training engine (see engine.h for the layout and the
 * sample order).  One step: zero gradients; GA micro-steps of forward and
 * backward (loss scaled by 1/GA); reduce gradients across ranks; global
 * norm, non-finite check and clipping on owned slices; the optimizer on
 * the slice this rank updates; allgather updated slices (stages >= 1).
 * Mixed precision (fp16/bf16, engine.h) adds a 16-bit model copy expanded
 * per segment in the hooks, 16-bit gradients (stored in 16 bits unless
 * they accumulate in fp32) and the loss scaler around the step: see "mixed
 * precision" below. */
#include "engine/engine.h"
#include "engine/offload.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_onebit.h"
#include "engine/pipe.h"
#include "engine/schedule.h"
#include "compute/compute.h"
#include "model/moe.h"
#include "model/pipe.h"
#include "optim/clip.h"
#include "util/mem.h"
#include "util/timer.h"

/* Test-only fault injection (tests/mpi/train.bats; never set in production):
 *   DS_TEST_FAULT_SHARD_SHIFT=1  rank 0 treats its ZeRO slice of every
 *       segment as starting one element late (stages >= 1, W > 1; in
 *       16-bit runs at stages 1-2 its updated master slice lands one
 *       element late in the 16-bit copy), so the partitioning is wrong and
 *       the losses must diverge from 1 rank's;
 *   DS_TEST_FAULT_FAIL_RANK=R[:S] rank R fails its optimizer step S
 *       (default 3) with an I/O error, as a rank dying mid-run would;
 *   DS_TEST_INJECT_INF_STEP=S[:N] rank 0 writes +inf into its first held
 *       (reduced) gradient in steps S .. S+N-1 (N default 1), as an fp16
 *       overflow would;
 *   DS_TEST_FAULT_SKIP_TIED=1  the first and last pipeline stage do not sum
 *       the tied embedding's gradient (ReduceTiedGrads left out), so the
 *       two copies drift apart and the losses must leave 1 rank's.
 * (DS_TEST_FAULT_TP_SLICE, a wrong tensor-parallel shard, is the model's:
 * model/registry.h.) */
static int env_int(const char *name, int dflt)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : dflt;
}

struct seg {
	int64_t numel;    /* the model's elements */
	int64_t padded;   /* numel rounded up to W*16 */
	int64_t off;      /* first element in the padded flat buffers */
	int64_t shard;    /* padded / W */
	int64_t u0, un;   /* range this rank updates, segment-local */
	int pfull, gfull; /* params / grads of the whole segment held here (else the owned slice) */
	int mfull;        /* the fp32 params (master weights) whole here: pfull, except in fp16/bf16
			   * runs with W > 1 at stages >= 1, which keep the owned slice only */
	int pnv, mnv;     /* ZeRO-Infinity: the parameter slice / the fp32 master live in swap files */
	int phost;        /* offload_param cpu (hparam): its parameters are pinned host memory, the
			   * 16-bit ones in e->hp16 (hoff), an fp32 run's in e->hpar (poff) */
	int64_t poff, goff;  /* first element in e->params / e->grads */
	int64_t hoff;        /* first element in e->p16 (mixed precision) */
	float *p_upd, *g_upd;  /* params / grads at element u0 */
	float *m_step;         /* ZeRO-Offload (hstep): the host values the optimizer steps, [u0, u0 + un) */
	float *g_own;          /* grads of the owned W-slice */
	uint16_t *h_upd, *h_own;  /* the same in e->gh (16-bit gradients; g_upd, g_own NULL) */
	struct ds_comm *comm;   /* the data-parallel group it is sharded and reduced over: the world, or
				 * for an expert segment the expert-data-parallel group */
	int gW, grank;          /* that group's size and this rank in it */
	struct ds_range *lamb;  /* tensor pieces of [u0, u0+un), relative to u0 */
	int *lamb_tensor;       /* tensor index of each piece */
	int nlamb;
	struct ds_range *cnt;   /* 3D: the segment-local ranges the grad norm counts (NULL: all) */
	int ncnt;
};

struct ds_engine {
	struct ds_engine_opts o;
	/* the compute backend (opts.compute, else cpu): every flat buffer below
	 * but in/tg and lamb_sums is its memory, and every pass over one is its
	 * entry (with a host backend the 16-bit, 1-bit and offload paths also
	 * work on them directly; check_backend refuses those elsewhere) */
	const struct ds_compute_ops *ops;
	struct ds_comm *comm;   /* ZeRO's: the data-parallel group (the world without 3D parallelism) */
	/* a backend whose memory is not the host's: the engine's own copy of
	 * the caller's communicator (comm and world point to it), with the
	 * backend's memory registered (attach_devmem), destroyed with the
	 * engine; NULL otherwise */
	struct ds_comm *dcomm;
	int rank, W, T;         /* data-parallel rank and size */
	struct ds_gpt *model;
	struct ds_gpt_ws *ws;   /* wss[0] */
	/* 3D parallelism: the layout, its groups (par: tp * pp > 1), this
	 * stage's part and the stage bounds (pp > 1), a workspace per
	 * pipeline buffer and the executor; tie: first or last stage of a
	 * tied model whose embedding's gradient is summed over grp.tie;
	 * tie_copy: the last stage's copy, counted nowhere */
	struct ds_comm *world;
	struct ds_topo topo;
	struct ds_groups grp;
	int par, tie, tie_copy;
	struct ds_gpt_part part;
	int *bounds;
	struct ds_gpt_ws **wss;
	int nws;
	struct ds_pipe_run pr;
	int64_t logical;        /* parameters of the whole model */
	int nseg;
	struct seg *seg;
	int64_t total;       /* padded elements */
	float *params, *grads;  /* grads: fp32 gradients (NULL with 16-bit ones, see gh) */
	float *scratch;      /* max shard, for reduce-scatter */
	struct ds_optim **opt;
	int32_t *in, *tg;    /* one micro-batch of inputs and targets */
	double *lamb_sums;   /* 2 per tensor */
	int64_t steps;
	/* stage 2-3 (W > 1): gather buffers for partitioned segments; a
	 * gradient slot under reduction (overlap_comm) keeps its segment until
	 * finish_slot adds its result (recv) to the owned slice; h: a 16-bit
	 * gather buffer (mixed precision, stage 3) */
	struct slot {
		int seg;
		float *buf;
		uint16_t *h;
		uint16_t *c16;  /* 16-bit reductions: maxpad to send, maxshard received (16-bit
				 * gradients: buf itself, packed in place, no allocation) */
		struct ds_comm_req *req;
		float *recv;
		void *snd;      /* offload_param cpu at stage 3 (W > 1): the slice sent, on the device */
		int reducing, done;
		long seq;
	} ps[4], gs[5];
	int nps, ngs;   /* parameter slots in use: 3 at stage 3, 2 for a 16-bit model's widening, else 0 */
	int64_t maxpad, ptotal, gtotal, htotal;
	/* overlap_comm at stages 0-1: bucket b covers [b*bucket, ...) of the
	 * flat gradients; buckets ready_from.. are final in the last backward */
	int overlap, last_micro, nbuckets, bnext, ready_seg;
	unsigned char *seg_done;  /* per segment, in the last backward */
	int64_t bucket, ready_from;
	int nbk;                  /* entries of bk (every bucket; nbuckets: those overlapped) */
	struct bucket_req { struct ds_comm_req *req; int done; } *breq;
	/* gradient reductions in flight (t_red_flight / t_red_wait) */
	int nflight;
	long seq;
	double flight_t0, red_flight, red_wait;
	float grad_pre, grad_post;  /* spec §6 scaling around the reduction */
	struct ds_err herr;         /* a hook's error, reported by the pass */
	int fail_rank, fail_step;  /* DS_TEST_FAULT_FAIL_RANK (-1: off) */
	/* mixed precision */
	enum ds_half_kind half;     /* DS_HALF_NONE: fp32 training */
	int hdtype;                 /* DS_F16 / DS_BF16 for the 16-bit allgather */
	uint16_t *p16;              /* 16-bit model copy (htotal): whole segments, or the owned
				     * slices of stage 3's partitioned ones */
	struct ds_scaler scaler;
	/* communication_data_type fp16/bf16 of an fp32 model (DS_HALF_NONE:
	 * off): stages 0-1 cast each bucket into c16 (total elements, so that
	 * every bucket can be in flight), stages 2-3 into their slot's c16 */
	enum ds_half_kind chalf;
	int cdtype;
	uint16_t *c16;
	/* 16-bit gradients (a 16-bit model whose gradients accumulate in its
	 * dtype): gh (gtotal elements, the model's format) replaces grads.
	 * The reductions sum in chalf (= half: in place, through lib/comm's
	 * 16-bit sum ops) or, with communication_data_type "fp32" (chalf
	 * NONE), in fp32: stages 0-1 widen one bucket at a time into gstage
	 * (gstage_b: the bucket it holds, -1 none), stages 2-3 send the fp32
	 * gather slot as fp32 models do; either way the sum is rounded into
	 * gh once */
	int g16;
	uint16_t *gh;
	float *gstage;
	int64_t gstage_n;
	int gstage_b;
	int inject_step, inject_n;  /* DS_TEST_INJECT_INF_STEP (0: off) */
	/* the 1-bit optimizers (engine_onebit.h) replace opt[]; reduce_on:
	 * this step's gradients are allreduced (DeepSpeed's
	 * enable_backward_allreduce, off once they compress the momentum) */
	struct ds_engine_onebit *ob;
	int reduce_on;
	/* Mixture of Experts (issue 23): expert segments (after the dense
	 * ones, so at [total0, total) of the flat buffers) are sharded and
	 * reduced over the expert-data-parallel group edp (ranks with the same
	 * rank % ep: DeepSpeed's _create_expert_and_data_parallel), the
	 * experts' tokens travel in the expert-parallel group ep (ep
	 * consecutive ranks); both NULL without expert parallelism */
	struct ds_comm *ep_comm, *edp_comm;
	int64_t total0;
	/* reduction buckets of stages 0-1: [off, off + n) over comm, never
	 * across the two groups' ranges */
	struct bk { int64_t off, n; struct ds_comm *comm; } *bk;
	int ntd;                    /* tensors of the dense segments (Lamb's norms over the world) */
	struct ds_moe_stats moe;    /* the step's MoE statistics, summed over micro-steps */
	int opts_moe;               /* the model has MoE layers */
	int skip_tied;              /* DS_TEST_FAULT_SKIP_TIED */
	/* ZeRO-Infinity (engine/offload.h): off_opt when the optimizer step
	 * streams from swap files; the checkpoint piece the accessors show */
	struct ds_offload *off;
	int off_opt;
	int ck_i, ck_j;
	int64_t ck_a, ck_b;
	/* a backend whose memory is not the host's: the current piece's
	 * tensor (ck_i) as host copies, its parameters then each optimizer
	 * state, tensor-numel floats each (ck_cap floats in all); ck_write:
	 * they go back to the backend when the piece is done with */
	float *ck_host;
	int64_t ck_cap;
	int ck_write;
	/* ZeRO-Offload on a device backend (hstep: offload.cpu, stage >= 1, a
	 * backend whose memory is not the host's): the optimizer states live
	 * in its pinned host memory and the step runs on the host through
	 * ds_compute_cpu; a 16-bit run's master (params) is pinned host memory
	 * too, an fp32 run copies the ranges it updates into hmaster (its
	 * params are the model on the device); hg / hh carry a segment's
	 * gradient (fp32 / 16-bit) and 16-bit copy over, two of each that
	 * travel (the copies of one segment run while the host steps the
	 * next: host_step); the step sends every value it changes, so no
	 * refresh follows it.  pinned: the bytes of all of these; hextra: of
	 * hmaster, hg and hh */
	int hstep, hstage_ok;
	float *hmaster, *hg[2];
	uint16_t *hh[2];
	size_t pinned, hextra;
	/* offload_param cpu on a device backend (hparam, stage 3; an fp32
	 * run with ZeRO-Offload's host step, whose master they are): the
	 * phost segments' parameters are pinned host memory, a 16-bit run's
	 * 16-bit copy in hp16 (hptotal elements; hoff indexes it for them), an
	 * fp32 run's in hpar (hptotal, poff; the host step steps them in
	 * place), sent to the device through a slot's snd (gather_seg), h
	 * (expand_seg) or buf (seg_pre) */
	int hparam;
	uint16_t *hp16;
	float *hpar;
	int64_t hptotal;
};

/* a device backend's checkpoint pieces (after the checkpoint accessors) */
static void ck_done(struct ds_engine *e);
static int ck_stage(struct ds_engine *e, int i, int writing, struct ds_err *err);

void ds_engine_opts_init(struct ds_engine_opts *o)
{
	memset(o, 0, sizeof *o);
	o->micro_batch = 1;
	o->grad_accum = 1;
	ds_optim_params_init(&o->optim, DS_OPTIM_ADAMW);
	o->gradient_predivide_factor = 1.0;
	o->seed = 1234;
	o->stage3_prefetch_bucket_size = 50000000;
	o->stage3_max_live_parameters = 1000000000;
	o->stage3_param_persistence_threshold = 100000;
	o->half = DS_HALF_NONE;
	ds_scaler_init_none(&o->scaler);
	o->tp = o->pp = 1;
	strcpy(o->pipe_partition, "parameters");
	o->pipe_partitioned = o->grad_partitioned = 1;
	/* DeepSpeed's offload defaults and its config's "aio" section */
	o->offload.sub_group_size = 1000000000;
	o->offload.opt_buffer_count = 4;
	o->offload.param_buffer_count = 5;
	o->offload.param_buffer_size = 100000000;
	o->offload.max_in_cpu = 1000000000;
	o->offload.aio = (struct ds_aio_opts){ .block_size = 1048576, .queue_depth = 8, .single_submit = 0,
					       .overlap_events = 1, .intra_op_parallelism = 1 };
}

static int sharded(const struct ds_engine *e) { return e->o.zero_stage >= 1 && e->W > 1; }
/* segment sg's optimizer states (and more) are split over its group */
static int seg_sharded(const struct ds_engine *e, const struct seg *sg) { return e->o.zero_stage >= 1 && sg->gW > 1; }

/* ---- stage 2/3 segment gathering (model hooks) --------------------------
 * A partitioned segment's parameters are allgathered into one of ps[] just
 * before its forward or backward and released after, the next segment
 * prefetched with a non-blocking allgather when stage3_prefetch_bucket_size
 * and stage3_max_live_parameters allow.  A sharded segment's gradients
 * accumulate into one of gs[] during its backward; the post hook
 * reduce-scatters them and adds the owned slice to e->grads. */

static struct slot *slot_of(struct slot *sl, int n, int s)
{
	for (int k = 0; k < n; k++)
		if (sl[k].seg == s)
			return &sl[k];
	return NULL;
}

static int64_t live_elems(const struct ds_engine *e)
{
	int64_t n = 0;
	for (int k = 0; k < e->nps; k++)
		if (e->ps[k].seg >= 0)
			n += e->seg[e->ps[k].seg].padded;
	return n;
}

/* ---- gradient reductions: timing and overlap_comm ---------------------
 * red_begin/red_end bracket each reduction (the union of their spans is
 * t_red_flight); progress() lets MPI move started reductions along (it
 * does so only inside MPI calls) at every segment boundary. */

static void red_begin(struct ds_engine *e)
{
	if (e->nflight++ == 0)
		e->flight_t0 = ds_now();
}

static void red_end(struct ds_engine *e)
{
	if (--e->nflight == 0)
		e->red_flight += ds_now() - e->flight_t0;
}

/* wait for a started reduction (blocked time is t_red_wait) */
static int red_wait(struct ds_engine *e, struct ds_comm_req **req, int *done, struct ds_err *err)
{
	double t0 = ds_now();
	int rc = ds_comm_wait(e->comm, *req, err);
	*req = NULL;
	e->red_wait += ds_now() - t0;
	if (!*done) {
		*done = 1;
		red_end(e);
	}
	return rc;
}

static int test_done(struct ds_engine *e, struct ds_comm_req *req, int *done)
{
	int d = 0;
	if (!req || *done)
		return 0;
	DS_TRY(ds_comm_test(e->comm, req, &d, &e->herr));
	if (d) {
		*done = 1;
		red_end(e);
	}
	return 0;
}

static int progress(struct ds_engine *e)
{
	if (!e->nflight)
		return 0;
	for (int b = e->nbuckets - 1; b > e->bnext; b--)
		DS_TRY(test_done(e, e->breq[b].req, &e->breq[b].done));
	for (int k = 0; k < e->ngs; k++)
		if (e->gs[k].reducing)
			DS_TRY(test_done(e, e->gs[k].req, &e->gs[k].done));
	return 0;
}

/* communication_data_type 16-bit: cast g[0..n) to the 16-bit type, apply
 * the prescale factor there (DeepSpeed casts first, then scales the
 * 16-bit tensor) and pack the result into h (a buffer of its own: the
 * backend's half_pack does not work in place); g is clobbered.  Every
 * step is a backend entry, so g and h may be device memory. */
static void cast_prescale(const struct ds_engine *e, float *g, uint16_t *h, int64_t n)
{
	if (e->grad_pre != 1.0f) {
		e->ops->half_round(e->chalf, g, (size_t)n);
		e->ops->scale(g, n, e->grad_pre);
	}
	e->ops->half_pack(e->chalf, h, g, (size_t)n);
}

/* ---- 16-bit gradients (e->g16) -----------------------------------------
 * The backend's half_add (added in fp32, rounded once, as accumulate_half
 * does for fp32-held gradients) and half_recast (the 16-bit reduction's
 * pre- and postscale and casts: DeepSpeed casts to the communication
 * type, then scales there) work on them in place, so that no fp32 copy of
 * the gradients exists. */

/* 16-bit gradients h[0..n) widened to fp32 in the first gradient slot
 * (maxpad elements, free between the backward and the next one): how the
 * step reads them, one segment at a time */
static const float *hwiden(const struct ds_engine *e, const uint16_t *h, int64_t n)
{
	float *out = e->gs[0].buf;
	e->ops->half_unpack(e->half, out, h, (size_t)n);
	return out;
}

/* communication_data_type "fp32" at stages 0-1: the bucket in gstage has
 * been summed; postscale it in fp32 and round it into gh once */
static void gstage_finish(struct ds_engine *e)
{
	if (e->gstage_b < 0)
		return;
	int64_t off = e->bk[e->gstage_b].off, n = e->bk[e->gstage_b].n;
	e->ops->scale(e->gstage, n, e->grad_post);
	e->ops->half_pack(e->half, e->gh + off, e->gstage, (size_t)n);
	e->gstage_b = -1;
}

/* ... and widen bucket b into gstage, prescaled in fp32 */
static void gstage_load(struct ds_engine *e, int b, int64_t off, int64_t n)
{
	e->ops->half_unpack(e->half, e->gstage, e->gh + off, (size_t)n);
	e->ops->scale(e->gstage, n, e->grad_pre);
	e->gstage_b = b;
}

static int start_bucket(struct ds_engine *e, int b, struct ds_err *err)
{
	int64_t off = e->bk[b].off, n = e->bk[b].n;
	struct ds_comm *comm = e->bk[b].comm;
	e->breq[b].done = 0;
	if (e->g16 && e->chalf) {  /* in place, in the 16-bit communication type */
		e->ops->half_recast(e->gh + off, n, e->half, e->chalf, e->grad_pre, e->chalf);
		DS_TRY(ds_comm_iallreduce(comm, e->gh + off, (size_t)n, e->cdtype, DS_SUM, &e->breq[b].req, err));
	} else if (e->g16) {  /* fp32 through gstage: one bucket in flight at a time */
		if (e->gstage_b >= 0) {
			DS_TRY(red_wait(e, &e->breq[e->gstage_b].req, &e->breq[e->gstage_b].done, err));
			gstage_finish(e);
		}
		gstage_load(e, b, off, n);
		DS_TRY(ds_comm_iallreduce(comm, e->gstage, (size_t)n, DS_F32, DS_SUM, &e->breq[b].req, err));
	} else if (e->chalf) {
		cast_prescale(e, e->grads + off, e->c16 + off, n);
		DS_TRY(ds_comm_iallreduce(comm, e->c16 + off, (size_t)n, e->cdtype, DS_SUM, &e->breq[b].req, err));
	} else {
		e->ops->scale(e->grads + off, n, e->grad_pre);
		DS_TRY(ds_comm_iallreduce(comm, e->grads + off, (size_t)n, DS_F32, DS_SUM, &e->breq[b].req,
					  err));
	}
	red_begin(e);
	return 0;
}

/* stages 0-1, last backward: segment s is final; start every bucket that
 * now lies wholly in final gradients (segments finish last to first) */
static int buckets_after(struct ds_engine *e, int s)
{
	if (!e->overlap || !e->last_micro || e->o.zero_stage >= 2 || e->W == 1)
		return 0;
	e->seg_done[s] = 1;
	while (e->ready_seg >= 0 && e->seg_done[e->ready_seg])
		e->ready_from = e->seg[e->ready_seg--].off;
	while (e->bnext >= 0 && e->bk[e->bnext].off >= e->ready_from)
		DS_TRY(start_bucket(e, e->bnext--, &e->herr));
	return 0;
}

/* stages 2-3: add a reduce-scattered shard (fp32) to the owned slice */
static void add_owned(struct ds_engine *e, const struct seg *sg, const float *rv)
{
	if (e->g16) {
		e->ops->half_add(e->half, sg->h_own, rv, sg->shard);
		return;
	}
	e->ops->add(sg->g_own, sg->g_own, rv, sg->shard, 0);
}

/* stages 2-3: the oldest reduction in flight: wait, add to the owned slice */
static int finish_slot(struct ds_engine *e, struct slot *gl, struct ds_err *err)
{
	const struct seg *sg = &e->seg[gl->seg];
	DS_TRY(red_wait(e, &gl->req, &gl->done, err));
	if (e->chalf)  /* back to fp32 */
		e->ops->half_unpack(e->chalf, gl->recv, gl->c16 + e->maxpad, (size_t)sg->shard);
	add_owned(e, sg, gl->recv);
	gl->reducing = 0;
	gl->seg = -1;
	return 0;
}

static struct slot *oldest_reducing(struct ds_engine *e)
{
	struct slot *o = NULL;
	for (int k = 0; k < e->ngs; k++)
		if (e->gs[k].reducing && (!o || e->gs[k].seq < o->seq))
			o = &e->gs[k];
	return o;
}

static int finish_all(struct ds_engine *e, struct ds_err *err)
{
	for (struct slot *gl; (gl = oldest_reducing(e));)
		DS_TRY(finish_slot(e, gl, err));
	return 0;
}

/* wait for pending gathers and reductions and free every slot (start of
 * a pass, errors) */
static void release_all(struct ds_engine *e)
{
	for (int k = 0; k < e->nps; k++) {
		if (e->ps[k].req)
			ds_comm_wait(e->comm, e->ps[k].req, NULL);
		e->ps[k].req = NULL;
		e->ps[k].seg = -1;
	}
	for (int k = 0; k < e->ngs; k++) {
		if (e->gs[k].req)
			ds_comm_wait(e->comm, e->gs[k].req, NULL);
		e->gs[k].req = NULL;
		e->gs[k].reducing = 0;
		e->gs[k].seg = -1;
	}
	for (int b = 0; b < e->nbuckets; b++) {
		if (e->breq[b].req)
			ds_comm_wait(e->comm, e->breq[b].req, NULL);
		e->breq[b].req = NULL;
	}
	e->bnext = -1;
	e->nflight = 0;
	e->gstage_b = -1;
	ds_offload_param_put_all(e->off);
}

/* segment sg's 16-bit parameters (held whole or the owned slice): the
 * backend's memory, or with offload_param cpu pinned host memory */
static uint16_t *seg_p16(const struct ds_engine *e, const struct seg *sg)
{
	return (sg->phost ? e->hp16 : e->p16) + sg->hoff;
}

/* segment sg's fp32 parameters (a 16-bit run's master weights): the
 * backend's memory (a 16-bit ZeRO-Offload run's: pinned), or with
 * offload_param cpu in an fp32 run pinned host memory */
static float *seg_par(const struct ds_engine *e, const struct seg *sg)
{
	return (sg->phost && !e->half ? e->hpar : e->params) + sg->poff;
}

static int gather_seg(struct ds_engine *e, int s, int blocking)
{
	const struct seg *sg = &e->seg[s];
	struct slot *sl = slot_of(e->ps, e->nps, -1);
	if (!sl)
		return ds_err_set(&e->herr, DS_EINVAL, "engine: no free gather buffer for segment %d", s);
	/* the slice this rank sends: in memory, or read from its swap file
	 * into a parameter buffer (released once the allgather is done) */
	void *src = e->half ? (void *)seg_p16(e, sg) : (void *)seg_par(e, sg);
	if (sg->pnv)
		DS_TRY(ds_offload_param_get(e->off, s, &src, &e->herr));
	/* offload_param cpu: the slice crosses to the device first, queued
	 * before the collective (which waits for the backend's queue) */
	if (sg->phost) {
		e->ops->from_host_async(sl->snd, src, (size_t)sg->shard * (e->half ? sizeof(uint16_t) : sizeof(float)));
		src = sl->snd;
	}
	sl->seg = s;
	int rc;
	if (e->half)  /* the 16-bit slices travel; expand_seg widens them */
		rc = blocking ? ds_comm_allgather(sg->comm, src, sl->h, (size_t)sg->shard, e->hdtype, &e->herr)
			      : ds_comm_iallgather(sg->comm, src, sl->h, (size_t)sg->shard, e->hdtype, &sl->req, &e->herr);
	else
		rc = blocking ? ds_comm_allgather(sg->comm, src, sl->buf, (size_t)sg->shard, DS_F32, &e->herr)
			      : ds_comm_iallgather(sg->comm, src, sl->buf, (size_t)sg->shard, DS_F32, &sl->req, &e->herr);
	if (sg->pnv && (blocking || rc < 0))
		ds_offload_param_put(e->off, s);
	return rc;
}

/* ---- mixed precision ----------------------------------------------------
 * The fp32 params are the master weights; the model reads a 16-bit copy
 * (p16, same layout) widened to fp32 per segment into a ps[] slot just
 * before the segment's pass.  In backward every segment's gradients go to
 * a zeroed gs[] slot; the post hook rounds them to 16 bits (this
 * micro-step's 16-bit gradient) and adds them to the held gradients:
 * 16-bit ones (gh, the backend's half_add: widened, added in fp32, rounded once) or, when
 * accumulation is in fp32, fp32 ones (accumulate_half). */

/* widen a gathered (stage 3) or resident 16-bit segment into its slot (a
 * resident one offloaded at stage 3 on one rank: from its swap file) */
static int expand_seg(struct ds_engine *e, struct slot *sl)
{
	const struct seg *sg = &e->seg[sl->seg];
	const uint16_t *src = sg->pfull ? seg_p16(e, sg) : sl->h;
	if (sg->pfull && sg->pnv) {
		void *b;
		DS_TRY(ds_offload_param_get(e->off, sl->seg, &b, &e->herr));
		src = b;
	}
	if (sg->pfull && sg->phost) {  /* offload_param cpu, one rank: the whole segment comes over */
		e->ops->from_host_async(sl->h, src, (size_t)sg->padded * sizeof(uint16_t));
		src = sl->h;
	}
	e->ops->half_unpack(e->half, sl->buf, src, (size_t)sg->padded);
	if (sg->pfull && sg->pnv)
		ds_offload_param_put(e->off, sl->seg);
	return 0;
}

/* Where the 16-bit copy of the master weights segment sg holds goes in
 * e->p16, and how many: the whole segment, or the owned slice into its
 * place in the whole 16-bit segment (stages 1-2) or as the 16-bit slice
 * (stage 3). */
static uint16_t *master_p16(const struct ds_engine *e, const struct seg *sg, int64_t *n)
{
	*n = sg->mfull ? sg->padded : sg->shard;
	return seg_p16(e, sg) + (sg->mfull || !sg->pfull ? 0 : sg->u0);
}

static void step_put(struct ds_engine *e, const struct seg *sg, int b, int async);

/* the 16-bit model copy from the master weights this rank holds (after
 * init, step, load; stages 1-2: gather_half completes it); ZeRO-Offload's
 * master is host memory: the host step's own put (packed there, 16 bits
 * sent or, offload_param cpu, packed straight into the host copy); else
 * packed on the device, and an offload_param cpu copy (host memory)
 * brought over from the reduce-scatter scratch, free now */
static void refresh_half(struct ds_engine *e)
{
	if (!e->half)
		return;
	for (int s = 0; s < e->nseg; s++) {
		const struct seg *sg = &e->seg[s];
		int64_t n;
		uint16_t *dst = master_p16(e, sg, &n);
		if (e->hstep) {   /* (its update range is the master: un = n) */
			step_put(e, sg, 0, 0);
		} else if (sg->phost && n) {
			e->ops->half_pack(e->half, (uint16_t *)(void *)e->scratch, e->params + sg->poff, (size_t)n);
			e->ops->to_host(dst, e->scratch, (size_t)n * sizeof(uint16_t));
		} else if (!sg->phost) {
			e->ops->half_pack(e->half, dst, e->params + sg->poff, (size_t)n);
		}
	}
}

/* add a micro-step's 16-bit gradients g[0..n) to the held acc[0..n) */
static void accumulate_half(const struct ds_engine *e, float *acc, const float *g, int64_t n)
{
	e->ops->accumulate(e->o.grad_accum_fp32 ? DS_HALF_NONE : e->half, acc, g, n);
}

static int next_seg(const struct ds_engine *e, int s, int phase)
{
	int last = e->nseg - 1;
	if (phase == DS_GPT_FORWARD)
		return s < last ? s + 1 : -1;
	if (s == 0)  /* tied: segment 0 opens first, the final norm follows; untied: it is the last */
		return ds_gpt_head_segment(e->model) == 0 ? ds_gpt_norm_segment(e->model) : -1;
	return s - 1;
}

/* the model's params16 hook: a bf16 model's 16-bit copy of segment s, the
 * one seg_pre widened (expand_seg's source: e->p16's, or at stage 3 the
 * gather slot's), so the products that convert to bf16 read it; NULL for
 * a segment that came from its swap file (put back after widening) */
static const uint16_t *seg_params16(void *ctx, int s)
{
	struct ds_engine *e = ctx;
	const struct seg *sg = &e->seg[s];
	if (e->half != DS_HALF_BF16 || sg->pnv)
		return NULL;
	if (sg->pfull)
		return seg_p16(e, sg);
	const struct slot *sl = slot_of(e->ps, e->nps, s);
	return sl ? sl->h : NULL;
}

static int seg_pre(void *ctx, int s, int phase, float **params, float **grads)
{
	struct ds_engine *e = ctx;
	struct seg *sg = &e->seg[s];
	if (sg->pfull && !e->half && sg->pnv) {  /* stage 3 on one rank: the segment from its swap file */
		void *b;
		DS_TRY(ds_offload_param_get(e->off, s, &b, &e->herr));
		*params = b;
	} else if (sg->pfull && !e->half && sg->phost) {  /* offload_param cpu, one rank: it comes over */
		struct slot *sl = slot_of(e->ps, e->nps, s);
		if (!sl) {
			if (!(sl = slot_of(e->ps, e->nps, -1)))
				return ds_err_set(&e->herr, DS_EINVAL, "engine: no free parameter buffer for segment %d", s);
			sl->seg = s;
			e->ops->from_host_async(sl->buf, seg_par(e, sg), (size_t)sg->padded * sizeof(float));
		}
		*params = sl->buf;
	} else if (sg->pfull && !e->half) {
		*params = e->params + sg->poff;
	} else if (sg->pfull) {  /* resident 16-bit segment: widen it */
		struct slot *sl = slot_of(e->ps, e->nps, s);
		if (!sl) {
			if (!(sl = slot_of(e->ps, e->nps, -1)))
				return ds_err_set(&e->herr, DS_EINVAL, "engine: no free parameter buffer for segment %d", s);
			sl->seg = s;
			DS_TRY(expand_seg(e, sl));
		}
		*params = sl->buf;
	} else {
		struct slot *sl = slot_of(e->ps, e->nps, s);
		if (!sl) {
			DS_TRY(gather_seg(e, s, 1));
			sl = slot_of(e->ps, e->nps, s);
			if (e->half)
				DS_TRY(expand_seg(e, sl));
		} else if (sl->req) {
			int rc = ds_comm_wait(e->comm, sl->req, &e->herr);
			sl->req = NULL;
			if (sg->pnv)  /* the prefetched gather has sent the slice */
				ds_offload_param_put(e->off, s);
			DS_TRY(rc);
			if (e->half)
				DS_TRY(expand_seg(e, sl));
		}
		*params = sl->buf;
	}
	if (sg->gfull && !e->half) {
		*grads = e->grads + sg->goff;
	} else if (phase == DS_GPT_BACKWARD) {
		struct slot *gl = slot_of(e->gs, e->ngs, -1), *old;
		if (!gl && (old = oldest_reducing(e))) {
			DS_TRY(finish_slot(e, old, &e->herr));
			gl = old;
		}
		if (!gl)
			return ds_err_set(&e->herr, DS_EINVAL, "engine: no free gradient buffer for segment %d", s);
		gl->seg = s;
		e->ops->zero(gl->buf, (size_t)sg->padded * sizeof(float));
		*grads = gl->buf;
	}
	/* prefetch */
	int n = next_seg(e, s, phase);
	if (n >= 0 && !e->seg[n].pfull && !slot_of(e->ps, e->nps, n) && slot_of(e->ps, e->nps, -1) &&
	    e->seg[n].padded <= e->o.stage3_prefetch_bucket_size &&
	    live_elems(e) + e->seg[n].padded <= e->o.stage3_max_live_parameters)
		DS_TRY(gather_seg(e, n, 0));
	/* offloaded slices: the next two segments' reads run while this one
	 * computes (the next one's gather may already wait on its read) */
	if (e->off && n >= 0) {
		DS_TRY(ds_offload_param_prefetch(e->off, n, &e->herr));
		DS_TRY(ds_offload_param_prefetch(e->off, next_seg(e, n, phase), &e->herr));
	}
	return progress(e);
}

static int seg_post(void *ctx, int s, int phase)
{
	struct ds_engine *e = ctx;
	struct seg *sg = &e->seg[s];
	if (!sg->pfull || e->half || sg->phost) {
		struct slot *sl = slot_of(e->ps, e->nps, s);
		if (sl)
			sl->seg = -1;
	} else if (sg->pnv) {
		ds_offload_param_put(e->off, s);
	}
	if (phase == DS_GPT_BACKWARD && (!sg->gfull || e->half)) {
		struct slot *gl = NULL;
		for (int k = 0; k < e->ngs && !gl; k++)
			if (e->gs[k].seg == s && !e->gs[k].reducing)
				gl = &e->gs[k];
		if (!gl)
			return ds_err_set(&e->herr, DS_EINVAL, "engine: segment %d closed without gradients", s);
		if (e->half)
			e->ops->half_round(e->half, gl->buf, (size_t)sg->padded);
		if (sg->gfull) {  /* mixed precision: into the held gradients */
			if (e->g16)
				e->ops->half_add(e->half, e->gh + sg->goff, gl->buf, sg->padded);
			else
				accumulate_half(e, e->grads + sg->goff, gl->buf, sg->padded);
			gl->seg = -1;
			goto done;
		}
		/* communication_data_type 16-bit: the slot's c16 holds the cast
		 * segment and, after it, the received 16-bit shard */
		const void *snd = gl->buf;
		void *rcv = e->overlap ? (void *)gl->recv : (void *)e->scratch;
		int dt = DS_F32;
		if (e->chalf) {
			cast_prescale(e, gl->buf, gl->c16, sg->padded);
			snd = gl->c16;
			rcv = gl->c16 + e->maxpad;
			dt = e->cdtype;
		} else {
			e->ops->scale(gl->buf, sg->padded, e->grad_pre);
		}
		if (e->overlap) {
			/* finished by the next pre hook that needs the slot, or
			 * by reduce_grads */
			DS_TRY(ds_comm_ireduce_scatter(sg->comm, snd, rcv, (size_t)sg->shard, dt, DS_SUM, &gl->req,
						       &e->herr));
			red_begin(e);
			gl->reducing = 1;
			gl->done = 0;
			gl->seq = e->seq++;
		} else {
			red_begin(e);
			double t0 = ds_now();
			int rc = ds_comm_reduce_scatter(sg->comm, snd, rcv, (size_t)sg->shard, dt, DS_SUM, &e->herr);
			e->red_wait += ds_now() - t0;
			red_end(e);
			DS_TRY(rc);
			if (e->chalf)
				e->ops->half_unpack(e->chalf, e->scratch, gl->c16 + e->maxpad, (size_t)sg->shard);
			add_owned(e, sg, e->scratch);
			gl->seg = -1;
		}
	}
done:
	if (phase == DS_GPT_BACKWARD)
		DS_TRY(buckets_after(e, s));
	return progress(e);
}

/* a model pass failed: prefer the hook's own message */
static int pass_failed(struct ds_engine *e, int rc, struct ds_err *err)
{
	if (e->herr.code < 0 && err)
		ds_err_set(err, e->herr.code, "%s", e->herr.msg);
	ds_err_clear(&e->herr);
	release_all(e);
	return rc;
}

static int build_lamb_ranges(struct ds_engine *e, struct seg *sg, int s, struct ds_err *err)
{
	const struct ds_gpt_segment *ms = ds_gpt_segment(e->model, s);
	sg->lamb = calloc((size_t)ms->ntensors, sizeof *sg->lamb);
	sg->lamb_tensor = calloc((size_t)ms->ntensors, sizeof *sg->lamb_tensor);
	if (!sg->lamb || !sg->lamb_tensor)
		return ds_err_set(err, DS_ENOMEM, "out of memory for optimizer ranges");
	for (int i = ms->first_tensor; i < ms->first_tensor + ms->ntensors; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(e->model, i);
		int64_t a = t->offset - ms->offset, b = a + t->numel;
		int64_t lo = a > sg->u0 ? a : sg->u0, hi = b < sg->u0 + sg->un ? b : sg->u0 + sg->un;
		if (hi <= lo)
			continue;
		sg->lamb[sg->nlamb] = (struct ds_range){ (size_t)(lo - sg->u0), (size_t)(hi - lo) };
		sg->lamb_tensor[sg->nlamb++] = i;
	}
	return 0;
}

/* ---- creation -------------------------------------------------------------
 * ds_engine_create: the choices that follow from the options (check_opts,
 * set_modes), the model and its workspace (build_model), the segments' ZeRO
 * layout (lay_out), the flat buffers and the gather/reduction slots
 * (alloc_flat, alloc_slots), then per segment its parameters, update range
 * and optimizer (init_segment), and the 16-bit copy (init_half). */

static int check_opts(const struct ds_engine_opts *opts, struct ds_err *err)
{
	if (opts->zero_stage < 0 || opts->zero_stage > 3)
		return ds_err_set(err, DS_EINVAL, "zero_optimization.stage %d: must be 0, 1, 2 or 3", opts->zero_stage);
	if (opts->micro_batch < 1 || opts->grad_accum < 1)
		return ds_err_set(err, DS_EINVAL, "micro batch %d and gradient accumulation %d must be >= 1",
				  opts->micro_batch, opts->grad_accum);
	if (ds_optim_is_onebit(opts->optim.type) && opts->zero_stage != 0)
		return ds_err_set(err, DS_EINVAL, "%s is not compatible with ZeRO (DeepSpeed asserts the same); use "
				  "zero_optimization.stage 0", ds_optim_type_name(opts->optim.type));
	if (ds_optim_is_onebit(opts->optim.type) && opts->model.moe.enabled && opts->model.moe.ep_size > 1)
		return ds_err_set(err, DS_EINVAL, "%s with expert parallelism (moe.ep_size %d): its compressed allreduce "
				  "spans every rank, the experts' gradients only their expert-data-parallel group; not "
				  "implemented", ds_optim_type_name(opts->optim.type), opts->model.moe.ep_size);
	if (opts->model.moe.enabled && opts->zero_stage >= 3)
		return ds_err_set(err, DS_EINVAL, "zero_optimization.stage 3 with MoE layers: DeepSpeed's MoE is not "
				  "supported with ZeRO stage 3 (it refuses the same); use stage 0, 1 or 2");
	if (opts->scaler.kind != DS_SCALER_NONE && opts->half != DS_HALF_FP16)
		return ds_err_set(err, DS_EINVAL, "engine: a loss scaler needs fp16 (the model dtype is %s)",
				  ds_half_name(opts->half));
	if (ds_moe_num_layers(&opts->model) > 0 && opts->tp * opts->pp > 1)
		return ds_err_set(err, DS_EINVAL, "MoE layers with tensor or pipeline parallelism (tp %d, pp %d) are not "
				  "supported; use expert parallelism (moe.ep_size) with data parallelism", opts->tp, opts->pp);
	if (ds_optim_is_onebit(opts->optim.type) && opts->tp * opts->pp > 1)
		return ds_err_set(err, DS_EINVAL, "optimizer %s with tensor or pipeline parallelism (tp %d, pp %d): the "
				  "1-bit optimizers' compressed allreduce runs over the whole world, not a data-parallel "
				  "group, in this build; use Adam, AdamW, Lamb or SGD, or tp = pp = 1",
				  ds_optim_type_name(opts->optim.type), opts->tp, opts->pp);
	if (opts->pp > 1 && opts->zero_stage >= 2)
		return ds_err_set(err, DS_EINVAL, "zero_optimization.stage %d with pipeline parallelism (%d stages): "
				  "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism (DeepSpeed's pipeline "
				  "engine refuses them); use stage 0 or 1", opts->zero_stage, opts->pp);
	return 0;
}

/* A backend whose memory is not the host's runs the engine's dense path
 * (fp32, fp16, bf16, any communication_data_type), on one rank or
 * data-parallel over many (ZeRO 0-3, overlap_comm: its buffers travel by
 * the communicator's device path, attach_devmem; the 16-bit casts and
 * scaling around the reductions are backend entries); everything else is
 * refused here, in one line, before anything is allocated. */
void ds_engine_compute_needs(const struct ds_engine_opts *opts, struct ds_compute_needs *needs)
{
	*needs = (struct ds_compute_needs){
		.half = opts->half, .moe = opts->model.moe.enabled || ds_moe_num_layers(&opts->model) > 0,
		.tp = opts->tp, .pp = opts->pp, .onebit = ds_optim_is_onebit(opts->optim.type),
		.nvme = opts->offload.optimizer || opts->offload.param,
	};
}

static int check_backend(const struct ds_engine_opts *opts, struct ds_comm *comm, struct ds_err *err)
{
	const struct ds_compute_ops *ops = opts->compute;
	if (!ops || ops->host)
		return 0;
	struct ds_compute_needs needs;
	ds_engine_compute_needs(opts, &needs);
	const char *what = ops->uncovered(&needs);
	if (!what && ds_comm_size(comm) > 1 && !ops->comm_devmem)
		what = "more than one rank (it cannot hand its buffers to the communicator)";
	if (what)
		return ds_err_set(err, DS_ENOTSUP, "engine: the %s backend does not run %s; use --device cpu", ops->name,
				  what);
	return 0;
}

/* A device backend's collectives: the engine passes its flat buffers
 * (the backend's memory) to the communicator as they are, so it works on
 * its own copy of the caller's communicator (ds_comm_split: same ranks,
 * same order; its collectives reach the caller's comms logger) with the
 * backend's memory registered.  Device buffers then go to NCCL where every
 * rank has a GPU of its own, else to the host backend staged through
 * pinned memory (ranks sharing a GPU, no NCCL); the engine's host values
 * (the norm's sums, the loss, Lamb's partial norms) stay on the host
 * backend.  DS_COMM_NCCL=never|auto|require in the environment (default
 * auto) forces the choice (comm.h's prefer_nccl).  After build_model: the
 * backend is bound to its device and has its stream. */
static int attach_devmem(struct ds_engine *e, struct ds_err *err)
{
	struct ds_comm_devmem dm;
	const char *v = getenv("DS_COMM_NCCL");
	int prefer = DS_COMM_NCCL_AUTO;
	if (e->ops->host || !e->ops->comm_devmem)
		return 0;
	if (e->par)   /* (refused by check_backend: uncovered) */
		return ds_err_set(err, DS_ENOTSUP, "engine: the %s backend with tensor or pipeline parallelism: its "
				  "groups have no device path; use --device cpu", e->ops->name);
	if (v && *v) {
		if (!strcmp(v, "never"))
			prefer = DS_COMM_NCCL_NEVER;
		else if (!strcmp(v, "require"))
			prefer = DS_COMM_NCCL_REQUIRE;
		else if (strcmp(v, "auto"))
			return ds_err_set(err, DS_EINVAL, "DS_COMM_NCCL=%s: must be never, auto or require (or unset: auto)",
					  v);
	}
	memset(&dm, 0, sizeof dm);
	DS_TRY(e->ops->comm_devmem(&dm, err));
	DS_TRY(ds_comm_split(e->comm, 0, e->rank, &e->dcomm, err));
	e->comm = e->world = e->dcomm;
	return ds_comm_set_devmem(e->dcomm, &dm, prefer, err);
}

/* Precision and reduction modes, the rank, and the test-only faults (top
 * of this file). */
static void set_modes(struct ds_engine *e, const struct ds_engine_opts *opts, struct ds_comm *comm)
{
	e->o = *opts;
	e->ops = opts->compute ? opts->compute : &ds_compute_cpu;
	e->comm = comm;
	e->world = comm;
	e->half = opts->half;
	e->hdtype = opts->half == DS_HALF_BF16 ? DS_BF16 : DS_F16;
	/* 16-bit gradients: a 16-bit model accumulating in its own dtype; they
	 * reduce in that dtype unless communication_data_type is fp32 */
	e->g16 = opts->half != DS_HALF_NONE && !opts->grad_accum_fp32;
	e->chalf = opts->half == DS_HALF_NONE ? opts->comm_half
		   : e->g16 && !opts->comm_fp32 ? opts->half : DS_HALF_NONE;
	e->gstage_b = -1;
	e->cdtype = e->chalf == DS_HALF_BF16 ? DS_BF16 : DS_F16;
	e->scaler = opts->scaler;
	e->rank = ds_comm_rank(comm);
	e->W = ds_comm_size(comm);
	e->hstep = opts->offload.cpu && opts->zero_stage >= 1 && !e->ops->host;
	e->hparam = opts->offload.param_cpu && opts->zero_stage == 3 && !e->ops->host &&
		    (e->half != DS_HALF_NONE || e->hstep);
}

/* 3D parallelism: the layout, and with tp * pp > 1 its process groups;
 * ZeRO then works in the data-parallel group */
static int set_layout(struct ds_engine *e, struct ds_err *err)
{
	const struct ds_engine_opts *o = &e->o;
	DS_TRY(ds_topo_init(&e->topo, ds_comm_size(e->world), ds_comm_rank(e->world), o->tp, o->pp, err));
	e->par = o->tp * o->pp > 1;
	if (!e->par)
		return 0;
	DS_TRY(ds_groups_create(&e->grp, e->world, &e->topo, err));
	e->comm = e->grp.dp;
	e->rank = e->topo.dp_rank;
	e->W = e->topo.dp;
	return 0;
}

static void read_test_faults(struct ds_engine *e)
{
	e->fail_rank = env_int("DS_TEST_FAULT_FAIL_RANK", -1);
	e->fail_step = 3;
	const char *fs = getenv("DS_TEST_FAULT_FAIL_RANK");
	if (fs && strchr(fs, ':'))
		e->fail_step = atoi(strchr(fs, ':') + 1);
	e->inject_step = env_int("DS_TEST_INJECT_INF_STEP", 0);
	e->inject_n = 1;
	const char *is = getenv("DS_TEST_INJECT_INF_STEP");
	if (is && strchr(is, ':'))
		e->inject_n = atoi(strchr(is, ':') + 1);
	e->skip_tied = env_int("DS_TEST_FAULT_SKIP_TIED", 0);
}

/* the MoE layers' token exchange over the expert-parallel group */
static int ep_alltoall(void *ctx, const float *send, float *recv, int64_t count)
{
	struct ds_engine *e = ctx;
	return ds_comm_alltoall(e->ep_comm, send, recv, (size_t)count, DS_F32, &e->herr);
}

/* the model's tensor-parallel collectives, over the tensor-parallel group */
static int tp_allreduce(void *ctx, float *buf, int64_t n, int op)
{
	struct ds_engine *e = ctx;
	return ds_comm_allreduce(e->grp.tp, buf, (size_t)n, DS_F32, op == DS_GPT_TP_MAX ? DS_MAX : DS_SUM, &e->herr);
}

static int tp_allgather(void *ctx, const void *send, void *recv, int64_t n, int elem_bytes)
{
	struct ds_engine *e = ctx;
	return ds_comm_allgather(e->grp.tp, send, recv, (size_t)n, elem_bytes == 2 ? DS_F16 : DS_F32, &e->herr);
}

/* The model (this rank's tensor-parallel shards, or its share of the
 * experts), this stage's part of it (pp > 1: DeepSpeed's partition), its
 * workspaces (one, or one per pipeline buffer) and the hooks through
 * which the engine gathers, reduces and, with tensor parallelism, sums
 * and gathers over its group, or exchanges the MoE layers' tokens. */
static int build_model(struct ds_engine *e, struct ds_err *err)
{
	const struct ds_engine_opts *opts = &e->o;
	const int ep = opts->model.moe.enabled ? opts->model.moe.ep_size : 1;
	if (ep > 1 && e->W % ep)
		return ds_err_set(err, DS_EINVAL, "moe.ep_size %d does not divide the world size %d (expert-parallel "
				  "groups are ep consecutive ranks)", ep, e->W);
	if (ep > 1) {  /* DeepSpeed's groups: ep consecutive ranks; ranks equal modulo ep */
		DS_TRY(ds_comm_split(e->comm, e->rank / ep, e->rank, &e->ep_comm, err));
		DS_TRY(ds_comm_split(e->comm, e->rank % ep, e->rank, &e->edp_comm, err));
		DS_TRY(ds_gpt_create_ep(&e->model, &opts->model, ep, e->rank % ep, err));
	} else {
		DS_TRY(ds_gpt_create_tp(&e->model, &opts->model, opts->tp, e->topo.tp_rank, err));
	}
	if (opts->compute) {   /* the backend binds this process to its device first */
		DS_TRY(opts->compute->init(opts->device, err));
		ds_gpt_set_compute(e->model, opts->compute);
	}
	e->opts_moe = opts->model.moe.enabled;
	e->T = opts->seq_length ? opts->seq_length : ds_gpt_config(e->model)->seq_length;
	ds_gpt_part_whole(e->model, &e->part);
	e->nws = 1;
	if (opts->pp > 1) {
		if (!(e->bounds = calloc((size_t)opts->pp + 1, sizeof *e->bounds)))
			return ds_err_set(err, DS_ENOMEM, "out of memory");
		DS_TRY(ds_pipe_partition(e->model, opts->pp, opts->pipe_partition, e->bounds, err));
		ds_pipe_stage_part(e->model, e->bounds, e->topo.pp_rank, &e->part);
		e->nws = ds_pipe_num_buffers(opts->grad_accum, opts->pp, e->topo.pp_rank);
		const int tied = ds_gpt_head_segment(e->model) == 0;
		e->tie = tied && (e->topo.pp_rank == 0 || e->topo.pp_rank == opts->pp - 1);
		e->tie_copy = tied && e->part.head && !e->part.embed;
	}
	for (int i = 0; i < ds_gpt_num_tensors(e->model); i++)
		e->logical += ds_gpt_tensor(e->model, i)->gnumel;
	if (!(e->wss = calloc((size_t)e->nws, sizeof *e->wss)))
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	struct ds_gpt_ws_opts wo = { .B = opts->micro_batch, .T = e->T, .checkpointing = opts->checkpointing,
				     .dropout_seed = opts->seed, .half = opts->half,
				     .bf16_matmul = opts->bf16_matmul, .part = &e->part,
				     .partition_activations = opts->partition_activations };
	struct ds_gpt_hooks h = { .ctx = e, .pre = seg_pre, .post = seg_post, .ep_alltoall = ep_alltoall,
				  .params16 = seg_params16 };
	if (opts->tp > 1) {
		h.tp_allreduce = tp_allreduce;
		h.tp_allgather = tp_allgather;
	}
	for (int b = 0; b < e->nws; b++) {
		DS_TRY(ds_gpt_ws_create(&e->wss[b], e->model, &wo, err));
		ds_gpt_ws_set_hooks(e->wss[b], &h);
	}
	e->ws = e->wss[0];
	if (opts->pp > 1) {
		struct ds_pipe_run *r = &e->pr;
		r->model = e->model;
		r->ws = e->wss;
		r->nbuf = e->nws;
		r->pp = e->grp.pp;
		r->tp = e->grp.tp;
		r->stage = e->topo.pp_rank;
		r->stages = opts->pp;
		r->tp_rank = e->topo.tp_rank;
		r->tp_size = opts->tp;
		r->pipe_partitioned = opts->pipe_partitioned;
		r->grad_partitioned = opts->grad_partitioned;
		r->MB = opts->micro_batch;
		r->T = e->T;
		r->GA = opts->grad_accum;
		r->dp = e->topo.dp;
		r->dp_rank = e->topo.dp_rank;
		DS_TRY(ds_pipe_run_alloc(r, err));
	}
	return 0;
}

/* 3D: the segment-local ranges the gradient norm counts, so that every
 * logical element is counted once over the world: a replicated tensor
 * (norms, positions, row-parallel biases) on tensor-parallel rank 0 only,
 * the last stage's copy of a tied embedding nowhere */
static int count_ranges(struct ds_engine *e, struct ds_err *err)
{
	if (!e->par)
		return 0;
	for (int s = 0; s < e->nseg; s++) {
		struct seg *sg = &e->seg[s];
		const struct ds_gpt_segment *ms = ds_gpt_segment(e->model, s);
		if (!sg->numel)
			continue;
		if (!(sg->cnt = calloc((size_t)ms->ntensors + 1, sizeof *sg->cnt)))
			return ds_err_set(err, DS_ENOMEM, "out of memory");
		for (int i = ms->first_tensor; i < ms->first_tensor + ms->ntensors; i++) {
			const struct ds_gpt_tensor *t = ds_gpt_tensor(e->model, i);
			int counted = !(s == 0 && e->tie_copy) && (t->split != DS_TP_NONE || e->topo.tp_rank == 0);
			if (counted)
				sg->cnt[sg->ncnt++] = (struct ds_range){ (size_t)(t->offset - ms->offset), (size_t)t->numel };
		}
	}
	return 0;
}

/* ZeRO layout: each segment padded to W*16 and split in W shards; which
 * of its parameters (pfull, mfull) and gradients (gfull) this rank holds
 * whole, and where they sit in the flat buffers.  *maxshard: the largest
 * shard. */
static int lay_out(struct ds_engine *e, int64_t *maxshard, struct ds_err *err)
{
	const struct ds_engine_opts *opts = &e->o;
	e->nseg = ds_gpt_num_segments(e->model);
	e->seg = calloc((size_t)e->nseg, sizeof *e->seg);
	if (!e->seg)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	/* ZeRO-Infinity: which segments' parameters and masters live in swap
	 * files (engine/offload.h), from each one's size and update range
	 * (split over the segment's group, as below) */
	int64_t *numel = calloc((size_t)e->nseg, sizeof *numel), *un = calloc((size_t)e->nseg, sizeof *un);
	int *pst = calloc((size_t)e->nseg, sizeof *pst);
	if (!numel || !un || !pst) {
		free(numel);
		free(un);
		free(pst);
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	for (int s = 0; s < e->nseg; s++) {
		const int ex = ds_gpt_expert_segment(e->model, s);
		const int gW = ds_comm_size(ex && e->edp_comm ? e->edp_comm : e->comm);
		const int64_t align = (int64_t)gW * 16;
		/* a pipeline stage holds only the segments its part uses */
		numel[s] = ds_gpt_part_uses(e->model, &e->part, s) ? ds_gpt_segment(e->model, s)->numel : 0;
		int64_t padded = (numel[s] + align - 1) / align * align;
		un[s] = opts->zero_stage >= 1 && gW > 1 ? padded / gW : padded;
	}
	ds_offload_pstores(opts, e->nseg, numel, un, pst);
	*maxshard = 0;
	e->total0 = -1;
	for (int s = 0; s < e->nseg; s++) {
		struct seg *sg = &e->seg[s];
		const int ex = ds_gpt_expert_segment(e->model, s);
		if (ex && e->total0 < 0)
			e->total0 = e->total;
		sg->comm = ex && e->edp_comm ? e->edp_comm : e->comm;
		sg->gW = ds_comm_size(sg->comm);
		sg->grank = ds_comm_rank(sg->comm);
		const int64_t align = (int64_t)sg->gW * 16;
		const int zg = opts->zero_stage >= 2 && sg->gW > 1, zp = opts->zero_stage >= 3 && sg->gW > 1;
		sg->numel = numel[s];
		sg->padded = (sg->numel + align - 1) / align * align;
		sg->off = e->total;
		sg->shard = sg->padded / sg->gW;
		sg->pnv = pst[s];
		sg->mnv = !ds_offload_master_in_memory(opts, pst[s]);
		e->total += sg->padded;
		/* stage 3: segments below the persistence threshold stay whole */
		sg->pfull = !zp || sg->numel < opts->stage3_param_persistence_threshold;
		sg->gfull = !zg;
		sg->mfull = sg->pfull && !(opts->half != DS_HALF_NONE && opts->zero_stage >= 1 && sg->gW > 1);
		/* offload_param cpu: DeepSpeed's partitioned parameters (at or
		 * above the persistence threshold) go to pinned host memory */
		sg->phost = e->hparam && sg->numel > 0 && sg->numel >= opts->stage3_param_persistence_threshold;
		const int p32 = sg->phost && e->half == DS_HALF_NONE;   /* an fp32 run's in hpar */
		sg->poff = p32 ? e->hptotal : e->ptotal;
		sg->goff = e->gtotal;
		sg->hoff = sg->phost && !p32 ? e->hptotal : e->htotal;
		*(p32 ? &e->hptotal : &e->ptotal) += sg->mnv ? 0 : sg->mfull ? sg->padded : sg->shard;
		*(sg->phost && !p32 ? &e->hptotal : &e->htotal) += sg->pnv ? 0 : sg->pfull ? sg->padded : sg->shard;
		e->gtotal += sg->gfull ? sg->padded : sg->shard;
		if (sg->shard > *maxshard)
			*maxshard = sg->shard;
		if ((!sg->pfull || !sg->gfull || e->half || sg->phost) && sg->padded > e->maxpad)
			e->maxpad = sg->padded;
	}
	free(numel);
	free(un);
	free(pst);
	if (e->total0 < 0)
		e->total0 = e->total;
	const int nd = ds_gpt_num_dense_segments(e->model);
	e->ntd = nd < e->nseg ? ds_gpt_segment(e->model, nd)->first_tensor : ds_gpt_num_tensors(e->model);
	return 0;
}

/* ZeRO-Offload: the backend's pinned host memory, counted */
static void *pin_alloc(struct ds_engine *e, size_t bytes)
{
	void *p = e->ops->pinned_alloc(bytes ? bytes : 1);
	if (p)
		e->pinned += bytes ? bytes : 1;
	return p;
}

/* ZeRO-Offload's staging (hstep): a segment's gradient in fp32 (two when
 * it travels in fp32), two of its 16-bit form (16-bit runs: gradients and
 * the 16-bit copy travel in them), and an fp32 run's host copy of every
 * update range.  1 when allocated. */
static int alloc_host_step(struct ds_engine *e)
{
	int64_t sum = 0, mx = 1;
	for (int s = 0; s < e->nseg; s++) {
		const struct seg *sg = &e->seg[s];
		const int64_t un = seg_sharded(e, sg) ? sg->shard : sg->padded;
		sum += sg->phost ? 0 : un;   /* (offload_param cpu: stepped in place) */
		if (un > mx)
			mx = un;
	}
	const size_t p0 = e->pinned;
	int ok = 1;
	for (int k = 0; k < (e->g16 ? 1 : 2); k++)
		ok &= (e->hg[k] = pin_alloc(e, (size_t)mx * sizeof(float))) != NULL;
	for (int k = 0; k < (e->half ? 2 : 0); k++)
		ok &= (e->hh[k] = pin_alloc(e, (size_t)mx * sizeof(uint16_t))) != NULL;
	if (!e->half)
		ok &= (e->hmaster = pin_alloc(e, (size_t)(sum ? sum : 1) * sizeof(float))) != NULL;
	e->hextra = e->pinned - p0;
	return e->hstage_ok = ok;
}

/* The flat buffers: parameters, gradients (fp32, or 16-bit), the
 * reduce-scatter scratch, one micro-batch's inputs and targets, the
 * optimizer table and Lamb's partial sums (ZeRO-Offload: a 16-bit run's
 * master in pinned host memory, and the host step's staging).  Returns 1
 * when all were allocated, else 0 (the caller reports it). */
static int alloc_flat(struct ds_engine *e, int64_t maxshard)
{
	const struct ds_engine_opts *opts = &e->o;
	if (e->hstep && !alloc_host_step(e))
		return 0;
	if (e->hstep && e->half)
		e->params = pin_alloc(e, (size_t)e->ptotal * sizeof(float));
	else
		e->params = e->ops->alloc((size_t)e->ptotal * sizeof(float));
	if (e->g16)
		e->gh = e->ops->alloc((size_t)e->gtotal * sizeof(uint16_t));
	else
		e->grads = e->ops->alloc((size_t)e->gtotal * sizeof(float));
	e->scratch = e->ops->alloc((size_t)maxshard * sizeof(float));
	e->in = ds_alloc((size_t)opts->micro_batch * e->T * sizeof(int32_t));
	e->tg = ds_alloc((size_t)opts->micro_batch * e->T * sizeof(int32_t));
	e->opt = calloc((size_t)e->nseg, sizeof *e->opt);
	e->lamb_sums = calloc((size_t)ds_gpt_num_tensors(e->model) * 2, sizeof(double));
	return e->params && (e->grads || e->gh) && e->scratch && e->in && e->tg && e->opt && e->lamb_sums;
}

/* The parameter and gradient slots of stages 2-3 and of 16-bit models,
 * the 16-bit reduction buffers, the overlap_comm buckets and the 16-bit
 * model copy.  Returns 1 when all were allocated, else 0. */
static int alloc_slots(struct ds_engine *e, int64_t maxshard)
{
	const struct ds_engine_opts *opts = &e->o;
	const int zg = opts->zero_stage >= 2 && e->W > 1, zp = opts->zero_stage >= 3 && e->W > 1;
	int ok = 1;
	/* stage 3 gathers into 3 slots (the segment, its prefetched successor,
	 * the tied embedding); a 16-bit model at stages 0-2 widens at most two
	 * segments at once (the tied embedding stays open through the head) */
	const int moe = ds_gpt_num_dense_segments(e->model) < e->nseg;   /* an MoE layer opens two segments */
	e->nps = zp ? 3 : e->half || e->hptotal ? 2 + moe : 0;
	for (int k = 0; k < 4; k++) {
		e->ps[k].seg = -1;
		if (k < e->nps && !(e->ps[k].buf = e->ops->alloc((size_t)e->maxpad * sizeof(float))))
			ok = 0;
		if (k < e->nps && zp && e->half && !(e->ps[k].h = e->ops->alloc((size_t)e->maxpad * sizeof(uint16_t))))
			ok = 0;
	}
	/* overlap_comm: two more gradient slots, so that reductions stay in
	 * flight while the next segments run backward (with tied weights the
	 * embeddings hold one slot through the whole pass) */
	/* (the pipeline reduces after its schedule, as DeepSpeed's does) */
	e->overlap = opts->overlap_comm && e->W > 1 && opts->pp == 1;
	e->ngs = (zg && e->overlap ? 4 : 2) + moe;
	for (int k = 0; k < e->ngs; k++) {
		e->gs[k].seg = -1;
		if ((zg || e->half) && !(e->gs[k].buf = e->ops->alloc((size_t)e->maxpad * sizeof(float))))
			ok = 0;
		if (zg && e->overlap && !(e->gs[k].recv = e->ops->alloc((size_t)maxshard * sizeof(float))))
			ok = 0;
		if (zg && e->chalf && e->g16)
			e->gs[k].c16 = (uint16_t *)(void *)e->gs[k].buf;  /* 4 x maxpad bytes hold both */
		else if (zg && e->chalf &&
			 !(e->gs[k].c16 = e->ops->alloc((size_t)(e->maxpad + maxshard) * sizeof(uint16_t))))
			ok = 0;
	}
	if (!zg && e->chalf && !e->g16 && e->W > 1 && !(e->c16 = e->ops->alloc((size_t)e->total * sizeof(uint16_t))))
		ok = 0;
	e->bucket = opts->reduce_bucket_size > 0 ? opts->reduce_bucket_size : e->total;
	/* 16-bit gradients reduced in fp32 at stages 0-1: one fp32 bucket */
	e->gstage_n = e->bucket < e->total ? e->bucket : e->total;
	if (!zg && e->g16 && !e->chalf && e->W > 1 && !(e->gstage = e->ops->alloc((size_t)e->gstage_n * sizeof(float))))
		ok = 0;
	/* the buckets: the dense range then the experts', each cut at bucket */
	int nb = (int)((e->total0 + e->bucket - 1) / e->bucket + (e->total - e->total0 + e->bucket - 1) / e->bucket);
	e->bk = calloc((size_t)nb + 1, sizeof *e->bk);
	nb = 0;
	for (int g = 0; e->bk && g < 2; g++) {
		const int64_t a = g ? e->total0 : 0, z = g ? e->total : e->total0;
		for (int64_t off = a; off < z; off += e->bucket)
			e->bk[nb++] = (struct bk){ off, z - off < e->bucket ? z - off : e->bucket,
						   g && e->edp_comm ? e->edp_comm : e->comm };
	}
	e->nbuckets = e->overlap && !zg ? nb : 0;
	e->nbk = nb;
	e->bnext = -1;
	e->breq = calloc((size_t)e->nbuckets + 1, sizeof *e->breq);
	e->seg_done = calloc((size_t)e->nseg, 1);
	if (e->half && !(e->p16 = e->ops->alloc((size_t)e->htotal * sizeof(uint16_t))))
		ok = 0;
	/* offload_param cpu: the offloaded parameters (16-bit, or an fp32
	 * run's), and what carries them over: a send slice per gather slot
	 * (stage 3 on W > 1), else (one rank: whole segments) a 16-bit run's
	 * widening source per slot (an fp32 run's come into the slot's buf) */
	if (e->hptotal) {
		const size_t esz = e->half ? sizeof(uint16_t) : sizeof(float);
		if (e->half ? !(e->hp16 = pin_alloc(e, (size_t)e->hptotal * esz))
			    : !(e->hpar = pin_alloc(e, (size_t)e->hptotal * esz)))
			ok = 0;
		for (int k = 0; k < e->nps; k++)
			if (zp ? !(e->ps[k].snd = e->ops->alloc((size_t)maxshard * esz))
			       : e->half && !e->ps[k].h && !(e->ps[k].h = e->ops->alloc((size_t)e->maxpad * esz)))
				ok = 0;
	}
	return ok && e->breq && e->seg_done && e->bk;
}

/* alloc_flat's or alloc_slots's failure as the memory plan's row
 * (engine/estimate.h's categories) whose buffer did not come: the first
 * one missing in the plan's order; DS_ENOMEM. */
static int oom_row(struct ds_engine *e, int64_t maxshard, struct ds_err *err)
{
	const char *row = "communication", *what = "a gather, widening or reduction buffer";
	size_t bytes = (size_t)e->maxpad * sizeof(float);
	if (e->hstep && (!e->hstage_ok || (e->half && !e->params)))
		return ds_err_set(err, DS_ENOMEM, "out of pinned host memory for the memory plan's optimizer_states row "
				  "(ZeRO-Offload: %s) for %lld parameters; ds-train --check shows the plan: a higher ZeRO "
				  "stage shards it over the ranks", !e->hstage_ok ? "the step's staging"
				  : "the fp32 master weights", (long long)e->total);
	if (e->hptotal && !e->hp16 && !e->hpar)
		return ds_err_set(err, DS_ENOMEM, "out of pinned host memory for the memory plan's parameters row "
				  "(offload_param cpu: the %s parameters, %zu bytes) for %lld parameters; ds-train "
				  "--check shows the plan: more ranks shard it", e->half ? "16-bit" : "fp32",
				  (size_t)e->hptotal * (e->half ? sizeof(uint16_t) : sizeof(float)), (long long)e->total);
	if (e->half && !e->p16) {
		row = "parameters", what = "the 16-bit model copy", bytes = (size_t)e->htotal * sizeof(uint16_t);
	} else if (!e->params) {
		row = e->half ? "optimizer_states" : "parameters";
		what = e->half ? "the fp32 master weights" : "the flat fp32 parameters";
		bytes = (size_t)e->ptotal * sizeof(float);
	} else if (!e->grads && !e->gh) {
		row = "gradients", what = "the flat gradients";
		bytes = (size_t)e->gtotal * (e->g16 ? sizeof(uint16_t) : sizeof(float));
	} else if (!e->scratch) {
		what = "the reduce-scatter scratch", bytes = (size_t)maxshard * sizeof(float);
	} else if (!e->in || !e->tg || !e->opt || !e->lamb_sums) {
		return ds_err_set(err, DS_ENOMEM, "out of host memory for the memory plan's other row (the micro-batch's "
				  "tokens, the optimizer table) for %lld parameters", (long long)e->total);
	}
	return ds_err_set(err, DS_ENOMEM, "out of %s memory for the memory plan's %s row: %s (%zu bytes) for %lld "
			  "parameters; ds-train --check shows the plan: a higher ZeRO stage shards it over the ranks, a "
			  "smaller micro batch or activation checkpointing leaves more room", e->ops->name, row, what, bytes,
			  (long long)e->total);
}

/* Parameters [lo, hi) of the model's flat order into dst (the backend's
 * memory, or host memory when on_host): in place on a host backend or in
 * host memory, else through host memory */
static int init_params(struct ds_engine *e, float *dst, int on_host, int64_t lo, int64_t hi, struct ds_err *err)
{
	if (e->ops->host || on_host) {
		ds_gpt_init(e->model, e->o.seed, dst, lo, hi);
		return 0;
	}
	float *h = malloc((size_t)(hi - lo) * sizeof(float));
	if (!h)
		return ds_err_set(err, DS_ENOMEM, "out of memory initialising %lld parameters", (long long)(hi - lo));
	ds_gpt_init(e->model, e->o.seed, h, lo, hi);
	e->ops->from_host(dst, h, (size_t)(hi - lo) * sizeof(float));
	free(h);
	return 0;
}

/* An optimizer of n elements whose states are the backend's memory (or,
 * ZeRO-Offload, its pinned host memory), zeroed (ds_optim_create's sizes:
 * an empty range still gets one element) */
static int create_dev_optim(struct ds_engine *e, struct ds_optim **o, size_t n, struct ds_err *err)
{
	int k;
	const size_t b = (n ? n : 1) * sizeof(float);
	int rc = ds_compute_optim_create(e->ops, e->hstep, o, &e->o.optim, n, &k, err);
	if (rc == DS_ENOMEM && k >= 0)
		return ds_err_set(err, DS_ENOMEM, "out of %s memory for the memory plan's optimizer_states row: "
				  "%s of %zu floats (%zu bytes); ds-train --check shows the plan: a higher ZeRO "
				  "stage shards the states over the ranks", e->hstep ? "pinned host" : e->ops->name,
				  (*o)->state_names[k], n, b);
	if (rc == 0 && e->hstep)
		e->pinned += (size_t)(*o)->nstates * b;
	return rc;
}

/* Segment s: initialise the parameters this rank holds (a pure function of
 * (seed, name, index): each rank fills the segment, or its slice, alone),
 * the range it updates, its pointers into the flat buffers, its optimizer
 * and Lamb's tensor pieces. */
static int init_segment(struct ds_engine *e, int s, struct ds_err *err)
{
	const struct ds_engine_opts *opts = &e->o;
	struct seg *sg = &e->seg[s];
	const struct ds_gpt_segment *ms = ds_gpt_segment(e->model, s);
	if (sg->mnv) {
		/* in a swap file: engine/offload.c writes its initial values */
	} else if (sg->mfull) {
		DS_TRY(init_params(e, seg_par(e, sg), (e->hstep && e->half) || (sg->phost && !e->half), ms->offset,
				   ms->offset + sg->numel, err));
	} else {
		int64_t lo = (int64_t)sg->grank * sg->shard, hi = lo + sg->shard;
		if (hi > sg->numel)
			hi = sg->numel;
		if (hi > lo)
			DS_TRY(init_params(e, seg_par(e, sg), (e->hstep && e->half) || (sg->phost && !e->half), ms->offset + lo,
					   ms->offset + hi, err));
	}
	sg->u0 = seg_sharded(e, sg) ? (int64_t)sg->grank * sg->shard : 0;
	if (seg_sharded(e, sg) && e->rank == 0 && env_int("DS_TEST_FAULT_SHARD_SHIFT", 0))
		sg->u0 = 1;  /* test-only fault: see the top of this file */
	sg->un = seg_sharded(e, sg) ? sg->shard : sg->padded;
	sg->p_upd = sg->mnv ? NULL : seg_par(e, sg) + (sg->mfull ? sg->u0 : 0);
	int64_t gu = sg->goff + (sg->gfull ? sg->u0 : 0), go = sg->goff + (sg->gfull ? (int64_t)sg->grank * sg->shard : 0);
	sg->g_upd = e->grads ? e->grads + gu : NULL;
	sg->g_own = e->grads ? e->grads + go : NULL;
	sg->h_upd = e->gh ? e->gh + gu : NULL;
	sg->h_own = e->gh ? e->gh + go : NULL;
	/* ZeRO-Offload: a 16-bit run steps its pinned master in place, an fp32
	 * run a host copy of its update range (or, offloaded by offload_param
	 * cpu, its pinned parameters in place) */
	if (e->hstep && (e->half || sg->phost)) {
		sg->m_step = sg->p_upd;
	} else if (e->hstep) {
		int64_t at = 0;
		for (int k = 0; k < s; k++)
			at += e->seg[k].phost ? 0 : e->seg[k].un;
		sg->m_step = e->hmaster + at;
		if (sg->un)
			e->ops->to_host(sg->m_step, sg->p_upd, (size_t)sg->un * sizeof(float));
	}
	/* offloaded states live in swap files, not in the optimizer; the
	 * 1-bit optimizers keep one for the whole model */
	if (!ds_optim_is_onebit(opts->optim.type) && e->ops->host)
		DS_TRY((opts->offload.optimizer ? ds_optim_create_bare : ds_optim_create)(&e->opt[s], &opts->optim,
											    (size_t)sg->un, err));
	else if (!ds_optim_is_onebit(opts->optim.type))
		DS_TRY(create_dev_optim(e, &e->opt[s], (size_t)sg->un, err));
	return build_lamb_ranges(e, sg, s, err);
}

/* ZeRO-Infinity: hand each segment's update range to engine/offload.c,
 * which creates the swap files and writes the initial master and states. */
static int init_offload(struct ds_engine *e, struct ds_err *err)
{
	if (!e->o.offload.optimizer && !e->o.offload.param)
		return 0;
	struct ds_offload_range *r = calloc((size_t)e->nseg, sizeof *r);
	if (!r)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (int s = 0; s < e->nseg; s++) {
		const struct seg *sg = &e->seg[s];
		r[s] = (struct ds_offload_range){ .u0 = sg->u0, .un = sg->un, .numel = sg->numel,
						  .elem0 = ds_gpt_segment(e->model, s)->offset, .master = sg->p_upd,
						  .g32 = sg->g_upd, .g16 = sg->h_upd, .pstore = sg->pnv };
		if (e->half && !sg->pnv)
			r[s].h16 = seg_p16(e, sg) + (sg->pfull ? sg->u0 : 0);
	}
	/* the world rank names the swap directory and its errors (e->rank is
	 * the data-parallel one, shared by a tensor x pipeline group) */
	int rc = ds_offload_create(&e->off, &e->o, r, e->nseg, e->model, ds_comm_rank(e->world), err);
	free(r);
	if (rc == 0)
		e->off_opt = ds_offload_get_plan(e->off)->nsets > 0;
	return rc;
}

/* The 16-bit copy from the master weights: refresh_half, or with offload
 * engine/offload.c over every update range (masters in swap files,
 * 16-bit slices into them). */
static int refresh(struct ds_engine *e, struct ds_err *err)
{
	if (e->off)
		return ds_offload_refresh(e->off, err);
	refresh_half(e);
	return 0;
}

/* The 16-bit model copy from the fp32 parameters; a whole 16-bit segment
 * over a partitioned master (stages 1-2) also gets the other ranks'
 * slices, initialised here in fp32 (init is a pure function of the
 * element) and rounded, as gather_half would bring: on the backend's
 * memory, through its entries (init_params goes through host memory on a
 * device backend). */
static int init_half(struct ds_engine *e, struct ds_err *err)
{
	DS_TRY(refresh(e, err));
	for (int s = 0; s < e->nseg; s++) {
		const struct seg *sg = &e->seg[s];
		if (sg->mfull || !sg->pfull)
			continue;
		const struct ds_gpt_segment *ms = ds_gpt_segment(e->model, s);
		float *tmp = e->ps[0].buf;   /* the backend's memory */
		e->ops->zero(tmp, (size_t)sg->padded * sizeof(float));
		DS_TRY(init_params(e, tmp, 0, ms->offset, ms->offset + sg->numel, err));
		e->ops->half_pack(e->half, seg_p16(e, sg), tmp, (size_t)sg->padded);
	}
	return 0;
}

int ds_engine_create(struct ds_engine **out, const struct ds_engine_opts *opts, struct ds_comm *comm,
		     struct ds_err *err)
{
	int rc;
	int64_t maxshard = 0;
	struct ds_engine *e = calloc(1, sizeof *e);
	if (!e)
		return ds_err_set(err, DS_ENOMEM, "out of memory creating the engine");
	set_modes(e, opts, comm);
	if ((rc = check_opts(opts, err)) < 0 || (rc = check_backend(opts, comm, err)) < 0 ||
	    (rc = set_layout(e, err)) < 0 || (rc = build_model(e, err)) < 0 || (rc = attach_devmem(e, err)) < 0 ||
	    (rc = lay_out(e, &maxshard, err)) < 0 ||
	    (rc = count_ranges(e, err)) < 0)
		goto fail;
	/* alloc_slots runs even when alloc_flat failed, as one allocation
	 * pass that is checked once */
	int flat_ok = alloc_flat(e, maxshard), slots_ok = alloc_slots(e, maxshard);
	if (!flat_ok || !slots_ok) {
		rc = oom_row(e, maxshard, err);
		goto fail;
	}
	for (int s = 0; s < e->nseg; s++)
		if ((rc = init_segment(e, s, err)) < 0)
			goto fail;
	if (ds_optim_is_onebit(opts->optim.type)) {
		int64_t *off = calloc((size_t)e->nseg, sizeof *off);
		for (int s = 0; off && s < e->nseg; s++)
			off[s] = e->seg[s].off;
		rc = off ? ds_engine_onebit_create(&e->ob, &opts->optim, e->model, off, e->total, e->half, comm, err)
			 : ds_err_set(err, DS_ENOMEM, "out of memory");
		free(off);
		if (rc < 0)
			goto fail;
	}
	e->reduce_on = 1;
	e->grad_pre = opts->prescale_gradients ? 1.0f / (float)e->W : (float)(1.0 / opts->gradient_predivide_factor);
	e->grad_post = opts->prescale_gradients ? 1.0f : (float)(opts->gradient_predivide_factor / e->W);
	read_test_faults(e);
	if ((rc = init_offload(e, err)) < 0 || (rc = init_half(e, err)) < 0 || (rc = e->ops->check(err)) < 0)
		goto fail;
	e->ck_i = -1;
	*out = e;
	return 0;
fail:
	ds_engine_destroy(e);
	return rc;
}

void ds_engine_destroy(struct ds_engine *e)
{
	if (!e)
		return;
	if (e->comm && e->breq)
		release_all(e);
	ds_offload_destroy(e->off);
	const struct ds_compute_ops *ops = e->ops ? e->ops : &ds_compute_cpu;
	for (int s = 0; e->seg && s < e->nseg; s++) {
		if (e->opt)
			ds_compute_optim_destroy(ops, e->hstep, e->opt[s]);
		free(e->seg[s].lamb);
		free(e->seg[s].lamb_tensor);
		free(e->seg[s].cnt);
	}
	free(e->opt);
	ds_engine_onebit_destroy(e->ob);
	free(e->seg);
	free(e->lamb_sums);
	free(e->ck_host);
	(e->hstep && e->half ? ops->pinned_free : ops->free)(e->params);
	if (e->hstep) {
		for (int k = 0; k < 2; k++) {
			ops->pinned_free(e->hg[k]);
			ops->pinned_free(e->hh[k]);
		}
		ops->pinned_free(e->hmaster);
	}
	ops->free(e->grads);
	ops->free(e->gh);
	ops->free(e->gstage);
	ops->free(e->scratch);
	for (int k = 0; k < 4; k++) {
		ops->free(e->ps[k].buf);
		ops->free(e->ps[k].h);
		ops->free(e->ps[k].snd);
	}
	ops->free(e->p16);
	if (e->hp16)
		ops->pinned_free(e->hp16);
	if (e->hpar)
		ops->pinned_free(e->hpar);
	ops->free(e->c16);
	for (int k = 0; k < 5; k++) {
		ops->free(e->gs[k].buf);
		ops->free(e->gs[k].recv);
		if ((void *)e->gs[k].c16 != (void *)e->gs[k].buf)
			ops->free(e->gs[k].c16);
	}
	free(e->breq);
	free(e->bk);
	free(e->seg_done);
	ds_free(e->in);
	ds_free(e->tg);
	for (int b = 0; e->wss && b < e->nws; b++)
		ds_gpt_ws_destroy(e->wss[b]);
	free(e->wss);
	ds_pipe_run_free(&e->pr);
	free(e->bounds);
	ds_gpt_destroy(e->model);
	ds_comm_destroy(e->ep_comm);
	ds_comm_destroy(e->edp_comm);
	ds_groups_release(&e->grp);
	ds_comm_destroy(e->dcomm);   /* its staging buffers, its NCCL communicator */
	free(e);
}

const struct ds_gpt *ds_engine_model(const struct ds_engine *e) { return e->model; }
const struct ds_compute_ops *ds_engine_compute(const struct ds_engine *e) { return e->ops; }
const struct ds_comm *ds_engine_dev_comm(const struct ds_engine *e) { return e->dcomm; }
const struct ds_topo *ds_engine_topo(const struct ds_engine *e) { return &e->topo; }
const struct ds_gpt_part *ds_engine_part(const struct ds_engine *e) { return &e->part; }
const int *ds_engine_stage_bounds(const struct ds_engine *e) { return e->bounds; }
int64_t ds_engine_num_params(const struct ds_engine *e) { return e->logical; }

double ds_engine_recompute_seconds(const struct ds_engine *e)
{
	double t = 0;
	for (int b = 0; b < e->nws; b++)
		t += ds_gpt_ws_recompute_seconds(e->wss[b]);
	return t;
}
int64_t ds_engine_steps(const struct ds_engine *e) { return e->steps; }

/* overlap_comm at stages 0-1: the buckets were started during the last
 * backward; start any left and wait on them all */
static int drain_buckets(struct ds_engine *e, struct ds_err *err)
{
	while (e->bnext >= 0)
		DS_TRY(start_bucket(e, e->bnext--, err));
	for (int b = e->nbuckets - 1; b >= 0; b--)
		DS_TRY(red_wait(e, &e->breq[b].req, &e->breq[b].done, err));
	return 0;
}

/* Reduce the gradients across ranks (spec §6: postscale by default,
 * prescale when asked; predivide factor f).  Stages 0-1 allreduce every
 * segment in buckets; stages 2-3 reduce-scatter each segment so that a rank
 * keeps only its slice. */
static int reduce_grads_16(struct ds_engine *e, struct ds_err *err);

static int reduce_grads(struct ds_engine *e, struct ds_err *err)
{
	if (e->g16)
		return reduce_grads_16(e, err);
	if (e->W == 1) {
		/* nothing to sum, but DeepSpeed still casts to the communication
		 * type, scales by 1/f and f there, and casts back */
		if (e->chalf) {
			e->ops->half_round(e->chalf, e->grads, (size_t)e->gtotal);
			if (e->grad_pre != 1.0f) {
				e->ops->scale(e->grads, e->gtotal, e->grad_pre);
				e->ops->half_round(e->chalf, e->grads, (size_t)e->gtotal);
				e->ops->scale(e->grads, e->gtotal, e->grad_post);
				e->ops->half_round(e->chalf, e->grads, (size_t)e->gtotal);
			}
		}
		return 0;
	}
	if (e->o.zero_stage >= 2) {
		/* reduce-scattered (prescaled) per segment during backward */
		DS_TRY(finish_all(e, err));
		for (int s = 0; s < e->nseg; s++)
			e->ops->scale(e->seg[s].g_own, e->seg[s].shard, e->grad_post);
		return 0;
	}
	if (e->overlap) {
		DS_TRY(drain_buckets(e, err));
		if (e->chalf)
			e->ops->half_unpack(e->chalf, e->grads, e->c16, (size_t)e->total);
	} else {
		if (!e->chalf)
			e->ops->scale(e->grads, e->total, e->grad_pre);
		for (int b = 0; b < e->nbk; b++) {
			const int64_t off = e->bk[b].off, n = e->bk[b].n;
			if (e->chalf)
				cast_prescale(e, e->grads + off, e->c16 + off, n);
			red_begin(e);
			double t0 = ds_now();
			int rc = e->chalf ? ds_comm_allreduce(e->bk[b].comm, e->c16 + off, (size_t)n, e->cdtype, DS_SUM, err)
					  : ds_comm_allreduce(e->bk[b].comm, e->grads + off, (size_t)n, DS_F32, DS_SUM, err);
			e->red_wait += ds_now() - t0;
			red_end(e);
			DS_TRY(rc);
			if (e->chalf)
				e->ops->half_unpack(e->chalf, e->grads + off, e->c16 + off, (size_t)n);
		}
	}
	e->ops->scale(e->grads, e->total, e->grad_post);
	/* communication_data_type 16-bit: the postscale happened in that type */
	if (e->chalf && e->grad_post != 1.0f)
		e->ops->half_round(e->chalf, e->grads, (size_t)e->total);
	return 0;
}

/* reduce_grads for 16-bit gradients (e->g16): in the model's dtype (chalf,
 * in place, postscaled there) or, with communication_data_type fp32, in
 * fp32 with one rounding back to 16 bits */
static int reduce_grads_16(struct ds_engine *e, struct ds_err *err)
{
	if (e->W == 1) {
		/* as for fp32 models: the 16-bit reduction still scales by 1/f
		 * and f in 16 bits (a no-op unless f != 1); an fp32 one is skipped */
		if (e->chalf && e->grad_pre != 1.0f) {
			e->ops->half_recast(e->gh, e->gtotal, e->half, e->chalf, e->grad_pre, e->chalf);
			e->ops->half_recast(e->gh, e->gtotal, e->chalf, e->chalf, e->grad_post, e->half);
		}
		return 0;
	}
	if (e->o.zero_stage >= 2) {
		DS_TRY(finish_all(e, err));
		for (int s = 0; s < e->nseg; s++)
			e->ops->half_recast(e->seg[s].h_own, e->seg[s].shard, e->half, e->chalf, e->grad_post, e->half);
		return 0;
	}
	if (e->overlap) {
		DS_TRY(drain_buckets(e, err));
		if (e->chalf)
			e->ops->half_recast(e->gh, e->total, e->chalf, e->chalf, e->grad_post, e->half);
		else
			gstage_finish(e);
		return 0;
	}
	for (int b = 0; b < e->nbk; b++) {
		const int64_t off = e->bk[b].off, n = e->bk[b].n;
		if (e->chalf)
			e->ops->half_recast(e->gh + off, n, e->half, e->chalf, e->grad_pre, e->chalf);
		else
			gstage_load(e, b, off, n);
		red_begin(e);
		double t0 = ds_now();
		int rc = e->chalf ? ds_comm_allreduce(e->bk[b].comm, e->gh + off, (size_t)n, e->cdtype, DS_SUM, err)
				  : ds_comm_allreduce(e->bk[b].comm, e->gstage, (size_t)n, DS_F32, DS_SUM, err);
		e->red_wait += ds_now() - t0;
		red_end(e);
		DS_TRY(rc);
		if (e->chalf)
			e->ops->half_recast(e->gh + off, n, e->chalf, e->chalf, e->grad_post, e->half);
		else
			gstage_finish(e);
	}
	return 0;
}

/* Sum of squares over this rank's W-slice of every segment (every stage
 * holds at least that slice reduced), and whether any element is not
 * finite: the backend's sumsq, segment by segment in order (fixed chunks
 * each, so the norm's bits repeat from run to run). */
static double owned_sumsq(const struct ds_engine *e, int *nonfinite)
{
	double acc[2] = { 0, 0 };
	/* unreduced gradients (a 1-bit optimizer's compressed phase): this
	 * rank's own, whole, as DeepSpeed takes the norm of local gradients */
	const int whole = !e->reduce_on;
	for (int s = 0; s < e->nseg; s++) {
		const struct seg *sg = &e->seg[s];
		const int64_t n = whole ? sg->padded : sg->shard;
		if (!n)
			continue;
		const float *g = e->g16 ? hwiden(e, whole ? e->gh + sg->goff : sg->h_own, n)
				 : whole ? e->grads + sg->goff : sg->g_own;
		if (!sg->cnt || whole) {
			e->ops->sumsq(acc, g, n);
			continue;
		}
		/* 3D: only the counted ranges of the owned slice add to the norm,
		 * each summed the same fixed-chunk way, in order; the gaps between
		 * them (replicated or tied copies) only to the non-finite check */
		const int64_t o0 = (int64_t)sg->grank * sg->shard;
		int64_t at = o0;
		double gap[2] = { 0, 0 };
		for (int k = 0; k < sg->ncnt; k++) {
			int64_t a = (int64_t)sg->cnt[k].off > o0 ? (int64_t)sg->cnt[k].off : o0;
			int64_t z = (int64_t)(sg->cnt[k].off + sg->cnt[k].len) < o0 + sg->shard
				? (int64_t)(sg->cnt[k].off + sg->cnt[k].len) : o0 + sg->shard;
			if (z <= a)
				continue;
			if (a > at)
				e->ops->sumsq(gap, g + (at - o0), a - at);
			e->ops->sumsq(acc, g + (a - o0), z - a);
			at = z;
		}
		if (o0 + sg->shard > at)
			e->ops->sumsq(gap, g + (at - o0), o0 + sg->shard - at);
		if (gap[1] != 0)
			acc[1] = 1;
	}
	*nonfinite = acc[1] != 0;
	return acc[0];
}

/* The gradient of segment sg's update range where the step runs: on the
 * backend (16-bit ones widened), or with ZeRO-Offload brought to the host
 * (16-bit ones as they are, half the bytes, and widened there). */
static const float *step_grad(struct ds_engine *e, const struct seg *sg)
{
	if (!e->hstep)
		return e->g16 ? hwiden(e, sg->h_upd, sg->un) : sg->g_upd;
	if (e->g16) {
		e->ops->to_host(e->hh[0], sg->h_upd, (size_t)sg->un * sizeof(uint16_t));
		ds_compute_cpu.half_unpack(e->half, e->hg[0], e->hh[0], (size_t)sg->un);
	} else {
		e->ops->to_host(e->hg[0], sg->g_upd, (size_t)sg->un * sizeof(float));
	}
	return e->hg[0];
}

/* ZeRO-Offload: segment sg's stepped range back to the device through
 * staging buffer b, queued (async) or not: an fp32 run's into its model, a
 * 16-bit run's as its 16-bit copy packed on the host (its update range is
 * its master: un = master_p16's n) */
static void step_put(struct ds_engine *e, const struct seg *sg, int b, int async)
{
	void (*put)(void *, const void *, size_t) = async ? e->ops->from_host_async : e->ops->from_host;
	int64_t n;
	if (!sg->un)
		return;
	if (!e->half) {
		if (!sg->phost)   /* (offload_param cpu: stepped in place) */
			put(sg->p_upd, sg->m_step, (size_t)sg->un * sizeof(float));
		return;
	}
	uint16_t *dst = master_p16(e, sg, &n);
	if (sg->phost) {   /* offload_param cpu: the 16-bit copy is host memory */
		ds_compute_cpu.half_pack(e->half, dst, sg->m_step, (size_t)n);
		return;
	}
	ds_compute_cpu.half_pack(e->half, e->hh[b], sg->m_step, (size_t)n);
	put(dst, e->hh[b], (size_t)n * sizeof(uint16_t));
}

/* ZeRO-Offload: segment s's gradient on its way to staging buffer s & 1
 * (16-bit gradients as they are) */
static void grad_over_async(struct ds_engine *e, int s)
{
	const struct seg *sg = &e->seg[s];
	if (!sg->un)
		return;
	if (e->g16)
		e->ops->to_host_async(e->hh[s & 1], sg->h_upd, (size_t)sg->un * sizeof(uint16_t));
	else
		e->ops->to_host_async(e->hg[s & 1], sg->g_upd, (size_t)sg->un * sizeof(float));
}

/* ZeRO-Offload's step of Adam/AdamW/SGD: segment by segment on the host,
 * with the copies in flight while it steps.  At segment s the backend's
 * queue has brought s's gradient over and taken s-1's result (check);
 * s+1's gradient is queued into the other buffer, s is widened (16-bit)
 * and stepped with the cpu backend's loops, and its result queued back:
 * an fp32 run's range from its host copy, a 16-bit run's as its 16-bit
 * copy packed into the buffer its gradient came in.  Lamb's two phases
 * step one segment at a time (optimizer_step). */
static int host_step(struct ds_engine *e, float grad_mul, struct ds_err *err)
{
	if (e->nseg)
		grad_over_async(e, 0);
	for (int s = 0; s < e->nseg; s++) {
		struct seg *sg = &e->seg[s];
		const size_t n = (size_t)sg->un;
		DS_TRY(e->ops->check(err));
		if (s + 1 < e->nseg)
			grad_over_async(e, s + 1);
		float *g = e->hg[e->g16 ? 0 : s & 1];
		if (e->g16 && n)
			ds_compute_cpu.half_unpack(e->half, g, e->hh[s & 1], n);
		DS_TRY(ds_compute_cpu.optim_step(e->opt[s], sg->m_step, g, grad_mul, err));
		step_put(e, sg, s & 1, 1);
	}
	return e->ops->check(err);
}

static int optimizer_step(struct ds_engine *e, float grad_mul, struct ds_err *err)
{
	if (e->ob)
		return ds_engine_onebit_step(e->ob, e->params, e->grads, e->gh, grad_mul, err);
	if (e->hstep && e->o.optim.type != DS_OPTIM_LAMB)
		return host_step(e, grad_mul, err);
	/* where the step runs: the backend, or (ZeRO-Offload's Lamb) the host */
	const struct ds_compute_ops *so = e->hstep ? &ds_compute_cpu : e->ops;
	if (e->o.optim.type != DS_OPTIM_LAMB) {
		for (int s = 0; s < e->nseg; s++) {
			struct seg *sg = &e->seg[s];
			DS_TRY(so->optim_step(e->opt[s], sg->p_upd, step_grad(e, sg), grad_mul, err));
		}
		return 0;
	}
	/* Lamb: per-tensor norms may span ranks, so sum partial norms first */
	int nt = ds_gpt_num_tensors(e->model);
	double local[2 * 64];
	memset(e->lamb_sums, 0, sizeof(double) * 2 * (size_t)nt);
	for (int s = 0; s < e->nseg; s++) {
		struct seg *sg = &e->seg[s];
		double *sums = sg->nlamb <= 64 ? local : calloc(2 * (size_t)sg->nlamb, sizeof(double));
		if (!sums)
			return ds_err_set(err, DS_ENOMEM, "out of memory");
		const float *g = step_grad(e, sg);
		int rc = so->lamb_partial(e->opt[s], e->hstep ? sg->m_step : sg->p_upd, g, grad_mul, sg->lamb, sg->nlamb,
					  sums, err);
		for (int k = 0; rc == 0 && k < sg->nlamb; k++) {
			e->lamb_sums[2 * sg->lamb_tensor[k]] += sums[2 * k];
			e->lamb_sums[2 * sg->lamb_tensor[k] + 1] += sums[2 * k + 1];
		}
		if (sums != local)
			free(sums);
		DS_TRY(rc);
	}
	/* the dense tensors' partial norms over the world, the experts' over
	 * their expert-data-parallel group */
	if (sharded(e))
		DS_TRY(ds_comm_allreduce(e->comm, e->lamb_sums, 2 * (size_t)e->ntd, DS_F64, DS_SUM, err));
	if (nt > e->ntd && seg_sharded(e, &e->seg[e->nseg - 1]))
		DS_TRY(ds_comm_allreduce(e->seg[e->nseg - 1].comm, e->lamb_sums + 2 * e->ntd, 2 * (size_t)(nt - e->ntd),
					 DS_F64, DS_SUM, err));
	if (e->o.tp > 1) {
		/* a split tensor's norms over its shards; a replicated one's once */
		for (int i = 0; i < nt; i++)
			if (ds_gpt_tensor(e->model, i)->split == DS_TP_NONE && e->topo.tp_rank > 0)
				e->lamb_sums[2 * i] = e->lamb_sums[2 * i + 1] = 0;
		DS_TRY(ds_comm_allreduce(e->grp.tp, e->lamb_sums, 2 * (size_t)nt, DS_F64, DS_SUM, err));
	}
	for (int s = 0; s < e->nseg; s++) {
		struct seg *sg = &e->seg[s];
		double *sums = sg->nlamb <= 64 ? local : calloc(2 * (size_t)sg->nlamb, sizeof(double));
		if (!sums)
			return ds_err_set(err, DS_ENOMEM, "out of memory");
		for (int k = 0; k < sg->nlamb; k++) {
			sums[2 * k] = e->lamb_sums[2 * sg->lamb_tensor[k]];
			sums[2 * k + 1] = e->lamb_sums[2 * sg->lamb_tensor[k] + 1];
		}
		int rc = so->lamb_apply(e->opt[s], e->hstep ? sg->m_step : sg->p_upd, sg->lamb, sg->nlamb, sums, err);
		if (sums != local)
			free(sums);
		DS_TRY(rc);
		if (e->hstep)
			step_put(e, sg, 0, 0);
	}
	return e->hstep ? e->ops->check(err) : 0;
}

/* Allgather a padded segment of W equal shards at base (rank r's shard at
 * r * shard, element size es) in rounds of allgather_bucket_size elements
 * (DeepSpeed: each round moves bucket / W elements of every shard).  A
 * round lands back to back in a staging buffer and is copied into place;
 * the staging buffer is gradient memory, free between the optimizer step
 * and the next step's zeroing: the whole gradients at stage 1, a gradient
 * gather slot at stage 2.  Without a bucket smaller than the segment (or
 * without staging room), one allgather in place.  This rank sends from
 * element send_off (its shard; moved by the test-only shard-shift fault). */
static int gather_chunked(struct ds_engine *e, const struct seg *sg, void *base, int64_t shard, int64_t send_off,
			  int dtype, size_t es, struct ds_err *err)
{
	const int W = sg->gW;
	char *b = base, *stage = NULL;
	int64_t c = e->o.allgather_bucket_size > 0 ? e->o.allgather_bucket_size / W : shard, cap = 0;
	if (c < 1)
		c = 1;
	if (c < shard) {
		int whole = 1;
		for (int s = 0; s < e->nseg; s++)
			whole &= e->seg[s].gfull;
		if (whole && e->g16)
			stage = (char *)e->gh, cap = e->gtotal * (int64_t)sizeof(uint16_t);
		else if (whole)
			stage = (char *)e->grads, cap = e->gtotal * (int64_t)sizeof(float);
		else if (e->gs[0].buf)
			stage = (char *)e->gs[0].buf, cap = e->maxpad * (int64_t)sizeof(float);
		if ((int64_t)W * c * (int64_t)es > cap)
			stage = NULL;
	}
	if (!stage)
		return ds_comm_allgather(sg->comm, b + (size_t)send_off * es, b, (size_t)shard, dtype, err);
	for (int64_t o = 0; o < shard; o += c) {
		int64_t n = shard - o < c ? shard - o : c;
		DS_TRY(ds_comm_allgather(sg->comm, b + (size_t)(send_off + o) * es, stage, (size_t)n, dtype, err));
		for (int r = 0; r < W; r++)
			if (r != sg->grank)
				e->ops->copy(b + (size_t)(r * shard + o) * es, stage + (size_t)(r * n) * es, (size_t)n * es);
	}
	return 0;
}

/* Stages >= 1: every rank updated its slice; gather the full parameters
 * (fp32 runs; a partitioned master has nothing to gather here). */
static int gather_params(struct ds_engine *e, struct ds_err *err)
{
	for (int s = 0; s < e->nseg; s++) {
		struct seg *sg = &e->seg[s];
		if (!seg_sharded(e, sg) || !sg->mfull)
			continue;  /* whole here, or the slice is all this rank keeps */
		DS_TRY(gather_chunked(e, sg, seg_par(e, sg), sg->shard, sg->u0, DS_F32, sizeof(float), err));
	}
	return 0;
}

/* fp16/bf16 at stages 1-2 (W > 1): refresh_half rounded the owned master
 * slice into its place in the whole 16-bit segment; gather the other
 * ranks' 16-bit slices (half the bytes of an fp32 allgather) */
static int gather_half(struct ds_engine *e, struct ds_err *err)
{
	for (int s = 0; s < e->nseg; s++) {
		struct seg *sg = &e->seg[s];
		uint16_t *base = seg_p16(e, sg);
		if (sg->mfull || !sg->pfull)
			continue;
		DS_TRY(gather_chunked(e, sg, base, sg->shard, (int64_t)sg->grank * sg->shard, e->hdtype, sizeof(uint16_t),
				      err));
	}
	return 0;
}

/* ZeRO-Offload, fp32: the host copy of each update range from the model
 * on the device (after a load wrote the device's) */
static int pull_master(struct ds_engine *e, struct ds_err *err)
{
	if (!e->hstep || e->half)
		return 0;
	for (int s = 0; s < e->nseg; s++)
		if (e->seg[s].un && !e->seg[s].phost)
			e->ops->to_host(e->seg[s].m_step, e->seg[s].p_upd, (size_t)e->seg[s].un * sizeof(float));
	return e->ops->check(err);
}

int ds_engine_params_loaded(struct ds_engine *e, struct ds_err *err)
{
	if (e->off)  /* the last piece a load wrote goes to its swap files */
		DS_TRY(ds_offload_ckpt_flush(e->off, err));
	ck_done(e);   /* ... or to the backend's memory */
	DS_TRY(pull_master(e, err));
	DS_TRY(refresh(e, err));
	return e->half ? gather_half(e, err) : 0;
}

int ds_engine_sync_params(struct ds_engine *e, struct ds_err *err)
{
	if (e->off)
		DS_TRY(ds_offload_ckpt_flush(e->off, err));
	ck_done(e);
	DS_TRY(pull_master(e, err));
	DS_TRY(gather_params(e, err));
	DS_TRY(refresh(e, err));
	return e->half ? gather_half(e, err) : 0;
}

static void split_rows(struct ds_engine *e, const int32_t *rows, int n)
{
	const int T = e->T;
	for (int b = 0; b < n; b++) {
		memcpy(e->in + (size_t)b * T, rows + (size_t)b * (T + 1), (size_t)T * sizeof(int32_t));
		memcpy(e->tg + (size_t)b * T, rows + (size_t)b * (T + 1) + 1, (size_t)T * sizeof(int32_t));
	}
}

/* The GA micro-steps of one step: forward and backward on this rank's
 * rows (the loss scaled by scale/GA before backward), gradients held and,
 * through the hooks, reduced per segment or bucket.  *loss_sum: the sum of
 * the micro-steps' losses. */
static int micro_steps(struct ds_engine *e, const struct ds_engine_batch *in, double scale, double *loss_sum,
		       struct ds_engine_step *res, struct ds_err *err)
{
	const int MB = e->o.micro_batch, GA = e->o.grad_accum, T = e->T;
	double t0;
	int rc;
	*loss_sum = 0;
	if (e->o.pp > 1) {   /* the micro-batches as the stages' 1F1B schedule */
		rc = ds_pipe_train(&e->pr, in->tokens, in->base, in->step, (float)(scale / GA), loss_sum, err);
		res->t_fwd += e->pr.t_fwd;
		res->t_bwd += e->pr.t_bwd;
		res->t_p2p += e->pr.t_p2p;
		return rc < 0 ? pass_failed(e, rc, err) : 0;
	}
	for (int a = 0; a < GA; a++) {
		float loss;
		int64_t offset = in->base + (int64_t)a * MB * e->W + (int64_t)e->rank * MB;
		split_rows(e, in->tokens + (size_t)a * MB * (T + 1), MB);
		t0 = ds_now();
		if ((rc = ds_gpt_forward(e->model, e->ws, NULL, e->in, e->tg, MB, T, in->step, offset, 1, &loss, err)) < 0)
			return pass_failed(e, rc, err);
		res->t_fwd += ds_now() - t0;
		if ((e->last_micro = a == GA - 1) && e->nbuckets && e->reduce_on) {
			e->bnext = e->nbuckets - 1;
			e->ready_seg = e->nseg - 1;
			e->ready_from = e->total;
			memset(e->seg_done, 0, (size_t)e->nseg);
		}
		t0 = ds_now();
		/* fp16: the loss is multiplied by the scale before backward */
		if ((rc = ds_gpt_backward(e->model, e->ws, NULL, NULL, (float)(scale / GA), err)) < 0)
			return pass_failed(e, rc, err);
		res->t_bwd += ds_now() - t0;
		*loss_sum += loss;
		struct ds_moe_stats ms;
		ds_gpt_ws_moe_stats(e->ws, &ms);
		e->moe.aux += ms.aux;
		e->moe.dropped += ms.dropped;
		e->moe.routed += ms.routed;
		e->moe.a2a_floats += ms.a2a_floats;
	}
	return 0;
}

/* DS_TEST_INJECT_INF_STEP (top of this file): rank 0, which owns element
 * 0, writes +inf into its first held gradient. */
static void inject_inf(struct ds_engine *e, int64_t step)
{
	if (!(e->inject_step > 0 && step >= e->inject_step && step < e->inject_step + e->inject_n && e->rank == 0))
		return;
	if (e->g16) {   /* packed here, written into the backend's memory */
		const float inf = INFINITY;
		uint16_t h;
		ds_half_pack_n(e->half, &h, &inf, 1);
		e->ops->from_host(e->gh, &h, sizeof h);
	} else {
		const float inf = INFINITY;
		e->ops->from_host(e->grads, &inf, sizeof inf);
	}
}

/* What the gradients are multiplied by before the optimizer: with fp16
 * scaling DeepSpeed's unscale_and_clip_grads, 1 / (scale * max(1, (norm /
 * scale + 1e-6) / clip)); else clipping's min(1, clip / (norm + 1e-6))
 * (spec §6).  scaled_norm: the norm of the scaled gradients. */
static float grad_multiplier(const struct ds_engine *e, double scaled_norm, const struct ds_engine_step *res)
{
	float grad_mul = 1.0f;
	if (e->scaler.kind != DS_SCALER_NONE) {
		double combined = e->scaler.cur_scale;
		if (e->o.gradient_clipping > 0) {
			double c = (scaled_norm / e->scaler.cur_scale + 1e-6) / e->o.gradient_clipping;
			if (c > 1)
				combined *= c;
		}
		grad_mul = (float)(1.0 / combined);
	} else if (e->o.gradient_clipping > 0) {
		double c = e->o.gradient_clipping / (res->grad_norm + 1e-6);
		if (c < 1)
			grad_mul = (float)c;
	}
	return grad_mul;
}

/* The optimizer on this rank's ranges with the step's lr (and betas),
 * then the updated slices gathered back and the 16-bit copy refreshed. */
static int update(struct ds_engine *e, const struct ds_engine_batch *in, float grad_mul, struct ds_err *err)
{
	if (e->ob)
		ds_engine_onebit_set_lr(e->ob, in->lr, in->has_betas, in->beta1, in->beta2);
	for (int s = 0; s < e->nseg && !e->ob; s++) {
		e->opt[s]->hp.lr = in->lr;
		if (in->has_betas) {
			e->opt[s]->hp.beta1 = in->beta1;
			e->opt[s]->hp.beta2 = in->beta2;
		}
	}
	if (e->off_opt) {
		/* ZeRO-Infinity: the master and states stream from their swap
		 * files, and each sub-group's 16-bit copy is refreshed on the way */
		int64_t t = e->opt[0]->step + 1;
		DS_TRY(ds_offload_step(e->off, &e->opt[0]->hp, t, grad_mul, err));
		for (int s = 0; s < e->nseg; s++)
			e->opt[s]->step = t;
	} else {
		DS_TRY(optimizer_step(e, grad_mul, err));
	}
	DS_TRY(gather_params(e, err));
	if (!e->off_opt && !e->hstep)   /* (ZeRO-Offload's step sent its 16-bit copy) */
		DS_TRY(refresh(e, err));
	if (e->half)
		DS_TRY(gather_half(e, err));
	return 0;
}

/* ReduceTiedGrads: the first and the last stage sum the tied embedding's
 * gradient (wte, at the start of segment 0; whole there, ZeRO 0-1) */
static int reduce_tied(struct ds_engine *e, struct ds_err *err)
{
	if (!e->tie || e->skip_tied)
		return 0;
	const struct seg *sg = &e->seg[0];
	const int64_t n = ds_gpt_tensor(e->model, ds_gpt_find(e->model, "transformer.wte.weight"))->numel;
	if (e->g16)
		return ds_comm_allreduce(e->grp.tie, e->gh + sg->goff, (size_t)n, e->hdtype, DS_SUM, err);
	return ds_comm_allreduce(e->grp.tie, e->grads + sg->goff, (size_t)n, DS_F32, DS_SUM, err);
}

/* 3D: whether this rank's loss counts (the last stage's tensor-parallel
 * rank 0: every rank of a tensor-parallel group has the same loss) */
static int loss_counts(const struct ds_engine *e)
{
	return e->part.head && e->topo.tp_rank == 0;
}

/* ZeRO-Infinity: what the swap files moved during the step */
static void swap_stats(struct ds_engine *e, struct ds_engine_step *res)
{
	struct ds_offload_stats st;
	if (!e->off)
		return;
	ds_offload_take_stats(e->off, &st);
	res->swap_read = st.bytes_read;
	res->swap_written = st.bytes_written;
	res->t_swap_wait = st.wait_s;
	res->t_swap_read_busy = st.busy_read_s;
	res->t_swap_write_busy = st.busy_write_s;
	res->t_swap_io_busy = st.busy_io_s;
}

int ds_engine_train_step(struct ds_engine *e, const struct ds_engine_batch *in, struct ds_engine_step *res,
			 struct ds_err *err)
{
	const int GA = e->o.grad_accum;
	const int scaling = e->scaler.kind != DS_SCALER_NONE;
	const double prev_scale = scaling ? e->scaler.cur_scale : 1.0;
	double t0, loss_sum;
	memset(res, 0, sizeof *res);
	if (!e->ops->host)
		ck_done(e);   /* a device run's last checkpoint piece is written back */
	if (e->rank == e->fail_rank && in->step == e->fail_step)
		return ds_err_set(err, DS_EIO, "rank %d: step %lld: planted failure (DS_TEST_FAULT_FAIL_RANK)", e->rank,
				  (long long)in->step);
	if (e->off) {  /* a checkpoint's last piece is done with; the step's I/O counts from here */
		DS_TRY(ds_offload_ckpt_flush(e->off, err));
		e->ck_i = -1;
		swap_stats(e, res);
		memset(res, 0, sizeof *res);
	}
	if (e->g16)
		e->ops->zero(e->gh, (size_t)e->gtotal * sizeof(uint16_t));  /* +0 in fp16 and bf16 */
	else
		e->ops->zero(e->grads, (size_t)e->gtotal * sizeof(float));
	e->red_flight = e->red_wait = 0;
	e->reduce_on = !e->ob || ds_onebit_reduce_next(ds_engine_onebit_optim(e->ob));
	memset(&e->moe, 0, sizeof e->moe);
	DS_TRY(micro_steps(e, in, prev_scale, &loss_sum, res, err));

	/* reduce (the tied embedding between its stages first); then one
	 * allreduce of the squared norm of the owned slices, the non-finite
	 * flag and the loss makes them global (over the world with 3D
	 * parallelism, each logical element and the loss counted once;
	 * without the reduction the norm stays this rank's own) */
	t0 = ds_now();
	DS_TRY(reduce_tied(e, err));
	if (e->reduce_on)
		DS_TRY(reduce_grads(e, err));
	inject_inf(e, in->step);
	int bad;
	double stat[2] = { owned_sumsq(e, &bad), 0 };
	stat[1] = bad;
	double lsum = loss_sum / GA;
	double mv[3] = { e->moe.aux / GA, (double)e->moe.dropped, (double)e->moe.routed };
	if (e->par) {   /* (no MoE layers: refused with tensor or pipeline parallelism) */
		double v[3] = { stat[0], stat[1], loss_counts(e) ? lsum : 0 };
		DS_TRY(ds_comm_allreduce(e->world, v, 3, DS_F64, DS_SUM, err));
		stat[0] = v[0];
		stat[1] = v[1];
		lsum = v[2] / e->W;
	} else if (e->W > 1) {
		/* an MoE model's statistics ride along (a dense model's is DeepSpeed's 3) */
		double v[6] = { e->reduce_on ? stat[0] : 0, stat[1], lsum, mv[0], mv[1], mv[2] };
		const int nv = e->opts_moe ? 6 : 3;
		DS_TRY(ds_comm_allreduce(e->comm, v, (size_t)nv, DS_F64, DS_SUM, err));
		if (e->reduce_on)
			stat[0] = v[0];
		stat[1] = v[1];
		lsum = v[2] / e->W;
		mv[0] = v[3];
		mv[1] = v[4];
		mv[2] = v[5];
	}
	res->moe_aux = mv[0] / e->W;
	res->moe_dropped = mv[2] > 0 ? mv[1] / mv[2] : 0;
	res->moe_a2a_bytes = (double)e->moe.a2a_floats * sizeof(float);
	res->t_reduce = ds_now() - t0;
	res->t_red_flight = e->red_flight;
	res->t_red_wait = e->red_wait;
	res->loss = lsum;
	res->lr = in->lr;
	const double scaled_norm = sqrt(stat[0]);
	const int nonfinite = stat[1] > 0 || !isfinite(scaled_norm);
	/* fp16: the scaler sees the global overflow flag before unscaling
	 * (spec §5), so a growing scale divides these gradients by the new
	 * scale; the norm is reported with the scale they were made with */
	if (e->scaler.kind == DS_SCALER_DYNAMIC || e->scaler.kind == DS_SCALER_FP16_OPT) {
		DS_TRY(ds_scaler_update(&e->scaler, nonfinite, err));
		res->overflow = nonfinite;
	}
	res->loss_scale = scaling ? e->scaler.cur_scale : 1.0;
	res->grad_norm = scaled_norm / prev_scale;
	/* the optimizer rewrites what the parameter buffers hold */
	if (e->off)
		DS_TRY(ds_offload_param_idle(e->off, err));
	if (nonfinite) {
		res->skipped = 1;
		swap_stats(e, res);
		return 0;
	}
	const float grad_mul = grad_multiplier(e, scaled_norm, res);
	t0 = ds_now();
	DS_TRY(update(e, in, grad_mul, err));
	DS_TRY(e->ops->check(err));   /* the backend's first failure since the passes' */
	res->t_step = ds_now() - t0;
	e->steps++;
	swap_stats(e, res);
	return 0;
}

int ds_engine_eval(struct ds_engine *e, const int32_t *tokens, int rows, double *loss, struct ds_err *err)
{
	const int MB = e->o.micro_batch, T = e->T;
	double v[2] = { 0, 0 };
	if (!e->ops->host)
		ck_done(e);
	if (e->o.pp > 1) {
		int rc = ds_pipe_eval(&e->pr, tokens, rows, &v[0], &v[1], err);
		if (rc < 0)
			return pass_failed(e, rc, err);
	}
	for (int r = 0; e->o.pp == 1 && r < rows; r += MB) {
		int n = rows - r < MB ? rows - r : MB;
		float l;
		split_rows(e, tokens + (size_t)r * (T + 1), n);
		int rc = ds_gpt_forward(e->model, e->ws, NULL, e->in, e->tg, n, T, 0, 0, 0, &l, err);
		if (rc < 0)
			return pass_failed(e, rc, err);
		v[0] += (double)l * n;
		v[1] += n;
	}
	if (e->par) {   /* each data-parallel replica's last stage, once per tensor-parallel group */
		if (!loss_counts(e))
			v[0] = v[1] = 0;
		DS_TRY(ds_comm_allreduce(e->world, v, 2, DS_F64, DS_SUM, err));
	} else if (e->W > 1) {
		DS_TRY(ds_comm_allreduce(e->comm, v, 2, DS_F64, DS_SUM, err));
	}
	*loss = v[1] > 0 ? v[0] / v[1] : 0;
	return 0;
}

/* ---- checkpoint accessors ---------------------------------------------- */

static int64_t tensor_local(const struct ds_engine *e, int i, const struct seg **sg)
{
	const struct ds_gpt_tensor *t = ds_gpt_tensor(e->model, i);
	*sg = &e->seg[t->segment];
	return t->offset - ds_gpt_segment(e->model, t->segment)->offset;
}

static void intersect(int64_t a, int64_t n, int64_t lo, int64_t len, int64_t *b, int64_t *en);

/* ZeRO-Infinity: tensor i's part of its segment's update range,
 * range-local [*ta, *tb); returns the segment */
static int upd_part(const struct ds_engine *e, int i, int64_t *ta, int64_t *tb)
{
	const struct seg *sg;
	int64_t a = tensor_local(e, i, &sg), b, en;
	intersect(a, ds_gpt_tensor(e->model, i)->numel, sg->u0, sg->un, &b, &en);
	*ta = a + b - sg->u0;
	*tb = a + en - sg->u0;
	return ds_gpt_tensor(e->model, i)->segment;
}

int ds_engine_ckpt_pieces(struct ds_engine *e, int i)
{
	int64_t ta, tb;
	if (!e->off)
		return 1;
	int s = upd_part(e, i, &ta, &tb);
	return ds_offload_ckpt_pieces(e->off, s, ta, tb);
}

int ds_engine_ckpt_piece(struct ds_engine *e, int i, int j, int writing, struct ds_err *err)
{
	int64_t ta, tb;
	if (!e->ops->host) {   /* (no offload here: check_backend) */
		ck_done(e);
		int rc = ck_stage(e, i, writing, err);
		if (rc == 0) {
			e->ck_i = i;
			e->ck_j = j;
		}
		return rc;
	}
	e->ck_i = i;
	e->ck_j = j;
	if (!e->off)
		return 0;
	int s = upd_part(e, i, &ta, &tb);
	int rc = ds_offload_ckpt_piece(e->off, s, ta, tb, j, writing, &e->ck_a, &e->ck_b, err);
	if (rc < 0)
		e->ck_i = -1;
	return rc;
}

/* the accessors of tensor i show the current piece (its segment has
 * something in swap files) */
static int piecewise(const struct ds_engine *e, int i)
{
	return e->off && ds_offload_swapped(e->off, ds_gpt_tensor(e->model, i)->segment);
}

/* the current piece of tensor i (tensor coordinates), or empty; a the
 * tensor's segment-local offset */
static void piece_range(const struct ds_engine *e, int i, const struct seg *sg, int64_t a, int64_t *begin,
			int64_t *end)
{
	*begin = *end = 0;
	if (e->ck_i == i && e->ck_b > e->ck_a) {
		*begin = sg->u0 + e->ck_a - a;
		*end = sg->u0 + e->ck_b - a;
	}
}

static float *param_range_raw(struct ds_engine *e, int i, int64_t *begin, int64_t *end);
static float *state_raw(struct ds_engine *e, int i, const char *name, int64_t *begin, int64_t *end);

/* ---- a non-host backend's checkpoint pieces: tensor i staged in host
 * memory (ck_host) by ds_engine_ckpt_piece and written back after ---- */

/* the backend's memory of slot k of tensor i (0: parameters, 1 + k':
 * state k') and its range */
static float *slot_raw(struct ds_engine *e, int i, int k, int64_t *b, int64_t *en)
{
	return k == 0 ? param_range_raw(e, i, b, en) : state_raw(e, i, ds_engine_state_name(e, k - 1), b, en);
}

static int nslots(const struct ds_engine *e) { return 1 + ds_engine_num_states(e); }

/* slot k of tensor i is host memory (ZeRO-Offload: the states, a 16-bit
 * run's master; offload_param cpu: an fp32 run's parameters) */
static int slot_on_host(const struct ds_engine *e, int i, int k)
{
	return e->hstep && (k > 0 || e->half || e->seg[ds_gpt_tensor(e->model, i)->segment].phost);
}

/* the current piece back into the backend's memory (when it was written) */
static void ck_unstage(struct ds_engine *e)
{
	if (e->ops->host || e->ck_i < 0 || !e->ck_write)
		return;
	const int64_t n = ds_gpt_tensor(e->model, e->ck_i)->numel;
	for (int k = 0; k < nslots(e); k++) {
		int64_t b, en;
		float *d = slot_raw(e, e->ck_i, k, &b, &en);
		if (d && en > b && slot_on_host(e, e->ck_i, k))
			memcpy(d, e->ck_host + k * n + b, (size_t)(en - b) * sizeof(float));
		else if (d && en > b)
			e->ops->from_host(d, e->ck_host + k * n + b, (size_t)(en - b) * sizeof(float));
	}
	e->ck_write = 0;
}

static int ck_stage(struct ds_engine *e, int i, int writing, struct ds_err *err)
{
	const int64_t n = ds_gpt_tensor(e->model, i)->numel, need = nslots(e) * n;
	if (need > e->ck_cap) {
		float *h = realloc(e->ck_host, (size_t)need * sizeof(float));
		if (!h)
			return ds_err_set(err, DS_ENOMEM, "out of memory staging tensor %d for a checkpoint", i);
		e->ck_host = h;
		e->ck_cap = need;
	}
	for (int k = 0; k < nslots(e); k++) {
		int64_t b, en;
		const float *d = slot_raw(e, i, k, &b, &en);
		if (d && en > b && slot_on_host(e, i, k))
			memcpy(e->ck_host + k * n + b, d, (size_t)(en - b) * sizeof(float));
		else if (d && en > b)
			e->ops->to_host(e->ck_host + k * n + b, d, (size_t)(en - b) * sizeof(float));
	}
	e->ck_write = writing;
	return e->ops->check(err);
}

/* a checkpoint's pieces are done with (before a step, an evaluation, or
 * when the load has written everything) */
static void ck_done(struct ds_engine *e)
{
	ck_unstage(e);
	e->ck_i = -1;
}

/* what an accessor shows of slot k: the host copy while tensor i is the
 * current piece, else nothing */
static float *staged(struct ds_engine *e, int i, int k, float *raw, int64_t *begin, int64_t *end)
{
	if (e->ops->host)
		return raw;
	if (!raw || e->ck_i != i) {
		*begin = *end = 0;
		return NULL;
	}
	return e->ck_host + k * ds_gpt_tensor(e->model, i)->numel + *begin;
}

float *ds_engine_param(struct ds_engine *e, int i)
{
	const struct seg *sg;
	int64_t a = tensor_local(e, i, &sg);
	float *p = sg->mfull && sg->numel && !sg->mnv ? seg_par(e, sg) + a : NULL;
	if (e->ops->host)
		return p;
	return p && e->ck_i == i ? e->ck_host : NULL;
}

int ds_engine_param_partitioned(const struct ds_engine *e, int i)
{
	return !e->seg[ds_gpt_tensor(e->model, i)->segment].mfull;
}

float *ds_engine_param_range(struct ds_engine *e, int i, int64_t *begin, int64_t *end)
{
	return staged(e, i, 0, param_range_raw(e, i, begin, end), begin, end);
}

static float *param_range_raw(struct ds_engine *e, int i, int64_t *begin, int64_t *end)
{
	const struct seg *sg;
	int64_t a = tensor_local(e, i, &sg);
	if (!sg->numel) {   /* another pipeline stage's */
		*begin = *end = 0;
		return NULL;
	}
	float *p;
	if (sg->mnv) {  /* in the swap file: the piece in the window */
		piece_range(e, i, sg, a, begin, end);
		return *end > *begin ? ds_offload_ckpt_master(e->off, ds_gpt_tensor(e->model, i)->segment, e->ck_a) : NULL;
	}
	if (sg->mfull) {
		*begin = 0;
		*end = ds_gpt_tensor(e->model, i)->numel;
		p = seg_par(e, sg) + a;
	} else {
		int64_t lo = (int64_t)sg->grank * sg->shard;
		intersect(a, ds_gpt_tensor(e->model, i)->numel, lo, sg->shard, begin, end);
		p = seg_par(e, sg) + (a + *begin - lo);
	}
	if (piecewise(e, i) && !(e->ck_i == i && e->ck_j == 0))
		*end = *begin;  /* in memory: whole with piece 0, empty with the others */
	return p;
}

static void intersect(int64_t a, int64_t n, int64_t lo, int64_t len, int64_t *b, int64_t *en)
{
	int64_t x = a > lo ? a : lo, y = a + n < lo + len ? a + n : lo + len;
	if (y < x)
		y = x;
	*b = x - a;
	*en = y - a;
}

void ds_engine_save_slice(const struct ds_engine *e, int i, int64_t *begin, int64_t *end)
{
	const struct seg *sg;
	int64_t a = tensor_local(e, i, &sg);
	const struct ds_gpt_tensor *t = ds_gpt_tensor(e->model, i);
	if (!sg->numel || (t->segment == 0 && e->tie_copy) || (t->split == DS_TP_NONE && e->topo.tp_rank > 0)) {
		*begin = *end = 0;   /* written by the rank that owns it */
		return;
	}
	if (e->ob && ds_onebit_rank_local(ds_engine_onebit_optim(e->ob))) {
		/* ranks' weights differ (0/1 Adam's local steps): rank 0's */
		*begin = 0;
		*end = e->rank == 0 ? t->numel : 0;
		return;
	}
	intersect(a, t->numel, (int64_t)sg->grank * sg->shard, sg->shard, begin, end);
}

float *ds_engine_state(struct ds_engine *e, int i, const char *name, int64_t *begin, int64_t *end)
{
	float *p = state_raw(e, i, name, begin, end);
	if (e->ops->host)
		return p;
	for (int k = 0; k < ds_engine_num_states(e); k++)
		if (!strcmp(ds_engine_state_name(e, k), name))
			return staged(e, i, 1 + k, p, begin, end);
	return NULL;
}

static float *state_raw(struct ds_engine *e, int i, const char *name, int64_t *begin, int64_t *end)
{
	const struct seg *sg;
	int64_t a = tensor_local(e, i, &sg);
	int s = ds_gpt_tensor(e->model, i)->segment;
	if (e->ob) {  /* whole-model states in the flat layout */
		float *fl = ds_onebit_state(ds_engine_onebit_optim(e->ob), name);
		*begin = 0;
		*end = ds_gpt_tensor(e->model, i)->numel;
		return fl ? fl + sg->off + a : NULL;
	}
	float *st = ds_optim_state(e->opt[s], name);
	if (!st && sg->numel && e->off_opt) {  /* in its swap file: the piece in the window */
		for (int k = 0; k < e->opt[s]->nstates; k++)
			if (!strcmp(e->opt[s]->state_names[k], name)) {
				piece_range(e, i, sg, a, begin, end);
				return *end > *begin ? ds_offload_ckpt_state(e->off, s, k, e->ck_a) : NULL;
			}
	}
	if (!st || !sg->numel) {
		*begin = *end = 0;
		return NULL;
	}
	intersect(a, ds_gpt_tensor(e->model, i)->numel, sg->u0, sg->un, begin, end);
	/* pointer to element *begin of the tensor inside the state slice */
	return st + (a + *begin - sg->u0);
}

int ds_engine_num_states(const struct ds_engine *e)
{
	return e->ob ? ds_onebit_num_states(ds_engine_onebit_optim(e->ob)) : e->opt[0]->nstates;
}

const char *ds_engine_state_name(const struct ds_engine *e, int k)
{
	return e->ob ? ds_onebit_state_name(ds_engine_onebit_optim(e->ob), k) : e->opt[0]->state_names[k];
}

struct ds_onebit *ds_engine_onebit(struct ds_engine *e) { return e->ob ? ds_engine_onebit_optim(e->ob) : NULL; }

const struct ds_scaler *ds_engine_scaler(const struct ds_engine *e) { return &e->scaler; }
void ds_engine_set_scaler(struct ds_engine *e, const struct ds_scaler *s) { e->scaler = *s; }

void ds_engine_set_steps(struct ds_engine *e, int64_t steps)
{
	e->steps = steps;
	if (e->ob)
		ds_onebit_set_steps(ds_engine_onebit_optim(e->ob), steps);
	for (int s = 0; s < e->nseg && !e->ob; s++)
		e->opt[s]->step = steps;
}

size_t ds_engine_state_bytes(const struct ds_engine *e)
{
	size_t b = (size_t)e->ptotal * sizeof(float) + (size_t)e->gtotal * (e->g16 ? sizeof(uint16_t) : sizeof(float));
	if (!e->half)
		b += (size_t)e->hptotal * sizeof(float);   /* offload_param cpu's */
	if (e->half)
		b += (size_t)(e->htotal + e->hptotal) * sizeof(uint16_t);  /* the 16-bit model copy (offloaded too) */
	for (int s = 0; s < e->nseg && !e->ob; s++)   /* (an empty range still allocates one element, as ds_optim_create does) */
		if (e->opt[s]->nstates && e->opt[s]->states[0])  /* not in swap files */
			b += (size_t)e->opt[s]->nstates * (size_t)(e->seg[s].un ? e->seg[s].un : 1) * sizeof(float);
	if (e->ob)
		b += ds_onebit_state_bytes(ds_engine_onebit_optim(e->ob));
	return b + e->hextra;   /* ZeRO-Offload's host copy and staging */
}

size_t ds_engine_pinned_bytes(const struct ds_engine *e) { return e->pinned; }

size_t ds_engine_activation_bytes(const struct ds_engine *e)
{
	size_t b = e->pr.bytes;   /* the pipeline buffers */
	for (int k = 0; k < e->nws; k++)
		b += ds_gpt_ws_bytes(e->wss[k]);
	return b;
}

size_t ds_engine_swap_buffer_bytes(const struct ds_engine *e)
{
	return e->off ? ds_offload_get_plan(e->off)->pinned_bytes : 0;
}

uint64_t ds_engine_nvme_bytes(const struct ds_engine *e)
{
	return e->off ? ds_offload_get_plan(e->off)->nvme_bytes : 0;
}
