/* count.c - the module trees of the gpt and bert families with their
 * analytic counts (count.h).  The trees mirror Hugging Face's GPT2LMHeadModel
 * and BertForPreTraining so that a DeepSpeed user recognises every row; the
 * per-op formulas are DeepSpeed's (spec/deepspeed-tools.md §4).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/count.h"

void ds_count_linear(int64_t tokens, int64_t in, int64_t out, int bias, struct ds_count_op *op)
{
	op->params = in * out + (bias ? out : 0);
	op->macs = tokens * in * out;
	op->flops = 2 * op->macs;
	op->attn_macs = 0;
}

void ds_count_attention(int64_t b, int64_t nh, int64_t tq, int64_t tk, int64_t dk, int64_t dv,
			struct ds_count_op *op)
{
	op->params = 0;
	op->macs = b * nh * tq * dk * tk + b * nh * tq * tk * dv;
	op->flops = 2 * op->macs;
	op->attn_macs = op->macs;
}

void ds_count_layernorm(int64_t numel, int64_t width, int affine, struct ds_count_op *op)
{
	op->params = affine ? 2 * width : 0;
	op->macs = 0;
	op->flops = numel * (affine ? 5 : 4);
	op->attn_macs = 0;
}

void ds_count_rmsnorm(int64_t numel, int64_t width, struct ds_count_op *op)
{
	op->params = width;
	op->macs = 0;
	op->flops = numel * 4;
	op->attn_macs = 0;
}

void ds_count_elementwise(int64_t numel, struct ds_count_op *op)
{
	op->params = 0;
	op->macs = 0;
	op->flops = numel;
	op->attn_macs = 0;
}

void ds_count_embedding(int64_t rows, int64_t width, struct ds_count_op *op)
{
	op->params = rows * width;
	op->macs = 0;
	op->flops = 0;
	op->attn_macs = 0;
}

/* What kind of op, for the convention filter. */
enum op_kind { K_LINEAR, K_ATTN, K_SOFTMAX, K_ELEMENTWISE, K_PARAMS };

static void op_add(struct ds_count_op *a, const struct ds_count_op *b)
{
	a->params += b->params;
	a->macs += b->macs;
	a->flops += b->flops;
	a->attn_macs += b->attn_macs;
}

/* The builder: the tree under construction plus the first error. */
struct build {
	struct ds_count *c;
	int conv;
	int oom;
};

static int node_add(struct build *b, int parent, const char *name, const char *cls, const char *extra)
{
	struct ds_count *c = b->c;
	if (b->oom)
		return 0;
	if (c->n == c->cap) {
		int cap = c->cap ? 2 * c->cap : 64;
		struct ds_count_node *p = realloc(c->nodes, (size_t)cap * sizeof(*p));
		if (!p) {
			b->oom = 1;
			return 0;
		}
		c->nodes = p;
		c->cap = cap;
	}
	struct ds_count_node *nd = &c->nodes[c->n];
	memset(nd, 0, sizeof(*nd));
	snprintf(nd->name, sizeof(nd->name), "%s", name);
	snprintf(nd->cls, sizeof(nd->cls), "%s", cls);
	snprintf(nd->extra, sizeof(nd->extra), "%s", extra ? extra : "");
	nd->parent = parent;
	nd->depth = parent < 0 ? 0 : c->nodes[parent].depth + 1;
	if (parent >= 0)
		c->nodes[parent].nchild++;
	return c->n++;
}

/* Add op to node i's own counts as the convention sees it. */
static void own(struct build *b, int i, int kind, struct ds_count_op op)
{
	if (b->oom)
		return;
	if (b->conv == DS_COUNT_LEGACY) {
		switch (kind) {
		case K_LINEAR:
			break;
		case K_SOFTMAX:      /* DeepSpeed 0.3 returned numel and printed it as MACs */
			op.macs = op.flops;
			op.flops = 2 * op.macs;
			break;
		default:             /* attention matmuls, fused norms, bias-gelu: unseen */
			op.macs = op.flops = op.attn_macs = 0;
			break;
		}
	}
	op_add(&b->c->nodes[i].own, &op);
}

