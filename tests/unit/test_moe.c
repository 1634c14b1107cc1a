/* test_moe.c - the MoE layer (lib/model/moe.c) against the PyTorch fixture
 * of contrib/reference/moe_reference.py (DeepSpeed's top1gating /
 * top2gating / MOELayer / PR-MoE in float64, with the random draws stored):
 * output, aux loss, capacity, which choices were dropped, every gradient
 * and the input gradient, per tensor to 1e-5.  Then the counter-based
 * draws (the same tokens get the same routing whatever the micro-batch
 * split), and the model JSON's moe section. */
#include "unit.h"

#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/model.h"
#include "model/gpt.h"
#include "model/moe.h"

static double attr_d(hid_t g, const char *name)
{
	double v = 0;
	hid_t a = H5Aopen(g, name, H5P_DEFAULT);
	assert_true(a >= 0);
	assert_true(H5Aread(a, H5T_NATIVE_DOUBLE, &v) >= 0);
	H5Aclose(a);
	return v;
}

static int attr_i(hid_t g, const char *name) { return (int)lround(attr_d(g, name)); }

static float *read_f(hid_t g, const char *path, long n)
{
	float *b = calloc((size_t)n, sizeof(float));
	hid_t d = H5Dopen2(g, path, H5P_DEFAULT);
	assert_true(d >= 0);
	hid_t s = H5Dget_space(d);
	assert_int_equal((long)H5Sget_simple_extent_npoints(s), n);
	assert_true(H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) >= 0);
	H5Sclose(s);
	H5Dclose(d);
	return b;
}

static void read_i(hid_t g, const char *path, int32_t *b, long n)
{
	hid_t d = H5Dopen2(g, path, H5P_DEFAULT);
	assert_true(d >= 0);
	assert_true(H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) >= 0);
	H5Dclose(d);
	(void)n;
}

static void check(const char *c, const char *what, const float *got, const float *want, long n, double rtol)
{
	double e;
	if (!ds_test_close(got, want, n, rtol, &e))
		fail_msg("%s: %s differs from the reference: relative error %.3g > %.0e", c, what, e, rtol);
}

/* a one-layer model config of the case's shape */
static void case_config(hid_t g, struct ds_model_config *m)
{
	ds_model_config_defaults(m);
	m->num_layers = 1;
	m->hidden_size = attr_i(g, "C");
	m->num_attention_heads = 1;
	m->seq_length = attr_i(g, "N");
	m->vocab_size = 8;
	m->intermediate_size = attr_i(g, "F");
	m->activation = attr_i(g, "act");
	ds_model_config_derive(m);
	struct ds_moe_config *mc = &m->moe;
	mc->enabled = 1;
	mc->k = attr_i(g, "k");
	mc->capacity_factor = attr_d(g, "capacity_factor");
	mc->eval_capacity_factor = attr_d(g, "eval_capacity_factor");
	mc->min_capacity = attr_i(g, "min_capacity");
	mc->drop_tokens = attr_i(g, "drop_tokens");
	mc->use_rts = attr_i(g, "use_rts");
	mc->noisy_gate_policy = attr_i(g, "noisy");
	mc->top2_2nd_expert_sampling = attr_i(g, "top2_2nd_expert_sampling");
	mc->use_residual = attr_i(g, "use_residual");
	mc->layer_experts[0] = attr_i(g, "E");
	m->no_bias_in_mlp = !attr_i(g, "use_bias_in_mlp");
}

