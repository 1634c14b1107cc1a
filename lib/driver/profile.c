/* profile.c - render a count tree as DeepSpeed's flops-profiler report.
 *
 * The summary is built once as rows (label, JSON key, value, format) and the
 * modules once as the tree itself; text, JSON and CSV are three walks over
 * the same rows (STYLE rule 19).  Text follows deepspeed/profiling/
 * flops_profiler/profiler.py line for line (spec/deepspeed-tools.md §4).
 */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "driver/profile.h"

/* ---- number formats ---- */

/* Python's f"{round(v, 2):g}": %.2f rounds the binary value exactly (as
 * round() does), %g then drops the trailing zeros. */
static char *round2_g(double v, char *buf, size_t n)
{
	char t[64];
	snprintf(t, sizeof(t), "%.2f", v);
	snprintf(buf, n, "%g", strtod(t, NULL));
	return buf;
}

static char *number_unit(double x, const char *suffix, char *buf, size_t n)
{
	double mag;
	const char *u;
	char v[48];
	if (x >= 1e12)
		mag = 1e12, u = "T";
	else if (x >= 1e9)
		mag = 1e9, u = "G";
	else if (x >= 1e6)
		mag = 1e6, u = "M";
	else if (x >= 1e3)
		mag = 1e3, u = "K";
	else if (x >= 1 || x == 0)
		mag = 1, u = "";
	else if (x >= 1e-3)
		mag = 1e-3, u = "m";
	else
		mag = 1e-6, u = "u";
	snprintf(buf, n, "%s %s%s", round2_g(x / mag, v, sizeof(v)), u, suffix);
	return buf;
}

char *ds_profile_number(double x, char *buf, size_t n) { return number_unit(x, "", buf, n); }
char *ds_profile_macs(double x, char *buf, size_t n) { return number_unit(x, "MACs", buf, n); }
char *ds_profile_flops(double x, char *buf, size_t n) { return number_unit(x, "FLOPS", buf, n); }
char *ds_profile_duration(double s, char *buf, size_t n) { return number_unit(s, "s", buf, n); }

char *ds_profile_params(double x, char *buf, size_t n)
{
	number_unit(x, "", buf, n);
	char *g = strchr(buf, 'G');
	if (g)
		*g = 'B';
	size_t l = strlen(buf);
	while (l > 0 && buf[l - 1] == ' ')
		buf[--l] = 0;
	return buf;
}

/* str(round(x, 2)) of a Python float: shortest repr, at least one decimal. */
static char *py_float2(double x, char *buf, size_t n)
{
	char t[64];
	snprintf(t, sizeof(t), "%.2f", x);
	double r = strtod(t, NULL);
	for (int p = 0; p <= 2; p++) {
		snprintf(buf, n, "%.*f", p, r);
		if (strtod(buf, NULL) == r)
			break;
	}
	if (!strpbrk(buf, ".n"))
		strncat(buf, ".0", n - strlen(buf) - 1);
	return buf;
}

static char *pct(double part, double total, char *buf, size_t n)
{
	return round2_g(total ? 100.0 * part / total : 0, buf, n);
}

/* ---- the summary rows ---- */

enum fmt { F_INT, F_PARAMS, F_MACS, F_NUMBER, F_RATE, F_DURATION, F_SAMPLES, F_RATIO };

struct row {
	char label[96];
	const char *key;
	double v;
	int fmt;
};

#define MAX_ROWS 32

static int add_row(struct row *r, int n, const char *key, double v, int fmt, const char *label)
{
	snprintf(r[n].label, sizeof(r[n].label), "%s", label);
	r[n].key = key;
	r[n].v = v;
	r[n].fmt = fmt;
	return n + 1;
}

/* Forward latency of a node: its own, or its children's sum when it was not
 * timed (DeepSpeed's get_module_duration). */
static double node_latency(const struct ds_count *c, int i)
{
	if (c->nodes[i].latency_s > 0)
		return c->nodes[i].latency_s;
	double s = 0;
	for (int j = i + 1; j < c->n && c->nodes[j].depth > c->nodes[i].depth; j++)
		if (c->nodes[j].parent == i)
			s += node_latency(c, j);
	return s;
}

