/* gpt.c - GPT forward and backward over one flat buffer (gpt.h).
 *
 * Matrix products go through gemm() to the backend's gemm (on cpu
 * cblas_sgemm, or in bf16 runs bf16 products: oneDNN on AMX or
 * AVX512_BF16, or dstk's AVX512_BF16 kernel); the kernels are the
 * backend's too.  Shapes follow llm.c: B batch, T time, C channels,
 * NH heads, hs head size, F MLP width, F2 c_fc width (F or 2F), V vocabulary,
 * Vp padded vocabulary, L layers, N = B*T.  Mixed precision rounds
 * activations to 16 bits in place and stores the saved ones in 16 bits
 * (gpt.h).  Every tensor operation goes through the model's compute
 * backend (compute.h, cpu unless ds_gpt_set_compute chose another).
 */
#include "model/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"
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

/* With tensor parallelism (gpt.h) NH, Cq, F, F2 and Vp are this rank's:
 * its heads, their q width NH*hs, its MLP and vocabulary slices; C stays
 * the model's.  V is the valid columns among its Vp, v0 its first global
 * vocabulary row, h0 its first global head. */
struct ds_gpt {
	struct ds_model_config cfg;
	struct ds_gpt_registry reg;
	int L, C, NH, V, Vp, F, F2, rd;
	int Cq, tp, tp_rank, v0, h0;
	int wte, wpe, lnfw, lnfb, head;   /* head = wte when tied */
	int nseg_, head_seg;              /* head_seg: L+2 untied, 0 tied */
	struct layer_ix *li;
	int ep, ep_rank, nmoe;            /* expert parallelism; MoE layers */
	const struct ds_compute_ops *ops; /* the compute backend (compute.h), cpu unless set */
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
	const struct ds_compute_ops *ops; /* the model's backend when this was made */
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
	int ld16;                     /* logits16's row stride: Vp, or V after a forward of head16's (dense) */
	int zB, zT;                   /* the shape whose upper triangles of ha[].att are zeros (0: none yet) */
	int whole16;                  /* the last forward ran head16's one product */
	float *hchunk;                /* mixed precision: hrows fp32 logit rows, aliasing dqkv.. */
	int64_t hrows;
	float *lse;                   /* (N) */
	float *vp;                    /* (3, N) vocabulary-parallel loss: row max, target logit, exp-sum */
	uint16_t *g16;                /* (N,C) partition_activations in 16 bits: a gathered layer input */
	uint16_t *d16;                /* (N, max(F2, 3Cq, C)) bf16: matmul_backward's dout */
	int dres16;                   /* d16 holds dresid's bits, from the norm's backward that wrote dresid */
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
	struct ds_gpt_part part;      /* what this workspace runs */
	int l0, nl;                   /* its layers: [l0, l0 + nl) */
	int tp, tp_rank, pa;          /* tensor parallelism; pa: partition_activations in effect */
	/* bf16 runs whose layer products read bf16 copies: compute.h's
	 * gemm_hints level (1: the copies at hand, 2: also copies made for two
	 * products), and per segment the bf16 copy of its parameters they read
	 * (NULL: none), the hook's or the workspace's own (own16, made in
	 * forward when there are no pre hooks) */
	int hints, nseg;
	const uint16_t **w16;
	uint16_t **own16;
	float *segp[];                /* 2*nseg: parameter then gradient base per segment */
};

/* ---- model ------------------------------------------------------------- */

static int find(const struct ds_gpt *m, const char *fmt, int l)
{
	char n[DS_GPT_NAME_MAX];
	snprintf(n, sizeof(n), fmt, l);
	return ds_gpt_registry_find(&m->reg, n);
}

static int create_par(struct ds_gpt **out, const struct ds_model_config *cfg, int tp, int tp_rank, int ep, int ep_rank,
		      struct ds_err *err);

int ds_gpt_create(struct ds_gpt **out, const struct ds_model_config *cfg, struct ds_err *err)
{
	return create_par(out, cfg, 1, 0, 1, 0, err);
}

int ds_gpt_create_ep(struct ds_gpt **out, const struct ds_model_config *cfg, int ep, int ep_rank,
		     struct ds_err *err)
{
	return create_par(out, cfg, 1, 0, ep, ep_rank, err);
}

int ds_gpt_create_tp(struct ds_gpt **out, const struct ds_model_config *cfg, int tp, int tp_rank,
		     struct ds_err *err)
{
	return create_par(out, cfg, tp, tp_rank, 1, 0, err);
}

/* the model as tensor-parallel rank tp_rank of tp and expert-parallel rank
 * ep_rank of ep (MoE layers refuse tp > 1: registry.h) */
