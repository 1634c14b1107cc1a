/* kernels_cuda_cases.h - the comparisons of kernels/cuda's launchers with
 * the CPU (kernels/cpu, lib/optim, util/half, cblas_sgemm), included by two
 * programs: test_kernels_cuda_emu.c (the .cu sources compiled by g++ over
 * tests/unit/cuda_emu.h, every case in three thread orders) and
 * test_kernels_cuda.c (nvcc's objects on a real GPU, skipped without one).
 * The including file defines dmalloc/dfree/h2d/d2h/dsync (device memory),
 * NORDERS and set_order(i) before including this file.
 *
 * "exact" asserts the same bits as the CPU (the same per-element math);
 * "close" a per-tensor relative tolerance where only the order of a sum
 * differs (max|a-b| <= rtol * max|b|, ds_test_close).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "cpu/gpt_kernels.h"
#include "cuda/attn_cuda.h"
#include "cuda/flat_cuda.h"
#include "cuda/gemm_cuda.h"
#include "cuda/gpt_cuda.h"
#include "optim/clip.h"
#include "optim/optim.h"
#include "util/half.h"
#include "util/rng.h"

/* ---- helpers --------------------------------------------------------------- */

static uint32_t rs_state = 12345;

static float urand(void)   /* uniform in [-1, 1) */
{
	rs_state = rs_state * 1664525u + 1013904223u;
	return (float)(rs_state >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

static float *frand(size_t n, float scale)
{
	float *x = malloc((n ? n : 1) * sizeof(float));
	assert_non_null(x);
	for (size_t i = 0; i < n; i++)
		x[i] = scale * urand();
	return x;
}

static void *dput(const void *h, size_t bytes)
{
	void *d = dmalloc(bytes);
	h2d(d, h, bytes);
	return d;
}

/* device copy of d (bytes) into a new host buffer */
static void *dgetn(const void *d, size_t bytes)
{
	void *h = malloc(bytes ? bytes : 1);
	assert_non_null(h);
	dsync();
	d2h(h, d, bytes);
	return h;
}

#define assert_ok(rc) assert_int_equal((rc), 0)

static void assert_exact(const float *a, const float *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float))) {
			print_error("element %zu: %.9g (%08x) != %.9g expected\n", i, (double)a[i],
				    (unsigned)ds_half_f2u(a[i]), (double)b[i]);
			fail();
		}
}

static void assert_close(const float *a, const float *b, size_t n, double rtol)
{
	double e = 0;
	if (!ds_test_close(a, b, (long)n, rtol, &e)) {
		print_error("relative error %.3g > %.3g over %zu elements\n", e, rtol, n);
		fail();
	}
}

/* ---- GPT kernels ----------------------------------------------------------- */

static void test_dropout(void **state)
{
	(void)state;
	const int B = 3;
	const int64_t n = 1003;
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		struct ds_rng gs[3];
		for (int b = 0; b < B; b++)
			ds_rng_init(&gs[b], 42, 7, (uint64_t)b << 20 | 3);
		float *x = frand((size_t)B * n, 1.0f);
		float *dx = dput(x, (size_t)B * n * sizeof(float));
		for (int b = 0; b < B; b++)
			ds_kernel_dropout(x + b * n, n, &gs[b], 0.3f);
		assert_ok(ds_kernel_cuda_dropout_rows(dx, B, n, gs, 0.3f, NULL));
		float *got = dgetn(dx, (size_t)B * n * sizeof(float));
		assert_exact(got, x, (size_t)B * n);
		/* single stream, and p = 0 leaves x alone */
		ds_kernel_dropout(x, n, &gs[1], 0.5f);
		assert_ok(ds_kernel_cuda_dropout(dx, n, &gs[1], 0.5f, NULL));
		assert_ok(ds_kernel_cuda_dropout(dx, n, &gs[1], 0.0f, NULL));
		free(got);
		got = dgetn(dx, (size_t)B * n * sizeof(float));
		assert_exact(got, x, (size_t)B * n);
		free(got);
		free(x);
		dfree(dx);
	}
}

static void test_embed(void **state)
{
	(void)state;
	enum { B = 3, T = 100, C = 40, Vp = 64 };   /* 300 rows: two tiles of the owner scan */
	const int64_t N = B * T;
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		int32_t tok[B * T];
		for (int i = 0; i < B * T; i++)   /* token 5 many times, so its rows pile up */
			tok[i] = i % 3 == 0 ? 5 : (int32_t)((i * 7) % Vp);
		float *wte = frand(Vp * C, 1.0f), *pos = frand(T * C, 1.0f), *dout = frand(N * C, 1.0f);
		float *dwte = frand(Vp * C, 1.0f), *dpos = frand(T * C, 1.0f);
		float *out = malloc(N * C * sizeof(float));
		int32_t *dtok = dput(tok, sizeof(tok));
		float *d_wte = dput(wte, Vp * C * 4), *d_pos = dput(pos, T * C * 4), *d_dout = dput(dout, N * C * 4);
		float *d_dwte = dput(dwte, Vp * C * 4), *d_dpos = dput(dpos, T * C * 4), *d_out = dmalloc(N * C * 4);
		for (int with_pos = 0; with_pos < 2; with_pos++) {
			ds_kernel_embed_forward(out, tok, wte, with_pos ? pos : NULL, B, T, C);
			assert_ok(ds_kernel_cuda_embed_forward(d_out, dtok, d_wte, with_pos ? d_pos : NULL, B, T, C, NULL));
			float *got = dgetn(d_out, N * C * 4);
			assert_exact(got, out, N * C);
			free(got);
		}
		ds_kernel_embed_backward(dwte, dpos, dout, tok, B, T, C);
		assert_ok(ds_kernel_cuda_embed_backward(d_dwte, d_dpos, d_dout, dtok, B, T, C, NULL));
		float *g1 = dgetn(d_dwte, Vp * C * 4), *g2 = dgetn(d_dpos, T * C * 4);
		assert_exact(g1, dwte, Vp * C);
		assert_exact(g2, dpos, T * C);
		free(g1);
		free(g2);
		dfree(dtok);
		dfree(d_wte);
		dfree(d_pos);
		dfree(d_dout);
		dfree(d_dwte);
		dfree(d_dpos);
		dfree(d_out);
		free(wte);
		free(pos);
		free(dout);
		free(dwte);
		free(dpos);
		free(out);
	}
}

