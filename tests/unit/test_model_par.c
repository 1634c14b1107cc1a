/* test_model_par.c - the model split for 3D parallelism against the whole
 * model: tensor-parallel ranks (threads whose hooks sum, max and gather
 * through shared memory) give the 1-rank loss and, put back together by
 * logical index, its gradients, for every model variant, with dropout, with
 * checkpointing and partition_activations; a planted wrong shard
 * (DS_TEST_FAULT_TP_SLICE) must not.  Pipeline parts chained by hand give
 * the whole model's loss and gradients (a tied embedding's summed over the
 * first and last stage).  The multi-process versions are tests/mpi/3d.bats.
 */
#include "unit.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/gemm_bf16.h"
#include "model/gpt.h"
#include "util/half.h"

enum { B = 2, T = 8, MAXTP = 4 };

static void cfg_base(struct ds_model_config *c)
{
	memset(c, 0, sizeof(*c));
	c->family = DS_FAMILY_GPT;
	c->num_layers = 2;
	c->hidden_size = 16;
	c->num_attention_heads = 4;
	c->intermediate_size = 32;
	c->seq_length = T;
	c->max_position_embeddings = 16;
	c->vocab_size = 20;          /* padded to 24: rank 3 of 4 holds 2 valid columns of 6 */
	c->make_vocab_size_divisible_by = 8;
	c->rotary_pct = 1.0;
	c->rotary_emb_base = 10000;
	c->layernorm_epsilon = 1e-5;
	c->rms_norm_epsilon = 1e-8;
	c->init_method_std = 0.2;    /* large: a wrong slice shows */
	c->hidden_dropout = 0.1;
	c->attention_dropout = 0.1;
}

/* GPT-2 style, NeoX style (rotary, rmsnorm, swiglu, untied, parallel
 * residual), geglu with sinusoidal positions, and the erf GeLU's gated
 * form (geglu_exact: each rank's c_fc shard holds both halves of its
 * columns, as for geglu) */
static void variant(struct ds_model_config *c, int v)
{
	cfg_base(c);
	if (v == 1) {
		c->pos_emb = DS_POS_ROTARY;
		c->rotary_pct = 0.5;
		c->norm = DS_NORM_RMSNORM;
		c->activation = DS_ACT_SWIGLU;
		c->no_weight_tying = 1;
		c->gpt_j_residual = 1;
	} else if (v == 2) {
		c->pos_emb = DS_POS_SINUSOIDAL;
		c->activation = DS_ACT_GEGLU;
	} else if (v == 3) {
		c->pos_emb = DS_POS_ROTARY;
		c->activation = DS_ACT_GEGLU_EXACT;
	}
}

static void tokens(int32_t *t, int n, int V, unsigned s)
{
	for (int i = 0; i < n; i++) {
		s = s * 1103515245u + 12345u;
		t[i] = (int32_t)((s >> 16) % (unsigned)V);
	}
}

/* loss and gradients of the whole model (flat buffer, registry order) */
static float whole(const struct ds_model_config *c, int ckpt, float **gout, struct ds_gpt **mout)
{
	struct ds_gpt *m = NULL;
	struct ds_gpt_ws *ws = NULL;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_gpt_create(&m, c, &err), 0);
	int64_t n = ds_gpt_num_params(m);
	float *p = malloc((size_t)n * sizeof(float)), *g = calloc((size_t)n, sizeof(float));
	ds_gpt_init(m, 7, p, 0, n);
	struct ds_gpt_ws_opts o = { .B = B, .T = T, .checkpointing = ckpt, .dropout_seed = 5 };
	assert_int_equal(ds_gpt_ws_create(&ws, m, &o, &err), 0);
	int32_t tok[B * T], tgt[B * T];
	tokens(tok, B * T, c->vocab_size, 1);
	tokens(tgt, B * T, c->vocab_size, 2);
	float loss = NAN;
	assert_int_equal(ds_gpt_forward(m, ws, p, tok, tgt, B, T, 3, 11, 1, &loss, &err), 0);
	assert_int_equal(ds_gpt_backward(m, ws, p, g, 1.0f, &err), 0);
	ds_gpt_ws_destroy(ws);
	free(p);
	*gout = g;
	*mout = m;
	return loss;
}

/* ---- tensor-parallel ranks as threads ----------------------------------- */

struct shared {
	int tp;
	pthread_barrier_t bar;
	float *bufs[MAXTP];
	const void *sends[MAXTP];
};

