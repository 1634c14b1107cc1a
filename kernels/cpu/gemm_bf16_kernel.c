/* gemm_bf16_kernel.c - dstk's own bf16 matrix product (gemm_bf16_int.h).
 *
 * BLIS's structure with AVX512_BF16's pair dot product: op(A) is packed
 * into panels of MR rows and op(B) into panels of NR columns, both as bf16
 * pairs along K (one 32-bit word holds op(X)[.., 2p] and op(X)[.., 2p+1]),
 * converted from fp32 (round to nearest even) while packing, or copied
 * where A already holds bf16.  The micro-kernel keeps an MR x NR block of C
 * in 24 fp32 registers; per pair it loads NR/16 words of B and broadcasts
 * one word of A per row into vdpbf16ps, which adds a0*b0 then a1*b1 to each
 * fp32 lane (products of bf16 values are exact in fp32; bf16 subnormal
 * inputs read as zero), and stores C in fp32 or, for callers that keep it
 * in bf16, rounded to nearest even.
 *
 * Packing order: the smaller operand is packed whole first (in parallel);
 * the larger one (a layer's weight matrix against a few hundred rows of
 * activations) is streamed: the work is split into groups of its panels,
 * each packed by the thread that multiplies it, one K block at a time, into
 * that thread's buffer, where it is used while it is still in the core's
 * cache.  Weight matrices come from memory, not cache, in a training step:
 * packing all of one first and reading the packed copy back would cost two
 * more trips to memory and a barrier, and the two threads' reads and
 * products overlap this way.  K is blocked by KCP pairs so a B micro-panel
 * stays near L1 while the A panels pass over it (not for a bf16 C, which
 * is rounded once, after the whole sum).  Batches of small products
 * (attention's per-head ones) run one product per thread instead.
 * A portable C micro-kernel and packer with the same layout stand in where
 * the CPU lacks AVX512_BF16: tests run the packing and blocking on any CPU.
 * The vector code is compiled with target attributes, chosen at run time:
 * the build never requires AVX-512.
 */
#include "config.h"

#include "cpu/gemm_bf16_int.h"

#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/half.h"

#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 10 || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX512BF16_CODE 1
#define TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))
#endif

#define MR 6     /* rows of a micro-tile */
#define NR 64    /* columns of a micro-tile: 4 vectors of 16 fp32 */
#define KCP 128  /* K pairs per block: a B micro-panel slice is KCP*NR*4 = 32 KiB */
#define PF 4     /* pairs ahead that the streaming packer prefetches */
#define QP 32    /* narrow panels the row-pair packer converts at once */

int ds_gemm_bf16_cpu_avx512bf16(void)
{
#ifdef HAVE_AVX512BF16_CODE
	__builtin_cpu_init();
	return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
	       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
	return 0;
#endif
}

/* ---- packing ------------------------------------------------------------ */

/* An operand as the packer sees it: element (o, k) of op(X) is
 * x[o*so + k*sk], o < O the outer index (rows of A, columns of B); h: the
 * elements are bf16 (uint16_t), else fp32. */
struct opnd {
	const void *x;
	ptrdiff_t so, sk;
	int O, K, h;
};

/* pairs along K: ceil(K/2) */
static int kpairs(int K) { return (K + 1) / 2; }

/* A packed panel of W outer indices: the pair (c, kp) is the word
 * dst[c*rs + kp*ks], kp counted from the block's first pair.  B panels and
 * A panels of a K-major A are [kp][W] (rs 1, ks W); A panels of a
 * row-major A stay rows (rs = the block's pairs, ks 1), which only costs a
 * conversion. */
struct lay {
	ptrdiff_t rs, ks;
};

/* Packs panels [p0, p1) of W outer indices, pairs [kp0, kp1), panel p at
 * dst + (p - p0) * pstride; zero past O and K. */
typedef void (*pack_fn)(const struct opnd *s, int W, int p0, int p1, int kp0, int kp1, uint32_t *dst,
			size_t pstride, struct lay l);

/* element (o, k) as bf16 bits */
static uint32_t elem16(const struct opnd *s, int o, int k)
{
	const ptrdiff_t i = o * s->so + k * s->sk;
	return s->h ? ((const uint16_t *)s->x)[i] : ds_fp32_to_bf16(((const float *)s->x)[i]);
}

static void pack_portable(const struct opnd *s, int W, int p0, int p1, int kp0, int kp1, uint32_t *dst,
			  size_t pstride, struct lay l)
{
	for (int p = p0; p < p1; p++, dst += pstride)
		for (int c = 0; c < W; c++) {
			const int o = p * W + c;
			for (int kp = kp0; kp < kp1; kp++) {
				uint32_t w = 0;
				if (o < s->O) {
					w = elem16(s, o, 2 * kp);
					if (2 * kp + 1 < s->K)
						w |= elem16(s, o, 2 * kp + 1) << 16;
				}
				dst[c * l.rs + (kp - kp0) * l.ks] = w;
			}
		}
}