/* norm: 0 layernorm, 1 rmsnorm */
static void norm_case(int norm)
{
	enum { N = 37, C = 300 };
	float *x = frand(N * C, 2.0f), *w = frand(C, 1.0f), *b = frand(C, 1.0f), *g = frand(N * C, 1.0f);
	for (int i = 0; i < N * C; i++)
		x[i] += 0.5f;   /* a mean away from 0 */
	float *out = malloc(N * C * 4), *s1 = malloc(N * 4), *s2 = malloc(N * 4);
	/* small starting values: the kernels add (+=) to them */
	float *dinp = frand(N * C, 0.01f), *dw = frand(C, 0.01f), *db = frand(C, 0.01f);
	float *d_x = dput(x, N * C * 4), *d_w = dput(w, C * 4), *d_b = dput(b, C * 4), *d_g = dput(g, N * C * 4);
	float *d_out = dmalloc(N * C * 4), *d_s1 = dmalloc(N * 4), *d_s2 = dmalloc(N * 4);
	float *d_dinp = dput(dinp, N * C * 4), *d_dw = dput(dw, C * 4), *d_db = dput(db, C * 4);
	if (norm == 0) {
		ds_kernel_layernorm_forward(out, s1, s2, x, w, b, N, C, 1e-5f);
		assert_ok(ds_kernel_cuda_layernorm_forward(d_out, d_s1, d_s2, d_x, d_w, d_b, N, C, 1e-5f, NULL));
	} else {
		ds_kernel_rmsnorm_forward(out, s1, s2, x, w, N, C, 1e-8f);
		assert_ok(ds_kernel_cuda_rmsnorm_forward(d_out, d_s1, d_s2, d_x, d_w, N, C, 1e-8f, NULL));
	}
	float *o = dgetn(d_out, N * C * 4), *a1 = dgetn(d_s1, N * 4), *a2 = dgetn(d_s2, N * 4);
	/* double statistics: equal after rounding to float but for a rare tie */
	assert_close(a1, s1, N, 1e-7);
	assert_close(a2, s2, N, 1e-7);
	assert_close(o, out, N * C, 1e-6);
	/* backward from the CPU's statistics, so only the sums' order differs */
	h2d(d_s1, s1, N * 4);
	h2d(d_s2, s2, N * 4);
	if (norm == 0) {
		ds_kernel_layernorm_backward(dinp, dw, db, g, x, w, s1, s2, N, C);
		assert_ok(ds_kernel_cuda_layernorm_backward(d_dinp, d_dw, d_db, d_g, d_x, d_w, d_s1, d_s2, N, C, NULL));
	} else {
		ds_kernel_rmsnorm_backward(dinp, dw, g, x, w, s1, s2, N, C);
		assert_ok(ds_kernel_cuda_rmsnorm_backward(d_dinp, d_dw, d_g, d_x, d_w, d_s1, d_s2, N, C, NULL));
	}
	float *r1 = dgetn(d_dinp, N * C * 4), *r2 = dgetn(d_dw, C * 4), *r3 = dgetn(d_db, C * 4);
	assert_close(r1, dinp, N * C, 5e-6);
	assert_close(r2, dw, C, 5e-6);
	if (norm == 0)
		assert_close(r3, db, C, 5e-6);
	else
		assert_exact(r3, db, C);   /* rmsnorm has no bias: untouched */
	free(o); free(a1); free(a2); free(r1); free(r2); free(r3);
	free(x); free(w); free(b); free(g); free(out); free(s1); free(s2); free(dinp); free(dw); free(db);
	dfree(d_x); dfree(d_w); dfree(d_b); dfree(d_g); dfree(d_out); dfree(d_s1); dfree(d_s2);
	dfree(d_dinp); dfree(d_dw); dfree(d_db);
}

static void test_layernorm(void **state)
{
	(void)state;
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		norm_case(0);
	}
}

static void test_rmsnorm(void **state)
{
	(void)state;
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		norm_case(1);
	}
}

static void test_bias_add(void **state)
{
	(void)state;
	enum { N = 600, OC = 70 };
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		float *b = frand(OC, 1.0f), *dout = frand(N * OC, 1.0f), *db = frand(OC, 0.01f), *a = frand(N * OC, 1.0f);
		float *out = malloc(N * OC * 4);
		float *d_b = dput(b, OC * 4), *d_dout = dput(dout, N * OC * 4), *d_db = dput(db, OC * 4);
		float *d_out = dmalloc(N * OC * 4), *d_a = dput(a, N * OC * 4);
		for (int nb = 0; nb < 2; nb++) {
			ds_kernel_bias_fill(out, nb ? NULL : b, N, OC);
			assert_ok(ds_kernel_cuda_bias_fill(d_out, nb ? NULL : d_b, N, OC, NULL));
			float *got = dgetn(d_out, N * OC * 4);
			assert_exact(got, out, N * OC);
			free(got);
		}
		ds_kernel_add_inplace(out, a, N * OC);
		assert_ok(ds_kernel_cuda_add_inplace(d_out, d_a, N * OC, NULL));
		float *got = dgetn(d_out, N * OC * 4);
		assert_exact(got, out, N * OC);
		free(got);
		/* columns [OC-5, OC) of every row to -inf (the logits' padding) */
		for (int i = 0; i < N; i++)
			for (int j = OC - 5; j < OC; j++)
				out[i * OC + j] = -INFINITY;
		assert_ok(ds_cuda_fill_cols(d_out, N, OC, OC - 5, OC, -INFINITY, NULL));
		got = dgetn(d_out, N * OC * 4);
		assert_exact(got, out, N * OC);
		free(got);
		ds_kernel_bias_backward(db, dout, N, OC);
		assert_ok(ds_kernel_cuda_bias_backward(d_db, d_dout, N, OC, NULL));
		got = dgetn(d_db, OC * 4);
		assert_close(got, db, OC, 5e-6);
		free(got);
		free(b); free(dout); free(db); free(a); free(out);
		dfree(d_b); dfree(d_dout); dfree(d_db); dfree(d_out); dfree(d_a);
	}
}

static void test_rotary(void **state)
{
	(void)state;
	enum { B = 2, T = 9, C = 48, NH = 4, rd = 8, half = rd / 2 };
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		float cs[T * half], sn[T * half];
		for (int t = 0; t < T; t++)
			for (int i = 0; i < half; i++) {
				double f = pow(10000.0, -2.0 * i / rd);
				cs[t * half + i] = (float)cos(t * f);
				sn[t * half + i] = (float)sin(t * f);
			}
		float *q = frand(B * T * 3 * C, 1.0f);
		float *d_q = dput(q, B * T * 3 * C * 4), *d_cs = dput(cs, sizeof(cs)), *d_sn = dput(sn, sizeof(sn));
		for (int inv = 0; inv < 2; inv++) {
			ds_kernel_rotary(q, cs, sn, B, T, C, NH, rd, inv);
			assert_ok(ds_kernel_cuda_rotary(d_q, d_cs, d_sn, B, T, C, NH, rd, inv, NULL));
			float *got = dgetn(d_q, B * T * 3 * C * 4);
			assert_exact(got, q, B * T * 3 * C);
			free(got);
		}
		free(q);
		dfree(d_q); dfree(d_cs); dfree(d_sn);
	}
}