/* Leaf helpers: each adds a module with its op. */
static int linear(struct build *b, int parent, const char *name, int64_t tokens, int64_t in,
		  int64_t out, int bias)
{
	char ex[96];
	struct ds_count_op op;
	snprintf(ex, sizeof(ex), "in_features=%lld, out_features=%lld, bias=%s", (long long)in,
		 (long long)out, bias ? "True" : "False");
	int i = node_add(b, parent, name, "Linear", ex);
	ds_count_linear(tokens, in, out, bias, &op);
	own(b, i, K_LINEAR, op);
	return i;
}

static int embedding(struct build *b, int parent, const char *name, int64_t rows, int64_t width)
{
	char ex[96];
	struct ds_count_op op;
	snprintf(ex, sizeof(ex), "%lld, %lld", (long long)rows, (long long)width);
	int i = node_add(b, parent, name, "Embedding", ex);
	ds_count_embedding(rows, width, &op);
	own(b, i, K_PARAMS, op);
	return i;
}

static int norm(struct build *b, int parent, const char *name, int rms, int64_t numel, int64_t width,
		double eps)
{
	char ex[96];
	struct ds_count_op op;
	if (rms) {
		snprintf(ex, sizeof(ex), "(%lld,), eps=%g", (long long)width, eps);
		ds_count_rmsnorm(numel, width, &op);
	} else {
		snprintf(ex, sizeof(ex), "(%lld,), eps=%g, elementwise_affine=True", (long long)width, eps);
		ds_count_layernorm(numel, width, 1, &op);
	}
	int i = node_add(b, parent, name, rms ? "RMSNorm" : "LayerNorm", ex);
	own(b, i, K_ELEMENTWISE, op);
	return i;
}

static void elementwise(struct build *b, int i, int kind, int64_t numel)
{
	struct ds_count_op op;
	ds_count_elementwise(numel, &op);
	own(b, i, kind, op);
}

static int64_t padded_vocab(const struct ds_model_config *m)
{
	if (m->padded_vocab_size > 0)
		return m->padded_vocab_size;
	int64_t d = m->make_vocab_size_divisible_by > 0 ? m->make_vocab_size_divisible_by : 1;
	return (m->vocab_size + d - 1) / d * d;
}

static int64_t inter_size(const struct ds_model_config *m)
{
	return m->intermediate_size > 0 ? m->intermediate_size : 4 * (int64_t)m->hidden_size;
}

/* The MLP's ops over `tokens` tokens: c_fc, activation, c_proj (with its
 * bias or, as DeepSpeed's MoE uses an MLP, without); with tensor
 * parallelism one rank's share (1/tp of the width). */
static void mlp_ops(struct build *b, int mlp, const struct ds_model_config *m, int64_t tokens, int proj_bias,
		    int64_t tp)
{
	int64_t C = m->hidden_size, I = inter_size(m) / tp;
	int gated = ds_activation_gated(m->activation);
	linear(b, mlp, "c_fc", tokens, C, gated ? 2 * I : I, !m->no_bias_in_mlp);
	elementwise(b, mlp, K_ELEMENTWISE, tokens * I);     /* gelu / silu */
	if (gated)
		elementwise(b, mlp, K_ELEMENTWISE, tokens * I); /* gate * up */
	linear(b, mlp, "c_proj", tokens, I, C, proj_bias && !m->no_bias_in_mlp);
}

/* An MoE layer (DeepSpeed's MoE module): the gate over every token, and
 * the experts over the tokens routed to them -- k per token, counted as
 * the even share k*BT/E of each expert (capacity padding and dropped
 * tokens aside), so the MACs are top-k's, not all experts'; PR-MoE's
 * dense MLP and coefficient over every token. */
