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
};

static int add(struct builder *b, const char *name, int64_t d0, int64_t d1, int init, float std)
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
	x->shape[0] = d0;
	x->shape[1] = d1 > 0 ? d1 : 0;
	x->numel = d1 > 0 ? d0 * d1 : d0;
	x->offset = b->off;
	x->segment = b->seg;
	x->init = init;
	x->init_std = (init == DS_INIT_NORMAL || init == DS_INIT_SCALED) ? std : 0.0f;
	x->name_hash = ds_hash_str(x->name);
	b->off += x->numel;
	return 0;
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

int ds_gpt_registry_build(struct ds_gpt_registry *r, const struct ds_model_config *m, struct ds_err *err)
{
	return ds_gpt_registry_build_ep(r, m, 1, 0, err);
}

int ds_gpt_registry_build_ep(struct ds_gpt_registry *r, const struct ds_model_config *m, int ep, int ep_rank,
			     struct ds_err *err)
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
	const int64_t Fup = m->activation == DS_ACT_GELU ? F : 2 * F;
	const float std = (float)ds_model_init_std(m, m->init_method);
	const float sstd = (float)ds_model_init_std(m, ds_model_output_init(m));
	const int ln = m->norm == DS_NORM_LAYERNORM;

	r->nseg_dense = (int)L + 2;
	r->nseg = r->nseg_dense + ds_moe_num_layers(m);
	r->ep = ep;
	r->ep_rank = ep_rank;
	r->seg = calloc((size_t)r->nseg, sizeof(*r->seg));
	r->expert_seg = malloc((size_t)L * sizeof(int));
	if (!r->seg || !r->expert_seg) {
		ds_gpt_registry_release(r);
		return ds_err_set(err, DS_ENOMEM, "model: out of memory for the segment table");
	}
	struct builder b = { r, 0, 0, 0 };
	char n[DS_GPT_NAME_MAX];
	int rc = 0;
#define ADD(name, d0, d1, init, s) do { if ((rc = add(&b, (name), (d0), (d1), (init), (s))) < 0) goto fail; } while (0)
	seg_begin(&b);
	ADD("transformer.wte.weight", Vp, C, DS_INIT_NORMAL, std);
	if (m->pos_emb == DS_POS_LEARNED)
		ADD("transformer.wpe.weight", m->max_position_embeddings, C, DS_INIT_NORMAL, std);
	seg_end(&b);
	for (int l = 0; l < L; l++) {
		seg_begin(&b);
#define LN(sub) do { \
		snprintf(n, sizeof(n), "transformer.h.%d.%s.weight", l, sub); ADD(n, C, 0, DS_INIT_ONE, 0); \
		if (ln) { snprintf(n, sizeof(n), "transformer.h.%d.%s.bias", l, sub); ADD(n, C, 0, DS_INIT_ZERO, 0); } \
	} while (0)
#define LINB(sub, out, in, init, s, bias) do { \
		snprintf(n, sizeof(n), "transformer.h.%d.%s.weight", l, sub); ADD(n, out, in, init, s); \
		if (bias) { snprintf(n, sizeof(n), "transformer.h.%d.%s.bias", l, sub); ADD(n, out, 0, DS_INIT_ZERO, 0); } \
	} while (0)
#define LIN(sub, out, in, init, s) LINB(sub, out, in, init, s, 1)
		const int ab = !m->no_bias_in_attn_linear, mb = !m->no_bias_in_mlp;
		LN("ln_1");
		LINB("attn.c_attn", 3 * C, C, DS_INIT_NORMAL, std, ab);
		LINB("attn.c_proj", C, C, DS_INIT_SCALED, sstd, ab);
		LN("ln_2");
		if (ds_moe_experts(m, l) > 1) {
			/* DeepSpeed's MoE: a bias-free gate; PR-MoE's dense MLP and its
			 * mixing coefficient.  The MLP's output bias is left out as
			 * DeepSpeed drops it (a Megatron MLP's skip_bias_add bias). */
			snprintf(n, sizeof(n), "transformer.h.%d.mlp.gate.weight", l);
			ADD(n, ds_moe_experts(m, l), C, DS_INIT_NORMAL, std);
			if (m->moe.use_residual) {
				LINB("mlp.c_fc", Fup, C, DS_INIT_NORMAL, std, mb);
				snprintf(n, sizeof(n), "transformer.h.%d.mlp.c_proj.weight", l);
				ADD(n, C, F, DS_INIT_SCALED, sstd);
				LIN("mlp.coefficient", 2, C, DS_INIT_NORMAL, std);
			}
		} else {
			LINB("mlp.c_fc", Fup, C, DS_INIT_NORMAL, std, mb);
			LINB("mlp.c_proj", C, F, DS_INIT_SCALED, sstd, mb);
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
	if (m->no_weight_tying)
		ADD("lm_head.weight", Vp, C, DS_INIT_NORMAL, std);
	seg_end(&b);
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
	r->numel = b.off;
	return 0;
fail:
	ds_gpt_registry_release(r);
	return ds_err_set(err, rc, "model: out of memory for the parameter registry");
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
		float *o = dst + (a - begin);
		int64_t n = z - a, i0 = a - x->offset;
		if (x->init == DS_INIT_ZERO || x->init == DS_INIT_ONE) {
			float v = x->init == DS_INIT_ONE ? 1.0f : 0.0f;
			for (int64_t i = 0; i < n; i++)
				o[i] = v;
			continue;
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
}
