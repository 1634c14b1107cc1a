/* test_compute_cuda_emu.c - the cuda compute backend (lib/compute/
 * compute_cuda.c) running the fp32 test model through kernels/cuda's
 * launchers, compiled by g++ over the host emulation of CUDA
 * (tests/unit/cuda_emu.h: the backend's device memory, the workspace, is
 * unreachable from host code there; the parameters and gradients are this
 * test's host buffers, which emulated kernels can read), against the
 * cpu backend: a few training steps of share/models/gpt-test.json and a
 * NeoX-style variant (rmsnorm, rotary, swiglu, dropout) give the cpu
 * backend's losses within 1e-5 relative, and their gradients agree; its
 * 16-bit rounding entries (r16, DS_GEMM_BF16_CR) are its plain ones and
 * the rounding launcher, to the bit, and its table is complete.  What
 * the backend does not cover is reported by check() as DS_ENOTSUP.  This
 * checks the table's wiring and the launchers' contracts, not a GPU.
 */
#include "unit.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/gpt_math.h"
#include "compute/compute.h"
#include "config/model.h"
#include "cuda_emu_api.h"
#include "model/gpt.h"


struct run {
	struct ds_gpt *m;
	struct ds_gpt_ws *ws;
	float *p, *g;
	int64_t n;
};

static void run_open(struct run *r, const struct ds_model_config *c, const struct ds_compute_ops *ops, int B, int T,
		     int ckpt)
{
	struct ds_err err = DS_ERR_INIT;
	memset(r, 0, sizeof *r);
	assert_int_equal(ds_gpt_create(&r->m, c, &err), 0);
	ds_gpt_set_compute(r->m, ops);
	assert_ptr_equal(ds_gpt_compute(r->m), ops);
	struct ds_gpt_ws_opts o = { .B = B, .T = T, .dropout_seed = 7, .checkpointing = ckpt };
	int rc = ds_gpt_ws_create(&r->ws, r->m, &o, &err);
	if (rc)
		fprintf(stderr, "# %s\n", err.msg);
	assert_int_equal(rc, 0);
	r->n = ds_gpt_num_params(r->m);
	r->p = malloc((size_t)r->n * sizeof(float));
	r->g = malloc((size_t)r->n * sizeof(float));
	assert_non_null(r->p);
	assert_non_null(r->g);
	ds_gpt_init(r->m, 1234, r->p, 0, r->n);
}

static void run_close(struct run *r)
{
	ds_gpt_ws_destroy(r->ws);
	ds_gpt_destroy(r->m);
	free(r->p);
	free(r->g);
}

/* one training step: loss, gradients, p -= lr g */
static float step(struct run *r, const int32_t *tok, const int32_t *tgt, int B, int T, int64_t s)
{
	struct ds_err err = DS_ERR_INIT;
	float loss = NAN;
	int rc = ds_gpt_forward(r->m, r->ws, r->p, tok, tgt, B, T, s, s * B, 1, &loss, &err);
	if (rc)
		fprintf(stderr, "# forward: %s\n", err.msg);
	assert_int_equal(rc, 0);
	memset(r->g, 0, (size_t)r->n * sizeof(float));
	rc = ds_gpt_backward(r->m, r->ws, r->p, r->g, 1.0f, &err);
	if (rc)
		fprintf(stderr, "# backward: %s\n", err.msg);
	assert_int_equal(rc, 0);
	return loss;
}

static void sgd(struct run *r, float lr)
{
	for (int64_t i = 0; i < r->n; i++)
		r->p[i] -= lr * r->g[i];
}

/* steps of c on both backends: losses within 1e-5 relative, gradients
 * within 1e-4 of their largest element (sums in other orders) */
