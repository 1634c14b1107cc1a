/* train.c - the training loop of ds-train.
 *
 * Per step: read this rank's rows of the global batch (samples
 * consumed .. consumed + TB in the data order), take the schedule's lr for
 * the next non-skipped step, run the engine, log (stdout line every
 * log_interval steps, CSV/TensorBoard every step, metrics window), evaluate,
 * save every save_interval.  A stop request (the tool's signal handler sets
 * hooks->stop) is agreed on by all ranks at the next step boundary: save,
 * then return DS_ESIGNAL (exit 4).  Lines for the user go through the
 * tool's streams (hooks->out), never to stdout/stderr directly.
 */
#include "driver/train.h"
#include "driver/train_int.h"
#include "driver/watchdog.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "app/blas_core.h"
#include "comm/comm.h"
#include "compute/compute.h"
#include "cpu/ceiling.h"
#include "cpu/gemm_bf16.h"
#include "driver/profile.h"
#include "engine/estimate.h"
#include "model/count.h"
#include "model/pipe.h"
#include "monitor/log.h"
#include "monitor/metrics.h"
#include "monitor/monitor.h"
#include "monitor/out.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/timer.h"

/* flops_profiler at its profile_step (rank 0): DeepSpeed's report with the
 * engine lines and this step's measured latencies per micro-batch. */
static int run_profiler(const struct ds_train_setup *s, const struct ds_engine *e, const struct ds_engine_step *r,
			long long step, double peak_gflops, const struct ds_monitor_out *mo, struct ds_err *err)
{
	const struct ds_config_values *cv = ds_config_values(s->cfg);
	int64_t depth = cv->flops_profiler.module_depth, top = cv->flops_profiler.top_modules;
	int detailed = cv->flops_profiler.detailed;
	double rf = cv->flops_profiler.recompute_fwd_factor;
	const char *out = cv->flops_profiler.output_file;
	struct ds_count cnt = DS_COUNT_INIT;
	/* this rank's module (its tensor-parallel shard of its stage), as
	 * DeepSpeed's profiler hooks it, with mp_size = tp x pp */
	struct ds_count_opts co = { (int)s->mb, s->model.seq_length, DS_COUNT_CURRENT, 0, s->tp,
				    s->pp > 1 ? ds_engine_part(e) : NULL };
	DS_TRY(ds_count_model(&s->model, &co, &cnt, err));
	double ga = (double)s->ga;
	cnt.nodes[0].latency_s = r->t_fwd / ga;
	struct ds_profile_view v = { DS_PROFILE_TEXT, (int)step, (int)depth, (int)(top > 0 ? top : 1), detailed, NULL };
	struct ds_profile_engine pe = { s->W, s->dp, s->tp * s->pp, (int)s->mb, r->t_fwd / ga, 1, (r->t_bwd + r->t_reduce) / ga,
					r->t_step, rf, peak_gflops * 1e9 };
	FILE *res = mo ? mo->results : NULL;
	FILE *f = out && *out ? fopen(out, "w") : res;
	int rc = 0;
	if (!f && out && *out)
		rc = ds_err_set(err, DS_EIO, "flops_profiler.output_file %s: cannot open for writing", out);
	else if (f)
		rc = ds_profile_render(&cnt, &v, &pe, f, err);
	if (f && f != res)
		fclose(f);
	else if (f)
		fflush(f);
	ds_count_release(&cnt);
	return rc;
}

/* The step flops_profiler reports at, or -1 when it is off. */
static long long cfg_profile_step(const struct ds_train_setup *s)
{
	const struct ds_config_values *v = ds_config_values(s->cfg);
	return v->flops_profiler.enabled ? v->flops_profiler.profile_step : -1;
}

static int cfg_dump_state(const struct ds_train_setup *s)
{
	return ds_config_values(s->cfg)->dump_state;
}

/* Before saving on a signal: will the save fit in the time the job has
 * left?  That is SLURM_JOB_END_TIME (seconds since the epoch) minus now, or
 * else dstk.signal_lead_s (the N of --signal=USR1@N) minus the time since
 * the signal came (signal_at: its CLOCK_MONOTONIC seconds, 0 unknown).
 * last_save: seconds the last save of this run took, < 0 when none was
 * timed. */
static void check_save_fits(const struct ds_config *cfg, double last_save, int sig, long signal_at)
{
	const char *e = getenv("SLURM_JOB_END_TIME"), *from = "SLURM_JOB_END_TIME";
	char *end = NULL;
	double t_end = e ? strtod(e, &end) : 0, left, lead = ds_config_values(cfg)->dstk.signal_lead_s;
	if (e && end != e && t_end > 0) {
		left = t_end - (double)time(NULL);
	} else if (lead > 0) {
		struct timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		left = lead - (signal_at ? (double)(t.tv_sec - signal_at) : 0);  /* 0: the signal reached another rank */
		from = "dstk.signal_lead_s after the signal";
	} else {
		return;
	}
	if (left < 0)
		left = 0;
	if (last_save < 0)
		ds_log_info("signal %d: the job ends in %.0f s (%s); no save timed yet in this run", sig, left, from);
	else if (last_save > left)
		ds_log_warn("signal %d: the last save took %.1f s but the job ends in %.0f s (%s): this save may not "
			    "finish; send the signal earlier (--signal=USR1@N with a larger N)", sig, last_save, left, from);
	else
		ds_log_info("signal %d: the last save took %.1f s, the job ends in %.0f s (%s): saving", sig, last_save,
			    left, from);
}

/* This rank's rows of one global batch: micro-step a, row b is global
 * sample base + a*MB*dp + dp_rank*MB + b (engine.h; the ranks of one
 * tensor- and pipeline-parallel group read the same rows). */
static int fill_rows(const struct ds_sampler *sp, const struct ds_train_setup *s, long long base, int32_t *rows,
		     long long T, struct ds_err *err)
{
	for (long long a = 0; a < s->ga; a++)
		for (long long b = 0; b < s->mb; b++) {
			uint64_t g = (uint64_t)(base + a * s->mb * s->dp + (long long)s->dp_rank * s->mb + b);
			DS_TRY(ds_sampler_get(sp, g, rows + (a * s->mb + b) * (T + 1), err));
		}
	return 0;
}

static int evaluate(struct ds_engine *e, const struct ds_train_setup *s, const struct ds_sampler *sp,
		    long long iters, int32_t *rows, long long T, double *loss, struct ds_err *err)
{
	double sum = 0;
	long long n = 0;
	for (long long k = 0; k < iters; k++) {
		double l;
		DS_TRY(fill_rows(sp, s, k * s->tb, rows, T, err));
		DS_TRY(ds_engine_eval(e, rows, (int)(s->mb * s->ga), &l, err));
		sum += l;
		n++;
	}
	*loss = n ? sum / n : 0;
	return 0;
}

