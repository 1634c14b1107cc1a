/* llmc.c - llm.c model file header and the map from dstk tensor names to
 * llm.c's layer-stacked slots (see llmc.h). */
#include <stdio.h>
#include <string.h>

#include "io/llmc.h"

/* llm.c's 16 slots in file order: dstk name (%d = layer) and per-layer
 * element count as a function of the header. */
enum { S_WTE, S_WPE, S_LN1W, S_LN1B, S_QKVW, S_QKVB, S_APW, S_APB, S_LN2W, S_LN2B, S_FCW, S_FCB,
       S_FPW, S_FPB, S_LNFW, S_LNFB, S_N };

static const char *const slot_name[S_N] = {
	"transformer.wte.weight", "transformer.wpe.weight",
	"transformer.h.%d.ln_1.weight", "transformer.h.%d.ln_1.bias",
	"transformer.h.%d.attn.c_attn.weight", "transformer.h.%d.attn.c_attn.bias",
	"transformer.h.%d.attn.c_proj.weight", "transformer.h.%d.attn.c_proj.bias",
	"transformer.h.%d.ln_2.weight", "transformer.h.%d.ln_2.bias",
	"transformer.h.%d.mlp.c_fc.weight", "transformer.h.%d.mlp.c_fc.bias",
	"transformer.h.%d.mlp.c_proj.weight", "transformer.h.%d.mlp.c_proj.bias",
	"transformer.ln_f.weight", "transformer.ln_f.bias",
};

static int64_t slot_size(const struct ds_llmc_header *h, int s)
{
	int64_t C = h->C;
	switch (s) {
	case S_WTE: return (int64_t)h->Vp * C;
	case S_WPE: return (int64_t)h->maxT * C;
	case S_QKVW: return 3 * C * C;
	case S_QKVB: return 3 * C;
	case S_APW: return C * C;
	case S_FCW: case S_FPW: return 4 * C * C;
	case S_FCB: return 4 * C;
	default: return C;
	}
}

static int per_layer(int s) { return s >= S_LN1W && s <= S_FPB; }

int64_t ds_llmc_num_params(const struct ds_llmc_header *h)
{
	int64_t n = 0;
	for (int s = 0; s < S_N; s++)
		n += slot_size(h, s) * (per_layer(s) ? h->L : 1);
	return n;
}

int ds_llmc_parse_header(const int32_t *w, uint64_t file_size, const char *where,
			 struct ds_llmc_header *h, struct ds_err *err)
{
	static const char *const field[8] = { "magic", "version", "maxT", "V", "L", "NH", "C", "Vp" };
	uint64_t want;
	if (w[0] != DS_LLMC_MAGIC)
		return ds_err_set(err, DS_ECORRUPT, "%s: header word 0 is %d, not llm.c's model magic %d: not an "
				  "llm.c model file", where, (int)w[0], DS_LLMC_MAGIC);
	if (w[1] != DS_LLMC_V_FP32 && w[1] != DS_LLMC_V_BF16)
		return ds_err_set(err, DS_ECORRUPT, "%s: header word 1 (version) is %d; supported: 3 (fp32), 5 "
				  "(bf16)", where, (int)w[1]);
	for (int i = 2; i < 8; i++)
		if (w[i] <= 0 || w[i] > (1 << 24))
			return ds_err_set(err, DS_ECORRUPT, "%s: header word %d (%s) is %d: out of range", where, i,
					  field[i], (int)w[i]);
	h->version = w[1];
	h->maxT = w[2];
	h->V = w[3];
	h->L = w[4];
	h->NH = w[5];
	h->C = w[6];
	h->Vp = w[7];
	if (h->V > h->Vp)
		return ds_err_set(err, DS_ECORRUPT, "%s: header: V %d > Vp %d", where, h->V, h->Vp);
	if (h->C % h->NH)
		return ds_err_set(err, DS_ECORRUPT, "%s: header: C %d is not a multiple of NH %d", where, h->C,
				  h->NH);
	want = DS_LLMC_HEADER_BYTES + (uint64_t)ds_llmc_num_params(h) * (h->version == DS_LLMC_V_BF16 ? 2 : 4);
	if (file_size && file_size != want)
		return ds_err_set(err, DS_ECORRUPT, "%s: %llu bytes, the header (L %d, C %d, Vp %d, maxT %d, "
				  "version %d) needs %llu: truncated?", where, (unsigned long long)file_size, h->L,
				  h->C, h->Vp, h->maxT, h->version, (unsigned long long)want);
	return 0;
}

void ds_llmc_encode_header(const struct ds_llmc_header *h, int32_t *w)
{
	memset(w, 0, 256 * sizeof(int32_t));
	w[0] = DS_LLMC_MAGIC;
	w[1] = h->version;
	w[2] = h->maxT;
	w[3] = h->V;
	w[4] = h->L;
	w[5] = h->NH;
	w[6] = h->C;
	w[7] = h->Vp;
}

