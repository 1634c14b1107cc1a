/* registry.c - named tensors of the GPT family in one flat buffer (registry.h).
 *
 * The order is the order of the forward pass, so a segment is one contiguous
 * range.  Initialisation is a pure function of (seed, name, element index).
 */
#include "model/registry.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/rng.h"

struct builder {
	struct ds_gpt_registry *r;
	int cap;
	int64_t off;
	int seg;
	int tp, tp_rank;   /* the shard being described; tp_rank as addressed (the fault may move it) */
};

/* add a tensor cut by `split` into tp pieces of `blocks` blocks each (see
 * registry.h); d0, d1 are the logical shape */
static int add_tp(struct builder *b, const char *name, int64_t d0, int64_t d1, int init, float std, int split,
		  int blocks)
{
	struct ds_gpt_registry *r = b->r;
	if (r->nt == b->cap) {
		int cap = b->cap ? 2 * b->cap : 32;
		struct ds_gpt_tensor *t = realloc(r->t, (size_t)cap * sizeof(*t));
		if (!t)
			return DS_ENOMEM;
		r->t = t;
		b->cap = cap;
	}
	struct ds_gpt_tensor *x = &r->t[r->nt++];
	memset(x, 0, sizeof(*x));
	snprintf(x->name, sizeof(x->name), "%s", name);
	x->ndim = d1 > 0 ? 2 : 1;
	x->gshape[0] = d0;
	x->gshape[1] = d1 > 0 ? d1 : 0;
	x->gnumel = d1 > 0 ? d0 * d1 : d0;
	if (b->tp == 1)
		split = DS_TP_NONE;
	x->split = split;
	x->blocks = split ? blocks : 1;
	x->tp = split ? b->tp : 1;
	x->tp_rank = split ? b->tp_rank : 0;
	x->shape[0] = split == DS_TP_ROWS ? d0 / b->tp : d0;
	x->shape[1] = d1 <= 0 ? 0 : split == DS_TP_COLS ? d1 / b->tp : d1;
	x->numel = d1 > 0 ? x->shape[0] * x->shape[1] : x->shape[0];
	x->offset = b->off;
	x->segment = b->seg;
	x->init = init;
	x->init_std = (init == DS_INIT_NORMAL || init == DS_INIT_SCALED) ? std : 0.0f;
	x->name_hash = ds_hash_str(x->name);
	b->off += x->numel;
	return 0;
}

static int add(struct builder *b, const char *name, int64_t d0, int64_t d1, int init, float std)
{
	return add_tp(b, name, d0, d1, init, std, DS_TP_NONE, 1);
}

static void seg_begin(struct builder *b)
{
	struct ds_gpt_segment *s = &b->r->seg[b->seg];
	s->offset = b->off;
	s->first_tensor = b->r->nt;
}

static void seg_end(struct builder *b)
{
	struct ds_gpt_segment *s = &b->r->seg[b->seg];
	s->numel = b->off - s->offset;
	s->ntensors = b->r->nt - s->first_tensor;
	b->seg++;
}

/* The registry of tensor-parallel rank tp_rank of tp and expert-parallel
 * rank ep_rank of ep (one of them 1: MoE layers are not split by tensor
 * parallelism here). */
