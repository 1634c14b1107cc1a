/* check.c - ds-train --check: the configuration (config layer's
 * ds_train_check) followed by the memory estimate per rank for the
 * resolved setup at --world-size ranks (default: one per tensor x pipeline
 * rank).  With pipeline parallelism it lists which layers each stage holds
 * and each stage's bytes per rank, and the table is the largest stage's.
 * A config the trainer cannot run (a model family it does not train, an
 * optimizer it lacks) still checks; its memory estimate says why it is not
 * available. */
#include "driver/train.h"
#include "driver/train_int.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "compute/compute.h"
#include "engine/estimate.h"
#include "model/gpt.h"
#include "model/moe.h"
#include "model/pipe.h"
#include "util/log.h"
#include "util/mem.h"

/* MoE: the whole model's parameters and the experts' all-to-all traffic of
 * one optimizer step per rank.  Each MoE layer exchanges an (E, capacity,
 * C) fp32 buffer twice in forward and twice in backward (DeepSpeed's
 * all_to_all_single message size: the whole buffer; (ep-1)/ep of it leaves
 * the rank). */
struct moe_facts { int layers, ep; int64_t whole, expert_whole; double a2a_msg, a2a_sent; };

static int moe_facts(const struct ds_train_setup *s, struct moe_facts *f)
{
	const struct ds_model_config *m = &s->model;
	memset(f, 0, sizeof *f);
	if (!m->moe.enabled)
		return 0;
	struct ds_gpt *g;
	if (ds_gpt_create(&g, m, NULL) < 0)
		return 0;
	f->whole = ds_gpt_num_params(g);
	for (int i = 0; i < ds_gpt_num_tensors(g); i++)
		f->expert_whole += ds_gpt_tensor(g, i)->expert ? ds_gpt_tensor(g, i)->numel : 0;
	ds_gpt_destroy(g);
	f->ep = m->moe.ep_size;
	const int64_t N = (int64_t)s->eng.micro_batch * (s->eng.seq_length ? s->eng.seq_length : m->seq_length);
	for (int l = 0; l < m->num_layers; l++) {
		if (ds_moe_experts(m, l) < 2)
			continue;
		f->layers++;
		double buf = (double)ds_moe_experts(m, l) * (double)ds_moe_capacity(m, l, N, 1) * m->hidden_size * 4.0;
		f->a2a_msg += 4 * buf * (double)s->eng.grad_accum;
	}
	f->a2a_sent = f->ep > 1 ? f->a2a_msg * (f->ep - 1) / f->ep : 0;
	return 1;
}

/* The pipeline's stages: each one's layers (DeepSpeed's partition of the
 * NeoX layer list) and its estimate per rank; into out (text) and/or *js
 * (a JSON array).  0, or the estimator's error. */
