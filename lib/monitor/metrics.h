/* metrics.h - the --metrics-json file that ds-autotune reads instead of
 * scraping logs: per-step measurements averaged over the profile window.
 *
 * Keys (all numbers; times as DeepSpeed's autotuning metrics.json, in µs):
 *   fwd, bwd, step   per micro-step: 10%-trimmed mean over the window of the
 *                    step's summed phase time / gas (DeepSpeed's timers)
 *   latency          (fwd + bwd + step) * gas: one optimizer step
 *   throughput       train_batch_size * 1e6 / latency (samples/s)
 *   FLOPS_per_gpu    mean achieved TFLOPS * 1e12
 *   fwd_ms, bwd_ms, step_ms   the same trimmed means per optimizer step, ms
 *   samples_per_sec, tokens_per_sec, tflops, loss   plain means of the
 *                    measured per-step values; loss_last the window's last
 *   steps, start_profile_step, end_profile_step, gas, train_batch_size, rank
 *   config           the caller's JSON object (e.g. the resolved config)
 *   memory           the caller's memory figures (ds-train: the estimate
 *                    and what the allocator held per rank, see ds-train(1))
 * The window is steps start..end inclusive (1-based optimizer steps).  The
 * file is written to "<path>.tmp" and renamed, so a reader never sees half.
 */
#ifndef DS_MONITOR_METRICS_H
#define DS_MONITOR_METRICS_H

#include <jansson.h>
#include <stddef.h>

#include "util/err.h"

/* One optimizer step as measured by the trainer. */
struct ds_monitor_step_rec {
	long long step;        /* 1-based */
	double fwd_ms, bwd_ms, step_ms; /* summed over the step's micro-steps */
	double samples_per_s, tokens_per_s, tflops;
	double loss;
};

struct ds_monitor_metrics {
	struct ds_monitor_step_rec *recs;
	size_t n, cap;
};
#define DS_MONITOR_METRICS_INIT { NULL, 0, 0 }

struct ds_monitor_metrics_info {
	long long start_profile_step, end_profile_step;
	int gas;                       /* gradient accumulation steps */
	long long train_batch_size;
	int rank;
	json_t *config;                /* borrowed; NULL for none */
	json_t *memory;                /* borrowed; NULL for none */
};

/* Keep a copy of one step's record.  Returns 0 or DS_ENOMEM. */
int ds_monitor_metrics_add(struct ds_monitor_metrics *m, const struct ds_monitor_step_rec *r, struct ds_err *err);

/* The summary object of the window (new reference, caller decrefs) or NULL
 * with DS_EINVAL when no step falls in it. */
json_t *ds_monitor_metrics_json(const struct ds_monitor_metrics *m, const struct ds_monitor_metrics_info *info,
				struct ds_err *err);

/* Write the summary to path atomically.  Returns 0, DS_EINVAL (empty
 * window) or DS_EIO (names the file). */
int ds_monitor_metrics_write(const struct ds_monitor_metrics *m, const struct ds_monitor_metrics_info *info,
			     const char *path, struct ds_err *err);

/* Free the records (the struct itself is the caller's). */
void ds_monitor_metrics_release(struct ds_monitor_metrics *m);

#endif