static int build_par(struct ds_gpt_registry *r, const struct ds_model_config *m, int tp, int tp_rank, int ep,
		     int ep_rank, struct ds_err *err)
{
	memset(r, 0, sizeof(*r));
	if (ep < 1 || ep_rank < 0 || ep_rank >= ep)
		return ds_err_set(err, DS_EINVAL, "model: expert-parallel rank %d of %d", ep_rank, ep);
	for (int l = 0; l < m->num_layers; l++)
		if (ds_moe_experts(m, l) % ep)
			return ds_err_set(err, DS_EINVAL, "model: expert-parallel size %d does not divide the %d experts of "
					  "layer %d (moe.ep_size)", ep, ds_moe_experts(m, l), l);
	if (m->num_layers < 1)
		return ds_err_set(err, DS_EINVAL, "model: num_layers must be >= 1 (got %d)", m->num_layers);
	if (m->hidden_size < 1 || m->num_attention_heads < 1 || m->hidden_size % m->num_attention_heads)
		return ds_err_set(err, DS_EINVAL, "model: hidden_size %d must be a positive multiple of num_attention_heads %d",
				  m->hidden_size, m->num_attention_heads);
	if (m->padded_vocab_size < m->vocab_size || m->vocab_size < 1)
		return ds_err_set(err, DS_EINVAL, "model: vocab_size %d / padded_vocab_size %d: padded must be >= vocab >= 1",
				  m->vocab_size, m->padded_vocab_size);
	if (m->intermediate_size < 1)
		return ds_err_set(err, DS_EINVAL, "model: intermediate_size must be >= 1 (got %d)", m->intermediate_size);
	if (m->pos_emb == DS_POS_LEARNED && m->max_position_embeddings < 1)
		return ds_err_set(err, DS_EINVAL, "model: max_position_embeddings must be >= 1 with pos_emb learned");

	const int64_t L = m->num_layers, C = m->hidden_size, Vp = m->padded_vocab_size;
	const int64_t F = m->intermediate_size;
	const int64_t Fup = ds_activation_gated(m->activation) ? 2 * F : F;
	const float std = (float)ds_model_init_std(m, m->init_method);
	const float sstd = (float)ds_model_init_std(m, ds_model_output_init(m));
	const int ln = m->norm == DS_NORM_LAYERNORM;
	const int gated = ds_activation_gated(m->activation);
	if (tp < 1 || tp_rank < 0 || tp_rank >= tp)
		return ds_err_set(err, DS_EINVAL, "model: tensor-parallel rank %d of %d", tp_rank, tp);
	if (tp > 1 && ds_moe_num_layers(m) > 0)
		return ds_err_set(err, DS_EINVAL, "model: Mixture-of-Experts layers with tensor parallelism (size %d) are "
				  "not supported (DeepSpeed's expert tensor parallelism); use tensor-parallel size 1", tp);
	if (m->num_attention_heads % tp)
		return ds_err_set(err, DS_EINVAL, "model: num_attention_heads %d is not a multiple of the tensor-parallel "
				  "size %d (Megatron splits whole heads)", m->num_attention_heads, tp);
	if (F % tp)
		return ds_err_set(err, DS_EINVAL, "model: intermediate_size %lld is not a multiple of the tensor-parallel "
				  "size %d", (long long)F, tp);
	if (Vp % tp)
		return ds_err_set(err, DS_EINVAL, "model: padded_vocab_size %lld is not a multiple of the tensor-parallel "
				  "size %d (make_vocab_size_divisible_by a multiple of it pads it so)", (long long)Vp, tp);
	r->tp = tp;
	r->tp_rank = tp_rank;
	/* test-only fault (registry.h): the last rank addresses its neighbour's slice */
	const char *fault = getenv("DS_TEST_FAULT_TP_SLICE");
	int arank = tp > 1 && tp_rank == tp - 1 && fault && *fault && strcmp(fault, "0") ? tp_rank - 1 : tp_rank;

	r->nseg_dense = (int)L + 2 + (m->no_weight_tying ? 1 : 0);
	r->nseg = r->nseg_dense + ds_moe_num_layers(m);
	r->ep = ep;
	r->ep_rank = ep_rank;
	r->seg = calloc((size_t)r->nseg, sizeof(*r->seg));
	r->expert_seg = malloc((size_t)L * sizeof(int));
	if (!r->seg || !r->expert_seg) {
		ds_gpt_registry_release(r);
		return ds_err_set(err, DS_ENOMEM, "model: out of memory for the segment table");
	}
	struct builder b = { r, 0, 0, 0, tp, arank };
	char n[DS_GPT_NAME_MAX];
	int rc = 0;
#define ADD(name, d0, d1, init, s) do { if ((rc = add(&b, (name), (d0), (d1), (init), (s))) < 0) goto fail; } while (0)
#define ADD_TP(name, d0, d1, init, s, split, blocks) do { \
		if ((rc = add_tp(&b, (name), (d0), (d1), (init), (s), (split), (blocks))) < 0) goto fail; } while (0)
	seg_begin(&b);
	ADD_TP("transformer.wte.weight", Vp, C, DS_INIT_NORMAL, std, DS_TP_ROWS, 1);
	if (m->pos_emb == DS_POS_LEARNED)
		ADD("transformer.wpe.weight", m->max_position_embeddings, C, DS_INIT_NORMAL, std);
	seg_end(&b);
	for (int l = 0; l < L; l++) {
		seg_begin(&b);
#define LN(sub) do { \
		snprintf(n, sizeof(n), "transformer.h.%d.%s.weight", l, sub); ADD(n, C, 0, DS_INIT_ONE, 0); \
		if (ln) { snprintf(n, sizeof(n), "transformer.h.%d.%s.bias", l, sub); ADD(n, C, 0, DS_INIT_ZERO, 0); } \
	} while (0)
/* column-parallel: weight and bias cut along the output (rows, in blocks);
 * row-parallel: weight cut along the input (columns), bias replicated;
 * bias 0: none (bias-free linear layers) */
