/* monitor.c - fan-out of monitor events to the CSV and TensorBoard sinks. */
#include <stdlib.h>

#include "monitor/csvmon.h"
#include "monitor/monitor.h"
#include "monitor/monitor_int.h"
#include "monitor/tb.h"

struct ds_monitor {
	struct ds_monitor_csv *csv;
	struct ds_monitor_tb *tb;
};

static const char *job(const struct ds_monitor_sink_opts *s)
{
	return s->job_name ? s->job_name : DS_MONITOR_JOB_NAME_DEFAULT;
}

int ds_monitor_create(struct ds_monitor **out, const struct ds_monitor_opts *o, struct ds_err *err)
{
	*out = NULL;
	struct ds_monitor *m = calloc(1, sizeof *m);
	if (!m)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	int rc = 0;
	if (o->csv.enabled)
		rc = ds_monitor_csv_open(&m->csv, o->csv.output_path, job(&o->csv), o->resume, err);
	if (!rc && o->tensorboard.enabled) {
		char *dir = ds_monitor_logdir_dup(o->tensorboard.output_path, job(&o->tensorboard));
		rc = dir ? ds_monitor_tb_open(&m->tb, dir, -1, err) : ds_err_set(err, DS_ENOMEM, "out of memory");
		free(dir);
		if (!rc && o->resume)
			rc = ds_monitor_tb_purge(m->tb, o->resume_samples, -1, err);
		if (rc)
			ds_err_prefix(err, "tensorboard: ");
	}
	if (rc) {
		ds_monitor_destroy(m);
		return rc;
	}
	*out = m;
	return 0;
}

int ds_monitor_enabled(const struct ds_monitor *m)
{
	return m && (m->csv || m->tb);
}

int ds_monitor_write(struct ds_monitor *m, const char *tag, double value, long long x, struct ds_err *err)
{
	if (m->csv)
		DS_TRY(ds_monitor_csv_write(m->csv, tag, value, x, err));
	if (m->tb)
		DS_TRY(ds_monitor_tb_scalar(m->tb, tag, value, x, -1, err));
	return 0;
}

int ds_monitor_log_step(struct ds_monitor *m, const struct ds_monitor_step_events *e, struct ds_err *err)
{
	long long before = e->steps_done * e->train_batch_size;
	long long after = (e->steps_done + 1) * e->train_batch_size;
	DS_TRY(ds_monitor_write(m, DS_MONITOR_TRAIN_LOSS, e->loss, before, err));
	DS_TRY(ds_monitor_write(m, DS_MONITOR_LR, e->lr, after, err));
	if (e->fp16)
		DS_TRY(ds_monitor_write(m, DS_MONITOR_LOSS_SCALE, e->loss_scale, after, err));
	if (e->mixed)
		DS_TRY(ds_monitor_write(m, DS_MONITOR_SKIPPED, (double)e->skipped, after, err));
	for (int t = 0; e->wallclock && t < DS_WC_N; t++)
		DS_TRY(ds_monitor_write(m, ds_monitor_wallclock_tag(t), ds_monitor_wallclock_ms(e->wallclock, t), after,
					err));
	return ds_monitor_flush(m, err);
}

int ds_monitor_flush(struct ds_monitor *m, struct ds_err *err)
{
	if (m->csv)
		DS_TRY(ds_monitor_csv_flush(m->csv, err));
	if (m->tb)
		DS_TRY(ds_monitor_tb_flush(m->tb, err));
	return 0;
}

const char *ds_monitor_tb_file(const struct ds_monitor *m)
{
	return m->tb ? ds_monitor_tb_path(m->tb) : NULL;
}

void ds_monitor_destroy(struct ds_monitor *m)
{
	if (!m)
		return;
	ds_monitor_csv_close(m->csv);
	ds_monitor_tb_close(m->tb);
	free(m);
}
