/* gpt_kernels.c - CPU kernels of the GPT passes (gpt_kernels.h).
 *
 * OpenMP over rows (or (b, head) pairs for attention), inner loops written
 * for the vectoriser (`omp simd` on reductions).  Statistics of the norms and
 * of the loss are summed in double.  Schedules are static, so results are
 * bitwise reproducible for a given thread count.
 */
#include "cpu/gpt_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/gpt_math.h"

void ds_kernel_dropout(float *x, int64_t n, const struct ds_rng *g, float p)
{
	if (p <= 0.0f)
		return;
	const float sc = 1.0f / (1.0f - p);
	const int64_t nb = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (nb > 4096)
	for (int64_t k = 0; k < nb; k++) {
		uint32_t r[4];
		ds_rng_block(g, (uint64_t)k, r);
		for (int j = 0; j < 4 && 4 * k + j < n; j++) {
			int64_t i = 4 * k + j;
			x[i] = ds_dropout_keep(r[j], p) ? x[i] * sc : 0.0f;
		}
	}
}

void ds_kernel_embed_forward(float *out, const int32_t *tok, const float *wte, const float *pos,
			     int B, int T, int C)
{
#pragma omp parallel for schedule(static)
	for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
		float *o = out + bt * C;
		const float *w = wte + (int64_t)tok[bt] * C;
		if (pos) {
			const float *p = pos + (bt % T) * C;
			for (int i = 0; i < C; i++)
				o[i] = w[i] + p[i];
		} else {
			memcpy(o, w, (size_t)C * sizeof(float));
		}
	}
}

void ds_kernel_embed_backward(float *dwte, float *dpos, const float *dout, const int32_t *tok,
			      int B, int T, int C)
{
	/* parallel over channel blocks: rows with the same token never race */
	const int CB = 64;
#pragma omp parallel for schedule(static)
	for (int c0 = 0; c0 < C; c0 += CB) {
		int c1 = c0 + CB < C ? c0 + CB : C;
		for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
			float *d = dwte + (int64_t)tok[bt] * C;
			const float *g = dout + bt * C;
			for (int i = c0; i < c1; i++)
				d[i] += g[i];
		}
		if (dpos)
			for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
				float *d = dpos + (bt % T) * C;
				const float *g = dout + bt * C;
				for (int i = c0; i < c1; i++)
					d[i] += g[i];
			}
	}
}

void ds_kernel_vocab_embed_forward(float *out, const int32_t *tok, const float *wte_l, int v0, int rows,
				   int B, int T, int C)
{
#pragma omp parallel for schedule(static)
	for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
		float *o = out + bt * C;
		const int64_t r = (int64_t)tok[bt] - v0;
		if (r >= 0 && r < rows)
			memcpy(o, wte_l + r * C, (size_t)C * sizeof(float));
		else
			memset(o, 0, (size_t)C * sizeof(float));
	}
}

void ds_kernel_pos_add(float *out, const float *pos, int B, int T, int C)
{
#pragma omp parallel for schedule(static)
	for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
		float *o = out + bt * C;
		const float *p = pos + (bt % T) * C;
		for (int i = 0; i < C; i++)
			o[i] += p[i];
	}
}

void ds_kernel_vocab_embed_backward(float *dwte_l, float *dpos, const float *dout, const int32_t *tok, int v0,
				    int rows, int B, int T, int C)
{
	/* as ds_kernel_embed_backward: channel blocks in parallel */
	const int CB = 64;
#pragma omp parallel for schedule(static)
	for (int c0 = 0; c0 < C; c0 += CB) {
		int c1 = c0 + CB < C ? c0 + CB : C;
		for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
			const int64_t r = (int64_t)tok[bt] - v0;
			if (r < 0 || r >= rows)
				continue;
			float *d = dwte_l + r * C;
			const float *g = dout + bt * C;
			for (int i = c0; i < c1; i++)
				d[i] += g[i];
		}
		if (dpos)
			for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
				float *d = dpos + (bt % T) * C;
				const float *g = dout + bt * C;
				for (int i = c0; i < c1; i++)
					d[i] += g[i];
			}
	}
}

/* x[0..n) rounded to bf16 values in place (ds_half_round_n's bits), for a
 * row a kernel just wrote (below, with the other clones) */
static void round_row(float *x, int64_t n);
static void pack_row16(uint16_t *h, const float *x, int64_t n);
static void unpack_row16(float *x, const uint16_t *h, int64_t n);
static void round_pack_row(float *x, uint16_t *h, int64_t n);
static void round_row_to(float *dst, const float *src, int64_t n);

void ds_kernel_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
				 const float *w, const float *b, int64_t N, int C, float eps)
{
	ds_kernel_layernorm_forward_r(out, mean, rstd, inp, w, b, N, C, eps, 0);
}

