/* metrics.c - averages over the profile window, written as JSON (jansson)
 * with tmp + rename. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "monitor/comms.h"
#include "monitor/metrics.h"

int ds_monitor_metrics_add(struct ds_monitor_metrics *m, const struct ds_monitor_step_rec *r, struct ds_err *err)
{
	if (m->n == m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 64;
		struct ds_monitor_step_rec *p = realloc(m->recs, cap * sizeof *p);
		if (!p)
			return ds_err_set(err, DS_ENOMEM, "out of memory");
		m->recs = p;
		m->cap = cap;
	}
	m->recs[m->n++] = *r;
	return 0;
}

static int set_real(json_t *o, const char *k, double v)
{
	json_t *x = isfinite(v) ? json_real(v) : json_null(); /* json_real(inf) is NULL */
	return json_object_set_new(o, k, x);
}

json_t *ds_monitor_metrics_json(const struct ds_monitor_metrics *m, const struct ds_monitor_metrics_info *info,
				struct ds_err *err)
{
	size_t n = 0;
	for (size_t i = 0; i < m->n; i++)
		n += m->recs[i].step >= info->start_profile_step && m->recs[i].step <= info->end_profile_step;
	if (n == 0) {
		ds_err_set(err, DS_EINVAL, "metrics: no step between start_profile_step %lld and end_profile_step %lld; "
			   "train at least %lld steps", info->start_profile_step, info->end_profile_step,
			   info->start_profile_step);
		return NULL;
	}
	double *t[3] = { malloc(n * sizeof(double)), malloc(n * sizeof(double)), malloc(n * sizeof(double)) };
	json_t *o = json_object();
	if (!t[0] || !t[1] || !t[2] || !o) {
		ds_err_set(err, DS_ENOMEM, "out of memory");
		json_decref(o);
		o = NULL;
		goto out;
	}
	double sps = 0, tps = 0, tfl = 0, loss = 0, last = 0;
	size_t k = 0;
	for (size_t i = 0; i < m->n; i++) {
		const struct ds_monitor_step_rec *r = &m->recs[i];
		if (r->step < info->start_profile_step || r->step > info->end_profile_step)
			continue;
		t[0][k] = r->fwd_ms;
		t[1][k] = r->bwd_ms;
		t[2][k] = r->step_ms;
		k++;
		sps += r->samples_per_s;
		tps += r->tokens_per_s;
		tfl += r->tflops;
		loss += r->loss;
		last = r->loss;
	}
	double gas = info->gas > 0 ? info->gas : 1;
	double fwd_ms = ds_monitor_trim_mean(t[0], n, 0.1);
	double bwd_ms = ds_monitor_trim_mean(t[1], n, 0.1);
	double step_ms = ds_monitor_trim_mean(t[2], n, 0.1);
	double fwd = fwd_ms * 1e3 / gas, bwd = bwd_ms * 1e3 / gas, stp = step_ms * 1e3 / gas;
	double latency = (fwd + bwd + stp) * gas;
	set_real(o, "fwd", fwd);
	set_real(o, "bwd", bwd);
	set_real(o, "step", stp);
	set_real(o, "latency", latency);
	set_real(o, "throughput", latency > 0 ? (double)info->train_batch_size * 1e6 / latency : 0);
	set_real(o, "FLOPS_per_gpu", tfl / (double)n * 1e12);
	set_real(o, "fwd_ms", fwd_ms);
	set_real(o, "bwd_ms", bwd_ms);
	set_real(o, "step_ms", step_ms);
	set_real(o, "samples_per_sec", sps / (double)n);
	set_real(o, "tokens_per_sec", tps / (double)n);
	set_real(o, "tflops", tfl / (double)n);
	set_real(o, "loss", loss / (double)n);
	set_real(o, "loss_last", last);
	json_object_set_new(o, "steps", json_integer((json_int_t)n));
	json_object_set_new(o, "start_profile_step", json_integer(info->start_profile_step));
	json_object_set_new(o, "end_profile_step", json_integer(info->end_profile_step));
	json_object_set_new(o, "gas", json_integer((json_int_t)gas));
	json_object_set_new(o, "train_batch_size", json_integer(info->train_batch_size));
	json_object_set_new(o, "rank", json_integer(info->rank));
	if (info->config)
		json_object_set(o, "config", info->config);
	if (info->memory)
		json_object_set(o, "memory", info->memory);
out:
	free(t[0]);
	free(t[1]);
	free(t[2]);
	return o;
}

int ds_monitor_metrics_write(const struct ds_monitor_metrics *m, const struct ds_monitor_metrics_info *info,
			     const char *path, struct ds_err *err)
{
	json_t *o = ds_monitor_metrics_json(m, info, err);
	if (!o)
		return err ? err->code : DS_EINVAL;
	int rc = 0;
	char *tmp = NULL;
	FILE *f = NULL;
	if (asprintf(&tmp, "%s.tmp", path) < 0) {
		tmp = NULL;
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	f = fopen(tmp, "w");
	if (!f) {
		rc = ds_err_set(err, DS_EIO, "%s: cannot write metrics: %s", tmp, strerror(errno));
		goto out;
	}
	if (json_dumpf(o, f, JSON_INDENT(2) | JSON_REAL_PRECISION(17)) != 0 || fputc('\n', f) == EOF ||
	    fflush(f) != 0 || fsync(fileno(f)) != 0) {
		rc = ds_err_set(err, DS_EIO, "%s: write error: %s", tmp, strerror(errno));
		goto out;
	}
	if (fclose(f) != 0) {
		f = NULL;
		rc = ds_err_set(err, DS_EIO, "%s: write error: %s", tmp, strerror(errno));
		goto out;
	}
	f = NULL;
	if (rename(tmp, path) != 0)
		rc = ds_err_set(err, DS_EIO, "%s: cannot rename to %s: %s", tmp, path, strerror(errno));
out:
	if (f)
		fclose(f);
	if (rc && tmp)
		unlink(tmp);
	free(tmp);
	json_decref(o);
	return rc;
}

void ds_monitor_metrics_release(struct ds_monitor_metrics *m)
{
	free(m->recs);
	m->recs = NULL;
	m->n = m->cap = 0;
}
