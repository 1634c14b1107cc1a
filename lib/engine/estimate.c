/* estimate.c - per-rank memory of a ds-train run (see estimate.h).  The
 * arithmetic mirrors ds_engine_create's allocations one by one; a test
 * (tests/unit/test_estimate, tests/mpi/memory.bats) holds the two to the
 * same bytes. */
#include "engine/estimate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/offload.h"
#include "engine/pipe.h"
#include "engine/schedule.h"
#include "comm/comm.h"
#include "model/gpt.h"
#include "model/pipe.h"
#include "optim/onebit.h"

#define F32 ((size_t)sizeof(float))

static const char *const cat_names[DS_MEM_NCAT] = {
	"parameters", "gradients", "optimizer_states", "communication", "activations", "other", "swap_buffers",
};

const char *ds_engine_mem_cat_name(int cat)
{
	return cat >= 0 && cat < DS_MEM_NCAT ? cat_names[cat] : "?";
}

/* States per element of an optimizer of these params (ds_optim_create:
 * SGD keeps a momentum buffer only with momentum != 0, the Adam family two). */
static int optim_states(const struct ds_optim_params *p)
{
	if (p->type == DS_OPTIM_SGD)
		return p->momentum != 0 ? 1 : 0;
	if (p->type == DS_OPTIM_ZERO_ONE_ADAM || p->type == DS_OPTIM_ONEBIT_LAMB)
		return 3;
	return 2;
}

/* The 1-bit family (stage 0): one optimizer over the whole flat buffer
 * (lib/optim/onebit.c's allocations, by ds_onebit_bytes); *comm gets the
 * compressed allreduce's scratch and, for a 16-bit model, the widened
 * gradients (engine_onebit.c). */
static int onebit_bytes(const struct ds_gpt *model, const struct ds_engine_opts *o, int W, size_t total,
			size_t *optim, size_t *comm, struct ds_err *err)
{
	int nt = ds_gpt_num_tensors(model);
	struct ds_onebit_tensor *t = calloc((size_t)(nt ? nt : 1), sizeof *t);
	if (!t)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (int i = 0; i < nt; i++)
		t[i].n = (size_t)ds_gpt_tensor(model, i)->numel;
	*optim = ds_onebit_bytes(o->optim.type, total, t, nt, o->half != DS_HALF_NONE, W, comm);
	if (o->half != DS_HALF_NONE)
		*comm += total * F32;
	free(t);
	return 0;
}

/* ds_engine_create's choices: 16-bit gradients (a 16-bit model accumulating
 * in its dtype) and the 16-bit type the reductions sum in (NONE: fp32) */
static int grads16(const struct ds_engine_opts *o) { return o->half != DS_HALF_NONE && !o->grad_accum_fp32; }

static enum ds_half_kind comm_kind(const struct ds_engine_opts *o)
{
	if (o->half == DS_HALF_NONE)
		return o->comm_half;
	return grads16(o) && !o->comm_fp32 ? o->half : DS_HALF_NONE;
}

int ds_engine_mem_estimate(const struct ds_engine_opts *o, int W, struct ds_engine_mem *m, struct ds_err *err)
{
	const int pp = o->pp > 1 ? o->pp : 1;
	struct ds_engine_mem k;
	DS_TRY(ds_engine_mem_estimate_stage(o, W, 0, m, err));
	for (int s = 1; s < pp; s++) {
		DS_TRY(ds_engine_mem_estimate_stage(o, W, s, &k, err));
		if (k.total > m->total)
			*m = k;
	}
	return 0;
}

