/* gpt.c - GPT forward and backward on CPU over one flat buffer (gpt.h).
 *
 * Matrix products go through gemm(): cblas_sgemm (the OpenMP OpenBLAS, one
 * thread pool with our loops; never called inside a parallel region), or in
 * bf16 runs bf16 products (kernels/cpu/gemm_bf16: oneDNN on AMX or
 * AVX512_BF16, or dstk's AVX512_BF16 kernel); everything else is in
 * kernels/cpu.  Shapes follow llm.c: B batch, T time, C channels,
 * NH heads, hs head size, F MLP width, F2 c_fc width (F or 2F), V vocabulary,
 * Vp padded vocabulary, L layers, N = B*T.  Mixed precision rounds
 * activations to 16 bits in place and stores the saved ones in 16 bits
 * (gpt.h); non-goal: CUDA.
 */
#include "model/gpt.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/gemm_bf16.h"
#include "cpu/gpt_kernels.h"
#include "model/moe.h"
#include "util/half.h"
#include "util/mem.h"
#include "util/progress.h"
#include "util/rng.h"
#include "util/timer.h"

/* registry indices of one layer's tensors (-1: absent) */
struct layer_ix {
	int ln1w, ln1b, qkvw, qkvb, projw, projb, ln2w, ln2b, fcw, fcb, fcpw, fcpb;
	int gate, coefw, coefb, ex0;  /* MoE: gate, PR-MoE coefficient, first local expert tensor */
	int moe;                      /* index among the MoE layers, -1 dense */
};

struct ds_gpt {
	struct ds_model_config cfg;
	struct ds_gpt_registry reg;
	int L, C, NH, V, Vp, F, F2, rd;
	int wte, wpe, lnfw, lnfb, head;   /* head = wte when tied */
	struct layer_ix *li;
	int ep, ep_rank, nmoe;            /* expert parallelism; MoE layers */
};

/* activations of one layer */
struct acts {
	float *ln1, *ln1_a, *ln1_b;   /* (N,C), (N), (N): mean/rstd or rms/inv */
	float *qkv;                   /* (N,3C) after rotary */
	float *att;                   /* (B,NH,T,T) probabilities before dropout */
	float *atty;                  /* (N,C) attention output before c_proj */
	float *res2;                  /* (N,C) x + attention branch (sequential) */
	float *ln2, *ln2_a, *ln2_b;   /* (N,C), (N), (N) */
	float *fch;                   /* (N,F2) c_fc output */
	float *fcact;                 /* (N,F) activation output */
};

/* one layer's saved activations in 16 bits (mixed precision without
 * checkpointing): the big buffers of struct acts packed, the norms'
 * statistics in fp32 */
struct hacts {
	uint16_t *ln1, *qkv, *att, *atty, *res2, *ln2, *fch, *fcact;
	float *ln1_a, *ln1_b, *ln2_a, *ln2_b;
};

struct ds_gpt_ws {
	int Bmax, Tmax, ckpt, Vp;
	enum ds_half_kind half;       /* round activations to this format */
	int mm;                       /* enum ds_bf16_mode of bf16 runs' products (gemm), -1: sgemm */
	uint64_t seed;
	void *mem;
	size_t bytes;
	float *resid;                 /* (L+1, N, C): layer inputs, resid[L] final (fp32 runs) */
	uint16_t *resid16;            /* (L+1, N, C): the same in 16 bits (mixed precision) */
	float *xw[2];                 /* forward's fp32 layer input/output with resid16: dA and dln */
	struct acts *la;              /* L entries, or 1 with checkpointing or mixed precision */
	struct hacts *ha;             /* L entries: mixed precision without checkpointing */
	float *lnf, *lnf_a, *lnf_b;   /* (N,C), (N), (N) */
	float *logits;                /* (N,Vp) (fp32 runs) */
	uint16_t *logits16;           /* (N,Vp) the same in 16 bits (mixed precision) */
	float *hchunk;                /* mixed precision: hrows fp32 logit rows, aliasing dqkv.. */
	int64_t hrows;
	float *lse;                   /* (N) */
	float *dresid, *dA, *dM, *dln, *dqkv, *datty, *dfch, *dfcact;
	float *datt;                  /* (B,NH,T,T) attention gradient scratch */
	float *attd;                  /* (B,NH,T,T) probabilities after dropout (attention_dropout > 0) */
	float *rcos, *rsin;           /* (T, rd/2) */
	float *spos;                  /* (T, C) sinusoidal table */
	int32_t *tok, *tgt;           /* (N) copies of the last forward's inputs */
	struct ds_rng *gs;            /* (B) per-sample dropout streams scratch */
	int B, T, have_fwd, ckpt_layer; /* last forward's shape; layer held by la[0] */
	int64_t step, sample_offset;
	int train;
	double recompute_s;
	struct ds_gpt_hooks hooks;
	int has_hooks;
	struct ds_moe_ws *moe;        /* MoE layers' working memory (NULL: dense model) */
	float bscale;                 /* the running backward's loss scale (weights aux) */
	int recomputing;              /* a checkpointed layer's second forward */
	struct ds_err lerr;           /* a layer's failure */
	float *segp[];                /* 2*nseg: parameter then gradient base per segment */
};

/* ---- model ------------------------------------------------------------- */

static int find(const struct ds_gpt *m, const char *fmt, int l)
{
	char n[DS_GPT_NAME_MAX];
	snprintf(n, sizeof(n), fmt, l);
	return ds_gpt_registry_find(&m->reg, n);
}

int ds_gpt_create(struct ds_gpt **out, const struct ds_model_config *cfg, struct ds_err *err)
{
	return ds_gpt_create_ep(out, cfg, 1, 0, err);
}

int ds_gpt_create_ep(struct ds_gpt **out, const struct ds_model_config *cfg, int ep, int ep_rank,
		     struct ds_err *err)
{
	*out = NULL;
	struct ds_gpt *m = calloc(1, sizeof(*m));
	if (!m)
		return ds_err_set(err, DS_ENOMEM, "model: out of memory");
	m->cfg = *cfg;
	struct ds_model_config *c = &m->cfg;
	if (c->family != DS_FAMILY_GPT) {
		free(m);
		return ds_err_set(err, DS_EINVAL, "model: family must be gpt for training (bert is profile-only)");
	}
	if (c->padded_vocab_size <= 0) {
		int d = c->make_vocab_size_divisible_by > 0 ? c->make_vocab_size_divisible_by : 128;
		c->padded_vocab_size = (c->vocab_size + d - 1) / d * d;
	}
	if (c->intermediate_size <= 0)
		c->intermediate_size = 4 * c->hidden_size;
	if (c->rotary_emb_base <= 0)
		c->rotary_emb_base = 10000;
	m->ep = ep;
	m->ep_rank = ep_rank;
	int rc = ds_gpt_registry_build_ep(&m->reg, c, ep, ep_rank, err);
	if (rc < 0) {
		free(m);
		return rc;
	}
	m->L = c->num_layers;
	m->C = c->hidden_size;
	m->NH = c->num_attention_heads;
	m->V = c->vocab_size;
	m->Vp = c->padded_vocab_size;
	m->F = c->intermediate_size;
	m->F2 = c->activation == DS_ACT_GELU ? m->F : 2 * m->F;
	m->rd = 0;
	if (c->pos_emb == DS_POS_ROTARY) {
		if (!(c->rotary_pct > 0 && c->rotary_pct <= 1)) {
			rc = ds_err_set(err, DS_EINVAL, "model: rotary_pct must be in (0, 1] (got %g)", c->rotary_pct);
			ds_gpt_destroy(m);
			return rc;
		}
		m->rd = (int)((m->C / m->NH) * c->rotary_pct) / 2 * 2;
	}
	if (c->pos_emb == DS_POS_SINUSOIDAL && m->C % 2) {
		rc = ds_err_set(err, DS_EINVAL, "model: pos_emb sinusoidal needs an even hidden_size (got %d)", m->C);
		ds_gpt_destroy(m);
		return rc;
	}
	if (c->hidden_dropout < 0 || c->hidden_dropout >= 1 || c->attention_dropout < 0 || c->attention_dropout >= 1) {
		rc = ds_err_set(err, DS_EINVAL, "model: hidden_dropout and attention_dropout must be in [0, 1)");
		ds_gpt_destroy(m);
		return rc;
	}
	m->li = calloc((size_t)m->L, sizeof(*m->li));
	if (!m->li) {
		rc = ds_err_set(err, DS_ENOMEM, "model: out of memory");
		ds_gpt_destroy(m);
		return rc;
	}
	m->wte = find(m, "transformer.wte.weight", 0);
	m->wpe = find(m, "transformer.wpe.weight", 0);
	m->lnfw = find(m, "transformer.ln_f.weight", 0);
	m->lnfb = find(m, "transformer.ln_f.bias", 0);
	m->head = c->no_weight_tying ? find(m, "lm_head.weight", 0) : m->wte;
	for (int l = 0; l < m->L; l++) {
		struct layer_ix *x = &m->li[l];
		x->ln1w = find(m, "transformer.h.%d.ln_1.weight", l);
		x->ln1b = find(m, "transformer.h.%d.ln_1.bias", l);
		x->qkvw = find(m, "transformer.h.%d.attn.c_attn.weight", l);
		x->qkvb = find(m, "transformer.h.%d.attn.c_attn.bias", l);
		x->projw = find(m, "transformer.h.%d.attn.c_proj.weight", l);
		x->projb = find(m, "transformer.h.%d.attn.c_proj.bias", l);
		x->ln2w = find(m, "transformer.h.%d.ln_2.weight", l);
		x->ln2b = find(m, "transformer.h.%d.ln_2.bias", l);
		x->fcw = find(m, "transformer.h.%d.mlp.c_fc.weight", l);
		x->fcb = find(m, "transformer.h.%d.mlp.c_fc.bias", l);
		x->fcpw = find(m, "transformer.h.%d.mlp.c_proj.weight", l);
		x->fcpb = find(m, "transformer.h.%d.mlp.c_proj.bias", l);
		x->gate = find(m, "transformer.h.%d.mlp.gate.weight", l);
		x->coefw = find(m, "transformer.h.%d.mlp.coefficient.weight", l);
		x->coefb = find(m, "transformer.h.%d.mlp.coefficient.bias", l);
		x->moe = ds_moe_experts(c, l) > 1 ? m->nmoe++ : -1;
		x->ex0 = x->moe >= 0 ? m->reg.seg[m->reg.expert_seg[l]].first_tensor : -1;
	}
	*out = m;
	return 0;
}