struct rank {
	struct shared *sh;
	int r, ckpt, pa, half;
	int mm, nocopies;   /* bf16: the products' mode (0: fp32 sgemm), and no bf16 copies */
	const struct ds_model_config *c;
	struct ds_gpt *m;
	float *grads;
	float loss;
	int rc;
	char msg[256];
};

static int tp_allreduce(void *ctx, float *buf, int64_t n, int op)
{
	struct rank *k = ctx;
	struct shared *sh = k->sh;
	float *tmp = malloc((size_t)n * sizeof(float));
	sh->bufs[k->r] = buf;
	pthread_barrier_wait(&sh->bar);
	for (int64_t i = 0; i < n; i++) {
		float v = sh->bufs[0][i];
		for (int q = 1; q < sh->tp; q++)
			v = op == DS_GPT_TP_MAX ? (sh->bufs[q][i] > v ? sh->bufs[q][i] : v) : v + sh->bufs[q][i];
		tmp[i] = v;
	}
	pthread_barrier_wait(&sh->bar);
	memcpy(buf, tmp, (size_t)n * sizeof(float));
	free(tmp);
	pthread_barrier_wait(&sh->bar);
	return 0;
}

static int tp_allgather(void *ctx, const void *send, void *recv, int64_t n, int eb)
{
	struct rank *k = ctx;
	struct shared *sh = k->sh;
	sh->sends[k->r] = send;
	pthread_barrier_wait(&sh->bar);
	for (int q = 0; q < sh->tp; q++)
		memcpy((char *)recv + (size_t)(q * n * eb), sh->sends[q], (size_t)(n * eb));
	pthread_barrier_wait(&sh->bar);
	return 0;
}

static void *rank_main(void *arg)
{
	struct rank *k = arg;
	struct ds_err err = DS_ERR_INIT;
	struct ds_gpt_ws *ws = NULL;
	k->rc = ds_gpt_create_tp(&k->m, k->c, k->sh->tp, k->r, &err);
	if (k->rc == 0) {
		int64_t n = ds_gpt_num_params(k->m);
		float *p = malloc((size_t)n * sizeof(float));
		k->grads = calloc((size_t)n, sizeof(float));
		ds_gpt_init(k->m, 7, p, 0, n);
		struct ds_gpt_ws_opts o = { .B = B, .T = T, .checkpointing = k->ckpt, .dropout_seed = 5,
					    .partition_activations = k->pa, .half = k->half,
					    .bf16_matmul = k->mm ? k->mm : DS_BF16_MM_FP32, .no_bf16_copies = k->nocopies };
		k->rc = ds_gpt_ws_create(&ws, k->m, &o, &err);
		struct ds_gpt_hooks h = { .ctx = k, .tp_allreduce = tp_allreduce, .tp_allgather = tp_allgather };
		int32_t tok[B * T], tgt[B * T];
		tokens(tok, B * T, k->c->vocab_size, 1);
		tokens(tgt, B * T, k->c->vocab_size, 2);
		if (k->rc == 0) {
			ds_gpt_ws_set_hooks(ws, &h);
			k->rc = ds_gpt_forward(k->m, ws, p, tok, tgt, B, T, 3, 11, 1, &k->loss, &err);
		}
		if (k->rc == 0)
			k->rc = ds_gpt_backward(k->m, ws, p, k->grads, 1.0f, &err);
		free(p);
	}
	snprintf(k->msg, sizeof k->msg, "%s", err.msg);
	ds_gpt_ws_destroy(ws);
	return NULL;
}

/* the largest relative difference, per tensor (max|a-b| / max|b|), between
 * the ranks' gradients put back at their logical indices and the whole
 * model's; every rank's copy of a replicated tensor is compared */
static double compare_grads(const struct ds_gpt *whole_m, const float *gw, struct rank *k, int tp)
{
	double worst = 0;
	for (int i = 0; i < ds_gpt_num_tensors(whole_m); i++) {
		const struct ds_gpt_tensor *w = ds_gpt_tensor(whole_m, i);
		double md = 0, mb = 0;
		for (int64_t e = 0; e < w->numel; e++)
			mb = fmax(mb, fabs(gw[w->offset + e]));
		for (int r = 0; r < tp; r++) {
			const struct ds_gpt_tensor *x = ds_gpt_tensor(k[r].m, i);
			assert_string_equal(x->name, w->name);
			for (int64_t e = 0; e < x->numel; e++) {
				int64_t g = ds_gpt_tensor_global(x, e, NULL);
				md = fmax(md, fabs((double)k[r].grads[x->offset + e] - gw[w->offset + g]));
			}
		}
		double rel = mb > 0 ? md / mb : md;
		if (rel > worst)
			worst = rel;
	}
	return worst;
}