#define LINB(sub, out, in, init, s, split, blocks, bias) do { \
		snprintf(n, sizeof(n), "transformer.h.%d.%s.weight", l, sub); ADD_TP(n, out, in, init, s, split, blocks); \
		if (bias) { snprintf(n, sizeof(n), "transformer.h.%d.%s.bias", l, sub); \
			ADD_TP(n, out, 0, DS_INIT_ZERO, 0, (split) == DS_TP_ROWS ? DS_TP_ROWS : DS_TP_NONE, blocks); } \
	} while (0)
#define LIN(sub, out, in, init, s, split, blocks) LINB(sub, out, in, init, s, split, blocks, 1)
		const int ab = !m->no_bias_in_attn_linear, mb = !m->no_bias_in_mlp;
		LN("ln_1");
		LINB("attn.c_attn", 3 * C, C, DS_INIT_NORMAL, std, DS_TP_ROWS, 3, ab);
		LINB("attn.c_proj", C, C, DS_INIT_SCALED, sstd, DS_TP_COLS, 1, ab);
		LN("ln_2");
		if (ds_moe_experts(m, l) > 1) {
			/* DeepSpeed's MoE: a bias-free gate; PR-MoE's dense MLP and its
			 * mixing coefficient.  The MLP's output bias is left out as
			 * DeepSpeed drops it (a Megatron MLP's skip_bias_add bias). */
			snprintf(n, sizeof(n), "transformer.h.%d.mlp.gate.weight", l);
			ADD(n, ds_moe_experts(m, l), C, DS_INIT_NORMAL, std);
			if (m->moe.use_residual) {
				LINB("mlp.c_fc", Fup, C, DS_INIT_NORMAL, std, DS_TP_NONE, 1, mb);
				snprintf(n, sizeof(n), "transformer.h.%d.mlp.c_proj.weight", l);
				ADD(n, C, F, DS_INIT_SCALED, sstd);
				LIN("mlp.coefficient", 2, C, DS_INIT_NORMAL, std, DS_TP_NONE, 1);
			}
		} else {
			LINB("mlp.c_fc", Fup, C, DS_INIT_NORMAL, std, DS_TP_ROWS, gated ? 2 : 1, mb);
			LINB("mlp.c_proj", C, F, DS_INIT_SCALED, sstd, DS_TP_COLS, 1, mb);
		}
#undef LN
#undef LIN
#undef LINB
		seg_end(&b);
	}
	seg_begin(&b);
	ADD("transformer.ln_f.weight", C, 0, DS_INIT_ONE, 0);
	if (ln)
		ADD("transformer.ln_f.bias", C, 0, DS_INIT_ZERO, 0);
	seg_end(&b);
	if (m->no_weight_tying) {
		seg_begin(&b);
		ADD_TP("lm_head.weight", Vp, C, DS_INIT_NORMAL, std, DS_TP_ROWS, 1);
		seg_end(&b);
	}
	/* the experts of each MoE layer: this expert-parallel rank's share */
	for (int l = 0; l < L; l++) {
		const int E = ds_moe_experts(m, l), El = E / ep;
		r->expert_seg[l] = E > 1 ? b.seg : -1;
		if (E <= 1)
			continue;
		seg_begin(&b);
		for (int e = ep_rank * El; e < (ep_rank + 1) * El; e++) {
			snprintf(n, sizeof(n), "transformer.h.%d.mlp.experts.%d.c_fc.weight", l, e);
			ADD(n, Fup, C, DS_INIT_NORMAL, std);
			snprintf(n, sizeof(n), "transformer.h.%d.mlp.experts.%d.c_fc.bias", l, e);
			if (!m->no_bias_in_mlp)
				ADD(n, Fup, 0, DS_INIT_ZERO, 0);
			snprintf(n, sizeof(n), "transformer.h.%d.mlp.experts.%d.c_proj.weight", l, e);
			ADD(n, C, F, DS_INIT_SCALED, sstd);
		}
		for (int i = b.r->seg[b.seg].first_tensor; i < r->nt; i++)
			r->t[i].expert = 1;
		seg_end(&b);
	}
#undef ADD
#undef ADD_TP
	r->numel = b.off;
	return 0;
fail:
	ds_gpt_registry_release(r);
	return ds_err_set(err, rc, "model: out of memory for the parameter registry");
}

int ds_gpt_registry_build(struct ds_gpt_registry *r, const struct ds_model_config *m, struct ds_err *err)
{
	return build_par(r, m, 1, 0, 1, 0, err);
}