/* out (fp32, r16: rounded) or, with out NULL, out16 (bf16 only, through a
 * row of stack scratch: its bits are those of the rounded row) */
static void layernorm_fwd(float *out, uint16_t *out16, float *mean, float *rstd, const float *inp, const float *w,
			  const float *b, int64_t N, int C, float eps, int r16)
{
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		float row[out ? 1 : C];
		const float *x = inp + n * C;
		double s = 0;
		for (int i = 0; i < C; i++)
			s += x[i];
		double m = s / C, v = 0;
		for (int i = 0; i < C; i++) {
			double d = x[i] - m;
			v += d * d;
		}
		float fm = (float)m, rs = (float)(1.0 / sqrt(v / C + eps));
		float *o = out ? out + n * C : row;
#pragma omp simd
		for (int i = 0; i < C; i++)
			o[i] = (x[i] - fm) * rs * w[i] + b[i];
		if (!out)
			pack_row16(out16 + n * C, o, C);
		else if (r16)
			round_row(o, C);
		mean[n] = fm;
		rstd[n] = rs;
	}
}

void ds_kernel_layernorm_forward_r(float *out, float *mean, float *rstd, const float *inp, const float *w,
				   const float *b, int64_t N, int C, float eps, int r16)
{
	layernorm_fwd(out, NULL, mean, rstd, inp, w, b, N, C, eps, r16);
}

void ds_kernel_layernorm_forward16(uint16_t *out16, float *mean, float *rstd, const float *inp, const float *w,
				   const float *b, int64_t N, int C, float eps)
{
	layernorm_fwd(NULL, out16, mean, rstd, inp, w, b, N, C, eps, 1);
}

/* dw (C) += sum_n a[n,i] * b'[n,i] style column reductions, parallel over
 * channel blocks so the order over n is fixed. */
void ds_kernel_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
				  const float *inp, const float *w, const float *mean, const float *rstd,
				  int64_t N, int C)
{
	ds_kernel_layernorm_backward_r(dinp, dw, db, dout, inp, w, mean, rstd, N, C, 0);
}

/* with inp16 the input from its bits (each row unpacked as it is read:
 * the values inp would hold), with d16 (r16 1) each rounded row's bits go
 * there too, while in cache */
static void layernorm_bwd(float *dinp, uint16_t *d16, float *dw, float *db, const float *dout, const float *inp,
			  const uint16_t *inp16, const float *w, const float *mean, const float *rstd, int64_t N,
			  int C, int r16)
{
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		float xr[inp16 ? C : 1];
		const float *x = inp16 ? xr : inp + n * C, *g = dout + n * C;
		if (inp16)
			unpack_row16(xr, inp16 + n * C, C);
		const float m = mean[n], rs = rstd[n];
		float sg = 0, sgx = 0;
#pragma omp simd reduction(+:sg, sgx)
		for (int i = 0; i < C; i++) {
			float dn = w[i] * g[i];
			sg += dn;
			sgx += dn * (x[i] - m) * rs;
		}
		sg /= C;
		sgx /= C;
		float *d = dinp + n * C;
#pragma omp simd
		for (int i = 0; i < C; i++) {
			float xh = (x[i] - m) * rs;
			d[i] += rs * (w[i] * g[i] - sg - xh * sgx);
		}
		if (d16)
			round_pack_row(d, d16 + n * C, C);
		else if (r16)
			round_row(d, C);
	}
	const int CB = 64;
#pragma omp parallel for schedule(static)
	for (int c0 = 0; c0 < C; c0 += CB) {
		const int wd = c0 + CB < C ? CB : C - c0;
		float aw[64], ab[64], xs[64];
		for (int i = 0; i < wd; i++)
			aw[i] = ab[i] = 0;
		for (int64_t n = 0; n < N; n++) {
			const float *x = inp16 ? xs : inp + n * C + c0, *g = dout + n * C + c0;
			if (inp16)
				unpack_row16(xs, inp16 + n * C + c0, wd);
			const float m = mean[n], rs = rstd[n];
			for (int i = 0; i < wd; i++) {
				aw[i] += g[i] * (x[i] - m) * rs;
				ab[i] += g[i];
			}
		}
		for (int i = 0; i < wd; i++) {
			dw[c0 + i] += aw[i];
			db[c0 + i] += ab[i];
		}
	}
}

void ds_kernel_layernorm_backward_r(float *dinp, float *dw, float *db, const float *dout, const float *inp,
				    const float *w, const float *mean, const float *rstd, int64_t N, int C, int r16)
{
	layernorm_bwd(dinp, NULL, dw, db, dout, inp, NULL, w, mean, rstd, N, C, r16);
}

void ds_kernel_layernorm_backward16(float *dinp, uint16_t *d16, float *dw, float *db, const float *dout,
				    const float *inp, const uint16_t *inp16, const float *w, const float *mean,
				    const float *rstd, int64_t N, int C)
{
	layernorm_bwd(dinp, d16, dw, db, dout, inp, inp16, w, mean, rstd, N, C, 1);
}

