/* monitor.h - DeepSpeed's monitor: one (tag, value, x) event fanned out to
 * the enabled sinks (csv_monitor, tensorboard).
 *
 * The config module fills the option structs from the DeepSpeed config; the
 * trainer creates the monitor on rank 0 only and, after each optimizer
 * step, calls ds_monitor_log_step, which writes DeepSpeed's events with
 * DeepSpeed's x-axis, global samples (spec/deepspeed-tools.md §5):
 *   DS_MONITOR_TRAIN_LOSS at steps_done * train_batch_size (DeepSpeed logs
 *     it in backward, before the step counter moves),
 *   DS_MONITOR_LR, DS_MONITOR_LOSS_SCALE (fp16 only), DS_MONITOR_SKIPPED
 *     (fp16 and bf16 only; dstk's own tag) and, with
 *     wall_clock_breakdown, the five ds_monitor_wallclock_tag() timers at
 *     (steps_done + 1) * train_batch_size,
 * then flushes every sink.  ds_monitor_write is there for other tags.
 */
#ifndef DS_MONITOR_MONITOR_H
#define DS_MONITOR_MONITOR_H

#include "monitor/log.h"
#include "util/err.h"

#define DS_MONITOR_TRAIN_LOSS "Train/Samples/train_loss"
#define DS_MONITOR_LR "Train/Samples/lr"
#define DS_MONITOR_LOSS_SCALE "Train/Samples/loss_scale"
#define DS_MONITOR_EVAL_LOSS "Train/Samples/eval_loss"  /* dstk's own: DeepSpeed logs none */
#define DS_MONITOR_SKIPPED "Train/Samples/skipped_steps"  /* dstk's own, fp16/bf16 runs */
#define DS_MONITOR_JOB_NAME_DEFAULT "DeepSpeedJobName"

/* One sink's section: {"enabled", "output_path" (default ""), "job_name"
 * (default "DeepSpeedJobName")}; NULL strings take the defaults.  Files go
 * to join(output_path, job_name), relative to the working directory. */
struct ds_monitor_sink_opts {
	int enabled;
	const char *output_path;
	const char *job_name;
};

struct ds_monitor_opts {
	struct ds_monitor_sink_opts csv;         /* "csv_monitor" */
	struct ds_monitor_sink_opts tensorboard; /* "tensorboard" */
	/* Resumed from a checkpoint taken after resume_samples global samples:
	 * the CSV files drop the rows the run writes again (csvmon.h) and the
	 * new TensorBoard file starts with a purge at resume_samples
	 * (tb.h: events of the old files at x >= resume_samples are hidden;
	 * this also hides the lr point logged at exactly the checkpoint). */
	int resume;
	long long resume_samples;
};

/* One optimizer step's events (ds_monitor_log_step). */
struct ds_monitor_step_events {
	long long steps_done;        /* optimizer steps completed before this one */
	long long train_batch_size;  /* global samples per optimizer step */
	double loss;                 /* mean over the accumulated micro-batches */
	double lr;                   /* the lr after this step (DeepSpeed's get_lr()) */
	int fp16;                    /* write loss_scale */
	double loss_scale;
	const struct ds_monitor_wallclock *wallclock; /* NULL: no elapsed_time_ms tags */
	int mixed;                   /* fp16/bf16: write DS_MONITOR_SKIPPED, the cumulative count */
	long long skipped;
};

struct ds_monitor;

/* Open the enabled sinks (directories made, TensorBoard file created).
 * With no sink enabled *out is still a valid monitor that writes nothing.
 * Returns 0, DS_EIO or DS_ENOMEM; free with ds_monitor_destroy. */
int ds_monitor_create(struct ds_monitor **out, const struct ds_monitor_opts *o, struct ds_err *err);

/* 1 when at least one sink is enabled. */
int ds_monitor_enabled(const struct ds_monitor *m);

/* Write one event to every enabled sink (TensorBoard stamps the wall time
 * now, and stores the value as float32, as add_scalar does).  Returns 0 or
 * the first sink's error (DS_EINVAL for a CSV file that is not ours). */
int ds_monitor_write(struct ds_monitor *m, const char *tag, double value, long long x, struct ds_err *err);

/* Write DeepSpeed's events of one optimizer step (see the top of this file)
 * and flush.  Returns 0 or the first sink's error. */
int ds_monitor_log_step(struct ds_monitor *m, const struct ds_monitor_step_events *e, struct ds_err *err);

/* Flush every sink (DeepSpeed flushes after each batch of events). */
int ds_monitor_flush(struct ds_monitor *m, struct ds_err *err);

/* The TensorBoard event file (borrowed), NULL when tensorboard is off. */
const char *ds_monitor_tb_file(const struct ds_monitor *m);

/* Close every sink; accepts NULL. */
void ds_monitor_destroy(struct ds_monitor *m);

#endif
