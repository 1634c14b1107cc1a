/* monitor.h - DeepSpeed's monitor: one (tag, value, x) event fanned out to
 * the enabled sinks (csv_monitor, tensorboard).
 *
 * The config module fills the option structs from the DeepSpeed config; the
 * trainer creates the monitor on rank 0 only and writes DeepSpeed's events
 * at accumulation boundaries (spec/deepspeed-tools.md §5), x = global
 * samples:
 *   DS_MONITOR_TRAIN_LOSS at steps_done * train_batch_size (before the step
 *     counter moves), DS_MONITOR_LR and DS_MONITOR_LOSS_SCALE (fp16) at
 *     (steps_done + 1) * train_batch_size, and with wall_clock_breakdown the
 *     ds_monitor_wallclock_tag() timers; then ds_monitor_flush once per step.
 */
#ifndef DS_MONITOR_MONITOR_H
#define DS_MONITOR_MONITOR_H

#include "util/err.h"

#define DS_MONITOR_TRAIN_LOSS "Train/Samples/train_loss"
#define DS_MONITOR_LR "Train/Samples/lr"
#define DS_MONITOR_LOSS_SCALE "Train/Samples/loss_scale"
#define DS_MONITOR_EVAL_LOSS "Train/Samples/eval_loss"  /* dstk's own: DeepSpeed logs none */
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
	int resume;  /* resumed from a checkpoint: CSV drops the rows it rewrites (csvmon.h) */
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

/* Flush every sink (DeepSpeed flushes after each batch of events). */
int ds_monitor_flush(struct ds_monitor *m, struct ds_err *err);

/* The TensorBoard event file (borrowed), NULL when tensorboard is off. */
const char *ds_monitor_tb_file(const struct ds_monitor *m);

/* Close every sink; accepts NULL. */
void ds_monitor_destroy(struct ds_monitor *m);

#endif