void ds_gpt_destroy(struct ds_gpt *m)
{
	if (!m)
		return;
	ds_gpt_registry_release(&m->reg);
	free(m->li);
	free(m);
}

const struct ds_model_config *ds_gpt_config(const struct ds_gpt *m) { return &m->cfg; }
const struct ds_gpt_registry *ds_gpt_registry(const struct ds_gpt *m) { return &m->reg; }
int64_t ds_gpt_num_params(const struct ds_gpt *m) { return m->reg.numel; }
int ds_gpt_num_tensors(const struct ds_gpt *m) { return m->reg.nt; }
const struct ds_gpt_tensor *ds_gpt_tensor(const struct ds_gpt *m, int i) { return &m->reg.t[i]; }
int ds_gpt_find(const struct ds_gpt *m, const char *name) { return ds_gpt_registry_find(&m->reg, name); }
int ds_gpt_num_segments(const struct ds_gpt *m) { return m->reg.nseg; }
const struct ds_gpt_segment *ds_gpt_segment(const struct ds_gpt *m, int s) { return &m->reg.seg[s]; }

void ds_gpt_init(const struct ds_gpt *m, uint64_t seed, float *dst, int64_t begin, int64_t end)
{
	ds_gpt_registry_init_range(&m->reg, seed, dst, begin, end);
}

/* ---- workspace --------------------------------------------------------- */

struct dims {
	int64_t B, T, N, C, NH, F, F2, Vp, L, rd;
	int ckpt, sinus, adrop, half;
};

static void dims_of(struct dims *d, const struct ds_model_config *c, int B, int T, int ckpt, int half)
{
	int Vp = c->padded_vocab_size;
	if (Vp <= 0) {
		int k = c->make_vocab_size_divisible_by > 0 ? c->make_vocab_size_divisible_by : 128;
		Vp = (c->vocab_size + k - 1) / k * k;
	}
	int F = c->intermediate_size > 0 ? c->intermediate_size : 4 * c->hidden_size;
	d->B = B;
	d->T = T;
	d->N = (int64_t)B * T;
	d->C = c->hidden_size;
	d->NH = c->num_attention_heads;
	d->F = F;
	d->F2 = c->activation == DS_ACT_GELU ? F : 2 * F;
	d->Vp = Vp;
	d->L = c->num_layers;
	d->rd = c->pos_emb == DS_POS_ROTARY && d->NH > 0
		? (int64_t)((c->hidden_size / c->num_attention_heads) * c->rotary_pct) / 2 * 2 : 0;
	d->ckpt = ckpt;
	d->sinus = c->pos_emb == DS_POS_SINUSOIDAL;
	d->adrop = c->attention_dropout > 0;
	d->half = half != DS_HALF_NONE;
}

/* the fewest logit rows mixed precision's head works on at once (16-bit
 * logits are unpacked hrows at a time into backward scratch) */
#define HEAD_MIN_ROWS 8

/* Carve the workspace out of base (NULL: only measure); returns bytes and,
 * in *saved, those of what forward keeps for backward (the layer inputs,
 * the layers' saved activations, the logits): the rest is working memory. */
static size_t layout(const struct dims *d, struct ds_gpt_ws *ws, char *base, size_t *saved)
{
	size_t off = 0, s0;
#define TAKE(ptr, n) do { size_t b_ = ((size_t)(n) * 4 + 63) & ~(size_t)63; \
	if (base) { (ptr) = (void *)(base + off); } off += b_; } while (0)
#define TAKE16(ptr, n) do { size_t b_ = ((size_t)(n) * 2 + 63) & ~(size_t)63; \
	if (base) { (ptr) = (void *)(base + off); } off += b_; } while (0)
	float *dummy;
	uint16_t *dummy16;
	const int64_t N = d->N, C = d->C;
	int nl = d->ckpt || d->half ? 1 : (int)d->L;
	s0 = off;
	if (d->half) {   /* 16-bit layer inputs (fp32 copies in scratch: resid_in) */
		TAKE16(*(ws ? &ws->resid16 : &dummy16), (d->L + 1) * N * C);
	} else {
		TAKE(*(ws ? &ws->resid : &dummy), (d->L + 1) * N * C);
	}
	for (int l = 0; d->half && !d->ckpt && l < d->L; l++) {
		struct hacts tmp, *h = ws ? &ws->ha[l] : &tmp;
		TAKE16(h->ln1, N * C);
		TAKE(h->ln1_a, N);
		TAKE(h->ln1_b, N);
		TAKE16(h->qkv, 3 * N * C);
		TAKE16(h->att, d->B * d->NH * d->T * d->T);
		TAKE16(h->atty, N * C);
		TAKE16(h->res2, N * C);
		TAKE16(h->ln2, N * C);
		TAKE(h->ln2_a, N);
		TAKE(h->ln2_b, N);
		TAKE16(h->fch, N * d->F2);
		TAKE16(h->fcact, N * d->F);
	}
	if (d->ckpt || d->half)   /* la[0] is a working layer */
		*saved = off - s0;
	for (int l = 0; l < nl; l++) {
		struct acts tmp, *a = ws ? &ws->la[l] : &tmp;
		TAKE(a->ln1, N * C);
		TAKE(a->ln1_a, N);
		TAKE(a->ln1_b, N);
		TAKE(a->qkv, 3 * N * C);
		TAKE(a->att, d->B * d->NH * d->T * d->T);
		TAKE(a->atty, N * C);
		TAKE(a->res2, N * C);
		TAKE(a->ln2, N * C);
		TAKE(a->ln2_a, N);
		TAKE(a->ln2_b, N);
		TAKE(a->fch, N * d->F2);
		TAKE(a->fcact, N * d->F);
	}
	if (!d->ckpt && !d->half)
		*saved = off - s0;
	struct ds_gpt_ws tw, *w = ws ? ws : &tw;
	TAKE(w->lnf, N * C);
	TAKE(w->lnf_a, N);
	TAKE(w->lnf_b, N);
	s0 = off;
	if (d->half) {   /* 16-bit logits, handled hrows at a time in fp32 */
		TAKE16(w->logits16, N * d->Vp);
	} else {
		TAKE(w->logits, N * d->Vp);
	}
	*saved += off - s0;
	TAKE(w->lse, N);
	TAKE(w->dresid, N * C);
	TAKE(w->dA, N * C);
	TAKE(w->dM, N * C);
	TAKE(w->dln, N * C);
	const size_t r0 = off;   /* dqkv..dfcact are free while the head runs */
	TAKE(w->dqkv, 3 * N * C);
	TAKE(w->datty, N * C);
	TAKE(w->dfch, N * d->F2);
	TAKE(w->dfcact, N * d->F);
	if (d->half) {   /* the head's fp32 rows: that span, grown to HEAD_MIN_ROWS rows if short */
		int64_t fl = (int64_t)(off - r0) / 4, want = (N < HEAD_MIN_ROWS ? N : HEAD_MIN_ROWS) * d->Vp;
		if (fl < want)
			TAKE(dummy, want - fl);
		w->hrows = (int64_t)(off - r0) / 4 / d->Vp;
		if (w->hrows > N)
			w->hrows = N;
		w->hchunk = w->dqkv;
	}
	TAKE(w->datt, d->B * d->NH * d->T * d->T);
	TAKE(w->attd, d->adrop ? d->B * d->NH * d->T * d->T : 0);
	TAKE(w->rcos, d->T * (d->rd / 2));
	TAKE(w->rsin, d->T * (d->rd / 2));
	TAKE(w->spos, d->sinus ? d->T * C : 0);
	TAKE(w->tok, N);
	TAKE(w->tgt, N);