/* tp ranks of variant v (threads) with checkpointing, partition_activations
 * and a 16-bit format half; each rank's loss and gradients into k[] */
static void run_ranks_mm(const struct ds_model_config *c, int tp, int ckpt, int pa, int half, int mm, int nocopies,
			 struct rank *k)
{
	struct shared sh = { .tp = tp };
	pthread_t th[MAXTP];
	pthread_barrier_init(&sh.bar, NULL, (unsigned)tp);
	for (int r = 0; r < tp; r++) {
		k[r] = (struct rank){ .sh = &sh, .r = r, .ckpt = ckpt, .pa = pa, .half = half, .mm = mm,
				      .nocopies = nocopies, .c = c };
		pthread_create(&th[r], NULL, rank_main, &k[r]);
	}
	for (int r = 0; r < tp; r++)
		pthread_join(th[r], NULL);
	pthread_barrier_destroy(&sh.bar);
	for (int r = 0; r < tp; r++) {
		if (k[r].rc)
			fprintf(stderr, "# rank %d: %s\n", r, k[r].msg);
		assert_int_equal(k[r].rc, 0);
	}
}

static void run_ranks(const struct ds_model_config *c, int tp, int ckpt, int pa, int half, struct rank *k)
{
	run_ranks_mm(c, tp, ckpt, pa, half, 0, 0, k);
}

/* tp ranks of variant v: *loss_err the relative loss difference, returns
 * the worst gradient difference */
static double run_tp(int v, int tp, int ckpt, int pa, double *loss_err)
{
	struct ds_model_config c;
	struct ds_gpt *wm;
	float *gw;
	variant(&c, v);
	float lw = whole(&c, 0, &gw, &wm);
	struct shared sh = { .tp = tp };
	struct rank k[MAXTP];
	pthread_t th[MAXTP];
	pthread_barrier_init(&sh.bar, NULL, (unsigned)tp);
	for (int r = 0; r < tp; r++) {
		k[r] = (struct rank){ .sh = &sh, .r = r, .ckpt = ckpt, .pa = pa, .c = &c };
		pthread_create(&th[r], NULL, rank_main, &k[r]);
	}
	for (int r = 0; r < tp; r++)
		pthread_join(th[r], NULL);
	pthread_barrier_destroy(&sh.bar);
	for (int r = 0; r < tp; r++) {
		if (k[r].rc)
			fprintf(stderr, "# rank %d: %s\n", r, k[r].msg);
		assert_int_equal(k[r].rc, 0);
		assert_true(k[r].loss == k[0].loss);   /* every rank computes the same loss */
	}
	*loss_err = fabs(k[0].loss - lw) / fabs(lw);
	double ge = compare_grads(wm, gw, k, tp);
	for (int r = 0; r < tp; r++) {
		free(k[r].grads);
		ds_gpt_destroy(k[r].m);
	}
	free(gw);
	ds_gpt_destroy(wm);
	return ge;
}

static void test_tp_variants(void **state)
{
	(void)state;
	for (int v = 0; v < 4; v++)
		for (int tp = 2; tp <= 4; tp += 2) {
			double le, ge = run_tp(v, tp, 0, 0, &le);
			printf("# variant %d tp %d: loss %.3g, gradients %.3g relative\n", v, tp, le, ge);
			assert_true(le < 1e-5);
			assert_true(ge < 1e-4);
		}
}

/* checkpointing, with and without partition_activations: the same */
static void test_tp_checkpointing(void **state)
{
	(void)state;
	for (int pa = 0; pa < 2; pa++) {
		double le, ge = run_tp(1, 2, 1, pa, &le);
		printf("# checkpointing, partition_activations %d: loss %.3g, gradients %.3g\n", pa, le, ge);
		assert_true(le < 1e-5);
		assert_true(ge < 1e-4);
	}
}

/* each of tp ranks has the same loss (finite, positive) and gradients bit
 * for bit in runs a and b; frees both */
