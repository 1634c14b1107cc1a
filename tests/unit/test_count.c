/* test_count.c - lib/model/count against spec/deepspeed-tools.md's cases
 * (Linear, SDPA, LayerNorm, softmax), GPT-2 124M's published parameter count
 * (124,439,808 with Hugging Face's 50257 vocabulary), the seed's BERT-Large
 * table (336.23 M params, 3139.93 G MACs), closed forms worked by hand, and
 * the parameter count of the GPT the trainer really builds (lib/model/gpt).
 */
#include "unit.h"

#include <string.h>

#include "model/count.h"
#include "model/gpt.h"

static void test_linear(void **state)
{
	struct ds_count_op op;
	/* spec case 9: Linear(1024->4096) on x[8,128,1024] */
	ds_count_linear(8 * 128, 1024, 4096, 1, &op);
	assert_int_equal(op.macs, 4294967296LL);
	assert_int_equal(op.flops, 8589934592LL);
	assert_int_equal(op.params, 4198400);
	assert_int_equal(op.attn_macs, 0);
	/* the seed's BERT check: 80*128*1024^2 */
	ds_count_linear(80 * 128, 1024, 1024, 1, &op);
	assert_int_equal(op.macs, 10737418240LL);
}

static void test_attention(void **state)
{
	struct ds_count_op op;
	/* spec case 10: q, k, v all [2,16,128,64] */
	ds_count_attention(2, 16, 128, 128, 64, 64, &op);
	assert_int_equal(op.macs, 67108864);
	assert_int_equal(op.flops, 134217728);
	assert_int_equal(op.attn_macs, op.macs);
	assert_int_equal(op.params, 0);
}

static void test_norm_softmax_embedding(void **state)
{
	struct ds_count_op op;
	/* spec case 11 */
	ds_count_layernorm(8 * 128 * 1024, 1024, 1, &op);
	assert_int_equal(op.flops, 5242880);
	assert_int_equal(op.macs, 0);
	assert_int_equal(op.params, 2048);
	ds_count_layernorm(8 * 128 * 1024, 1024, 0, &op);
	assert_int_equal(op.flops, 4194304);
	ds_count_elementwise(8LL * 16 * 128 * 128, &op);   /* softmax */
	assert_int_equal(op.flops, 2097152);
	assert_int_equal(op.macs, 0);
	ds_count_embedding(50257, 768, &op);
	assert_int_equal(op.flops, 0);
	assert_int_equal(op.macs, 0);
	assert_int_equal(op.params, 50257 * 768);
}

static void gpt2_small(struct ds_model_config *m, int divisible)
{
	memset(m, 0, sizeof(*m));
	m->family = DS_FAMILY_GPT;
	m->num_layers = 12;
	m->hidden_size = 768;
	m->num_attention_heads = 12;
	m->seq_length = 1024;
	m->max_position_embeddings = 1024;
	m->vocab_size = 50257;
	m->make_vocab_size_divisible_by = divisible;
	m->layernorm_epsilon = 1e-5;
}

static void test_gpt2_params(void **state)
{
	struct ds_model_config m;
	struct ds_count c = DS_COUNT_INIT;
	struct ds_count_opts o = { 1, 1024, DS_COUNT_CURRENT, 0, 1, NULL };
	struct ds_err err = DS_ERR_INIT;

	gpt2_small(&m, 1);                   /* Hugging Face: vocabulary 50257, tied */
	assert_int_equal(ds_count_model(&m, &o, &c, &err), 0);
	assert_int_equal(c.nodes[0].total.params, 124439808);
	assert_string_equal(c.nodes[0].cls, "GPTLMHeadModel");
	/* lm_head sees the tied weight; the root counts it once */
	int head = -1;
	char path[128];
	for (int i = 0; i < c.n; i++)
		if (!strcmp(ds_count_path(&c, i, path, sizeof(path)), "lm_head"))
			head = i;
	assert_true(head > 0);
	assert_int_equal(c.nodes[head].total.params, 50257 * 768);
	assert_int_equal(c.nodes[head].depth, 1);
	ds_count_release(&c);

	gpt2_small(&m, 128);                 /* padded to 50304 */
	assert_int_equal(ds_count_model(&m, &o, &c, &err), 0);
	assert_int_equal(c.nodes[0].total.params, 124439808 + 47 * 768);
	ds_count_release(&c);

	m.no_weight_tying = 1;               /* untied head: a second 50304 x 768 */
	assert_int_equal(ds_count_model(&m, &o, &c, &err), 0);
	assert_int_equal(c.nodes[0].total.params, 124439808 + 47 * 768 + 50304LL * 768);
	ds_count_release(&c);
}