static int stages(const struct ds_train_setup *s, int W, FILE *out, json_t **js, struct ds_err *err)
{
	struct ds_gpt *m = NULL;
	struct ds_pipe_layer *ly = NULL;
	int *b = NULL, rc;
	if ((rc = ds_gpt_create_tp(&m, &s->eng.model, s->tp, 0, err)) < 0)
		return rc;
	const int n = ds_gpt_config(m)->num_layers + 5;
	ly = calloc((size_t)n, sizeof *ly);
	b = calloc((size_t)s->pp + 1, sizeof *b);
	if (!ly || !b) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	ds_pipe_layers(m, ly, n);
	if ((rc = ds_pipe_partition(m, s->pp, s->eng.pipe_partition, b, err)) < 0)
		goto out;
	if (out)
		fprintf(out, "# pipeline: %d stages, partition method %s; per rank of each stage:\n", s->pp,
			s->eng.pipe_partition);
	if (js)
		*js = json_array();
	for (int st = 0; st < s->pp && rc == 0; st++) {
		struct ds_engine_mem k;
		char h[32];
		if ((rc = ds_engine_mem_estimate_stage(&s->eng, W, st, &k, err)) < 0)
			break;
		int64_t held = 0;
		for (int i = b[st]; i < b[st + 1]; i++)
			held += ly[i].params;
		if (ly[n - 1].kind == DS_PL_HEAD && b[st] <= n - 1 && b[st + 1] > n - 1 && b[st] <= 0 && b[st + 1] > 0)
			held -= ly[n - 1].params;   /* one tied embedding when a stage holds both ends */
		if (out) {
			fprintf(out, "# stage %d: layers %d-%d (%d):", st, b[st], b[st + 1] - 1, b[st + 1] - b[st]);
			for (int i = b[st]; i < b[st + 1]; i++)
				fprintf(out, "%s %s", i == b[st] ? "" : ",", ly[i].type);
			fprintf(out, "; %lld parameters, %d buffers, %zu bytes (%s)\n", (long long)held, k.pipe_buffers,
				k.total, ds_fmt_bytes((double)k.total, h, sizeof h));
		}
		if (js && *js) {
			json_t *names = json_array();
			for (int i = b[st]; names && i < b[st + 1]; i++)
				json_array_append_new(names, json_string(ly[i].type));
			json_array_append_new(*js, json_pack("{s:i,s:i,s:i,s:o,s:I,s:i,s:I,s:I}", "stage", st, "first_layer",
							     b[st], "num_layers", b[st + 1] - b[st], "layers", names,
							     "parameters_per_rank", (json_int_t)held, "pipe_buffers",
							     k.pipe_buffers, "total_bytes", (json_int_t)k.total,
							     "model_state_bytes", (json_int_t)k.model_state));
		}
	}
out:
	free(ly);
	free(b);
	ds_gpt_destroy(m);
	return rc;
}

static json_t *mem_json(const struct ds_train_setup *s, const struct ds_engine_mem *m)
{
	json_t *b = json_object(), *j = json_object();
	if (!b || !j) {
		json_decref(b);
		json_decref(j);
		return NULL;
	}
	for (int c = 0; c < DS_MEM_NCAT; c++)
		json_object_set_new(b, ds_engine_mem_cat_name(c), json_integer((json_int_t)m->bytes[c]));
	json_object_set_new(j, "zero_stage", json_integer(m->stage));
	json_object_set_new(j, "world_size", json_integer(m->world_size));
	json_object_set_new(j, "tensor_parallel_size", json_integer(m->tp));
	json_object_set_new(j, "pipeline_parallel_size", json_integer(m->pp));
	json_object_set_new(j, "data_parallel_size", json_integer(m->dp));
	json_object_set_new(j, "pipe_stage", json_integer(m->pipe_stage));
	json_object_set_new(j, "optimizer", json_string(ds_optim_type_name(s->eng.optim.type)));
	json_object_set_new(j, "num_params", json_integer(m->num_params));
	json_object_set_new(j, "padded_params", json_integer(m->padded));
	json_object_set_new(j, "bytes_per_rank", b);
	json_object_set_new(j, "model_state_bytes", json_integer((json_int_t)m->model_state));
	json_object_set_new(j, "activations_saved_bytes", json_integer((json_int_t)m->act_saved));
	json_object_set_new(j, "total_bytes", json_integer((json_int_t)m->total));
	json_object_set_new(j, "nvme_bytes", json_integer((json_int_t)m->nvme_bytes));
	json_object_set_new(j, "nvme_optimizer_bytes", json_integer((json_int_t)m->nvme_opt_bytes));
	json_object_set_new(j, "nvme_param_bytes", json_integer((json_int_t)m->nvme_param_bytes));
	if (m->device) {   /* where each row lives, and the totals of each memory */
		json_t *w = json_object();
		for (int c = 0; w && c < DS_MEM_NCAT; c++)
			json_object_set_new(w, ds_engine_mem_cat_name(c), json_string(ds_engine_mem_place_name(m->place[c])));
		json_object_set_new(j, "where", w);
		json_object_set_new(j, "comm_staging_pinned_bytes", json_integer((json_int_t)m->pinned_staging));
		json_object_set_new(j, "params_offloaded_pinned_bytes", json_integer((json_int_t)m->params_pinned));
		json_object_set_new(j, "device_bytes", json_integer((json_int_t)m->device_total));
		json_object_set_new(j, "host_bytes", json_integer((json_int_t)m->host_total));
		json_object_set_new(j, "pinned_host_bytes", json_integer((json_int_t)m->pinned_total));
	}
	if (s->unimplemented[0])
		json_object_set_new(j, "note", json_string(s->unimplemented));
	struct moe_facts f;
	if (moe_facts(s, &f))
		json_object_set_new(j, "moe", json_pack("{s:i,s:i,s:I,s:I,s:I,s:I,s:f,s:f}", "layers", f.layers, "ep_size",
						       f.ep, "params_whole_model", (json_int_t)f.whole,
						       "expert_params_whole_model", (json_int_t)f.expert_whole,
						       "expert_params_per_rank", (json_int_t)m->num_params_expert,
						       "non_expert_params_per_rank",
						       (json_int_t)(m->num_params - m->num_params_expert),
						       "all_to_all_bytes_per_step", f.a2a_msg,
						       "all_to_all_sent_bytes_per_step", f.a2a_sent));
	return j;
}