#undef TAKE
#undef TAKE16
	return off;
}

/* the MoE layers' activations (all of them saved; one layer's with
 * checkpointing, recomputed) */
static size_t moe_bytes(const struct ds_model_config *cfg, int B, int T, int checkpointing)
{
	int n = ds_moe_num_layers(cfg);
	if (!cfg->moe.enabled || !n)
		return 0;
	return ds_moe_ws_bytes_for(cfg, cfg->moe.ep_size, (int64_t)B * T, checkpointing ? 1 : n);
}

size_t ds_gpt_activation_bytes(const struct ds_model_config *cfg, int B, int T, int checkpointing, int half)
{
	struct dims d;
	dims_of(&d, cfg, B, T, checkpointing, half);
	size_t saved;
	return layout(&d, NULL, NULL, &saved) + moe_bytes(cfg, B, T, checkpointing);
}

size_t ds_gpt_activation_saved_bytes(const struct ds_model_config *cfg, int B, int T, int checkpointing, int half)
{
	struct dims d;
	dims_of(&d, cfg, B, T, checkpointing, half);
	size_t saved;
	layout(&d, NULL, NULL, &saved);
	return saved + moe_bytes(cfg, B, T, checkpointing);
}

int ds_gpt_ws_create(struct ds_gpt_ws **out, const struct ds_gpt *m, const struct ds_gpt_ws_opts *o,
		     struct ds_err *err)
{
	*out = NULL;
	if (o->B < 1 || o->T < 1)
		return ds_err_set(err, DS_EINVAL, "model workspace: B and T must be >= 1 (got %d, %d)", o->B, o->T);
	if (m->cfg.pos_emb == DS_POS_LEARNED && o->T > m->cfg.max_position_embeddings)
		return ds_err_set(err, DS_EINVAL, "model: sequence length %d exceeds max_position_embeddings %d",
				  o->T, m->cfg.max_position_embeddings);
	int nseg = m->reg.nseg;
	struct ds_gpt_ws *ws = calloc(1, sizeof(*ws) + 2 * (size_t)nseg * sizeof(float *));
	if (!ws)
		return ds_err_set(err, DS_ENOMEM, "model workspace: out of memory");
	ws->Bmax = o->B;
	ws->Tmax = o->T;
	ws->Vp = m->Vp;
	ws->ckpt = o->checkpointing != 0;
	ws->seed = o->dropout_seed;
	ws->half = (enum ds_half_kind)o->half;
	ws->mm = -1;
	if (ws->half == DS_HALF_BF16) {
		char why[200];
		if (ds_gemm_bf16_mode_check(o->bf16_matmul, why, sizeof why)) {
			free(ws);
			return ds_err_set(err, DS_ENOTSUP, "model workspace: %s", why);
		}
		ws->mm = o->bf16_matmul == DS_BF16_MM_FP32 ? -1 : o->bf16_matmul;
	}
	ws->ckpt_layer = -1;
	const int hp = ws->half != DS_HALF_NONE;
	ws->la = calloc(ws->ckpt || hp ? 1 : (size_t)m->L, sizeof(*ws->la));
	if (hp && !ws->ckpt)
		ws->ha = calloc((size_t)m->L > 0 ? (size_t)m->L : 1, sizeof(*ws->ha));
	ws->gs = calloc((size_t)o->B, sizeof(*ws->gs));
	struct dims d;
	dims_of(&d, &m->cfg, o->B, o->T, ws->ckpt, ws->half);
	size_t saved;
	ws->bytes = layout(&d, NULL, NULL, &saved);
	ws->mem = ds_alloc(ws->bytes);
	if (!ws->la || !ws->gs || !ws->mem || (hp && !ws->ckpt && !ws->ha)) {
		int rc = ds_err_set(err, DS_ENOMEM, "model workspace: out of memory for %zu bytes of activations", ws->bytes);
		ds_gpt_ws_destroy(ws);
		return rc;
	}
	layout(&d, ws, ws->mem, &saved);
	if (m->nmoe) {
		int rc = ds_moe_ws_create(&ws->moe, &m->cfg, m->ep, m->ep_rank, (int64_t)o->B * o->T,
					  ws->ckpt ? 1 : m->nmoe, ws->half, err);
		if (rc < 0) {
			ds_gpt_ws_destroy(ws);
			return rc;
		}
		ws->bytes += ds_moe_ws_bytes(ws->moe);
	}
	ws->xw[0] = ws->dA;
	ws->xw[1] = ws->dln;
	/* rotary and sinusoidal tables, angles in double */
	const int half = m->rd / 2;
	for (int t = 0; t < o->T; t++)
		for (int i = 0; i < half; i++) {
			double f = pow(m->cfg.rotary_emb_base, -2.0 * i / m->rd);
			ws->rcos[t * half + i] = (float)cos(t * f);
			ws->rsin[t * half + i] = (float)sin(t * f);
		}
	if (d.sinus)
		for (int t = 0; t < o->T; t++)
			for (int i = 0; i < m->C / 2; i++) {
				double f = pow(10000.0, -2.0 * i / m->C);
				ws->spos[(int64_t)t * m->C + i] = (float)sin(t * f);
				ws->spos[(int64_t)t * m->C + m->C / 2 + i] = (float)cos(t * f);
			}
	*out = ws;
	return 0;
}

void ds_gpt_ws_destroy(struct ds_gpt_ws *ws)
{
	if (!ws)
		return;
	ds_free(ws->mem);
	ds_moe_ws_destroy(ws->moe);
	free(ws->la);
	free(ws->ha);
	free(ws->gs);
	free(ws);
}

size_t ds_gpt_ws_bytes(const struct ds_gpt_ws *ws) { return ws->bytes; }
const float *ds_gpt_ws_logits(const struct ds_gpt_ws *ws) { return ws->logits; }

void ds_gpt_ws_logits_copy(const struct ds_gpt_ws *ws, float *dst)
{
	const size_t cnt = (size_t)ws->B * (size_t)ws->T * (size_t)ws->Vp;
	if (ws->logits)
		memcpy(dst, ws->logits, cnt * sizeof(float));
	else
		ds_half_unpack_n(ws->half, dst, ws->logits16, cnt);
}

int ds_gpt_ws_bf16_matmul(const struct ds_gpt_ws *ws, char *buf, size_t n)
{
	if (ws->half != DS_HALF_BF16) {
		snprintf(buf, n, "fp32 sgemm (%s runs keep fp32 products)", ds_half_name(ws->half));
		return 0;
	}
	const int mode = ws->mm < 0 ? DS_BF16_MM_FP32 : ws->mm;
	char plan[448];
	int rc = ds_gemm_bf16_plan(mode, plan, sizeof plan);
	snprintf(buf, n, "%s (dstk.bf16_matmul \"%s\")", plan, ds_bf16_mode_name(mode));
	return rc;
}
double ds_gpt_ws_recompute_seconds(const struct ds_gpt_ws *ws) { return ws->recompute_s; }