void ds_kernel_rmsnorm_forward(float *out, float *rms, float *inv, const float *inp,
			       const float *w, int64_t N, int C, float eps)
{
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		const float *x = inp + n * C;
		double s = 0;
		for (int i = 0; i < C; i++)
			s += (double)x[i] * x[i];
		double r = sqrt(s / C);
		float iv = (float)(1.0 / (r + eps));
		float *o = out + n * C;
#pragma omp simd
		for (int i = 0; i < C; i++)
			o[i] = w[i] * (x[i] * iv);
		rms[n] = (float)r;
		inv[n] = iv;
	}
}

/* y_i = w_i x_i / (r + eps), r = sqrt(sum x^2 / C):
 * dx_i = inv * w_i g_i - inv^2 * (sum_j w_j g_j x_j) * x_i / (C r). */
void ds_kernel_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
				const float *w, const float *rms, const float *inv, int64_t N, int C)
{
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		const float *x = inp + n * C, *g = dout + n * C;
		const float iv = inv[n], r = rms[n];
		float s = 0;
#pragma omp simd reduction(+:s)
		for (int i = 0; i < C; i++)
			s += w[i] * g[i] * x[i];
		float k = r > 0 ? iv * iv * s / (C * r) : 0.0f;
		float *d = dinp + n * C;
#pragma omp simd
		for (int i = 0; i < C; i++)
			d[i] += iv * w[i] * g[i] - k * x[i];
	}
	const int CB = 64;
#pragma omp parallel for schedule(static)
	for (int c0 = 0; c0 < C; c0 += CB) {
		int c1 = c0 + CB < C ? c0 + CB : C;
		float aw[64];
		for (int i = 0; i < c1 - c0; i++)
			aw[i] = 0;
		for (int64_t n = 0; n < N; n++) {
			const float *x = inp + n * C, *g = dout + n * C;
			const float iv = inv[n];
			for (int i = c0; i < c1; i++)
				aw[i - c0] += g[i] * (x[i] * iv);
		}
		for (int i = c0; i < c1; i++)
			dw[i] += aw[i - c0];
	}
}

void ds_kernel_bias_add(float *out, const float *b, int64_t N, int OC)
{
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		float *o = out + n * OC;
		for (int i = 0; i < OC; i++)
			o[i] += b[i];
	}
}

void ds_kernel_bias_fill(float *out, const float *b, int64_t N, int OC)
{
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		float *o = out + n * OC;
		if (b)
			memcpy(o, b, (size_t)OC * sizeof(float));
		else
			memset(o, 0, (size_t)OC * sizeof(float));
	}
}

/* db[0..w) += column sums of dout's rows (N rows, leading dimension OC),
 * each column summed over the rows in order */
static void bias_cols(float *db, const float *dout, int64_t N, int OC, int w);
/* the same on bf16 rows, each value unpacked as it is read */
static void bias_cols16(float *db, const uint16_t *dout, int64_t N, int OC, int w);

void ds_kernel_bias_backward(float *db, const float *dout, int64_t N, int OC)
{
	const int CB = 64;
#pragma omp parallel for schedule(static)
	for (int c0 = 0; c0 < OC; c0 += CB)
		bias_cols(db + c0, dout + c0, N, OC, c0 + CB < OC ? CB : OC - c0);
}

void ds_kernel_bias_backward16(float *db, const uint16_t *dout16, int64_t N, int OC)
{
	const int CB = 64;
#pragma omp parallel for schedule(static)
	for (int c0 = 0; c0 < OC; c0 += CB)
		bias_cols16(db + c0, dout16 + c0, N, OC, c0 + CB < OC ? CB : OC - c0);
}

void ds_kernel_add_inplace(float *out, const float *a, int64_t n)
{
#pragma omp parallel for simd schedule(static)
	for (int64_t i = 0; i < n; i++)
		out[i] += a[i];
}

void ds_kernel_rotary(float *qkv, const float *cs, const float *sn, int B, int T, int C, int NH,
		      int rd, int inverse)
{
	const int hs = C / NH, half = rd / 2;
	const float sg = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
	for (int64_t bt = 0; bt < (int64_t)B * T; bt++) {
		const int t = (int)(bt % T);
		const float *c = cs + (int64_t)t * half, *s = sn + (int64_t)t * half;
		for (int part = 0; part < 2; part++)
			for (int h = 0; h < NH; h++) {
				float *x = qkv + bt * 3 * C + part * C + h * hs;
				for (int i = 0; i < half; i++)
					ds_rotary_pair(&x[i], &x[i + half], c[i], sg * s[i]);
			}
	}
}