static int summary_rows(const struct ds_count *c, const struct ds_profile_engine *e, struct row *r)
{
	const struct ds_count_op *t = &c->nodes[0].total;
	int n = 0, mp = e && e->mp_size > 0 ? e->mp_size : 1;
	char l[96];

	if (e && e->world_size > 0) {
		n = add_row(r, n, "world_size", e->world_size, F_INT, "world size: ");
		n = add_row(r, n, "data_parallel_size", e->dp_size, F_INT, "data parallel size: ");
		n = add_row(r, n, "model_parallel_size", mp, F_INT, "model parallel size: ");
		n = add_row(r, n, "batch_size_per_gpu", e->micro_batch, F_INT, "batch size per GPU: ");
	}
	n = add_row(r, n, "params_per_gpu", (double)t->params, F_PARAMS, "params per GPU: ");
	n = add_row(r, n, "params_of_model", (double)t->params * mp, F_PARAMS,
		    "params of model = params per GPU * mp_size: ");
	n = add_row(r, n, "fwd_macs_per_gpu", (double)t->macs, F_MACS, "fwd MACs per GPU: ");
	n = add_row(r, n, "fwd_flops_per_gpu", (double)t->flops, F_NUMBER, "fwd flops per GPU: ");
	n = add_row(r, n, "fwd_flops_of_model", (double)t->flops * mp, F_NUMBER,
		    "fwd flops of model = fwd flops per GPU * mp_size: ");
	/* dstk: the attention matmuls apart, so the older convention reads off */
	n = add_row(r, n, "attention_matmul_macs_per_gpu", (double)t->attn_macs, F_MACS,
		    "attention matmul MACs per GPU (QK^T, AV; in fwd MACs): ");

	double fwd = e ? e->fwd_s : 0, flops = (double)t->flops, rate = 0;
	if (fwd > 0) {
		n = add_row(r, n, "fwd_latency_s", fwd, F_DURATION, "fwd latency: ");
		n = add_row(r, n, "fwd_flops_per_s", flops / fwd, F_RATE,
			    "fwd FLOPS per GPU = fwd flops per GPU / fwd latency: ");
		rate = flops / fwd;
	}
	if (fwd > 0 && e->breakdown && e->bwd_s > 0) {
		double k = 2 + e->recompute_fwd_factor;
		double iter = fwd + e->bwd_s + e->step_s;
		n = add_row(r, n, "bwd_latency_s", e->bwd_s, F_DURATION, "bwd latency: ");
		snprintf(l, sizeof(l), "bwd FLOPS per GPU = %g * fwd flops per GPU / bwd latency: ", k);
		n = add_row(r, n, "bwd_flops_per_s", k * flops / e->bwd_s, F_RATE, l);
		snprintf(l, sizeof(l),
			 "fwd+bwd FLOPS per GPU = %g * fwd flops per GPU / (fwd+bwd latency): ", k + 1);
		n = add_row(r, n, "fwd_bwd_flops_per_s", (k + 1) * flops / (fwd + e->bwd_s), F_RATE, l);
		if (e->step_s > 0 || e->world_size > 0)  /* standalone without an optimizer: none */
			n = add_row(r, n, "step_latency_s", e->step_s, F_DURATION, "step latency: ");
		n = add_row(r, n, "iter_latency_s", iter, F_DURATION, "iter latency: ");
		snprintf(l, sizeof(l), "FLOPS per GPU = %g * fwd flops per GPU / iter latency: ", k + 1);
		rate = (k + 1) * flops / iter;
		n = add_row(r, n, "flops_per_s", rate, F_RATE, l);
		int world = e->world_size > 0 ? e->world_size : 1;
		int mbs = e->micro_batch > 0 ? e->micro_batch : c->opts.batch;
		n = add_row(r, n, "samples_per_s", (double)mbs * world / iter, F_SAMPLES,
			    "samples/second: ");
	}
	if (rate > 0 && e->peak_flops > 0) {
		n = add_row(r, n, "sgemm_flops_per_s", e->peak_flops, F_RATE,
			    "sgemm ceiling per GPU (measured in this run): ");
		n = add_row(r, n, "mfu", rate / e->peak_flops, F_RATIO,
			    "MFU = FLOPS per GPU / sgemm ceiling: ");
	}
	return n;
}

