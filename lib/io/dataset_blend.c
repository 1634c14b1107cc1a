/* dataset_blend.c - blended datasets as Megatron and GPT-NeoX blend them
 * (dataset.h "blends"): NeoX's weight normalisation and per-dataset sample
 * counts and its weights from document counts (megatron/data/data_utils.py),
 * and the greedy sequence of helpers.cpp build_blending_indices, kept as
 * one row of per-part counts every STRIDE samples and replayed from there
 * (NeoX keeps 9 bytes per sample; a row is 8 bytes per part per STRIDE).
 */
#include "io/dataset.h"
#include "io/dataset_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { STRIDE = 256, MAX_PARTS = 255 };  /* NeoX's dataset index is a uint8 */

struct ds_blend {
	int n;
	struct ds_sampler *part;  /* [n] */
	double *w;                /* [n] normalised */
	uint64_t *count;          /* [n] the samples the size assumed of each */
	uint64_t size;
	uint64_t *round;          /* [n] drawn from each part in [0, size) */
	uint64_t *rows;           /* [size / STRIDE + 1][n]: drawn from each part before sample r x STRIDE */
};

int ds_blend_weights(const double *w, int n, uint64_t total, double *norm, uint64_t *count, struct ds_err *err)
{
	double sum = 0;
	if (n < 1 || n > MAX_PARTS)
		return ds_err_set(err, DS_EINVAL, "a blend of %d datasets: give 1 to %d", n, MAX_PARTS);
	for (int d = 0; d < n; d++) {
		if (!isfinite(w[d]) || w[d] < 0)
			return ds_err_set(err, DS_EINVAL, "blend weight %d is %g: weights are non-negative numbers", d + 1, w[d]);
		sum += w[d];
	}
	if (!(sum > 0))
		return ds_err_set(err, DS_EINVAL, "blend weights sum to 0: give at least one positive weight");
	for (int d = 0; d < n; d++) {
		norm[d] = w[d] / sum;
		/* Python's int(math.ceil(num_samples * weight * 1.005)), left to right */
		if (count)
			count[d] = (uint64_t)ceil((double)total * norm[d] * 1.005);
	}
	return 0;
}

void ds_blend_weights_by_docs(const uint64_t *docs, int n, double alpha, double *w)
{
	double total = 0, sp = 0, sw = 0;
	if (n == 1) {
		w[0] = 1.0;
		return;
	}
	for (int d = 0; d < n; d++)
		total += (double)docs[d];
	for (int d = 0; d < n; d++) {
		w[d] = pow((double)docs[d] / total, alpha);  /* probs: the unbiased share to the alpha */
		sp += w[d];
	}
	for (int d = 0; d < n; d++) {
		/* normalised probs times (1 - the unbiased share) */
		w[d] = w[d] / sp * (1.0 - (double)docs[d] / total);
		sw += w[d];
	}
	for (int d = 0; d < n; d++)
		w[d] /= sw;
}

/* The part sample t comes from, given what was drawn before it: the
 * largest w x max(t, 1) - drawn, the first on a tie (strict >). */
static int choose(const double *w, int n, uint64_t t, const uint64_t *drawn)
{
	double s = t > 1 ? (double)t : 1.0;
	double best = w[0] * s - (double)drawn[0];
	int d = 0;
	for (int j = 1; j < n; j++) {
		double e = w[j] * s - (double)drawn[j];
		if (e > best) {
			best = e;
			d = j;
		}
	}
	return d;
}

void ds_blend_sequence(const double *w, int n, uint64_t size, int *part, uint64_t *sample)
{
	uint64_t drawn[MAX_PARTS] = { 0 };
	for (uint64_t t = 0; t < size; t++) {
		int d = choose(w, n, t, drawn);
		if (part)
			part[t] = d;
		if (sample)
			sample[t] = drawn[d];
		drawn[d]++;
	}
}