#ifdef HAVE_AVX512BF16_CODE
/* The mask of the first n (<= 16, may be <= 0) lanes; of 32. */
static inline __mmask16 lanes(int n) { return n >= 16 ? 0xffff : n > 0 ? (__mmask16)((1u << n) - 1u) : 0; }
static inline __mmask32 lanes32(int n) { return n >= 32 ? 0xffffffffu : n > 0 ? (__mmask32)((1u << n) - 1u) : 0; }

/* 32 consecutive values of a K-contiguous row from element k (n of them
 * valid, the rest zero) as 16 bf16 pairs: fp32 rounded to nearest even by
 * vcvtne2ps2bf16 (subnormal inputs become zero, as vdpbf16ps would read
 * them anyway), bf16 copied. */
TARGET_BF16 static inline __m512i pairs32(const struct opnd *s, ptrdiff_t i, int n)
{
	if (s->h)
		return _mm512_maskz_loadu_epi16(lanes32(n), (const uint16_t *)s->x + i);
	const float *p = (const float *)s->x + i;
	const __m512 lo = _mm512_maskz_loadu_ps(lanes(n), p), hi = _mm512_maskz_loadu_ps(lanes(n - 16), p + 16);
	return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* 16 outer-contiguous values of rows i0 and i1 (i1 < 0: zeros), n valid,
 * as 16 pairs (row i0's value low, row i1's high) */
TARGET_BF16 static inline __m512i inter16(const struct opnd *s, ptrdiff_t i0, ptrdiff_t i1, int n)
{
	const __mmask16 m = lanes(n);
	if (s->h) {
		const uint16_t *x = (const uint16_t *)s->x;
		const __m512i lo = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i0));
		const __m512i hi = i1 >= 0 ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i1)) : _mm512_setzero_si512();
		return _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
	}
	const float *x = (const float *)s->x;
	const __m512 lo = _mm512_maskz_loadu_ps(m, x + i0);
	const __m512 hi = i1 >= 0 ? _mm512_maskz_loadu_ps(m, x + i1) : _mm512_setzero_ps();
	/* [lo0..lo15 hi0..hi15] as bf16, then interleaved */
	const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
					     21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
	return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

/* K contiguous, rows layout: each outer index's values become its pairs,
 * a conversion without transposition */
TARGET_BF16 static void pack_rows_avx512(const struct opnd *s, int W, int p0, int p1, int kp0, int kp1,
					 uint32_t *dst, size_t pstride, struct lay l)
{
	const int K = s->K;
	for (int p = p0; p < p1; p++, dst += pstride)
		for (int c = 0; c < W; c++) {
			const int o = p * W + c;
			uint32_t *d = dst + c * l.rs;
			for (int kp = kp0; kp < kp1; kp += 16)
				_mm512_mask_storeu_epi32(d + (kp - kp0), lanes(kp1 - kp),
							 o < s->O ? pairs32(s, o * s->so + 2 * (ptrdiff_t)kp, K - 2 * kp)
								  : _mm512_setzero_si512());
		}
}

/* outer index contiguous: rows 2kp and 2kp+1 interleaved, 16 at a time,
 * row by row across every panel of the range (streams through memory) */
TARGET_BF16 static void pack_inter_avx512(const struct opnd *s, int W, int p0, int p1, int kp0, int kp1,
					  uint32_t *dst, size_t pstride, struct lay l)
{
	const int K = s->K, o0 = p0 * W, o1 = p1 * W < s->O ? p1 * W : s->O;
	for (int kp = kp0; kp < kp1; kp++) {
		const ptrdiff_t r0 = 2 * (ptrdiff_t)kp * s->sk, r1 = 2 * kp + 1 < K ? r0 + s->sk : -1;
		if (kp + PF < kp1) {   /* the rows PF pairs ahead, into L2 */
			const ptrdiff_t f = r0 + 2 * PF * s->sk;
			const int es = s->h ? 2 : 4;
			for (int o = o0; o < o1; o += 64 / es) {
				_mm_prefetch((const char *)s->x + (f + o) * es, _MM_HINT_T1);
				_mm_prefetch((const char *)s->x + (f + s->sk + o) * es, _MM_HINT_T1);
			}
		}
		if (W >= 16) {
			for (int p = p0; p < p1; p++) {
				uint32_t *d = dst + (p - p0) * pstride + (kp - kp0) * l.ks;
				for (int c0 = 0; c0 < W; c0 += 16) {
					const int o = p * W + c0;
					_mm512_mask_storeu_epi32(d + c0, lanes(W - c0),
								 inter16(s, r0 + o, r1 < 0 ? -1 : r1 + o, s->O - o));
				}
			}
			continue;
		}
		/* narrow panels (A's MR): the row pair 16 outer indices at a time
		 * into one buffer, then W words to each panel */
		for (int q0 = p0; q0 < p1; q0 += QP) {
			const int q1 = q0 + QP < p1 ? q0 + QP : p1;
			uint32_t tmp[QP * MR + 16];
			for (int o = q0 * W; o < q1 * W; o += 16)
				_mm512_storeu_si512(tmp + (o - q0 * W), inter16(s, r0 + o, r1 < 0 ? -1 : r1 + o, s->O - o));
			for (int p = q0; p < q1; p++)
				_mm512_mask_storeu_epi32(dst + (p - p0) * pstride + (kp - kp0) * l.ks, lanes(W),
							 _mm512_maskz_loadu_epi32(lanes(W), tmp + (p - q0) * W));
		}
	}
}