void ds_gpt_ws_set_hooks(struct ds_gpt_ws *ws, const struct ds_gpt_hooks *h)
{
	ws->has_hooks = h != NULL;
	if (h)
		ws->hooks = *h;
}

/* mixed precision: round n activations to the workspace's 16-bit format */
static void rnd(const struct ds_gpt_ws *ws, float *x, int64_t n)
{
	if (ws->half != DS_HALF_NONE)
		ds_half_round_n(ws->half, x, (size_t)n);
}

/* per-segment parameter and gradient base pointers live after the struct */
static float **seg_params(struct ds_gpt_ws *ws) { return ws->segp; }
static float **seg_grads(const struct ds_gpt *m, struct ds_gpt_ws *ws) { return ws->segp + m->reg.nseg; }

/* pointer to tensor i inside its segment's buffer */
static float *tp(const struct ds_gpt *m, float **base, int i)
{
	if (i < 0)
		return NULL;
	const struct ds_gpt_tensor *t = &m->reg.t[i];
	return base[t->segment] + (t->offset - m->reg.seg[t->segment].offset);
}

static int hook_pre(const struct ds_gpt *m, struct ds_gpt_ws *ws, int seg, int phase,
		    const float *params, float *grads, struct ds_err *err)
{
	float **P = seg_params(ws), **G = seg_grads(m, ws);
	int64_t off = m->reg.seg[seg].offset;
	P[seg] = params ? (float *)params + off : NULL;
	G[seg] = grads ? grads + off : NULL;
	if (ws->has_hooks && ws->hooks.pre) {
		int rc = ws->hooks.pre(ws->hooks.ctx, seg, phase, &P[seg], &G[seg]);
		if (rc < 0)
			return ds_err_set(err, rc, "model: segment %d hook failed before %s", seg,
					  phase ? "backward" : "forward");
	}
	if (!P[seg] || (phase == DS_GPT_BACKWARD && !G[seg]))
		return ds_err_set(err, DS_EINVAL, "model: segment %d has no %s buffer (pass it or set it in the pre hook)",
				  seg, P[seg] ? "gradient" : "parameter");
	return 0;
}

static int hook_post(struct ds_gpt_ws *ws, int seg, int phase, struct ds_err *err)
{
	if (ws->has_hooks && ws->hooks.post) {
		int rc = ws->hooks.post(ws->hooks.ctx, seg, phase);
		if (rc < 0)
			return ds_err_set(err, rc, "model: segment %d hook failed after %s", seg,
					  phase ? "backward" : "forward");
	}
	return 0;
}

/* ---- 16-bit activation storage (mixed precision) ----------------------- */

/* backward's layer input l (NC values): fp32 runs point into resid; mixed
 * precision unpacks resid16[l] into lnf, free once the head's gradient is
 * taken (forward keeps its fp32 layer inputs and outputs in dA and dln,
 * which only backward uses) */
static float *resid_in(struct ds_gpt_ws *ws, int l, int64_t NC)
{
	if (ws->half == DS_HALF_NONE)
		return ws->resid + (int64_t)l * NC;
	ds_half_unpack_n(ws->half, ws->lnf, ws->resid16 + (int64_t)l * NC, (size_t)NC);
	return ws->lnf;
}

/* the activations layer l works in: its own (fp32 runs), the one working
 * set la[0] (checkpointing), or la[0] with layer l's fp32 statistics */
static struct acts layer_acts(const struct ds_gpt_ws *ws, int l)
{
	if (!ws->ha)
		return ws->la[ws->ckpt ? 0 : l];
	struct acts a = ws->la[0];
	a.ln1_a = ws->ha[l].ln1_a;
	a.ln1_b = ws->ha[l].ln1_b;
	a.ln2_a = ws->ha[l].ln2_a;
	a.ln2_b = ws->ha[l].ln2_b;
	return a;
}

/* pack (dir 0) the working activations into layer l's 16-bit copy, or
 * unpack them back (dir 1); every buffer is already 16-bit representable */
static void layer_store(const struct ds_gpt *m, struct ds_gpt_ws *ws, int l, const struct acts *a,
			int B, int T, int dir)
{
	const struct hacts *h = &ws->ha[l];
	const int64_t N = (int64_t)B * T, C = m->C;
	struct { uint16_t *p; float *f; int64_t n; } v[] = {
		{ h->ln1, a->ln1, N * C }, { h->qkv, a->qkv, 3 * N * C },
		{ h->att, a->att, (int64_t)B * m->NH * T * T }, { h->atty, a->atty, N * C },
		{ h->res2, a->res2, m->cfg.gpt_j_residual ? 0 : N * C }, { h->ln2, a->ln2, N * C },
		{ h->fch, a->fch, N * m->F2 }, { h->fcact, a->fcact, N * m->F },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		if (!v[i].n)
			continue;
		if (dir)
			ds_half_unpack_n(ws->half, v[i].f, v[i].p, (size_t)v[i].n);
		else
			ds_half_pack_n(ws->half, v[i].p, v[i].f, (size_t)v[i].n);
	}
}

/* per-sample dropout streams for (layer id, site) */
static const struct ds_rng *streams(struct ds_gpt_ws *ws, int B, int layer, int site)
{
	for (int b = 0; b < B; b++) {
		uint64_t s = (uint64_t)(ws->sample_offset + b);
		ds_rng_init(&ws->gs[b], ws->seed, (uint64_t)ws->step,
			    (s << 20) | ((uint64_t)(layer & 0xFFFF) << 4) | (uint64_t)site);
	}
	return ws->gs;
}

/* dropout of a (B, T, C) tensor: each sample its own stream */
static void dropout_btc(struct ds_gpt_ws *ws, float *x, int B, int T, int C, int layer, int site, float p)
{
	if (!ws->train || p <= 0)
		return;
	const struct ds_rng *g = streams(ws, B, layer, site);
	for (int b = 0; b < B; b++)
		ds_kernel_dropout(x + (int64_t)b * T * C, (int64_t)T * C, &g[b], p);
}

/* ---- matmuls ------------------------------------------------------------ */

/* Every matrix product: cblas_sgemm's row-major arguments, or with bt a
 * batch of them (attention's per-(b, head) products, gemm_bf16.h).
 * A bf16 workspace (ws->mm >= 0) runs the implementation
 * ds_gemm_bf16_pick chooses for the shape: it rounds A and B to bf16 and
 * accumulates in fp32, as a GPU's bf16 GEMM does; the inputs are bf16
 * values already (rounded activations and gradients, the bf16 parameter
 * copy) but for dropout-scaled attention probabilities, so mostly only the
 * accumulation order changes.  The choice depends on the shape, the CPU
 * and the build only, so a run repeats its results.  Anything else is
 * cblas_sgemm. */