static void test_softmax(void **state)
{
	(void)state;
	enum { B = 2, NH = 3, T = 37 };
	const size_t n = (size_t)B * NH * T * T;
	const float scale = 0.125f;
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		struct ds_rng gs[B];
		for (int b = 0; b < B; b++)
			ds_rng_init(&gs[b], 9, 1, (uint64_t)b << 20 | 17);
		float *att = frand(n, 3.0f), *d = frand(n, 1.0f), *attd = malloc(n * 4);
		float *d_att = dput(att, n * 4), *d_attd = dmalloc(n * 4);
		ds_kernel_causal_softmax_forward(att, B, NH, T);
		assert_ok(ds_kernel_cuda_causal_softmax_forward(d_att, B, NH, T, NULL));
		float *got = dgetn(d_att, n * 4);
		assert_close(got, att, n, 1e-6);
		free(got);
		/* dropout and backward from the CPU's probabilities */
		h2d(d_att, att, n * 4);
		ds_kernel_attention_dropout(attd, att, B, NH, T, 0.2f, gs);
		assert_ok(ds_kernel_cuda_attention_dropout(d_attd, d_att, B, NH, T, 0.2f, gs, NULL));
		got = dgetn(d_attd, n * 4);
		assert_exact(got, attd, n);
		free(got);
		for (int drop = 0; drop < 2; drop++) {
			float *dd = malloc(n * 4);
			memcpy(dd, d, n * 4);
			float *d_dd = dput(dd, n * 4);
			ds_kernel_causal_softmax_backward(dd, att, B, NH, T, scale, drop ? 0.2f : 0.0f, drop ? gs : NULL);
			assert_ok(ds_kernel_cuda_causal_softmax_backward(d_dd, d_att, B, NH, T, scale, drop ? 0.2f : 0.0f,
									 drop ? gs : NULL, NULL));
			got = dgetn(d_dd, n * 4);
			assert_close(got, dd, n, 5e-6);
			free(got);
			free(dd);
			dfree(d_dd);
		}
		free(att); free(d); free(attd);
		dfree(d_att); dfree(d_attd);
	}
}

static void test_act(void **state)
{
	(void)state;
	enum { N = 7, F = 33 };
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		float *in = frand(N * 2 * F, 3.0f), *g = frand(N * F, 1.0f);
		float o1[N * F], d1[N * 2 * F];
		/* 0 gelu, 1 geglu, 2 swiglu, 3 gelu_exact, 4 geglu_exact */
		for (int act = 0; act < 5; act++) {
			size_t w = act == 0 || act == 3 ? F : 2 * F;
			float *din = dput(in, N * 2 * F * 4), *dg = dput(g, N * F * 4);
			float *dout = dmalloc(N * F * 4), *dd = dmalloc(N * 2 * F * 4);
			assert_ok(ds_kernel_cuda_act_forward(dout, din, N, F, act, NULL));
			assert_ok(ds_kernel_cuda_act_backward(dd, dg, din, N, F, act, NULL));
			ds_kernel_act_forward(o1, in, N, F, act);
			ds_kernel_act_backward(d1, g, in, N, F, act);
			float *o2 = dgetn(dout, N * F * 4), *d2 = dgetn(dd, N * w * 4);
			assert_exact(o2, o1, N * F);
			assert_exact(d2, d1, N * w);
			free(o2); free(d2);
			dfree(din); dfree(dg); dfree(dout); dfree(dd);
		}
		free(in);
		free(g);
	}
}

static void test_xent(void **state)
{
	(void)state;
	enum { N = 5, V = 300, Vp = 384 };
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		float *l = frand(N * Vp, 4.0f);
		for (int i = 0; i < N * Vp; i++)
			if (i % Vp >= V)
				l[i] = NAN;   /* the padding must not be read */
		float lse1[N];
		int32_t t[N] = { 0, 299, 17, 150, 3 };
		float *dl = dput(l, N * Vp * 4), *dlse = dmalloc(N * 4);
		double *drows = dmalloc(N * sizeof(double)), *dtot = dmalloc(sizeof(double));
		int32_t *dt = dput(t, sizeof(t));
		double total = ds_kernel_xent_forward(lse1, l, t, N, V, Vp);
		assert_ok(ds_kernel_cuda_xent_forward(dlse, drows, dl, dt, N, V, Vp, NULL));
		assert_ok(ds_cuda_sum(dtot, drows, N, NULL));
		float *lse2 = dgetn(dlse, N * 4);
		double *rows = dgetn(drows, N * sizeof(double)), *tot = dgetn(dtot, sizeof(double));
		assert_close(lse2, lse1, N, 1e-6);
		for (int i = 0; i < N; i++)   /* each row's loss from its own lse, in double */
			assert_true(rows[i] == (double)lse2[i] - (double)l[i * Vp + t[i]]);
		assert_true(fabs(*tot - total) <= 1e-6 * fabs(total));
		/* the gradient from the CPU's lse: the same bits */
		h2d(dlse, lse1, N * 4);
		ds_kernel_xent_backward(l, lse1, t, N, V, Vp, 0.37f);
		assert_ok(ds_kernel_cuda_xent_backward(dl, dlse, dt, N, V, Vp, 0.37f, NULL));
		float *l2 = dgetn(dl, N * Vp * 4);
		assert_exact(l2, l, N * Vp);
		free(l2); free(lse2); free(rows); free(tot); free(l);
		dfree(dl); dfree(dlse); dfree(drows); dfree(dtot); dfree(dt);
	}
}

#define DS_CUDA_GPT_CASES                                                                                  \
	cmocka_unit_test(test_dropout), cmocka_unit_test(test_embed), cmocka_unit_test(test_layernorm),     \
		cmocka_unit_test(test_rmsnorm), cmocka_unit_test(test_bias_add), cmocka_unit_test(test_rotary), \
		cmocka_unit_test(test_softmax), cmocka_unit_test(test_act), cmocka_unit_test(test_xent)

/* ---- flat buffers: 16-bit, casts, accumulation, norms ----------------------- */

/* values over the whole range of both 16-bit kinds: tiny (subnormal in
 * fp16), huge (overflow in fp16), ties, signed zeros, inf and nan */