/* Forward flops per token of a GPT, written out by hand:
 * Linear MACs 12C^2 per layer + C*Vp (head), attention matmuls 2*T*C per
 * layer, element-wise: two layer norms 10C, softmax NH*T, gelu 4C, two
 * residual adds 2C per layer; the position add C and ln_f 5C once. */
static double gpt_flops_per_token(double L, double C, double NH, double T, double Vp)
{
	return 2 * (L * (12 * C * C + 2 * T * C) + C * Vp) + L * (10 * C + NH * T + 4 * C + 2 * C) +
	       C + 5 * C;
}

static void test_gpt2_flops(void **state)
{
	struct ds_model_config m;
	struct ds_count c = DS_COUNT_INIT;
	struct ds_count_opts o = { 4, 1024, DS_COUNT_CURRENT, 0, 1, NULL };
	struct ds_err err = DS_ERR_INIT;

	gpt2_small(&m, 128);
	assert_int_equal(ds_count_model(&m, &o, &c, &err), 0);
	double want = 4 * 1024 * gpt_flops_per_token(12, 768, 12, 1024, 50304);
	assert_true((double)c.nodes[0].total.flops == want);
	/* attention matmuls reported apart: 2*B*T*T*C per layer */
	assert_int_equal(c.nodes[0].total.attn_macs, 12LL * 2 * 4 * 1024 * 1024 * 768);
	ds_count_release(&c);

	struct ds_count_totals t;
	assert_int_equal(ds_count_train_flops(&m, 4, 1024, 1.0, &t, &err), 0);
	assert_int_equal(t.params, 124475904);
	assert_true(t.fwd_flops_per_token == gpt_flops_per_token(12, 768, 12, 1024, 50304));
	assert_true(t.train_flops_step == 4.0 * t.fwd_flops_step);
}

static void test_gpt_variants(void **state)
{
	struct ds_model_config m;
	struct ds_count c = DS_COUNT_INIT;
	struct ds_count_opts o = { 2, 32, DS_COUNT_CURRENT, 0, 1, NULL };
	struct ds_err err = DS_ERR_INIT;

	/* rotary, rmsnorm, swiglu, intermediate 96, untied: params by hand */
	memset(&m, 0, sizeof(m));
	m.family = DS_FAMILY_GPT;
	m.num_layers = 2;
	m.hidden_size = 64;
	m.num_attention_heads = 4;
	m.max_position_embeddings = 32;
	m.vocab_size = 256;
	m.make_vocab_size_divisible_by = 128;
	m.pos_emb = DS_POS_ROTARY;
	m.rotary_pct = 0.25;
	m.norm = DS_NORM_RMSNORM;
	m.activation = DS_ACT_SWIGLU;
	m.intermediate_size = 96;
	m.no_weight_tying = 1;
	assert_int_equal(ds_count_model(&m, &o, &c, &err), 0);
	long long C = 64, I = 96, V = 256;
	long long layer = C + (C * 3 * C + 3 * C) + (C * C + C) + C + (C * 2 * I + 2 * I) + (I * C + C);
	assert_int_equal(c.nodes[0].total.params, V * C + 2 * layer + C + V * C);
	ds_count_release(&c);

	/* a sequence longer than the learned position table is an input error */
	gpt2_small(&m, 128);
	o.seq = 2048;
	assert_int_equal(ds_count_model(&m, &o, &c, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "max_position_embeddings"));
	o.seq = 32;
	m.num_attention_heads = 7;
	assert_int_equal(ds_count_model(&m, &o, &c, &err), DS_EINVAL);
}