static void gemm_bt(const struct ds_gpt_ws *ws, const struct ds_gemm_bf16_batch *bt, enum CBLAS_TRANSPOSE ta,
		    enum CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
		    int ldb, float beta, float *C, int ldc)
{
	const int t1 = ta == CblasTrans, t2 = tb == CblasTrans;
	const struct ds_gemm_bf16_batch one = { 1, 1, { 0, 0 }, { 0, 0 }, { 0, 0 }, DS_GEMM_BF16_DENSE };
	if (!bt)
		bt = &one;
	enum ds_bf16_impl im = ws->mm < 0 ? DS_BF16_SGEMM : ds_gemm_bf16_pick(ws->mm, t1, t2, M, N, K, bt->count);
	if (im != DS_BF16_SGEMM && (bt->count == 1 ? ds_gemm_bf16(im, t1, t2, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
				    : ds_gemm_bf16_batch(im, bt, t1, t2, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) == 0)
		return;
	for (int e = 0; e < bt->count; e++) {
		const long q = e / bt->inner, r = e % bt->inner;
		cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A + q * bt->sa[0] + r * bt->sa[1], lda,
			    B + q * bt->sb[0] + r * bt->sb[1], ldb, beta, C + q * bt->sc[0] + r * bt->sc[1], ldc);
	}
}

static void gemm(const struct ds_gpt_ws *ws, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N,
		 int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	gemm_bt(ws, NULL, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* gemm() for the head's row chunks against its one weight matrix B: same
 * says B is unchanged since the previous chunk, so its bf16 copy is reused
 * (converting GPT-2's (V, C) embedding per chunk would cost more than the
 * chunk's product).  Every chunk is picked for the first chunk's shape, so
 * the chunks of one product share one implementation and its copy. */
static void gemm_kb(const struct ds_gpt_ws *ws, int same, int M0, enum CBLAS_TRANSPOSE ta,
		    enum CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
		    int ldb, float beta, float *C, int ldc)
{
	const int t1 = ta == CblasTrans, t2 = tb == CblasTrans;
	enum ds_bf16_impl im = ws->mm < 0 ? DS_BF16_SGEMM : ds_gemm_bf16_pick(ws->mm, t1, t2, M0, N, K, 1);
	if (im != DS_BF16_SGEMM &&
	    ds_gemm_bf16_keep_b(im, same, t1, t2, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) == 0)
		return;
	cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* out (N,OC) = inp (N,IC) @ w (OC,IC)^T + b (OC) */
static void matmul_forward(const struct ds_gpt_ws *ws, float *out, const float *inp, const float *w,
			   const float *b, int64_t N, int IC, int OC)
{
	ds_kernel_bias_fill(out, b, N, OC);
	gemm(ws, CblasNoTrans, CblasTrans, (int)N, OC, IC, 1.0f, inp, IC, w, IC, 1.0f, out, OC);
}

/* dinp (N,IC) writes dout @ w; dw (OC,IC) += dout^T @ inp; db (OC) += sum dout */
static void matmul_backward(const struct ds_gpt_ws *ws, float *dinp, float *dw, float *db, const float *dout,
			    const float *inp, const float *w, int64_t N, int IC, int OC)
{
	gemm(ws, CblasNoTrans, CblasNoTrans, (int)N, IC, OC, 1.0f, dout, OC, w, IC, 0.0f, dinp, IC);
	gemm(ws, CblasTrans, CblasNoTrans, OC, IC, (int)N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
	if (db)
		ds_kernel_bias_backward(db, dout, N, OC);
}

static void norm_forward(const struct ds_gpt *m, float *out, float *a, float *b, const float *inp,
			 const float *w, const float *bias, int64_t N)
{
	if (m->cfg.norm == DS_NORM_LAYERNORM)
		ds_kernel_layernorm_forward(out, a, b, inp, w, bias, N, m->C, (float)m->cfg.layernorm_epsilon);
	else
		ds_kernel_rmsnorm_forward(out, a, b, inp, w, N, m->C, (float)m->cfg.rms_norm_epsilon);
}

static void norm_backward(const struct ds_gpt *m, float *dinp, float *dw, float *db, const float *dout,
			  const float *inp, const float *w, const float *a, const float *b, int64_t N)
{
	if (m->cfg.norm == DS_NORM_LAYERNORM)
		ds_kernel_layernorm_backward(dinp, dw, db, dout, inp, w, a, b, N, m->C);
	else
		ds_kernel_rmsnorm_backward(dinp, dw, dout, inp, w, a, b, N, m->C);
}

/* ---- causal self-attention --------------------------------------------- */

/* atty (N,C) = softmax(q k^T / sqrt(hs)) v per (b, head), q/k/v in qkv
 * (N,3C); att (B,NH,T,T) keeps the probabilities before dropout.  The
 * products are batches over (b, head) on strided views of qkv (lda 3C):
 * one bf16 batch call, or sgemm calls issued serially so BLAS owns the
 * threads; the softmax is one OpenMP pass over all rows. */
static void attention_forward(const struct ds_gpt *m, struct ds_gpt_ws *ws, struct acts *a, int l,
			      int B, int T)
{
	const int C = m->C, NH = m->NH, hs = C / NH, C3 = 3 * C;
	const long TT = (long)T * T, TC3 = (long)T * C3;
	const float scale = 1.0f / sqrtf((float)hs);
	const float pa = (float)m->cfg.attention_dropout;
	const int drop = ws->train && pa > 0;
	/* att[b,h] (T,T) = scale * q (T,hs) @ k (T,hs)^T */
	const struct ds_gemm_bf16_batch s = { B * NH, NH, { TC3, hs }, { TC3, hs }, { NH * TT, TT }, DS_GEMM_BF16_C_LOWER };
	gemm_bt(ws, &s, CblasNoTrans, CblasTrans, T, T, hs, scale, a->qkv, C3, a->qkv + C, C3, 0.0f, a->att, T);
	ds_kernel_causal_softmax_forward(a->att, B, NH, T);
	rnd(ws, a->att, (int64_t)B * NH * T * T);   /* the probabilities are stored in 16 bits */
	if (drop)
		ds_kernel_attention_dropout(ws->attd, a->att, B, NH, T, pa, streams(ws, B, l + 1, 1));
	const float *P = drop ? ws->attd : a->att;
	/* atty[b,:,h] (T,hs) = P[b,h] (T,T) @ v (T,hs) */
	const struct ds_gemm_bf16_batch y = { B * NH, NH, { NH * TT, TT }, { TC3, hs }, { (long)T * C, hs },
					     DS_GEMM_BF16_A_LOWER };
	gemm_bt(ws, &y, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, P, T, a->qkv + 2 * C, C3, 0.0f, a->atty, C);
}

/* dqkv (N,3C) writes the gradient of q, k, v from datty (N,C). */
static void attention_backward(const struct ds_gpt *m, struct ds_gpt_ws *ws, const struct acts *a,
			       int l, int B, int T)
{
	const int C = m->C, NH = m->NH, hs = C / NH, C3 = 3 * C;
	const long TT = (long)T * T, TC3 = (long)T * C3, TC = (long)T * C;
	const float scale = 1.0f / sqrtf((float)hs);
	const float pa = (float)m->cfg.attention_dropout;
	const int drop = ws->train && pa > 0;
	if (drop)   /* the dropped probabilities again, from the same keys */
		ds_kernel_attention_dropout(ws->attd, a->att, B, NH, T, pa, streams(ws, B, l + 1, 1));
	const float *P = a->att;
	/* per (b, h): datt (T,T) = dy (T,hs) @ v (T,hs)^T;  dv (T,hs) = P'^T (T,T) @ dy (T,hs) */
	const struct ds_gemm_bf16_batch dp = { B * NH, NH, { TC, hs }, { TC3, hs }, { NH * TT, TT }, DS_GEMM_BF16_C_LOWER };
	gemm_bt(ws, &dp, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, ws->datty, C, a->qkv + 2 * C, C3, 0.0f, ws->datt,
		T);
	const struct ds_gemm_bf16_batch dv = { B * NH, NH, { NH * TT, TT }, { TC, hs }, { TC3, hs }, DS_GEMM_BF16_A_UPPER };
	gemm_bt(ws, &dv, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, drop ? ws->attd : P, T, ws->datty, C, 0.0f,
		ws->dqkv + 2 * C, C3);
	rnd(ws, ws->datt, (int64_t)B * NH * T * T);   /* the probabilities' gradient */
	ds_kernel_causal_softmax_backward(ws->datt, P, B, NH, T, scale, drop ? pa : 0.0f,
					  drop ? streams(ws, B, l + 1, 1) : NULL);
	rnd(ws, ws->datt, (int64_t)B * NH * T * T);   /* the scores' gradient */
	/* per (b, h): dq (T,hs) = dS (T,T) @ k (T,hs);  dk (T,hs) = dS^T (T,T) @ q (T,hs) */
	const struct ds_gemm_bf16_batch dq = { B * NH, NH, { NH * TT, TT }, { TC3, hs }, { TC3, hs }, DS_GEMM_BF16_A_LOWER };
	gemm_bt(ws, &dq, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, ws->datt, T, a->qkv + C, C3, 0.0f, ws->dqkv, C3);
	const struct ds_gemm_bf16_batch dk = { B * NH, NH, { NH * TT, TT }, { TC3, hs }, { TC3, hs }, DS_GEMM_BF16_A_UPPER };
	gemm_bt(ws, &dk, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, ws->datt, T, a->qkv, C3, 0.0f, ws->dqkv + C, C3);
}

/* ---- Mixture of Experts (moe.h) ----------------------------------------- */

static int moe_a2a(void *ctx, const float *send, float *recv, int64_t count)
{
	struct ds_gpt_ws *ws = ctx;
	if (!ws->has_hooks || !ws->hooks.ep_alltoall)
		return DS_EINVAL;
	return ws->hooks.ep_alltoall(ws->hooks.ctx, send, recv, count);
}

/* layer l's MoE parameters (or gradients) in the segments' buffers */
static struct ds_moe_params moe_params(const struct ds_gpt *m, float **base, const struct layer_ix *ix)
{
	return (struct ds_moe_params){ .gate = tp(m, base, ix->gate), .fcw = tp(m, base, ix->fcw),
				       .fcb = tp(m, base, ix->fcb), .pw = tp(m, base, ix->fcpw),
				       .coefw = tp(m, base, ix->coefw), .coefb = tp(m, base, ix->coefb),
				       .experts = tp(m, base, ix->ex0) };
}

static int moe_layer_forward(const struct ds_gpt *m, struct ds_gpt_ws *ws, int l, const float *x, float *out,
			     int B, int T)
{
	const struct layer_ix *ix = &m->li[l];
	struct ds_moe_params p = moe_params(m, seg_params(ws), ix);
	struct ds_moe_rand r = { .seed = ws->seed, .step = (uint64_t)ws->step, .sample_offset = ws->sample_offset,
				 .T = T, .layer = l + 1 };
	struct ds_moe_a2a a2a = { ws, moe_a2a };
	return ds_moe_forward(ws->moe, ws->ckpt ? 0 : ix->moe, l, &p, x, (int64_t)B * T, ws->train, ws->recomputing,
			      &r, &a2a, out, &ws->lerr);
}

/* ---- one transformer layer --------------------------------------------- */

/* out (N,C) = layer l of x (N,C); activations into a.  0 or an MoE
 * layer's failure (ws->lerr). */
static int layer_forward(const struct ds_gpt *m, struct ds_gpt_ws *ws, int l, struct acts *a,
			  float *out, const float *x, int B, int T)
{
	const struct layer_ix *ix = &m->li[l];
	float **P = seg_params(ws);
	const int64_t N = (int64_t)B * T;
	const int C = m->C, NH = m->NH, F = m->F, F2 = m->F2;
	const float ph = (float)m->cfg.hidden_dropout;
	const int gptj = m->cfg.gpt_j_residual;

	norm_forward(m, a->ln1, a->ln1_a, a->ln1_b, x, tp(m, P, ix->ln1w), tp(m, P, ix->ln1b), N);
	rnd(ws, a->ln1, N * C);
	matmul_forward(ws, a->qkv, a->ln1, tp(m, P, ix->qkvw), tp(m, P, ix->qkvb), N, C, 3 * C);
	if (m->rd)
		ds_kernel_rotary(a->qkv, ws->rcos, ws->rsin, B, T, C, NH, m->rd, 0);
	rnd(ws, a->qkv, 3 * N * C);
	attention_forward(m, ws, a, l, B, T);
	rnd(ws, a->atty, N * C);
	/* attention branch -> res2 (sequential) or out (parallel) */
	float *ab = gptj ? out : a->res2;
	matmul_forward(ws, ab, a->atty, tp(m, P, ix->projw), tp(m, P, ix->projb), N, C, C);
	dropout_btc(ws, ab, B, T, C, l + 1, 2, ph);
	ds_kernel_add_inplace(ab, x, N * C);
	rnd(ws, ab, N * C);
	const float *h = gptj ? x : a->res2;
	norm_forward(m, a->ln2, a->ln2_a, a->ln2_b, h, tp(m, P, ix->ln2w), tp(m, P, ix->ln2b), N);
	rnd(ws, a->ln2, N * C);
	float *mb = ws->dM;   /* scratch (N,C): MLP branch */
	if (ix->moe >= 0) {
		int rc = moe_layer_forward(m, ws, l, a->ln2, mb, B, T);
		if (rc < 0)
			return rc;
	} else {
		matmul_forward(ws, a->fch, a->ln2, tp(m, P, ix->fcw), tp(m, P, ix->fcb), N, C, F2);
		rnd(ws, a->fch, N * F2);
		ds_kernel_act_forward(a->fcact, a->fch, N, F, m->cfg.activation);
		rnd(ws, a->fcact, N * F);
		matmul_forward(ws, mb, a->fcact, tp(m, P, ix->fcpw), tp(m, P, ix->fcpb), N, F, C);
	}
	dropout_btc(ws, mb, B, T, C, l + 1, 3, ph);
	if (gptj) {
		ds_kernel_add_inplace(out, mb, N * C);          /* out = x + attn + mlp */
	} else {
		memcpy(out, a->res2, (size_t)(N * C) * sizeof(float));
		ds_kernel_add_inplace(out, mb, N * C);          /* out = res2 + mlp */
	}
	rnd(ws, out, N * C);   /* the layer boundary */
	return 0;
}

/* dres (N,C): on entry d loss / d out of layer l, on return d loss / d x
 * (the residual stream's gradient, updated in place); parameter gradients
 * accumulate into the segment's grads.  x (N,C) is the layer's input.
 * 0 or an MoE layer's failure (ws->lerr). */
static int layer_backward(const struct ds_gpt *m, struct ds_gpt_ws *ws, int l, const struct acts *a,
			   float *dres, const float *x, int B, int T)
{
	const struct layer_ix *ix = &m->li[l];
	float **P = seg_params(ws), **G = seg_grads(m, ws);
	const int64_t N = (int64_t)B * T;
	const int C = m->C, NH = m->NH, F = m->F, F2 = m->F2;
	const float ph = (float)m->cfg.hidden_dropout;
	const int gptj = m->cfg.gpt_j_residual;
	const size_t nc = (size_t)(N * C) * sizeof(float);

	/* mixed precision: every activation gradient is rounded to 16 bits
	 * where an op of a GPU run would store it, so a scaled fp16 gradient
	 * overflows inside the layer where it would there */
	/* out = h + drop(mlp): dM = drop(dout) */
	memcpy(ws->dM, dres, nc);
	dropout_btc(ws, ws->dM, B, T, C, l + 1, 3, ph);
	rnd(ws, ws->dM, N * C);
	if (gptj) {   /* out = x + drop(attn) + drop(mlp): both branches see dout */
		memcpy(ws->dA, dres, nc);
		dropout_btc(ws, ws->dA, B, T, C, l + 1, 2, ph);
		rnd(ws, ws->dA, N * C);
	}
	/* mlp: fcact @ c_proj, act, ln2 @ c_fc, norm2 (MoE: moe.c) */
	if (ix->moe >= 0) {
		struct ds_moe_params p = moe_params(m, P, ix), g = moe_params(m, G, ix);
		struct ds_moe_a2a a2a = { ws, moe_a2a };
		int rc = ds_moe_backward(ws->moe, ws->ckpt ? 0 : ix->moe, l, &p, &g, a->ln2, ws->dM,
					 (float)m->cfg.moe.loss_coeff * ws->bscale, &a2a, ws->dln, &ws->lerr);
		if (rc < 0)
			return rc;
	} else {
		matmul_backward(ws, ws->dfcact, tp(m, G, ix->fcpw), tp(m, G, ix->fcpb), ws->dM, a->fcact,
				tp(m, P, ix->fcpw), N, F, C);
		rnd(ws, ws->dfcact, N * F);
		ds_kernel_act_backward(ws->dfch, ws->dfcact, a->fch, N, F, m->cfg.activation);
		rnd(ws, ws->dfch, N * F2);
		matmul_backward(ws, ws->dln, tp(m, G, ix->fcw), tp(m, G, ix->fcb), ws->dfch, a->ln2,
				tp(m, P, ix->fcw), N, C, F2);
	}
	rnd(ws, ws->dln, N * C);
	const float *h = gptj ? x : a->res2;
	norm_backward(m, dres, tp(m, G, ix->ln2w), tp(m, G, ix->ln2b), ws->dln, h,
		      tp(m, P, ix->ln2w), a->ln2_a, a->ln2_b, N);
	rnd(ws, dres, N * C);
	if (!gptj) {  /* res2 = x + drop(attn): dA = drop(dres2) */
		memcpy(ws->dA, dres, nc);
		dropout_btc(ws, ws->dA, B, T, C, l + 1, 2, ph);
		rnd(ws, ws->dA, N * C);
	}
	/* attention: atty @ c_proj, attention, rotary, ln1 @ c_attn, norm1 */
	matmul_backward(ws, ws->datty, tp(m, G, ix->projw), tp(m, G, ix->projb), ws->dA, a->atty,
			tp(m, P, ix->projw), N, C, C);
	rnd(ws, ws->datty, N * C);
	attention_backward(m, ws, a, l, B, T);
	if (m->rd)
		ds_kernel_rotary(ws->dqkv, ws->rcos, ws->rsin, B, T, C, NH, m->rd, 1);
	rnd(ws, ws->dqkv, 3 * N * C);
	matmul_backward(ws, ws->dln, tp(m, G, ix->qkvw), tp(m, G, ix->qkvb), ws->dqkv, a->ln1,
			tp(m, P, ix->qkvw), N, C, 3 * C);
	rnd(ws, ws->dln, N * C);
	norm_backward(m, dres, tp(m, G, ix->ln1w), tp(m, G, ix->ln1b), ws->dln, x,
		      tp(m, P, ix->ln1w), a->ln1_a, a->ln1_b, N);
	return 0;
}

/* bf16 runs whose head products go to dstk's kernel keep the logits and
 * their gradient in bf16 from the product to the loss and back: each of
 * the three products runs once over the whole batch (no fp32 row chunks,
 * no rounding or packing passes, one pass over the head's gradient).  The
 * implementation, or DS_BF16_SGEMM for the chunked fp32 path. */
static enum ds_bf16_impl head16(const struct ds_gpt_ws *ws, int N, int V, int C)
{
	if (ws->half != DS_HALF_BF16 || ws->mm < 0)
		return DS_BF16_SGEMM;
	const enum ds_bf16_impl im = ds_gemm_bf16_pick(ws->mm, 0, 1, N, V, C, 1);
	return im == DS_BF16_KERNEL || im == DS_BF16_PORTABLE ? im : DS_BF16_SGEMM;
}

/* logits rows [r0, r0+n) into out (n,Vp) = lnf @ head^T, rounded to 16
 * bits in mixed precision; the padding columns are -inf */
static void head_rows(const struct ds_gpt *m, const struct ds_gpt_ws *ws, float *out, int64_t r0,
		      int64_t n, const float *head)
{
	const int V = m->V, Vp = m->Vp, C = m->C;
	gemm_kb(ws, r0 > 0, (int)(ws->half != DS_HALF_NONE ? ws->hrows : n), CblasNoTrans, CblasTrans, (int)n, V, C,
		1.0f, ws->lnf + r0 * C, C,
		    head, C, 0.0f, out, Vp);
	rnd(ws, out, n * Vp);
	if (Vp > V) {
#pragma omp parallel for schedule(static)
		for (int64_t i = 0; i < n; i++)
			for (int j = V; j < Vp; j++)
				out[i * Vp + j] = -INFINITY;
	}
}

/* ---- whole model ------------------------------------------------------- */

int ds_gpt_forward(const struct ds_gpt *m, struct ds_gpt_ws *ws, const float *params,
		   const int32_t *tokens, const int32_t *targets, int B, int T, int64_t step,
		   int64_t sample_offset, int train, float *loss, struct ds_err *err)
{
	if (B < 1 || T < 1 || B > ws->Bmax || T > ws->Tmax)
		return ds_err_set(err, DS_EINVAL, "model: batch %dx%d outside the workspace's %dx%d", B, T,
				  ws->Bmax, ws->Tmax);
	const int64_t N = (int64_t)B * T;
	const int C = m->C, L = m->L, last = L + 1;
	for (int64_t i = 0; i < N; i++) {
		if (tokens[i] < 0 || tokens[i] >= m->V)
			return ds_err_set(err, DS_EINVAL, "model: token id %d at sample %lld position %lld is outside the vocabulary [0, %d)",
					  tokens[i], (long long)(sample_offset + i / T), (long long)(i % T), m->V);
		if (targets && (targets[i] < 0 || targets[i] >= m->V))
			return ds_err_set(err, DS_EINVAL, "model: target id %d at sample %lld position %lld is outside the vocabulary [0, %d)",
					  targets[i], (long long)(sample_offset + i / T), (long long)(i % T), m->V);
	}
	ds_progress_note();  /* the hang watchdog counts micro-batches as progress */
	ws->have_fwd = 0;
	ws->B = B;
	ws->T = T;
	ws->step = step;
	ws->sample_offset = sample_offset;
	ws->train = train;
	ws->ckpt_layer = -1;
	memcpy(ws->tok, tokens, (size_t)N * sizeof(int32_t));
	float **P = seg_params(ws);
	const int tied = !m->cfg.no_weight_tying;

	/* embeddings */
	DS_TRY(hook_pre(m, ws, 0, DS_GPT_FORWARD, params, NULL, err));
	const float *pos = m->wpe >= 0 ? tp(m, P, m->wpe)
		: m->cfg.pos_emb == DS_POS_SINUSOIDAL ? ws->spos : NULL;
	const int hp = ws->half != DS_HALF_NONE;
	const int64_t NC = N * C;
	float *x0 = hp ? ws->xw[0] : ws->resid;
	ds_kernel_embed_forward(x0, tokens, tp(m, P, m->wte), pos, B, T, C);
	dropout_btc(ws, x0, B, T, C, 0, 0, (float)m->cfg.hidden_dropout);
	rnd(ws, x0, NC);
	if (hp)
		ds_half_pack_n(ws->half, ws->resid16, x0, (size_t)NC);
	if (!tied)
		DS_TRY(hook_post(ws, 0, DS_GPT_FORWARD, err));

	/* layers */
	if (ws->moe && !ws->recomputing)
		ds_moe_stats_reset(ws->moe);
	for (int l = 0; l < L; l++) {
		const int es = m->reg.expert_seg[l];
		DS_TRY(hook_pre(m, ws, l + 1, DS_GPT_FORWARD, params, NULL, err));
		if (es >= 0)
			DS_TRY(hook_pre(m, ws, es, DS_GPT_FORWARD, params, NULL, err));
		struct acts a = layer_acts(ws, l);
		float *x = hp ? ws->xw[l & 1] : ws->resid + (int64_t)l * NC;
		float *out = hp ? ws->xw[(l + 1) & 1] : ws->resid + (int64_t)(l + 1) * NC;
		int lrc = layer_forward(m, ws, l, &a, out, x, B, T);
		if (lrc < 0)
			return ds_err_set(err, lrc, "%s", ws->lerr.msg);
		if (es >= 0)
			DS_TRY(hook_post(ws, es, DS_GPT_FORWARD, err));
		if (hp)
			ds_half_pack_n(ws->half, ws->resid16 + (int64_t)(l + 1) * NC, out, (size_t)NC);
		if (ws->ha && l < L - 1)   /* the last layer stays in la[0] for backward */
			layer_store(m, ws, l, &a, B, T, 0);
		DS_TRY(hook_post(ws, l + 1, DS_GPT_FORWARD, err));
	}
	ws->ckpt_layer = ws->ckpt || ws->ha ? L - 1 : -1;

	/* final norm and head */
	DS_TRY(hook_pre(m, ws, last, DS_GPT_FORWARD, params, NULL, err));
	const float *xf = hp ? ws->xw[L & 1] : ws->resid + (int64_t)L * NC;
	norm_forward(m, ws->lnf, ws->lnf_a, ws->lnf_b, xf, tp(m, P, m->lnfw), tp(m, P, m->lnfb), N);
	rnd(ws, ws->lnf, N * C);
	const int V = m->V, Vp = m->Vp;
	const float *head = tp(m, P, m->head);
	double sum = 0;
	const enum ds_bf16_impl h16 = head16(ws, (int)N, V, C);
	const int whole = h16 != DS_BF16_SGEMM &&
			  ds_gemm_bf16_ex(h16, DS_GEMM_BF16_C16, 0, 1, (int)N, V, C, 1.0f, ws->lnf, C, head, C, 0.0f,
					  ws->logits16, Vp) == 0;
	if (whole)
		sum = ds_kernel_xent_forward16(ws->lse, ws->logits16, targets, N, V, Vp);
	if (!hp) {
		head_rows(m, ws, ws->logits, 0, N, head);
		if (targets)
			sum = ds_kernel_xent_forward(ws->lse, ws->logits, targets, N, V, Vp);
	}
	for (int64_t r0 = 0; hp && !whole && r0 < N; r0 += ws->hrows) {
		/* 16-bit logits: hrows at a time in fp32, the loss's terms
		 * added in the unchunked kernel's order */
		const int64_t n = N - r0 < ws->hrows ? N - r0 : ws->hrows;
		head_rows(m, ws, ws->hchunk, r0, n, head);
		if (targets) {
			ds_kernel_xent_forward(ws->lse + r0, ws->hchunk, targets + r0, n, V, Vp);
			for (int64_t i = 0; i < n; i++)
				sum += (double)ws->lse[r0 + i] - (double)ws->hchunk[i * Vp + targets[r0 + i]];
		}
		ds_half_pack_n(ws->half, ws->logits16 + r0 * Vp, ws->hchunk, (size_t)(n * Vp));
	}
	DS_TRY(hook_post(ws, last, DS_GPT_FORWARD, err));
	if (tied)
		DS_TRY(hook_post(ws, 0, DS_GPT_FORWARD, err));

	if (targets) {
		memcpy(ws->tgt, targets, (size_t)N * sizeof(int32_t));
		if (loss)
			*loss = (float)(sum / (double)N);
		ws->have_fwd = 1;
	}
	return 0;
}

int ds_gpt_backward(const struct ds_gpt *m, struct ds_gpt_ws *ws, const float *params,
		    float *grads, float scale, struct ds_err *err)
{
	if (!ws->have_fwd)
		return ds_err_set(err, DS_EINVAL, "model: backward needs a forward with targets first");
	ds_progress_note();
	ws->have_fwd = 0;
	const int B = ws->B, T = ws->T, C = m->C, L = m->L, last = L + 1;
	const int64_t N = (int64_t)B * T;
	const int V = m->V, Vp = m->Vp;
	const int tied = !m->cfg.no_weight_tying;
	float **P = seg_params(ws), **G = seg_grads(m, ws);

	ws->bscale = scale;
	/* head: dlogits = scale/N (softmax - onehot) */
	if (tied)
		DS_TRY(hook_pre(m, ws, 0, DS_GPT_BACKWARD, params, grads, err));
	DS_TRY(hook_pre(m, ws, last, DS_GPT_BACKWARD, params, grads, err));
	const int hp = ws->half != DS_HALF_NONE;
	const int64_t R = hp ? ws->hrows : N;   /* 16-bit logits: hrows at a time */
	const enum ds_bf16_impl h16 = head16(ws, (int)N, V, C);
	if (h16 != DS_BF16_SGEMM)   /* dlogits in bf16, in place */
		ds_kernel_xent_backward16(ws->logits16, ws->lse, ws->tgt, N, V, Vp, scale / (float)N);
	const int whole = h16 != DS_BF16_SGEMM &&
			  ds_gemm_bf16_ex(h16, DS_GEMM_BF16_A16, 0, 0, (int)N, C, V, 1.0f, ws->logits16, Vp,
					  tp(m, P, m->head), C, 0.0f, ws->dln, C) == 0 &&
			  ds_gemm_bf16_ex(h16, DS_GEMM_BF16_A16, 1, 0, V, C, (int)N, 1.0f, ws->logits16, Vp, ws->lnf, C,
					  1.0f, tp(m, G, m->head), C) == 0;
	for (int64_t r0 = 0; !whole && r0 < N; r0 += R) {
		const int64_t n = N - r0 < R ? N - r0 : R;
		float *dl = hp ? ws->hchunk : ws->logits;
		if (hp)
			ds_half_unpack_n(ws->half, dl, ws->logits16 + r0 * Vp, (size_t)(n * Vp));
		if (h16 == DS_BF16_SGEMM) {
			ds_kernel_xent_backward(dl, ws->lse + r0, ws->tgt + r0, n, V, Vp, scale / (float)N);
			rnd(ws, dl, n * Vp);   /* dlogits: a scaled fp16 value overflows to inf here */
		}
		/* dlnf (n,C) = dlogits[:, :V] @ head[:V]; dhead[:V] += dlogits^T @ lnf */
		gemm_kb(ws, r0 > 0, (int)R, CblasNoTrans, CblasNoTrans, (int)n, C, V, 1.0f, dl, Vp,
			    tp(m, P, m->head), C, 0.0f, ws->dln + r0 * C, C);
		gemm(ws, CblasTrans, CblasNoTrans, V, C, (int)n, 1.0f, dl, Vp,
			    ws->lnf + r0 * C, C, 1.0f, tp(m, G, m->head), C);
	}
	rnd(ws, ws->dln, N * C);
	memset(ws->dresid, 0, (size_t)(N * C) * sizeof(float));
	norm_backward(m, ws->dresid, tp(m, G, m->lnfw), tp(m, G, m->lnfb), ws->dln,
		      resid_in(ws, L, N * C), tp(m, P, m->lnfw), ws->lnf_a, ws->lnf_b, N);
	rnd(ws, ws->dresid, N * C);
	DS_TRY(hook_post(ws, last, DS_GPT_BACKWARD, err));

	/* layers, last first; with checkpointing recompute each from its input,
	 * with 16-bit storage unpack each into the working set */
	for (int l = L - 1; l >= 0; l--) {
		const int es = m->reg.expert_seg[l];
		DS_TRY(hook_pre(m, ws, l + 1, DS_GPT_BACKWARD, params, grads, err));
		if (es >= 0)
			DS_TRY(hook_pre(m, ws, es, DS_GPT_BACKWARD, params, grads, err));
		const float *x = resid_in(ws, l, N * C);
		struct acts a = layer_acts(ws, l);
		int lrc = 0;
		if (ws->ckpt && ws->ckpt_layer != l) {
			double t0 = ds_now();
			/* the output goes to scratch: resid[l+1] is no longer needed */
			ws->recomputing = 1;
			lrc = layer_forward(m, ws, l, &a, ws->dqkv, x, B, T);
			ws->recomputing = 0;
			ws->ckpt_layer = l;
			ws->recompute_s += ds_now() - t0;
		} else if (ws->ha && ws->ckpt_layer != l) {
			layer_store(m, ws, l, &a, B, T, 1);
			ws->ckpt_layer = l;
		}
		if (lrc == 0)
			lrc = layer_backward(m, ws, l, &a, ws->dresid, x, B, T);
		if (lrc < 0)
			return ds_err_set(err, lrc, "%s", ws->lerr.msg);
		rnd(ws, ws->dresid, N * C);   /* the layer boundary */
		if (es >= 0)
			DS_TRY(hook_post(ws, es, DS_GPT_BACKWARD, err));
		DS_TRY(hook_post(ws, l + 1, DS_GPT_BACKWARD, err));
	}

	/* embeddings */
	if (!tied)
		DS_TRY(hook_pre(m, ws, 0, DS_GPT_BACKWARD, params, grads, err));
	dropout_btc(ws, ws->dresid, B, T, C, 0, 0, (float)m->cfg.hidden_dropout);
	ds_kernel_embed_backward(tp(m, G, m->wte), m->wpe >= 0 ? tp(m, G, m->wpe) : NULL, ws->dresid,
				 ws->tok, B, T, C);
	DS_TRY(hook_post(ws, 0, DS_GPT_BACKWARD, err));
	return 0;
}

void ds_gpt_ws_moe_stats(const struct ds_gpt_ws *ws, struct ds_moe_stats *st)
{
	if (ws->moe)
		ds_moe_stats_get(ws->moe, st);
	else
		memset(st, 0, sizeof *st);
}

int ds_gpt_ep(const struct ds_gpt *m, int *rank)
{
	if (rank)
		*rank = m->ep_rank;
	return m->ep;
}

int ds_gpt_expert_segment(const struct ds_gpt *m, int s)
{
	return s >= m->reg.nseg_dense && s < m->reg.nseg;
}

int ds_gpt_num_dense_segments(const struct ds_gpt *m) { return m->reg.nseg_dense; }