static void run_case(const char *name)
{
	char path[1024];
	snprintf(path, sizeof path, "%s/tests/data/ref_moe.h5", DS_SRCDIR);
	hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
	if (f < 0)
		fail_msg("%s: cannot open (regenerate with contrib/reference/moe_reference.py)", path);
	hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
	assert_true(g >= 0);
	struct ds_model_config m;
	case_config(g, &m);
	const int N = attr_i(g, "N"), C = attr_i(g, "C"), F = attr_i(g, "F"), E = attr_i(g, "E"), k = attr_i(g, "k");
	const int F2 = ds_activation_gated(m.activation) ? 2 * F : F, res = m.moe.use_residual, train = attr_i(g, "train");
	const long eb = !m.no_bias_in_mlp ? F2 : 0, es = (long)F2 * C + eb + (long)C * F;
	float *x = read_f(g, "x", (long)N * C), *dout = read_f(g, "dout", (long)N * C);
	float *jit = read_f(g, "jitter", (long)N * C), *gum = read_f(g, "gumbel", (long)N * E);
	float *rts = read_f(g, "rts", (long)N * E);
	/* parameters and gradients in the registry's layout */
	float *ex = calloc((size_t)(E * es), sizeof(float)), *gex = calloc((size_t)(E * es), sizeof(float));
	float *gate = read_f(g, "params/gate", (long)E * C), *ggate = calloc((size_t)E * C, sizeof(float));
	for (int e = 0; e < E; e++) {
		char n[64];
		snprintf(n, sizeof n, "params/expert%d_fcw", e);
		float *t = read_f(g, n, (long)F2 * C);
		memcpy(ex + e * es, t, sizeof(float) * (size_t)F2 * C);
		free(t);
		if (eb) {
			snprintf(n, sizeof n, "params/expert%d_fcb", e);
			t = read_f(g, n, F2);
			memcpy(ex + e * es + (long)F2 * C, t, sizeof(float) * (size_t)F2);
			free(t);
		}
		snprintf(n, sizeof n, "params/expert%d_pw", e);
		t = read_f(g, n, (long)C * F);
		memcpy(ex + e * es + (long)F2 * C + eb, t, sizeof(float) * (size_t)C * F);
		free(t);
	}
	struct ds_moe_params p = { .gate = gate, .experts = ex }, gr = { .gate = ggate, .experts = gex };
	if (res) {
		p.fcw = read_f(g, "params/fcw", (long)F2 * C);
		p.fcb = read_f(g, "params/fcb", F2);
		p.pw = read_f(g, "params/pw", (long)C * F);
		p.coefw = read_f(g, "params/coefw", 2L * C);
		p.coefb = read_f(g, "params/coefb", 2);
		gr.fcw = calloc((size_t)F2 * C, sizeof(float));
		gr.fcb = calloc((size_t)F2, sizeof(float));
		gr.pw = calloc((size_t)C * F, sizeof(float));
		gr.coefw = calloc(2 * (size_t)C, sizeof(float));
		gr.coefb = calloc(2, sizeof(float));
	}
	struct ds_moe_ws *w;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_moe_ws_create(&w, &m, 1, 0, N, 1, 0, &err), 0);
	struct ds_moe_rand r = { .seed = 1, .T = N, .layer = 1, .jitter = jit, .gumbel = gum, .rts = rts };
	float *out = calloc((size_t)N * C, sizeof(float)), *dx = calloc((size_t)N * C, sizeof(float));
	if (ds_moe_forward(w, 0, 0, &p, x, N, train, 0, &r, NULL, out, &err) < 0)
		fail_msg("%s: forward: %s", name, err.msg);
	float *want = read_f(g, "out", (long)N * C), *aux = read_f(g, "aux", 1);
	check(name, "out", out, want, (long)N * C, 1e-5);
	float got_aux = (float)ds_moe_last_aux(w, 0);
	check(name, "aux", &got_aux, aux, 1, 1e-5);
	int32_t cap, *route = calloc((size_t)k * N, sizeof(int32_t));
	read_i(g, "capacity", &cap, 1);
	assert_int_equal(ds_moe_last_capacity(w, 0), cap);
	read_i(g, "route", route, (long)k * N);
	const int32_t *mine = ds_moe_last_route(w, 0, NULL);
	for (long i = 0; i < (long)k * N; i++)
		if (mine[i] != route[i])
			fail_msg("%s: choice %ld of token %ld: expert %d, the reference %d", name, i / N, i % N, mine[i],
				 route[i]);
	if (ds_moe_backward(w, 0, 0, &p, &gr, x, dout, (float)attr_d(g, "daux"), NULL, dx, &err) < 0)
		fail_msg("%s: backward: %s", name, err.msg);
	float *t = read_f(g, "dx", (long)N * C);
	check(name, "dx", dx, t, (long)N * C, 1e-5);
	free(t);
	t = read_f(g, "grads/gate", (long)E * C);
	check(name, "grad gate", ggate, t, (long)E * C, 1e-5);
	free(t);
	for (int e = 0; e < E; e++) {
		char n[64];
		static const char *const part[] = { "fcw", "fcb", "pw" };
		const long off[] = { 0, (long)F2 * C, (long)F2 * C + eb }, len[] = { (long)F2 * C, F2, (long)C * F };
		for (int q = 0; q < 3; q++) {
			if (q == 1 && !eb)
				continue;
			snprintf(n, sizeof n, "grads/expert%d_%s", e, part[q]);
			t = read_f(g, n, len[q]);
			check(name, n, gex + e * es + off[q], t, len[q], 1e-5);
			free(t);
		}
	}
	if (res) {
		const char *names[] = { "grads/fcw", "grads/fcb", "grads/pw", "grads/coefw", "grads/coefb" };
		float *gs[] = { gr.fcw, gr.fcb, gr.pw, gr.coefw, gr.coefb };
		const long len[] = { (long)F2 * C, F2, (long)C * F, 2L * C, 2 };
		for (int q = 0; q < 5; q++) {
			t = read_f(g, names[q], len[q]);
			check(name, names[q], gs[q], t, len[q], 1e-5);
			free(t);
		}
		free(p.fcw), free(p.fcb), free(p.pw), free(p.coefw), free(p.coefb);
		free(gr.fcw), free(gr.fcb), free(gr.pw), free(gr.coefw), free(gr.coefb);
	}
	struct ds_moe_stats st;
	ds_moe_stats_get(w, &st);
	int64_t dropped = 0;
	for (long i = 0; i < (long)k * N; i++)
		dropped += route[i] < 0;
	assert_int_equal(st.dropped, dropped);
	assert_int_equal(st.routed, (int64_t)k * N);
	ds_moe_ws_destroy(w);
	free(x), free(dout), free(jit), free(gum), free(rts), free(ex), free(gex), free(gate), free(ggate);
	free(out), free(dx), free(want), free(aux), free(route);
	H5Gclose(g);
	H5Fclose(f);
}