static void compare(const struct ds_model_config *c, int B, int T, int steps, int ckpt)
{
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_compute_cuda.init(0, &err), 0);
	struct run cpu, gpu;
	run_open(&cpu, c, &ds_compute_cpu, B, T, ckpt);
	run_open(&gpu, c, &ds_compute_cuda, B, T, ckpt);
	assert_int_equal(cpu.n, gpu.n);
	const long before = ds_emu_launches();
	int32_t *tok = malloc((size_t)(B * T + 1) * sizeof(int32_t));
	assert_non_null(tok);
	uint32_t x = 12345;
	for (int s = 0; s < steps; s++) {
		for (int i = 0; i <= B * T; i++) {
			x = x * 1664525u + 1013904223u;
			tok[i] = (int32_t)((x >> 8) % (uint32_t)c->vocab_size);
		}
		const float lc = step(&cpu, tok, tok + 1, B, T, s), lg = step(&gpu, tok, tok + 1, B, T, s);
		const double rel = fabs((double)lg - (double)lc) / fabs((double)lc);
		fprintf(stderr, "# step %d: cpu loss %.8f, cuda loss %.8f, relative %.2e\n", s, lc, lg, rel);
		assert_true(isfinite(lc) && lc > 0);
		if (!(rel <= 1e-5))
			fail_msg("step %d: cuda loss %.9g vs cpu %.9g (relative %.3g)", s, lg, lc, rel);
		double gerr;
		if (!ds_test_close(gpu.g, cpu.g, (long)cpu.n, 1e-4, &gerr))
			fail_msg("step %d: gradients differ by %.3g of the largest", s, gerr);
		sgd(&cpu, 0.5f);
		sgd(&gpu, 0.5f);
	}
	/* the device path really ran: launches, and no refused ones */
	assert_true(ds_emu_launches() - before > 50L * steps);
	assert_int_equal(ds_emu_failures(), 0);
	assert_int_equal(ds_compute_cuda.check(&err), 0);
	free(tok);
	run_close(&cpu);
	run_close(&gpu);
}

static void load_test_model(struct ds_model_config *c)
{
	struct ds_err err = DS_ERR_INIT;
	int rc = ds_model_config_load(DS_TEST_SRC("share/models/gpt-test.json"), c, &err);
	if (rc)
		fprintf(stderr, "# %s\n", err.msg);
	assert_int_equal(rc, 0);
}

static void test_gpt_test_model(void **st)
{
	(void)st;
	struct ds_model_config c;
	load_test_model(&c);
	compare(&c, 4, c.seq_length, 3, 0);
}

/* activation checkpointing: each layer recomputed on the device in backward */
static void test_checkpointing(void **st)
{
	(void)st;
	struct ds_model_config c;
	load_test_model(&c);
	c.hidden_dropout = 0.1;
	compare(&c, 2, c.seq_length, 2, 1);
}

/* rmsnorm, rotary positions, swiglu, dropout (the same masks on both) and
 * padding columns in the vocabulary */
static void test_neox_variant(void **st)
{
	(void)st;
	struct ds_model_config c;
	load_test_model(&c);
	c.norm = DS_NORM_RMSNORM;
	c.pos_emb = DS_POS_ROTARY;
	c.activation = DS_ACT_SWIGLU;
	c.hidden_dropout = 0.1;
	c.attention_dropout = 0.1;
	c.vocab_size = 250;
	c.padded_vocab_size = 0;
	c.no_weight_tying = 1;
	compare(&c, 2, 16, 2, 0);
}

/* the 16-bit rounding entries (r16, DS_GEMM_BF16_CR), which the cuda
 * backend runs as the plain launcher and then the rounding launcher: each
 * gives bit for bit its plain run followed by half_round(bf16) over the
 * whole output (a gated activation's gradient is 2F wide), and the plain
 * output had bits to lose (so an r16 that were ignored would fail here) */