enum { NM = 7 };   /* report_memory's figures per rank */

/* After the run, every rank: what libds's allocator held after setup and
 * at its peak during the loop, and the peak RSS, gathered to rank 0, which
 * prints the maxima over ranks next to the estimate (stdout) and, when
 * js is given, returns them per rank for --metrics-json. */
static int report_memory(struct ds_comm *comm, const struct ds_train_setup *s, const struct ds_engine *e,
			 size_t held_setup, size_t dev_held_setup, const struct ds_monitor_out *mo, json_t **js,
			 struct ds_err *err)
{
	struct ds_engine_mem m;
	const int W = s->W;
	const struct ds_compute_ops *cx = s->eng.compute;
	const int dev = cx && !cx->host && cx->mem_held;
	size_t dheld = 0, dpeak = 0;
	if (dev)
		cx->mem_held(&dheld, &dpeak, 0);
	/* a device run: what its alloc held after setup and at its peak, and
	 * the pinned host memory of the communicator's staging pool and of
	 * ZeRO-Offload (the plan's device and pinned rows) */
	const struct ds_comm *dc = ds_engine_dev_comm(e);
	double mine[NM] = { (double)held_setup, (double)ds_mem_peak(), (double)ds_mem_peak_rss(),
			    (double)ds_engine_state_bytes(e), (double)dev_held_setup, (double)dpeak,
			    (dc ? (double)ds_comm_pinned_bytes(dc) : 0) + (double)ds_engine_pinned_bytes(e) }, mx[NM] = { 0 };
	DS_TRY(ds_engine_mem_estimate(&s->eng, W, &m, err));
	ds_engine_mem_place(&m, &s->eng, dev);
	double *all = malloc(sizeof(double) * NM * (size_t)W);
	if (!all)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	int rc = 0;
	if (W > 1)
		rc = ds_comm_allgather(comm, mine, all, NM, DS_F64, err);
	else
		memcpy(all, mine, sizeof mine);
	if (rc < 0 || s->rank != 0)
		goto out;
	for (int r = 0; r < W; r++)
		for (int k = 0; k < NM; k++)
			if (all[NM * r + k] > mx[k])
				mx[k] = all[NM * r + k];
	/* model_state: the engine's own count of its parameter, gradient and
	 * optimizer-state buffers (the same on every rank of a pipeline
	 * stage; the estimate is the largest stage's) */
	ds_monitor_out_line(mo, "memory per rank (bytes, max over %d rank%s) | estimate %zu | alloc_setup %.0f | "
			    "alloc_peak %.0f | peak_rss %.0f | alloc/estimate %.4f | model_state %.0f | "
			    "model_state_estimate %zu", W, W > 1 ? "s" : "", m.total, mx[0], mx[1], mx[2],
			    m.total ? mx[0] / (double)m.total : 0.0, mx[3], m.model_state);
	/* the device side (its alloc against the plan's device rows; the host
	 * figures above then hold the host rows: the estimate's total minus
	 * the device's) */
	if (dev)
		ds_monitor_out_line(mo, "device memory per rank (bytes, max over %d rank%s) | device_estimate %zu | "
				    "device_alloc_setup %.0f | device_alloc_peak %.0f | device/estimate %.4f | "
				    "host_estimate %zu | host/estimate %.4f | pinned %.0f | pinned_estimate %zu",
				    W, W > 1 ? "s" : "", m.device_total, mx[4], mx[5],
				    m.device_total ? mx[4] / (double)m.device_total : 0.0, m.host_total - m.pinned_total,
				    m.host_total - m.pinned_total ? mx[0] / (double)(m.host_total - m.pinned_total) : 0.0,
				    mx[6], m.pinned_total);
	if (js) {
		json_t *est = json_object(), *a[3] = { json_array(), json_array(), json_array() };
		for (int c = 0; est && c < DS_MEM_NCAT; c++)
			json_object_set_new(est, ds_engine_mem_cat_name(c), json_integer((json_int_t)m.bytes[c]));
		for (int r = 0; r < W; r++)
			for (int k = 0; k < 3; k++)
				json_array_append_new(a[k], json_integer((json_int_t)all[NM * r + k]));
		*js = json_pack("{s:i,s:i,s:I,s:o,s:I,s:o,s:o,s:o}", "world_size", W, "zero_stage", m.stage,
				"estimate_bytes", (json_int_t)m.total, "estimate", est, "model_state_bytes",
				(json_int_t)mx[3], "alloc_setup_bytes", a[0], "alloc_peak_bytes", a[1],
				"peak_rss_bytes", a[2]);
		if (*js && dev) {
			json_t *d[3] = { json_array(), json_array(), json_array() };
			for (int r = 0; r < W; r++)
				for (int k = 0; k < 3; k++)
					json_array_append_new(d[k], json_integer((json_int_t)all[NM * r + 4 + k]));
			json_object_set_new(*js, "device_estimate_bytes", json_integer((json_int_t)m.device_total));
			json_object_set_new(*js, "host_estimate_bytes",
					    json_integer((json_int_t)(m.host_total - m.pinned_total)));
			json_object_set_new(*js, "pinned_estimate_bytes", json_integer((json_int_t)m.pinned_total));
			json_object_set_new(*js, "device_alloc_setup_bytes", d[0]);
			json_object_set_new(*js, "device_alloc_peak_bytes", d[1]);
			json_object_set_new(*js, "pinned_bytes", d[2]);
		}
		if (!*js)
			rc = ds_err_set(err, DS_ENOMEM, "out of memory");
	}
out:
	free(all);
	return rc;
}

static int open_data(struct ds_data *dd, const struct ds_train_opts *o, const struct ds_train_setup *s,
		     struct ds_err *err)
{
	struct ds_data_opts d = { 0 };
	d.path = o->data ? o->data : ds_data_default_corpus();
	d.valid_path = o->valid_data;
	d.test_path = o->test_data;
	d.split = o->split;
	d.format = DS_DATA_AUTO;
	d.seq_length = (uint64_t)s->model.seq_length;
	d.vocab_size = (uint64_t)s->model.vocab_size;
	d.seed = s->eng.seed;
	/* what a blend's per-dataset counts are taken from, as NeoX takes them:
	 * train_iters x the global batch; (train_iters / eval_interval + 1)
	 * evaluations of eval_iters batches; one of eval_iters for the test */
	if (s->train_iters > 0) {
		long long evals = o->eval_interval ? s->train_iters / o->eval_interval + 1 : 1;
		d.samples[DS_SPLIT_TRAIN] = (uint64_t)(s->train_iters * s->tb);
		d.samples[DS_SPLIT_VALID] = (uint64_t)(evals * o->eval_iters * s->tb);
		d.samples[DS_SPLIT_TEST] = (uint64_t)(o->eval_iters * s->tb);
	}
	d.weight_by_docs = o->data_weight_by_docs;
	d.alpha = o->data_alpha;
	return ds_data_open(dd, &d, err);
}