static void top1_rts_rsample(void **st) { (void)st; run_case("top1_rts_rsample"); }
static void top1_norts_jitter(void **st) { (void)st; run_case("top1_norts_jitter"); }
static void top2_drop(void **st) { (void)st; run_case("top2_drop"); }
static void prmoe_nodrop(void **st) { (void)st; run_case("prmoe_nodrop"); }
static void top2_eval_residual(void **st) { (void)st; run_case("top2_eval_residual"); }
static void top2_nobias(void **st) { (void)st; run_case("top2_nobias"); }

/* The keyed draws: a micro-batch of 4 samples routes each sample as the
 * same sample does in two micro-batches of 2 (global sample index keys). */
static void keyed_draws_split(void **st)
{
	(void)st;
	struct ds_model_config m;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_model_config_load_string(
				 "{\"num_layers\":1,\"hidden_size\":8,\"num_attention_heads\":1,\"seq_length\":4,"
				 "\"vocab_size\":8,\"moe\":{\"num_experts\":4,\"expert_interval\":1,\"k\":1,"
				 "\"noisy_gate_policy\":\"RSample\",\"capacity_factor\":0.5,\"min_capacity\":1}}",
				 "t", &m, &err), 0);
	const int T = 4, C = 8, F = 32, E = 4;
	const long es = (long)F * C + F + (long)C * F;
	float *x = malloc(sizeof(float) * 16 * C), gate[E * 8], *ex = calloc((size_t)(E * es), sizeof(float));
	for (int i = 0; i < 16 * C; i++)
		x[i] = sinf(0.37f * (float)i);
	for (int i = 0; i < E * C; i++)
		gate[i] = 0.05f * cosf((float)i);
	struct ds_moe_params p = { .gate = gate, .experts = ex };
	struct ds_moe_ws *w;
	assert_int_equal(ds_moe_ws_create(&w, &m, 1, 0, 16, 1, 0, &err), 0);
	float out[16 * 8];
	struct ds_moe_rand r = { .seed = 7, .step = 3, .sample_offset = 10, .T = T, .layer = 1 };
	/* capacity is per micro-batch: compare routes before dropping by
	 * making the capacity cover the batch */
	m.moe.capacity_factor = 4.0;
	ds_moe_ws_destroy(w);
	assert_int_equal(ds_moe_ws_create(&w, &m, 1, 0, 16, 1, 0, &err), 0);
	assert_int_equal(ds_moe_forward(w, 0, 0, &p, x, 16, 1, 0, &r, NULL, out, &err), 0);
	int32_t whole[16];
	memcpy(whole, ds_moe_last_route(w, 0, NULL), sizeof whole);
	int differ_from_argmax = 0;
	for (int half = 0; half < 2; half++) {
		struct ds_moe_rand rh = r;
		rh.sample_offset = 10 + 2 * half;
		assert_int_equal(ds_moe_forward(w, 0, 0, &p, x + half * 8 * C, 8, 1, 0, &rh, NULL, out, &err), 0);
		const int32_t *part = ds_moe_last_route(w, 0, NULL);
		for (int i = 0; i < 8; i++)
			assert_int_equal(part[i], whole[half * 8 + i]);
	}
	/* and the noise matters: without it some token picks another expert */
	struct ds_moe_rand rn = r;
	assert_int_equal(ds_moe_forward(w, 0, 0, &p, x, 16, 0, 0, &rn, NULL, out, &err), 0);
	for (int i = 0; i < 16; i++)
		differ_from_argmax |= ds_moe_last_route(w, 0, NULL)[i] != whole[i];
	assert_true(differ_from_argmax);
	ds_moe_ws_destroy(w);
	free(x);
	free(ex);
}