int ds_engine_mem_estimate_stage(const struct ds_engine_opts *o, int W, int stage, struct ds_engine_mem *m,
				 struct ds_err *err)
{
	struct ds_gpt *model = NULL;
	memset(m, 0, sizeof *m);
	const int tp = o->tp > 1 ? o->tp : 1, pp = o->pp > 1 ? o->pp : 1;
	if (W < 1)
		return ds_err_set(err, DS_EINVAL, "memory estimate: world size %d must be >= 1", W);
	if (W % (tp * pp))
		return ds_err_set(err, DS_EINVAL, "world size %d is not a multiple of tensor-parallel size %d x "
				  "pipeline-parallel size %d; start tp x pp x dp ranks", W, tp, pp);
	if (stage < 0 || stage >= pp)
		return ds_err_set(err, DS_EINVAL, "memory estimate: pipeline stage %d of %d", stage, pp);
	if (o->zero_stage < 0 || o->zero_stage > 3)
		return ds_err_set(err, DS_EINVAL, "zero_optimization.stage %d: must be 0, 1, 2 or 3", o->zero_stage);
	if (o->micro_batch < 1 || o->grad_accum < 1)
		return ds_err_set(err, DS_EINVAL, "micro batch %d and gradient accumulation %d must be >= 1",
				  o->micro_batch, o->grad_accum);
	if (pp > 1 && o->zero_stage >= 2)
		return ds_err_set(err, DS_EINVAL, "zero_optimization.stage %d with pipeline parallelism: ZeRO-2 and "
				  "ZeRO-3 are incompatible with pipeline parallelism (DeepSpeed's pipeline engine refuses "
				  "them)", o->zero_stage);
	/* MoE: this rank's share of the experts, their segments split over
	 * the expert-data-parallel group of W / ep ranks (engine.h); not
	 * with tensor or pipeline parallelism */
	const int ep = o->model.moe.enabled ? o->model.moe.ep_size : 1;
	if (o->model.moe.enabled && o->zero_stage >= 3)
		return ds_err_set(err, DS_EINVAL, "zero_optimization.stage 3 with MoE layers: DeepSpeed's MoE is not "
				  "supported with ZeRO stage 3 (it refuses the same); use stage 0, 1 or 2");
	if (ds_moe_num_layers(&o->model) > 0 && tp * pp > 1)
		return ds_err_set(err, DS_EINVAL, "MoE layers with tensor or pipeline parallelism (tp %d, pp %d) are not "
				  "supported; use expert parallelism (moe.ep_size) with data parallelism", tp, pp);
	if (ep > 1 && W % ep)
		return ds_err_set(err, DS_EINVAL, "moe.ep_size %d does not divide the world size %d", ep, W);
	if (ds_optim_is_onebit(o->optim.type) && tp * pp > 1)
		return ds_err_set(err, DS_EINVAL, "optimizer %s with tensor or pipeline parallelism (tp %d, pp %d): the "
				  "1-bit optimizers' compressed allreduce runs over the whole world, not a data-parallel "
				  "group, in this build", ds_optim_type_name(o->optim.type), tp, pp);
	const int world = W;
	W /= tp * pp;   /* ZeRO's ranks: the data-parallel group */
	DS_TRY(ep > 1 ? ds_gpt_create_ep(&model, &o->model, ep, 0, err) : ds_gpt_create_tp(&model, &o->model, tp, 0, err));
	const struct ds_model_config *cfg = ds_gpt_config(model);
	const int T = o->seq_length ? o->seq_length : cfg->seq_length;
	ds_gpt_part_whole(model, &m->part);
	m->pipe_buffers = 1;
	if (pp > 1) {
		int *b = calloc((size_t)pp + 1, sizeof *b);
		int rc = b ? ds_pipe_partition(model, pp, o->pipe_partition, b, err)
			   : ds_err_set(err, DS_ENOMEM, "out of memory");
		if (rc == 0)
			ds_pipe_stage_part(model, b, stage, &m->part);
		free(b);
		if (rc < 0) {
			ds_gpt_destroy(model);
			return rc;
		}
		m->pipe_buffers = ds_pipe_num_buffers(o->grad_accum, pp, stage);
	}
	m->tp = tp;
	m->pp = pp;
	m->dp = W;
	m->pipe_stage = stage;
	const int sharded0 = o->zero_stage >= 1 && W > 1;
	const int zg = o->zero_stage >= 2 && W > 1, zp = o->zero_stage >= 3 && W > 1;
	const int half = o->half != DS_HALF_NONE, g16 = grads16(o);
	const enum ds_half_kind chalf = comm_kind(o);
	const int64_t align = (int64_t)W * 16;
	const int ns = optim_states(&o->optim);
	int64_t mtotal = 0, htotal = 0, gtotal = 0, maxshard = 0, maxpad = 0, maxseg = 0, usum = 0, umax = 1;
	size_t optim = 0;