static char *fmt_value(const struct row *r, char *buf, size_t n)
{
	switch (r->fmt) {
	case F_INT: snprintf(buf, n, "%.0f", r->v); return buf;
	case F_PARAMS: return ds_profile_params(r->v, buf, n);
	case F_MACS: return ds_profile_macs(r->v, buf, n);
	case F_NUMBER: return ds_profile_number(r->v, buf, n);
	case F_RATE: return ds_profile_flops(r->v, buf, n);
	case F_DURATION: return ds_profile_duration(r->v, buf, n);
	case F_SAMPLES: return py_float2(r->v, buf, n);
	default: snprintf(buf, n, "%.4f", r->v); return buf;
	}
}

/* ---- aggregated profile: per depth, per class sums ---- */

struct agg {
	const char *cls;
	double v[3];   /* params, macs, latency */
	int order;
};

static int max_depth(const struct ds_count *c)
{
	int d = 0;
	for (int i = 0; i < c->n; i++)
		if (c->nodes[i].depth > d)
			d = c->nodes[i].depth;
	return d;
}

/* Classes at depth d in first-seen (pre-order) order; returns their count. */
static int agg_depth(const struct ds_count *c, int d, struct agg *a)
{
	int k = 0;
	for (int i = 0; i < c->n; i++) {
		const struct ds_count_node *nd = &c->nodes[i];
		if (nd->depth != d)
			continue;
		int j = 0;
		while (j < k && strcmp(a[j].cls, nd->cls))
			j++;
		if (j == k) {
			a[k].cls = nd->cls;
			a[k].v[0] = a[k].v[1] = a[k].v[2] = 0;
			a[k].order = k;
			k++;
		}
		a[j].v[0] += (double)nd->total.params;
		a[j].v[1] += (double)nd->total.macs;
		a[j].v[2] += node_latency(c, i);
	}
	return k;
}

/* qsort_r order: descending by metric *(int *)m, ties in first-seen order. */
static int agg_cmp(const void *x, const void *y, void *metric)
{
	const struct agg *a = x, *b = y;
	int m = *(int *)metric;
	if (a->v[m] != b->v[m])
		return a->v[m] < b->v[m] ? 1 : -1;
	return a->order - b->order;     /* Python's sorted(reverse=True) is stable */
}

/* Depths the aggregated profile prints: DeepSpeed's range(depth). */
static int agg_levels(const struct ds_count *c, const struct ds_profile_view *v)
{
	int levels = max_depth(c) + 1;
	int depth = v->module_depth < 0 ? levels - 1 : v->module_depth;
	return depth > levels ? levels : depth;
}

static char *fmt_metric(int m, double x, char *buf, size_t n)
{
	return m == 0 ? ds_profile_params(x, buf, n) : m == 1 ? ds_profile_macs(x, buf, n) :
	       ds_profile_duration(x, buf, n);
}

static void text_aggregated(const struct ds_count *c, const struct ds_profile_view *v, int timed,
			    struct agg *a, struct agg *s, FILE *out)
{
	static const char *lab[3] = { "params     ", "MACs       ", "fwd latency" };
	char b[64];
	int top = v->top_modules > 0 ? v->top_modules : 1;

	fprintf(out, "Top %d modules in terms of params, MACs or fwd latency at different model depths:\n",
		top);
	int depth = agg_levels(c, v);
	for (int d = 0; d < depth; d++) {
		int k = agg_depth(c, d, a);
		fprintf(out, "depth %d:\n", d);
		for (int m = 0; m < 3; m++) {
			if (m == 2 && !timed)
				continue;
			memcpy(s, a, (size_t)k * sizeof(*s));
			qsort_r(s, (size_t)k, sizeof(*s), agg_cmp, &m);
			fprintf(out, "    %s - {", lab[m]);
			for (int j = 0; j < k && j < top && (m < 2 || s[j].v[m] > 0); j++)
				fprintf(out, "%s'%s': '%s'", j ? ", " : "", s[j].cls,
					fmt_metric(m, s[j].v[m], b, sizeof(b)));
			fprintf(out, "}\n");
		}
	}
}

/* ---- detailed profile: PyTorch's module repr with the profile prepended ---- */

struct sbuf {
	char *p;
	size_t len, cap;
	int oom;
};

static void sb_put(struct sbuf *s, const char *t, size_t n)
{
	if (s->oom)
		return;
	if (s->len + n + 1 > s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 256;
		while (cap < s->len + n + 1)
			cap *= 2;
		char *p = realloc(s->p, cap);
		if (!p) {
			s->oom = 1;
			return;
		}
		s->p = p;
		s->cap = cap;
	}
	memcpy(s->p + s->len, t, n);
	s->len += n;
	s->p[s->len] = 0;
}