static int create_par(struct ds_gpt **out, const struct ds_model_config *cfg, int tp, int tp_rank, int ep, int ep_rank,
		      struct ds_err *err)
{
	*out = NULL;
	struct ds_gpt *m = calloc(1, sizeof(*m));
	if (!m)
		return ds_err_set(err, DS_ENOMEM, "model: out of memory");
	m->cfg = *cfg;
	m->ops = &ds_compute_cpu;
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
	int rc = ep > 1 ? ds_gpt_registry_build_ep(&m->reg, c, ep, ep_rank, err)
			: ds_gpt_registry_build_tp(&m->reg, c, tp, tp_rank, err);
	if (rc < 0) {
		free(m);
		return rc;
	}
	m->tp = tp;
	m->tp_rank = tp_rank;
	m->L = c->num_layers;
	m->C = c->hidden_size;
	m->NH = c->num_attention_heads / tp;
	m->Cq = m->NH * (m->C / c->num_attention_heads);
	m->h0 = tp_rank * m->NH;
	m->Vp = c->padded_vocab_size / tp;
	m->v0 = tp_rank * m->Vp;
	m->V = c->vocab_size - m->v0 < 0 ? 0 : c->vocab_size - m->v0 > m->Vp ? m->Vp : c->vocab_size - m->v0;
	m->F = c->intermediate_size / tp;
	m->F2 = ds_activation_gated(c->activation) ? 2 * m->F : m->F;
	m->head_seg = c->no_weight_tying ? m->L + 2 : 0;
	m->rd = 0;
	if (c->pos_emb == DS_POS_ROTARY) {
		if (!(c->rotary_pct > 0 && c->rotary_pct <= 1)) {
			rc = ds_err_set(err, DS_EINVAL, "model: rotary_pct must be in (0, 1] (got %g)", c->rotary_pct);
			ds_gpt_destroy(m);
			return rc;
		}
		m->rd = (int)((m->C / c->num_attention_heads) * c->rotary_pct) / 2 * 2;
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
void ds_gpt_set_compute(struct ds_gpt *m, const struct ds_compute_ops *ops) { m->ops = ops ? ops : &ds_compute_cpu; }
const struct ds_compute_ops *ds_gpt_compute(const struct ds_gpt *m) { return m->ops; }
const struct ds_gpt_registry *ds_gpt_registry(const struct ds_gpt *m) { return &m->reg; }
int64_t ds_gpt_num_params(const struct ds_gpt *m) { return m->reg.numel; }
int ds_gpt_num_tensors(const struct ds_gpt *m) { return m->reg.nt; }
const struct ds_gpt_tensor *ds_gpt_tensor(const struct ds_gpt *m, int i) { return &m->reg.t[i]; }
int ds_gpt_find(const struct ds_gpt *m, const char *name) { return ds_gpt_registry_find(&m->reg, name); }
int ds_gpt_num_segments(const struct ds_gpt *m) { return m->reg.nseg; }
const struct ds_gpt_segment *ds_gpt_segment(const struct ds_gpt *m, int s) { return &m->reg.seg[s]; }
int ds_gpt_norm_segment(const struct ds_gpt *m) { return m->L + 1; }
int ds_gpt_head_segment(const struct ds_gpt *m) { return m->head_seg; }
int ds_gpt_tp(const struct ds_gpt *m, int *rank)
{
	if (rank)
		*rank = m->tp_rank;
	return m->tp;
}

void ds_gpt_part_whole(const struct ds_gpt *m, struct ds_gpt_part *p)
{
	*p = (struct ds_gpt_part){ 1, 0, m->L, 1, 1 };
}

int ds_gpt_part_uses(const struct ds_gpt *m, const struct ds_gpt_part *p, int seg)
{
	if (seg == 0)
		return p->embed || (p->head && m->head_seg == 0);
	if (seg <= m->L)
		return seg - 1 >= p->l0 && seg - 1 < p->l1;
	if (seg == m->L + 1)
		return p->norm;
	if (seg == m->head_seg)
		return p->head;
	for (int l = p->l0; l < p->l1; l++)   /* an MoE layer's experts */
		if (m->reg.expert_seg[l] == seg)
			return 1;
	return 0;
}

void ds_gpt_init(const struct ds_gpt *m, uint64_t seed, float *dst, int64_t begin, int64_t end)
{
	ds_gpt_registry_init_range(&m->reg, seed, dst, begin, end);
}

/* ---- workspace --------------------------------------------------------- */

/* Shapes of a workspace: this tensor-parallel rank's widths (NH heads of
 * q width Cq, F, F2, Vp) for a part of nl layers with or without the
 * head; pa: partition_activations in effect (checkpointing, tp > 1). */
struct dims {
	int64_t B, T, N, C, NH, Cq, F, F2, Vp, L, nl, rd, tp;
	int ckpt, sinus, adrop, half, bf16, head, pa;
};

static void dims_of(struct dims *d, const struct ds_model_config *c, int tp, const struct ds_gpt_part *part, int pa,
		    int B, int T, int ckpt, int half)
{
	int Vp = c->padded_vocab_size;
	if (Vp <= 0) {
		int k = c->make_vocab_size_divisible_by > 0 ? c->make_vocab_size_divisible_by : 128;
		Vp = (c->vocab_size + k - 1) / k * k;
	}
	int F = c->intermediate_size > 0 ? c->intermediate_size : 4 * c->hidden_size;
	if (tp < 1)
		tp = 1;
	d->tp = tp;
	d->B = B;
	d->T = T;
	d->N = (int64_t)B * T;
	d->C = c->hidden_size;
	d->NH = c->num_attention_heads / tp;
	d->Cq = c->num_attention_heads > 0 ? d->NH * (c->hidden_size / c->num_attention_heads) : 0;
	d->F = F / tp;
	d->F2 = ds_activation_gated(c->activation) ? 2 * d->F : d->F;
	d->Vp = Vp / tp;
	d->L = c->num_layers;
	d->nl = part ? part->l1 - part->l0 : c->num_layers;
	d->head = part ? part->head : 1;
	d->rd = c->pos_emb == DS_POS_ROTARY && d->NH > 0
		? (int64_t)((c->hidden_size / c->num_attention_heads) * c->rotary_pct) / 2 * 2 : 0;
	d->ckpt = ckpt;
	d->pa = pa && ckpt && tp > 1;
	d->sinus = c->pos_emb == DS_POS_SINUSOIDAL;
	d->adrop = c->attention_dropout > 0;
	d->half = half != DS_HALF_NONE;
	d->bf16 = half == DS_HALF_BF16;
}

/* the fewest logit rows mixed precision's head works on at once (16-bit
 * logits are unpacked hrows at a time into backward scratch), and the
 * scratch it may take beyond the backward buffers it borrows to reach
 * HEAD_MIN_BYTES of rows: each chunk's products read the whole (V, C)
 * head and read and write its gradient, so GPT-2's 50304-row vocabulary
 * in 46-row chunks (micro batch 4 x 64) cost a bf16 step on sgemm about
 * a tenth (bench/gpt-step gpt2) */
#define HEAD_MIN_ROWS 8
#define HEAD_MIN_BYTES ((int64_t)32 << 20)

/* Carve the workspace out of base (NULL: only measure); returns bytes and,
 * in *saved, those of what forward keeps for backward (the layer inputs,
 * the layers' saved activations, the logits): the rest is working memory.
 * The kept layer inputs are nl + 1 entries (the part's layer inputs and
 * its last output), each N*C, or with partition_activations N*C/tp for
 * the layer inputs. */
static size_t layout(const struct dims *d, struct ds_gpt_ws *ws, char *base, size_t *saved)
{
	size_t off = 0, s0;
#define TAKE(ptr, n) do { size_t b_ = ((size_t)(n) * 4 + 63) & ~(size_t)63; \
	if (base) { (ptr) = (void *)(base + off); } off += b_; } while (0)
#define TAKE16(ptr, n) do { size_t b_ = ((size_t)(n) * 2 + 63) & ~(size_t)63; \
	if (base) { (ptr) = (void *)(base + off); } off += b_; } while (0)
	float *dummy;
	uint16_t *dummy16;
	const int64_t N = d->N, C = d->C, Cq = d->Cq;
	const int64_t kept = d->nl * (d->pa ? N * C / d->tp : N * C) + N * C;
	int nl = d->ckpt || d->half ? 1 : (int)d->nl;
	s0 = off;
	if (d->half) {   /* 16-bit layer inputs (fp32 copies in scratch: resid_in) */
		TAKE16(*(ws ? &ws->resid16 : &dummy16), kept);
	} else {
		TAKE(*(ws ? &ws->resid : &dummy), kept);
	}
	for (int l = 0; d->half && !d->ckpt && l < d->nl; l++) {
		struct hacts tmp, *h = ws ? &ws->ha[l] : &tmp;
		TAKE16(h->ln1, N * C);
		TAKE(h->ln1_a, N);
		TAKE(h->ln1_b, N);
		TAKE16(h->qkv, 3 * N * Cq);
		TAKE16(h->att, d->B * d->NH * d->T * d->T);
		TAKE16(h->atty, N * Cq);
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
		TAKE(a->qkv, 3 * N * Cq);
		TAKE(a->att, d->B * d->NH * d->T * d->T);
		TAKE(a->atty, N * Cq);
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
	if (!d->head) {
		w->logits = NULL;
		w->logits16 = NULL;
	} else if (d->half) {   /* 16-bit logits, handled hrows at a time in fp32 */
		TAKE16(w->logits16, N * d->Vp);
	} else {
		TAKE(w->logits, N * d->Vp);
	}
	*saved += off - s0;
	TAKE(w->lse, N);
	TAKE(w->vp, d->tp > 1 && d->head ? 3 * N : 0);   /* vocabulary-parallel loss: max, target logit, exp-sum */
	TAKE16(w->g16, d->pa && d->half ? N * C : 0);    /* partition_activations: the gathered 16-bit input */
	TAKE(w->dresid, N * C);
	TAKE(w->dA, N * C);
	TAKE(w->dM, N * C);
	TAKE(w->dln, N * C);
	const size_t r0 = off;   /* dqkv..dfcact are free while the head runs */
	TAKE(w->dqkv, 3 * Cq > C ? 3 * N * Cq : N * C);   /* recomputed layers also write their (N,C) output here */
	TAKE(w->datty, N * Cq);
	TAKE(w->dfch, N * d->F2);
	TAKE(w->dfcact, N * d->F);
	/* bf16: a product's output gradient in bf16, read by its two
	 * backward products (matmul_backward) */
	int64_t dw = d->F2 > 3 * Cq ? d->F2 : 3 * Cq;
	dw = dw > C ? dw : C;
	TAKE16(w->d16, d->bf16 ? N * dw : 0);
	if (d->half && d->head) {   /* the head's fp32 rows: that span, grown to the rows above if short */
		int64_t rows = HEAD_MIN_BYTES / 4 / (d->Vp > 0 ? d->Vp : 1);
		rows = rows > HEAD_MIN_ROWS ? rows : HEAD_MIN_ROWS;
		int64_t fl = (int64_t)(off - r0) / 4, want = (N < rows ? N : rows) * d->Vp;
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

size_t ds_gpt_activation_bytes_part(const struct ds_model_config *cfg, int tp, const struct ds_gpt_part *part,
				    int pa, int B, int T, int checkpointing, int half, size_t *saved)
{
	struct dims d;
	size_t sv;
	dims_of(&d, cfg, tp, part, pa, B, T, checkpointing, half);
	size_t n = layout(&d, NULL, NULL, &sv), mb = moe_bytes(cfg, B, T, checkpointing);
	if (saved)
		*saved = sv + mb;
	return n + mb;
}

size_t ds_gpt_activation_bytes(const struct ds_model_config *cfg, int B, int T, int checkpointing, int half)
{
	return ds_gpt_activation_bytes_part(cfg, 1, NULL, 0, B, T, checkpointing, half, NULL);
}

size_t ds_gpt_activation_saved_bytes(const struct ds_model_config *cfg, int B, int T, int checkpointing, int half)
{
	size_t saved;
	ds_gpt_activation_bytes_part(cfg, 1, NULL, 0, B, T, checkpointing, half, &saved);
	return saved;
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
	ws->ops = m->ops;
	ws->nseg = nseg;
	ws->Bmax = o->B;
	ws->Tmax = o->T;
	ws->Vp = m->Vp;
	ws->ld16 = m->Vp;
	ws->ckpt = o->checkpointing != 0;
	ws->seed = o->dropout_seed;
	ws->half = (enum ds_half_kind)o->half;
	ws->mm = -1;
	if (ws->half == DS_HALF_BF16) {
		char why[200];
		if (m->ops->mm_check(o->bf16_matmul, why, sizeof why)) {
			free(ws);
			return ds_err_set(err, DS_ENOTSUP, "model workspace: %s", why);
		}
		ws->mm = o->bf16_matmul == DS_BF16_MM_FP32 ? -1 : o->bf16_matmul;
	}
	const int hl = ws->mm >= 0 && !o->no_bf16_copies ? m->ops->gemm_hints(ws->mm, 1, o->B * o->T, 3 * m->C, m->C) : 0;
	if (hl) {
		ws->w16 = calloc((size_t)nseg, sizeof(*ws->w16));
		ws->own16 = calloc((size_t)nseg, sizeof(*ws->own16));
		ws->hints = ws->w16 && ws->own16 ? hl : 0;   /* (else run without them) */
	}
	ws->ckpt_layer = -1;
	if (o->part)
		ws->part = *o->part;
	else
		ds_gpt_part_whole(m, &ws->part);
	const struct ds_gpt_part *pt = &ws->part;
	if (pt->l0 < 0 || pt->l1 < pt->l0 || pt->l1 > m->L || (pt->embed && pt->l0 != 0) ||
	    ((pt->norm || pt->head) && pt->l1 != m->L) || (pt->head && !pt->norm && (pt->embed || pt->l1 > pt->l0))) {
		/* (an empty part, a stage of parameterless blocks, passes its input on) */
		int rc = ds_err_set(err, DS_EINVAL, "model workspace: part (embed %d, layers %d..%d, norm %d, head %d) "
				    "is not a contiguous run of the model's %d layers", pt->embed, pt->l0, pt->l1, pt->norm,
				    pt->head, m->L);
		free(ws);
		return rc;
	}
	ws->l0 = pt->l0;
	ws->nl = pt->l1 - pt->l0;
	ws->tp = m->tp;
	ws->tp_rank = m->tp_rank;
	ws->pa = o->partition_activations && ws->ckpt && m->tp > 1;
	const int hp = ws->half != DS_HALF_NONE;
	ws->la = calloc(ws->ckpt || hp || !ws->nl ? 1 : (size_t)ws->nl, sizeof(*ws->la));
	if (hp && !ws->ckpt)
		ws->ha = calloc(ws->nl > 0 ? (size_t)ws->nl : 1, sizeof(*ws->ha));
	ws->gs = calloc((size_t)o->B, sizeof(*ws->gs));
	struct dims d;
	dims_of(&d, &m->cfg, m->tp, pt, ws->pa, o->B, o->T, ws->ckpt, ws->half);
	size_t saved;
	ws->bytes = layout(&d, NULL, NULL, &saved);
	ws->mem = ws->ops->alloc(ws->bytes);
	if (!ws->la || !ws->gs || !ws->mem || (hp && !ws->ckpt && !ws->ha)) {
		int rc = ds_err_set(err, DS_ENOMEM, "model workspace: out of %s memory for the memory plan's activations "
				    "row (%zu bytes); a smaller micro batch or activation checkpointing needs less",
				    ws->ops->name, ws->bytes);
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
		ds_moe_ws_set_compute(ws->moe, ws->ops);
		ws->bytes += ds_moe_ws_bytes(ws->moe);
	}
	ws->xw[0] = ws->dA;
	ws->xw[1] = ws->dln;
	/* rotary and sinusoidal tables, angles in double, made on the host
	 * and copied to the backend's memory */
	const int half = m->rd / 2;
	const size_t nr = (size_t)o->T * (size_t)half, ns = d.sinus ? (size_t)o->T * (size_t)m->C : 0;
	float *tab = malloc((2 * nr + ns) * sizeof(float) + 1);
	if (!tab) {
		ds_gpt_ws_destroy(ws);
		return ds_err_set(err, DS_ENOMEM, "model workspace: out of memory for the position tables");
	}
	float *rc = tab, *rs = tab + nr, *sp = tab + 2 * nr;
	for (int t = 0; t < o->T; t++)
		for (int i = 0; i < half; i++) {
			double f = pow(m->cfg.rotary_emb_base, -2.0 * i / m->rd);
			rc[t * half + i] = (float)cos(t * f);
			rs[t * half + i] = (float)sin(t * f);
		}
	if (d.sinus)
		for (int t = 0; t < o->T; t++)
			for (int i = 0; i < m->C / 2; i++) {
				double f = pow(10000.0, -2.0 * i / m->C);
				sp[(int64_t)t * m->C + i] = (float)sin(t * f);
				sp[(int64_t)t * m->C + m->C / 2 + i] = (float)cos(t * f);
			}
	if (nr) {
		ws->ops->from_host(ws->rcos, rc, nr * sizeof(float));
		ws->ops->from_host(ws->rsin, rs, nr * sizeof(float));
	}
	if (ns)
		ws->ops->from_host(ws->spos, sp, ns * sizeof(float));
	free(tab);
	int crc = ws->ops->check(err);
	if (crc < 0) {
		ds_gpt_ws_destroy(ws);
		return crc;
	}
	*out = ws;
	return 0;
}

void ds_gpt_ws_destroy(struct ds_gpt_ws *ws)
{
	if (!ws)
		return;
	if (ws->mem)
		ws->ops->free(ws->mem);
	ds_moe_ws_destroy(ws->moe);
	for (int s = 0; ws->own16 && s < ws->nseg; s++)
		if (ws->own16[s])
			ws->ops->free(ws->own16[s]);
	free(ws->own16);
	free((void *)ws->w16);
	free(ws->la);
	free(ws->ha);
	free(ws->gs);
	free(ws);
}

size_t ds_gpt_ws_bytes(const struct ds_gpt_ws *ws) { return ws->bytes; }
int ds_gpt_ws_head16(const struct ds_gpt_ws *ws) { return ws->whole16; }
const float *ds_gpt_ws_logits(const struct ds_gpt_ws *ws) { return ws->logits; }

void ds_gpt_ws_logits_copy(const struct ds_gpt_ws *ws, float *dst)
{
	const size_t cnt = (size_t)ws->B * (size_t)ws->T * (size_t)ws->Vp;
	if (ws->logits) {
		ws->ops->to_host(dst, ws->logits, cnt * sizeof(float));
	} else if (ws->ld16 == ws->Vp) {
		ws->ops->half_unpack(ws->half, dst, ws->logits16, cnt);
	} else {   /* head16's dense rows (host memory: cpu only), the padding -inf */
		for (int64_t r = 0; r < (int64_t)ws->B * ws->T; r++) {
			float *d = dst + r * ws->Vp;
			ws->ops->half_unpack(ws->half, d, ws->logits16 + r * ws->ld16, (size_t)ws->ld16);
			for (int i = ws->ld16; i < ws->Vp; i++)
				d[i] = -INFINITY;
		}
	}
}

int ds_gpt_ws_bf16_matmul(const struct ds_gpt_ws *ws, char *buf, size_t n)
{
	if (ws->half != DS_HALF_BF16) {
		snprintf(buf, n, "fp32 sgemm (%s runs keep fp32 products)", ds_half_name(ws->half));
		return 0;
	}
	const int mode = ws->mm < 0 ? DS_BF16_MM_FP32 : ws->mm;
	char plan[448];
	int rc = ws->ops->mm_plan(mode, plan, sizeof plan);
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
		ws->ops->half_round(ws->half, x, (size_t)n);
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

/* bf16 runs whose products read bf16 copies: the copy of segment seg's
 * parameters (P[seg]) for its pass, where its products use one: a
 * layer's (its dense weights; experts have segments of their own) or the
 * head's.  The hook's copy; without pre hooks the workspace's own, made
 * from P[seg] in forward and kept for backward (which runs on the
 * forward's parameters); else none.  A copy that cannot be allocated is
 * done without (the products convert). */
static void copy16(const struct ds_gpt *m, struct ds_gpt_ws *ws, int seg, int phase)
{
	const int layer = seg >= 1 && seg <= m->L, head = ws->part.head && seg == m->head_seg;
	ws->w16[seg] = NULL;
	if (!layer && !head)
		return;
	if (ws->has_hooks && ws->hooks.params16) {
		ws->w16[seg] = ws->hooks.params16(ws->hooks.ctx, seg);
		return;
	}
	if (ws->has_hooks && ws->hooks.pre)
		return;
	const size_t n = (size_t)m->reg.seg[seg].numel;
	if (phase == DS_GPT_FORWARD) {
		if (!ws->own16[seg])
			ws->own16[seg] = ws->ops->alloc(n * sizeof(uint16_t) + 64);
		if (ws->own16[seg])
			ws->ops->half_pack(DS_HALF_BF16, ws->own16[seg], seg_params(ws)[seg], n);
	}
	ws->w16[seg] = ws->own16[seg];
}

/* tensor i's bf16 copy (NULL: none), as tp() */
static const uint16_t *tp16(const struct ds_gpt *m, const struct ds_gpt_ws *ws, int i)
{
	if (i < 0 || !ws->hints)
		return NULL;
	const struct ds_gpt_tensor *t = &m->reg.t[i];
	const uint16_t *b = ws->w16[t->segment];
	return b ? b + (t->offset - m->reg.seg[t->segment].offset) : NULL;
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
	if (ws->hints)
		copy16(m, ws, seg, phase);
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

/* ---- tensor-parallel collectives (the hooks') ---------------------------- */

/* sum (or max) buf[0..n) over the tensor-parallel ranks; nothing at tp 1 */
static int tp_reduce(struct ds_gpt_ws *ws, float *buf, int64_t n, int op, struct ds_err *err)
{
	if (ws->tp == 1)
		return 0;
	if (!ws->has_hooks || !ws->hooks.tp_allreduce)
		return ds_err_set(err, DS_EINVAL, "model: tensor parallelism (%d ranks) needs the tp_allreduce hook", ws->tp);
	int rc = ws->hooks.tp_allreduce(ws->hooks.ctx, buf, n, op);
	return rc < 0 ? ds_err_set(err, rc, "model: the tensor-parallel %s of %lld values failed",
				   op == DS_GPT_TP_MAX ? "max" : "sum", (long long)n) : 0;
}

/* ---- kept layer inputs (16-bit in mixed precision, 1/tp slices with
 * partition_activations) ----------------------------------------------------
 * Entry li (0 .. nl) is the input of layer l0 + li, entry nl the part's last
 * layer output (the norm's or the next stage's input).  fp32 runs without
 * partitioning write and read them in place (resid); otherwise forward works
 * in xw[] and stores each entry packed, backward loads it into lnf (free once
 * the head's gradient is taken: forward keeps its fp32 layer inputs and
 * outputs in dA and dln, which only backward uses). */

static int packed(const struct ds_gpt_ws *ws) { return ws->half != DS_HALF_NONE || ws->pa; }

/* entry li's elements (a slice with partition_activations) and offset */
static int64_t res_len(const struct ds_gpt_ws *ws, int li, int64_t NC)
{
	return ws->pa && li < ws->nl ? NC / ws->tp : NC;
}

static int64_t res_off(const struct ds_gpt_ws *ws, int li, int64_t NC)
{
	return (int64_t)li * res_len(ws, 0, NC);
}

/* whether entry li is kept whole in bf16 with layer storage: the layer
 * that writes it packs it in its residual add (layer_forward's out16),
 * and where layernorm reads it, backward reads those bits (no unpack) */
static int res16(const struct ds_gpt_ws *ws, int li, int64_t NC)
{
	return ws->ha && ws->hints && ws->half == DS_HALF_BF16 && res_len(ws, li, NC) == NC;
}

/* keep the fp32 (N,C) x as entry li (packed mode) */
static void res_store(struct ds_gpt_ws *ws, int li, const float *x, int64_t NC)
{
	const int64_t n = res_len(ws, li, NC), o = res_off(ws, li, NC);
	const float *src = x + (n < NC ? (int64_t)ws->tp_rank * n : 0);
	if (ws->half != DS_HALF_NONE)
		ws->ops->half_pack(ws->half, ws->resid16 + o, src, (size_t)n);
	else
		ws->ops->copy(ws->resid + o, src, (size_t)n * sizeof(float));
}

/* entry li as fp32 (N,C) into *x: in place, or gathered/unpacked into lnf */
static int res_load(struct ds_gpt_ws *ws, int li, int64_t NC, float **x, struct ds_err *err)
{
	if (!packed(ws)) {
		*x = ws->resid + (int64_t)li * NC;
		return 0;
	}
	const int64_t n = res_len(ws, li, NC), o = res_off(ws, li, NC);
	*x = ws->lnf;
	if (n == NC) {
		if (ws->half != DS_HALF_NONE)
			ws->ops->half_unpack(ws->half, ws->lnf, ws->resid16 + o, (size_t)NC);
		else
			ws->ops->copy(ws->lnf, ws->resid + o, (size_t)NC * sizeof(float));
		return 0;
	}
	if (!ws->has_hooks || !ws->hooks.tp_allgather)
		return ds_err_set(err, DS_EINVAL, "model: partition_activations needs the tp_allgather hook");
	int h = ws->half != DS_HALF_NONE;
	int rc = ws->hooks.tp_allgather(ws->hooks.ctx, h ? (const void *)(ws->resid16 + o) : (const void *)(ws->resid + o),
					h ? (void *)ws->g16 : (void *)ws->lnf, n, h ? 2 : 4);
	if (rc < 0)
		return ds_err_set(err, rc, "model: gathering the partitioned input of layer %d failed", ws->l0 + li);
	if (h)
		ws->ops->half_unpack(ws->half, ws->lnf, ws->g16, (size_t)NC);
	return 0;
}

/* the activations the part's layer li works in: its own (fp32 runs), the
 * one working set la[0] (checkpointing), or la[0] with its fp32 statistics */
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

/* bf16 runs whose products read bf16 copies, with 16-bit layer storage:
 * layer l's storage, which forward fills as it goes with the products'
 * inputs (ln1, qkv, att, atty, ln2, fcact: the copies those products
 * read; layer_store packs the rest) and backward's products read (every
 * layer, the last one included); NULL otherwise and in a recomputation */
static struct hacts *early16(const struct ds_gpt_ws *ws, int l)
{
	return ws->hints && ws->ha && !ws->recomputing ? &ws->ha[l - ws->l0] : NULL;
}

/* dst (n) = src in bf16, where dst is early16's storage (NULL: nothing) */
static void pack16(const struct ds_gpt_ws *ws, uint16_t *dst, const float *src, int64_t n)
{
	if (dst)
		ws->ops->half_pack(DS_HALF_BF16, dst, src, (size_t)n);
}

/* x (n) rounded to bf16 values, from src (which may be x), and its bits
 * into h, in one pass where a product's rounding pass (oneDNN's: gemm_hints
 * 2) and a pack would make two; only where ws->hints >= 2 */
static void rnd_pack(const struct ds_gpt_ws *ws, float *x, uint16_t *h, const float *src, int64_t n)
{
	ws->ops->half_round_pack(x, h, src, (size_t)n);
}

/* the gemm_hints level of attention's per-head products at B x T (0: they
 * take no copies) */
static int heads_hints(const struct ds_gpt *m, const struct ds_gpt_ws *ws, int B, int T)
{
	return m->NH ? ws->ops->gemm_hints(ws->mm, B * m->NH, T, T, m->Cq / m->NH) : 0;
}

/* x's bits into h where a product would round x in a pass of its own
 * (gemm_hints 2): with x rounded in the same pass where something reads x
 * after (f32), else the bits alone */
static void bits16(const struct ds_gpt_ws *ws, int f32, float *x, uint16_t *h, int64_t n)
{
	if (f32)
		rnd_pack(ws, x, h, x, n);
	else
		pack16(ws, h, x, n);
}

/* whether layer l (the model's index) keeps the activation's input fch in
 * its bf16 storage alone: where the activation's kernels have bf16 input
 * and output (act_forward16 packs fch as it reads it; act_backward16 reads
 * it there and writes dfch's bits for its two products), that is every
 * layer that is not MoE in a run with such copies and no tensor
 * parallelism (whose row-parallel product reads the activation in fp32) */
static int fch16(const struct ds_gpt *m, const struct ds_gpt_ws *ws, int l)
{
	return ws->hints && ws->tp == 1 && m->li[l].moe < 0;
}

/* whether a layer with bf16 storage keeps res2 (norm 2's input) there
 * alone for backward: the residual add writes its bits in forward, and
 * layernorm's backward reads them (RMSNorm's reads fp32; with the
 * parallel residual there is no res2) */
static int res2_16(const struct ds_gpt *m, const struct ds_gpt_ws *ws)
{
	return ws->hints && m->cfg.norm == DS_NORM_LAYERNORM && !m->cfg.gpt_j_residual;
}

/* whether attention's backward reads P from the layer's bf16 storage (lv:
 * gemm_hints of its per-head products): where those take copies and no
 * attention dropout reads the fp32 P */
static int p16_backward(const struct ds_gpt *m, const struct ds_gpt_ws *ws, int lv)
{
	return lv > 0 && !(ws->train && m->cfg.attention_dropout > 0);
}

/* pack (dir 0) the working activations into the part's layer l's 16-bit
 * copy, or unpack them back (dir 1); every buffer is already 16-bit
 * representable.  Forward's early16 copies are packed already, and
 * backward leaves in bf16 what only products read there, from those
 * copies (gemm_bf16.h: a product given a copy never reads the fp32
 * operand): ln1, atty, fcact, ln2 but in an MoE layer (its experts read
 * it in fp32), q k v where attention's per-head products take copies
 * (gemm_hints, as attention_backward asks), and there P too unless the
 * attention dropout reads it (p16_backward).  fch goes to bf16 in
 * forward's activation kernel, and backward's reads it there, where fch16
 * says so; res2 in forward's residual add, and norm 2's backward reads it
 * there, where res2_16 says so. */
static void layer_store(const struct ds_gpt *m, struct ds_gpt_ws *ws, int l, const struct acts *a,
			int B, int T, int dir)
{
	const struct hacts *h = &ws->ha[l];
	const int64_t N = (int64_t)B * T, C = m->C, Cq = m->Cq;
	const int bw = dir && ws->hints;
	const int lv = bw ? heads_hints(m, ws, B, T) : 0, q16 = lv > 0;
	const int ln2 = bw && m->li[ws->l0 + l].moe < 0, f16 = fch16(m, ws, ws->l0 + l), r2 = res2_16(m, ws);
	/* early: a product's input, which early16 packs in forward; bf16:
	 * backward reads it only through its copy */
	struct { uint16_t *p; float *f; int64_t n; int early, bf16; } v[] = {
		{ h->ln1, a->ln1, N * C, 1, bw }, { h->qkv, a->qkv, 3 * N * Cq, 1, q16 },
		{ h->att, a->att, (int64_t)B * m->NH * T * T, 1, p16_backward(m, ws, lv) },
		{ h->atty, a->atty, N * Cq, 1, bw },
		{ h->res2, a->res2, m->cfg.gpt_j_residual ? 0 : N * C, r2, bw && r2 }, { h->ln2, a->ln2, N * C, 1, ln2 },
		{ h->fch, a->fch, N * m->F2, f16, bw && f16 }, { h->fcact, a->fcact, N * m->F, 1, bw },
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		if (!v[i].n || (!dir && ws->hints && v[i].early) || v[i].bf16)
			continue;
		if (dir)
			ws->ops->half_unpack(ws->half, v[i].f, v[i].p, (size_t)v[i].n);
		else
			ws->ops->half_pack(ws->half, v[i].p, v[i].f, (size_t)v[i].n);
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
		ws->ops->dropout(x + (int64_t)b * T * C, (int64_t)T * C, &g[b], p);
}

/* ---- matmuls ------------------------------------------------------------ */

/* Every matrix product: cblas_sgemm's row-major arguments (NOTR/TRANS),
 * or with bt a batch of them (attention's per-(b, head) products,
 * gemm_bf16.h), through the backend's gemm (compute.h).  A bf16 workspace
 * (ws->mm >= 0) lets the backend round A and B to bf16 and accumulate in
 * fp32 as a GPU's bf16 GEMM does; the inputs are bf16 values already
 * (rounded activations and gradients, the bf16 parameter copy) but for
 * dropout-scaled attention probabilities, so mostly only the accumulation
 * order changes. */
enum { NOTR = 0, TRANS = 1 };

/* r16: the caller rounds C to bf16 values after the product.  In a bf16
 * run the product is asked to leave C rounded (DS_GEMM_BF16_CR in the
 * batch's flags: dstk's kernel rounds as it stores, the same bits as the
 * pass; other implementations run the pass themselves) and the answer is
 * 1, which spares the caller's pass over C; else 0 (the caller rounds). */
static int gemm_bt(const struct ds_gpt_ws *ws, const struct ds_gemm_bf16_batch *bt, int r16, int ta, int tb, int M,
		   int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C,
		   int ldc)
{
	if (!(r16 && ws->half == DS_HALF_BF16)) {
		ws->ops->gemm(ws->mm, bt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
		return 0;
	}
	struct ds_gemm_bf16_batch b2 = DS_GEMM_BF16_BATCH_ONE;
	if (bt)
		b2 = *bt;
	b2.flags |= DS_GEMM_BF16_CR;
	ws->ops->gemm(ws->mm, &b2, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
	return 1;
}

/* one product; a16, b16: bf16 copies of A and B (a weight's: tp16) or NULL */
static int gemm_r(const struct ds_gpt_ws *ws, int r16, int ta, int tb, int M, int N, int K, float alpha,
		  const float *A, int lda, const uint16_t *a16, const float *B, int ldb, const uint16_t *b16, float beta,
		  float *C, int ldc)
{
	struct ds_gemm_bf16_batch one = DS_GEMM_BF16_BATCH_ONE;
	one.a16 = a16;
	one.b16 = b16;
	return gemm_bt(ws, &one, r16, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

static void gemm(const struct ds_gpt_ws *ws, int ta, int tb, int M, int N, int K, float alpha, const float *A,
		 int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	ws->ops->gemm(ws->mm, NULL, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* gemm() for the head's row chunks against its one weight matrix B: same
 * says B is unchanged since the previous chunk, so its bf16 copy is reused
 * (converting GPT-2's (V, C) embedding per chunk would cost more than the
 * chunk's product).  Every chunk is planned for the first chunk's shape
 * (M0 rows), so the chunks of one product share one implementation. */
static void gemm_kb(const struct ds_gpt_ws *ws, int same, int M0, int ta, int tb, int M, int N, int K, float alpha,
		    const float *A, int lda, const uint16_t *a16, const float *B, int ldb, const uint16_t *b16, float beta,
		    float *C, int ldc)
{
	ws->ops->gemm_keep_b(ws->mm, same, M0, ta, tb, M, N, K, alpha, A, lda, B, ldb, a16, b16, beta, C, ldc);
}

/* out (N,OC) = inp (N,IC) @ w (OC,IC)^T + b (OC); r16 and the answer as
 * gemm_bt's (1: out is rounded already); inp16, w16: bf16 copies or NULL */
static int matmul_forward(const struct ds_gpt_ws *ws, int r16, float *out, const float *inp, const uint16_t *inp16,
			  const float *w, const uint16_t *w16, const float *b, int64_t N, int IC, int OC)
{
	ws->ops->bias_fill(out, b, N, OC);
	return gemm_r(ws, r16, NOTR, TRANS, (int)N, OC, IC, 1.0f, inp, IC, inp16, w, IC, w16, 1.0f, out, OC);
}

/* dinp (N,IC) writes dout @ w; dw (OC,IC) += dout^T @ inp; db (OC) += sum
 * dout; r16 and the answer as gemm_bt's, for dinp.  w16, inp16: bf16
 * copies of w and inp or NULL.  Where a copy made for both products pays
 * (gemm_hints 2), dout goes to bf16 once for both, into ws->d16, unless
 * the caller's kernel wrote it there already (dout16: ws->d16, or NULL).
 * With that copy the bias sums its bits too, so a caller that wrote
 * dout16 may leave the fp32 dout unrounded (nothing here reads it). */
static int matmul_backward(const struct ds_gpt_ws *ws, int r16, float *dinp, float *dw, float *db, const float *dout,
			   const uint16_t *dout16, const float *inp, const uint16_t *inp16, const float *w,
			   const uint16_t *w16, int64_t N, int IC, int OC)
{
	const uint16_t *d16 = dout16;
	if (!d16 && ws->hints >= 2) {
		ws->ops->half_pack(DS_HALF_BF16, ws->d16, dout, (size_t)(N * OC));
		d16 = ws->d16;
	}
	const int r = gemm_r(ws, r16, NOTR, NOTR, (int)N, IC, OC, 1.0f, dout, OC, d16, w, IC, w16, 0.0f, dinp, IC);
	struct ds_gemm_bf16_batch one = DS_GEMM_BF16_BATCH_ONE;
	one.a16 = d16;
	one.b16 = inp16;
	ws->ops->gemm(ws->mm, &one, TRANS, NOTR, OC, IC, (int)N, 1.0f, dout, OC, inp, IC, 1.0f, dw, IC);
	if (db && d16)
		ws->ops->bias_backward16(db, d16, N, OC);
	else if (db)
		ws->ops->bias_backward(db, dout, N, OC);
	return r;
}

/* bf16 runs: the element-wise kernels round their outputs as they write
 * them (the table's r16 argument: the same bits as a pass after) */
static int r16(const struct ds_gpt_ws *ws) { return ws->half == DS_HALF_BF16; }

/* the norms: 1 when out (dinp) came out rounded (r16, layernorm), else 0
 * (the caller rounds) */
static int norm_forward(const struct ds_gpt *m, const struct ds_gpt_ws *ws, float *out, float *a, float *b,
			const float *inp, const float *w, const float *bias, int64_t N)
{
	if (m->cfg.norm == DS_NORM_LAYERNORM) {
		m->ops->layernorm_forward(out, a, b, inp, w, bias, N, m->C, (float)m->cfg.layernorm_epsilon, r16(ws));
		return r16(ws);
	}
	m->ops->rmsnorm_forward(out, a, b, inp, w, N, m->C, (float)m->cfg.rms_norm_epsilon);
	return 0;
}

/* the norm's output into o16 (bf16 storage) alone, where the layernorm
 * writes it so: 1, or 0 (o16 NULL, or RMSNorm: the caller runs
 * norm_forward) */
static int norm16(const struct ds_gpt *m, const struct ds_gpt_ws *ws, uint16_t *o16, float *a, float *b,
		  const float *inp, const float *w, const float *bias, int64_t N)
{
	if (!o16 || m->cfg.norm != DS_NORM_LAYERNORM)
		return 0;
	ws->ops->layernorm_forward16(o16, a, b, inp, w, bias, N, m->C, (float)m->cfg.layernorm_epsilon);
	return 1;
}

static int norm_backward(const struct ds_gpt *m, const struct ds_gpt_ws *ws, float *dinp, float *dw, float *db,
			 const float *dout, const float *inp, const float *w, const float *a, const float *b, int64_t N)
{
	if (m->cfg.norm == DS_NORM_LAYERNORM) {
		m->ops->layernorm_backward(dinp, dw, db, dout, inp, w, a, b, N, m->C, r16(ws));
		return r16(ws);
	}
	m->ops->rmsnorm_backward(dinp, dw, dout, inp, w, a, b, N, m->C);
	return 0;
}

/* layernorm's backward with dinp's bits into d16 as well, for the products
 * that read dinp next, and/or its input read from its bits inp16 (inp
 * may be stale then): 1 when it ran so (dinp rounded), 0 where both are
 * NULL or the norm is RMSNorm (the caller runs norm_backward) */
static int norm_backward16(const struct ds_gpt *m, const struct ds_gpt_ws *ws, uint16_t *d16, float *dinp, float *dw,
			   float *db, const float *dout, const float *inp, const uint16_t *inp16, const float *w,
			   const float *a, const float *b, int64_t N)
{
	if ((!d16 && !inp16) || m->cfg.norm != DS_NORM_LAYERNORM)
		return 0;
	ws->ops->layernorm_backward16(dinp, d16, dw, db, dout, inp, inp16, w, a, b, N, m->C);
	return 1;
}


/* ---- causal self-attention --------------------------------------------- */

/* atty (N,C) = softmax(q k^T / sqrt(hs)) v per (b, head), q/k/v in qkv
 * (N,3C); att (B,NH,T,T) keeps the probabilities before dropout (with bf16
 * storage h, only where dropout or backward reads them in fp32: h has
 * them).  The products are batches over (b, head) on strided views of qkv
 * (lda 3C): one batch call to the backend (in fp32 the cpu backend shares
 * the entries out over the threads, a single-threaded sgemm each, when
 * there are at least two per thread); the softmax is one OpenMP pass over
 * all rows.  ry: the last product rounds atty (gemm_bt's r16). */
static int attention_forward(const struct ds_gpt *m, struct ds_gpt_ws *ws, struct acts *a, struct hacts *h, int l,
			     int B, int T, int ry)
{
	const int C = m->Cq, NH = m->NH, hs = C / NH, C3 = 3 * C;   /* this rank's heads: (N, 3Cq) */
	const long TT = (long)T * T, TC3 = (long)T * C3;
	const float scale = 1.0f / sqrtf((float)hs);
	const float pa = (float)m->cfg.attention_dropout;
	const int drop = ws->train && pa > 0;
	/* att[b,h] (T,T) = scale * q (T,hs) @ k (T,hs)^T */
	/* (h: the layer's bf16 storage, q k v in it already; P goes there) */
	const struct ds_gemm_bf16_batch s = { B * NH, NH, { TC3, hs }, { TC3, hs }, { NH * TT, TT },
					    DS_GEMM_BF16_C_LOWER, 0, h ? h->qkv : NULL, h ? h->qkv + C : NULL };
	gemm_bt(ws, &s, 0, NOTR, TRANS, T, T, hs, scale, a->qkv, C3, a->qkv + C, C3, 0.0f, a->att, T);
	if (h) {   /* (with bf16 storage: P's copy written as the softmax goes, and
		    * P in fp32 only where dropout or backward reads it there) */
		const int lv = heads_hints(m, ws, B, T);   /* as attention_backward asks */
		ws->ops->causal_softmax_forward16(a->att, h->att, B, NH, T, drop || !p16_backward(m, ws, lv));
	} else {
		ws->ops->causal_softmax_forward(a->att, B, NH, T, r16(ws));
		if (!r16(ws))
			rnd(ws, a->att, (int64_t)B * NH * T * T);   /* the probabilities are stored in 16 bits */
	}
	if (drop)
		ws->ops->attention_dropout_h0(ws->attd, a->att, B, NH, m->h0, T, pa, streams(ws, B, l + 1, 1));
	const float *P = drop ? ws->attd : a->att;
	/* atty[b,:,h] (T,hs) = P[b,h] (T,T) @ v (T,hs) */
	const struct ds_gemm_bf16_batch y = { B * NH, NH, { NH * TT, TT }, { TC3, hs }, { (long)T * C, hs },
					     DS_GEMM_BF16_A_LOWER, 0, h && !drop ? h->att : NULL, h ? h->qkv + 2 * C : NULL };
	return gemm_bt(ws, &y, ry, NOTR, NOTR, T, hs, T, 1.0f, P, T, a->qkv + 2 * C, C3, 0.0f, a->atty, C);
}

/* dqkv (N,3C) writes the gradient of q, k, v from datty (N,C); rq16: the
 * caller rounds it, and the answer says whether the products did (as
 * gemm_bt's).  ry: datty is rounded already, else it is rounded here
 * where its products read it in fp32.  h16: the layer's bf16 storage
 * (NULL: none), copies of q, k, v and P the products read; where copies
 * made for two products pay, datty goes to bf16 once (d16) for its two
 * products (which read those bits alone), and the scores'
 * gradient once into h16's P, whose last reader has run by then.  Where
 * the products take copies and there is no dropout (p16_backward), the
 * softmax's backward reads P from h16 too (layer_store leaves it there)
 * and rounds dP as it reads it. */
static int attention_backward(const struct ds_gpt *m, struct ds_gpt_ws *ws, const struct acts *a,
			      const struct hacts *h16, int l, int B, int T, int rq16, int ry)
{
	const int C = m->Cq, NH = m->NH, hs = C / NH, C3 = 3 * C;   /* this rank's heads: (N, 3Cq) */
	const long TT = (long)T * T, TC3 = (long)T * C3, TC = (long)T * C;
	const float scale = 1.0f / sqrtf((float)hs);
	const float pa = (float)m->cfg.attention_dropout;
	const int drop = ws->train && pa > 0;
	if (drop)   /* the dropped probabilities again, from the same keys */
		ws->ops->attention_dropout_h0(ws->attd, a->att, B, NH, m->h0, T, pa, streams(ws, B, l + 1, 1));
	const float *P = a->att;
	/* the heads' products read the storage's q, k, v and P (level 1), and
	 * where copies made for two products pay (2) datty's and dS's */
	const int lv = h16 ? heads_hints(m, ws, B, T) : 0;   /* as layer_store asks */
	const uint16_t *dy16 = NULL, *q16 = lv ? h16->qkv : NULL, *p16 = lv && !drop ? h16->att : NULL;
	uint16_t *ds16 = lv >= 2 ? h16->att : NULL;
	const int pb = p16_backward(m, ws, lv);
	if (lv >= 2) {   /* (the two products read datty's bits alone) */
		pack16(ws, ws->d16, ws->datty, (int64_t)B * T * C);
		dy16 = ws->d16;
	} else if (!ry) {
		rnd(ws, ws->datty, (int64_t)B * T * C);
	}
	/* per (b, h): datt (T,T) = dy (T,hs) @ v (T,hs)^T;  dv (T,hs) = P'^T (T,T) @ dy (T,hs) */
	const struct ds_gemm_bf16_batch dp = { B * NH, NH, { TC, hs }, { TC3, hs }, { NH * TT, TT },
					     DS_GEMM_BF16_C_LOWER, 0, dy16, q16 ? q16 + 2 * C : NULL };
	const int rp = gemm_bt(ws, &dp, !pb, NOTR, TRANS, T, T, hs, 1.0f, ws->datty, C, a->qkv + 2 * C, C3, 0.0f,
			       ws->datt, T);
	const struct ds_gemm_bf16_batch dv = { B * NH, NH, { NH * TT, TT }, { TC, hs }, { TC3, hs },
					     DS_GEMM_BF16_A_UPPER, 0, p16, dy16 };
	int rq = gemm_bt(ws, &dv, rq16, TRANS, NOTR, T, hs, T, 1.0f, drop ? ws->attd : P, T, ws->datty, C, 0.0f,
			 ws->dqkv + 2 * C, C3);
	if (pb) {   /* dP rounded as read, dS to ds16 (or datt) */
		ws->ops->causal_softmax_backward16(ws->datt, h16->att, ds16, B, NH, T, scale);
	} else {
		if (!rp)
			rnd(ws, ws->datt, (int64_t)B * NH * T * T);   /* the probabilities' gradient */
		ws->ops->causal_softmax_backward_h0(ws->datt, P, B, NH, m->h0, T, scale, drop ? pa : 0.0f,
						    drop ? streams(ws, B, l + 1, 1) : NULL, r16(ws));
		if (!r16(ws))
			rnd(ws, ws->datt, (int64_t)B * NH * T * T);   /* the scores' gradient */
		pack16(ws, ds16, ws->datt, (int64_t)B * NH * T * T);
	}
	/* per (b, h): dq (T,hs) = dS (T,T) @ k (T,hs);  dk (T,hs) = dS^T (T,T) @ q (T,hs) */
	const struct ds_gemm_bf16_batch dq = { B * NH, NH, { NH * TT, TT }, { TC3, hs }, { TC3, hs },
					     DS_GEMM_BF16_A_LOWER, 0, ds16, q16 ? q16 + C : NULL };
	rq &= gemm_bt(ws, &dq, rq16, NOTR, NOTR, T, hs, T, 1.0f, ws->datt, T, a->qkv + C, C3, 0.0f, ws->dqkv, C3);
	const struct ds_gemm_bf16_batch dk = { B * NH, NH, { NH * TT, TT }, { TC3, hs }, { TC3, hs },
					     DS_GEMM_BF16_A_UPPER, 0, ds16, q16 };
	rq &= gemm_bt(ws, &dk, rq16, TRANS, NOTR, T, hs, T, 1.0f, ws->datt, T, a->qkv, C3, 0.0f, ws->dqkv + C, C3);
	return rq;
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

/* out (N,OC) = inp (N,IC) @ w (OC,IC)^T + b of a row-parallel product
 * (attn.c_proj, mlp.c_proj): with tensor parallelism this rank's partial
 * sum over its IC inputs, summed over the ranks, and the replicated bias
 * added after the sum (Megatron's RowParallelLinear) */
static int rowpar_forward(struct ds_gpt_ws *ws, float *out, const float *inp, const uint16_t *inp16, const float *w,
			  const uint16_t *w16, const float *b, int64_t N, int IC, int OC, struct ds_err *err)
{
	if (ws->tp == 1) {
		matmul_forward(ws, 0, out, inp, inp16, w, w16, b, N, IC, OC);
		return 0;
	}
	gemm(ws, NOTR, TRANS, (int)N, OC, IC, 1.0f, inp, IC, w, IC, 0.0f, out, OC);
	DS_TRY(tp_reduce(ws, out, N * OC, DS_GPT_TP_SUM, err));
	if (b)
		ws->ops->bias_add(out, b, N, OC);
	return 0;
}

/* out (N,C) = layer l of x (N,C), and out's bf16 bits into out16 where not
 * NULL (res16); activations into a.  0, a collective's failure or an MoE
 * layer's (ws->lerr). */
static int layer_forward(const struct ds_gpt *m, struct ds_gpt_ws *ws, int l, struct acts *a,
			 float *out, uint16_t *out16, const float *x, int B, int T, struct ds_err *err)
{
	const struct layer_ix *ix = &m->li[l];
	float **P = seg_params(ws);
	const int64_t N = (int64_t)B * T;
	const int C = m->C, Cq = m->Cq, NH = m->NH, F = m->F, F2 = m->F2;
	const float ph = (float)m->cfg.hidden_dropout;
	const int gptj = m->cfg.gpt_j_residual;
	struct hacts *h = early16(ws, l);

	/* (with bf16 storage the products' inputs ln1, ln2 and the activation
	 * go there alone where their kernels can: only products read them,
	 * from the copy; ln2 stays fp32 too in an MoE layer, whose experts
	 * read it, and the activation with tensor parallelism, whose
	 * row-parallel product reads fp32) */
	if (!norm16(m, ws, h ? h->ln1 : NULL, a->ln1_a, a->ln1_b, x, tp(m, P, ix->ln1w), tp(m, P, ix->ln1b), N)) {
		if (!norm_forward(m, ws, a->ln1, a->ln1_a, a->ln1_b, x, tp(m, P, ix->ln1w), tp(m, P, ix->ln1b), N))
			rnd(ws, a->ln1, N * C);
		pack16(ws, h ? h->ln1 : NULL, a->ln1, N * C);
	}
	/* column-parallel: this rank's heads' [q | k | v] */
	/* (products that round their output as they store it spare a pass;
	 * where they would round in a pass of their own (hints 2), q k v and
	 * atty go to bf16 in one pass, fq, rounded there only where something
	 * reads them in fp32 after: q k v where backward's per-head products
	 * take no copies (the last layer's reads a->qkv), atty with tensor
	 * parallelism (the row-parallel product)) */
	const int fq = h && ws->hints >= 2;
	if (!matmul_forward(ws, !m->rd && !fq, a->qkv, a->ln1, h ? h->ln1 : NULL, tp(m, P, ix->qkvw),
			    tp16(m, ws, ix->qkvw), tp(m, P, ix->qkvb), N, C, 3 * Cq)) {
		if (m->rd)
			ws->ops->rotary(a->qkv, ws->rcos, ws->rsin, B, T, Cq, NH, m->rd, 0);
		if (fq)
			bits16(ws, !heads_hints(m, ws, B, T), a->qkv, h->qkv, 3 * N * Cq);
		else
			rnd(ws, a->qkv, 3 * N * Cq);
	}
	if (!fq)
		pack16(ws, h ? h->qkv : NULL, a->qkv, 3 * N * Cq);
	if (!attention_forward(m, ws, a, h, l, B, T, !fq)) {
		if (fq)
			bits16(ws, ws->tp > 1, a->atty, h->atty, N * Cq);
		else
			rnd(ws, a->atty, N * Cq);
	}
	if (!fq)
		pack16(ws, h ? h->atty : NULL, a->atty, N * Cq);
	/* attention branch -> res2 (sequential) or out (parallel) */
	float *ab = gptj ? out : a->res2;
	DS_TRY(rowpar_forward(ws, ab, a->atty, h ? h->atty : NULL, tp(m, P, ix->projw), tp16(m, ws, ix->projw),
			      tp(m, P, ix->projb), N, Cq, C, err));
	dropout_btc(ws, ab, B, T, C, l + 1, 2, ph);
	if (h && res2_16(m, ws))   /* (res2's bits for backward's norm, as it is written) */
		ws->ops->add16(ab, h->res2, ab, x, N * C);
	else
		ws->ops->add(ab, ab, x, N * C, r16(ws));
	if (!r16(ws))
		rnd(ws, ab, N * C);
	const float *hin = gptj ? x : a->res2;
	if (!norm16(m, ws, h && ix->moe < 0 ? h->ln2 : NULL, a->ln2_a, a->ln2_b, hin, tp(m, P, ix->ln2w),
		    tp(m, P, ix->ln2b), N)) {
		if (!norm_forward(m, ws, a->ln2, a->ln2_a, a->ln2_b, hin, tp(m, P, ix->ln2w), tp(m, P, ix->ln2b), N))
			rnd(ws, a->ln2, N * C);
		pack16(ws, h ? h->ln2 : NULL, a->ln2, N * C);
	}
	float *mb = ws->dM;   /* scratch (N,C): MLP branch */
	if (ix->moe >= 0) {
		int rc = moe_layer_forward(m, ws, l, a->ln2, mb, B, T);
		if (rc < 0)
			return ds_err_set(err, rc, "%s", ws->lerr.msg);
	} else {
		/* (act_forward16 rounds fch as it reads it: fc's product need not,
		 * where it would in a pass of its own) */
		const int f16 = h && fch16(m, ws, l);
		if (!matmul_forward(ws, !(f16 && ws->hints >= 2), a->fch, a->ln2, h ? h->ln2 : NULL, tp(m, P, ix->fcw),
				    tp16(m, ws, ix->fcw), tp(m, P, ix->fcb), N, C, F2) &&
		    !f16)
			rnd(ws, a->fch, N * F2);
		if (f16) {
			ws->ops->act_forward16(h->fcact, h->fch, a->fch, N, F, m->cfg.activation);
		} else {
			ws->ops->act_forward(a->fcact, a->fch, N, F, m->cfg.activation, r16(ws));
			if (!r16(ws))
				rnd(ws, a->fcact, N * F);
			pack16(ws, h ? h->fcact : NULL, a->fcact, N * F);
		}
		DS_TRY(rowpar_forward(ws, mb, a->fcact, h ? h->fcact : NULL, tp(m, P, ix->fcpw), tp16(m, ws, ix->fcpw),
				      tp(m, P, ix->fcpb), N, F, C, err));
	}
	dropout_btc(ws, mb, B, T, C, l + 1, 3, ph);
	/* out = x + attn + mlp (gptj), or res2 + mlp; its bits to out16 too
	 * where not NULL */
	if (out16)
		ws->ops->add16(out, out16, gptj ? out : a->res2, mb, N * C);
	else
		ws->ops->add(out, gptj ? out : a->res2, mb, N * C, r16(ws));
	if (!r16(ws))
		rnd(ws, out, N * C);   /* the layer boundary */
	return 0;
}

/* dres (N,C): on entry d loss / d out of layer l, on return d loss / d x
 * (the residual stream's gradient, updated in place); parameter gradients
 * accumulate into the segment's grads.  x (N,C) is the layer's input, or
 * x16 its bf16 bits (x then NULL: only layernorm 1 reads it, res16).
 * Tensor parallelism: the input gradients of the column-parallel products
 * (c_fc, c_attn) are this rank's part, summed over the ranks before the
 * norms take them (Megatron's copy_to_tensor_model_parallel_region).
 * 0, a collective's failure or an MoE layer's (ws->lerr). */
static int layer_backward(const struct ds_gpt *m, struct ds_gpt_ws *ws, int l, const struct acts *a,
			  float *dres, const float *x, const uint16_t *x16, int B, int T, struct ds_err *err)
{
	const struct layer_ix *ix = &m->li[l];
	float **P = seg_params(ws), **G = seg_grads(m, ws);
	const int64_t N = (int64_t)B * T;
	const int C = m->C, Cq = m->Cq, NH = m->NH, F = m->F, F2 = m->F2;
	const float ph = (float)m->cfg.hidden_dropout;
	const int gptj = m->cfg.gpt_j_residual;
	const size_t nc = (size_t)(N * C) * sizeof(float);
	int dln16 = 0;   /* dln came out of its product rounded */
	/* the layer's bf16 storage (early16): copies of the products' inputs */
	const struct hacts *h16 = early16(ws, l);

	/* mixed precision: every activation gradient is rounded to 16 bits
	 * where an op of a GPU run would store it, so a scaled fp16 gradient
	 * overflows inside the layer where it would there */
	/* out = h + drop(mlp): dM = drop(dout) */
	/* (where the c_proj products take dM's copy, hints 2, its bits are
	 * written instead of the copy, dm16: nothing reads dM in fp32 then) */
	uint16_t *dm16 = ws->hints >= 2 && ix->moe < 0 ? ws->d16 : NULL;
	const int dropm = ws->train && ph > 0, have16 = ws->dres16;
	ws->dres16 = 0;
	if (dropm || !dm16)
		ws->ops->copy(ws->dM, dres, nc);
	dropout_btc(ws, ws->dM, B, T, C, l + 1, 3, ph);
	if (!dm16)
		rnd(ws, ws->dM, N * C);
	else if (dropm || !have16)   /* (else the norm above wrote dres's bits there) */
		pack16(ws, dm16, dropm ? ws->dM : dres, N * C);
	if (gptj) {   /* out = x + drop(attn) + drop(mlp): both branches see dout */
		ws->ops->copy(ws->dA, dres, nc);
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
			return ds_err_set(err, rc, "%s", ws->lerr.msg);
	} else {
		/* (act_backward16 rounds dfcact as it reads it: the product need
		 * not, where it would in a pass of its own) */
		const int fb = h16 && fch16(m, ws, l);
		if (!matmul_backward(ws, !(fb && ws->hints >= 2), ws->dfcact, tp(m, G, ix->fcpw), tp(m, G, ix->fcpb),
				     ws->dM, dm16, a->fcact, h16 ? h16->fcact : NULL, tp(m, P, ix->fcpw),
				     tp16(m, ws, ix->fcpw), N, F, C) &&
		    !fb)
			rnd(ws, ws->dfcact, N * F);
		/* (with the activation's input in bf16 alone, fch16: dfch's bits
		 * for both products come from the same pass) */
		uint16_t *df16 = NULL;
		if (fb) {
			df16 = ws->hints >= 2 ? ws->d16 : NULL;
			ws->ops->act_backward16(ws->dfch, df16, ws->dfcact, h16->fch, N, F, m->cfg.activation);
		} else {
			ws->ops->act_backward(ws->dfch, ws->dfcact, a->fch, N, F, m->cfg.activation, r16(ws));
			if (!r16(ws))
				rnd(ws, ws->dfch, N * F2);
		}
		dln16 = matmul_backward(ws, ws->tp == 1, ws->dln, tp(m, G, ix->fcw), tp(m, G, ix->fcb), ws->dfch, df16,
					a->ln2, h16 ? h16->ln2 : NULL, tp(m, P, ix->fcw), tp16(m, ws, ix->fcw), N, C, F2);
		DS_TRY(tp_reduce(ws, ws->dln, N * C, DS_GPT_TP_SUM, err));
	}
	if (!dln16)
		rnd(ws, ws->dln, N * C);
	const float *h = gptj ? x : a->res2;
	/* (where c_proj's products read dA's bits, hints 2, and dA is dres2
	 * itself, the norm writes them as it writes dres2: da16) */
	uint16_t *da16 = ws->hints >= 2 && !gptj && !(ws->train && ph > 0) ? ws->d16 : NULL;
	if (!norm_backward16(m, ws, da16, dres, tp(m, G, ix->ln2w), tp(m, G, ix->ln2b), ws->dln, h,
			     h16 && res2_16(m, ws) ? h16->res2 : NULL, tp(m, P, ix->ln2w), a->ln2_a, a->ln2_b, N)) {
		da16 = NULL;
		if (!norm_backward(m, ws, dres, tp(m, G, ix->ln2w), tp(m, G, ix->ln2b), ws->dln, h, tp(m, P, ix->ln2w),
				   a->ln2_a, a->ln2_b, N))
			rnd(ws, dres, N * C);
	}
	/* res2 = x + drop(attn): dA = drop(dres2); without dropout dres2
	 * itself, rounded just above, read until norm1 adds to it */
	const float *dA = ws->dA;
	if (!gptj && ws->train && ph > 0) {
		ws->ops->copy(ws->dA, dres, nc);
		dropout_btc(ws, ws->dA, B, T, C, l + 1, 2, ph);
		rnd(ws, ws->dA, N * C);
	} else if (!gptj) {
		dA = dres;
	}
	/* attention: atty @ c_proj, attention, rotary, ln1 @ c_attn, norm1 */
	/* (where products round in a pass of their own, hints 2, datty goes to
	 * bf16 in attention_backward, and dqkv here for c_attn's products and
	 * bias: fk; each then read through its bits alone) */
	const int fk = h16 && ws->hints >= 2;
	const int ry = matmul_backward(ws, !fk, ws->datty, tp(m, G, ix->projw), tp(m, G, ix->projb), dA, da16, a->atty,
				       h16 ? h16->atty : NULL, tp(m, P, ix->projw), tp16(m, ws, ix->projw), N, Cq, C);
	if (!attention_backward(m, ws, a, h16, l, B, T, !m->rd && !fk, ry)) {
		if (m->rd)
			ws->ops->rotary(ws->dqkv, ws->rcos, ws->rsin, B, T, Cq, NH, m->rd, 1);
		if (fk)
			pack16(ws, ws->d16, ws->dqkv, 3 * N * Cq);
		else
			rnd(ws, ws->dqkv, 3 * N * Cq);
	}
	dln16 = matmul_backward(ws, ws->tp == 1, ws->dln, tp(m, G, ix->qkvw), tp(m, G, ix->qkvb), ws->dqkv,
				fk ? ws->d16 : NULL, a->ln1, h16 ? h16->ln1 : NULL, tp(m, P, ix->qkvw),
				tp16(m, ws, ix->qkvw), N, C, 3 * Cq);
	DS_TRY(tp_reduce(ws, ws->dln, N * C, DS_GPT_TP_SUM, err));
	if (!dln16)
		rnd(ws, ws->dln, N * C);
	/* (dres's bits for the layer below's c_proj products, where they read
	 * bits: dres16) */
	uint16_t *dr16 = ws->hints >= 2 ? ws->d16 : NULL;
	if (norm_backward16(m, ws, dr16, dres, tp(m, G, ix->ln1w), tp(m, G, ix->ln1b), ws->dln, x, x16,
			    tp(m, P, ix->ln1w), a->ln1_a, a->ln1_b, N))
		ws->dres16 = dr16 != NULL;
	else if (!norm_backward(m, ws, dres, tp(m, G, ix->ln1w), tp(m, G, ix->ln1b), ws->dln, x, tp(m, P, ix->ln1w),
				a->ln1_a, a->ln1_b, N))
		rnd(ws, dres, N * C);   /* the layer boundary */
	return 0;
}

/* bf16 runs whose head products go to dstk's kernel keep the logits and
 * their gradient in bf16 from the product to the loss and back: each of
 * the three products runs once over the whole batch (no fp32 row chunks,
 * no rounding or packing passes, one pass over the head's gradient).  The
 * backend's token for gemm16, or 0 for the chunked fp32 path (which the
 * vocabulary-parallel loss of tensor parallelism always takes). */
static int head16(const struct ds_gpt_ws *ws, int N, int V, int C)
{
	if (ws->half != DS_HALF_BF16 || ws->mm < 0 || ws->tp > 1)
		return 0;
	return ws->ops->head16(ws->mm, N, V, C);
}

/* logits rows [r0, r0+n) into out (n,Vp) = lnf @ head^T, rounded to 16
 * bits in mixed precision; the padding columns are -inf (with tensor
 * parallelism this rank's Vp columns, V of them valid) */
static void head_rows(const struct ds_gpt *m, const struct ds_gpt_ws *ws, float *out, int64_t r0,
		      int64_t n, const float *head)
{
	const int V = m->V, Vp = m->Vp, C = m->C;
	if (V > 0)
		gemm_kb(ws, r0 > 0, (int)(ws->half != DS_HALF_NONE ? ws->hrows : n), NOTR, TRANS, (int)n, V,
			C, 1.0f, ws->lnf + r0 * C, C, NULL, head, C, tp16(m, ws, m->head), 0.0f, out, Vp);
	rnd(ws, out, n * Vp);
	if (Vp > V)
		ws->ops->fill_cols(out, n, Vp, V, Vp, -INFINITY);
}

/* ---- whole model ------------------------------------------------------- */

/* the loss terms of rows [r0, r0+n) of a vocabulary-parallel head, first
 * half: this rank's row max and target logit (chunk (n,Vp) in rows) */
static void vp_first(const struct ds_gpt *m, struct ds_gpt_ws *ws, const float *chunk, const int32_t *targets,
		     int64_t r0, int64_t n, int64_t N)
{
	ws->ops->xent_vp_max(ws->vp + r0, ws->vp + N + r0, chunk, targets + r0, m->v0, n, m->V, m->Vp);
}

/* forward's logits and loss sum (targets may be NULL) of the N rows of lnf */
static int head_forward(const struct ds_gpt *m, struct ds_gpt_ws *ws, const float *head, const int32_t *targets,
			int64_t N, double *sum, struct ds_err *err)
{
	const int V = m->V, Vp = m->Vp, C = m->C, hp = ws->half != DS_HALF_NONE, vpar = m->tp > 1 && targets;
	*sum = 0;
	/* bf16 logits of the whole batch in one product (head16; never with
	 * vpar), in dense rows of V (oneDNN's AMX kernel takes no others) */
	const int h16 = head16(ws, (int)N, V, C);
	const int whole = h16 &&
			  ws->ops->gemm16(h16, DS_GEMM_BF16_C16, 0, 1, (int)N, V, C, 1.0f, ws->lnf, C, head, C,
					  tp16(m, ws, m->head), 0.0f, ws->logits16, V) == 0;
	ws->ld16 = whole ? V : Vp;
	ws->whole16 = whole;
	if (whole)
		*sum = ws->ops->xent_forward16(ws->lse, ws->logits16, targets, N, V, V);
	if (!hp) {
		head_rows(m, ws, ws->logits, 0, N, head);
		if (targets && !vpar)
			*sum = ws->ops->xent_forward(ws->lse, ws->logits, targets, N, V, Vp);
		else if (vpar)
			vp_first(m, ws, ws->logits, targets, 0, N, N);
	}
	for (int64_t r0 = 0; hp && !whole && r0 < N; r0 += ws->hrows) {
		/* 16-bit logits: hrows at a time in fp32, the loss's terms
		 * added in the unchunked kernel's order */
		const int64_t n = N - r0 < ws->hrows ? N - r0 : ws->hrows;
		head_rows(m, ws, ws->hchunk, r0, n, head);
		if (targets && !vpar && !ws->ops->host) {   /* the chunk's sum (lse, hchunk are the device's) */
			*sum += ws->ops->xent_forward(ws->lse + r0, ws->hchunk, targets + r0, n, V, Vp);
		} else if (targets && !vpar) {
			ws->ops->xent_forward(ws->lse + r0, ws->hchunk, targets + r0, n, V, Vp);
			for (int64_t i = 0; i < n; i++)
				*sum += (double)ws->lse[r0 + i] - (double)ws->hchunk[i * Vp + targets[r0 + i]];
		} else if (vpar) {
			vp_first(m, ws, ws->hchunk, targets, r0, n, N);
		}
		ws->ops->half_pack(ws->half, ws->logits16 + r0 * Vp, ws->hchunk, (size_t)(n * Vp));
	}
	if (!vpar)
		return 0;
	/* vocabulary-parallel: the row max and the target's logit over all
	 * ranks, then every rank's exp-sum against that max */
	float *mx = ws->vp, *pred = ws->vp + N, *se = ws->vp + 2 * N;
	DS_TRY(tp_reduce(ws, mx, N, DS_GPT_TP_MAX, err));
	DS_TRY(tp_reduce(ws, pred, N, DS_GPT_TP_SUM, err));
	if (!hp)
		ws->ops->xent_vp_sumexp(se, ws->logits, mx, N, V, Vp);
	for (int64_t r0 = 0; hp && r0 < N; r0 += ws->hrows) {
		const int64_t n = N - r0 < ws->hrows ? N - r0 : ws->hrows;
		ws->ops->half_unpack(ws->half, ws->hchunk, ws->logits16 + r0 * Vp, (size_t)(n * Vp));
		ws->ops->xent_vp_sumexp(se + r0, ws->hchunk, mx + r0, n, V, Vp);
	}
	DS_TRY(tp_reduce(ws, se, N, DS_GPT_TP_SUM, err));
	for (int64_t i = 0; i < N; i++) {
		ws->lse[i] = (float)(mx[i] + log((double)se[i]));
		*sum += (double)ws->lse[i] - (double)pred[i];
	}
	return 0;
}

int ds_gpt_forward(const struct ds_gpt *m, struct ds_gpt_ws *ws, const float *params,
		   const int32_t *tokens, const int32_t *targets, int B, int T, int64_t step,
		   int64_t sample_offset, int train, float *loss, struct ds_err *err)
{
	return ds_gpt_forward_part(m, ws, params, tokens, NULL, targets, B, T, step, sample_offset, train, NULL, loss,
				   err);
}

int ds_gpt_forward_part(const struct ds_gpt *m, struct ds_gpt_ws *ws, const float *params, const int32_t *tokens,
			const float *x_in, const int32_t *targets, int B, int T, int64_t step, int64_t sample_offset,
			int train, float *x_out, float *loss, struct ds_err *err)
{
	const struct ds_gpt_part *pt = &ws->part;
	if (B < 1 || T < 1 || B > ws->Bmax || T > ws->Tmax)
		return ds_err_set(err, DS_EINVAL, "model: batch %dx%d outside the workspace's %dx%d", B, T,
				  ws->Bmax, ws->Tmax);
	if ((pt->embed && !tokens) || (!pt->embed && !x_in) || (!pt->head && !x_out))
		return ds_err_set(err, DS_EINVAL, "model: this part's forward needs %s", pt->embed && !tokens ? "tokens"
				  : !pt->embed && !x_in ? "the previous stage's activation" : "an output buffer");
	const int64_t N = (int64_t)B * T;
	const int C = m->C, L = m->L, Vg = m->cfg.vocab_size;
	for (int64_t i = 0; i < N; i++) {
		if (pt->embed && (tokens[i] < 0 || tokens[i] >= Vg))
			return ds_err_set(err, DS_EINVAL, "model: token id %d at sample %lld position %lld is outside the vocabulary [0, %d)",
					  tokens[i], (long long)(sample_offset + i / T), (long long)(i % T), Vg);
		if (pt->head && targets && (targets[i] < 0 || targets[i] >= Vg))
			return ds_err_set(err, DS_EINVAL, "model: target id %d at sample %lld position %lld is outside the vocabulary [0, %d)",
					  targets[i], (long long)(sample_offset + i / T), (long long)(i % T), Vg);
	}
	ds_progress_note();  /* the hang watchdog counts micro-batches as progress */
	ws->have_fwd = 0;
	ws->B = B;
	ws->T = T;
	if (ws->hints && ws->ha && (ws->zB != B || ws->zT != T)) {
		/* the softmax's bf16 entries write each row's causal part only:
		 * the zeros above the diagonal, which P and dS share, once per
		 * shape */
		for (int l = 0; l < ws->nl; l++)
			ws->ops->zero(ws->ha[l].att, (size_t)B * m->NH * T * T * sizeof(uint16_t));
		ws->zB = B;
		ws->zT = T;
	}
	ws->step = step;
	ws->sample_offset = sample_offset;
	ws->train = train;
	ws->ckpt_layer = -1;
	if (pt->embed)
		ws->ops->from_host(ws->tok, tokens, (size_t)N * sizeof(int32_t));
	float **P = seg_params(ws);
	const int tied = !m->cfg.no_weight_tying;
	const int pk = packed(ws);
	const int64_t NC = N * C;

	/* the part's input: the embeddings, or the previous stage's output */
	float *x0 = pk ? ws->xw[0] : ws->resid;
	if (pt->embed) {
		DS_TRY(hook_pre(m, ws, 0, DS_GPT_FORWARD, params, NULL, err));
		const float *pos = m->wpe >= 0 ? tp(m, P, m->wpe)
			: m->cfg.pos_emb == DS_POS_SINUSOIDAL ? ws->spos : NULL;
		if (m->tp > 1) {   /* vocabulary-parallel: this rank's rows, summed */
			ws->ops->vocab_embed_forward(x0, ws->tok, tp(m, P, m->wte), m->v0, m->Vp, B, T, C);
			DS_TRY(tp_reduce(ws, x0, NC, DS_GPT_TP_SUM, err));
			if (pos)
				ws->ops->pos_add(x0, pos, B, T, C);
		} else {
			ws->ops->embed_forward(x0, ws->tok, tp(m, P, m->wte), pos, B, T, C);
		}
		dropout_btc(ws, x0, B, T, C, 0, 0, (float)m->cfg.hidden_dropout);
		rnd(ws, x0, NC);
		if (!(tied && pt->head))   /* a tied head keeps segment 0 open */
			DS_TRY(hook_post(ws, 0, DS_GPT_FORWARD, err));
	} else {
		ws->ops->copy(x0, x_in, (size_t)NC * sizeof(float));
	}
	if (pk)
		res_store(ws, 0, x0, NC);

	/* layers */
	if (ws->moe && !ws->recomputing)
		ds_moe_stats_reset(ws->moe);
	for (int li = 0; li < ws->nl; li++) {
		const int l = ws->l0 + li, es = m->reg.expert_seg[l];
		DS_TRY(hook_pre(m, ws, l + 1, DS_GPT_FORWARD, params, NULL, err));
		if (es >= 0)
			DS_TRY(hook_pre(m, ws, es, DS_GPT_FORWARD, params, NULL, err));
		struct acts a = layer_acts(ws, li);
		float *x = pk ? ws->xw[li & 1] : ws->resid + (int64_t)li * NC;
		float *out = pk ? ws->xw[(li + 1) & 1] : ws->resid + (int64_t)(li + 1) * NC;
		uint16_t *o16 = res16(ws, li + 1, NC) ? ws->resid16 + res_off(ws, li + 1, NC) : NULL;
		DS_TRY(layer_forward(m, ws, l, &a, out, o16, x, B, T, err));
		if (es >= 0)
			DS_TRY(hook_post(ws, es, DS_GPT_FORWARD, err));
		if (pk && !o16)
			res_store(ws, li + 1, out, NC);
		if (ws->ha && li < ws->nl - 1)   /* the last layer stays in la[0] for backward */
			layer_store(m, ws, li, &a, B, T, 0);
		DS_TRY(hook_post(ws, l + 1, DS_GPT_FORWARD, err));
	}
	ws->ckpt_layer = (ws->ckpt || ws->ha) && ws->nl ? ws->l0 + ws->nl - 1 : -1;

	/* final norm */
	const float *xf = pk ? ws->xw[ws->nl & 1] : ws->resid + (int64_t)ws->nl * NC;
	if (pt->norm) {
		const int ns = L + 1;
		DS_TRY(hook_pre(m, ws, ns, DS_GPT_FORWARD, params, NULL, err));
		if (!norm_forward(m, ws, ws->lnf, ws->lnf_a, ws->lnf_b, xf, tp(m, P, m->lnfw), tp(m, P, m->lnfb), N))
			rnd(ws, ws->lnf, N * C);
		DS_TRY(hook_post(ws, ns, DS_GPT_FORWARD, err));
	}
	if (!pt->head) {   /* a stage's output */
		ws->ops->copy(x_out, pt->norm ? ws->lnf : xf, (size_t)NC * sizeof(float));
		DS_TRY(ws->ops->check(err));
		ws->have_fwd = 1;
		return 0;
	}
	if (!pt->norm)   /* a head-only stage: its input is the normed stream */
		ws->ops->copy(ws->lnf, xf, (size_t)NC * sizeof(float));

	/* head and loss */
	const int hs = m->head_seg;
	if (!(tied && pt->embed))
		DS_TRY(hook_pre(m, ws, hs, DS_GPT_FORWARD, params, NULL, err));
	double sum = 0;
	if (targets)   /* the backend's copy, read by the loss and kept for backward */
		ws->ops->from_host(ws->tgt, targets, (size_t)N * sizeof(int32_t));
	DS_TRY(head_forward(m, ws, tp(m, P, m->head), targets ? ws->tgt : NULL, N, &sum, err));
	DS_TRY(hook_post(ws, hs, DS_GPT_FORWARD, err));
	DS_TRY(ws->ops->check(err));

	if (targets) {
		if (loss)
			*loss = (float)(sum / (double)N);
		ws->have_fwd = 1;
	}
	return 0;
}

int ds_gpt_backward(const struct ds_gpt *m, struct ds_gpt_ws *ws, const float *params,
		    float *grads, float scale, struct ds_err *err)
{
	return ds_gpt_backward_part(m, ws, params, grads, NULL, NULL, scale, err);
}

/* backward of the head: dln (N,C) = the gradient of its input (summed over
 * the tensor-parallel ranks), the head's gradient accumulated */
static int head_backward(const struct ds_gpt *m, struct ds_gpt_ws *ws, float **P, float **G, float scale, int64_t N,
			 struct ds_err *err)
{
	const int V = m->V, Vp = m->Vp, C = m->C;
	const int hp = ws->half != DS_HALF_NONE;
	const int64_t R = hp ? ws->hrows : N;   /* 16-bit logits: hrows at a time */
	const int h16 = head16(ws, (int)N, V, C), ld = ws->ld16;   /* ld: the forward's rows */
	if (h16)   /* dlogits in bf16, in place */
		ws->ops->xent_backward16(ws->logits16, ws->lse, ws->tgt, N, V, ld, scale / (float)N);
	const int whole = h16 &&
			  ws->ops->gemm16(h16, DS_GEMM_BF16_A16, 0, 0, (int)N, C, V, 1.0f, ws->logits16, ld,
					  tp(m, P, m->head), C, tp16(m, ws, m->head), 0.0f, ws->dln, C) == 0 &&
			  ws->ops->gemm16(h16, DS_GEMM_BF16_A16, 1, 0, V, C, (int)N, 1.0f, ws->logits16, ld, ws->lnf, C,
					  NULL, 1.0f, tp(m, G, m->head), C) == 0;
	for (int64_t r0 = 0; !whole && r0 < N; r0 += R) {
		const int64_t n = N - r0 < R ? N - r0 : R;
		float *dl = hp ? ws->hchunk : ws->logits;
		if (hp && ld == Vp) {
			ws->ops->half_unpack(ws->half, dl, ws->logits16 + r0 * Vp, (size_t)(n * Vp));
		} else if (hp) {   /* dense rows: the V columns the products read */
			for (int64_t i = 0; i < n; i++)
				ws->ops->half_unpack(ws->half, dl + i * Vp, ws->logits16 + (r0 + i) * ld, (size_t)V);
		}
		if (!h16) {
			if (m->tp > 1)
				ws->ops->xent_vp_backward(dl, ws->lse + r0, ws->tgt + r0, m->v0, n, V, Vp,
							   scale / (float)N);
			else
				ws->ops->xent_backward(dl, ws->lse + r0, ws->tgt + r0, n, V, Vp, scale / (float)N);
			rnd(ws, dl, n * Vp);   /* dlogits: a scaled fp16 value overflows to inf here */
		}
		/* dlnf (n,C) = dlogits[:, :V] @ head[:V]; dhead[:V] += dlogits^T @ lnf */
		if (V == 0) {
			ws->ops->zero(ws->dln + r0 * C, (size_t)(n * C) * sizeof(float));
			continue;
		}
		/* where the products read bf16 copies, the chunk's dlogits go back
		 * to its (consumed) 16-bit rows once for both */
		const uint16_t *dl16 = NULL;
		if (ws->hints >= 2 && hp && ld == Vp) {
			ws->ops->half_pack(DS_HALF_BF16, ws->logits16 + r0 * Vp, dl, (size_t)(n * Vp));
			dl16 = ws->logits16 + r0 * Vp;
		}
		gemm_kb(ws, r0 > 0, (int)R, NOTR, NOTR, (int)n, C, V, 1.0f, dl, Vp, dl16,
			tp(m, P, m->head), C, tp16(m, ws, m->head), 0.0f, ws->dln + r0 * C, C);
		struct ds_gemm_bf16_batch one = DS_GEMM_BF16_BATCH_ONE;
		one.a16 = dl16;
		ws->ops->gemm(ws->mm, &one, TRANS, NOTR, V, C, (int)n, 1.0f, dl, Vp, ws->lnf + r0 * C, C, 1.0f,
			      tp(m, G, m->head), C);
	}
	/* column-parallel input: the ranks' parts of dlnf summed */
	DS_TRY(tp_reduce(ws, ws->dln, N * C, DS_GPT_TP_SUM, err));
	rnd(ws, ws->dln, N * C);
	return 0;
}

int ds_gpt_backward_part(const struct ds_gpt *m, struct ds_gpt_ws *ws, const float *params, float *grads,
			 const float *dy, float *dx, float scale, struct ds_err *err)
{
	const struct ds_gpt_part *pt = &ws->part;
	if (!ws->have_fwd)
		return ds_err_set(err, DS_EINVAL, "model: backward needs a forward with targets first");
	if ((!pt->head && !dy) || (!pt->embed && !dx))
		return ds_err_set(err, DS_EINVAL, "model: this part's backward needs %s",
				  !dy ? "the next stage's gradient" : "a buffer for its input's gradient");
	ds_progress_note();
	ws->have_fwd = 0;
	ws->dres16 = 0;
	const int B = ws->B, T = ws->T, C = m->C, L = m->L;
	const int64_t N = (int64_t)B * T, NC = N * C;
	ws->bscale = scale;   /* the MoE layers weight their aux loss's gradient by it */
	const int tied = !m->cfg.no_weight_tying;
	float **P = seg_params(ws), **G = seg_grads(m, ws);

	/* head: dlogits = scale/N (softmax - onehot) */
	if (pt->head) {
		const int hs = m->head_seg;
		DS_TRY(hook_pre(m, ws, hs, DS_GPT_BACKWARD, params, grads, err));
		DS_TRY(head_backward(m, ws, P, G, scale, N, err));
		if (!(tied && pt->embed))   /* a tied head of a whole model: segment 0 closes after the embeddings */
			DS_TRY(hook_post(ws, hs, DS_GPT_BACKWARD, err));
	} else if (pt->norm) {
		ws->ops->copy(ws->dln, dy, (size_t)NC * sizeof(float));
	}
	/* final norm */
	if (pt->norm) {
		const int ns = L + 1;
		float *xf;
		DS_TRY(hook_pre(m, ws, ns, DS_GPT_BACKWARD, params, grads, err));
		DS_TRY(res_load(ws, ws->nl, NC, &xf, err));
		ws->ops->zero(ws->dresid, (size_t)NC * sizeof(float));
		uint16_t *dr16 = ws->hints >= 2 ? ws->d16 : NULL;   /* (as layer_backward's norm 1) */
		if (norm_backward16(m, ws, dr16, ws->dresid, tp(m, G, m->lnfw), tp(m, G, m->lnfb), ws->dln, xf, NULL,
				    tp(m, P, m->lnfw), ws->lnf_a, ws->lnf_b, N))
			ws->dres16 = dr16 != NULL;
		else if (!norm_backward(m, ws, ws->dresid, tp(m, G, m->lnfw), tp(m, G, m->lnfb), ws->dln, xf,
					tp(m, P, m->lnfw), ws->lnf_a, ws->lnf_b, N))
			rnd(ws, ws->dresid, NC);
		DS_TRY(hook_post(ws, ns, DS_GPT_BACKWARD, err));
	} else {
		ws->ops->copy(ws->dresid, pt->head ? ws->dln : dy, (size_t)NC * sizeof(float));
	}

	/* layers, last first; with checkpointing recompute each from its input,
	 * with 16-bit storage unpack each into the working set */
	for (int li = ws->nl - 1; li >= 0; li--) {
		const int l = ws->l0 + li, es = m->reg.expert_seg[l];
		float *x = NULL;
		DS_TRY(hook_pre(m, ws, l + 1, DS_GPT_BACKWARD, params, grads, err));
		if (es >= 0)
			DS_TRY(hook_pre(m, ws, es, DS_GPT_BACKWARD, params, grads, err));
		/* (the input's bits where only layernorm 1 reads it, res16: the
		 * parallel residual's norm 2 reads it in fp32) */
		const uint16_t *x16 = res16(ws, li, NC) && m->cfg.norm == DS_NORM_LAYERNORM && !m->cfg.gpt_j_residual
					      ? ws->resid16 + res_off(ws, li, NC) : NULL;
		if (!x16)
			DS_TRY(res_load(ws, li, NC, &x, err));
		struct acts a = layer_acts(ws, li);
		if (ws->ckpt && ws->ckpt_layer != l) {
			double t0 = ds_now();
			/* the output goes to scratch: the kept one is no longer needed */
			ws->recomputing = 1;
			int lrc = layer_forward(m, ws, l, &a, ws->dqkv, NULL, x, B, T, err);
			ws->recomputing = 0;
			DS_TRY(lrc);
			ws->ckpt_layer = l;
			ws->recompute_s += ds_now() - t0;
		} else if (ws->ha && ws->ckpt_layer != l) {
			layer_store(m, ws, li, &a, B, T, 1);
			ws->ckpt_layer = l;
		}
		DS_TRY(layer_backward(m, ws, l, &a, ws->dresid, x, x16, B, T, err));   /* rounds dresid */
		if (es >= 0)
			DS_TRY(hook_post(ws, es, DS_GPT_BACKWARD, err));
		DS_TRY(hook_post(ws, l + 1, DS_GPT_BACKWARD, err));
	}

	/* embeddings, or the gradient the previous stage receives */
	if (!pt->embed) {
		ws->ops->copy(dx, ws->dresid, (size_t)NC * sizeof(float));
		return ws->ops->check(err);
	}
	if (!(tied && pt->head))
		DS_TRY(hook_pre(m, ws, 0, DS_GPT_BACKWARD, params, grads, err));
	dropout_btc(ws, ws->dresid, B, T, C, 0, 0, (float)m->cfg.hidden_dropout);
	float *dpos = m->wpe >= 0 ? tp(m, G, m->wpe) : NULL;
	if (m->tp > 1)
		ws->ops->vocab_embed_backward(tp(m, G, m->wte), dpos, ws->dresid, ws->tok, m->v0, m->Vp, B, T, C);
	else
		ws->ops->embed_backward(tp(m, G, m->wte), dpos, ws->dresid, ws->tok, B, T, C);
	DS_TRY(ws->ops->check(err));
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