static void same_ranks(struct rank *a, struct rank *b, int tp)
{
	for (int r = 0; r < tp; r++) {
		int64_t n = ds_gpt_num_params(a[r].m);
		assert_memory_equal(&a[r].loss, &b[r].loss, sizeof(float));
		assert_memory_equal(a[r].grads, b[r].grads, (size_t)n * sizeof(float));
		assert_true(isfinite(a[r].loss) && a[r].loss > 0);
		free(a[r].grads);
		free(b[r].grads);
		ds_gpt_destroy(a[r].m);
		ds_gpt_destroy(b[r].m);
	}
}

/* 16-bit with partition_activations: the gathered slices are the packed
 * layer inputs, so the run is bit for bit the one without partitioning */
static void test_tp_partition_half(void **state)
{
	(void)state;
	struct ds_model_config c;
	variant(&c, 1);
	for (int h = DS_HALF_FP16; h <= DS_HALF_BF16; h++) {
		struct rank a[2], b[2];
		run_ranks(&c, 2, 1, 0, h, a);
		run_ranks(&c, 2, 1, 1, h, b);
		same_ranks(a, b, 2);
	}
}

/* bf16 products on dstk's portable kernel, which reads the layer storage's
 * bf16 copies: 2 tensor-parallel ranks give each rank's loss and
 * gradients bit for bit as without copies (the row-parallel products read
 * fp32 inputs, which must then be there) */
static void test_tp_bf16_copies(void **state)
{
	(void)state;
	struct ds_model_config c;
	variant(&c, 1);
	struct rank a[2], b[2];
	run_ranks_mm(&c, 2, 0, 0, DS_HALF_BF16, DS_BF16_MM_PORTABLE, 0, a);
	run_ranks_mm(&c, 2, 0, 0, DS_HALF_BF16, DS_BF16_MM_PORTABLE, 1, b);
	same_ranks(a, b, 2);
}

/* a wrong shard (rank 1 of 2 initialised with rank 0's slice) is seen */
static void test_tp_fault(void **state)
{
	(void)state;
	setenv("DS_TEST_FAULT_TP_SLICE", "1", 1);
	double le, ge = run_tp(0, 2, 0, 0, &le);
	unsetenv("DS_TEST_FAULT_TP_SLICE");
	printf("# planted wrong slice: loss %.3g, gradients %.3g\n", le, ge);
	assert_true(le > 1e-3);
}

/* what tp does not divide is refused, naming it */
static void test_tp_refusals(void **state)
{
	(void)state;
	struct ds_model_config c;
	struct ds_gpt *m = NULL;
	struct ds_err err = DS_ERR_INIT;
	cfg_base(&c);
	assert_int_equal(ds_gpt_create_tp(&m, &c, 3, 0, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "num_attention_heads"));
	c.num_attention_heads = 8;
	c.hidden_size = 32;
	c.intermediate_size = 36;
	assert_int_equal(ds_gpt_create_tp(&m, &c, 8, 0, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "intermediate_size"));
	c.intermediate_size = 64;
	c.make_vocab_size_divisible_by = 4;   /* 20: not a multiple of 8 */
	assert_int_equal(ds_gpt_create_tp(&m, &c, 8, 0, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "padded_vocab_size"));
	assert_null(m);
}

/* ---- pipeline parts ------------------------------------------------------ */

/* chain the parts of one split through forward and backward; returns the
 * loss, gradients summed over the parts into g */
static float chain(const struct ds_gpt *m, const struct ds_gpt_part *parts, int np, int ckpt, float *g)
{
	struct ds_err err = DS_ERR_INIT;
	int64_t n = ds_gpt_num_params(m);
	const int64_t NC = (int64_t)B * T * ds_gpt_config(m)->hidden_size;
	float *p = malloc((size_t)n * sizeof(float)), *act = malloc((size_t)(np + 1) * NC * sizeof(float));
	float *gs = calloc((size_t)n * np, sizeof(float)), *d = malloc((size_t)(np + 1) * NC * sizeof(float));
	struct ds_gpt_ws *ws[8];
	ds_gpt_init(m, 7, p, 0, n);
	int32_t tok[B * T], tgt[B * T];
	tokens(tok, B * T, ds_gpt_config(m)->vocab_size, 1);
	tokens(tgt, B * T, ds_gpt_config(m)->vocab_size, 2);
	float loss = NAN;
	for (int s = 0; s < np; s++) {
		struct ds_gpt_ws_opts o = { .B = B, .T = T, .checkpointing = ckpt, .dropout_seed = 5, .part = &parts[s] };
		int rc = ds_gpt_ws_create(&ws[s], m, &o, &err);
		if (rc)
			fprintf(stderr, "# %s\n", err.msg);
		assert_int_equal(rc, 0);
		rc = ds_gpt_forward_part(m, ws[s], p, tok, s ? act + (s - 1) * NC : NULL, tgt, B, T, 3, 11, 1,
					 s < np - 1 ? act + s * NC : NULL, &loss, &err);
		if (rc)
			fprintf(stderr, "# %s\n", err.msg);
		assert_int_equal(rc, 0);
	}
	for (int s = np - 1; s >= 0; s--) {
		int rc = ds_gpt_backward_part(m, ws[s], p, gs + s * n, s < np - 1 ? d + s * NC : NULL,
					      s ? d + (s - 1) * NC : NULL, 1.0f, &err);
		if (rc)
			fprintf(stderr, "# %s\n", err.msg);
		assert_int_equal(rc, 0);
		ds_gpt_ws_destroy(ws[s]);
	}
	for (int s = 0; s < np; s++)
		for (int64_t i = 0; i < n; i++)
			g[i] += gs[s * n + i];
	free(p);
	free(act);
	free(gs);
	free(d);
	return loss;
}

