/* comms.c - comms_logger bandwidths, size strings and the summary table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "monitor/comms.h"
#include "monitor/log.h"

struct vec {
	double *v;
	size_t n, cap;
};

struct size_rec {
	uint64_t bytes;
	long count;
	struct vec lat, alg, bus;
};

struct op_rec {
	char *name;
	struct size_rec *sizes;
	size_t n, cap;
};

struct ds_monitor_comms {
	int world;
	struct op_rec *ops;
	size_t n, cap;
};

/* Grow *p (elements of size sz) so that index `need - 1` fits. */
static int grow(void **p, size_t *cap, size_t need, size_t sz)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? 2 * *cap : 8;
	while (c < need)
		c *= 2;
	void *q = realloc(*p, c * sz);
	if (!q)
		return -1;
	*p = q;
	*cap = c;
	return 0;
}

static int vec_push(struct vec *v, double x)
{
	if (grow((void **)&v->v, &v->cap, v->n + 1, sizeof *v->v))
		return -1;
	v->v[v->n++] = x;
	return 0;
}

static int is_any(const char *op, const char *const *names)
{
	for (; *names; names++)
		if (!strcmp(op, *names))
			return 1;
	return 0;
}

int ds_monitor_comms_bw(const char *op, double bytes, double ms, int world, double *algbw, double *busbw)
{
	static const char *const gather[] = { "all_gather", "all_gather_into_tensor", "reduce_scatter",
					      "reduce_scatter_tensor", NULL };
	static const char *const reduce[] = { "all_reduce", "all_reduce_coalesced", "inference_all_reduce", NULL };
	static const char *const p2p[] = { "send", "recv", "isend", "irecv", "broadcast", "reduce",
					   "gather", "scatter", "barrier", NULL };
	double n = world, alg, bus;
	if (!strcmp(op, "all_to_all_single")) {
		alg = bytes / ms;
		bus = alg * ((n - 1) / n);
	} else if (is_any(op, gather)) {
		bytes *= n;
		alg = bytes / ms;
		bus = alg * ((n - 1) / n);
	} else if (is_any(op, reduce)) {
		alg = bytes * 2 / ms;
		bus = bytes / ms * (2 * (n - 1) / n);
	} else if (is_any(op, p2p)) {
		alg = bus = bytes / ms;
	} else {
		return DS_EINVAL;
	}
	*algbw = alg * 8 / 1e6;
	*busbw = bus * 8 / 1e6;
	return 0;
}

char *ds_monitor_comms_size(uint64_t bytes, char *buf, size_t n)
{
	static const char *const unit[] = { "B", "KB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB" };
	if (bytes == 0) {
		snprintf(buf, n, "0B");
		return buf;
	}
	double x = (double)bytes;
	int i = (int)floor(log(x) / log(1024.0));
	if (i < 0)
		i = 0;
	if (i > 8)
		i = 8;
	char r[64], s[64];
	snprintf(r, sizeof r, "%.2f", x / pow(1024.0, i)); /* round(x, 2), correctly rounded */
	ds_monitor_fmt_double(s, sizeof s, strtod(r, NULL));
	snprintf(buf, n, "%s %s", s, unit[i]);
	return buf;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

double ds_monitor_trim_mean(double *v, size_t n, double frac)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof *v, cmp_double);
	size_t k = (size_t)nearbyint((double)n * frac); /* Python round(): half to even */
	if (2 * k >= n)
		return NAN;
	double s = 0;
	for (size_t i = k; i < n - k; i++)
		s += v[i];
	return s / (double)(n - 2 * k);
}

int ds_monitor_comms_line(char *buf, size_t n, const char *record_name, double ms, uint64_t bytes, double algbw,
			  double busbw)
{
	char sz[48];
	return snprintf(buf, n, "comm op: %s | time (ms): %.2f | msg size: %s | algbw (Gbps): %.2f | busbw (Gbps): %.2f",
			record_name, ms, ds_monitor_comms_size(bytes, sz, sizeof sz), algbw, busbw);
}

int ds_monitor_comms_wants(const struct ds_monitor_comms_opts *o, const char *log_name, int prof)
{
	if (!o->enabled)
		return 0;
	if (prof || o->prof_all)
		return 1;
	for (const char *const *p = o->prof_ops; p && *p; p++)
		if (!strcmp(*p, log_name))
			return 1;
	return 0;
}

int ds_monitor_comms_create(struct ds_monitor_comms **out, int world, struct ds_err *err)
{
	*out = calloc(1, sizeof **out);
	if (!*out)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	(*out)->world = world > 0 ? world : 1;
	return 0;
}