static void moe_mlp(struct build *b, int blk, int l, const struct ds_model_config *m, int64_t BT, const char *act)
{
	const int64_t C = m->hidden_size, E = ds_moe_experts(m, l), k = m->moe.k, routed = k * BT;
	char ex[160], nm[24];
	snprintf(ex, sizeof(ex), "num_experts=%lld, k=%lld, ep_size=%d, %.60s", (long long)E, (long long)k,
		 m->moe.ep_size, act);
	int moe = node_add(b, blk, "mlp", "MoE", ex);
	linear(b, moe, "gate", BT, C, E, 0);
	elementwise(b, moe, K_SOFTMAX, BT * E);
	snprintf(ex, sizeof(ex), "num_local_experts=%lld", (long long)(E / m->moe.ep_size));
	int exs = node_add(b, moe, "experts", "Experts", ex);
	for (int64_t e = 0; e < E; e++) {
		snprintf(nm, sizeof(nm), "%lld", (long long)e);
		int x = node_add(b, exs, nm, "GPTMLP", act);
		mlp_ops(b, x, m, routed * (e + 1) / E - routed * e / E, 0, 1);
	}
	if (m->moe.use_residual) {
		int r = node_add(b, moe, "residual", "GPTMLP", act);
		mlp_ops(b, r, m, BT, 0, 1);
		linear(b, moe, "coefficient", BT, C, 2, 1);
		elementwise(b, moe, K_SOFTMAX, BT * 2);
	}
}

/* Attention of one layer: q/k/v (fused or not), matmuls, softmax, output
 * proj; with tensor parallelism one rank's share (tp, count.h). */
static void gpt_layer(struct build *b, int parent, int l, const struct ds_model_config *m,
		      int64_t B, int64_t T, int64_t tp)
{
	int64_t C = m->hidden_size, hd = C / m->num_attention_heads, NH = m->num_attention_heads / tp;
	int64_t Cq = NH * hd;
	int64_t BT = B * T;
	int rms = m->norm == DS_NORM_RMSNORM;
	double eps = rms ? m->rms_norm_epsilon : m->layernorm_epsilon;
	char nm[16], ex[96];
	struct ds_count_op op;

	snprintf(nm, sizeof(nm), "%d", l);
	int blk = node_add(b, parent, nm, "GPTBlock", NULL);
	norm(b, blk, "ln_1", rms, BT * C, C, eps);

	snprintf(ex, sizeof(ex), "num_heads=%lld, head_dim=%lld%s", (long long)NH, (long long)hd,
		 m->pos_emb == DS_POS_ROTARY ? ", rotary" : "");
	int at = node_add(b, blk, "attn", "GPTAttention", ex);
	linear(b, at, "c_attn", BT, C, 3 * Cq, !m->no_bias_in_attn_linear);
	if (m->pos_emb == DS_POS_ROTARY) {
		/* q*cos + rotate_half(q)*sin on the rotated dims of q and k: 2 mul + 1 add */
		int64_t rot = (int64_t)(hd * (m->rotary_pct > 0 ? m->rotary_pct : 1.0)) & ~(int64_t)1;
		elementwise(b, at, K_ELEMENTWISE, 2 * 3 * BT * NH * rot);
	}
	ds_count_attention(B, NH, T, T, hd, hd, &op);
	own(b, at, K_ATTN, op);
	elementwise(b, at, K_SOFTMAX, B * NH * T * T);
	linear(b, at, "c_proj", BT, Cq, C, !m->no_bias_in_attn_linear);

	norm(b, blk, "ln_2", rms, BT * C, C, eps);
	static const char *const names[] = { "gelu", "geglu", "swiglu", "gelu_exact", "geglu_exact" };
	const char *act = m->activation >= 0 && m->activation < 5 ? names[m->activation] : "gelu";
	snprintf(ex, sizeof(ex), "activation=%s", act);
	if (ds_moe_experts(m, l) > 1) {
		moe_mlp(b, blk, l, m, BT, ex);
	} else {
		int mlp = node_add(b, blk, "mlp", "GPTMLP", ex);
		mlp_ops(b, mlp, m, BT, 1, tp);
	}
	/* the two residual adds (x + attn, x + mlp; parallel or sequential alike) */
	elementwise(b, blk, K_ELEMENTWISE, 2 * BT * C);
}