/* K contiguous into [kp][W] (W a multiple of 16): 16 outer indices x 16
 * pairs at a time, converted then transposed in registers */
TARGET_BF16 static void pack_trans_avx512(const struct opnd *s, int W, int p0, int p1, int kp0, int kp1,
					  uint32_t *dst, size_t pstride, struct lay l)
{
	const int K = s->K;
	for (int p = p0; p < p1; p++, dst += pstride)
		for (int c0 = 0; c0 < W; c0 += 16)
			for (int kp = kp0; kp < kp1; kp += 16) {
				__m512i r[16], t[16];
				for (int i = 0; i < 16; i++) {
					const int o = p * W + c0 + i;
					r[i] = o < s->O ? pairs32(s, o * s->so + 2 * (ptrdiff_t)kp, K - 2 * kp)
							: _mm512_setzero_si512();
				}
				/* 16x16 transpose of 32-bit words: r[i] lane j -> r[j] lane i */
				for (int i = 0; i < 16; i += 2) {
					t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
					t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
				}
				for (int i = 0; i < 16; i += 4) {
					r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
					r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
					r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
					r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
				}
				for (int i = 0; i < 4; i++) {
					t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
					t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
					t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
					t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
				}
				for (int i = 0; i < 8; i++) {
					r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
					r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
				}
				/* r[j]: pair kp + j of the 16 outer indices */
				for (int j = 0; j < 16 && kp + j < kp1; j++)
					_mm512_storeu_si512(dst + (kp - kp0 + j) * l.ks + c0, r[j]);
			}
}

/* x rounded to bf16 as ds_fp32_to_bf16 rounds (nearest even; NaN stays a
 * quiet NaN; subnormals kept, unlike vcvtneps2bf16), 16 values */
TARGET_BF16 static inline __m256i round16(__m512 x)
{
	const __m512i u = _mm512_castps_si512(x);
	const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
	__m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
	const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
						      _mm512_set1_epi32(0x7f800000));
	r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
	return _mm512_cvtepi32_epi16(r);
}
#endif

/* ---- micro-kernels ------------------------------------------------------- */

/* How the micro-kernel stores C: fp32, bf16 (beta is 0) rounded to nearest
 * even, or fp32 rounded to nearest even to a bf16 value (the last K block
 * of a DS_GEMM_BF16_CR product: alpha a b + beta c is rounded once, as a
 * rounding pass over C after the product would round it). */
enum { ST_F32 = 0, ST_BF16, ST_F32R };

/* c (mr, nr) with leading dimension ldc = alpha a b + beta c over K2 pairs:
 * a's pair (r, kp) at a[r*ars + kp*aks] (MR rows; rows past mr are zero),
 * b's [kp][NR]; beta 0 does not read c; st: ST_*. */
typedef void (*ukr_fn)(int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t aks, const uint32_t *b, void *c, int ldc,
		       int mr, int nr, float alpha, float beta, int st);

static float bf2f(uint32_t h) { return ds_bf16_to_fp32((uint16_t)h); }

static void ukr_portable(int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t aks, const uint32_t *b, void *c,
			 int ldc, int mr, int nr, float alpha, float beta, int st)
{
	float acc[MR][NR];
	memset(acc, 0, sizeof acc);
	for (int kp = 0; kp < K2; kp++)
		for (int r = 0; r < MR; r++) {
			const uint32_t wa = a[r * ars + kp * aks];
			const float a0 = bf2f(wa & 0xffff), a1 = bf2f(wa >> 16);
			for (int j = 0; j < NR; j++) {
				const uint32_t wb = b[(size_t)kp * NR + j];
				acc[r][j] = fmaf(a1, bf2f(wb >> 16), fmaf(a0, bf2f(wb & 0xffff), acc[r][j]));
			}
		}
	for (int r = 0; r < mr; r++)
		for (int j = 0; j < nr; j++) {
			const size_t e = (size_t)r * ldc + j;
			if (st == ST_BF16) {
				((uint16_t *)c)[e] = ds_fp32_to_bf16(alpha * acc[r][j]);
			} else {
				float *f = (float *)c + e;
				*f = beta == 0.0f ? alpha * acc[r][j] : alpha * acc[r][j] + beta * *f;
				if (st == ST_F32R)
					*f = ds_bf16_to_fp32(ds_fp32_to_bf16(*f));
			}
		}
}