	m->stage = o->zero_stage;
	m->world_size = world;
	for (int i = 0; i < ds_gpt_num_tensors(model); i++)
		m->num_params += ds_gpt_tensor(model, i)->gnumel;
	m->nseg = ds_gpt_num_segments(model);
	m->nstates = ns;
	const int moe = ds_gpt_num_dense_segments(model) < m->nseg;
	/* ZeRO-Infinity: which segments' parameters and masters are in swap
	 * files, and the plan of the buffers and files (engine/offload.c) */
	int64_t *nm = calloc((size_t)m->nseg + 1, sizeof *nm), *unv = calloc((size_t)m->nseg + 1, sizeof *unv);
	int *pst = calloc((size_t)m->nseg + 1, sizeof *pst), rc = 0;
	struct ds_offload_plan pl;
	if (!nm || !unv || !pst) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	for (int s = 0; s < m->nseg; s++) {
		const int ex = ds_gpt_expert_segment(model, s), gW = ex ? W / ep : W;
		const int64_t galign = ex ? (int64_t)gW * 16 : align;
		/* a pipeline stage holds only the segments its part uses */
		nm[s] = ds_gpt_part_uses(model, &m->part, s) ? ds_gpt_segment(model, s)->numel : 0;
		int64_t padded = (nm[s] + galign - 1) / galign * galign;
		unv[s] = (ex ? o->zero_stage >= 1 && gW > 1 : sharded0) ? padded / gW : padded;
	}
	ds_offload_pstores(o, m->nseg, nm, unv, pst);
	if ((rc = ds_offload_plan(o, m->nseg, unv, pst, &pl, err)) < 0)
		goto out;
	for (int s = 0; s < m->nseg; s++) {
		const int ex = ds_gpt_expert_segment(model, s), gW = ex ? W / ep : W;
		const int64_t galign = ex ? (int64_t)gW * 16 : align;
		const int sharded = ex ? o->zero_stage >= 1 && gW > 1 : sharded0;
		int64_t numel = nm[s];
		int64_t padded = (numel + galign - 1) / galign * galign, shard = padded / gW;
		int pfull = !zp || numel < o->stage3_param_persistence_threshold, gfull = !(zg && gW > 1);
		if (ex)
			m->num_params_expert += numel;
		/* the fp32 master: the owned slice only in 16-bit runs at stages >= 1 */
		int mfull = pfull && !(half && sharded);
		m->padded += padded;
		m->nseg_partitioned += !pfull;
		m->nseg_offloaded += pst[s];
		mtotal += !ds_offload_master_in_memory(o, pst[s]) ? 0 : mfull ? padded : shard;
		htotal += pst[s] ? 0 : pfull ? padded : shard;
		/* offload_param cpu: the engine's phost segments (engine.c
		 * lay_out; an fp32 run's with ZeRO-Offload's host step only) */
		const int phost = (half || o->offload.cpu) && o->offload.param_cpu && o->zero_stage == 3 && numel > 0 &&
				  numel >= o->stage3_param_persistence_threshold;
		if (phost) {
			m->param_host += (size_t)(pfull ? padded : shard) * (half ? sizeof(uint16_t) : F32);
			m->nseg_param_host++;
		}
		gtotal += gfull ? padded : shard;
		if (shard > maxshard)
			maxshard = shard;
		if (padded > maxseg)
			maxseg = padded;
		if ((!pfull || !gfull || half || phost) && padded > maxpad)
			maxpad = padded;
		int64_t un = unv[s];  /* the range this rank's optimizer updates */
		usum += phost && !half ? 0 : un;   /* (an fp32 run's offloaded parameters: stepped in place) */
		if (un > umax)
			umax = un;
		if (!o->offload.optimizer)  /* else its states are in swap files */
			optim += (size_t)ns * (size_t)(un ? un : 1) * F32;
	}
	/* fp16/bf16: the parameters are the 16-bit model copy; the fp32 master
	 * weights count with the optimizer states, as DeepSpeed and the ZeRO
	 * paper count them (K = 12 bytes per element with Adam) */
	size_t ob_comm = 0;
	const int onebit = ds_optim_is_onebit(o->optim.type);
	if (onebit && (rc = onebit_bytes(model, o, W, (size_t)m->padded, &optim, &ob_comm, err)) < 0)
		goto out;
	m->bytes[DS_MEM_PARAMS] = half ? (size_t)htotal * sizeof(uint16_t) : (size_t)mtotal * F32;
	m->bytes[DS_MEM_GRADS] = (size_t)gtotal * (g16 ? sizeof(uint16_t) : F32);
	m->bytes[DS_MEM_OPTIM] = optim + (half ? (size_t)mtotal * F32 : 0);
	m->optim_host = m->bytes[DS_MEM_OPTIM];
	/* ZeRO-Offload on a device (engine.c alloc_host_step): an fp32 run's
	 * host copy of its update ranges (at least one element), a segment's
	 * gradient in fp32 (two where it travels in fp32: one in flight while
	 * the other is stepped) and a 16-bit run's two 16-bit buffers */
	if (o->offload.cpu && o->zero_stage >= 1)
		m->offload_extra = (half ? 0 : (size_t)(usum ? usum : 1) * F32) + (size_t)(g16 ? 1 : 2) * (size_t)umax * F32 +
				   (half ? 2 * (size_t)umax * sizeof(uint16_t) : 0);
	/* reduce-scatter scratch (every stage), 3 parameter gather/prefetch
	 * slots (stage 3), 2 gradient gather slots (stages 2-3); overlap_comm
	 * keeps reductions in flight: 4 gradient slots, each with a receive
	 * buffer of one shard.  fp16/bf16 widen every segment through the
	 * parameter and gradient slots (so they exist at every stage: 2
	 * parameter slots below stage 3, where at most the tied embedding and
	 * one more segment are open) and add 3 16-bit gather slots at stage 3 */
	const int ov = zg && o->overlap_comm;
	m->bytes[DS_MEM_COMM] = (size_t)maxshard * F32 + (size_t)(zp ? 3 : half ? 2 + moe : 0) * (size_t)maxpad * F32 +
				(size_t)(zg || half ? (ov ? 4 : 2) + moe : 0) * (size_t)maxpad * F32 +
				(size_t)(ov ? 4 : 0) * (size_t)maxshard * F32 +
				(size_t)(zp && half ? 3 : 0) * (size_t)maxpad * sizeof(uint16_t) + ob_comm;
	/* communication_data_type fp16/bf16 of an fp32 model (W > 1): the
	 * 16-bit copy of the flat gradients that the buckets reduce in
	 * (stages 0-1), or per gradient slot a 16-bit segment to send and a
	 * 16-bit shard to receive (stages 2-3).  16-bit gradients reduce in
	 * place (stages 0-1) or pack the segment and receive the shard inside
	 * the fp32 gradient slot (stages 2-3): nothing more */
	if (chalf != DS_HALF_NONE && W > 1 && !g16)
		m->bytes[DS_MEM_COMM] += zg ? (size_t)((ov ? 4 : 2) + moe) * (size_t)(maxpad + maxshard) * sizeof(uint16_t)
					    : (size_t)gtotal * sizeof(uint16_t);
	/* 16-bit gradients reduced in fp32 at stages 0-1 (W > 1): one fp32
	 * bucket of reduce_bucket_size elements (at most the whole buffer) */
	if (g16 && chalf == DS_HALF_NONE && W > 1 && !zg) {
		int64_t b = o->reduce_bucket_size > 0 && o->reduce_bucket_size < m->padded ? o->reduce_bucket_size
											   : m->padded;
		m->bytes[DS_MEM_COMM] += (size_t)b * F32;
	}
	size_t saved;
	m->bytes[DS_MEM_ACT] = (size_t)m->pipe_buffers *
			       ds_gpt_activation_bytes_part(cfg, tp, &m->part, o->partition_activations, o->micro_batch, T,
							    o->checkpointing, o->half, &saved);
	m->act_saved = (size_t)m->pipe_buffers * saved;
	if (pp > 1)   /* the pipeline's send and receive buffers */
		m->bytes[DS_MEM_COMM] += ds_pipe_run_bytes(m->pipe_buffers, o->micro_batch, T, cfg->hidden_size);
	/* the engine's inputs and targets of one micro-batch, ds-train's rows
	 * of one optimizer step (T+1 tokens each), and each segment's
	 * optimizer header (ds_optim_create allocates it with ds_alloc) */
	m->bytes[DS_MEM_OTHER] = 2 * (size_t)o->micro_batch * (size_t)T * sizeof(int32_t) +
				 (size_t)o->grad_accum * (size_t)o->micro_batch * (size_t)(T + 1) * sizeof(int32_t) +
				 (size_t)(onebit ? 1 : m->nseg) * sizeof(struct ds_optim);
	m->bytes[DS_MEM_SWAP] = pl.pinned_bytes;
	m->nvme_bytes = pl.nvme_bytes;
	m->nvme_opt_bytes = pl.nvme_opt_bytes;
	m->nvme_param_bytes = pl.nvme_param_bytes;
	m->nvme_master = pl.has_master;
	m->sub_group = pl.nsets ? pl.S : 0;
	m->nsub_groups = pl.nsets ? pl.K : 0;
	m->param_buffer = pl.pbuf_el;
	m->model_state = m->bytes[DS_MEM_PARAMS] + m->bytes[DS_MEM_GRADS] + m->bytes[DS_MEM_OPTIM];
	for (int c = 0; c < DS_MEM_NCAT; c++)
		m->total += m->bytes[c];
	/* offload_param cpu on a device (engine.c alloc_slots): a 16-bit send
	 * slice per gather slot at stage 3 on W > 1, else a 16-bit widening
	 * source per parameter slot */
	m->params_all = m->bytes[DS_MEM_PARAMS];
	m->comm_all = m->bytes[DS_MEM_COMM];
	if (m->param_host) {
		const size_t esz = half ? sizeof(uint16_t) : F32;
		m->param_host_extra = zp ? 3 * (size_t)maxshard * esz : (size_t)(2 + moe) * (size_t)maxpad * esz;
	}
	/* the staged path's pinned pool (ds_engine_mem_place counts it for a
	 * device plan): its largest call on device buffers, the bucket
	 * allreduce (stages 0-1), the gradient reduce-scatter (stages 2-3) and
	 * the allgather of the updated slices (stages >= 1); one pinned buffer
	 * per call in flight with overlap_comm (every bucket at stages 0-1, the
	 * 4 gradient slots at stages 2-3, + a parameter prefetch at stage 3) */
	if (W > 1) {
		const int64_t bk = o->reduce_bucket_size > 0 && o->reduce_bucket_size < m->padded ? o->reduce_bucket_size
												    : m->padded;
		size_t big = 0, nb = (size_t)((m->padded + bk - 1) / bk);
		size_t ar = ds_comm_staged_bytes(DS_COMM_ALLREDUCE, (size_t)bk, DS_F32, W),
		       rs = ds_comm_staged_bytes(DS_COMM_REDUCE_SCATTER, (size_t)maxshard, DS_F32, W),
		       ag = ds_comm_staged_bytes(DS_COMM_ALLGATHER, (size_t)(maxseg / W), DS_F32, W);
		const int ovl = o->overlap_comm && pp == 1;
		if (!zg)
			big = ar;
		else if (rs > big)
			big = rs;
		if (o->zero_stage >= 1 && ag > big)
			big = ag;
		m->pinned_staging = big * (!ovl ? 1 : !zg ? (nb ? nb : 1) : zp ? 5 : 4);
	}
out:
	free(nm);
	free(unv);
	free(pst);
	ds_gpt_destroy(model);
	return rc;
}