static void build_gpt(struct build *b, const struct ds_model_config *m, int64_t B, int64_t T, int64_t tp,
		      const struct ds_gpt_part *part)
{
	int64_t C = m->hidden_size, V = padded_vocab(m) / tp, BT = B * T;
	int rms = m->norm == DS_NORM_RMSNORM;
	struct ds_gpt_part whole = { 1, 0, m->num_layers, 1, 1 };
	const struct ds_gpt_part *p = part ? part : &whole;
	char ex[96];

	int root = node_add(b, -1, "", "GPTLMHeadModel", NULL);
	int tr = node_add(b, root, "transformer", "GPTModel", NULL);
	if (p->embed) {
		embedding(b, tr, "wte", V, C);
		if (m->pos_emb == DS_POS_LEARNED)
			embedding(b, tr, "wpe", m->max_position_embeddings, C);
		if (m->pos_emb != DS_POS_ROTARY)      /* token + position embedding add */
			elementwise(b, tr, K_ELEMENTWISE, BT * C);
	}
	snprintf(ex, sizeof(ex), "%s", m->gpt_j_residual ? "parallel_residual=True" : "");
	if (p->l1 > p->l0) {
		int h = node_add(b, tr, "h", "ModuleList", ex);
		if (!b->oom)
			b->c->nodes[h].is_list = 1;
		for (int l = p->l0; l < p->l1 && !b->oom; l++)
			gpt_layer(b, h, l, m, B, T, tp);
	}
	if (p->norm)
		norm(b, tr, "ln_f", rms, BT * C, C, rms ? m->rms_norm_epsilon : m->layernorm_epsilon);
	if (p->head)
		linear(b, root, "lm_head", BT, C, V, 0);
	if (!m->no_weight_tying && p->embed && p->head && !b->oom)
		b->c->nodes[root].dedup = V * C;  /* lm_head.weight is wte.weight */
}

static void bert_layer(struct build *b, int parent, int l, const struct ds_model_config *m,
		       int64_t B, int64_t T)
{
	int64_t C = m->hidden_size, NH = m->num_attention_heads, hd = C / NH, I = inter_size(m);
	int64_t BT = B * T;
	double eps = m->layernorm_epsilon;
	char nm[16], ex[96];
	struct ds_count_op op;

	snprintf(nm, sizeof(nm), "%d", l);
	int lay = node_add(b, parent, nm, "BertLayer", NULL);
	int att = node_add(b, lay, "attention", "BertAttention", NULL);
	snprintf(ex, sizeof(ex), "num_heads=%lld, head_dim=%lld", (long long)NH, (long long)hd);
	int self = node_add(b, att, "self", "BertSelfAttention", ex);
	linear(b, self, "query", BT, C, C, 1);
	linear(b, self, "key", BT, C, C, 1);
	linear(b, self, "value", BT, C, C, 1);
	ds_count_attention(B, NH, T, T, hd, hd, &op);
	own(b, self, K_ATTN, op);
	elementwise(b, self, K_SOFTMAX, B * NH * T * T);
	int so = node_add(b, att, "output", "BertSelfOutput", NULL);
	linear(b, so, "dense", BT, C, C, 1);
	norm(b, so, "LayerNorm", 0, BT * C, C, eps);     /* post-LN: LN(x + attn) */
	elementwise(b, so, K_ELEMENTWISE, BT * C);
	int in = node_add(b, lay, "intermediate", "BertIntermediate", NULL);
	linear(b, in, "dense", BT, C, I, 1);
	elementwise(b, in, K_ELEMENTWISE, BT * I);       /* gelu */
	int out = node_add(b, lay, "output", "BertOutput", NULL);
	linear(b, out, "dense", BT, I, C, 1);
	norm(b, out, "LayerNorm", 0, BT * C, C, eps);
	elementwise(b, out, K_ELEMENTWISE, BT * C);
}