/* A device plan's rows (--device cuda): each category with where it lives,
 * the communicator's pinned staging, and per-rank totals of device memory
 * and host memory (pinned named separately). */
static void device_table(FILE *out, const struct ds_train_setup *s, const struct ds_engine_mem *m)
{
	char h[32], note[320];
	fprintf(out, "# %-18s %14s %11s  %-11s  %s\n", "category", "bytes", "size", "where", "holds");
	for (int c = 0; c < DS_MEM_NCAT; c++)
		fprintf(out, "%-20s %14zu %11s  %-11s  %s\n", ds_engine_mem_cat_name(c), m->bytes[c],
			ds_fmt_bytes((double)m->bytes[c], h, sizeof h), ds_engine_mem_place_name(m->place[c]),
			ds_engine_mem_cat_note(m, &s->eng, c, note, sizeof note));
	if (m->params_pinned)
		fprintf(out, "%-20s %14zu %11s  %-11s  offload_param cpu: the %s parameters of the %d segment%s at or "
			"above the persistence threshold%s\n", "params_offloaded", m->params_pinned,
			ds_fmt_bytes((double)m->params_pinned, h, sizeof h), ds_engine_mem_place_name(DS_MEM_PINNED),
			s->eng.half != DS_HALF_NONE ? "16-bit" : "fp32", m->nseg_param_host, m->nseg_param_host == 1 ? "" : "s",
			s->eng.half != DS_HALF_NONE ? "" : " (the host step's master: no host copy of them then)");
	fprintf(out, "%-20s %14zu %11s  %-11s  %s\n", "comm_staging", m->pinned_staging,
		ds_fmt_bytes((double)m->pinned_staging, h, sizeof h), ds_engine_mem_place_name(DS_MEM_PINNED),
		m->dp <= 1		  ? "nothing crosses ranks"
		: s->eng.overlap_comm ? "the MPI staged path's buffers where NCCL is not used (ranks sharing a GPU); "
					"at most, one per call in flight (overlap_comm)"
				      : "the MPI staged path's buffers where NCCL is not used (ranks sharing a GPU)");
	fprintf(out, "%-20s %14zu %11s  %-11s  %s\n", "device_total", m->device_total,
		ds_fmt_bytes((double)m->device_total, h, sizeof h), "device",
		"what the backend allocates on the device per rank (ds-train reports the real figure)");
	fprintf(out, "%-20s %14zu %11s  %-11s  %s\n", "host_total", m->host_total,
		ds_fmt_bytes((double)m->host_total, h, sizeof h), "host",
		"host memory per rank, pinned included");
	fprintf(out, "%-20s %14zu %11s  %-11s  %s\n", "pinned_total", m->pinned_total,
		ds_fmt_bytes((double)m->pinned_total, h, sizeof h), "pinned host", "of host_total, page-locked");
	fprintf(out, "%-20s %14zu %11s  %-11s  %s\n", "total", m->total + m->pinned_staging,
		ds_fmt_bytes((double)(m->total + m->pinned_staging), h, sizeof h), "", "device_total + host_total");
}