/* keep[t2] = 1/(1-p) or 0 for row t of head h of one sample. */
static void drop_row(float *keep, const struct ds_rng *g, int h, int t, int T, float p)
{
	const float sc = 1.0f / (1.0f - p);
	uint64_t base = ((uint64_t)h * T + t) * T;
	for (int t2 = 0; t2 <= t; t2++) {
		uint64_t e = base + t2;
		uint32_t r[4];
		ds_rng_block(g, e >> 2, r);
		keep[t2] = ds_dropout_keep(r[e & 3], p) ? sc : 0.0f;
	}
}

/* The hot element-wise loops are compiled for AVX-512, AVX2 and baseline
 * x86-64, picked at load time (GCC function multi-versioning): the build
 * itself targets baseline x86-64.  -std=c11 keeps FMA contraction off, so
 * every version rounds the same way.  The AVX-512 version is x86-64-v4's
 * (F, BW, DQ, VL: every AVX-512 CPU since Skylake-SP, AMD Zen 4 on): with
 * AVX512F alone GCC ran the loops that mix bf16 bits and fp32 at 256 bits
 * with 16-bit packing shuffles, no 512-bit word lanes to convert in
 * (bench/gpt-step gpt2, 2026-12-04: the bf16 step's non-matrix work 6%
 * less). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DS_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define DS_CLONES
#endif

/* bf16 bits <-> fp32, inline so the row loops below vectorise; the
 * rounding is ds_fp32_to_bf16's (nearest even, NaN kept quiet) */
static inline float bf16_get(uint16_t h)
{
	const uint32_t u = (uint32_t)h << 16;
	float f;
	memcpy(&f, &u, sizeof f);
	return f;
}

static inline uint16_t bf16_put(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
	return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : r);
}

/* bf16 rounding of an fp32 value (ds_half_round_n's bits: bf16_get of
 * bf16_put), in 32-bit lanes only: GCC vectorises loops that narrow to 16
 * bits at 256 bits even for AVX-512, and these at 512 */
static inline float bf16_round(float f)
{
	uint32_t u;
	memcpy(&u, &f, sizeof u);
	const uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? u | 0x400000u : u + 0x7fffu + ((u >> 16) & 1u);
	const uint32_t b = r & 0xffff0000u;
	float o;
	memcpy(&o, &b, sizeof o);
	return o;
}

DS_CLONES
static void round_row(float *x, int64_t n)
{
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		x[i] = bf16_round(x[i]);
}

DS_CLONES
static void add_blk(float *out, const float *a, const float *b, int64_t n, int r16)
{
	if (r16) {
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			out[i] = bf16_round(a[i] + b[i]);
	} else {
#pragma omp simd
		for (int64_t i = 0; i < n; i++)
			out[i] = a[i] + b[i];
	}
}

void ds_kernel_add_r(float *out, const float *a, const float *b, int64_t n, int r16)
{
	const int64_t blk = 8192;   /* as util/half.c's blocks */
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < n; i += blk)
		add_blk(out + i, a + i, b + i, n - i < blk ? n - i : blk, r16);
}

void ds_kernel_add16(float *out, uint16_t *out16, const float *a, const float *b, int64_t n)
{
	const int64_t blk = 8192;
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < n; i += blk) {
		const int64_t k = n - i < blk ? n - i : blk;
		add_blk(out + i, a + i, b + i, k, 1);
		pack_row16(out16 + i, out + i, k);
	}
}

DS_CLONES
static void bias_cols(float *db, const float *dout, int64_t N, int OC, int w)
{
	float a[64] = { 0 };
	if (w == 64) {   /* a full strip: a fixed trip count the vectoriser unrolls */
		for (int64_t n = 0; n < N; n++) {
			const float *g = dout + n * OC;
#pragma omp simd
			for (int i = 0; i < 64; i++)
				a[i] += g[i];
		}
	} else {
		for (int64_t n = 0; n < N; n++) {
			const float *g = dout + n * OC;
			for (int i = 0; i < w; i++)
				a[i] += g[i];
		}
	}
	for (int i = 0; i < w; i++)
		db[i] += a[i];
}

DS_CLONES
static void bias_cols16(float *db, const uint16_t *dout, int64_t N, int OC, int w)
{
	float a[64] = { 0 };
	if (w == 64) {
		for (int64_t n = 0; n < N; n++) {
			const uint16_t *g = dout + n * OC;
#pragma omp simd
			for (int i = 0; i < 64; i++)
				a[i] += bf16_get(g[i]);
		}
	} else {
		for (int64_t n = 0; n < N; n++) {
			const uint16_t *g = dout + n * OC;
			for (int i = 0; i < w; i++)
				a[i] += bf16_get(g[i]);
		}
	}
	for (int i = 0; i < w; i++)
		db[i] += a[i];
}

/* row t's causal probabilities (t2 <= t) from its scores a into e, which
 * may be a */