static void build_bert(struct build *b, const struct ds_model_config *m, int64_t B, int64_t T,
		       int64_t mlm)
{
	int64_t C = m->hidden_size, V = padded_vocab(m), BT = B * T;
	double eps = m->layernorm_epsilon;
	int types = m->type_vocab_size > 0 ? m->type_vocab_size : 2;

	int root = node_add(b, -1, "", "BertForPreTraining", NULL);
	int bert = node_add(b, root, "bert", "BertModel", NULL);
	int emb = node_add(b, bert, "embeddings", "BertEmbeddings", NULL);
	embedding(b, emb, "word_embeddings", V, C);
	embedding(b, emb, "position_embeddings", m->max_position_embeddings, C);
	embedding(b, emb, "token_type_embeddings", types, C);
	norm(b, emb, "LayerNorm", 0, BT * C, C, eps);
	elementwise(b, emb, K_ELEMENTWISE, 2 * BT * C);  /* word + type + position */
	int enc = node_add(b, bert, "encoder", "BertEncoder", NULL);
	int lst = node_add(b, enc, "layer", "ModuleList", NULL);
	if (!b->oom)
		b->c->nodes[lst].is_list = 1;
	for (int l = 0; l < m->num_layers && !b->oom; l++)
		bert_layer(b, lst, l, m, B, T);
	int pool = node_add(b, bert, "pooler", "BertPooler", NULL);
	linear(b, pool, "dense", B, C, C, 1);            /* first token of each sample */
	elementwise(b, pool, K_ELEMENTWISE, B * C);      /* tanh */

	int cls = node_add(b, root, "cls", "BertPreTrainingHeads", NULL);
	int pred = node_add(b, cls, "predictions", "BertLMPredictionHead", NULL);
	int tf = node_add(b, pred, "transform", "BertPredictionHeadTransform", NULL);
	linear(b, tf, "dense", BT, C, C, 1);
	elementwise(b, tf, K_ELEMENTWISE, BT * C);       /* gelu */
	norm(b, tf, "LayerNorm", 0, BT * C, C, eps);
	linear(b, pred, "decoder", mlm, C, V, 1);        /* weight tied to word_embeddings */
	linear(b, cls, "seq_relationship", B, C, 2, 1);
	if (!b->oom)
		b->c->nodes[root].dedup = V * C;
}

/* Sum children into parents (nodes are in pre-order, so walk backwards). */
static void finish(struct ds_count *c)
{
	for (int i = 0; i < c->n; i++)
		c->nodes[i].total = c->nodes[i].own;
	for (int i = c->n - 1; i >= 0; i--) {
		struct ds_count_node *nd = &c->nodes[i];
		nd->total.params -= nd->dedup;
		if (nd->parent >= 0)
			op_add(&c->nodes[nd->parent].total, &nd->total);
	}
}