static float *special_values(size_t n)
{
	float *x = malloc(n * sizeof(float));
	assert_non_null(x);
	for (size_t i = 0; i < n; i++)
		x[i] = urand() * powf(10.0f, 10.0f * urand());
	const float sp[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65520.0f, 1e-7f, -3e-8f, 5.96e-8f,
			     1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 3.3895e38f, 1.0f + 1.0f / 256 };
	for (size_t i = 0; i < sizeof(sp) / sizeof(sp[0]) && i < n; i++)
		x[i * 7 % n] = sp[i];
	return x;
}

static void test_half_ops(void **state)
{
	(void)state;
	const size_t n = 3001;
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		for (int kk = 1; kk <= 2; kk++) {
			const enum ds_half_kind k = (enum ds_half_kind)kk;
			float *x = special_values(n), *y = malloc(n * 4), *g = frand(n, 2.0f);
			uint16_t *h = malloc(n * 2), *h2 = malloc(n * 2);
			float *dx = dput(x, n * 4), *dg = dput(g, n * 4), *dy = dmalloc(n * 4);
			uint16_t *dh = dmalloc(n * 2);
			/* round */
			memcpy(y, x, n * 4);
			ds_half_round_n(k, y, n);
			assert_ok(ds_cuda_half_round(k, dx, (int64_t)n, NULL));
			float *got = dgetn(dx, n * 4);
			assert_exact(got, y, n);
			free(got);
			/* pack, unpack */
			ds_half_pack_n(k, h, x, n);
			h2d(dx, x, n * 4);
			assert_ok(ds_cuda_half_pack(k, dh, dx, (int64_t)n, NULL));
			uint16_t *gh = dgetn(dh, n * 2);
			assert_memory_equal(gh, h, n * 2);
			free(gh);
			ds_half_unpack_n(k, y, h, n);
			assert_ok(ds_cuda_half_unpack(k, dy, dh, (int64_t)n, NULL));
			got = dgetn(dy, n * 4);
			assert_exact(got, y, n);
			free(got);
			/* scale */
			memcpy(y, x, n * 4);
			for (size_t i = 0; i < n; i++)
				y[i] *= 0.3f;
			assert_ok(ds_cuda_scale(dx, (int64_t)n, 0.3f, NULL));
			got = dgetn(dx, n * 4);
			assert_exact(got, y, n);
			free(got);
			/* cast with prescale (engine.c's cast_prescale), into h and in place */
			for (int f1 = 0; f1 < 2; f1++) {
				const float f = f1 ? 0.125f * 1.1f : 1.0f;
				memcpy(y, x, n * 4);
				if (f != 1.0f) {
					ds_half_round_n(k, y, n);
					for (size_t i = 0; i < n; i++)
						y[i] *= f;
				}
				ds_half_pack_n(k, h, y, n);
				h2d(dx, x, n * 4);
				assert_ok(ds_cuda_cast_prescale(k, dx, dh, (int64_t)n, f, NULL));
				gh = dgetn(dh, n * 2);
				assert_memory_equal(gh, h, n * 2);
				free(gh);
				h2d(dx, x, n * 4);
				assert_ok(ds_cuda_cast_prescale(k, dx, (uint16_t *)dx, (int64_t)n, f, NULL));
				gh = dgetn(dx, n * 2);
				assert_memory_equal(gh, h, n * 2);
				free(gh);
			}
			/* hadd: acc (16-bit) + g, rounded once */
			ds_half_pack_n(k, h, g, n);
			h2d(dh, h, n * 2);
			ds_half_unpack_n(k, y, h, n);
			for (size_t i = 0; i < n; i++)
				y[i] += x[i];
			ds_half_pack_n(k, h, y, n);
			h2d(dx, x, n * 4);
			assert_ok(ds_cuda_hadd(k, dh, dx, (int64_t)n, NULL));
			gh = dgetn(dh, n * 2);
			assert_memory_equal(gh, h, n * 2);
			free(gh);
			/* hrecast from k to the other kind through a cast, times f */
			const enum ds_half_kind to = k == DS_HALF_FP16 ? DS_HALF_BF16 : DS_HALF_FP16;
			for (int c = 0; c < 3; c++) {
				const enum ds_half_kind cast = (enum ds_half_kind)c;
				ds_half_pack_n(k, h, g, n);
				h2d(dh, h, n * 2);
				ds_half_unpack_n(k, y, h, n);
				ds_half_round_n(cast, y, n);
				for (size_t i = 0; i < n; i++)
					y[i] *= 3.0f;
				ds_half_round_n(cast, y, n);
				ds_half_pack_n(to, h2, y, n);
				assert_ok(ds_cuda_hrecast(dh, (int64_t)n, k, cast, 3.0f, to, NULL));
				gh = dgetn(dh, n * 2);
				assert_memory_equal(gh, h2, n * 2);
				free(gh);
			}
			/* accumulate: acc += g, rounded to k (and kept in fp32 for NONE) */
			for (int a = 0; a < 2; a++) {
				const enum ds_half_kind ak = a ? k : DS_HALF_NONE;
				memcpy(y, g, n * 4);
				for (size_t i = 0; i < n; i++)
					y[i] += x[i];
				ds_half_round_n(ak, y, n);
				h2d(dy, g, n * 4);
				h2d(dx, x, n * 4);
				assert_ok(ds_cuda_accumulate(ak, dy, dx, (int64_t)n, NULL));
				got = dgetn(dy, n * 4);
				assert_exact(got, y, n);
				free(got);
			}
			free(x); free(y); free(g); free(h); free(h2);
			dfree(dx); dfree(dg); dfree(dy); dfree(dh);
		}
	}
}

static void test_sumsq(void **state)
{
	(void)state;
	const size_t n = 200003;   /* four chunks, the last one short */
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		float *x = frand(n, 3.0f);
		uint16_t *h = malloc(n * 2);
		ds_half_pack_n(DS_HALF_BF16, h, x, n);
		float *xb = malloc(n * 4);
		ds_half_unpack_n(DS_HALF_BF16, xb, h, n);
		float *dx = dput(x, n * 4);
		uint16_t *dh = dput(h, n * 2);
		double start[2] = { 1.5, 0.0 }, *ds = dput(start, sizeof(start));
		assert_ok(ds_cuda_sumsq(ds, dx, DS_HALF_NONE, (int64_t)n, NULL));
		double *got = dgetn(ds, sizeof(start));
		double want = 1.5 + ds_clip_sumsq(x, n);
		assert_true(fabs(got[0] - want) <= 1e-13 * want);
		assert_true(got[1] == 0.0);
		free(got);
		/* 16-bit input, accumulating onto the first result */
		assert_ok(ds_cuda_sumsq(ds, dh, DS_HALF_BF16, (int64_t)n, NULL));
		got = dgetn(ds, sizeof(start));
		want += ds_clip_sumsq(xb, n);
		assert_true(fabs(got[0] - want) <= 1e-13 * want);
		free(got);
		/* one inf in the third chunk sets the flag, which stays set */
		x[150001] = INFINITY;
		h2d(dx, x, n * 4);
		assert_ok(ds_cuda_sumsq(ds, dx, DS_HALF_NONE, (int64_t)n, NULL));
		x[150001] = 0.0f;
		h2d(dx, x, n * 4);
		assert_ok(ds_cuda_sumsq(ds, dx, DS_HALF_NONE, (int64_t)n, NULL));
		got = dgetn(ds, sizeof(start));
		assert_true(got[1] == 1.0);
		free(got);
		free(x); free(h); free(xb);
		dfree(dx); dfree(dh); dfree(ds);
	}
}