/* One log line per blend: each dataset's weight and sample count. */
static void log_blends(const struct ds_data *dd)
{
	static const char *const name[3] = { "train", "valid", "test" };
	for (int k = 0; k < 3; k++) {
		const struct ds_blend *b = dd->blend[k];
		char line[1024];
		size_t n = 0;
		if (!b)
			continue;
		for (int i = 0; i < ds_blend_num_parts(b) && n < sizeof line; i++) {
			double w;
			uint64_t c;
			const struct ds_sampler *p = ds_blend_part(b, i, &w, &c);
			n += (size_t)snprintf(line + n, sizeof line - n, "%s%s weight %.4g, %llu samples of %llu windows",
					      i ? "; " : "", ds_dataset_path(p->ds), w, (unsigned long long)c,
					      (unsigned long long)p->count);
		}
		ds_log_info("data blend (%s, %llu samples before it repeats): %s", name[k],
			    (unsigned long long)ds_blend_size(b), line);
	}
}

/* After the run, rank 0: how many of the train samples drawn came from
 * each dataset of a blend (the achieved ratios NeoX prints). */
static void log_drawn(const struct ds_data *dd, long long consumed)
{
	const struct ds_blend *b = dd->blend[DS_SPLIT_TRAIN];
	uint64_t drawn[256];
	char line[1024];
	size_t n = 0;
	if (!b || consumed <= 0)
		return;
	ds_blend_drawn(b, (uint64_t)consumed, drawn);
	for (int i = 0; i < ds_blend_num_parts(b) && n < sizeof line; i++) {
		double w;
		const struct ds_sampler *p = ds_blend_part(b, i, &w, NULL);
		n += (size_t)snprintf(line + n, sizeof line - n, "%s%s %llu (%.4f, weight %.4f)", i ? "; " : "",
				      ds_dataset_path(p->ds), (unsigned long long)drawn[i],
				      (double)drawn[i] / (double)consumed, w);
	}
	ds_log_info("data blend: %lld train samples drawn: %s", consumed, line);
}

/* --load: restore the engine and *st from o->load (or, for --load auto,
 * the newest valid tag under --save; a first run with nothing saved yet
 * starts fresh).  *resumed is 1 when the optimizer state and progress came
 * from the checkpoint (not --no-load-optim).  Returns 0 or DS_E*. */
static int resume(const struct ds_train_opts *o, struct ds_engine *e, const struct ds_train_setup *s,
		  struct ds_train_state *st, struct ds_comm *comm, int *resumed, struct ds_err *err)
{
	const char *load_dir = o->load;
	const char *load_tag = NULL;
	int rc = 0;
	*resumed = 0;
	if (load_dir && !strcmp(load_dir, "auto")) {
		load_tag = "auto";
		load_dir = o->save;
		if (!load_dir)
			return ds_err_set(err, DS_EINVAL, "--load auto looks for checkpoints under --save DIR; give --save");
	}
	if (!load_dir)
		return 0;
	char *tag = NULL;
	/* --load auto without a finished checkpoint (tag NULL) starts fresh */
	rc = ds_train_load(load_dir, load_tag, o->no_load_optim, e, s, st, comm, &tag, err);
	if (rc == 0 && tag) {
		*resumed = !o->no_load_optim;
		const char *rc_env = getenv("SLURM_RESTART_COUNT");
		ds_log_info("loaded %s/%s: step %lld, %lld samples consumed%s%s%s", load_dir, tag, st->iteration,
			    st->consumed, o->no_load_optim ? " (weights only)" : "", rc_env ? ", SLURM_RESTART_COUNT " : "",
			    rc_env ? rc_env : "");
	}
	free(tag);
	return rc;
}

/* ---- the run, phase by phase ---------------------------------------------
 *
 * ds_train_run: set_up, the ceiling, start_loop; then per step take_step,
 * record_step, show_step, evaluate_step, the stop agreement, save_step
 * and, on a signal, stop; then finish; tear_down on every path.  The
 * driver's own collectives (the ceiling's broadcast, the stop agreement)
 * stay in ds_train_run: comms_logger's debug names them after it.  struct run holds what the run owns,
 * struct loop what the loop carries from step to step. */

struct run {
	const struct ds_train_opts *o;
	const struct ds_train_hooks *h;
	const struct ds_monitor_out *mo;  /* h->out: the tool's streams (may be NULL) */
	struct ds_comm *comm;
	int rank, W;
	struct ds_train_setup s;
	int have_setup, have_data;
	struct ds_data dd;
	struct ds_engine *e;
	struct ds_monitor *mon;           /* csv/tensorboard, rank 0 */
	struct ds_train_commlog *clog;
	struct ds_monitor_metrics metrics;  /* --metrics-json */
	struct ds_monitor_wallclock wc;
	struct ds_train_state st;
	struct ds_watchdog *wd;
	int32_t *rows;                    /* this rank's rows of one global batch: GA*MB x (T+1) */
	long long T;
	int resumed;
	struct ds_count_totals ct;        /* model flops per step */
	double peak;                      /* sgemm ceiling per rank, GFLOP/s */
	size_t held_setup;                /* bytes allocated when the loop starts */
	size_t dev_held_setup;            /* ... on the device (a device backend's alloc) */
	long long log_every;
	int bar;                          /* rank 0 draws the progress bar */
	int fp16;
	int agreed;                       /* the failure is every rank's (a save): nobody is stranded */
	char line[1024];
};

/* Carried from step to step; "interval" figures restart at each stdout line. */
struct loop {
	double t_int, t_start;            /* start of the interval, of the loop */
	long long int_steps, run_steps;   /* steps in the interval, in this run */
	double int_bwd, int_rec;          /* backward seconds, recompute seconds at its start */
	double red_flight, red_wait;      /* since the last wall-clock line */
	double pipe_compute, pipe_p2p;    /* pipeline: forward+backward and point-to-point seconds, the same */
	long long last_saved;             /* step of the last checkpoint, -1 none */
	double last_save_s;               /* seconds that save took, -1 none */
	long long nonfinite_run;          /* consecutive non-finite steps outside the fp16 scaler */
	double scale_before;              /* loss scale before this step */
	double swap_read, swap_written;   /* ZeRO-Infinity: swap file bytes in the interval */
	double swap_wait, step_s;         /* ... seconds blocked on them, and the steps' wall time */
	double swap_rbusy, swap_wbusy;    /* ... seconds reads, writes were in flight */
	double swap_iobusy;               /* ... seconds some read or write was */
};