static int check_shape(const struct ds_model_config *m, const struct ds_count_opts *o,
		       struct ds_err *err)
{
	if (o->batch < 1)
		return ds_err_set(err, DS_EINVAL, "batch size %d: must be >= 1", o->batch);
	if (o->seq < 1)
		return ds_err_set(err, DS_EINVAL, "sequence length %d: must be >= 1", o->seq);
	if (m->family != DS_FAMILY_GPT && m->family != DS_FAMILY_BERT)
		return ds_err_set(err, DS_EINVAL, "model family %d: expected gpt or bert", m->family);
	if (m->num_layers < 1 || m->hidden_size < 1 || m->num_attention_heads < 1 || m->vocab_size < 1)
		return ds_err_set(err, DS_EINVAL,
				  "model: num_layers, hidden_size, num_attention_heads and vocab_size must be >= 1");
	if (m->hidden_size % m->num_attention_heads)
		return ds_err_set(err, DS_EINVAL,
				  "model: hidden_size %d is not a multiple of num_attention_heads %d",
				  m->hidden_size, m->num_attention_heads);
	int learned = m->family == DS_FAMILY_BERT || m->pos_emb == DS_POS_LEARNED;
	if (learned && o->seq > m->max_position_embeddings)
		return ds_err_set(err, DS_EINVAL,
				  "sequence length %d exceeds max_position_embeddings %d of the model",
				  o->seq, m->max_position_embeddings);
	if (o->tp > 1 && m->family == DS_FAMILY_GPT &&
	    (m->num_attention_heads % o->tp || inter_size(m) % o->tp || padded_vocab(m) % o->tp))
		return ds_err_set(err, DS_EINVAL, "tensor-parallel size %d must divide num_attention_heads %d, the MLP "
				  "width %lld and the padded vocabulary %lld", o->tp, m->num_attention_heads,
				  (long long)inter_size(m), (long long)padded_vocab(m));
	if (o->mlm_tokens < 0 || o->mlm_tokens > (int64_t)o->batch * o->seq)
		return ds_err_set(err, DS_EINVAL, "mlm tokens %lld: must be in [0, batch x seq = %lld]",
				  (long long)o->mlm_tokens, (long long)o->batch * o->seq);
	return 0;
}

int ds_count_model(const struct ds_model_config *m, const struct ds_count_opts *o,
		   struct ds_count *c, struct ds_err *err)
{
	DS_TRY(check_shape(m, o, err));
	struct ds_count nc = DS_COUNT_INIT;
	struct build b = { &nc, o->convention, 0 };
	nc.opts = *o;
	nc.family = m->family;
	if (m->family == DS_FAMILY_BERT)
		build_bert(&b, m, o->batch, o->seq,
			   o->mlm_tokens > 0 ? o->mlm_tokens : (int64_t)o->batch * o->seq);
	else
		build_gpt(&b, m, o->batch, o->seq, o->tp > 1 ? o->tp : 1, o->part);
	if (b.oom) {
		ds_count_release(&nc);
		return ds_err_set(err, DS_ENOMEM, "module tree: out of memory");
	}
	finish(&nc);
	*c = nc;
	return 0;
}

void ds_count_release(struct ds_count *c)
{
	if (!c)
		return;
	free(c->nodes);
	c->nodes = NULL;
	c->n = c->cap = 0;
}

char *ds_count_path(const struct ds_count *c, int i, char *buf, int n)
{
	int chain[64], k = 0;
	for (int j = i; j > 0 && k < 64; j = c->nodes[j].parent)
		chain[k++] = j;
	int len = 0;
	buf[0] = 0;
	while (k-- > 0 && len < n)
		len += snprintf(buf + len, (size_t)(n - len), "%s%s", len ? "." : "", c->nodes[chain[k]].name);
	return buf;
}

int ds_count_train_flops(const struct ds_model_config *m, int batch, int seq,
			 double recompute_fwd_factor, struct ds_count_totals *t, struct ds_err *err)
{
	struct ds_count c = DS_COUNT_INIT;
	struct ds_count_opts o = { batch, seq, DS_COUNT_CURRENT, 0, 1, NULL };
	DS_TRY(ds_count_model(m, &o, &c, err));
	double tokens = (double)batch * seq;
	t->params = c.nodes[0].total.params;
	t->fwd_flops_step = (double)c.nodes[0].total.flops;
	t->train_flops_step = (3.0 + recompute_fwd_factor) * t->fwd_flops_step;
	t->fwd_flops_per_token = t->fwd_flops_step / tokens;
	t->train_flops_per_token = t->train_flops_step / tokens;
	ds_count_release(&c);
	return 0;
}