static void sb_str(struct sbuf *s, const char *t) { sb_put(s, t, strlen(t)); }

/* Append t with every newline followed by two spaces (torch's _addindent). */
static void sb_indent(struct sbuf *s, const char *t)
{
	for (const char *q; (q = strchr(t, '\n')); t = q + 1) {
		sb_put(s, t, (size_t)(q - t + 1));
		sb_str(s, "  ");
	}
	sb_str(s, t);
}

static void node_items(const struct ds_count *c, int i, int timed, double root_lat, char *buf,
		       size_t n)
{
	const struct ds_count_node *nd = &c->nodes[i];
	const struct ds_count_op *t = &nd->total, *r = &c->nodes[0].total;
	char a[48], b[48], d[48], e[48], f[48], g[48];
	int len = snprintf(buf, n, "%s, %s%% Params, %s, %s%% MACs", ds_profile_params((double)t->params, a, sizeof(a)),
			   pct((double)t->params, (double)r->params, b, sizeof(b)),
			   ds_profile_macs((double)t->macs, d, sizeof(d)),
			   pct((double)t->macs, (double)r->macs, e, sizeof(e)));
	double lat = node_latency(c, i);
	if (timed && lat > 0) {    /* modules that were not timed show no latency */
		char rate[48];
		len += snprintf(buf + len, n - (size_t)len, ", %s, %s%% latency, %s",
				ds_profile_duration(lat, f, sizeof(f)), pct(lat, root_lat, g, sizeof(g)),
				ds_profile_flops(lat > 0 ? (double)t->flops / lat : 0, rate, sizeof(rate)));
	}
	if (nd->own.attn_macs > 0)
		len += snprintf(buf + len, n - (size_t)len, ", QK^T+AV %s",
				ds_profile_macs((double)nd->own.attn_macs, a, sizeof(a)));
	if (nd->extra[0])
		snprintf(buf + len, n - (size_t)len, ", %s", nd->extra);
}

/* repr of node i into a fresh string (caller frees), NULL when out of memory. */
static char *node_repr(const struct ds_count *c, int i, int timed, double root_lat)
{
	const struct ds_count_node *nd = &c->nodes[i];
	struct sbuf s = { 0 };
	char items[512];
	node_items(c, i, timed, root_lat, items, sizeof(items));
	sb_str(&s, nd->cls);
	sb_str(&s, "(");
	if (nd->nchild == 0) {
		sb_str(&s, items);
		sb_str(&s, ")");
		return s.oom ? (free(s.p), NULL) : s.p;
	}
	sb_str(&s, "\n  ");
	sb_str(&s, items);
	/* children, runs of identical reprs collapsed in a list: "(0-11): 12 x ..." */
	int kids[4096], nk = 0;
	for (int j = i + 1; j < c->n && c->nodes[j].depth > nd->depth && nk < 4096; j++)
		if (c->nodes[j].parent == i)
			kids[nk++] = j;
	char **rep = calloc((size_t)nk + 1, sizeof(*rep));
	if (!rep)
		s.oom = 1;
	for (int k = 0; k < nk && !s.oom; k++)
		if (!(rep[k] = node_repr(c, kids[k], timed, root_lat)))
			s.oom = 1;
	for (int k = 0; k < nk && !s.oom;) {
		int e = k;
		if (nd->is_list)
			while (e + 1 < nk && !strcmp(rep[e + 1], rep[k]))
				e++;
		char head[96];
		if (e > k)
			snprintf(head, sizeof(head), "(%s-%s): %d x ", c->nodes[kids[k]].name,
				 c->nodes[kids[e]].name, e - k + 1);
		else
			snprintf(head, sizeof(head), "(%s): ", c->nodes[kids[k]].name);
		sb_str(&s, "\n  ");
		sb_str(&s, head);
		sb_indent(&s, rep[k]);
		k = e + 1;
	}
	for (int k = 0; rep && k < nk; k++)
		free(rep[k]);
	free(rep);
	sb_str(&s, "\n)");
	return s.oom ? (free(s.p), NULL) : s.p;
}

/* ---- the three renderers ---- */