/* A device backend's memory plan (estimate.h, ds_engine_mem_place)
 * against the free memory of this rank's device (mem_info after binding
 * it; the ranks of a node that share one device, local ranks equal
 * modulo the device count, split it): 0, or DS_ENOMEM naming the plan's
 * row at which the running device total crossed it, the sizes, and what
 * lowers it.  A cpu run, or a backend without mem_info: 0. */
static int device_fit(const struct ds_train_setup *s, int W, struct ds_err *err)
{
	const struct ds_compute_ops *cx = s->eng.compute;
	struct ds_engine_mem m;
	size_t fr = 0, tot = 0, sum = 0;
	char a[32], b[32], c[32], d[32];
	if (!cx || cx->host || !cx->mem_info)
		return 0;
	DS_TRY(cx->init(s->eng.device, err));
	DS_TRY(cx->mem_info(&fr, &tot, err));
	struct ds_compute_env env;
	ds_compute_probe(&env, s->device_kind);
	const int per_node = ds_train_ranks_per_node(W), nd = env.device_count > 0 ? env.device_count : 1;
	const int share = (per_node + nd - 1) / nd;
	const size_t mine = fr / (size_t)(share > 0 ? share : 1);
	if (ds_engine_mem_estimate(&s->eng, W, &m, err) < 0)
		return 0;   /* the engine says what is wrong with the setup itself */
	ds_engine_mem_place(&m, &s->eng, 1);
	int row = ds_engine_mem_device_fit(&m, mine, &sum);
	if (!row)
		return 0;
	char sharing[64] = "";
	if (share > 1)
		snprintf(sharing, sizeof sharing, " (its share of %s: %d ranks use this device)",
			 ds_fmt_bytes((double)fr, d, sizeof d), share);
	return ds_err_set(err, DS_ENOMEM, "device memory: the memory plan's %s row (%s) brings the device total to "
			  "%zu bytes (%s) per rank, past the %zu bytes (%s) free on %s device %d of %s%s; use a higher "
			  "ZeRO stage (zero_optimization.stage), a smaller micro batch (train_micro_batch_size_per_gpu) or "
			  "activation checkpointing (ds-train --check shows the plan)",
			  ds_engine_mem_cat_name(row - 1), ds_fmt_bytes((double)m.bytes[row - 1], a, sizeof a), sum,
			  ds_fmt_bytes((double)sum, b, sizeof b), mine, ds_fmt_bytes((double)mine, c, sizeof c), cx->name,
			  s->eng.device, ds_fmt_bytes((double)tot, d, sizeof d), sharing);
}

/* Config, data, engine, checkpoint, monitors and the model's flops per
 * step.  Returns 0 or DS_E*. */
static int set_up(struct run *r, struct ds_err *err)
{
	struct ds_train_setup *s = &r->s;
	DS_TRY(ds_train_setup_load(s, r->o, r->W, r->rank, err));
	r->have_setup = 1;
	ds_train_setup_log_notes(s);
	/* the compute backend before anything is written: a device that
	 * cannot be had stops every rank here (one rank's failure all's) */
	{
		struct ds_err mine = DS_ERR_INIT;
		int ok = ds_train_device(s, s->device_why, sizeof s->device_why, &mine) == 0;
		if (r->W > 1 && !ds_comm_agree(r->comm, ok, err))
			return ok ? ds_err_set(err, DS_EINVAL, "another rank cannot use its compute device (its error says why)")
				  : ds_err_set(err, mine.code, "%s", mine.msg);
		if (!ok)
			return ds_err_set(err, mine.code, "%s", mine.msg);
	}
	/* a device run: its memory plan against the device's free memory,
	 * before anything is allocated (one rank's misfit stops them all) */
	{
		struct ds_err mine = DS_ERR_INIT;
		int ok = device_fit(s, r->W, &mine) == 0;
		if (r->W > 1 && !ds_comm_agree(r->comm, ok, err))
			return ok ? ds_err_set(err, DS_ENOMEM, "another rank's device memory does not hold the memory plan "
					       "(its error says why)")
				  : ds_err_set(err, mine.code, "%s", mine.msg);
		if (!ok)
			return ds_err_set(err, mine.code, "%s", mine.msg);
	}
	/* the watchdog first: it covers loading and resuming too, and its own
	 * start (a broadcast and a barrier) stays out of the comms summary */
	DS_TRY(ds_watchdog_from_config(&r->wd, s->cfg, r->comm, r->h->on_watchdog, r->h->ctx, err));
	DS_TRY(ds_train_commlog_start(&r->clog, s, r->comm, err));
	/* ZeRO-Infinity: every nvme_path is usable on every rank before
	 * anything is allocated (one rank's bad directory stops them all) */
	if (s->eng.offload.optimizer || s->eng.offload.param) {
		struct ds_err mine = DS_ERR_INIT;
		int ok = ds_train_check_nvme(s, ds_train_ranks_per_node(r->W), &mine) == 0;
		if (r->W > 1 && !ds_comm_agree(r->comm, ok, err))
			return ok ? ds_err_set(err, DS_EINVAL, "another rank's nvme_path is not usable (its error says why)")
				  : ds_err_set(err, mine.code, "%s", mine.msg);
		if (!ok)
			return ds_err_set(err, mine.code, "%s", mine.msg);
	}
	if (cfg_dump_state(s))
		ds_config_print(s->cfg, ds_log_stream(), NULL);
	DS_TRY(open_data(&r->dd, r->o, s, err));
	r->have_data = 1;
	if (r->rank == 0)
		log_blends(&r->dd);
	r->T = s->model.seq_length;
	if (!s->train_iters)
		s->train_iters = (long long)(r->dd.train.count / (uint64_t)s->tb) > 0
					 ? (long long)(r->dd.train.count / (uint64_t)s->tb) : 1;
	DS_TRY(ds_engine_create(&r->e, &s->eng, r->comm, err));
	if (r->rank == 0 && ds_engine_dev_comm(r->e) && ds_comm_size(r->comm) > 1)
		ds_log_info("device buffers between ranks over %s: %s", ds_comm_backend(ds_engine_dev_comm(r->e)),
			    ds_comm_devpath_why(ds_engine_dev_comm(r->e)));
	DS_TRY(resume(r->o, r->e, s, &r->st, r->comm, &r->resumed, err));

	/* monitors, rank 0 only */
	if (r->rank == 0) {
		struct ds_monitor_opts mo = { 0 };
		mo.csv = (struct ds_monitor_sink_opts){ s->csv_enabled, s->csv_path, s->csv_job };
		mo.tensorboard = (struct ds_monitor_sink_opts){ s->tb_enabled, s->tb_path, s->tb_job };
		mo.resume = r->resumed;
		mo.resume_samples = r->st.iteration * s->tb;
		DS_TRY(ds_monitor_create(&r->mon, &mo, err));
	}

	/* throughput figures: model flops per step (the ceiling follows) */
	return ds_count_train_flops(&s->model, (int)s->tb, (int)r->T, s->eng.checkpointing ? 1.0 : 0.0, &r->ct, err);
}

