/* gemm_bf16_kernel.c - dstk's own bf16 matrix product (gemm_bf16_int.h).
 *
 * BLIS's structure with AVX512_BF16's pair dot product: op(A) is packed
 * into panels of MR rows and op(B) into panels of NR columns, both as bf16
 * pairs along K (one 32-bit word holds op(X)[.., 2p] and op(X)[.., 2p+1]),
 * converted from fp32 (round to nearest even) while packing.  The
 * micro-kernel keeps an MR x NR block of C in 24 fp32 registers; per pair
 * it loads NR/16 words of B and broadcasts one word of A per row into
 * vdpbf16ps, which adds a0*b0 then a1*b1 to each fp32 lane (products of
 * bf16 values are exact in fp32; bf16 subnormal inputs read as zero).  K is
 * blocked by KCP pairs so a B micro-panel stays in L1 while the A panels of
 * a tile pass over it.  Products are split into tiles of C run in parallel
 * (OpenMP, the pool OpenBLAS and the other kernels share); batches of small
 * products (attention's per-head ones) run one product per thread instead.
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
 * x[o*so + k*sk], o < O the outer index (rows of A, columns of B). */
struct opnd {
	const float *x;
	ptrdiff_t so, sk;
	int O, K;
};

/* pairs along K: ceil(K/2) */
static int kpairs(int K) { return (K + 1) / 2; }

/* A packed panel of W outer indices: the pair (c, kp) is the word
 * dst[c*rs + kp*ks].  B panels and A panels of a K-major A are [kp][W]
 * (rs 1, ks W); A panels of a row-major A stay rows (rs K2, ks 1), which
 * only costs a conversion. */
struct lay {
	ptrdiff_t rs, ks;
};

/* Panel p of W outer indices into dst, zero past O and K. */
static void pack_portable(const struct opnd *s, int W, int p, uint32_t *dst, struct lay l)
{
	const int K2 = kpairs(s->K);
	for (int c = 0; c < W; c++) {
		const int o = p * W + c;
		for (int kp = 0; kp < K2; kp++) {
			uint32_t w = 0;
			if (o < s->O) {
				const float *e = s->x + o * s->so + 2 * (ptrdiff_t)kp * s->sk;
				w = ds_fp32_to_bf16(e[0]);
				if (2 * kp + 1 < s->K)
					w |= (uint32_t)ds_fp32_to_bf16(e[s->sk]) << 16;
			}
			dst[c * l.rs + kp * l.ks] = w;
		}
	}
}

#ifdef HAVE_AVX512BF16_CODE
/* The mask of the first n (<= 16, may be <= 0) lanes. */
static inline __mmask16 lanes(int n) { return n >= 16 ? 0xffff : n > 0 ? (__mmask16)((1u << n) - 1u) : 0; }

/* 32 values from p (n of them, the rest zero) as 16 bf16 pairs, rounded to
 * nearest even by vcvtne2ps2bf16 (subnormal inputs become zero, as
 * vdpbf16ps would read them anyway). */
TARGET_BF16 static inline __m512i pairs32(const float *p, int n)
{
	const __m512 lo = _mm512_maskz_loadu_ps(lanes(n), p), hi = _mm512_maskz_loadu_ps(lanes(n - 16), p + 16);
	return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* K contiguous, rows layout: each outer index's K values become its K2
 * pairs, a conversion without transposition. */
TARGET_BF16 static void pack_rows_avx512(const struct opnd *s, int W, int p, uint32_t *dst, struct lay l)
{
	const int K2 = kpairs(s->K), K = s->K;
	for (int c = 0; c < W; c++) {
		const int o = p * W + c;
		uint32_t *d = dst + c * l.rs;
		const float *row = s->x + o * s->so;
		for (int k0 = 0; k0 < K; k0 += 32)
			_mm512_mask_storeu_epi32(d + k0 / 2, lanes(K2 - k0 / 2),
						 o < s->O ? pairs32(row + k0, K - k0) : _mm512_setzero_si512());
	}
}

/* outer index contiguous: rows 2kp and 2kp+1 interleaved, 16 at a time */
TARGET_BF16 static void pack_inter_avx512(const struct opnd *s, int W, int p, uint32_t *dst, struct lay l)
{
	const int K2 = kpairs(s->K), K = s->K;
	for (int kp = 0; kp < K2; kp++) {
		const float *r0 = s->x + 2 * (ptrdiff_t)kp * s->sk, *r1 = r0 + s->sk;
		const int two = 2 * kp + 1 < K;
		uint32_t *d = dst + kp * l.ks;
		for (int c0 = 0; c0 < W; c0 += 16) {
			const int o0 = p * W + c0;
			const __mmask16 m = lanes(s->O - o0);
			const __m512 lo = _mm512_maskz_loadu_ps(m, r0 + o0);
			const __m512 hi = two ? _mm512_maskz_loadu_ps(m, r1 + o0) : _mm512_setzero_ps();
			const __m512i wl = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(lo));
			const __m512i wh = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(hi));
			_mm512_mask_storeu_epi32(d + c0, lanes(W - c0), _mm512_or_si512(wl, _mm512_slli_epi32(wh, 16)));
		}
	}
}