static const char *const place_names[] = { "host", "device", "pinned host" };

const char *ds_engine_mem_place_name(int place)
{
	return place >= 0 && place <= DS_MEM_PINNED ? place_names[place] : "?";
}

void ds_engine_mem_place(struct ds_engine_mem *m, const struct ds_engine_opts *o, int device)
{
	m->device = device != 0;
	m->device_total = m->host_total = m->pinned_total = 0;
	/* ZeRO-Offload: the row moves to pinned host memory with its extra */
	m->offloaded = device && o->offload.cpu && o->zero_stage >= 1;
	m->bytes[DS_MEM_OPTIM] = m->optim_host + (m->offloaded ? m->offload_extra : 0);
	/* offload_param cpu: the offloaded 16-bit parameters leave the row */
	m->params_pinned = device ? m->param_host : 0;
	m->bytes[DS_MEM_PARAMS] = m->params_all - m->params_pinned;
	m->bytes[DS_MEM_COMM] = m->comm_all + (m->params_pinned ? m->param_host_extra : 0);
	m->model_state = m->bytes[DS_MEM_PARAMS] + m->params_pinned + m->bytes[DS_MEM_GRADS] + m->bytes[DS_MEM_OPTIM];
	m->total = m->params_pinned;
	for (int c = 0; c < DS_MEM_NCAT; c++)
		m->total += m->bytes[c];
	for (int c = 0; c < DS_MEM_NCAT; c++) {
		m->place[c] = !device ? DS_MEM_HOST
			      : c == DS_MEM_OTHER ? DS_MEM_HOST
			      : c == DS_MEM_SWAP || (c == DS_MEM_OPTIM && m->offloaded) ? DS_MEM_PINNED : DS_MEM_DEVICE;
		if (m->place[c] == DS_MEM_DEVICE)
			m->device_total += m->bytes[c];
		else
			m->host_total += m->bytes[c];
		if (m->place[c] == DS_MEM_PINNED)
			m->pinned_total += m->bytes[c];
	}
	if (!device)
		m->pinned_staging = 0;
	m->host_total += m->pinned_staging + m->params_pinned;
	m->pinned_total += m->pinned_staging + m->params_pinned;
}