/* Rank 0: which layers each pipeline stage holds, as DeepSpeed's
 * PipelineModule prints its partition (stage, count, index: type). */
static void log_stages(const struct ds_engine *e, const char *method)
{
	const struct ds_gpt *m = ds_engine_model(e);
	const int *b = ds_engine_stage_bounds(e);
	const int pp = ds_engine_topo(e)->pp, n = ds_gpt_config(m)->num_layers + 5;
	struct ds_pipe_layer *ly = calloc((size_t)n, sizeof *ly);
	if (!ly || !b) {
		free(ly);
		return;
	}
	ds_pipe_layers(m, ly, n);
	ds_log_info("pipeline: %d stages, partition method %s", pp, method);
	for (int s = 0; s < pp; s++) {
		char line[512];
		size_t o = (size_t)snprintf(line, sizeof line, "stage=%d layers=%d", s, b[s + 1] - b[s]);
		for (int i = b[s]; i < b[s + 1] && o < sizeof line; i++)
			o += (size_t)snprintf(line + o, sizeof line - o, "%s %d: %s", i == b[s] ? " |" : ",", i, ly[i].type);
		ds_log_info("%s", line);
	}
	free(ly);
}

/* After the ceiling: the run's one-line summary, the batch buffer, the
 * allocator's mark, the watchdog and the loop's starting state. */
static int start_loop(struct run *r, struct loop *lp, struct ds_err *err)
{
	const struct ds_train_setup *s = &r->s;
	char bytes[32];
	char lay[96] = "";
	if (s->tp * s->pp > 1)
		snprintf(lay, sizeof lay, " (tensor %d x pipeline %d x data %d)", s->tp, s->pp, s->dp);
	ds_log_info("ds-train: %s, %lld parameters, %d rank%s%s, ZeRO stage %d, batch %lld = %lld x %lld x %d, "
		    "%lld steps from step %lld; data %s (%llu train / %llu valid windows); sgemm ceiling %.1f "
		    "GFLOP/s per rank; model state %s per rank",
		    ds_optim_type_name(s->eng.optim.type), (long long)ds_engine_num_params(r->e), r->W, r->W > 1 ? "s" : "",
		    lay, s->eng.zero_stage, s->tb, s->mb, s->ga, s->dp, s->train_iters, r->st.iteration,
		    r->dd.blend[DS_SPLIT_TRAIN] ? r->o->data : ds_dataset_path(r->dd.train_ds), (unsigned long long)r->dd.train.count,
		    (unsigned long long)(r->dd.valid_ds ? r->dd.valid.count : r->dd.valid.count), r->peak,
		    ds_fmt_bytes((double)ds_engine_state_bytes(r->e), bytes, sizeof bytes));
	ds_log_info("%s", s->device_why);   /* the compute backend (chosen in set_up, before any output) */
	{   /* OpenBLAS's kernels, when dstk chose them or they are the slow fallback (app/blas_core.h) */
		char bn[512];
		int k = ds_blas_core_note(bn, sizeof bn);
		if (k == 1)
			ds_log_info("blas: %s", bn);
		else if (k == 2)
			ds_log_warn("blas: %s", bn);
	}
	if (s->model.moe.enabled) {   /* MoE: the layers, and a rank's share with expert parallelism */
		int ep = ds_gpt_ep(ds_engine_model(r->e), NULL);
		ds_log_info("MoE: %d layers with experts, top-%d, capacity factor %g, drop_tokens %s, ep_size %d%s",
			    ds_moe_num_layers(&s->model), s->model.moe.k, s->model.moe.capacity_factor,
			    s->model.moe.drop_tokens ? "true" : "false", ep,
			    ep > 1 ? " (the parameters above are one rank's: its experts and every non-expert one)" : "");
	}
	if (s->eng.half == DS_HALF_BF16) {   /* which matrix products the bf16 run uses (gpt.h) */
		char plan[512];
		(s->eng.compute ? s->eng.compute : &ds_compute_cpu)->mm_plan(s->eng.bf16_matmul, plan, sizeof plan);
		ds_log_info("matmul: %s (dstk.bf16_matmul \"%s\")", plan, ds_bf16_mode_name(s->eng.bf16_matmul));
	}

	if (r->rank == 0 && s->pp > 1)
		log_stages(r->e, s->eng.pipe_partition);
	r->rows = ds_alloc(sizeof(int32_t) * (size_t)(s->mb * s->ga * (r->T + 1)));
	if (!r->rows)
		return ds_err_set(err, DS_ENOMEM, "out of memory for a batch");
	/* everything the run holds is allocated: what the estimator predicts;
	 * from here the peak measures the training loop */
	r->held_setup = ds_mem_held();
	ds_mem_peak_reset();
	if (s->eng.compute && s->eng.compute->mem_held) {
		size_t pk;
		s->eng.compute->mem_held(&r->dev_held_setup, &pk, 1);
	}
	r->log_every = r->o->log_interval ? r->o->log_interval : s->steps_per_print;
	r->bar = r->rank == 0 && r->mo && r->mo->progress;
	r->fp16 = s->eng.half == DS_HALF_FP16;
	lp->t_int = lp->t_start = ds_now();
	lp->int_rec = ds_engine_recompute_seconds(r->e);  /* activation_checkpointing.profile */
	lp->last_saved = r->resumed ? r->st.iteration : -1;
	lp->last_save_s = -1;
	lp->scale_before = ds_engine_scaler(r->e)->cur_scale;
	return 0;
}

/* One optimizer step on the next global batch; counts it in r->st (a
 * skipped step: the fp16 scaler's overflow, or non-finite gradients under
 * dstk.nonfinite_policy).  *dt: its wall time.  Returns 0 or DS_E*. */