static int render_text(const struct ds_count *c, const struct ds_profile_view *v,
		       const struct row *r, int nr, FILE *out, struct ds_err *err)
{
	char b[64];
	int timed = node_latency(c, 0) > 0;
	fprintf(out, "\n-------------------------- DeepSpeed Flops Profiler --------------------------\n");
	fprintf(out, "Profile Summary at step %d:\n", v->profile_step);
	fprintf(out, "Notations:\n"
		"data parallel size (dp_size), model parallel size(mp_size),\n"
		"number of parameters (params), number of multiply-accumulate operations(MACs),\n"
		"number of floating-point operations (flops), floating-point operations per second (FLOPS),\n"
		"fwd latency (forward propagation latency), bwd latency (backward propagation latency),\n"
		"step (weights update latency), iter latency (sum of fwd, bwd and step latency)\n\n");
	for (int i = 0; i < nr; i++)
		fprintf(out, "%-70s  %-8s\n", r[i].label, fmt_value(&r[i], b, sizeof(b)));

	fprintf(out, "\n----------------------------- Aggregated Profile per GPU -----------------------------\n");
	struct agg *a = calloc(2 * ((size_t)c->n + 1), sizeof(*a));
	if (!a)
		return ds_err_set(err, DS_ENOMEM, "profile: out of memory");
	text_aggregated(c, v, timed, a, a + c->n + 1, out);
	free(a);

	if (v->detailed) {
		fprintf(out, "\n------------------------------ Detailed Profile per GPU ------------------------------\n");
		if (timed)
			fprintf(out, "Each module profile is listed after its name in the following order: \n"
				"params, percentage of total params, MACs, percentage of total MACs, fwd latency, percentage of total fwd latency, fwd FLOPS (latency only for the modules that were timed)\n");
		else
			fprintf(out, "Each module profile is listed after its name in the following order: \n"
				"params, percentage of total params, MACs, percentage of total MACs (fwd latency not measured)\n");
		fprintf(out, "\nNote: 1. A module's counts include its submodules'; ops of its own forward (attention matmuls, softmax, activations, residual adds) make up the difference between a parent's MACs and the sum of its submodules'.\n"
			"2. Number of floating-point operations is a theoretical estimation, thus FLOPS computed using that could be larger than the maximum system throughput.\n"
			"3. QK^T+AV: the attention matmul MACs of that module, included in its MACs; tied weights count in both users but once in the model.\n\n");
		char *s = node_repr(c, 0, timed, node_latency(c, 0));
		if (!s)
			return ds_err_set(err, DS_ENOMEM, "profile: out of memory");
		fprintf(out, "%s\n", s);
		free(s);
	}
	fprintf(out, "------------------------------------------------------------------------------\n");
	return 0;
}

static const char *conv_name(int c) { return c == DS_COUNT_LEGACY ? "legacy" : "current"; }

static json_t *jnum(double v, int fmt)
{
	if ((fmt == F_INT || fmt == F_PARAMS || fmt == F_MACS || fmt == F_NUMBER) &&
	    fabs(v) < 9.0e18 && v == floor(v))
		return json_integer((json_int_t)v);
	return json_real(v);
}