void ds_llmc_config(const struct ds_llmc_header *h, struct ds_model_config *m)
{
	memset(m, 0, sizeof(*m));
	m->family = DS_FAMILY_GPT;
	m->num_layers = h->L;
	m->hidden_size = h->C;
	m->num_attention_heads = h->NH;
	m->seq_length = h->maxT;
	m->max_position_embeddings = h->maxT;
	m->vocab_size = h->V;
	/* dstk pads V up to a multiple of d: 128 when that gives Vp (llm.c's
	 * own choice), 1 when unpadded, else Vp itself (V <= Vp rounds to Vp) */
	if ((h->V + 127) / 128 * 128 == h->Vp)
		m->make_vocab_size_divisible_by = 128;
	else if (h->V == h->Vp)
		m->make_vocab_size_divisible_by = 1;
	else
		m->make_vocab_size_divisible_by = h->Vp;
	m->padded_vocab_size = h->Vp;
	m->intermediate_size = 4 * h->C;
	m->pos_emb = DS_POS_LEARNED;
	m->rotary_pct = 1.0;
	m->rotary_emb_base = 10000;
	m->norm = DS_NORM_LAYERNORM;
	m->layernorm_epsilon = 1e-5;
	m->rms_norm_epsilon = 1e-8;
	m->activation = DS_ACT_GELU;
	m->init_method_std = 0.02;
	m->type_vocab_size = 2;
}

int ds_llmc_header_for(const struct ds_model_config *m, int version, struct ds_llmc_header *h,
		       struct ds_err *err)
{
	const char *why = NULL;
	int F = m->intermediate_size ? m->intermediate_size : 4 * m->hidden_size;
	if (m->family != DS_FAMILY_GPT)
		why = "family is not gpt";
	else if (m->moe.enabled)
		why = "llm.c's GPT-2 has no Mixture-of-Experts layers";
	else if (m->no_bias_in_attn_linear || m->no_bias_in_mlp)
		why = "llm.c's GPT-2 has biases in every linear layer";
	else if (m->pos_emb != DS_POS_LEARNED)
		why = "pos_emb is not 'learned' (llm.c has only learned positions)";
	else if (m->norm != DS_NORM_LAYERNORM)
		why = "norm is not 'layernorm'";
	else if (m->activation == DS_ACT_GELU_EXACT)
		why = "activation is 'gelu_exact' (the erf form); llm.c's GPT-2 computes the tanh GELU ('gelu') only";
	else if (m->activation != DS_ACT_GELU)
		why = "activation is not 'gelu'";
	else if (m->no_weight_tying)
		why = "no_weight_tying is set (llm.c ties lm_head to wte)";
	else if (m->gpt_j_residual)
		why = "gpt_j_residual is set (llm.c's residual is sequential)";
	else if (F != 4 * m->hidden_size)
		why = "intermediate_size is not 4 * hidden_size";
	else if (m->vocab_size > 65536)
		why = "vocab_size is over 65536 (llm.c's token files hold uint16 ids)";
	else if (m->layernorm_epsilon != 1e-5)
		why = "layernorm_epsilon is not 1e-5 (llm.c's constant)";
	if (why)
		return ds_err_set(err, DS_EINVAL, "cannot write an llm.c model file: %s", why);
	if (version != DS_LLMC_V_FP32 && version != DS_LLMC_V_BF16)
		return ds_err_set(err, DS_EINVAL, "llm.c model version %d: use 3 (fp32) or 5 (bf16)", version);
	h->version = version;
	h->maxT = m->max_position_embeddings;
	h->V = m->vocab_size;
	h->L = m->num_layers;
	h->NH = m->num_attention_heads;
	h->C = m->hidden_size;
	h->Vp = m->padded_vocab_size > m->vocab_size ? m->padded_vocab_size : m->vocab_size;
	return 0;
}

int ds_llmc_tensor_count(const struct ds_llmc_header *h) { return 12 * h->L + 4; }

/* Slot and layer of the k-th tensor in file order. */
static int kth(const struct ds_llmc_header *h, int k, int *slot, int *layer)
{
	if (k < 0 || k >= ds_llmc_tensor_count(h))
		return -1;
	*layer = 0;
	if (k < 2) {
		*slot = k;
		return 0;
	}
	k -= 2;
	if (k < 12 * h->L) {
		*slot = S_LN1W + k / h->L;
		*layer = k % h->L;
		return 0;
	}
	*slot = S_LNFW + (k - 12 * h->L);
	return 0;
}

int ds_llmc_tensor_name(const struct ds_llmc_header *h, int k, char *buf, size_t n)
{
	int s, l;
	if (kth(h, k, &s, &l))
		return -1;
	snprintf(buf, n, slot_name[s], l);
	return 0;
}

int ds_llmc_locate(const struct ds_llmc_header *h, const char *name, int64_t *elem_off, int64_t *numel)
{
	char buf[96];
	int64_t off = 0;
	for (int s = 0; s < S_N; s++) {
		int nl = per_layer(s) ? h->L : 1;
		for (int l = 0; l < nl; l++) {
			snprintf(buf, sizeof(buf), slot_name[s], l);
			if (!strcmp(buf, name)) {
				*elem_off = off + (int64_t)l * slot_size(h, s);
				*numel = s == S_WTE ? (int64_t)h->V * h->C : slot_size(h, s);
				return 0;
			}
		}
		off += slot_size(h, s) * nl;
	}
	return -1;
}