int ds_gpt_registry_build_ep(struct ds_gpt_registry *r, const struct ds_model_config *m, int ep, int ep_rank,
			     struct ds_err *err)
{
	return build_par(r, m, 1, 0, ep, ep_rank, err);
}

int ds_gpt_registry_build_tp(struct ds_gpt_registry *r, const struct ds_model_config *m, int tp, int tp_rank,
			     struct ds_err *err)
{
	return build_par(r, m, tp, tp_rank, 1, 0, err);
}

void ds_gpt_registry_release(struct ds_gpt_registry *r)
{
	free(r->t);
	free(r->seg);
	free(r->expert_seg);
	memset(r, 0, sizeof(*r));
}

int ds_gpt_registry_find(const struct ds_gpt_registry *r, const char *name)
{
	for (int i = 0; i < r->nt; i++)
		if (!strcmp(r->t[i].name, name))
			return i;
	return -1;
}

/* Index of the tensor holding flat element e (binary search on offsets). */
static int tensor_at(const struct ds_gpt_registry *r, int64_t e)
{
	int lo = 0, hi = r->nt - 1;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if (r->t[mid].offset <= e)
			lo = mid;
		else
			hi = mid - 1;
	}
	return lo;
}

int64_t ds_gpt_tensor_global(const struct ds_gpt_tensor *x, int64_t i, int64_t *run)
{
	int64_t g, n;
	if (x->split == DS_TP_ROWS) {
		const int64_t cols = x->ndim > 1 ? x->shape[1] : 1, r = i / cols, c = i % cols;
		const int64_t rb = x->shape[0] / x->blocks, gb = x->gshape[0] / x->blocks, k = r / rb, j = r % rb;
		g = (k * gb + (int64_t)x->tp_rank * rb + j) * cols + c;
		n = (rb - j) * cols - c;
	} else if (x->split == DS_TP_COLS) {
		const int64_t cl = x->shape[1], r = i / cl, c = i % cl;
		g = r * x->gshape[1] + (int64_t)x->tp_rank * cl + c;
		n = cl - c;
	} else {
		g = i;
		n = x->numel - i;
	}
	if (run)
		*run = n;
	return g;
}

/* n values of tensor x from logical element g0 on into o */
static void init_run(const struct ds_gpt_tensor *x, uint64_t seed, float *o, int64_t i0, int64_t n)
{
	if (x->init == DS_INIT_ZERO || x->init == DS_INIT_ONE) {
		float v = x->init == DS_INIT_ONE ? 1.0f : 0.0f;
		for (int64_t i = 0; i < n; i++)
			o[i] = v;
		return;
	}
	struct ds_rng g;
	ds_rng_init(&g, seed, x->name_hash, 0);
	const float s = x->init_std;
	/* whole Philox blocks of 4 at once (two Box-Muller pairs): the same
	 * values as ds_rng_normal(&g, i) element by element, 4x fewer blocks */
	const int64_t k0 = i0 / 4, k1 = (i0 + n + 3) / 4;
#pragma omp parallel for schedule(static) if (n > 65536)
	for (int64_t k = k0; k < k1; k++) {
		uint32_t r[4];
		ds_rng_block(&g, (uint64_t)k, r);
		for (int j = 0; j < 4; j += 2) {
			int64_t e = 4 * k + j - i0;
			if (e + 1 < 0 || e >= n)
				continue;
			double u1 = ds_u32_to_unit(r[j]), u2 = ds_u32_to_unit(r[j + 1]);
			double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
			if (e >= 0)
				o[e] = s * (float)(rad * cos(th));
			if (e + 1 < n)
				o[e + 1] = s * (float)(rad * sin(th));
		}
	}
}

void ds_gpt_registry_init_range(const struct ds_gpt_registry *r, uint64_t seed, float *dst,
				int64_t begin, int64_t end)
{
	if (begin < 0)
		begin = 0;
	if (end > r->numel)
		end = r->numel;
	if (begin >= end)
		return;
	for (int ti = tensor_at(r, begin); ti < r->nt && r->t[ti].offset < end; ti++) {
		const struct ds_gpt_tensor *x = &r->t[ti];
		int64_t a = x->offset > begin ? x->offset : begin;
		int64_t z = x->offset + x->numel < end ? x->offset + x->numel : end;
		/* shard elements [a, z) of x, run by run of consecutive logical ones */
		for (int64_t i = a - x->offset; i < z - x->offset;) {
			int64_t run, g = ds_gpt_tensor_global(x, i, &run);
			if (run > z - x->offset - i)
				run = z - x->offset - i;
			init_run(x, seed, dst + (x->offset + i - begin), g, run);
			i += run;
		}
	}
}