static uint32_t rs = 99;
static void fill(float *x, long n)
{
	for (long i = 0; i < n; i++)
		x[i] = (float)((rs = rs * 1664525u + 1013904223u) >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}
static void same_as_rounded(const char *what, float *plain, const float *r16, long n)
{
	const struct ds_compute_ops *o = &ds_compute_cuda;
	float *want = malloc((size_t)n * sizeof(float));
	assert_non_null(want);
	memcpy(want, plain, (size_t)n * sizeof(float));
	o->half_round(2 /* bf16 */, want, (size_t)n);
	if (!memcmp(want, plain, (size_t)n * sizeof(float)))
		fail_msg("%s: the plain output is all bf16 values already: the test cannot tell", what);
	if (memcmp(want, r16, (size_t)n * sizeof(float)))
		fail_msg("%s: r16 is not the plain kernel and a rounding pass", what);
	free(want);
}

static void test_rounding_entries(void **st)
{
	(void)st;
	struct ds_err err = DS_ERR_INIT;
	const struct ds_compute_ops *o = &ds_compute_cuda;
	assert_int_equal(o->init(0, &err), 0);
	enum { N = 6, C = 20, F = 10, B = 2, NH = 2, T = 5, TT = B * NH * T * T };
	float inp[N * C], w[C], bb[C], dout[N * C], mean[N], rstd[N], mean1[N], rstd1[N];
	float o0[N * 2 * F], o1[N * 2 * F], dw0[C], dw1[C], db0[C], db1[C], x2[N * 2 * F];
	fill(inp, N * C);
	fill(w, C);
	fill(bb, C);
	fill(dout, N * C);
	o->layernorm_forward(o0, mean, rstd, inp, w, bb, N, C, 1e-5f, 0);
	o->layernorm_forward(o1, mean1, rstd1, inp, w, bb, N, C, 1e-5f, 1);
	assert_memory_equal(mean, mean1, sizeof mean);
	same_as_rounded("layernorm_forward", o0, o1, N * C);
	fill(o0, N * C);
	memcpy(o1, o0, sizeof(float) * N * C);   /* dinp, dw, db accumulate */
	fill(dw0, C);
	memcpy(dw1, dw0, sizeof dw0);
	fill(db0, C);
	memcpy(db1, db0, sizeof db0);
	o->layernorm_backward(o0, dw0, db0, dout, inp, w, mean, rstd, N, C, 0);
	o->layernorm_backward(o1, dw1, db1, dout, inp, w, mean, rstd, N, C, 1);
	assert_memory_equal(dw0, dw1, sizeof dw0);
	same_as_rounded("layernorm_backward", o0, o1, N * C);
	for (int act = 0; act <= 4; act++) {   /* gelu, geglu, swiglu, gelu_exact, geglu_exact */
		const long wid = ds_act_gated(act) ? 2 * F : F;
		fill(x2, N * wid);
		o->act_forward(o0, x2, N, F, act, 0);
		o->act_forward(o1, x2, N, F, act, 1);
		same_as_rounded("act_forward", o0, o1, (long)N * F);
		o->act_backward(o0, dout, x2, N, F, act, 0);
		o->act_backward(o1, dout, x2, N, F, act, 1);
		same_as_rounded("act_backward", o0, o1, N * wid);
	}
	float *a0 = malloc(sizeof(float) * TT), *a1 = malloc(sizeof(float) * TT), *att = malloc(sizeof(float) * TT);
	assert_true(a0 && a1 && att);
	fill(a0, TT);
	memcpy(a1, a0, sizeof(float) * TT);
	o->causal_softmax_forward(a0, B, NH, T, 0);
	o->causal_softmax_forward(a1, B, NH, T, 1);
	same_as_rounded("causal_softmax_forward", a0, a1, TT);
	memcpy(att, a0, sizeof(float) * TT);
	fill(a0, TT);
	memcpy(a1, a0, sizeof(float) * TT);
	o->causal_softmax_backward_h0(a0, att, B, NH, 0, T, 0.5f, 0.0f, NULL, 0);
	o->causal_softmax_backward_h0(a1, att, B, NH, 0, T, 0.5f, 0.0f, NULL, 1);
	same_as_rounded("causal_softmax_backward", a0, a1, TT);
	/* add: out = a + b with out a, b or neither */
	float ad[N * C], bd[N * C];
	fill(ad, N * C);
	fill(bd, N * C);
	for (int k = 0; k < 3; k++) {
		memcpy(o0, k == 1 ? bd : ad, sizeof ad);
		memcpy(o1, o0, sizeof ad);
		o->add(o0, k == 0 ? o0 : ad, k == 1 ? o0 : bd, N * C, 0);
		o->add(o1, k == 0 ? o1 : ad, k == 1 ? o1 : bd, N * C, 1);
		for (int i = 0; i < N * C; i++)
			assert_true(o0[i] == ad[i] + bd[i]);
		same_as_rounded("add", o0, o1, N * C);
	}
	/* gemm with DS_GEMM_BF16_CR: a single product at ldc > N (the gap
	 * untouched) and a batch of two, fp32 and bf16 modes */
	enum { M = 7, NN = 9, K = 8, LDC = 11 };
	float A[2 * M * K], Bm[2 * NN * K], c0[2 * M * LDC], c1[2 * M * LDC];
	fill(A, 2 * M * K);
	fill(Bm, 2 * NN * K);
	const int modes[2] = { -1, DS_BF16_MM_AUTO };
	for (int mi = 0; mi < 2; mi++)
		for (int cnt = 1; cnt <= 2; cnt++) {
			const struct ds_gemm_bf16_batch plain = { cnt, 1, { M * K, 0 }, { NN * K, 0 }, { M * LDC, 0 },
								  DS_GEMM_BF16_DENSE, 0, NULL, NULL };
			struct ds_gemm_bf16_batch cr = plain;
			cr.flags = DS_GEMM_BF16_CR;
			for (int i = 0; i < 2 * M * LDC; i++)
				c0[i] = c1[i] = (float)i;
			o->gemm(modes[mi], &plain, 0, 1, M, NN, K, 1.0f, A, K, Bm, K, 0.0f, c0, LDC);
			o->gemm(modes[mi], &cr, 0, 1, M, NN, K, 1.0f, A, K, Bm, K, 0.0f, c1, LDC);
			for (int i = 0; i < 2 * M * LDC; i++) {
				const int e = i / (M * LDC), j = i % LDC;
				if (e >= cnt || j >= NN) {
					assert_true(c1[i] == (float)i);   /* not part of C */
					continue;
				}
				float want = c0[i];
				o->half_round(2, &want, 1);
				if (memcmp(&want, &c1[i], sizeof want))
					fail_msg("gemm CR, mode %d, %d entries: element %d", modes[mi], cnt, i);
			}
		}
	assert_int_equal(o->check(&err), 0);
	assert_int_equal(ds_emu_failures(), 0);
	free(a0);
	free(a1);
	free(att);
}

/* every entry of the cuda table is filled (as test_compute's for cpu) */
static void test_cuda_table_complete(void **st)
{
	(void)st;
	typedef void (*fn)(void);
	const size_t off = offsetof(struct ds_compute_ops, uncovered);
	const size_t n = (sizeof(struct ds_compute_ops) - off) / sizeof(fn);
	const char *base = (const char *)&ds_compute_cuda + off;
	/* the entries of bf16 copies are a host backend's only (NULL here):
	 * the model calls them where gemm_hints is nonzero, never on cuda */
	const size_t host[] = { offsetof(struct ds_compute_ops, half_round_pack),
				offsetof(struct ds_compute_ops, causal_softmax_forward16),
				offsetof(struct ds_compute_ops, causal_softmax_backward16),
				offsetof(struct ds_compute_ops, layernorm_forward16),
				offsetof(struct ds_compute_ops, act_forward16),
				offsetof(struct ds_compute_ops, act_backward16),
				offsetof(struct ds_compute_ops, bias_backward16),
				offsetof(struct ds_compute_ops, layernorm_backward16),
				offsetof(struct ds_compute_ops, add16) };
	assert_int_equal(ds_compute_cuda.gemm_hints(DS_BF16_MM_AUTO, 1, 64, 64, 64), 0);
	for (size_t i = 0; i < n; i++) {
		fn f;
		memcpy(&f, base + i * sizeof(fn), sizeof f);
		int h = 0;
		for (size_t k = 0; k < sizeof host / sizeof host[0]; k++)
			h |= off + i * sizeof f == host[k];
		if (h) {
			assert_null(f);
			continue;
		}
		if (!f)
			fail_msg("ds_compute_cuda: entry %zu after the name is NULL", i);
	}
}

/* ZeRO-Offload's copies: pinned host memory (not counted as device
 * memory) to the device and back through the queued copies, complete
 * once check() has returned; a device buffer the host must not touch */
static void test_pinned_async_copies(void **st)
{
	(void)st;
	struct ds_err err = DS_ERR_INIT;
	enum { N = 3000 };
	assert_int_equal(ds_compute_cuda.init(0, &err), 0);
	size_t h0, h1, pk;
	ds_compute_cuda.mem_held(&h0, &pk, 0);
	float *h = ds_compute_cuda.pinned_alloc(N * sizeof(float));
	uint16_t *h16 = ds_compute_cuda.pinned_alloc(N * sizeof(uint16_t));
	ds_compute_cuda.mem_held(&h1, &pk, 0);
	assert_non_null(h);
	assert_non_null(h16);
	assert_int_equal(h1, h0);   /* host memory, not the device's */
	float *d = ds_compute_cuda.alloc(N * sizeof(float));
	uint16_t *d16 = ds_compute_cuda.alloc(N * sizeof(uint16_t));
	assert_non_null(d);
	for (int i = 0; i < N; i++) {
		h[i] = (float)i * 0.25f - 7;
		h16[i] = (uint16_t)(i * 7);
	}
	ds_compute_cuda.from_host_async(d, h, N * sizeof(float));
	ds_compute_cuda.from_host_async(d16, h16, N * sizeof(uint16_t));
	assert_int_equal(ds_compute_cuda.check(&err), 0);
	memset(h, 0, N * sizeof(float));
	memset(h16, 0, N * sizeof(uint16_t));
	ds_compute_cuda.scale(d, N, 2.0f);   /* queued work before the copy back */
	ds_compute_cuda.to_host_async(h, d, N * sizeof(float));
	ds_compute_cuda.to_host_async(h16, d16, N * sizeof(uint16_t));
	assert_int_equal(ds_compute_cuda.check(&err), 0);
	for (int i = 0; i < N; i++) {
		if (h[i] != ((float)i * 0.25f - 7) * 2.0f || h16[i] != (uint16_t)(i * 7))
			fail_msg("element %d: %g, %u", i, (double)h[i], (unsigned)h16[i]);
	}
	ds_compute_cuda.free(d);
	ds_compute_cuda.free(d16);
	ds_compute_cuda.pinned_free(h);
	ds_compute_cuda.pinned_free(h16);
	assert_int_equal(ds_emu_failures(), 0);
}

/* what the backend does not run yet is reported by check(), once */
static void test_not_supported(void **st)
{
	(void)st;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_compute_cuda.init(0, &err), 0);
	float x[4] = { 0 }, b[2] = { 1, 2 };
	ds_compute_cuda.bias_add(x, b, 2, 2);
	assert_int_equal(ds_compute_cuda.check(&err), DS_ENOTSUP);
	assert_non_null(strstr(err.msg, "row-parallel bias"));
	assert_non_null(strstr(err.msg, "--device cpu"));
	ds_err_clear(&err);
	assert_int_equal(ds_compute_cuda.check(&err), 0);   /* reported once */
	assert_int_equal(ds_compute_cuda.head16(DS_BF16_MM_AUTO, 64, 256, 64), 0);
	assert_int_equal(ds_compute_cuda.init(3, &err), DS_EIO);   /* the emulation has one device */
	/* what --device cuda would refuse, each in its own words */
	const struct ds_compute_needs dense = { 0, 0, 1, 1, 0, 0 };
	assert_null(ds_compute_cuda.uncovered(&dense));
	struct ds_compute_needs n = dense;
	n.moe = 1;
	assert_string_equal(ds_compute_cuda.uncovered(&n), "a Mixture-of-Experts model");
	n = dense;
	n.onebit = 1;
	assert_non_null(strstr(ds_compute_cuda.uncovered(&n), "1-bit optimizer"));
	n = dense;
	n.nvme = 1;
	assert_non_null(strstr(ds_compute_cuda.uncovered(&n), "NVMe offload"));
	n = dense;
	n.tp = 2;
	assert_string_equal(ds_compute_cuda.uncovered(&n), "tensor parallelism");
	n = dense;
	n.pp = 2;
	assert_string_equal(ds_compute_cuda.uncovered(&n), "pipeline parallelism");
	/* fp16 and bf16 dense models are covered */
	for (int h = 1; h <= 2; h++) {
		n = dense;
		n.half = h;
		assert_null(ds_compute_cuda.uncovered(&n));
	}
}