DS_CLONES
static void softmax_probs(const float *a, float *e, int t)
{
	float mx = -INFINITY;
#pragma omp simd reduction(max:mx)
	for (int t2 = 0; t2 <= t; t2++)
		mx = a[t2] > mx ? a[t2] : mx;
	float sum = 0;
#pragma omp simd reduction(+:sum)
	for (int t2 = 0; t2 <= t; t2++) {
		e[t2] = ds_expf(a[t2] - mx);
		sum += e[t2];
	}
	const float is = 1.0f / sum;
#pragma omp simd
	for (int t2 = 0; t2 <= t; t2++)
		e[t2] *= is;
}

/* one causal softmax row t of scores a (T): probabilities for t2 <= t,
 * zeros above the diagonal */
static void softmax_row(float *a, int t, int T)
{
	softmax_probs(a, a, t);
	for (int t2 = t + 1; t2 < T; t2++)
		a[t2] = 0;
}

void ds_kernel_causal_softmax_forward(float *att, int B, int NH, int T)
{
	ds_kernel_causal_softmax_forward_r(att, B, NH, T, 0);
}

void ds_kernel_causal_softmax_forward_r(float *att, int B, int NH, int T, int r16)
{
	const int64_t rows = (int64_t)B * NH * T;
#pragma omp parallel for schedule(static)
	for (int64_t r = 0; r < rows; r++) {
		softmax_row(att + r * T, (int)(r % T), T);
		if (r16)
			round_row(att + r * T, r % T + 1);   /* the zeros above the diagonal stay zeros */
	}
}

void ds_kernel_attention_dropout(float *attd, const float *att, int B, int NH, int T, float p,
				 const struct ds_rng *gs)
{
	ds_kernel_attention_dropout_h0(attd, att, B, NH, 0, T, p, gs);
}

void ds_kernel_attention_dropout_h0(float *attd, const float *att, int B, int NH, int h0, int T, float p,
				    const struct ds_rng *gs)
{
	const int64_t rows = (int64_t)B * NH * T;
#pragma omp parallel
	{
		float *keep = malloc((size_t)T * sizeof(float));
#pragma omp for schedule(static)
		for (int64_t r = 0; r < rows; r++) {
			const int t = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / ((int64_t)T * NH));
			const float *a = att + r * T;
			float *d = attd + r * T;
			drop_row(keep, &gs[b], h0 + h, t, T, p);
			for (int t2 = 0; t2 <= t; t2++)
				d[t2] = a[t2] * keep[t2];
			for (int t2 = t + 1; t2 < T; t2++)
				d[t2] = 0;
		}
		free(keep);
	}
}

DS_CLONES
static void softmax_bwd_row(float *d, const float *a, int t, int T, float scale)
{
	float s = 0;
#pragma omp simd reduction(+:s)
	for (int t2 = 0; t2 <= t; t2++)
		s += a[t2] * d[t2];
#pragma omp simd
	for (int t2 = 0; t2 <= t; t2++)
		d[t2] = scale * a[t2] * (d[t2] - s);
	for (int t2 = t + 1; t2 < T; t2++)
		d[t2] = 0;
}

void ds_kernel_causal_softmax_backward(float *datt, const float *att, int B, int NH, int T,
				       float scale, float p, const struct ds_rng *gs)
{
	ds_kernel_causal_softmax_backward_h0(datt, att, B, NH, 0, T, scale, p, gs);
}

void ds_kernel_causal_softmax_backward_h0(float *datt, const float *att, int B, int NH, int h0, int T,
					  float scale, float p, const struct ds_rng *gs)
{
	ds_kernel_causal_softmax_backward_r(datt, att, B, NH, h0, T, scale, p, gs, 0);
}

void ds_kernel_causal_softmax_backward_r(float *datt, const float *att, int B, int NH, int h0, int T, float scale,
					 float p, const struct ds_rng *gs, int r16)
{
	const int64_t rows = (int64_t)B * NH * T;
#pragma omp parallel
	{
		float *keep = p > 0 ? malloc((size_t)T * sizeof(float)) : NULL;
#pragma omp for schedule(static)
		for (int64_t r = 0; r < rows; r++) {
			const int t = (int)(r % T), h = (int)(r / T % NH), b = (int)(r / ((int64_t)T * NH));
			float *d = datt + r * T;
			if (keep) {
				drop_row(keep, &gs[b], h0 + h, t, T, p);
				for (int t2 = 0; t2 <= t; t2++)
					d[t2] *= keep[t2];
			}
			softmax_bwd_row(d, att + r * T, t, T, scale);
			if (r16)
				round_row(d, t + 1);
		}
		free(keep);
	}
}

/* a row's bf16 bits, and back (DS_CLONES: vectorised); a packed row's
 * bits are those of the row rounded, so no rounding pass comes first */
DS_CLONES
static void pack_row16(uint16_t *h, const float *x, int64_t n)
{
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		h[i] = bf16_put(x[i]);
}