static int take_step(struct run *r, struct loop *lp, struct ds_engine_step *step, double *dt, struct ds_err *err)
{
	const struct ds_train_setup *s = &r->s;
	struct ds_train_state *st = &r->st;
	struct ds_sched_value sv;
	ds_sched_step_value(&s->sched, s->org_lr, st->sched_steps + 1, &sv);
	int betas = sv.has_betas && s->eng.optim.type != DS_OPTIM_SGD;
	double t0 = ds_now();
	ds_watchdog_beat(r->wd, st->iteration + 1, "train_step");
	DS_TRY(fill_rows(&r->dd.train, s, st->consumed, r->rows, r->T, err));
	const struct ds_engine_batch in = { .tokens = r->rows, .base = st->consumed, .step = st->iteration + 1,
					    .lr = sv.lr, .has_betas = betas, .beta1 = sv.beta1, .beta2 = sv.beta2 };
	DS_TRY(ds_engine_train_step(r->e, &in, step, err));
	*dt = ds_now() - t0;
	st->iteration++;
	st->consumed += s->tb;
	lp->run_steps++;
	lp->int_steps++;
	if (step->skipped && step->overflow) {
		/* fp16 dynamic scaling: the scaler handles it (DeepSpeed's log line) */
		st->skipped++;
		ds_log_info("step %lld: fp16 gradient overflow, step skipped (%lld so far); loss scale %.0f -> %.0f",
			    st->iteration, st->skipped, lp->scale_before, step->loss_scale);
	} else if (step->skipped) {
		st->skipped++;
		lp->nonfinite_run++;
		ds_log_warn("step %lld: non-finite gradients; step skipped (parameters and schedule unchanged)",
			    st->iteration);
		if (s->nonfinite_abort || lp->nonfinite_run >= s->nonfinite_max)
			return ds_err_set(err, DS_EIO,
					  "step %lld: non-finite gradients %s; stopping (dstk.nonfinite_policy \"%s\")",
					  st->iteration, s->nonfinite_abort ? "" : "in too many consecutive steps",
					  s->nonfinite_abort ? "abort" : "skip, nonfinite_max_consecutive reached");
	} else {
		lp->nonfinite_run = 0;
		st->sched_steps++;
	}
	lp->scale_before = step->loss_scale;
	return 0;
}

/* What a step records: the run's losses, the wall-clock timers, the
 * monitors (csv, tensorboard), the --metrics-json window and the flops
 * profile at its step.  Returns 0 or DS_E*. */
static int record_step(struct run *r, struct loop *lp, const struct ds_engine_step *step, double dt,
		       struct ds_train_result *res, struct ds_err *err)
{
	const struct ds_train_setup *s = &r->s;
	const struct ds_train_state *st = &r->st;
	const long long T = r->T;
	if (lp->run_steps == 1)
		res->first_loss = step->loss;
	res->last_loss = step->loss;
	lp->int_bwd += step->t_bwd;
	ds_monitor_wallclock_add(&r->wc, DS_WC_FWD, step->t_fwd);
	ds_monitor_wallclock_add(&r->wc, DS_WC_BWD, step->t_bwd + step->t_reduce);
	ds_monitor_wallclock_add(&r->wc, DS_WC_BWD_INNER, step->t_bwd);
	ds_monitor_wallclock_add(&r->wc, DS_WC_BWD_ALLREDUCE, step->t_reduce);
	ds_monitor_wallclock_add(&r->wc, DS_WC_STEP, step->t_step);
	lp->red_flight += step->t_red_flight;
	lp->red_wait += step->t_red_wait;
	lp->pipe_compute += step->t_fwd + step->t_bwd;
	lp->pipe_p2p += step->t_p2p;
	lp->swap_read += (double)step->swap_read;
	lp->swap_written += (double)step->swap_written;
	lp->swap_wait += step->t_swap_wait;
	lp->swap_rbusy += step->t_swap_read_busy;
	lp->swap_wbusy += step->t_swap_write_busy;
	lp->swap_iobusy += step->t_swap_io_busy;
	lp->step_s += dt;
	if (r->mon) {
		/* DeepSpeed logs the lr after the step: the next step's value */
		struct ds_sched_value nv;
		ds_sched_step_value(&s->sched, s->org_lr, st->sched_steps + 1, &nv);
		struct ds_monitor_step_events ev = { .steps_done = st->iteration - 1, .train_batch_size = s->tb,
						     .loss = step->loss, .lr = nv.lr, .fp16 = r->fp16,
						     .loss_scale = step->loss_scale, .mixed = s->eng.half != DS_HALF_NONE,
						     .skipped = st->skipped,
						     .wallclock = s->wall_clock ? &r->wc : NULL };
		DS_TRY(ds_monitor_log_step(r->mon, &ev, err));
	}
	if (r->o->metrics_json) {
		struct ds_monitor_step_rec rec = { st->iteration, step->t_fwd * 1e3, (step->t_bwd + step->t_reduce) * 1e3,
						   step->t_step * 1e3, s->tb / dt, s->tb * T / dt,
						   r->ct.train_flops_step / dt / r->W * 1e-12, step->loss };
		DS_TRY(ds_monitor_metrics_add(&r->metrics, &rec, err));
	}
	if (r->rank == 0 && cfg_profile_step(s) == st->iteration)
		DS_TRY(run_profiler(s, r->e, step, st->iteration, r->peak, r->mo, err));
	return 0;
}

/* What rank 0 shows (only rank 0 calls this): every log_every steps the
 * wall-clock lines (logged) and the results line with the interval's
 * throughput, else the progress bar. */