/* ---- optimizers ---------------------------------------------------------------- */

static void test_adam(void **state)
{
	(void)state;
	const size_t n = 5003;
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		for (int mode = 0; mode < 2; mode++) {   /* AdamW, then Adam with L2 decay */
			struct ds_optim_params hp;
			ds_optim_params_init(&hp, DS_OPTIM_ADAM);
			hp.lr = 3e-3;
			hp.weight_decay = 0.01;
			hp.adam_w_mode = !mode;
			struct ds_adam_coef c;
			ds_adam_coef_init(&c, &hp, 3, 0.7f);
			float *p = frand(n, 1.0f), *g = frand(n, 1.0f), *m = frand(n, 0.1f), *v = frand(n, 0.01f);
			for (size_t i = 0; i < n; i++)
				v[i] = fabsf(v[i]);
			float *dp = dput(p, n * 4), *dg = dput(g, n * 4), *dm = dput(m, n * 4), *dv = dput(v, n * 4);
			ds_adam_update(&c, p, g, m, v, n, DS_SIMD_SCALAR);
			assert_ok(ds_cuda_adam(&c, dp, dg, dm, dv, (int64_t)n, NULL));
			float *gp = dgetn(dp, n * 4), *gm = dgetn(dm, n * 4), *gv = dgetn(dv, n * 4);
			assert_exact(gp, p, n);
			assert_exact(gm, m, n);
			assert_exact(gv, v, n);
			free(gp); free(gm); free(gv); free(p); free(g); free(m); free(v);
			dfree(dp); dfree(dg); dfree(dm); dfree(dv);
		}
	}
}

static void test_sgd(void **state)
{
	(void)state;
	const size_t n = 3001;
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		for (int mode = 0; mode < 3; mode++) {   /* momentum + dampening, nesterov, plain */
			struct ds_optim_params hp;
			ds_optim_params_init(&hp, DS_OPTIM_SGD);
			hp.lr = 0.05;
			hp.weight_decay = 1e-2;
			hp.momentum = mode == 2 ? 0.0 : 0.9;
			hp.dampening = mode == 0 ? 0.1 : 0.0;
			hp.nesterov = mode == 1;
			struct ds_optim *opt = NULL;
			struct ds_err err;
			assert_ok(ds_optim_create(&opt, &hp, n, &err));
			float *p = frand(n, 1.0f), *g = frand(n, 1.0f);
			float *dp = dput(p, n * 4), *dg = dput(g, n * 4), *dbuf = mode == 2 ? NULL : dmalloc(n * 4);
			for (int64_t t = 1; t <= 2; t++) {
				struct ds_sgd_coef c;
				ds_sgd_coef_init(&c, &hp, t, 0.5f);
				assert_ok(ds_optim_step(opt, p, g, 0.5f, NULL, 0, &err));
				assert_ok(ds_cuda_sgd(&c, dp, dg, dbuf, (int64_t)n, NULL));
				float *gp = dgetn(dp, n * 4);
				assert_exact(gp, p, n);
				free(gp);
				if (dbuf) {
					float *gb = dgetn(dbuf, n * 4);
					assert_exact(gb, ds_optim_state(opt, "momentum_buffer"), n);
					free(gb);
				}
			}
			ds_optim_destroy(opt);
			free(p); free(g);
			dfree(dp); dfree(dg);
			if (dbuf)
				dfree(dbuf);
		}
	}
}

static void test_lamb(void **state)
{
	(void)state;
	const struct ds_range r[4] = { { 0, 100 }, { 100, 20000 }, { 20100, 0 }, { 20100, 5000 } };
	const size_t n = 25100;
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		struct ds_optim_params hp;
		ds_optim_params_init(&hp, DS_OPTIM_LAMB);
		hp.lr = 2e-3;
		hp.weight_decay = 0.01;
		struct ds_optim *opt = NULL;
		struct ds_err err;
		assert_ok(ds_optim_create(&opt, &hp, n, &err));
		float *p = frand(n, 1.0f), *g = frand(n, 1.0f);
		float *m = ds_optim_state(opt, "exp_avg"), *v = ds_optim_state(opt, "exp_avg_sq");
		for (size_t i = 0; i < n; i++) {
			m[i] = 0.1f * urand();
			v[i] = 0.01f * fabsf(urand());
		}
		float *dp = dput(p, n * 4), *dg = dput(g, n * 4), *dm = dput(m, n * 4), *dv = dput(v, n * 4);
		double sums[8], *dsums = dmalloc(sizeof(sums));
		struct ds_lamb_coef k;
		ds_lamb_coef_init(&k, &hp);
		assert_ok(ds_lamb_partial_norms(opt, p, g, 0.8f, r, 4, sums, &err));
		assert_ok(ds_cuda_lamb_partial(&k, dp, dg, dm, dv, 0.8f, r, 4, dsums, NULL));
		float *gm = dgetn(dm, n * 4), *gv = dgetn(dv, n * 4);
		double *gs = dgetn(dsums, sizeof(sums));
		assert_exact(gm, m, n);
		assert_exact(gv, v, n);
		for (int i = 0; i < 8; i++)
			assert_true(fabs(gs[i] - sums[i]) <= 1e-13 * fabs(sums[i]));
		/* phase 2 from the CPU's sums (host): the same bits */
		double step = ds_lamb_step_size(&hp, opt->step + 1);
		assert_ok(ds_lamb_apply(opt, p, r, 4, sums, &err));
		assert_ok(ds_cuda_lamb_apply(&k, dp, dm, dv, r, 4, sums, step, hp.min_coeff, hp.max_coeff, NULL));
		float *gp = dgetn(dp, n * 4);
		assert_exact(gp, p, n);
		free(gp); free(gm); free(gv); free(gs); free(p); free(g);
		ds_optim_destroy(opt);
		dfree(dp); dfree(dg); dfree(dm); dfree(dv); dfree(dsums);
	}
}