DS_CLONES
static void unpack_row16(float *x, const uint16_t *h, int64_t n)
{
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		x[i] = bf16_get(h[i]);
}

/* dst = src rounded (a row read into scratch) */
DS_CLONES
static void round_row_to(float *dst, const float *src, int64_t n)
{
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		dst[i] = bf16_round(src[i]);
}

/* round_row and pack_row16 in one pass: x rounded in place, its bits to h */
DS_CLONES
static void round_pack_row(float *x, uint16_t *h, int64_t n)
{
#pragma omp simd
	for (int64_t i = 0; i < n; i++) {
		const uint16_t b = bf16_put(x[i]);
		h[i] = b;
		x[i] = bf16_get(b);
	}
}

/* softmax_row with its probabilities rounded to bf16: their bits to h
 * (t2 <= t), and with e == a their values to a (zeros above the diagonal).
 * e: a, or a row of scratch (T) that takes the exponentials instead, a
 * then only read.  (The loops that mix 16-bit and fp32 lanes are the
 * conversions alone: GCC runs those at 256 bits, the rest at 512.) */
static void softmax_row16(float *a, float *e, uint16_t *h, int t, int T)
{
	softmax_probs(a, e, t);
	if (e != a) {
		pack_row16(h, e, t + 1);
		return;
	}
	round_pack_row(a, h, t + 1);
	for (int t2 = t + 1; t2 < T; t2++)
		a[t2] = 0;
}

void ds_kernel_causal_softmax_forward16(float *att, uint16_t *att16, int B, int NH, int T, int f32)
{
	const int64_t rows = (int64_t)B * NH * T;
#pragma omp parallel
	{
		float e[f32 ? 1 : (size_t)T];   /* the exponentials where att is only read (4 T bytes) */
#pragma omp for schedule(static)
		for (int64_t r = 0; r < rows; r++)
			softmax_row16(att + r * T, f32 ? att + r * T : e, att16 + r * T, (int)(r % T), T);
	}
}

/* softmax_bwd_row of dP's row src rounded to bf16 as it is read, P's from
 * its bf16 bits p (unpacked into pr, scratch of T): dS's bits to o16 where
 * it is not NULL, else its values rounded to d (zeros above the diagonal);
 * d is dS's row or scratch (T), and may be src; o16 may be p.  The rounding
 * rides the sum's pass, with softmax_bwd_row's arithmetic in the same
 * order (the same bits); the loops that mix 16-bit and fp32 lanes are the
 * conversions alone (as softmax_row16). */
DS_CLONES
static void softmax_bwd_row16(float *d, float *pr, const float *src, const uint16_t *p, uint16_t *o16, int t, int T,
			      float scale)
{
	unpack_row16(pr, p, t + 1);
	float s = 0;
#pragma omp simd reduction(+:s)
	for (int t2 = 0; t2 <= t; t2++) {
		const float v = bf16_round(src[t2]);
		d[t2] = v;
		s += pr[t2] * v;
	}
	if (o16) {
#pragma omp simd
		for (int t2 = 0; t2 <= t; t2++)
			d[t2] = scale * pr[t2] * (d[t2] - s);
		pack_row16(o16, d, t + 1);
		return;
	}
#pragma omp simd
	for (int t2 = 0; t2 <= t; t2++)
		d[t2] = bf16_round(scale * pr[t2] * (d[t2] - s));
	for (int t2 = t + 1; t2 < T; t2++)
		d[t2] = 0;
}

void ds_kernel_causal_softmax_backward16(float *datt, const uint16_t *att16, uint16_t *ds16, int B, int NH, int T,
					 float scale)
{
	const int64_t rows = (int64_t)B * NH * T;
#pragma omp parallel
	{
		/* P's row, and dP's rounded where dS goes to ds16 (8 T bytes: no
		 * allocation to fail) */
		float pr[2 * (size_t)T];
#pragma omp for schedule(static)
		for (int64_t r = 0; r < rows; r++)
			softmax_bwd_row16(ds16 ? pr + T : datt + r * T, pr, datt + r * T, att16 + r * T,
					  ds16 ? ds16 + r * T : NULL, (int)(r % T), T, scale);
	}
}

DS_CLONES
static void act_fwd_row(float *o, const float *x, int F, int act)
{
	if (act == 0) {
#pragma omp simd
		for (int i = 0; i < F; i++)
			o[i] = ds_gelu(x[i]);
		return;
	}
	if (act == 3) {
#pragma omp simd
		for (int i = 0; i < F; i++)
			o[i] = ds_gelu_exact(x[i]);
		return;
	}
	const float *a = x, *b = x + F;
	if (act == 1) {
#pragma omp simd
		for (int i = 0; i < F; i++)
			o[i] = ds_gelu(a[i]) * b[i];
	} else if (act == 4) {
#pragma omp simd
		for (int i = 0; i < F; i++)
			o[i] = ds_gelu_exact(a[i]) * b[i];
	} else {
#pragma omp simd
		for (int i = 0; i < F; i++)
			o[i] = ds_silu(a[i]) * b[i];
	}
}