static void show_step(struct run *r, struct loop *lp, const struct ds_engine_step *step)
{
	const struct ds_train_setup *s = &r->s;
	const struct ds_train_state *st = &r->st;
	const long long T = r->T;
	if (s->wall_clock && st->iteration % r->log_every == 0) {
		ds_monitor_wallclock_line(&r->wc, 0, r->line, sizeof r->line);
		ds_log_info("%s", r->line);
		/* dstk's own line: how much of the gradient reductions
		 * backward hid (overlap_comm); DeepSpeed has no such timer */
		if (r->W > 1)
			ds_log_info("grad reduction (ms) | in_flight: %.2f | waited: %.2f | hidden: %.2f | overlap_comm: %s",
				    lp->red_flight * 1e3, lp->red_wait * 1e3,
				    (lp->red_flight > lp->red_wait ? lp->red_flight - lp->red_wait : 0) * 1e3,
				    s->eng.overlap_comm ? "true" : "false");
		lp->red_flight = lp->red_wait = 0;
		/* dstk's own line under pipelining: rank 0's (stage 0's) time in
		 * its forward and backward passes and in point-to-point transfers,
		 * which is where a stage waits for its neighbours: the bubble,
		 * next to 1F1B's (p - 1) / (m + p - 1) */
		if (s->pp > 1) {
			double busy = lp->pipe_compute + lp->pipe_p2p;
			ds_log_info("pipeline (ms) | compute: %.2f | p2p: %.2f | bubble: %.4f | 1F1B (p-1)/(m+p-1): %.4f",
				    lp->pipe_compute * 1e3, lp->pipe_p2p * 1e3, busy > 0 ? lp->pipe_p2p / busy : 0.0,
				    (double)(s->pp - 1) / (double)(s->ga + s->pp - 1));
		}
		lp->pipe_compute = lp->pipe_p2p = 0;
	}
	if (st->iteration % r->log_every == 0 || st->iteration == s->train_iters) {
		double el = ds_now() - lp->t_int;
		double sps = lp->int_steps * s->tb / el;
		struct ds_monitor_step ls = { .step = st->iteration, .total_steps = s->train_iters,
					      .consumed_samples = st->consumed, .loss = step->loss, .lr = step->lr,
					      .grad_norm = step->grad_norm, .skipped = st->skipped,
					      .fp16 = r->fp16, .loss_scale = step->loss_scale,
					      .moe = s->model.moe.enabled, .moe_loss = step->moe_aux,
					      .moe_dropped = step->moe_dropped,
					      .samples_per_s = sps, .tokens_per_s = sps * T,
					      .tflops = r->ct.train_flops_step * lp->int_steps / el * 1e-12,
					      .mfu = r->peak > 0 ? r->ct.train_flops_step * lp->int_steps / el / r->W / (r->peak * 1e9) : 0,
					      .peak_rss_bytes = (double)ds_mem_peak_rss() };
		ds_monitor_step_line(r->line, sizeof r->line, &ls);
		if (r->bar)
			ds_monitor_out_progress_erase(r->mo);
		ds_monitor_out_line(r->mo, "%s", r->line);
		if (s->ckpt_profile) {
			double rec = ds_engine_recompute_seconds(r->e) - lp->int_rec;
			ds_monitor_out_line(r->mo, "activation checkpointing: %lld steps recomputed layer forwards in "
					    "%.2f ms (%.2f ms/step, %.1f%% of backward)", lp->int_steps, rec * 1e3,
					    rec * 1e3 / lp->int_steps, lp->int_bwd > 0 ? 100.0 * rec / lp->int_bwd : 0.0);
		}
		/* dstk's own line: what the swap files moved per step (rank 0's) */
		if (s->eng.offload.optimizer || s->eng.offload.param) {
			double n = lp->int_steps ? (double)lp->int_steps : 1;
			/* GB/s as ds-nvme-tune's (2^30 bytes/s) over the time the reads
			 * (writes) were in flight: the device's rate while it worked */
			ds_log_info("nvme swap per step (rank 0) | read_MB: %.3f | written_MB: %.3f | wait_ms: %.2f | "
				    "step_ms: %.2f | read_busy_ms: %.2f | write_busy_ms: %.2f | read_GBps: %.3f | "
				    "write_GBps: %.3f | io_busy_ms: %.2f", lp->swap_read / n / 1e6, lp->swap_written / n / 1e6,
				    lp->swap_wait / n * 1e3, lp->step_s / n * 1e3, lp->swap_rbusy / n * 1e3,
				    lp->swap_wbusy / n * 1e3, lp->swap_rbusy > 0 ? lp->swap_read / lp->swap_rbusy / 1073741824.0 : 0.0,
				    lp->swap_wbusy > 0 ? lp->swap_written / lp->swap_wbusy / 1073741824.0 : 0.0,
				    lp->swap_iobusy / n * 1e3);
		}
		lp->swap_read = lp->swap_written = lp->swap_wait = lp->step_s = lp->swap_rbusy = lp->swap_wbusy = lp->swap_iobusy = 0;
		lp->t_int = ds_now();
		lp->int_steps = 0;
		lp->int_bwd = 0;
		lp->int_rec = ds_engine_recompute_seconds(r->e);
	} else if (r->bar) {
		double rate = lp->run_steps / (ds_now() - lp->t_start);
		ds_monitor_progress(r->line, sizeof r->line, st->iteration, s->train_iters, rate, 30);
		ds_monitor_out_progress(r->mo, r->line);
	}
}

/* Every --eval-interval steps (with validation data): the mean loss of
 * --eval-iters batches, shown and recorded by rank 0.  Returns 0 or DS_E*. */
static int evaluate_step(struct run *r, struct ds_err *err)
{
	const struct ds_train_state *st = &r->st;
	const long long every = r->o->eval_interval;
	if (!every || st->iteration % every != 0 || !r->dd.valid.count)
		return 0;
	double vl;
	ds_watchdog_beat(r->wd, st->iteration, "eval");
	DS_TRY(evaluate(r->e, &r->s, &r->dd.valid, r->o->eval_iters, r->rows, r->T, &vl, err));
	if (r->rank == 0) {
		ds_monitor_eval_line(r->line, sizeof r->line, st->iteration, vl);
		ds_monitor_out_line(r->mo, "%s", r->line);
		if (r->mon)
			DS_TRY(ds_monitor_write(r->mon, DS_MONITOR_EVAL_LOSS, vl, st->consumed, err));
	}
	return 0;
}

/* After the last step, with --test-data: the mean loss of --eval-iters
 * batches of the test data, as NeoX evaluates its test set at the end of
 * training.  Returns 0 or DS_E*. */
static int test_step(struct run *r, struct ds_err *err)
{
	double tl;
	if (!r->o->test_data || !r->dd.test.count || r->o->eval_iters < 1)
		return 0;
	ds_watchdog_beat(r->wd, r->st.iteration, "test");
	DS_TRY(evaluate(r->e, &r->s, &r->dd.test, r->o->eval_iters, r->rows, r->T, &tl, err));
	if (r->rank == 0) {
		ds_monitor_test_line(r->line, sizeof r->line, r->st.iteration, tl);
		ds_monitor_out_line(r->mo, "%s", r->line);
	}
	return 0;
}

/* Save (with --save) on the save interval, the last step, a stop request
 * or the --exit-interval step; before a save on a signal, warn when it
 * may not fit in the job's time left.  Returns 0 or DS_E*. */
