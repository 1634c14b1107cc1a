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

#include "cpu/ceiling.h"
#include "cpu/gemm_bf16.h"
#include "driver/profile.h"
#include "engine/estimate.h"
#include "model/count.h"
#include "monitor/log.h"
#include "monitor/metrics.h"
#include "monitor/monitor.h"
#include "monitor/out.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/timer.h"

/* flops_profiler at its profile_step (rank 0): DeepSpeed's report with the
 * engine lines and this step's measured latencies per micro-batch. */
static int run_profiler(const struct ds_train_setup *s, const struct ds_engine_step *r, long long step,
			double peak_gflops, const struct ds_monitor_out *mo, struct ds_err *err)
{
	const struct ds_config_values *cv = ds_config_values(s->cfg);
	int64_t depth = cv->flops_profiler.module_depth, top = cv->flops_profiler.top_modules;
	int detailed = cv->flops_profiler.detailed;
	double rf = cv->flops_profiler.recompute_fwd_factor;
	const char *out = cv->flops_profiler.output_file;
	struct ds_count cnt = DS_COUNT_INIT;
	struct ds_count_opts co = { (int)s->mb, s->model.seq_length, DS_COUNT_CURRENT, 0 };
	DS_TRY(ds_count_model(&s->model, &co, &cnt, err));
	double ga = (double)s->ga;
	cnt.nodes[0].latency_s = r->t_fwd / ga;
	struct ds_profile_view v = { DS_PROFILE_TEXT, (int)step, (int)depth, (int)(top > 0 ? top : 1), detailed, NULL };
	struct ds_profile_engine pe = { s->W, s->W, 1, (int)s->mb, r->t_fwd / ga, 1, (r->t_bwd + r->t_reduce) / ga,
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
 * sample base + a*MB*W + rank*MB + b (engine.h). */
static int fill_rows(const struct ds_sampler *sp, const struct ds_train_setup *s, long long base, int32_t *rows,
		     long long T, struct ds_err *err)
{
	for (long long a = 0; a < s->ga; a++)
		for (long long b = 0; b < s->mb; b++) {
			uint64_t g = (uint64_t)(base + a * s->mb * s->W + (long long)s->rank * s->mb + b);
			DS_TRY(ds_sampler_get(sp, g, rows + (a * s->mb + b) * (T + 1), err));
		}
	return 0;
}

static int evaluate(struct ds_engine *e, const struct ds_train_setup *s, const struct ds_data *dd,
		    long long iters, int32_t *rows, long long T, double *loss, struct ds_err *err)
{
	double sum = 0;
	long long n = 0;
	for (long long k = 0; k < iters; k++) {
		double l;
		DS_TRY(fill_rows(&dd->valid, s, k * s->tb, rows, T, err));
		DS_TRY(ds_engine_eval(e, rows, (int)(s->mb * s->ga), &l, err));
		sum += l;
		n++;
	}
	*loss = n ? sum / n : 0;
	return 0;
}

/* After the run, every rank: what libds's allocator held after setup and
 * at its peak during the loop, and the peak RSS, gathered to rank 0, which
 * prints the maxima over ranks next to the estimate (stdout) and, when
 * js is given, returns them per rank for --metrics-json. */
static int report_memory(struct ds_comm *comm, const struct ds_train_setup *s, const struct ds_engine *e,
			 size_t held_setup, const struct ds_monitor_out *mo, json_t **js, struct ds_err *err)
{
	struct ds_engine_mem m;
	const int W = s->W;
	double mine[3] = { (double)held_setup, (double)ds_mem_peak(), (double)ds_mem_peak_rss() }, mx[3] = { 0, 0, 0 };
	DS_TRY(ds_engine_mem_estimate(&s->eng, W, &m, err));
	double *all = malloc(sizeof(double) * 3 * (size_t)W);
	if (!all)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	int rc = 0;
	if (W > 1)
		rc = ds_comm_allgather(comm, mine, all, 3, DS_F64, err);
	else
		memcpy(all, mine, sizeof mine);
	if (rc < 0 || s->rank != 0)
		goto out;
	for (int r = 0; r < W; r++)
		for (int k = 0; k < 3; k++)
			if (all[3 * r + k] > mx[k])
				mx[k] = all[3 * r + k];
	/* model_state: the engine's own count of its parameter, gradient and
	 * optimizer-state buffers (the same on every rank) */
	ds_monitor_out_line(mo, "memory per rank (bytes, max over %d rank%s) | estimate %zu | alloc_setup %.0f | "
			    "alloc_peak %.0f | peak_rss %.0f | alloc/estimate %.4f | model_state %zu | "
			    "model_state_estimate %zu", W, W > 1 ? "s" : "", m.total, mx[0], mx[1], mx[2],
			    m.total ? mx[0] / (double)m.total : 0.0, ds_engine_state_bytes(e), m.model_state);
	if (js) {
		json_t *est = json_object(), *a[3] = { json_array(), json_array(), json_array() };
		for (int c = 0; est && c < DS_MEM_NCAT; c++)
			json_object_set_new(est, ds_engine_mem_cat_name(c), json_integer((json_int_t)m.bytes[c]));
		for (int r = 0; r < W; r++)
			for (int k = 0; k < 3; k++)
				json_array_append_new(a[k], json_integer((json_int_t)all[3 * r + k]));
		*js = json_pack("{s:i,s:i,s:I,s:o,s:I,s:o,s:o,s:o}", "world_size", W, "zero_stage", m.stage,
				"estimate_bytes", (json_int_t)m.total, "estimate", est, "model_state_bytes",
				(json_int_t)ds_engine_state_bytes(e), "alloc_setup_bytes", a[0], "alloc_peak_bytes", a[1],
				"peak_rss_bytes", a[2]);
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
	d.split = o->split;
	d.format = DS_DATA_AUTO;
	d.seq_length = (uint64_t)s->model.seq_length;
	d.vocab_size = (uint64_t)s->model.vocab_size;
	d.seed = s->eng.seed;
	return ds_data_open(dd, &d, err);
}

/* --load: restore the engine and *st from o->load (or, for --load auto,
 * the newest valid tag under --save; a first run with nothing saved yet
 * starts fresh).  *resumed is 1 when the optimizer state and progress came
 * from the checkpoint (not --no-load-optim).  Returns 0 or DS_E*. */
static int resume(const struct ds_train_opts *o, struct ds_engine *e, const struct ds_train_setup *s,
		  struct ds_train_state *st, int *resumed, struct ds_err *err)
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
	/* --load auto on a first run (nothing saved yet) starts fresh */
	if (load_tag && access(load_dir, F_OK) != 0) {
		ds_log_info("--load auto: %s holds no checkpoint yet; starting from scratch", load_dir);
		return 0;
	}
	rc = ds_train_load(load_dir, load_tag, o->no_load_optim, e, s, st, &tag, err);
	if (rc == DS_EINVAL && load_tag && strstr(err->msg, "no checkpoint")) {
		ds_log_info("--load auto: %s", err->msg);
		ds_err_clear(err);
		rc = 0;
	} else if (rc == 0) {
		*resumed = !o->no_load_optim;
		const char *rc_env = getenv("SLURM_RESTART_COUNT");
		ds_log_info("loaded %s/%s: step %lld, %lld samples consumed%s%s%s", load_dir, tag, st->iteration,
			    st->consumed, o->no_load_optim ? " (weights only)" : "", rc_env ? ", SLURM_RESTART_COUNT " : "",
			    rc_env ? rc_env : "");
	}
	free(tag);
	return rc;
}

int ds_train_run(const struct ds_train_opts *o, struct ds_comm *comm, const struct ds_train_hooks *h,
		 struct ds_train_result *res, struct ds_err *err)
{
	static const struct ds_train_hooks no_hooks;
	struct ds_train_setup s;
	struct ds_data dd;
	struct ds_engine *e = NULL;
	struct ds_monitor *mon = NULL;
	struct ds_train_commlog *clog = NULL;
	struct ds_monitor_metrics metrics = DS_MONITOR_METRICS_INIT;
	struct ds_monitor_wallclock wc = DS_MONITOR_WALLCLOCK_INIT;
	struct ds_train_state st = { 0 };
	struct ds_watchdog *wd = NULL;
	int32_t *rows = NULL;
	json_t *memj = NULL;
	int rc, have_setup = 0, have_data = 0;
	char line[1024];

	memset(res, 0, sizeof *res);
	memset(&dd, 0, sizeof dd);
	if (!h)
		h = &no_hooks;
	const struct ds_monitor_out *mo = h->out;
	const int rank = ds_comm_rank(comm), W = ds_comm_size(comm);
	if ((rc = ds_train_setup_load(&s, o, W, rank, err)) < 0)
		goto out;
	have_setup = 1;
	if ((rc = ds_train_commlog_start(&clog, &s, comm, err)) < 0)
		goto out;
	if (cfg_dump_state(&s))
		ds_config_print(s.cfg, ds_log_stream(), NULL);
	if ((rc = open_data(&dd, o, &s, err)) < 0)
		goto out;
	have_data = 1;
	const long long T = s.model.seq_length;
	if (!s.train_iters)
		s.train_iters = (long long)(dd.train.count / (uint64_t)s.tb) > 0 ? (long long)(dd.train.count / (uint64_t)s.tb) : 1;
	if ((rc = ds_engine_create(&e, &s.eng, comm, err)) < 0)
		goto out;

	int resumed = 0;
	if ((rc = resume(o, e, &s, &st, &resumed, err)) < 0)
		goto out;

	/* monitors, rank 0 only */
	if (rank == 0) {
		struct ds_monitor_opts mo = { 0 };
		mo.csv = (struct ds_monitor_sink_opts){ s.csv_enabled, s.csv_path, s.csv_job };
		mo.tensorboard = (struct ds_monitor_sink_opts){ s.tb_enabled, s.tb_path, s.tb_job };
		mo.resume = resumed;
		mo.resume_samples = st.iteration * s.tb;
		if ((rc = ds_monitor_create(&mon, &mo, err)) < 0)
			goto out;
	}

	/* throughput figures: model flops per step and this machine's ceiling */
	struct ds_count_totals ct;
	if ((rc = ds_count_train_flops(&s.model, (int)s.tb, (int)T, s.eng.checkpointing ? 1.0 : 0.0, &ct, err)) < 0)
		goto out;
	double peak = o->peak_gflops;
	if (peak <= 0) {
		peak = rank == 0 ? ds_ceiling_sgemm_gflops(1024, 0.2) : 0;
		if (W > 1)
			ds_comm_broadcast(comm, &peak, 1, DS_F64, 0, NULL);
	}
	char bytes[32];
	ds_log_info("ds-train: %s, %lld parameters, %d rank%s, ZeRO stage %d, batch %lld = %lld x %lld x %d, "
		    "%lld steps from step %lld; data %s (%llu train / %llu valid windows); sgemm ceiling %.1f "
		    "GFLOP/s per rank; model state %s per rank",
		    ds_optim_type_name(s.eng.optim.type), (long long)ds_engine_num_params(e), W, W > 1 ? "s" : "",
		    s.eng.zero_stage, s.tb, s.mb, s.ga, W, s.train_iters, st.iteration,
		    ds_dataset_path(dd.train_ds), (unsigned long long)dd.train.count,
		    (unsigned long long)(dd.valid_ds ? dd.valid.count : dd.valid.count), peak,
		    ds_fmt_bytes((double)ds_engine_state_bytes(e), bytes, sizeof bytes));
	if (s.eng.half == DS_HALF_BF16)   /* which matrix products the bf16 run uses (gpt.h) */
		ds_log_info("matmul: %s%s%s", s.eng.fp32_matmul ? "fp32 sgemm (dstk.bf16_matmul \"fp32\")"
			    : ds_gemm_bf16_usable() ? "bf16 on AMX, " : "fp32 sgemm, ",
			    s.eng.fp32_matmul ? "" : ds_gemm_bf16_describe(),
			    s.eng.fp32_matmul || ds_gemm_bf16_usable() ? "" : " (dstk.bf16_matmul \"auto\")");

	rows = ds_alloc(sizeof(int32_t) * (size_t)(s.mb * s.ga * (T + 1)));
	if (!rows) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory for a batch");
		goto out;
	}
	/* everything the run holds is allocated: what the estimator predicts;
	 * from here the peak measures the training loop */
	const size_t held_setup = ds_mem_held();
	ds_mem_peak_reset();
	if ((rc = ds_watchdog_from_config(&wd, s.cfg, comm, h->on_watchdog, h->ctx, err)) < 0)
		goto out;
	const long long log_every = o->log_interval ? o->log_interval : s.steps_per_print;
	const int bar = rank == 0 && mo && mo->progress;
	double t_int = ds_now(), t_start = t_int;
	long long int_steps = 0, run_steps = 0;
	double int_bwd = 0, int_rec = ds_engine_recompute_seconds(e);  /* activation_checkpointing.profile */
	double red_flight = 0, red_wait = 0;  /* since the last wall-clock line */
	long long last_saved = resumed ? st.iteration : -1;
	double last_save_s = -1;
	long long nonfinite_run = 0;  /* consecutive non-finite steps outside the fp16 scaler */
	const int fp16 = s.eng.half == DS_HALF_FP16;
	double scale_before = ds_engine_scaler(e)->cur_scale;
	while (st.iteration < s.train_iters) {
		struct ds_engine_step r;
		struct ds_sched_value sv;
		ds_sched_step_value(&s.sched, s.org_lr, st.sched_steps + 1, &sv);
		int betas = sv.has_betas && s.eng.optim.type != DS_OPTIM_SGD;
		double t0 = ds_now();
		ds_watchdog_beat(wd, st.iteration + 1, "train_step");
		if ((rc = fill_rows(&dd.train, &s, st.consumed, rows, T, err)) < 0)
			goto out;
		if ((rc = ds_engine_train_step(e, rows, st.consumed, st.iteration + 1, sv.lr, betas, sv.beta1, sv.beta2,
					       &r, err)) < 0)
			goto out;
		double dt = ds_now() - t0;
		st.iteration++;
		st.consumed += s.tb;
		run_steps++;
		int_steps++;
		if (r.skipped && r.overflow) {
			/* fp16 dynamic scaling: the scaler handles it (DeepSpeed's log line) */
			st.skipped++;
			ds_log_info("step %lld: fp16 gradient overflow, step skipped (%lld so far); loss scale %.0f -> %.0f",
				    st.iteration, st.skipped, scale_before, r.loss_scale);
		} else if (r.skipped) {
			st.skipped++;
			nonfinite_run++;
			ds_log_warn("step %lld: non-finite gradients; step skipped (parameters and schedule unchanged)",
				    st.iteration);
			if (s.nonfinite_abort || nonfinite_run >= s.nonfinite_max) {
				rc = ds_err_set(err, DS_EIO,
						"step %lld: non-finite gradients %s; stopping (dstk.nonfinite_policy \"%s\")",
						st.iteration, s.nonfinite_abort ? "" : "in too many consecutive steps",
						s.nonfinite_abort ? "abort" : "skip, nonfinite_max_consecutive reached");
				goto out;
			}
		} else {
			nonfinite_run = 0;
			st.sched_steps++;
		}
		scale_before = r.loss_scale;
		if (run_steps == 1)
			res->first_loss = r.loss;
		res->last_loss = r.loss;
		int_bwd += r.t_bwd;
		ds_monitor_wallclock_add(&wc, DS_WC_FWD, r.t_fwd);
		ds_monitor_wallclock_add(&wc, DS_WC_BWD, r.t_bwd + r.t_reduce);
		ds_monitor_wallclock_add(&wc, DS_WC_BWD_INNER, r.t_bwd);
		ds_monitor_wallclock_add(&wc, DS_WC_BWD_ALLREDUCE, r.t_reduce);
		ds_monitor_wallclock_add(&wc, DS_WC_STEP, r.t_step);
		red_flight += r.t_red_flight;
		red_wait += r.t_red_wait;
		if (mon) {
			/* DeepSpeed logs the lr after the step: the next step's value */
			struct ds_sched_value nv;
			ds_sched_step_value(&s.sched, s.org_lr, st.sched_steps + 1, &nv);
			struct ds_monitor_step_events ev = { .steps_done = st.iteration - 1, .train_batch_size = s.tb,
							     .loss = r.loss, .lr = nv.lr, .fp16 = fp16,
							     .loss_scale = r.loss_scale, .mixed = s.eng.half != DS_HALF_NONE,
							     .skipped = st.skipped,
							     .wallclock = s.wall_clock ? &wc : NULL };
			if ((rc = ds_monitor_log_step(mon, &ev, err)) < 0)
				goto out;
		}
		if (o->metrics_json) {
			struct ds_monitor_step_rec rec = { st.iteration, r.t_fwd * 1e3, (r.t_bwd + r.t_reduce) * 1e3,
							   r.t_step * 1e3, s.tb / dt, s.tb * T / dt,
							   ct.train_flops_step / dt / W * 1e-12, r.loss };
			if ((rc = ds_monitor_metrics_add(&metrics, &rec, err)) < 0)
				goto out;
		}
		if (rank == 0 && cfg_profile_step(&s) == st.iteration &&
		    (rc = run_profiler(&s, &r, st.iteration, peak, mo, err)) < 0)
			goto out;
		if (s.wall_clock && rank == 0 && st.iteration % log_every == 0) {
			ds_monitor_wallclock_line(&wc, 0, line, sizeof line);
			ds_log_info("%s", line);
			/* dstk's own line: how much of the gradient reductions
			 * backward hid (overlap_comm); DeepSpeed has no such timer */
			if (W > 1)
				ds_log_info("grad reduction (ms) | in_flight: %.2f | waited: %.2f | hidden: %.2f | overlap_comm: %s",
					    red_flight * 1e3, red_wait * 1e3,
					    (red_flight > red_wait ? red_flight - red_wait : 0) * 1e3,
					    s.eng.overlap_comm ? "true" : "false");
			red_flight = red_wait = 0;
		}
		if (rank == 0 && (st.iteration % log_every == 0 || st.iteration == s.train_iters)) {
			double el = ds_now() - t_int;
			double sps = int_steps * s.tb / el;
			struct ds_monitor_step ls = { .step = st.iteration, .total_steps = s.train_iters,
						      .consumed_samples = st.consumed, .loss = r.loss, .lr = r.lr,
						      .grad_norm = r.grad_norm, .skipped = st.skipped,
						      .fp16 = fp16, .loss_scale = r.loss_scale,
						      .samples_per_s = sps, .tokens_per_s = sps * T,
						      .tflops = ct.train_flops_step * int_steps / el * 1e-12,
						      .mfu = peak > 0 ? ct.train_flops_step * int_steps / el / W / (peak * 1e9) : 0,
						      .peak_rss_bytes = (double)ds_mem_peak_rss() };
			ds_monitor_step_line(line, sizeof line, &ls);
			if (bar)
				ds_monitor_out_progress_erase(mo);
			ds_monitor_out_line(mo, "%s", line);
			if (s.ckpt_profile) {
				double rec = ds_engine_recompute_seconds(e) - int_rec;
				ds_monitor_out_line(mo, "activation checkpointing: %lld steps recomputed layer forwards in "
						    "%.2f ms (%.2f ms/step, %.1f%% of backward)", int_steps, rec * 1e3,
						    rec * 1e3 / int_steps, int_bwd > 0 ? 100.0 * rec / int_bwd : 0.0);
			}
			t_int = ds_now();
			int_steps = 0;
			int_bwd = 0;
			int_rec = ds_engine_recompute_seconds(e);
		} else if (bar) {
			double rate = run_steps / (ds_now() - t_start);
			ds_monitor_progress(line, sizeof line, st.iteration, s.train_iters, rate, 30);
			ds_monitor_out_progress(mo, line);
		}
		if (o->eval_interval && st.iteration % o->eval_interval == 0 && dd.valid.count) {
			double vl;
			ds_watchdog_beat(wd, st.iteration, "eval");
			if ((rc = evaluate(e, &s, &dd, o->eval_iters, rows, T, &vl, err)) < 0)
				goto out;
			if (rank == 0) {
				ds_monitor_eval_line(line, sizeof line, st.iteration, vl);
				ds_monitor_out_line(mo, "%s", line);
				if (mon && (rc = ds_monitor_write(mon, DS_MONITOR_EVAL_LOSS, vl, st.consumed, err)) < 0)
					goto out;
			}
		}
		/* stop requests: every rank must agree, at a step boundary */
		int64_t flag = h->stop ? *h->stop : 0;
		ds_watchdog_beat(wd, st.iteration, "stop_agreement");
		if (W > 1 && (rc = ds_comm_allreduce(comm, &flag, 1, DS_I64, DS_MAX, err)) < 0)
			goto out;
		int exiting = o->exit_interval && run_steps % o->exit_interval == 0;
		int save_now = o->save && ((o->save_interval && st.iteration % o->save_interval == 0) ||
					   st.iteration == s.train_iters || flag || exiting);
		if (save_now) {
			if (flag && rank == 0)
				check_save_fits(s.cfg, last_save_s, (int)flag, h->stop_at ? (long)*h->stop_at : 0);
			ds_watchdog_beat(wd, st.iteration, "save");
			double ts = ds_now();
			if ((rc = ds_train_save(o->save, e, &s, &st, comm, err)) < 0)
				goto out;
			last_saved = st.iteration;
			res->saved = 1;
			last_save_s = ds_now() - ts;
			ds_log_info("saved %s/global_step%lld in %.2f s", o->save, st.iteration, last_save_s);
		}
		if (flag) {
			if (bar)
				ds_monitor_out_progress_end(mo);
			if (!o->save) {
				rc = ds_err_set(err, DS_EIO, "stopped by signal %d at step %lld without --save: nothing "
						"to resume from", (int)flag, st.iteration);
				goto out;
			}
			if ((rc = ds_train_commlog_summary(clog, mo, err)) < 0)
				goto out;
			rc = ds_err_set(err, DS_ESIGNAL, "stopped by signal %d at step %lld after saving %s/global_step%lld; "
					"resume with --load auto", (int)flag, st.iteration, o->save, last_saved);
			goto out;
		}
		if (exiting)
			break;
	}
	if (bar)
		ds_monitor_out_progress_end(mo);
	if ((rc = ds_train_commlog_summary(clog, mo, err)) < 0)
		goto out;
	if ((rc = report_memory(comm, &s, e, held_setup, mo, o->metrics_json && rank == 0 ? &memj : NULL, err)) < 0)
		goto out;
	if (o->metrics_json && rank == 0) {
		struct ds_monitor_metrics_info mi = { s.start_profile_step, s.end_profile_step, (int)s.ga, s.tb, rank,
						      NULL, memj };
		if ((rc = ds_monitor_metrics_write(&metrics, &mi, o->metrics_json, err)) < 0)
			goto out;
	}
	res->steps = run_steps;
	res->last_step = st.iteration;
	res->skipped = st.skipped;
	rc = 0;
out:
	ds_watchdog_stop(wd);
	if (rc < 0 && rc != DS_ESIGNAL && W > 1 && (rc != DS_EINVAL || e)) {
		/* other ranks may be waiting in a collective this rank will not
		 * join: the tool decides (ds-train ends the job) before anything
		 * is freed, since freeing may itself wait on them */
		res->stranded = 1;
		if (h->on_stranded)
			h->on_stranded(h->ctx, comm, rc, err);
	}
	ds_free(rows);
	json_decref(memj);
	ds_monitor_metrics_release(&metrics);
	ds_monitor_destroy(mon);
	ds_engine_destroy(e);
	ds_train_commlog_stop(clog, comm);
	if (have_data)
		ds_data_release(&dd);
	if (have_setup)
		ds_train_setup_release(&s);
	return rc;
}