void ds_kernel_act_forward(float *out, const float *inp, int64_t N, int F, int act)
{
	ds_kernel_act_forward_r(out, inp, N, F, act, 0);
}

void ds_kernel_act_forward_r(float *out, const float *inp, int64_t N, int F, int act, int r16)
{
	const int w = ds_act_gated(act) ? 2 * F : F;
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		act_fwd_row(out + n * F, inp + n * w, F, act);
		if (r16)
			round_row(out + n * F, F);
	}
}

void ds_kernel_act_forward16(uint16_t *out16, uint16_t *in16, const float *inp, int64_t N, int F, int act)
{
	const int w = ds_act_gated(act) ? 2 * F : F;
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		float row[F], x[w];   /* the output's row and the input's rounded, in cache */
		round_row_to(x, inp + n * w, w);
		act_fwd_row(row, x, F, act);
		pack_row16(out16 + n * F, row, F);
		if (in16)
			pack_row16(in16 + n * w, x, w);
	}
}

DS_CLONES
static void act_bwd_row(float *d, const float *g, const float *x, int F, int act)
{
	if (act == 0) {
#pragma omp simd
		for (int i = 0; i < F; i++)
			d[i] = ds_gelu_grad(x[i]) * g[i];
		return;
	}
	if (act == 3) {
#pragma omp simd
		for (int i = 0; i < F; i++)
			d[i] = ds_gelu_exact_grad(x[i]) * g[i];
		return;
	}
	const float *a = x, *b = x + F;
	float *da = d, *db = d + F;
	if (act == 1) {
#pragma omp simd
		for (int i = 0; i < F; i++) {
			da[i] = ds_gelu_grad(a[i]) * b[i] * g[i];
			db[i] = ds_gelu(a[i]) * g[i];
		}
	} else if (act == 4) {
#pragma omp simd
		for (int i = 0; i < F; i++) {
			da[i] = ds_gelu_exact_grad(a[i]) * b[i] * g[i];
			db[i] = ds_gelu_exact(a[i]) * g[i];
		}
	} else {
#pragma omp simd
		for (int i = 0; i < F; i++) {
			da[i] = ds_silu_grad(a[i]) * b[i] * g[i];
			db[i] = ds_silu(a[i]) * g[i];
		}
	}
}

void ds_kernel_act_backward(float *dinp, const float *dout, const float *inp, int64_t N, int F,
			    int act)
{
	ds_kernel_act_backward_r(dinp, dout, inp, N, F, act, 0);
}

void ds_kernel_act_backward_r(float *dinp, const float *dout, const float *inp, int64_t N, int F, int act,
			      int r16)
{
	const int w = ds_act_gated(act) ? 2 * F : F;
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		act_bwd_row(dinp + n * w, dout + n * F, inp + n * w, F, act);
		if (r16)
			round_row(dinp + n * w, w);
	}
}

void ds_kernel_act_backward16(float *dinp, uint16_t *d16, const float *dout, const uint16_t *inp16, int64_t N,
			      int F, int act)
{
	const int w = ds_act_gated(act) ? 2 * F : F;
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		float x[w], g[F];   /* the input's row from its bits, dout's rounded, in cache */
		unpack_row16(x, inp16 + n * w, w);
		round_row_to(g, dout + n * F, F);
		act_bwd_row(dinp + n * w, g, x, F, act);
		if (d16)
			round_pack_row(dinp + n * w, d16 + n * w, w);
		else
			round_row(dinp + n * w, w);
	}
}

DS_CLONES
static float xent_row_lse(const float *l, int V)
{
	float mx = -INFINITY;
#pragma omp simd reduction(max:mx)
	for (int i = 0; i < V; i++)
		mx = l[i] > mx ? l[i] : mx;
	float s = 0;
#pragma omp simd reduction(+:s)
	for (int i = 0; i < V; i++)
		s += ds_expf(l[i] - mx);
	return (float)(mx + log((double)s));
}

double ds_kernel_xent_forward(float *lse, const float *logits, const int32_t *targets, int64_t N,
			      int V, int Vp)
{
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++)
		lse[n] = xent_row_lse(logits + n * Vp, V);
	/* serial sum: the same bits whatever the thread count */
	double total = 0;
	for (int64_t n = 0; n < N; n++)
		total += (double)lse[n] - (double)logits[n * Vp + targets[n]];
	return total;
}

DS_CLONES
static void xent_row_grad(float *l, float z, int V, float dscale)
{
#pragma omp simd
	for (int i = 0; i < V; i++)
		l[i] = dscale * ds_expf(l[i] - z);
}