/* K contiguous into [kp][W] (W a multiple of 16): 16 outer indices x 16
 * pairs at a time, converted then transposed in registers. */
TARGET_BF16 static void pack_trans_avx512(const struct opnd *s, int W, int p, uint32_t *dst, struct lay l)
{
	const int K2 = kpairs(s->K), K = s->K;
	for (int c0 = 0; c0 < W; c0 += 16)
		for (int k0 = 0; k0 < K; k0 += 32) {
			__m512i r[16], t[16];
			for (int i = 0; i < 16; i++) {
				const int o = p * W + c0 + i;
				r[i] = o < s->O ? pairs32(s->x + o * s->so + k0, K - k0) : _mm512_setzero_si512();
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
			/* r[j]: pair k0/2 + j of the 16 outer indices */
			for (int j = 0; j < 16 && k0 / 2 + j < K2; j++)
				_mm512_storeu_si512(dst + (k0 / 2 + j) * l.ks + c0, r[j]);
		}
}

#endif

/* ---- micro-kernels ------------------------------------------------------- */

/* c (mr, nr) with leading dimension ldc = alpha a b + beta c over K2 pairs:
 * a's pair (r, kp) at a[r*ars + kp*aks] (MR rows; rows past mr are zero),
 * b's [kp][NR]; beta 0 does not read c. */
typedef void (*ukr_fn)(int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t aks, const uint32_t *b, float *c, int ldc,
		       int mr, int nr, float alpha, float beta);

static float bf2f(uint32_t h) { return ds_bf16_to_fp32((uint16_t)h); }

static void ukr_portable(int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t aks, const uint32_t *b, float *c,
			 int ldc, int mr, int nr, float alpha, float beta)
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
			float *e = c + (size_t)r * ldc + j;
			*e = beta == 0.0f ? alpha * acc[r][j] : alpha * acc[r][j] + beta * *e;
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
		float *e = c + (size_t)(r) * ldc + 16 * (v);                                      \
		__m512 x = _mm512_mul_ps(va, c##r##v);                                            \
		if (beta != 0.0f)                                                                 \
			x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m##v, e), x);               \
		_mm512_mask_storeu_ps(e, m##v, x);                                                \
	}
#define UK_ST(r)                                \
	if ((r) < mr) {                         \
		UK_STV(r, 0) UK_STV(r, 1)       \
		UK_STV(r, 2) UK_STV(r, 3)       \
	}

TARGET_BF16 static void ukr_avx512(int K2, const uint32_t *a, ptrdiff_t ars, ptrdiff_t aks, const uint32_t *b,
				   float *c, int ldc, int mr, int nr, float alpha, float beta)
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

typedef void (*pack_fn)(const struct opnd *s, int W, int p, uint32_t *dst, struct lay l);

/* The product's operands, geometry and the functions that run it. */
struct prod {
	struct opnd a, b;       /* op(A): O = M; op(B): O = N */
	int M, N, K2, mp, np;   /* mp/np: panels of A and B */
	struct lay la, lb;      /* packed layouts */
	pack_fn pa, pb;
	ukr_fn ukr;
	float alpha, beta;
	float *c;
	int ldc;
};

static void prod_init(struct prod *p, int isa, int ta, int tb, int M, int N, int K, float alpha, const float *A,
		      int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	p->a = (struct opnd){ A, ta ? 1 : lda, ta ? lda : 1, M, K };
	p->b = (struct opnd){ B, tb ? ldb : 1, tb ? 1 : ldb, N, K };
	p->M = M;
	p->N = N;
	p->K2 = kpairs(K);
	p->mp = (M + MR - 1) / MR;
	p->np = (N + NR - 1) / NR;
	/* a row-major A keeps its rows: converting is all its packing */
	p->la = ta ? (struct lay){ 1, MR } : (struct lay){ p->K2, 1 };
	p->lb = (struct lay){ 1, NR };
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

/* words of one packed panel of A, of B */
static size_t apanel(const struct prod *p) { return (size_t)p->K2 * MR; }
static size_t bpanel(const struct prod *p) { return (size_t)p->K2 * NR; }

static void pack_a(const struct prod *p, int i, uint32_t *ap) { p->pa(&p->a, MR, i, ap + i * apanel(p), p->la); }
static void pack_b(const struct prod *p, int j, uint32_t *bp) { p->pb(&p->b, NR, j, bp + j * bpanel(p), p->lb); }

/* C rows of A panels [i0, i1) x columns of B panels [j0, j1), all K */
static void tile(const struct prod *p, const uint32_t *ap, const uint32_t *bp, int i0, int i1, int j0, int j1)
{
	const int K2 = p->K2;
	for (int kb = 0; kb < K2; kb += KCP) {
		const int kn = K2 - kb < KCP ? K2 - kb : KCP;
		const float beta = kb == 0 ? p->beta : 1.0f;
		for (int j = j0; j < j1; j++) {
			const uint32_t *b = bp + j * bpanel(p) + (size_t)kb * NR;
			const int nr = p->N - j * NR < NR ? p->N - j * NR : NR;
			for (int i = i0; i < i1; i++) {
				const int mr = p->M - i * MR < MR ? p->M - i * MR : MR;
				p->ukr(kn, ap + i * apanel(p) + kb * p->la.ks, p->la.rs, p->la.ks, b,
				       p->c + (size_t)i * MR * p->ldc + (size_t)j * NR, p->ldc, mr, nr, p->alpha, beta);
			}
		}
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

/* One product over all threads: pack A and B (panels shared out), then
 * tiles of C.  Tiles are MCP x NCP micro-panels, smaller when that leaves
 * threads idle. */
static void run_parallel(const struct prod *p, uint32_t *ap, uint32_t *bp, int packb)
{
	const int nt = omp_get_max_threads();
	int mcp = 16, ncp = 4;   /* 96 rows x 256 columns */
	while ((int64_t)((p->mp + mcp - 1) / mcp) * ((p->np + ncp - 1) / ncp) < 2 * nt && (mcp > 2 || ncp > 1)) {
		if (mcp > 2)
			mcp /= 2;
		else
			ncp /= 2;
	}
	const int tm = (p->mp + mcp - 1) / mcp, tn = (p->np + ncp - 1) / ncp;
#pragma omp parallel if (nt > 1 && (int64_t)p->M * p->N * p->K2 > 16384)
	{
#pragma omp for schedule(static) nowait
		for (int i = 0; i < p->mp; i++)
			pack_a(p, i, ap);
		if (packb) {
#pragma omp for schedule(static)
			for (int j = 0; j < p->np; j++)
				pack_b(p, j, bp);
		} else {
#pragma omp barrier
		}
#pragma omp for schedule(dynamic, 1)
		for (int t = 0; t < tm * tn; t++) {
			const int ti = t % tm, tj = t / tm;
			const int i1 = (ti + 1) * mcp < p->mp ? (ti + 1) * mcp : p->mp;
			const int j1 = (tj + 1) * ncp < p->np ? (tj + 1) * ncp : p->np;
			tile(p, ap, bp, ti * mcp, i1, tj * ncp, j1);
		}
	}
}

/* offset of batch entry e in an operand with strides s */
static long boff(const struct ds_gemm_bf16_batch *bt, const long s[2], int e)
{
	return (long)(e / bt->inner) * s[0] + (long)(e % bt->inner) * s[1];
}

int ds_gemm_bf16_kernel(int isa, int keep, const struct ds_gemm_bf16_batch *bt, int ta, int tb, int M, int N, int K,
			float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	const int count = bt ? bt->count : 1;
	if (M <= 0 || N <= 0 || K <= 0 || count < 1 || (bt && (keep || bt->inner < 1)))
		return -1;
	struct prod p;
	prod_init(&p, isa, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
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
			uint32_t *ap = abuf + na * (size_t)th, *bp = bbuf + nb * (size_t)th;
			struct prod q;
			prod_init(&q, isa, ta, tb, M, N, K, alpha, A + boff(bt, bt->sa, e), lda, B + boff(bt, bt->sb, e),
				  ldb, beta, C + boff(bt, bt->sc, e), ldc);
			for (int i = 0; i < q.mp; i++)
				pack_a(&q, i, ap);
			for (int j = 0; j < q.np; j++)
				pack_b(&q, j, bp);
			tile(&q, ap, bp, 0, q.mp, 0, q.np);
		}
		rc = 0;
		goto out;
	}
	if (grow(&abuf, &abuf_n, na) || (keep ? grow(&kbuf, &kbuf_n, nb) : grow(&bbuf, &bbuf_n, nb)))
		goto out;
	for (int e = 0; e < count; e++) {   /* one product, or a batch smaller than the threads */
		struct prod q;
		if (bt)
			prod_init(&q, isa, ta, tb, M, N, K, alpha, A + boff(bt, bt->sa, e), lda, B + boff(bt, bt->sb, e),
				  ldb, beta, C + boff(bt, bt->sc, e), ldc);
		else
			q = p;
		int packb = 1;
		if (keep) {
			packb = !(keep == 2 && kept.src == B && kept.tb == !!tb && kept.N == N && kept.K == K &&
				   kept.ldb == ldb && kept.isa == isa);
			kept.src = NULL;   /* until the copy is complete */
		}
		run_parallel(&q, abuf, keep ? kbuf : bbuf, packb);
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