static void mem_table(FILE *out, const struct ds_train_setup *s, const struct ds_engine_mem *m)
{
	char h[32], note[320];
	if (m->tp * m->pp > 1) {
		fprintf(out, "# memory per rank: ZeRO stage %d, world size %d = tensor %d x pipeline %d x data %d, %s, %s%s\n",
			m->stage, m->world_size, m->tp, m->pp, m->dp, ds_optim_type_name(s->eng.optim.type),
			ds_half_name(s->eng.half), m->pp > 1 ? "; the table is the largest stage's" : "");
		fprintf(out, "# %lld parameters; this rank's shards and stage: %lld after padding each held segment to a "
			"multiple of %d%s\n", (long long)m->num_params, (long long)m->padded, 16 * m->dp,
			m->pp > 1 ? "" : "");
		if (m->pp > 1)
			fprintf(out, "# stage %d holds the most\n", m->pipe_stage);
	} else {
		fprintf(out, "# memory per rank: ZeRO stage %d, world size %d, %s, %s\n", m->stage, m->world_size,
			ds_optim_type_name(s->eng.optim.type), ds_half_name(s->eng.half));
		fprintf(out, "# %lld parameters, %lld after padding each of %d segments to a multiple of %d\n",
			(long long)m->num_params, (long long)m->padded, m->nseg, 16 * m->world_size);
	}
	if (s->unimplemented[0])
		fprintf(out, "# note: %s; the estimate is for fp32 training\n", s->unimplemented);
	struct moe_facts f;
	if (moe_facts(s, &f)) {
		char a[32], b[32];
		fprintf(out, "# MoE: %d layers with experts, top-%d, ep_size %d: parameters per rank %lld non-expert + "
			"%lld expert (the whole model: %lld, %lld of them experts')\n", f.layers, s->model.moe.k, f.ep,
			(long long)(m->num_params - m->num_params_expert), (long long)m->num_params_expert,
			(long long)f.whole, (long long)f.expert_whole);
		fprintf(out, "# MoE all-to-all per step and rank: %s in all_to_all_single messages (4 per MoE layer and "
			"micro-step), %s of it sent to other ranks\n", ds_fmt_bytes(f.a2a_msg, a, sizeof a),
			ds_fmt_bytes(f.a2a_sent, b, sizeof b));
	}
	if (m->device) {
		device_table(out, s, m);
	} else {
		fprintf(out, "# %-18s %14s %11s  %s\n", "category", "bytes", "size", "holds");
		for (int c = 0; c < DS_MEM_NCAT; c++)
			fprintf(out, "%-20s %14zu %11s  %s\n", ds_engine_mem_cat_name(c), m->bytes[c],
				ds_fmt_bytes((double)m->bytes[c], h, sizeof h),
				ds_engine_mem_cat_note(m, &s->eng, c, note, sizeof note));
		fprintf(out, "%-20s %14zu %11s  %s\n", "total", m->total, ds_fmt_bytes((double)m->total, h, sizeof h),
			"what libds allocates per rank (ds-train reports the real figure)");
	}
	fprintf(out, "# model states (parameters + gradients + optimizer states): %zu bytes (%s) per rank\n",
		m->model_state, ds_fmt_bytes((double)m->model_state, h, sizeof h));
	/* ZeRO-Infinity: the swap files are not host memory; where they go is
	 * checked here as ds-train checks it before training */
	if (m->nvme_bytes) {
		struct ds_err e = DS_ERR_INIT;
		fprintf(out, "%-20s %14llu %11s  swap files per rank (not host memory):%s%s\n", "nvme",
			(unsigned long long)m->nvme_bytes, ds_fmt_bytes((double)m->nvme_bytes, h, sizeof h),
			!m->nvme_opt_bytes ? "" : m->nvme_master ? " the optimizer's (fp32 master and states)"
								  : " the optimizer's (states)",
			m->nvme_param_bytes ? (m->nvme_opt_bytes ? ", 16-bit parameter slices" : " 16-bit parameter slices") : "");
		if (m->nsub_groups)
			fprintf(out, "# the optimizer step streams %d sub-group%s of %lld elements per rank\n", m->nsub_groups,
				m->nsub_groups == 1 ? "" : "s", (long long)m->sub_group);
		if (ds_train_check_nvme(s, ds_train_ranks_per_node(m->world_size), &e) < 0)
			fprintf(out, "# nvme_path on this machine: %s\n", e.msg);
		else
			fprintf(out, "# nvme_path on this machine: writable, accepts O_DIRECT, room for %d rank%s\n",
				ds_train_ranks_per_node(m->world_size), ds_train_ranks_per_node(m->world_size) > 1 ? "s" : "");
	}
	/* offload to cpu: on a CPU build every buffer above is host memory
	 * already; say so rather than pretend something moved */
	const char *od = ds_config_values(s->cfg)->zero_optimization.offload_optimizer.device,
		   *pd = ds_config_values(s->cfg)->zero_optimization.offload_param.device;
	const int ocpu = od && !strcmp(od, "cpu"), pcpu = pd && !strcmp(pd, "cpu");
	if (m->device && ocpu && m->offloaded)
		fprintf(out, "# offload of optimizer states to cpu (ZeRO-Offload): optimizer_states is pinned host "
			"memory and the optimizer step runs on the host\n");
	else if (m->device && ocpu)
		fprintf(out, "# offload of optimizer states to cpu: ZeRO stage %d has no partitioned optimizer; "
			"DeepSpeed offloads from stage 1 on, so nothing moves\n", m->stage);
	if (m->device && pcpu && m->params_pinned)
		fprintf(out, "# offload of parameters to cpu: params_offloaded is pinned host memory; each rank's "
			"slice is copied to the device before its allgather (a whole segment on one rank: before it "
			"is used)\n");
	else if (m->device && pcpu && m->stage != 3)
		fprintf(out, "# offload of parameters to cpu: ZeRO stage %d does not partition parameters; DeepSpeed "
			"offloads them at stage 3 only, so nothing moves\n", m->stage);
	else if (m->device && pcpu && s->eng.half == DS_HALF_NONE && !ocpu)
		fprintf(out, "# offload of parameters to cpu: an fp32 run's parameters are its master weights; they "
			"move with offload_optimizer cpu (its host step keeps them), without it the cuda backend "
			"keeps them on the device (counted above)\n");
	else if (m->device && pcpu)
		fprintf(out, "# offload of parameters to cpu: no segment reaches stage3_param_persistence_threshold; "
			"DeepSpeed keeps such parameters on the device, so nothing moves\n");
	if (!m->device && (ocpu || pcpu))
		fprintf(out, "# offload %s to cpu: on this CPU build every row above is already host memory; "
			"nothing moves and no device memory is saved\n",
			ocpu ? (pcpu ? "of optimizer states and parameters" : "of optimizer states") : "of parameters");
}