int ds_engine_mem_device_fit(const struct ds_engine_mem *m, size_t free_bytes, size_t *sum)
{
	size_t t = 0;
	for (int c = 0; c < DS_MEM_NCAT; c++) {
		if (m->place[c] != DS_MEM_DEVICE)
			continue;
		t += m->bytes[c];
		if (t > free_bytes) {
			*sum = t;
			return c + 1;
		}
	}
	*sum = t;
	return 0;
}

const char *ds_engine_mem_cat_note(const struct ds_engine_mem *m, const struct ds_engine_opts *o, int cat,
				   char *buf, size_t n)
{
	/* ZeRO's ranks: the data-parallel group (the world without 3D) */
	const int W = m->dp > 0 ? m->dp : m->world_size;
	const int sharded = m->stage >= 1 && W > 1;
	const int T = o->seq_length ? o->seq_length : o->model.seq_length;
	switch (cat) {
	case DS_MEM_PARAMS: {
		const char *dt = o->half != DS_HALF_NONE ? ds_half_name(o->half) : "fp32";
		if (m->nseg_partitioned)
			snprintf(buf, n, "%s; 1/%d of %d segments, %d whole (below the persistence threshold)", dt, W,
				 m->nseg_partitioned, m->nseg - m->nseg_partitioned);
		else
			snprintf(buf, n, "%s, every segment whole", dt);
		if (m->nseg_offloaded) {
			size_t l = strlen(buf);
			snprintf(buf + l, n - l, "; %d segments' slices in swap files", m->nseg_offloaded);
		}
		if (m->params_pinned) {
			size_t l = strlen(buf);
			snprintf(buf + l, n - l, "; %d segments in pinned host memory (params_offloaded)", m->nseg_param_host);
		}
		if (o->half != DS_HALF_NONE) {
			size_t l = strlen(buf);
			snprintf(buf + l, n - l, " (the fp32 master weights are under optimizer_states)");
		}
		break;
	}
	case DS_MEM_GRADS: {
		const char *dt = grads16(o) ? ds_half_name(o->half) : "fp32";
		if (m->stage >= 2 && W > 1)
			snprintf(buf, n, "%s, owned 1/%d slices", dt, W);
		else
			snprintf(buf, n, "%s, every segment whole", dt);
		break;
	}
	case DS_MEM_OPTIM:
		snprintf(buf, n, "%d fp32 state%s per element, %s%s", m->nstates, m->nstates == 1 ? "" : "s",
			 sharded ? "owned slices" : "whole model",
			 ds_optim_is_onebit(o->optim.type) && W > 1 ? " + the compressed allreduce's error feedback" : "");
		if (sharded) {
			size_t l = strlen(buf);
			snprintf(buf + l, n - l, " (1/%d)", W);
		}
		if (o->half != DS_HALF_NONE) {
			size_t l = strlen(buf);
			snprintf(buf + l, n - l, " + the fp32 master weights, %s", sharded ? "owned slices" : "whole model");
		}
		if (o->offload.optimizer) {
			size_t l = strlen(buf);
			snprintf(buf + l, n - l, "; in swap files (offload_optimizer nvme)");
		}
		if (m->offloaded) {
			size_t l = strlen(buf);
			snprintf(buf + l, n - l, "%s + the step's gradient staging; ZeRO-Offload: the step runs on the host",
				 o->half != DS_HALF_NONE ? "" : " + their fp32 host copy");
		}
		break;
	case DS_MEM_COMM:
		snprintf(buf, n, "reduce-scatter scratch%s%s",
			 m->stage >= 2 && W > 1 ? (o->overlap_comm ? " + 4 gradient gather buffers and shards (overlap_comm)"
						  : " + 2 gradient gather buffers") : "",
			 m->stage >= 3 && W > 1 ? " + 3 parameter gather/prefetch buffers"
			 : o->half != DS_HALF_NONE ? " + 2 parameter and 2 gradient widening buffers" : "");
		if (comm_kind(o) != DS_HALF_NONE && W > 1 && !grads16(o)) {
			size_t l = strlen(buf);
			snprintf(buf + l, n - l, " + %s reduction buffers (communication_data_type)",
				 ds_half_name(comm_kind(o)));
		}
		if (grads16(o) && comm_kind(o) == DS_HALF_NONE && W > 1 && m->stage < 2) {
			size_t l = strlen(buf);
			snprintf(buf + l, n - l, " + an fp32 reduction bucket (communication_data_type fp32)");
		}
		if (m->params_pinned) {
			size_t l = strlen(buf);
			snprintf(buf + l, n - l, " + %s %s the offloaded parameters cross in",
				 o->half != DS_HALF_NONE ? "16-bit" : "fp32", W > 1 && m->stage >= 3 ? "send slices" : "segments");
		}
		break;
	case DS_MEM_ACT: {
		const size_t sv = m->act_saved;
		snprintf(buf, n, "micro batch %d x seq %d%s; %.1f MiB kept for backward (%s), the rest fp32 working buffers",
			 o->micro_batch, T, o->checkpointing ? ", activation checkpointing" : "", (double)sv / 1048576.0,
			 o->half != DS_HALF_NONE ? ds_half_name(o->half) : "fp32");
		break;
	}
	case DS_MEM_OTHER:
		snprintf(buf, n, "token rows (%d x %d micro-batches), optimizer headers", o->micro_batch, o->grad_accum);
		break;
	case DS_MEM_SWAP:
		if (!m->bytes[DS_MEM_SWAP]) {
			snprintf(buf, n, "no NVMe offload");
			break;
		}
		buf[0] = 0;
		if (m->sub_group)
			snprintf(buf, n, "%d optimizer buffers of %lld elements (buffer_count x sub_group_size)%s",
				 o->offload.opt_buffer_count, (long long)m->sub_group,
				 m->nseg_offloaded && o->half != DS_HALF_NONE ? " + 16-bit staging" : "");
		if (m->param_buffer) {
			size_t l = strlen(buf);
			snprintf(buf + l, n - l, "%s%d parameter buffers of %lld elements", l ? " + " : "",
				 o->offload.param_buffer_count, (long long)m->param_buffer);
		}
		break;
	default:
		snprintf(buf, n, "%s", "");
	}
	return buf;
}