static int render_json(const struct ds_count *c, const struct ds_profile_view *v, const struct row *r,
		       int nr, FILE *out, struct ds_err *err)
{
	char path[512];
	int rc = 0;
	json_t *root = json_object(), *cfg = json_object(), *sum = json_object();
	json_t *aggs = json_array(), *mods = json_array();
	if (!root || !cfg || !sum || !aggs || !mods) {
		rc = ds_err_set(err, DS_ENOMEM, "profile: out of memory");
		goto out;
	}
	json_object_set_new(root, "tool", json_string("ds-profile"));
	json_object_set_new(root, "version", json_string(PACKAGE_VERSION));
	json_object_set_new(root, "features", json_string(DS_FEATURES));
	if (v->model)
		json_object_set_new(cfg, "model", json_string(v->model));
	json_object_set_new(cfg, "family", json_string(c->family == DS_FAMILY_BERT ? "bert" : "gpt"));
	json_object_set_new(cfg, "batch_size", json_integer(c->opts.batch));
	json_object_set_new(cfg, "seq_length", json_integer(c->opts.seq));
	json_object_set_new(cfg, "convention", json_string(conv_name(c->opts.convention)));
	if (c->opts.mlm_tokens > 0)
		json_object_set_new(cfg, "mlm_tokens", json_integer(c->opts.mlm_tokens));
	json_object_set_new(cfg, "module_depth", json_integer(v->module_depth));
	json_object_set_new(cfg, "top_modules", json_integer(v->top_modules));
	json_object_set_new(root, "config", cfg);
	cfg = NULL;
	for (int i = 0; i < nr; i++)
		json_object_set_new(sum, r[i].key, jnum(r[i].v, r[i].fmt));
	json_object_set_new(sum, "fwd_macs_without_attention_matmuls",
			    json_integer(c->nodes[0].total.macs - c->nodes[0].total.attn_macs));
	json_object_set_new(root, "summary", sum);
	sum = NULL;

	struct agg *a = calloc((size_t)c->n + 1, sizeof(*a));
	if (!a) {
		rc = ds_err_set(err, DS_ENOMEM, "profile: out of memory");
		goto out;
	}
	static const char *mk[3] = { "params", "macs", "fwd_latency_s" };
	int depth = agg_levels(c, v), top = v->top_modules > 0 ? v->top_modules : 1;
	for (int d = 0; d < depth; d++) {
		int k = agg_depth(c, d, a);
		json_t *o = json_object();
		json_object_set_new(o, "depth", json_integer(d));
		for (int m = 0; m < 3; m++) {
			json_t *arr = json_array();
			struct agg *s = malloc((size_t)k * sizeof(*s));
			if (s) {
				memcpy(s, a, (size_t)k * sizeof(*s));
				qsort_r(s, (size_t)k, sizeof(*s), agg_cmp, &m);
				for (int j = 0; j < k && j < top && (m < 2 || s[j].v[m] > 0); j++)
					json_array_append_new(arr, json_pack("{s:s,s:o}", "class", s[j].cls, "value",
									     jnum(s[j].v[m], m == 2 ? F_RATIO : F_NUMBER)));
				free(s);
			}
			json_object_set_new(o, mk[m], arr);
		}
		json_array_append_new(aggs, o);
	}
	free(a);
	json_object_set_new(root, "aggregated", aggs);
	aggs = NULL;

	for (int i = 0; i < c->n; i++) {
		const struct ds_count_node *nd = &c->nodes[i];
		json_array_append_new(mods, json_pack("{s:s,s:s,s:i,s:I,s:I,s:I,s:I,s:f}",
			"path", ds_count_path(c, i, path, sizeof(path)), "class", nd->cls, "depth", nd->depth,
			"params", (json_int_t)nd->total.params, "macs", (json_int_t)nd->total.macs,
			"flops", (json_int_t)nd->total.flops, "attn_matmul_macs", (json_int_t)nd->total.attn_macs,
			"fwd_latency_s", node_latency(c, i)));
	}
	json_object_set_new(root, "modules", mods);
	mods = NULL;
	if (json_dumpf(root, out, JSON_INDENT(2)) < 0 || fputc('\n', out) == EOF)
		rc = ds_err_set(err, DS_EIO, "profile: write failed: %s", strerror(errno));
out:
	json_decref(root);
	json_decref(cfg);
	json_decref(sum);
	json_decref(aggs);
	json_decref(mods);
	return rc;
}

static int render_csv(const struct ds_count *c, FILE *out)
{
	char path[512];
	fprintf(out, "path,class,depth,params,macs,flops,attn_matmul_macs,fwd_latency_s\n");
	for (int i = 0; i < c->n; i++) {
		const struct ds_count_node *nd = &c->nodes[i];
		fprintf(out, "%s,%s,%d,%lld,%lld,%lld,%lld,%.9g\n", ds_count_path(c, i, path, sizeof(path)),
			nd->cls, nd->depth, (long long)nd->total.params, (long long)nd->total.macs,
			(long long)nd->total.flops, (long long)nd->total.attn_macs, node_latency(c, i));
	}
	return 0;
}

int ds_profile_render(const struct ds_count *c, const struct ds_profile_view *v,
		      const struct ds_profile_engine *e, FILE *out, struct ds_err *err)
{
	struct row rows[MAX_ROWS];
	int rc;
	if (!c || c->n < 1)
		return ds_err_set(err, DS_EINVAL, "profile: empty module tree");
	int nr = summary_rows(c, e, rows);
	if (v->format == DS_PROFILE_JSON)
		rc = render_json(c, v, rows, nr, out, err);
	else if (v->format == DS_PROFILE_CSV)
		rc = render_csv(c, out);
	else
		rc = render_text(c, v, rows, nr, out, err);
	if (rc == 0 && (fflush(out) != 0 || ferror(out)))
		rc = ds_err_set(err, DS_EIO, "profile: write failed: %s", strerror(errno));
	return rc;
}