/* Every gpt option: the tree's params equal the trainer's flat buffer. */
static void test_gpt_matches_registry(void **state)
{
	static const int pos[] = { DS_POS_LEARNED, DS_POS_ROTARY, DS_POS_SINUSOIDAL };
	static const int act[] = { DS_ACT_GELU, DS_ACT_GEGLU, DS_ACT_SWIGLU, DS_ACT_GELU_EXACT, DS_ACT_GEGLU_EXACT };
	struct ds_count_opts o = { 1, 16, DS_COUNT_CURRENT, 0, 1, NULL };
	struct ds_err err = DS_ERR_INIT;
	for (int v = 0; v < 3 * 5 * 2 * 2 * 2; v++) {
		struct ds_model_config m;
		struct ds_count c = DS_COUNT_INIT;
		struct ds_gpt *g = NULL;
		memset(&m, 0, sizeof(m));
		m.num_layers = 3;
		m.hidden_size = 32;
		m.num_attention_heads = 4;
		m.seq_length = 16;
		m.max_position_embeddings = 16;
		m.vocab_size = 100;
		m.make_vocab_size_divisible_by = 64;
		m.rotary_pct = 0.5;
		m.rotary_emb_base = 10000;
		m.layernorm_epsilon = 1e-5;
		m.rms_norm_epsilon = 1e-8;
		m.init_method_std = 0.02;
		m.pos_emb = pos[v % 3];
		m.activation = act[v / 3 % 5];
		m.norm = v / 15 % 2 ? DS_NORM_RMSNORM : DS_NORM_LAYERNORM;
		m.no_weight_tying = v / 30 % 2;
		m.gpt_j_residual = v / 60 % 2;
		m.intermediate_size = v % 2 ? 48 : 0;
		assert_int_equal(ds_gpt_create(&g, &m, &err), 0);
		assert_int_equal(ds_count_model(ds_gpt_config(g), &o, &c, &err), 0);
		assert_int_equal(c.nodes[0].total.params, ds_gpt_num_params(g));
		ds_count_release(&c);
		ds_gpt_destroy(g);
	}
}

static void bert_large(struct ds_model_config *m)
{
	memset(m, 0, sizeof(*m));
	m->family = DS_FAMILY_BERT;
	m->num_layers = 24;
	m->hidden_size = 1024;
	m->num_attention_heads = 16;
	m->max_position_embeddings = 512;
	m->vocab_size = 30522;
	m->make_vocab_size_divisible_by = 8;   /* 30528, as NVIDIA's BERT pads it */
	m->type_vocab_size = 2;
	m->layernorm_epsilon = 1e-12;
}

static void test_bert_large_seed(void **state)
{
	struct ds_model_config m;
	struct ds_count c = DS_COUNT_INIT;
	/* the seed's run: batch 80, sequence 128; its MLM decoder saw 1159
	 * masked positions (36.23 GMACs / (1024 x 30528)) */
	struct ds_count_opts o = { 80, 128, DS_COUNT_LEGACY, 1159, 1, NULL };
	struct ds_err err = DS_ERR_INIT;

	bert_large(&m);
	assert_int_equal(ds_count_model(&m, &o, &c, &err), 0);
	/* 24 x 12,596,224 + embeddings 31,789,056 + pooler 1,049,600 + heads
	 * 32,344,898 - the tied decoder weight 31,260,672 */
	assert_int_equal(c.nodes[0].total.params, 336232258);
	/* 3092.88 G encoder + 0.08 G pooler + 46.97 G heads = 3139.93 G */
	assert_int_equal(c.nodes[0].total.macs, 3139932356608LL);
	assert_int_equal(c.nodes[0].total.flops, 2 * 3139932356608LL);
	assert_int_equal(c.nodes[0].total.attn_macs, 0);
	char path[128];
	for (int i = 0; i < c.n; i++) {
		ds_count_path(&c, i, path, sizeof(path));
		if (!strcmp(path, "bert.encoder.layer.0"))
			assert_int_equal(c.nodes[i].total.params, 12596224);
		if (!strcmp(path, "bert.encoder"))
			assert_int_equal(c.nodes[i].total.macs, 3092879769600LL);
		if (!strcmp(path, "bert.embeddings"))
			assert_int_equal(c.nodes[i].total.params, 31789056);
		if (!strcmp(path, "cls"))
			assert_int_equal(c.nodes[i].total.params, 32344898);
	}
	ds_count_release(&c);

	/* today's convention adds the attention matmuls and counts softmax as flops */
	o.convention = DS_COUNT_CURRENT;
	assert_int_equal(ds_count_model(&m, &o, &c, &err), 0);
	assert_int_equal(c.nodes[0].total.params, 336232258);
	long long attn = 24LL * 2 * 80 * 128 * 128 * 1024;
	assert_int_equal(c.nodes[0].total.attn_macs, attn);
	assert_int_equal(c.nodes[0].total.macs, 3139932356608LL - 24LL * 80 * 16 * 128 * 128 + attn);
	ds_count_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_linear),
		cmocka_unit_test(test_attention),
		cmocka_unit_test(test_norm_softmax_embedding),
		cmocka_unit_test(test_gpt2_params),
		cmocka_unit_test(test_gpt2_flops),
		cmocka_unit_test(test_gpt_variants),
		cmocka_unit_test(test_gpt_matches_registry),
		cmocka_unit_test(test_bert_large_seed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