static int save_step(struct run *r, struct loop *lp, int64_t flag, int exiting, struct ds_train_result *res,
		     struct ds_err *err)
{
	const struct ds_train_opts *o = r->o;
	const struct ds_train_state *st = &r->st;
	int save_now = o->save && ((o->save_interval && st->iteration % o->save_interval == 0) ||
				   st->iteration == r->s.train_iters || flag || exiting);
	if (!save_now)
		return 0;
	if (flag && r->rank == 0)
		check_save_fits(r->s.cfg, lp->last_save_s, (int)flag, r->h->stop_at ? (long)*r->h->stop_at : 0);
	ds_watchdog_beat(r->wd, st->iteration, "save");
	double ts = ds_now();
	int rc = ds_train_save(o->save, r->e, &r->s, st, r->comm, err);
	if (rc < 0) {
		r->agreed = 1;  /* every rank failed the save with this message */
		return rc;
	}
	lp->last_saved = st->iteration;
	res->saved = 1;
	lp->last_save_s = ds_now() - ts;
	ds_log_info("saved %s/global_step%lld in %.2f s", o->save, st->iteration, lp->last_save_s);
	if (o->keep_last_n > 0 && r->rank == 0)
		DS_TRY(ds_train_prune_checkpoints(o->save, o->keep_last_n, st->iteration, err));
	return 0;
}

/* Stop on signal `flag` after save_step: the comms table, then DS_ESIGNAL
 * (exit 4, requeue), or DS_EIO when there was no --save to resume from. */
static int stop(struct run *r, const struct loop *lp, int64_t flag, struct ds_err *err)
{
	const struct ds_train_opts *o = r->o;
	if (r->bar)
		ds_monitor_out_progress_end(r->mo);
	if (!o->save)
		return ds_err_set(err, DS_EIO, "stopped by signal %d at step %lld without --save: nothing "
				  "to resume from", (int)flag, r->st.iteration);
	DS_TRY(ds_train_commlog_summary(r->clog, r->mo, err));
	return ds_err_set(err, DS_ESIGNAL, "stopped by signal %d at step %lld after saving %s/global_step%lld; "
			  "resume with --load auto", (int)flag, r->st.iteration, o->save, lp->last_saved);
}

/* After the last step: the comms table, the memory report (and the
 * --metrics-json file), the run's figures.  Returns 0 or DS_E*. */
static int finish(struct run *r, const struct loop *lp, struct ds_train_result *res, struct ds_err *err)
{
	const struct ds_train_setup *s = &r->s;
	const int js = r->o->metrics_json && r->rank == 0;
	json_t *memj = NULL;
	int rc;
	if (r->bar)
		ds_monitor_out_progress_end(r->mo);
	if (r->rank == 0)
		log_drawn(&r->dd, r->st.consumed);
	DS_TRY(ds_train_commlog_summary(r->clog, r->mo, err));
	DS_TRY(report_memory(r->comm, s, r->e, r->held_setup, r->dev_held_setup, r->mo, js ? &memj : NULL, err));
	if (js) {
		struct ds_monitor_metrics_info mi = { s->start_profile_step, s->end_profile_step, (int)s->ga, s->tb,
						      r->rank, NULL, memj };
		rc = ds_monitor_metrics_write(&r->metrics, &mi, r->o->metrics_json, err);
		json_decref(memj);
		if (rc < 0)
			return rc;
	}
	res->steps = lp->run_steps;
	res->last_step = r->st.iteration;
	res->skipped = r->st.skipped;
	return 0;
}

/* Free what the run holds.  A failure after the engine exists (W > 1) may
 * leave other ranks in a collective: the tool hears of it first. */
static void tear_down(struct run *r, int rc, struct ds_train_result *res, struct ds_err *err)
{
	ds_watchdog_stop(r->wd);
	if (rc < 0 && rc != DS_ESIGNAL && r->W > 1 && (rc != DS_EINVAL || r->e) && !r->agreed) {
		/* other ranks may be waiting in a collective this rank will not
		 * join: the tool decides (ds-train ends the job) before anything
		 * is freed, since freeing may itself wait on them */
		res->stranded = 1;
		if (r->h->on_stranded)
			r->h->on_stranded(r->h->ctx, r->comm, rc, err);
	}
	ds_free(r->rows);
	ds_monitor_metrics_release(&r->metrics);
	ds_monitor_destroy(r->mon);
	ds_engine_destroy(r->e);
	ds_train_commlog_stop(r->clog, r->comm);
	if (r->have_data)
		ds_data_release(&r->dd);
	if (r->have_setup)
		ds_train_setup_release(&r->s);
}

int ds_train_run(const struct ds_train_opts *o, struct ds_comm *comm, const struct ds_train_hooks *h,
		 struct ds_train_result *res, struct ds_err *err)
{
	static const struct ds_train_hooks no_hooks;
	struct run r = { .o = o, .h = h ? h : &no_hooks, .comm = comm, .rank = ds_comm_rank(comm),
			 .W = ds_comm_size(comm), .metrics = DS_MONITOR_METRICS_INIT, .wc = DS_MONITOR_WALLCLOCK_INIT };
	struct loop lp = { 0 };
	int rc;

	memset(res, 0, sizeof *res);
	r.mo = r.h->out;
	if ((rc = set_up(&r, err)) < 0)
		goto out;
	/* MFU's reference, this machine's sgemm ceiling, measured on rank 0 */
	r.peak = o->peak_gflops;
	if (r.peak <= 0) {
		r.peak = r.rank == 0 ? ds_ceiling_sgemm_gflops(1024, 0.2) : 0;
		if (r.W > 1)
			ds_comm_broadcast(comm, &r.peak, 1, DS_F64, 0, NULL);
	}
	if ((rc = start_loop(&r, &lp, err)) < 0)
		goto out;
	while (r.st.iteration < r.s.train_iters) {
		struct ds_engine_step step;
		double dt;
		if ((rc = take_step(&r, &lp, &step, &dt, err)) < 0 || (rc = record_step(&r, &lp, &step, dt, res, err)) < 0)
			goto out;
		if (r.rank == 0)
			show_step(&r, &lp, &step);
		if ((rc = evaluate_step(&r, err)) < 0)
			goto out;
		/* stop requests: every rank agrees, at the step boundary, on the
		 * largest signal number any rank saw */
		int64_t flag = r.h->stop ? *r.h->stop : 0;
		ds_watchdog_beat(r.wd, r.st.iteration, "stop_agreement");
		if (r.W > 1 && (rc = ds_comm_allreduce(comm, &flag, 1, DS_I64, DS_MAX, err)) < 0)
			goto out;
		const int exiting = o->exit_interval && lp.run_steps % o->exit_interval == 0;
		if ((rc = save_step(&r, &lp, flag, exiting, res, err)) < 0)
			goto out;
		if (flag) {
			rc = stop(&r, &lp, flag, err);
			goto out;
		}
		if (exiting)
			break;
	}
	if (r.st.iteration >= r.s.train_iters && (rc = test_step(&r, err)) < 0)
		goto out;
	rc = finish(&r, &lp, res, err);
out:
	tear_down(&r, rc, res, err);
	return rc;
}