uint64_t ds_engine_mem_budget(int per_node, uint64_t override, char *from, size_t n)
{
	const char *e;
	if (per_node < 1)
		per_node = 1;
	if (override) {
		snprintf(from, n, "--mem-per-rank");
		return override;
	}
	unsigned long long mpn = (e = getenv("SLURM_MEM_PER_NODE")) ? strtoull(e, NULL, 10) : 0;
	if (mpn) {
		snprintf(from, n, "SLURM_MEM_PER_NODE / %d ranks", per_node);
		return (uint64_t)(mpn << 20) / (uint64_t)per_node;
	}
	unsigned long long mpc = (e = getenv("SLURM_MEM_PER_CPU")) ? strtoull(e, NULL, 10) : 0;
	unsigned long long cpt = (e = getenv("SLURM_CPUS_PER_TASK")) ? strtoull(e, NULL, 10) : 0;
	if (mpc) {
		snprintf(from, n, "SLURM_MEM_PER_CPU");
		return (uint64_t)(mpc << 20) * (cpt ? cpt : 1);
	}
	FILE *f = fopen("/proc/meminfo", "r");
	char line[256];
	unsigned long long kb = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	snprintf(from, n, kb ? "90%% of MemAvailable / %d ranks" : "4 GiB (no /proc/meminfo)", per_node);
	/* 90%: leave the OS and page cache some room */
	return kb ? (uint64_t)((double)(kb << 10) * 0.9) / (uint64_t)per_node : (4ull << 30);
}