#define DS_CUDA_FLAT_CASES                                                                                 \
	cmocka_unit_test(test_half_ops), cmocka_unit_test(test_sumsq), cmocka_unit_test(test_adam),         \
		cmocka_unit_test(test_sgd), cmocka_unit_test(test_lamb)

/* ---- matrix products ------------------------------------------------------------ */

/* x rounded to kind k's values (k NONE: x) */
static void round_to(enum ds_half_kind k, float *x, size_t n) { ds_half_round_n(k, x, n); }

/* a device copy of host fp32 x as type k */
static void *dput_as(enum ds_half_kind k, const float *x, size_t n)
{
	if (k == DS_HALF_NONE)
		return dput(x, n * 4);
	uint16_t *h = malloc(n * 2);
	ds_half_pack_n(k, h, x, n);
	void *d = dput(h, n * 2);
	free(h);
	return d;
}

static float *dget_as(enum ds_half_kind k, const void *d, size_t n)
{
	if (k == DS_HALF_NONE)
		return dgetn(d, n * 4);
	uint16_t *h = dgetn(d, n * 2);
	float *x = malloc(n * 4);
	ds_half_unpack_n(k, x, h, n);
	free(h);
	return x;
}

static void test_gemm(void **state)
{
	(void)state;
	enum { M = 37, N = 29, K = 53, PAD = 3 };
	struct ds_cuda_blas *b = NULL, *b32 = NULL;
	assert_ok(ds_cuda_blas_create(&b, NULL, 0));
	assert_ok(ds_cuda_blas_create(&b32, NULL, 1));
	assert_int_equal(ds_cuda_blas_fp32_compute(b), 69);    /* CUBLAS_COMPUTE_32F_PEDANTIC: no TF32 */
	assert_int_equal(ds_cuda_blas_fp32_compute(b32), 77);  /* CUBLAS_COMPUTE_32F_FAST_TF32 */
	for (int kk = 0; kk < 3; kk++) {
		const enum ds_half_kind ab = (enum ds_half_kind)kk;
		for (int cc = 0; cc < 2; cc++) {
			const enum ds_half_kind ck = cc ? ab : DS_HALF_NONE;
			if (cc && ab == DS_HALF_NONE)
				continue;
			for (int ta = 0; ta < 2; ta++)
				for (int tb = 0; tb < 2; tb++)
					for (int zb = 0; zb < 2; zb++) {
						const int lda = (ta ? M : K) + PAD, ldb = (tb ? K : N) + PAD, ldc = N + PAD;
						const size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb;
						const size_t nc = (size_t)M * ldc;
						float *A = frand(na, 1.0f), *B = frand(nb, 1.0f), *C = frand(nc, 1.0f);
						round_to(ab, A, na);
						round_to(ab, B, nb);
						round_to(ck, C, nc);
						const float beta = zb ? 0.0f : 0.3f;
						void *dA = dput_as(ab, A, na), *dB = dput_as(ab, B, nb), *dC;
						if (zb) {   /* beta 0: C is written, never read (NaNs there) */
							float *nan = malloc(nc * 4);
							for (size_t i = 0; i < nc; i++)
								nan[i] = NAN;
							dC = dput_as(ck, nan, nc);
							free(nan);
						} else {
							dC = dput_as(ck, C, nc);
						}
						cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
							    tb ? CblasTrans : CblasNoTrans, M, N, K, 0.7f, A, lda, B, ldb, beta, C,
							    ldc);
						assert_ok(ds_cuda_gemm(b, ab, ck, ta, tb, M, N, K, 0.7f, dA, lda, dB, ldb, beta,
								       dC, ldc));
						float *got = dget_as(ck, dC, nc);
						for (int i = 0; i < M; i++)   /* the padding columns: untouched */
							for (int j = N; j < ldc; j++)
								got[(size_t)i * ldc + j] = C[(size_t)i * ldc + j];
						round_to(ck, C, nc);
						assert_close(got, C, nc,
							     ck == DS_HALF_BF16 ? 8e-3 : ck == DS_HALF_FP16 ? 1e-3 : 2e-6);
						free(got); free(A); free(B); free(C);
						dfree(dA); dfree(dB); dfree(dC);
					}
		}
	}
	/* a leading dimension too small is cuBLAS's error, with its text */
	float *d = dmalloc(64 * 4);
	int rc = ds_cuda_gemm(b, DS_HALF_NONE, DS_HALF_NONE, 0, 0, 4, 4, 4, 1.0f, d, 3, d, 4, 0.0f, d, 4);
	assert_int_equal(rc, DS_CUDA_EBLAS + 7);   /* CUBLAS_STATUS_INVALID_VALUE */
	assert_true(strncmp(ds_cuda_strerror(rc), "cuBLAS: ", 8) == 0);
	dfree(d);
	ds_cuda_blas_destroy(b);
	ds_cuda_blas_destroy(b32);
}