int ds_train_check_run(const struct ds_train_opts *o, FILE *out, struct ds_err *err)
{
	struct ds_train_setup s;
	struct ds_engine_mem m;
	struct ds_err why = DS_ERR_INIT;
	struct ds_train_opts oc = *o;
	json_t *extra = NULL;
	int W = o->world_size > 0 ? o->world_size : 1;
	int have = 0, rc;

	/* resolve the run quietly (its info lines are for training; its
	 * warnings and errors come again from ds_train_check below) */
	oc.check = 1;
	int lvl = ds_log_level();
	ds_log_init(0, -1, 0);
	/* without --world-size: one data-parallel rank per tensor x pipeline
	 * group (the flags' sizes) */
	if (o->world_size <= 0)
		W = (o->tp > 0 ? o->tp : 1) * (o->pp > 0 ? o->pp : 1);
	int ok = ds_train_setup_load(&s, &oc, W, 0, &why) == 0;
	if (!ok && o->world_size <= 0 && s.pp_cfg > 1) {   /* pipeline.stages of the config sets pp */
		W *= s.pp_cfg;
		ok = ds_train_setup_load(&s, &oc, W, 0, &why) == 0;
	}
	char dev[320] = "";
	json_t *dj = NULL;
	if (ok) {
		/* the compute backend on this machine (--check runs anywhere: a
		 * device it cannot have here is said, not an error) */
		char dwhy[256];
		struct ds_err de = DS_ERR_INIT;
		int drc = ds_train_device(&s, dwhy, sizeof dwhy, &de);
		if (drc == 0)
			snprintf(dev, sizeof dev, "%s", dwhy);
		else
			snprintf(dev, sizeof dev, "not possible here: %s", de.msg);
		dj = json_pack("{s:s,s:s,s:s?,s:i,s:s}", "asked", ds_device_name(s.device_kind), "from", s.device_from,
			       "backend", drc == 0 ? s.eng.compute->name : NULL, "device", drc == 0 ? s.eng.device : -1,
			       "note", drc == 0 ? dwhy : de.msg);
		have = 1;
		if (ds_engine_mem_estimate(&s.eng, W, &m, &why) < 0)
			have = 0;
		/* a device run's plan: where its rows would be, also on a machine
		 * without the device (asked cuda; auto where it chose one) */
		else
			ds_engine_mem_place(&m, &s.eng,
					    s.device_kind == DS_DEVICE_CUDA || (drc == 0 && s.eng.compute && !s.eng.compute->host));
	}
	ds_log_init(0, lvl, 0);
	if (o->json) {
		json_t *mj = have ? mem_json(&s, &m) : json_pack("{s:s}", "error", why.msg), *sj = NULL;
		if (mj && have && s.pp > 1 && stages(&s, W, NULL, &sj, &why) == 0 && sj)
			json_object_set_new(mj, "stages", sj);
		extra = mj ? json_pack("{s:o}", "memory", mj) : NULL;
		if (extra && dj) {
			json_object_set_new(extra, "device", dj);
			dj = NULL;
		}
		if (!extra) {
			rc = ds_err_set(err, DS_ENOMEM, "out of memory");
			goto out;
		}
	}
	if (have) {   /* the config printed counts the layout's data-parallel ranks */
		oc.tp = s.tp;
		oc.pp = s.pp;
		oc.world_size = W;
	}
	/* the config printed is the one the run resolves ("auto" micro batch
	 * from the memory plan included) */
	if (have)
		oc.autos = s.autos;
	oc.check = o->check;
	if ((rc = ds_train_check_extra(&oc, out, extra, err)) < 0 || o->json)
		goto out;
	if (have && s.pp > 1 && (rc = stages(&s, W, out, NULL, err)) < 0)
		goto out;
	if (dev[0])
		fprintf(out, "# compute: %s\n", dev);
	if (have)
		mem_table(out, &s, &m);
	else
		fprintf(out, "# memory per rank: not available: %s\n", why.msg);
	if (fflush(out) != 0 || ferror(out))
		rc = ds_err_set(err, DS_EIO, "writing the memory estimate failed");
out:
	json_decref(extra);
	json_decref(dj);
	if (have || s.cfg)
		ds_train_setup_release(&s);
	return rc;
}