static int load(const char *json, struct ds_model_config *m, struct ds_err *err)
{
	return ds_model_config_load_string(json, "m.json", m, err);
}

#define BASE "\"num_layers\":4,\"hidden_size\":8,\"num_attention_heads\":2,\"seq_length\":4,\"vocab_size\":8"

static void config_section(void **st)
{
	(void)st;
	struct ds_model_config m, m2;
	struct ds_err err = DS_ERR_INIT;
	/* Megatron-DeepSpeed's expert_interval 2: layers 1 and 3; the pyramid */
	assert_int_equal(load("{" BASE ",\"moe\":{\"num_experts\":[4,8],\"ep_size\":2,\"k\":2}}", &m, &err), 0);
	assert_int_equal(ds_moe_experts(&m, 0), 0);
	assert_int_equal(ds_moe_experts(&m, 1), 4);
	assert_int_equal(ds_moe_experts(&m, 3), 8);
	assert_int_equal(ds_moe_num_layers(&m), 2);
	/* printed JSON loads back the same */
	char *js = ds_model_config_to_json(&m, 0);
	assert_int_equal(load(js, &m2, &err), 0);
	free(js);
	for (int l = 0; l < 4; l++)
		assert_int_equal(ds_moe_experts(&m2, l), ds_moe_experts(&m, l));
	assert_int_equal(m2.moe.k, 2);
	assert_int_equal(m2.moe.ep_size, 2);
	/* an explicit list */
	assert_int_equal(load("{" BASE ",\"moe\":{\"num_experts\":2,\"layers\":[0,2],\"noisy-gate-policy\":\"Jitter\"}}",
			      &m, &err), 0);
	assert_int_equal(ds_moe_experts(&m, 0), 2);
	assert_int_equal(ds_moe_experts(&m, 1), 0);
	assert_int_equal(m.moe.noisy_gate_policy, DS_MOE_NOISE_JITTER);
	/* errors name the key */
	static const struct { const char *moe, *msg; } bad[] = {
		{ "{\"num_experts\":[4,8,8]}", "moe.num_experts" },
		{ "{\"num_experts\":6,\"ep_size\":4}", "moe.ep_size" },
		{ "{\"num_experts\":4,\"layers\":[1],\"expert_interval\":1}", "moe.layers" },
		{ "{\"num_experts\":4,\"capacity_factr\":1}", "did you mean 'moe.capacity_factor'" },
		{ "{\"num_experts\":4,\"k\":3}", "moe.k" },
		{ "{\"num_experts\":4,\"noisy_gate_policy\":\"jitter\"}", "moe.noisy_gate_policy" },
		{ "{\"k\":1}", "moe.num_experts" },
		{ "{\"num_experts\":4,\"layers\":[7]}", "moe.layers" },
		{ "{\"num_experts\":4,\"expert_interval\":5}", "moe.expert_interval" },
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		char j[512];
		snprintf(j, sizeof j, "{" BASE ",\"moe\":%s}", bad[i].moe);
		assert_int_equal(load(j, &m, &err), DS_EINVAL);
		if (!strstr(err.msg, bad[i].msg))
			fail_msg("%s: message '%s' does not name %s", bad[i].moe, err.msg, bad[i].msg);
	}
}