int ds_blend_create(struct ds_blend **out, const struct ds_sampler *parts, const double *w, const uint64_t *count,
		    int n, uint64_t size, struct ds_err *err)
{
	struct ds_blend *b;
	uint64_t drawn[MAX_PARTS] = { 0 };
	*out = NULL;
	if (size == 0)
		return ds_err_set(err, DS_EINVAL, "a blend of 0 samples");
	b = calloc(1, sizeof *b);
	if (!b)
		return ds_err_set(err, DS_ENOMEM, "out of memory for a blend");
	b->n = n;
	b->size = size;
	b->part = calloc((size_t)(n > 0 ? n : 1), sizeof *b->part);
	b->w = calloc((size_t)(n > 0 ? n : 1), sizeof *b->w);
	b->count = calloc((size_t)(n > 0 ? n : 1), sizeof *b->count);
	b->round = calloc((size_t)(n > 0 ? n : 1), sizeof *b->round);
	b->rows = calloc((size_t)(size / STRIDE + 1) * (size_t)(n > 0 ? n : 1), sizeof *b->rows);
	if (!b->part || !b->w || !b->count || !b->round || !b->rows) {
		ds_blend_destroy(b);
		return ds_err_set(err, DS_ENOMEM, "out of memory for a blend of %llu samples", (unsigned long long)size);
	}
	/* normalised again, as BlendableDataset does after NeoX's normalisation */
	int rc = ds_blend_weights(w, n, size, b->w, NULL, err);
	if (rc < 0) {
		ds_blend_destroy(b);
		return rc;
	}
	memcpy(b->part, parts, (size_t)n * sizeof *parts);
	if (count)
		memcpy(b->count, count, (size_t)n * sizeof *count);
	for (uint64_t t = 0; t < size; t++) {
		if (t % STRIDE == 0)
			memcpy(b->rows + (t / STRIDE) * (uint64_t)n, drawn, (size_t)n * sizeof *drawn);
		drawn[choose(b->w, n, t, drawn)]++;
	}
	memcpy(b->round, drawn, (size_t)n * sizeof *drawn);
	*out = b;
	return 0;
}

void ds_blend_destroy(struct ds_blend *b)
{
	if (!b)
		return;
	free(b->part);
	free(b->w);
	free(b->count);
	free(b->round);
	free(b->rows);
	free(b);
}

/* Replay from the row before j up to j: drawn[] before sample j, and the
 * part of j itself. */
static int replay(const struct ds_blend *b, uint64_t j, uint64_t *drawn)
{
	uint64_t t = j / STRIDE * STRIDE;
	memcpy(drawn, b->rows + (j / STRIDE) * (uint64_t)b->n, (size_t)b->n * sizeof *drawn);
	for (; t < j; t++)
		drawn[choose(b->w, b->n, t, drawn)]++;
	return choose(b->w, b->n, j, drawn);
}

void ds_blend_locate(const struct ds_blend *b, uint64_t g, int *part, uint64_t *k)
{
	uint64_t drawn[MAX_PARTS], e = g / b->size;
	int d = replay(b, g % b->size, drawn);
	*part = d;
	*k = drawn[d] + e * b->round[d];
}

void ds_blend_drawn(const struct ds_blend *b, uint64_t g, uint64_t *out)
{
	uint64_t e = g / b->size;
	replay(b, g % b->size, out);
	for (int d = 0; d < b->n; d++)
		out[d] += e * b->round[d];
}

int ds_blend_num_parts(const struct ds_blend *b) { return b->n; }
uint64_t ds_blend_size(const struct ds_blend *b) { return b->size; }

const struct ds_sampler *ds_blend_part(const struct ds_blend *b, int i, double *weight, uint64_t *count)
{
	if (weight)
		*weight = b->w[i];
	if (count)
		*count = b->count[i];
	return &b->part[i];
}

void ds_sampler_blend(struct ds_sampler *s, const struct ds_blend *b)
{
	memset(s, 0, sizeof *s);
	s->ds = b->part[0].ds;
	s->seq_length = b->part[0].seq_length;
	s->count = b->size;
	s->seed = b->part[0].seed;
	s->stream = b->part[0].stream;
	s->shuffle = 1;
	s->blend = b;
}
