/* pipe.c - the layer list of DeepSpeed's pipeline view of the GPT and its
 * partition methods (pipe.h).  tests/unit/test_schedule.c compares the
 * partitions with DeepSpeed's own partition_uniform / partition_balanced
 * (tests/data/pipe_partition.txt). */
#include "model/pipe.h"

#include <math.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

int ds_pipe_layers(const struct ds_gpt *m, struct ds_pipe_layer *out, int cap)
{
	const int L = ds_gpt_config(m)->num_layers, n = L + 5;
	const int tied = ds_gpt_head_segment(m) == 0;
	const int64_t emb = ds_gpt_segment(m, 0)->numel;
	for (int i = 0; i < n && i < cap; i++) {
		struct ds_pipe_layer *x = &out[i];
		x->layer = -1;
		x->params = 0;
		if (i == 0) {
			*x = (struct ds_pipe_layer){ DS_PL_EMBED, -1, "EmbeddingPipe", emb };
		} else if (i == 1) {
			*x = (struct ds_pipe_layer){ DS_PL_PRE, -1, "_pre_transformer_block", 0 };
		} else if (i < L + 2) {
			*x = (struct ds_pipe_layer){ DS_PL_LAYER, i - 2, "ParallelTransformerLayerPipe",
						     ds_gpt_segment(m, i - 1)->numel };
		} else if (i == L + 2) {
			*x = (struct ds_pipe_layer){ DS_PL_POST, -1, "_post_transformer_block", 0 };
		} else if (i == L + 3) {
			*x = (struct ds_pipe_layer){ DS_PL_NORM, -1, "NormPipe", ds_gpt_segment(m, L + 1)->numel };
		} else {
			*x = (struct ds_pipe_layer){ DS_PL_HEAD, -1, tied ? "EmbeddingPipe" : "ParallelLinearPipe",
						     tied ? emb : ds_gpt_segment(m, L + 2)->numel };
		}
	}
	return n;
}

void ds_pipe_partition_uniform(int n, int parts, int *bounds)
{
	if (n <= parts) {
		for (int p = 0; p <= parts; p++)
			bounds[p] = p < n ? p : n;
		return;
	}
	int chunk = n / parts, residual = n - chunk * parts;
	/* parts of chunk items, the first `residual` of them one larger */
	for (int p = 0; p <= parts; p++)
		bounds[p] = p * chunk + (p < residual ? p : residual);
}

int ds_pipe_partition_balanced(const int64_t *w, int n, int m, int *bounds)
{
	if (n <= m) {
		ds_pipe_partition_uniform(n, m, bounds);
		return 0;
	}
	/* dp over (first i items, j parts): the largest and smallest part and
	 * their difference (the cost), and where the last part starts */
	const size_t cells = (size_t)(n + 1) * (size_t)(m + 1);
	double *mx = malloc(cells * sizeof *mx), *mn = malloc(cells * sizeof *mn), *cost = malloc(cells * sizeof *cost);
	double *pre = malloc((size_t)(n + 1) * sizeof *pre);
	int *pos = calloc(cells, sizeof *pos);
	if (!mx || !mn || !cost || !pre || !pos) {
		free(mx), free(mn), free(cost), free(pre), free(pos);
		return DS_ENOMEM;
	}
#define AT(a, i, j) a[(size_t)(i) * (size_t)(m + 1) + (size_t)(j)]
	for (size_t c = 0; c < cells; c++)
		mx[c] = mn[c] = cost[c] = INFINITY;
	pre[0] = 0;
	for (int i = 0; i < n; i++)
		pre[i + 1] = pre[i] + (double)w[i];
	AT(mx, 0, 0) = 0;
	AT(cost, 0, 0) = 0;
	for (int i = 1; i <= n; i++)
		for (int j = 1; j <= (i < m ? i : m); j++)
			for (int k = 0; k < i; k++) {
				double part = pre[i] - pre[k];
				double hi = AT(mx, k, j - 1) > part ? AT(mx, k, j - 1) : part;
				double lo = AT(mn, k, j - 1) < part ? AT(mn, k, j - 1) : part;
				double c = hi - lo;
				if (AT(cost, i, j) >= c) {   /* ties: the later split */
					AT(cost, i, j) = c;
					AT(mx, i, j) = hi;
					AT(mn, i, j) = lo;
					AT(pos, i, j) = k;
				}
			}
	bounds[m] = n;
	for (int j = m; j >= 1; j--)
		bounds[j - 1] = AT(pos, bounds[j], j);
#undef AT
	free(mx), free(mn), free(cost), free(pre), free(pos);
	return 0;
}

int ds_pipe_partition(const struct ds_gpt *m, int stages, const char *method, int *bounds, struct ds_err *err)
{
	const int n = ds_gpt_config(m)->num_layers + 5;
	struct ds_pipe_layer *ly = calloc((size_t)n, sizeof *ly);
	int64_t *w = calloc((size_t)n, sizeof *w);
	int rc = 0;
	if (!ly || !w) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory partitioning the pipeline");
		goto out;
	}
	ds_pipe_layers(m, ly, n);
	if (!method || !strcmp(method, "best") || !strcmp(method, "parameters")) {
		for (int i = 0; i < n; i++)
			w[i] = ly[i].params;
	} else if (!strcmp(method, "uniform")) {
		ds_pipe_partition_uniform(n, stages, bounds);
		goto out;
	} else if (!strncmp(method, "type:", 5)) {
		regex_t re;
		if (regcomp(&re, method + 5, REG_EXTENDED | REG_ICASE | REG_NOSUB)) {
			rc = ds_err_set(err, DS_EINVAL, "pipeline partition method '%s': not a regular expression", method);
			goto out;
		}
		int found = 0;
		for (int i = 0; i < n; i++)
			found += (w[i] = regexec(&re, ly[i].type, 0, NULL, 0) == 0);
		regfree(&re);
		if (!found) {
			rc = ds_err_set(err, DS_EINVAL, "pipeline partition method '%s' found no valid layers to partition "
					"(the layers are EmbeddingPipe, ParallelTransformerLayerPipe, NormPipe, %s)", method,
					ly[n - 1].type);
			goto out;
		}
	} else {
		rc = ds_err_set(err, DS_EINVAL, "pipeline partition method '%s' is not implemented (parameters, uniform, "
				"type:REGEX)", method);
		goto out;
	}
	if (ds_pipe_partition_balanced(w, n, stages, bounds) < 0)
		rc = ds_err_set(err, DS_ENOMEM, "out of memory partitioning the pipeline");
out:
	free(ly);
	free(w);
	return rc;
}

void ds_pipe_stage_part(const struct ds_gpt *m, const int *bounds, int stage, struct ds_gpt_part *p)
{
	const int L = ds_gpt_config(m)->num_layers, a = bounds[stage], b = bounds[stage + 1];
	/* layer items are 2 .. L+1 */
	int l0 = a - 2, l1 = b - 2;
	l0 = l0 < 0 ? 0 : l0 > L ? L : l0;
	l1 = l1 < 0 ? 0 : l1 > L ? L : l1;
	if (l1 < l0)
		l1 = l0;
	p->embed = a <= 0 && b > 0;
	p->l0 = l0;
	p->l1 = l1;
	p->norm = a <= L + 3 && b > L + 3;
	p->head = a <= L + 4 && b > L + 4;
}