void ds_kernel_xent_backward(float *logits, const float *lse, const int32_t *targets, int64_t N,
			     int V, int Vp, float dscale)
{
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		float *l = logits + n * Vp;
		xent_row_grad(l, lse[n], V, dscale);
		l[targets[n]] -= dscale;
		for (int i = V; i < Vp; i++)
			l[i] = 0;
	}
}

DS_CLONES
static float row_max(const float *x, int n)
{
	float mx = -INFINITY;
#pragma omp simd reduction(max:mx)
	for (int i = 0; i < n; i++)
		mx = x[i] > mx ? x[i] : mx;
	return mx;
}

DS_CLONES
static float row_sumexp(const float *x, int n, float mx)
{
	float s = 0;
#pragma omp simd reduction(+:s)
	for (int i = 0; i < n; i++)
		s += ds_expf(x[i] - mx);
	return s;
}

/* the bf16 rows in chunks of XCH, unpacked into stack scratch for fp32
 * loops (the exponentials at 512 bits: GCC runs a loop that reads 16-bit
 * lanes at 256); the sum of exponentials per chunk, the chunks' sums added
 * in order */
enum { XCH = 4096 };

static float xent_row_lse16(const uint16_t *l, int V)
{
	float x[XCH], mx = -INFINITY, s = 0;
	for (int c = 0; c < V; c += XCH) {
		const int n = V - c < XCH ? V - c : XCH;
		unpack_row16(x, l + c, n);
		const float m = row_max(x, n);
		mx = m > mx ? m : mx;
	}
	for (int c = 0; c < V; c += XCH) {
		const int n = V - c < XCH ? V - c : XCH;
		unpack_row16(x, l + c, n);
		s += row_sumexp(x, n, mx);
	}
	return (float)(mx + log((double)s));
}

double ds_kernel_xent_forward16(float *lse, uint16_t *logits, const int32_t *targets, int64_t N, int V, int Vp)
{
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		uint16_t *l = logits + n * Vp;
		for (int i = V; i < Vp; i++)
			l[i] = 0xff80u;   /* -inf */
		if (targets)
			lse[n] = xent_row_lse16(l, V);
	}
	double total = 0;   /* serial: the same bits whatever the thread count */
	for (int64_t n = 0; targets && n < N; n++)
		total += (double)lse[n] - (double)bf16_get(logits[n * Vp + targets[n]]);
	return total;
}

static void xent_row_grad16(uint16_t *l, float z, int V, float dscale, int tgt)
{
	const float lt = bf16_get(l[tgt]);
	float x[XCH];
	for (int c = 0; c < V; c += XCH) {
		const int n = V - c < XCH ? V - c : XCH;
		unpack_row16(x, l + c, n);
		xent_row_grad(x, z, n, dscale);   /* element-wise: the fp32 kernel's bits */
		pack_row16(l + c, x, n);
	}
	l[tgt] = bf16_put(dscale * ds_expf(lt - z) - dscale);   /* the fp32 kernel's order: subtract, then round */
}

void ds_kernel_xent_backward16(uint16_t *logits, const float *lse, const int32_t *targets, int64_t N, int V,
			       int Vp, float dscale)
{
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		uint16_t *l = logits + n * Vp;
		xent_row_grad16(l, lse[n], V, dscale, targets[n]);
		for (int i = V; i < Vp; i++)
			l[i] = 0;
	}
}

/* ---- vocabulary-parallel cross-entropy ------------------------------- */

void ds_kernel_xent_vp_max(float *mx, float *pred, const float *logits, const int32_t *targets, int v0,
			   int64_t N, int Vl, int Vpl)
{
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		const float *l = logits + n * Vpl;
		float m = -INFINITY;
		for (int i = 0; i < Vl; i++)
			m = l[i] > m ? l[i] : m;
		mx[n] = m;
		const int64_t t = (int64_t)targets[n] - v0;
		pred[n] = t >= 0 && t < Vl ? l[t] : 0.0f;
	}
}

void ds_kernel_xent_vp_sumexp(float *se, const float *logits, const float *mx, int64_t N, int Vl, int Vpl)
{
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		const float *l = logits + n * Vpl;
		float s = 0;
		for (int i = 0; i < Vl; i++)
			s += ds_expf(l[i] - mx[n]);
		se[n] = s;
	}
}

void ds_kernel_xent_vp_backward(float *logits, const float *lse, const int32_t *targets, int v0, int64_t N,
				int Vl, int Vpl, float dscale)
{
#pragma omp parallel for schedule(static)
	for (int64_t n = 0; n < N; n++) {
		float *l = logits + n * Vpl;
		xent_row_grad(l, lse[n], Vl, dscale);
		const int64_t t = (int64_t)targets[n] - v0;
		if (t >= 0 && t < Vl)
			l[t] -= dscale;
		for (int i = Vl; i < Vpl; i++)
			l[i] = 0;
	}
}