/* the registry: an expert-parallel rank holds its experts, named globally */
static void registry_ep(void **st)
{
	(void)st;
	struct ds_model_config m;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(load("{" BASE ",\"moe\":{\"num_experts\":[4,8],\"ep_size\":2,\"use_residual\":true}}", &m,
			      &err), 0);
	struct ds_gpt *a, *b, *whole;
	assert_int_equal(ds_gpt_create_ep(&a, &m, 2, 0, &err), 0);
	assert_int_equal(ds_gpt_create_ep(&b, &m, 2, 1, &err), 0);
	assert_int_equal(ds_gpt_create(&whole, &m, &err), 0);
	assert_int_equal(ds_gpt_num_segments(a), 4 + 2 + 2);
	assert_int_equal(ds_gpt_num_params(a), ds_gpt_num_params(b));
	assert_true(ds_gpt_find(a, "transformer.h.3.mlp.experts.3.c_fc.weight") >= 0);
	assert_true(ds_gpt_find(a, "transformer.h.3.mlp.experts.4.c_fc.weight") < 0);
	assert_true(ds_gpt_find(b, "transformer.h.3.mlp.experts.7.c_proj.weight") >= 0);
	assert_true(ds_gpt_find(b, "transformer.h.1.mlp.coefficient.weight") >= 0);
	assert_true(ds_gpt_find(b, "transformer.h.1.mlp.c_proj.bias") < 0);   /* DeepSpeed drops it */
	assert_true(ds_gpt_expert_segment(a, 6) && !ds_gpt_expert_segment(a, 5));
	/* every expert once over the two ranks, with the whole model's count */
	int64_t ex = 0, exw = 0;
	for (int i = 0; i < ds_gpt_num_tensors(whole); i++)
		exw += ds_gpt_tensor(whole, i)->expert ? ds_gpt_tensor(whole, i)->numel : 0;
	for (int i = 0; i < ds_gpt_num_tensors(a); i++)
		ex += ds_gpt_tensor(a, i)->expert ? 2 * ds_gpt_tensor(a, i)->numel : 0;
	assert_int_equal(ex, exw);
	/* initialisation is by name: rank 1's expert 5 is the whole model's */
	int ib = ds_gpt_find(b, "transformer.h.3.mlp.experts.5.c_fc.weight"),
	    iw = ds_gpt_find(whole, "transformer.h.3.mlp.experts.5.c_fc.weight");
	const struct ds_gpt_tensor *tb = ds_gpt_tensor(b, ib), *tw = ds_gpt_tensor(whole, iw);
	float *pb = malloc(sizeof(float) * (size_t)tb->numel), *pw = malloc(sizeof(float) * (size_t)tw->numel);
	ds_gpt_init(b, 5, pb, tb->offset, tb->offset + tb->numel);
	ds_gpt_init(whole, 5, pw, tw->offset, tw->offset + tw->numel);
	assert_memory_equal(pb, pw, sizeof(float) * (size_t)tb->numel);
	free(pb);
	free(pw);
	ds_gpt_destroy(a);
	ds_gpt_destroy(b);
	ds_gpt_destroy(whole);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(top1_rts_rsample),   cmocka_unit_test(top1_norts_jitter),
		cmocka_unit_test(top2_drop),          cmocka_unit_test(prmoe_nodrop),
		cmocka_unit_test(top2_eval_residual), cmocka_unit_test(top2_nobias),
		cmocka_unit_test(keyed_draws_split),
		cmocka_unit_test(config_section),     cmocka_unit_test(registry_ep),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