void ds_monitor_comms_destroy(struct ds_monitor_comms *c)
{
	if (!c)
		return;
	for (size_t i = 0; i < c->n; i++) {
		for (size_t j = 0; j < c->ops[i].n; j++) {
			free(c->ops[i].sizes[j].lat.v);
			free(c->ops[i].sizes[j].alg.v);
			free(c->ops[i].sizes[j].bus.v);
		}
		free(c->ops[i].sizes);
		free(c->ops[i].name);
	}
	free(c->ops);
	free(c);
}

int ds_monitor_comms_add(struct ds_monitor_comms *c, const char *op, const char *record_name, uint64_t bytes,
			 double ms, double *algbw, double *busbw, struct ds_err *err)
{
	double alg, bus;
	if (ds_monitor_comms_bw(op, (double)bytes, ms, c->world, &alg, &bus))
		return ds_err_set(err, DS_EINVAL, "comms_logger: unknown comm op '%s'", op);
	if (!record_name)
		record_name = op;
	struct op_rec *o = NULL;
	for (size_t i = 0; i < c->n && !o; i++)
		if (!strcmp(c->ops[i].name, record_name))
			o = &c->ops[i];
	if (!o) {
		if (grow((void **)&c->ops, &c->cap, c->n + 1, sizeof *c->ops))
			goto nomem;
		o = &c->ops[c->n];
		memset(o, 0, sizeof *o);
		if (!(o->name = strdup(record_name)))
			goto nomem;
		c->n++;
	}
	struct size_rec *s = NULL;
	for (size_t j = 0; j < o->n && !s; j++)
		if (o->sizes[j].bytes == bytes)
			s = &o->sizes[j];
	if (!s) {
		if (grow((void **)&o->sizes, &o->cap, o->n + 1, sizeof *o->sizes))
			goto nomem;
		s = &o->sizes[o->n++];
		memset(s, 0, sizeof *s);
		s->bytes = bytes;
	}
	if (vec_push(&s->lat, ms) || vec_push(&s->alg, alg) || vec_push(&s->bus, bus))
		goto nomem;
	s->count++;
	if (algbw)
		*algbw = alg;
	if (busbw)
		*busbw = bus;
	return 0;
nomem:
	return ds_err_set(err, DS_ENOMEM, "out of memory");
}

static int cmp_size(const void *a, const void *b)
{
	uint64_t x = (*(const struct size_rec *const *)a)->bytes, y = (*(const struct size_rec *const *)b)->bytes;
	return (x > y) - (x < y);
}

/* Trimmed mean of a copy (the records stay in call order). */
static double trimmed(const struct vec *v, double *scratch)
{
	memcpy(scratch, v->v, v->n * sizeof *scratch);
	return ds_monitor_trim_mean(scratch, v->n, 0.1);
}

int ds_monitor_comms_summary(const struct ds_monitor_comms *c, char **out, struct ds_err *err)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	if (!f)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	int rc = 0;
	fprintf(f, "%-20s%-20s%-20s%-20s%-20s%-20s%-20s\n", "Comm. Op", "Message Size", "Count",
		"Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)");
	for (size_t i = 0; i < c->n && !rc; i++) {
		const struct op_rec *o = &c->ops[i];
		fprintf(f, "%s\n", o->name);
		const struct size_rec **order = malloc(o->n * sizeof *order);
		size_t most = 0;
		for (size_t j = 0; j < o->n; j++)
			most = o->sizes[j].lat.n > most ? o->sizes[j].lat.n : most;
		double *scratch = malloc((most ? most : 1) * sizeof *scratch);
		if (!order || !scratch) {
			rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		} else {
			for (size_t j = 0; j < o->n; j++)
				order[j] = &o->sizes[j];
			qsort(order, o->n, sizeof *order, cmp_size);
			for (size_t j = 0; j < o->n; j++) {
				const struct size_rec *s = order[j];
				double total = 0;
				for (size_t k = 0; k < s->lat.n; k++)
					total += s->lat.v[k];
				char sz[48];
				double lat = trimmed(&s->lat, scratch);
				double alg = trimmed(&s->alg, scratch);
				double bus = trimmed(&s->bus, scratch);
				fprintf(f, "%-20s%-20s%-20ld%-20.2f%-20.2f%-20.2f%-20.2f\n", "",
					ds_monitor_comms_size(s->bytes, sz, sizeof sz), s->count, total, lat, alg, bus);
			}
		}
		free(order);
		free(scratch);
	}
	if (fclose(f) != 0 && !rc)
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
	if (rc) {
		free(text);
		return rc;
	}
	*out = text;
	return 0;
}