/* attention's per-(b, head) products on strided views of qkv (B,T,3C) */
static void test_gemm_batch(void **state)
{
	(void)state;
	enum { B = 2, NH = 3, T = 8, hs = 4, C = NH * hs, C3 = 3 * C };
	struct ds_cuda_blas *b = NULL;
	assert_ok(ds_cuda_blas_create(&b, NULL, 0));
	for (int kk = 0; kk < 3; kk++) {
		const enum ds_half_kind ab = (enum ds_half_kind)kk;
		float *qkv = frand(B * T * C3, 1.0f), *att = malloc(B * NH * T * T * 4), *y = malloc(B * T * C * 4);
		round_to(ab, qkv, B * T * C3);
		void *dq = dput_as(ab, qkv, B * T * C3);
		float *datt = dmalloc(B * NH * T * T * 4), *dy = dmalloc(B * T * C * 4);
		/* scores: (T,T) = q (T,hs) k^T; q and k strided by T*3C over b, hs over h */
		const struct ds_cuda_batch s = { B * NH, NH, { T * C3, hs }, { T * C3, hs }, { NH * T * T, T * T } };
		for (int e = 0; e < B * NH; e++) {
			const int q = e / NH, r = e % NH;
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 0.5f, qkv + q * s.sa[0] + r * s.sa[1],
				    C3, qkv + C + q * s.sb[0] + r * s.sb[1], C3, 0.0f, att + q * s.sc[0] + r * s.sc[1], T);
		}
		const size_t es = ab == DS_HALF_NONE ? 4 : 2;
		assert_ok(ds_cuda_gemm_batch(b, &s, ab, DS_HALF_NONE, 0, 1, T, T, hs, 0.5f, dq, C3, (char *)dq + C * es, C3,
					     0.0f, datt, T));
		float *got = dgetn(datt, B * NH * T * T * 4);
		assert_close(got, att, B * NH * T * T, 2e-6);
		free(got);
		/* y[b,:,h] (T,hs) = att (T,T) @ v: C strided by T*C over b (not uniform) */
		const struct ds_cuda_batch yb = { B * NH, NH, { NH * T * T, T * T }, { T * C3, hs }, { T * C, hs } };
		round_to(ab, att, B * NH * T * T);
		float *datt16 = dput_as(ab, att, B * NH * T * T);
		for (int e = 0; e < B * NH; e++) {
			const int q = e / NH, r = e % NH;
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, att + q * yb.sa[0] + r * yb.sa[1],
				    T, qkv + 2 * C + q * yb.sb[0] + r * yb.sb[1], C3, 0.0f, y + q * yb.sc[0] + r * yb.sc[1], C);
		}
		assert_ok(ds_cuda_gemm_batch(b, &yb, ab, DS_HALF_NONE, 0, 0, T, hs, T, 1.0f, datt16, T,
					     (char *)dq + 2 * C * es, C3, 0.0f, dy, C));
		got = dgetn(dy, B * T * C * 4);
		assert_close(got, y, B * T * C, 2e-6);
		free(got);
		/* the same from fp32 buffers rounded on the way (the CPU's bf16 contract) */
		if (ab != DS_HALF_NONE) {
			float *q32 = dput(qkv, B * T * C3 * 4), *a32 = dput(att, B * NH * T * T * 4);
			assert_ok(ds_cuda_gemm_rounded(b, &yb, ab, 0, 0, T, hs, T, 1.0f, a32, T, q32 + 2 * C, C3, 0.0f, dy, C,
						       NULL));
			got = dgetn(dy, B * T * C * 4);
			assert_close(got, y, B * T * C, 2e-6);
			free(got);
			assert_ok(ds_cuda_gemm_rounded(b, NULL, ab, 1, 0, T, hs, T, 1.0f, a32, T, q32, C3, 0.0f, dy, C, NULL));
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, att, T, qkv, C3, 0.0f, y, C);
			got = dgetn(dy, B * T * C * 4);
			for (int i = 0; i < T; i++)   /* one product: the first T rows of hs columns */
				for (int j = 0; j < hs; j++)
					assert_true(fabsf(got[i * C + j] - y[i * C + j]) <= 2e-6f * (1.0f + fabsf(y[i * C + j])));
			free(got);
			dfree(q32);
			dfree(a32);
		}
		free(qkv); free(att); free(y);
		dfree(dq); dfree(datt); dfree(dy); dfree(datt16);
	}
	ds_cuda_blas_destroy(b);
}

/* the runtime calls of ds_cuda.h: a stream, device and pinned memory,
 * copies both ways and between device buffers, memset */
static void test_runtime(void **state)
{
	(void)state;
	int n = 0;
	assert_ok(ds_cuda_device_count(&n));
	assert_true(n >= 1);
	assert_ok(ds_cuda_set_device(0));
	size_t fr = 0, tot = 0;
	assert_ok(ds_cuda_mem_info(&fr, &tot));
	assert_true(fr > 0 && fr <= tot);
	void *st = NULL, *d1 = NULL, *d2 = NULL, *h = NULL;
	assert_ok(ds_cuda_stream_create(&st));
	assert_ok(ds_cuda_malloc(&d1, 4096));
	assert_ok(ds_cuda_malloc(&d2, 4096));
	assert_ok(ds_cuda_host_alloc(&h, 4096));
	unsigned char *hb = h;
	for (int i = 0; i < 4096; i++)
		hb[i] = (unsigned char)(i * 7);
	assert_ok(ds_cuda_memcpy(d1, h, 4096, st));
	assert_ok(ds_cuda_memset(d2, 0x5a, 4096, st));
	assert_ok(ds_cuda_memcpy(d2, d1, 1000, st));
	memset(h, 0, 4096);
	assert_ok(ds_cuda_memcpy(h, d2, 4096, st));
	assert_ok(ds_cuda_stream_sync(st));
	for (int i = 0; i < 4096; i++)
		assert_int_equal(hb[i], i < 1000 ? (unsigned char)(i * 7) : 0x5a);
	assert_ok(ds_cuda_host_free(h));
	assert_ok(ds_cuda_free(d1));
	assert_ok(ds_cuda_free(d2));
	assert_ok(ds_cuda_free(NULL));
	assert_ok(ds_cuda_stream_destroy(st));
}

#define DS_CUDA_GEMM_CASES cmocka_unit_test(test_gemm), cmocka_unit_test(test_gemm_batch), cmocka_unit_test(test_runtime)

/* ---- fused attention ------------------------------------------------------------ */

/* lib/model/gpt.c's attention on the CPU in fp32 on the given values
 * (sgemm per (b, head), the causal softmax, attention dropout): y (B,T,C),
 * lse (B,NH,T) of the scaled scores, and with dy the gradient dqkv. */
static void attn_ref(float *y, float *lse, float *dqkv, const float *dy, const float *qkv, int B, int T, int C, int NH,
		     float p, const struct ds_rng *gs)
{
	const int hs = C / NH, C3 = 3 * C;
	const size_t TT = (size_t)T * T;
	const float scale = 1.0f / sqrtf((float)hs);
	float *att = malloc(B * NH * TT * 4), *attd = malloc(B * NH * TT * 4), *datt = malloc(B * NH * TT * 4);
	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++) {
			const float *q = qkv + (size_t)b * T * C3 + h * hs;
			float *a = att + ((size_t)b * NH + h) * TT;
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, C3, q + C, C3, 0.0f, a, T);
			for (int t = 0; t < T; t++) {
				double mx = -INFINITY, s = 0;
				for (int t2 = 0; t2 <= t; t2++)
					mx = a[t * T + t2] > mx ? a[t * T + t2] : mx;
				for (int t2 = 0; t2 <= t; t2++)
					s += exp(a[t * T + t2] - mx);
				lse[((size_t)b * NH + h) * T + t] = (float)(mx + log(s));
			}
		}
	ds_kernel_causal_softmax_forward(att, B, NH, T);
	const float *P = att;
	if (p > 0) {
		ds_kernel_attention_dropout(attd, att, B, NH, T, p, gs);
		P = attd;
	}
	for (int b = 0; b < B; b++)
		for (int h = 0; h < NH; h++) {
			const size_t e = (size_t)b * NH + h;
			const float *v = qkv + (size_t)b * T * C3 + 2 * C + h * hs;
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, P + e * TT, T, v, C3, 0.0f,
				    y + (size_t)b * T * C + h * hs, C);
			if (!dy)
				continue;
			const float *g = dy + (size_t)b * T * C + h * hs;
			float *dv = dqkv + (size_t)b * T * C3 + 2 * C + h * hs;
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, g, C, v, C3, 0.0f, datt + e * TT, T);
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, P + e * TT, T, g, C, 0.0f, dv, C3);
		}
	if (dy) {
		ds_kernel_causal_softmax_backward(datt, att, B, NH, T, scale, p, p > 0 ? gs : NULL);
		for (int b = 0; b < B; b++)
			for (int h = 0; h < NH; h++) {
				const size_t e = (size_t)b * NH + h;
				const float *q = qkv + (size_t)b * T * C3 + h * hs;
				float *dq = dqkv + (size_t)b * T * C3 + h * hs;
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, datt + e * TT, T, q + C, C3,
					    0.0f, dq, C3);
				cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, datt + e * TT, T, q, C3, 0.0f,
					    dq + C, C3);
			}
	}
	free(att);
	free(attd);
	free(datt);
}