#ifdef HAVE_AVX512BF16_CODE
#define UK_ROW(r)                                                                    \
	{                                                                            \
		const __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a##r[0]);       \
		c##r##0 = _mm512_dpbf16_ps(c##r##0, ar, b0);                         \
		c##r##1 = _mm512_dpbf16_ps(c##r##1, ar, b1);                         \
		c##r##2 = _mm512_dpbf16_ps(c##r##2, ar, b2);                         \
		c##r##3 = _mm512_dpbf16_ps(c##r##3, ar, b3);                         \
	}
#define UK_STV(r, v)                                                                              \
	{                                                                                         \
		const size_t e = (size_t)(r) * ldc + 16 * (v);                                    \
		__m512 x = _mm512_mul_ps(va, c##r##v);                                            \
		if (st == ST_BF16) {                                                              \
			_mm256_mask_storeu_epi16((uint16_t *)c + e, m##v, round16(x));            \
		} else {                                                                          \
			float *f = (float *)c + e;                                                \
			if (beta != 0.0f)                                                         \
				x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m##v, f), x);       \
			if (st == ST_F32R)                                                        \
				x = _mm512_castsi512_ps(_mm512_slli_epi32(                        \
					_mm512_cvtepu16_epi32(round16(x)), 16));                  \
			_mm512_mask_storeu_ps(f, m##v, x);                                        \
		}                                                                                 \
	}
#define UK_ST(r)                                \
	if ((r) < mr) {                         \
		UK_STV(r, 0) UK_STV(r, 1)       \
		UK_STV(r, 2) UK_STV(r, 3)       \
	}

TARGET_BF16 static void ukr_avx512(int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t aks, const uint32_t *b,
				   void *c, int ldc, int mr, int nr, float alpha, float beta, int st)
{
	__m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00,
	       c20 = c00, c21 = c00, c22 = c00, c23 = c00, c30 = c00, c31 = c00, c32 = c00, c33 = c00, c40 = c00,
	       c41 = c00, c42 = c00, c43 = c00, c50 = c00, c51 = c00, c52 = c00, c53 = c00;
	const uint32_t *a0 = a, *a1 = a + ars, *a2 = a + 2 * ars, *a3 = a + 3 * ars, *a4 = a + 4 * ars,
		       *a5 = a + 5 * ars;
	for (int kp = 0; kp < K2; kp++, b += NR) {
		const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 16),
			       b2 = (__m512bh)_mm512_loadu_si512(b + 32), b3 = (__m512bh)_mm512_loadu_si512(b + 48);
		UK_ROW(0) UK_ROW(1) UK_ROW(2) UK_ROW(3) UK_ROW(4) UK_ROW(5)
		a0 += aks;
		a1 += aks;
		a2 += aks;
		a3 += aks;
		a4 += aks;
		a5 += aks;
	}
	const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
	const __mmask16 m0 = lanes(nr), m1 = lanes(nr - 16), m2 = lanes(nr - 32), m3 = lanes(nr - 48);
	UK_ST(0) UK_ST(1) UK_ST(2) UK_ST(3) UK_ST(4) UK_ST(5)
}
#endif

/* ---- one product ---------------------------------------------------------- */

/* The product's operands, geometry and the functions that run it. */
struct prod {
	struct opnd a, b;       /* op(A): O = M; op(B): O = N */
	int M, N, K2, mp, np;   /* mp/np: panels of A and B */
	int kc;                 /* pairs per K block */
	int ta, c16;
	int cr;                 /* DS_GEMM_BF16_CR: fp32 C rounded to bf16 values */
	int causal;             /* enum ds_gemm_bf16_causal */
	pack_fn pa, pb;
	ukr_fn ukr;
	float alpha, beta;
	void *c;
	int ldc;
};

/* a16, b16: the caller's bf16 copies of A and B (or NULL), packed in
 * place of converting A and B (the same bf16 bits) */
static void prod_init(struct prod *p, int isa, unsigned flags, int ta, int tb, int M, int N, int K, float alpha,
		      const void *A, int lda, const float *B, int ldb, const uint16_t *a16, const uint16_t *b16,
		      float beta, void *C, int ldc)
{
	const int a16f = !!(flags & DS_GEMM_BF16_A16);
	p->a = (struct opnd){ a16f || !a16 ? A : (const void *)a16, ta ? 1 : lda, ta ? lda : 1, M, K, a16f || a16 };
	p->b = (struct opnd){ b16 ? (const void *)b16 : (const void *)B, tb ? ldb : 1, tb ? 1 : ldb, N, K, b16 != NULL };
	p->M = M;
	p->N = N;
	p->K2 = kpairs(K);
	p->mp = (M + MR - 1) / MR;
	p->np = (N + NR - 1) / NR;
	p->c16 = !!(flags & DS_GEMM_BF16_C16);
	p->cr = !p->c16 && (flags & DS_GEMM_BF16_CR);
	p->causal = DS_GEMM_BF16_DENSE;
	p->kc = p->c16 ? p->K2 : KCP;   /* a bf16 C is rounded once, after the whole sum */
	p->ta = ta;
	p->pa = p->pb = pack_portable;
	p->ukr = ukr_portable;
#ifdef HAVE_AVX512BF16_CODE
	if (isa) {
		p->pa = ta ? pack_inter_avx512 : pack_rows_avx512;
		p->pb = tb ? pack_trans_avx512 : pack_inter_avx512;
		p->ukr = ukr_avx512;
	}
#endif
	p->alpha = alpha;
	p->beta = beta;
	p->c = C;
	p->ldc = ldc;
}

/* the layout of A panels holding kn pairs */
static struct lay alay(const struct prod *p, int kn) { return p->ta ? (struct lay){ 1, MR } : (struct lay){ kn, 1 }; }
static const struct lay blay = { 1, NR };

/* words of one packed panel of A, of B, over all K */
static size_t apanel(const struct prod *p) { return (size_t)p->K2 * MR; }
static size_t bpanel(const struct prod *p) { return (size_t)p->K2 * NR; }

/* The source of the next streamed slice, read into L2 while a block
 * computes, so that packing it finds it there (a training step's weights
 * come from memory): rows of span bytes, stride apart. */
struct pfr {
	const char *base;
	ptrdiff_t stride;
	size_t span;
	int rows;
};

/* panels [p0, p1) of W outer indices of s, pairs [kp0, kp1); rows 0 when
 * the range is empty */
static struct pfr region(const struct opnd *s, int W, int p0, int p1, int kp0, int kp1)
{
	const size_t es = s->h ? 2 : 4;
	const int o0 = p0 * W, o1 = p1 * W < s->O ? p1 * W : s->O, k0 = 2 * kp0, k1 = 2 * kp1 < s->K ? 2 * kp1 : s->K;
	struct pfr r = { NULL, 0, 0, 0 };
	if (o1 <= o0 || k1 <= k0)
		return r;
	if (s->sk == 1)   /* K contiguous: one row per outer index */
		r = (struct pfr){ (const char *)s->x + ((size_t)o0 * s->so + k0) * es, s->so * (ptrdiff_t)es,
				  (size_t)(k1 - k0) * es, o1 - o0 };
	else              /* outer contiguous: one row per K index */
		r = (struct pfr){ (const char *)s->x + ((size_t)k0 * s->sk + o0) * es, s->sk * (ptrdiff_t)es,
				  (size_t)(o1 - o0) * es, k1 - k0 };
	return r;
}

/* C block of A panels [i0, i1) x B panels [j0, j1), pairs [kb, kb + kn):
 * A panel i at a + (i - i0) * as, B panel j at b + (j - j0) * bs, both
 * already at pair kb; pf (rows 0: none) is prefetched a little per
 * micro-kernel call. */
static void block(const struct prod *p, const uint32_t *a, size_t as, struct lay la, int i0, int i1,
		  const uint32_t *b, size_t bs, int j0, int j1, int kb, int kn, struct pfr pf)
{
	const float beta = kb == 0 ? p->beta : 1.0f;
	const size_t es = p->c16 ? 2 : 4;
	const size_t lpr = (pf.span + 63) / 64, calls = (size_t)(i1 - i0) * (size_t)(j1 - j0);
	const size_t per = calls ? (lpr * (size_t)pf.rows + calls - 1) / calls : 0;
	const char *row = pf.base;
	size_t col = 0;
	int left = pf.rows;
	for (int j = j0; j < j1; j++) {
		const int nr = p->N - j * NR < NR ? p->N - j * NR : NR;
		for (int i = i0; i < i1; i++) {
			const int mr = p->M - i * MR < MR ? p->M - i * MR : MR;
			for (size_t q = 0; q < per && left > 0; q++) {   /* per lines of the rows, in order */
				__builtin_prefetch(row + col * 64, 0, 2);
				if (++col == lpr) {
					col = 0;
					row += pf.stride;
					left--;
				}
			}
			int k0 = 0, k1 = kn;   /* the pairs of this block the tile needs */
			float bt = beta;
			int last = kb + kn >= p->K2;   /* the tile's last block: a CR product rounds C here */
			if (p->causal == DS_GEMM_BF16_C_LOWER && j * NR > i * MR + mr - 1)
				continue;   /* above the diagonal: not wanted */
			if (p->causal == DS_GEMM_BF16_A_LOWER) {   /* rows < i*MR + mr need k below that */
				const int hi = (i * MR + mr + 1) / 2 - kb;
				if (hi <= 0)
					continue;
				k1 = hi < kn ? hi : kn;
				last = last || hi <= kn;   /* the later blocks skip this tile */
			} else if (p->causal == DS_GEMM_BF16_A_UPPER) {   /* rows >= i*MR need k from there */
				const int lo = i * MR / 2 - kb;
				if (lo >= kn)
					continue;
				if (lo >= 0) {   /* the tile's first block: C starts here */
					k0 = lo;
					bt = p->beta;
				}
			}
			p->ukr(k1 - k0, a + (i - i0) * as + k0 * la.ks, la.rs, la.ks, b + (j - j0) * bs + (size_t)k0 * NR,
			       (char *)p->c + ((size_t)i * MR * p->ldc + (size_t)j * NR) * es, p->ldc, mr, nr, p->alpha,
			       bt, p->c16 ? ST_BF16 : p->cr && last ? ST_F32R : ST_F32);
		}
	}
}

/* The whole product on this thread, A and B packed whole into ap, bp (a
 * causal A only where it is not zero). */
static void run_serial(const struct prod *p, uint32_t *ap, uint32_t *bp)
{
	const struct lay la = alay(p, p->K2);
	if (p->causal == DS_GEMM_BF16_A_LOWER || p->causal == DS_GEMM_BF16_A_UPPER) {
		/* groups of panels, each the pairs its rows need (the union: a few
		 * zeros more) */
		const int g = p->causal == DS_GEMM_BF16_A_LOWER ? 1 : 8;
		for (int i = 0; i < p->mp; i += g) {
			const int i1 = i + g < p->mp ? i + g : p->mp;
			const int lo = p->causal == DS_GEMM_BF16_A_UPPER ? i * MR / 2 : 0;
			int hi = p->causal == DS_GEMM_BF16_A_LOWER ? (i1 * MR + 1) / 2 : p->K2;
			hi = hi < p->K2 ? hi : p->K2;
			p->pa(&p->a, MR, i, i1, lo, hi, ap + i * apanel(p) + lo * la.ks, apanel(p), la);
		}
	} else {
		p->pa(&p->a, MR, 0, p->mp, 0, p->K2, ap, apanel(p), la);
	}
	p->pb(&p->b, NR, 0, p->np, 0, p->K2, bp, bpanel(p), blay);
	for (int kb = 0; kb < p->K2; kb += p->kc) {
		const int kn = p->K2 - kb < p->kc ? p->K2 - kb : p->kc;
		block(p, ap + kb * la.ks, apanel(p), la, 0, p->mp, bp + (size_t)kb * NR, bpanel(p), 0, p->np, kb, kn,
		      (struct pfr){ NULL, 0, 0, 0 });
	}
}

/* ---- scratch ---------------------------------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t *abuf, *bbuf, *kbuf;   /* packed A, B, and the kept B */
static size_t abuf_n, bbuf_n, kbuf_n;
static struct { const float *src; int tb, N, K, ldb, isa; } kept;   /* what kbuf holds (src NULL: nothing) */

/* grow *buf to n words (64-byte aligned); 0 or -1 */
static int grow(uint32_t **buf, size_t *have, size_t n)
{
	if (n <= *have)
		return 0;
	n += n / 4;
	free(*buf);
	*buf = aligned_alloc(64, (n * 4 + 63) & ~(size_t)63);
	*have = *buf ? n : 0;
	return *buf ? 0 : -1;
}

/* How a product runs on nt threads: sb says whether the work is split
 * over B's panels (else A's), g how many panels one work item takes; the
 * other operand is packed whole, ks pairs at a time (all of K unless that
 * would not stay in the core's L2: then super-blocks of ks pairs, each
 * packed once and used by every work item before the next). */
struct plan {
	int sb, g, items, ks;
	size_t words;     /* one thread's buffer for its panels of one K block */
	size_t upwords;   /* the whole-packed operand's buffer */
};

#define UPMAX (1u << 20)   /* bytes of the whole-packed operand kept per super-block */

static struct plan plan_of(const struct prod *p, int nt, int keep)
{
	struct plan s;
	/* the larger operand is split and streamed; a kept B is split (its
	 * items pack their panels whole into the kept copy, or reuse them) */
	s.sb = keep || (int64_t)p->np * NR >= (int64_t)p->mp * MR;
	const int ns = s.sb ? p->np : p->mp;
	/* B: one panel an item (each item passes over all of A anyway, so
	 * nothing is lost, and the threads' shares come out even); A: 96 rows,
	 * fewer when that leaves too few items to share */
	s.g = s.sb ? 1 : 16;
	while (s.g > 1 && (ns + s.g - 1) / s.g < 4 * nt)
		s.g /= 2;
	s.items = (ns + s.g - 1) / s.g;
	s.words = keep ? 0 : (size_t)s.g * p->kc * (s.sb ? NR : MR);
	const size_t pair = (size_t)(s.sb ? p->mp * MR : p->np * NR) * 4;   /* bytes per pair, all panels */
	s.ks = p->K2;
	if (!p->c16 && pair * (size_t)p->K2 > UPMAX) {
		const size_t k = UPMAX / pair / (size_t)p->kc * (size_t)p->kc;
		s.ks = k > (size_t)p->kc ? (int)k : p->kc;
	}
	s.upwords = (size_t)s.ks * (s.sb ? (size_t)p->mp * MR : (size_t)p->np * NR);
	return s;
}

/* One product over all threads, super-block by super-block: the operand
 * that is not split packed into up, then the work items: each packs its
 * panels of the other one block by block into the thread's part of sbuf
 * and multiplies them at once, or with kb_ (a kept B) packs them whole into
 * kb_ unless packkb is 0 (they are there from an earlier call). */
static void run_parallel(const struct prod *p, const struct plan *s, uint32_t *up, uint32_t *sbuf, uint32_t *kb_,
			 int packkb)
{
	const int nt = omp_get_max_threads();
	const size_t ustr = (size_t)s->ks * (s->sb ? MR : NR);   /* a whole-packed panel */
#pragma omp parallel if (nt > 1 && (int64_t)p->M * p->N * p->K2 > 16384)
	{
		uint32_t *mine = sbuf + s->words * (size_t)omp_get_thread_num();
		const int ns = s->sb ? p->np : p->mp, n = s->sb ? p->mp : p->np;
		const int th = omp_get_thread_num(), nth = omp_get_num_threads();
		const struct opnd *so = s->sb ? &p->b : &p->a;
		const int W = s->sb ? NR : MR;
		for (int ks0 = 0; ks0 < p->K2; ks0 += s->ks) {
			const int ks1 = ks0 + s->ks < p->K2 ? ks0 + s->ks : p->K2;
			const struct lay la = alay(p, ks1 - ks0);   /* A's whole-packed layout */
#pragma omp for schedule(static)
			for (int i = 0; i < n; i += 8) {   /* 8 panels at a time */
				const int i1 = i + 8 < n ? i + 8 : n;
				if (s->sb)
					p->pa(&p->a, MR, i, i1, ks0, ks1, up + i * ustr, ustr, la);
				else
					p->pb(&p->b, NR, i, i1, ks0, ks1, up + i * ustr, ustr, blay);
			}
			/* round robin, so each thread knows its next item and reads
			 * its first slice ahead */
			for (int it = th; it < s->items; it += nth) {
				const int s0 = it * s->g, s1 = s0 + s->g < ns ? s0 + s->g : ns;
				if (kb_ && packkb && ks0 == 0)
					p->pb(&p->b, NR, s0, s1, 0, p->K2, kb_ + s0 * bpanel(p), bpanel(p), blay);
				for (int kb = ks0; kb < ks1; kb += p->kc) {
					const int kn = ks1 - kb < p->kc ? ks1 - kb : p->kc;
					/* what this thread packs next: this item's next slice,
					 * or its next item's first */
					struct pfr pf = { NULL, 0, 0, 0 };
					if (kb_)
						;
					else if (kb + kn < ks1)
						pf = region(so, W, s0, s1, kb + kn, kb + kn + p->kc < ks1 ? kb + kn + p->kc : ks1);
					else if (it + nth < s->items)
						pf = region(so, W, (it + nth) * s->g,
							    (it + nth + 1) * s->g < ns ? (it + nth + 1) * s->g : ns, ks0,
							    ks0 + p->kc < ks1 ? ks0 + p->kc : ks1);
					if (kb_) {
						block(p, up + (kb - ks0) * la.ks, ustr, la, 0, p->mp,
						      kb_ + s0 * bpanel(p) + (size_t)kb * NR, bpanel(p), s0, s1, kb, kn, pf);
					} else if (s->sb) {
						p->pb(&p->b, NR, s0, s1, kb, kb + kn, mine, (size_t)p->kc * NR, blay);
						block(p, up + (kb - ks0) * la.ks, ustr, la, 0, p->mp, mine, (size_t)p->kc * NR, s0,
						      s1, kb, kn, pf);
					} else {
						const struct lay lk = alay(p, kn);
						p->pa(&p->a, MR, s0, s1, kb, kb + kn, mine, (size_t)p->kc * MR, lk);
						block(p, mine, (size_t)p->kc * MR, lk, s0, s1, up + (size_t)(kb - ks0) * NR, ustr, 0,
						      p->np, kb, kn, pf);
					}
				}
			}
			if (ks1 < p->K2) {   /* every item done before up is packed again */
#pragma omp barrier
			}
		}
	}
}

/* offset of batch entry e in an operand with strides s */
static long boff(const struct ds_gemm_bf16_batch *bt, const long s[2], int e)
{
	return (long)(e / bt->inner) * s[0] + (long)(e % bt->inner) * s[1];
}

int ds_gemm_bf16_kernel(int isa, int keep, const struct ds_gemm_bf16_batch *bt, unsigned flags, int ta, int tb,
			int M, int N, int K, float alpha, const void *A, int lda, const float *B, int ldb, float beta,
			void *C, int ldc)
{
	const int count = bt ? bt->count : 1;
	/* the causal shapes are square (M = K, or M = N) */
	const int causal = bt && ((bt->causal == DS_GEMM_BF16_C_LOWER && M == N) ||
				  ((bt->causal == DS_GEMM_BF16_A_LOWER || bt->causal == DS_GEMM_BF16_A_UPPER) && M == K))
				   ? bt->causal : DS_GEMM_BF16_DENSE;
	const size_t ea = flags & DS_GEMM_BF16_A16 ? 2 : 4, ec = flags & DS_GEMM_BF16_C16 ? 2 : 4;
	if (M <= 0 || N <= 0 || K <= 0 || count < 1 || (bt && (keep || bt->inner < 1)) ||
	    ((flags & DS_GEMM_BF16_C16) && beta != 0.0f))
		return -1;
	struct prod p;
	prod_init(&p, isa, flags, ta, tb, M, N, K, alpha, A, lda, B, ldb, bt ? bt->a16 : NULL, bt ? bt->b16 : NULL, beta,
		  C, ldc);
	const size_t na = p.mp * apanel(&p), nb = p.np * bpanel(&p);
	const int nt = omp_get_max_threads();
	int rc = -1;
	pthread_mutex_lock(&lock);
	if (keep == 1 || (keep && nb > kbuf_n))
		kept.src = NULL;   /* a new B, or a new buffer: the old copy is gone */
	if (count > 1 && count >= nt) {
		/* a batch: each thread packs and multiplies whole products */
		if (grow(&abuf, &abuf_n, na * (size_t)nt) || grow(&bbuf, &bbuf_n, nb * (size_t)nt))
			goto out;
#pragma omp parallel for schedule(dynamic, 1)
		for (int e = 0; e < count; e++) {
			const int th = omp_get_thread_num();
			struct prod q;
			prod_init(&q, isa, flags, ta, tb, M, N, K, alpha, (const char *)A + boff(bt, bt->sa, e) * ea, lda,
				  B + boff(bt, bt->sb, e), ldb, bt->a16 ? bt->a16 + boff(bt, bt->sa, e) : NULL,
				  bt->b16 ? bt->b16 + boff(bt, bt->sb, e) : NULL, beta, (char *)C + boff(bt, bt->sc, e) * ec,
				  ldc);
			q.causal = causal;
			run_serial(&q, abuf + na * (size_t)th, bbuf + nb * (size_t)th);
		}
		rc = 0;
		goto out;
	}
	const struct plan s = plan_of(&p, nt, keep);
	if (grow(s.sb ? &abuf : &bbuf, s.sb ? &abuf_n : &bbuf_n, s.upwords) ||
	    grow(s.sb ? &bbuf : &abuf, s.sb ? &bbuf_n : &abuf_n, s.words * (size_t)nt + 1) ||
	    (keep && grow(&kbuf, &kbuf_n, nb)))
		goto out;
	uint32_t *up = s.sb ? abuf : bbuf, *sbuf = s.sb ? bbuf : abuf;
	for (int e = 0; e < count; e++) {   /* one product, or a batch smaller than the threads */
		struct prod q;
		if (bt)
			prod_init(&q, isa, flags, ta, tb, M, N, K, alpha, (const char *)A + boff(bt, bt->sa, e) * ea, lda,
				  B + boff(bt, bt->sb, e), ldb, bt->a16 ? bt->a16 + boff(bt, bt->sa, e) : NULL,
				  bt->b16 ? bt->b16 + boff(bt, bt->sb, e) : NULL, beta, (char *)C + boff(bt, bt->sc, e) * ec,
				  ldc);
		else
			q = p;
		q.causal = causal;
		int packkb = 1;
		if (keep) {
			packkb = !(keep == 2 && kept.src == B && kept.tb == !!tb && kept.N == N && kept.K == K &&
				   kept.ldb == ldb && kept.isa == isa);
			kept.src = NULL;   /* until the copy is complete */
		}
		run_parallel(&q, &s, up, sbuf, keep ? kbuf : NULL, packkb);
		if (keep) {
			kept.src = B;
			kept.tb = !!tb;
			kept.N = N;
			kept.K = K;
			kept.ldb = ldb;
			kept.isa = isa;
		}
	}
	rc = 0;
out:
	pthread_mutex_unlock(&lock);
	return rc;
}