static void test_pipeline_parts(void **state)
{
	(void)state;
	const int L = 2;
	/* splits of E, layer 0, layer 1, N, H as DeepSpeed may cut them */
	static const struct ds_gpt_part s2[] = { { 1, 0, 1, 0, 0 }, { 0, 1, 2, 1, 1 } };
	static const struct ds_gpt_part s4[] = { { 1, 0, 0, 0, 0 }, { 0, 0, 2, 0, 0 }, { 0, 2, 2, 1, 0 },
						 { 0, 2, 2, 0, 1 } };
	static const struct ds_gpt_part s3[] = { { 1, 0, 1, 0, 0 }, { 0, 1, 2, 1, 0 }, { 0, 2, 2, 0, 1 } };
	const struct { const struct ds_gpt_part *p; int n; } splits[] = { { s2, 2 }, { s4, 4 }, { s3, 3 } };
	for (int v = 0; v < 2; v++)
		for (int ckpt = 0; ckpt < 2; ckpt++)
			for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
				struct ds_model_config c;
				struct ds_gpt *m;
				float *gw;
				variant(&c, v);
				float lw = whole(&c, ckpt, &gw, &m);
				assert_int_equal(ds_gpt_config(m)->num_layers, L);
				int64_t n = ds_gpt_num_params(m);
				float *g = calloc((size_t)n, sizeof(float));
				float lp = chain(m, splits[k].p, splits[k].n, ckpt, g);
				double ge = 0, mb = 0;
				for (int64_t i = 0; i < n; i++) {
					ge = fmax(ge, fabs((double)g[i] - gw[i]));
					mb = fmax(mb, fabs(gw[i]));
				}
				printf("# variant %d, %d stages, checkpointing %d: loss %g vs %g, gradients %.3g\n", v,
				       splits[k].n, ckpt, lp, lw, ge / mb);
				assert_true(fabs(lp - lw) <= 1e-6 * fabs(lw));
				assert_true(ge <= 1e-6 * mb);
				free(g);
				free(gw);
				ds_gpt_destroy(m);
			}
}

/* a part that is not a contiguous run is refused */
static void test_part_refusals(void **state)
{
	(void)state;
	struct ds_model_config c;
	struct ds_gpt *m = NULL;
	struct ds_gpt_ws *ws = NULL;
	struct ds_err err = DS_ERR_INIT;
	cfg_base(&c);
	assert_int_equal(ds_gpt_create(&m, &c, &err), 0);
	static const struct ds_gpt_part bad[] = { { 1, 1, 2, 0, 0 }, { 0, 0, 1, 1, 0 }, { 0, 1, 2, 0, 1 },
						  { 0, 0, 3, 0, 0 }, { 1, 0, 0, 0, 1 } };
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct ds_gpt_ws_opts o = { .B = B, .T = T, .part = &bad[i] };
		assert_int_equal(ds_gpt_ws_create(&ws, m, &o, &err), DS_EINVAL);
		assert_non_null(strstr(err.msg, "contiguous"));
	}
	ds_gpt_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tp_variants),
		cmocka_unit_test(test_tp_checkpointing),
		cmocka_unit_test(test_tp_partition_half),
		cmocka_unit_test(test_tp_bf16_copies),
		cmocka_unit_test(test_tp_fault),
		cmocka_unit_test(test_tp_refusals),
		cmocka_unit_test(test_pipeline_parts),
		cmocka_unit_test(test_part_refusals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