/* the engine's 16-bit gradient entries (half_add, half_recast,
 * accumulate) give the cpu backend's bits, fp16 and bf16, over a length
 * that is no multiple of the cpu's chunks; inputs with bits to lose, and
 * values that overflow fp16 (inf, as the cpu packs them) */
static void test_half_grad_entries(void **st)
{
	(void)st;
	struct ds_err err = DS_ERR_INIT;
	const struct ds_compute_ops *c = &ds_compute_cpu, *o = &ds_compute_cuda;
	assert_int_equal(o->init(0, &err), 0);
	enum { N = 5000 };
	float *g = malloc(N * sizeof(float)), *a0 = malloc(N * sizeof(float)), *a1 = malloc(N * sizeof(float));
	uint16_t *h0 = malloc(N * 2), *h1 = malloc(N * 2), *h = malloc(N * 2);
	assert_true(g && a0 && a1 && h0 && h1 && h);
	for (int kind = 1; kind <= 2; kind++) {
		fill(g, N);
		fill(a0, N);
		for (int i = 0; i < N; i += 97)
			g[i] *= 70000.0f;   /* past fp16's 65504 */
		c->half_pack(kind, h, a0, N);
		/* half_add: the held 16-bit gradients plus a micro-step's */
		memcpy(h0, h, N * 2);
		memcpy(h1, h, N * 2);
		c->half_add(kind, h0, g, N);
		o->half_add(kind, h1, g, N);
		assert_memory_equal(h0, h1, N * 2);
		assert_true(memcmp(h0, h, N * 2) != 0);
		/* half_recast: the 16-bit reduction's scale in the model's type,
		 * across types, and nothing for the same type at f 1 */
		const float fs[3] = { 0.37f, 1.0f, 3.0f };
		for (int fi = 0; fi < 3; fi++)
			for (int to = 1; to <= 2; to++) {
				memcpy(h0, h, N * 2);
				memcpy(h1, h, N * 2);
				c->half_recast(h0, N, kind, kind, fs[fi], to);
				o->half_recast(h1, N, kind, kind, fs[fi], to);
				assert_memory_equal(h0, h1, N * 2);
				if (fi == 1 && to == kind)
					assert_memory_equal(h0, h, N * 2);
				else
					assert_true(memcmp(h0, h, N * 2) != 0);
			}
		/* accumulate: fp32-held, and rounded to the kind */
		for (int k = 0; k <= kind; k += kind) {
			memcpy(a1, a0, N * sizeof(float));
			float *b0 = malloc(N * sizeof(float));
			assert_non_null(b0);
			memcpy(b0, a0, N * sizeof(float));
			c->accumulate(k, b0, g, N);
			o->accumulate(k, a1, g, N);
			assert_memory_equal(b0, a1, N * sizeof(float));
			if (k == 0)
				for (int i = 0; i < N; i++)
					assert_true(a1[i] == a0[i] + g[i]);
			free(b0);
		}
	}
	assert_int_equal(o->check(&err), 0);
	assert_int_equal(ds_emu_failures(), 0);
	free(g);
	free(a0);
	free(a1);
	free(h0);
	free(h1);
	free(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_gpt_test_model),
		cmocka_unit_test(test_neox_variant),
		cmocka_unit_test(test_checkpointing),
		cmocka_unit_test(test_not_supported),
		cmocka_unit_test(test_rounding_entries),
		cmocka_unit_test(test_half_grad_entries),
		cmocka_unit_test(test_cuda_table_complete),
		cmocka_unit_test(test_pinned_async_copies),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