/* one shape, type and dropout rate, every implementation that runs it */
static void attn_case(enum ds_half_kind dt, int B, int NH, int T, int hs, float p)
{
	const int C = NH * hs;
	const size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * NH * T;
	struct ds_rng gs[4];
	for (int b = 0; b < B; b++)
		ds_rng_init(&gs[b], 5, 11, (uint64_t)(b + 3) << 20 | (2 << 4) | 1);
	float *qkv = frand(nq, 1.5f), *dy = frand(ny, 1.0f);
	round_to(dt, qkv, nq);
	round_to(dt, dy, ny);
	float *y = malloc(ny * 4), *lse = malloc(nl * 4), *dqkv = malloc(nq * 4);
	attn_ref(y, lse, dqkv, dy, qkv, B, T, C, NH, p, gs);
	const double ty = dt == DS_HALF_BF16 ? 8e-3 : dt == DS_HALF_FP16 ? 2e-3 : 2e-6;
	const double tg = dt == DS_HALF_BF16 ? 1.2e-2 : dt == DS_HALF_FP16 ? 2e-3 : 5e-6;
	for (int im = DS_ATTN_FMA; im <= DS_ATTN_TC; im++) {
		const enum ds_attn_impl impl = (enum ds_attn_impl)im;
		if (!ds_cuda_attention_supported(impl, dt, hs))
			continue;
		void *dq = dput_as(dt, qkv, nq), *ddy = dput_as(dt, dy, ny), *dyo = dput_as(dt, y, ny);
		void *ddq = dput_as(dt, dqkv, nq);   /* overwritten: holds the reference until then */
		float *dl = dmalloc(nl * 4);
		assert_ok(ds_cuda_attention_forward(dyo, dl, dq, B, T, C, NH, p, gs, dt, impl, NULL));
		float *gy = dget_as(dt, dyo, ny), *gl = dgetn(dl, nl * 4);
		assert_close(gy, y, ny, ty);
		assert_close(gl, lse, nl, 1e-6);
		assert_ok(ds_cuda_attention_backward(ddq, ddy, dq, dyo, dl, B, T, C, NH, p, gs, dt, impl, NULL));
		float *gq = dget_as(dt, ddq, nq);
		for (int part = 0; part < 3; part++) {   /* q, k, v gradients each */
			float *a = malloc(ny * 4), *e = malloc(ny * 4);
			for (size_t r = 0; r < (size_t)B * T; r++) {
				memcpy(a + r * C, gq + r * 3 * C + part * C, C * 4);
				memcpy(e + r * C, dqkv + r * 3 * C + part * C, C * 4);
			}
			assert_close(a, e, ny, tg);
			free(a);
			free(e);
		}
		/* run to run: the same bits (no atomics) */
		assert_ok(ds_cuda_attention_backward(ddq, ddy, dq, dyo, dl, B, T, C, NH, p, gs, dt, impl, NULL));
		float *gq2 = dget_as(dt, ddq, nq);
		assert_memory_equal(gq2, gq, nq * 4);
		free(gy); free(gl); free(gq); free(gq2);
		dfree(dq); dfree(ddy); dfree(dyo); dfree(ddq); dfree(dl);
	}
	/* the unfused path (gpt.c's steps on the device): fp32 products on
	 * the same values; with a 16-bit dt, bf16/fp16-rounded products and
	 * probabilities, within that type's tolerance */
	struct ds_cuda_blas *bl = NULL;
	assert_ok(ds_cuda_blas_create(&bl, NULL, 0));
	const size_t tt = (size_t)B * NH * T * T;
	float *q32 = dput(qkv, nq * 4), *dy32 = dput(dy, ny * 4), *y32 = dmalloc(ny * 4), *dq32 = dmalloc(nq * 4);
	float *att = dmalloc(tt * 4), *attd = dmalloc(tt * 4), *datt = dmalloc(tt * 4);
	assert_ok(ds_cuda_attention_unfused_forward(bl, dt, dt, y32, att, attd, q32, B, T, C, NH, p, gs, NULL));
	assert_ok(ds_cuda_attention_unfused_backward(bl, dt, dt, dq32, dy32, q32, att, attd, datt, B, T, C, NH, p, gs,
						     NULL));
	float *uy = dgetn(y32, ny * 4), *uq = dgetn(dq32, nq * 4);
	assert_close(uy, y, ny, ty);
	assert_close(uq, dqkv, nq, tg);
	free(uy); free(uq);
	dfree(q32); dfree(dy32); dfree(y32); dfree(dq32); dfree(att); dfree(attd); dfree(datt);
	ds_cuda_blas_destroy(bl);
	free(qkv); free(dy); free(y); free(lse); free(dqkv);
}

static void test_attention(void **state)
{
	(void)state;
	/* head sizes for each tile shape (32, 64, 128 columns: tiles of 64, 64
	 * and 32 rows); T = 70 and 40 leave partial tiles */
	for (int o = 0; o < NORDERS; o++) {
		set_order(o);
		for (int kk = 0; kk < 3; kk++) {
			/* two samples with dropout (per-sample streams); the other
			 * tile shapes on one sample (the emulation's time) */
			attn_case((enum ds_half_kind)kk, 2, 2, 70, 48, 0.15f);
			if (o > 0 && kk != DS_HALF_BF16)
				continue;   /* other orders: enough to show a race */
			attn_case((enum ds_half_kind)kk, 1, 2, 70, 16, 0.0f);
			attn_case((enum ds_half_kind)kk, 1, 2, 40, 80, 0.1f);
		}
	}
	/* what cannot run says so */
	assert_int_equal(ds_cuda_attention_forward(NULL, NULL, NULL, 1, 4, 129 * 2, 2, 0.0f, NULL, DS_HALF_NONE,
						   DS_ATTN_AUTO, NULL), 1);   /* cudaErrorInvalidValue: hs 129 */
}

#define DS_CUDA_ATTN_CASES cmocka_unit_test(test_attention)
