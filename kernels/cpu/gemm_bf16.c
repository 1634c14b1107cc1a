/* gemm_bf16.c - bf16 matrix products on AMX through oneDNN (gemm_bf16.h).
 *
 * Each call rounds op(A) and op(B) into bf16 scratch buffers (dense, in
 * their stored orientation: the transposition is left to oneDNN's
 * strides) and runs a oneDNN matmul primitive with bf16 src/weights and a
 * dense fp32 destination (C itself, or a dense copy when ldc != N: oneDNN
 * 2.6 picks no AMX kernel for a strided destination); alpha is the output
 * scale and beta a sum post-op.  Primitives are kept per (layout, M, N, K,
 * alpha, beta) in a small least-recently-used table: creating one
 * costs far more than running a small one.  A shape for which oneDNN would
 * pick a non-AMX implementation is remembered and answered -1 (sgemm).
 */
#include "config.h"

#include "cpu/gemm_bf16.h"

#ifdef HAVE_DNNL

#include <immintrin.h>
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCACHE 64

struct prim {
	int ta, tb, M, N, K, ldc;
	float alpha, beta;
	int amx;                      /* 0: oneDNN picks no AMX kernel for it (answer -1) */
	unsigned long used;           /* 0: empty slot */
	dnnl_primitive_t p;
	dnnl_memory_t a, b, c;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int usable;
static char desc[200];
static dnnl_engine_t eng;
static dnnl_stream_t strm;
static struct prim cache[NCACHE];
static unsigned long tick;
static uint16_t *abuf, *bbuf;   /* bf16 A and B */
static size_t abuf_n, bbuf_n;
static uint16_t *kbuf;          /* bf16 B of ds_gemm_bf16_reuse_b, kept */
static size_t kbuf_n;
static struct { const float *src; int rows, cols, ld; } kept;   /* what kbuf holds (src NULL: nothing) */
static float *cdense;           /* C when ldc != N (oneDNN's AMX matmul wants a dense one) */
static size_t cdense_n;

static void prim_free(struct prim *e)
{
	if (e->p)
		dnnl_primitive_destroy(e->p);
	if (e->a)
		dnnl_memory_destroy(e->a);
	if (e->b)
		dnnl_memory_destroy(e->b);
	if (e->c)
		dnnl_memory_destroy(e->c);
	memset(e, 0, sizeof *e);
}

/* Build the primitive of e's key; impl receives oneDNN's implementation
 * name.  Returns 0 (e->amx says whether it runs on AMX) or -1. */
static int prim_make(struct prim *e, char *impl, size_t implsz)
{
	dnnl_memory_desc_t a, b, c;
	dnnl_dims_t da = { e->M, e->K }, db = { e->K, e->N }, dc = { e->M, e->N };
	dnnl_dims_t sa = { e->ta ? 1 : e->K, e->ta ? e->M : 1 }, sb = { e->tb ? 1 : e->N, e->tb ? e->K : 1 },
		    sc = { e->ldc, 1 };
	dnnl_primitive_attr_t attr = NULL;
	dnnl_primitive_desc_t pd = NULL;
	int rc = -1;
	if (dnnl_memory_desc_init_by_strides(&a, 2, da, dnnl_bf16, sa) ||
	    dnnl_memory_desc_init_by_strides(&b, 2, db, dnnl_bf16, sb) ||
	    dnnl_memory_desc_init_by_strides(&c, 2, dc, dnnl_f32, sc))
		return -1;
	dnnl_matmul_desc_t md;
	if (dnnl_matmul_desc_init(&md, &a, &b, NULL, &c) || dnnl_primitive_attr_create(&attr))
		return -1;
	if (e->alpha != 1.0f && dnnl_primitive_attr_set_output_scales(attr, 1, 0, &e->alpha))
		goto out;
	if (e->beta != 0.0f) {
		dnnl_post_ops_t po;
		if (dnnl_post_ops_create(&po))
			goto out;
		int bad = dnnl_post_ops_append_sum(po, e->beta) || dnnl_primitive_attr_set_post_ops(attr, po);
		dnnl_post_ops_destroy(po);
		if (bad)
			goto out;
	}
	if (dnnl_primitive_desc_create(&pd, &md, attr, eng, NULL))
		goto out;
	const char *name = NULL;
	if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) || !name)
		goto out;
	snprintf(impl, implsz, "%s", name);
	e->amx = strstr(name, "amx") != NULL;
	if (e->amx && (dnnl_primitive_create(&e->p, pd) || dnnl_memory_create(&e->a, &a, eng, DNNL_MEMORY_NONE) ||
		       dnnl_memory_create(&e->b, &b, eng, DNNL_MEMORY_NONE) ||
		       dnnl_memory_create(&e->c, &c, eng, DNNL_MEMORY_NONE)))
		goto out;
	rc = 0;
out:
	if (pd)
		dnnl_primitive_desc_destroy(pd);
	dnnl_primitive_attr_destroy(attr);
	return rc;
}

static void probe(void)
{
	const dnnl_version_t *v = dnnl_version();
	if (dnnl_engine_create(&eng, dnnl_cpu, 0) || dnnl_stream_create(&strm, eng, dnnl_stream_default_flags)) {
		snprintf(desc, sizeof desc, "oneDNN %d.%d.%d: no CPU engine", v->major, v->minor, v->patch);
		return;
	}
	/* what oneDNN picks for a small product tells whether it reaches AMX
	 * here (CPU, kernel permission, ONEDNN_MAX_CPU_ISA) */
	struct prim e = { .ta = 0, .tb = 1, .M = 32, .N = 32, .K = 32, .ldc = 32, .alpha = 1.0f, .beta = 0.0f };
	char impl[128] = "none";
	if (prim_make(&e, impl, sizeof impl) == 0 && e.amx) {
		usable = 1;
		snprintf(desc, sizeof desc, "oneDNN %d.%d.%d %s", v->major, v->minor, v->patch, impl);
	} else {
		snprintf(desc, sizeof desc, "no AMX bf16 (oneDNN %d.%d.%d picks %s on this CPU)", v->major, v->minor,
			 v->patch, impl);
	}
	prim_free(&e);
}

int ds_gemm_bf16_usable(void)
{
	pthread_once(&once, probe);
	return usable;
}

const char *ds_gemm_bf16_describe(void)
{
	pthread_once(&once, probe);
	return desc;
}

/* dst (rows, cols) dense = bf16 of src (rows, cols) with leading dimension
 * ld: round to nearest even, NaN stays a quiet NaN (ds_fp32_to_bf16's bits;
 * vcvtneps2bf16 would flush subnormals).  Only called where AMX runs, so
 * AVX-512 is there. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) static void to_bf16(uint16_t *dst, const float *src, int rows,
									 int cols, int ld)
{
#pragma omp parallel for schedule(static) if ((int64_t)rows * cols > 32768)
	for (int r = 0; r < rows; r++) {
		const float *s = src + (size_t)r * (size_t)ld;
		uint16_t *d = dst + (size_t)r * (size_t)cols;
		const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff),
			      abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000),
			      quiet = _mm512_set1_epi32(0x40);
		for (int j = 0; j < cols; j += 16) {
			__mmask16 m = cols - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - j)) - 1u);
			__m512i x = _mm512_maskz_loadu_epi32(m, s + j);
			__m512i hi = _mm512_srli_epi32(x, 16);
			__m512i r = _mm512_add_epi32(x, _mm512_add_epi32(half, _mm512_and_si512(hi, one)));
			r = _mm512_srli_epi32(r, 16);
			__mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs), inf);
			r = _mm512_mask_or_epi32(r, nan, hi, quiet);
			_mm256_mask_storeu_epi16(d + j, m, _mm512_cvtepi32_epi16(r));
		}
	}
}

static struct prim *lookup(int ta, int tb, int M, int N, int K, int ldc, float alpha, float beta)
{
	struct prim *lru = &cache[0];
	for (int i = 0; i < NCACHE; i++) {
		struct prim *e = &cache[i];
		if (e->used && e->ta == ta && e->tb == tb && e->M == M && e->N == N && e->K == K && e->ldc == ldc &&
		    e->alpha == alpha && e->beta == beta) {
			e->used = ++tick;
			return e;
		}
		if (e->used < lru->used)
			lru = e;
	}
	prim_free(lru);
	*lru = (struct prim){ .ta = ta, .tb = tb, .M = M, .N = N, .K = K, .ldc = ldc, .alpha = alpha, .beta = beta };
	char impl[128];
	if (prim_make(lru, impl, sizeof impl)) {
		prim_free(lru);
		return NULL;
	}
	lru->used = ++tick;
	return lru;
}

/* grow *buf to n elements of size sz (64-byte aligned); 0 or -1 */
static int grow(void **buf, size_t *have, size_t n, size_t sz)
{
	if (n <= *have)
		return 0;
	n += n / 4;
	free(*buf);
	*buf = aligned_alloc(64, (n * sz + 63) & ~(size_t)63);
	*have = *buf ? n : 0;
	return *buf ? 0 : -1;
}

/* dst (rows, cols) with leading dimension ldd = src with lds */
static void copy_rows(float *dst, int ldd, const float *src, int lds, int rows, int cols)
{
#pragma omp parallel for schedule(static) if ((int64_t)rows * cols > 65536)
	for (int r = 0; r < rows; r++)
		memcpy(dst + (size_t)r * (size_t)ldd, src + (size_t)r * (size_t)lds, (size_t)cols * sizeof(float));
}

static int gemm(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
		float beta, float *C, int ldc, int reuse)
{
	if (!ds_gemm_bf16_usable() || M <= 0 || N <= 0 || K <= 0 || ldc < N)
		return -1;
	ta = ta != 0;
	tb = tb != 0;
	const int br = tb ? N : K, bc = tb ? K : N;
	int rc = -1, dense = ldc == N;
	pthread_mutex_lock(&lock);
	if (grow((void **)&abuf, &abuf_n, (size_t)M * (size_t)K, 2) ||
	    grow(reuse ? (void **)&kbuf : (void **)&bbuf, reuse ? &kbuf_n : &bbuf_n, (size_t)K * (size_t)N, 2) ||
	    (!dense && grow((void **)&cdense, &cdense_n, (size_t)M * (size_t)N, 4)))
		goto out;
	struct prim *e = lookup(ta, tb, M, N, K, N, alpha, beta);
	if (!e || !e->amx)
		goto out;
	uint16_t *bh = reuse ? kbuf : bbuf;
	float *cd = dense ? C : cdense;
	to_bf16(abuf, A, ta ? K : M, ta ? M : K, lda);
	if (!reuse || kept.src != B || kept.rows != br || kept.cols != bc || kept.ld != ldb) {
		if (reuse)
			kept.src = NULL;   /* until the copy is complete */
		to_bf16(bh, B, br, bc, ldb);
		if (reuse) {
			kept.src = B;
			kept.rows = br;
			kept.cols = bc;
			kept.ld = ldb;
		}
	}
	if (!dense && beta != 0.0f)
		copy_rows(cd, N, C, ldc, M, N);
	dnnl_exec_arg_t args[3] = { { DNNL_ARG_SRC, e->a }, { DNNL_ARG_WEIGHTS, e->b }, { DNNL_ARG_DST, e->c } };
	if (dnnl_memory_set_data_handle(e->a, abuf) || dnnl_memory_set_data_handle(e->b, bh) ||
	    dnnl_memory_set_data_handle(e->c, cd) || dnnl_primitive_execute(e->p, strm, 3, args) ||
	    dnnl_stream_wait(strm))
		goto out;
	if (!dense)
		copy_rows(C, ldc, cd, N, M, N);
	rc = 0;
out:
	pthread_mutex_unlock(&lock);
	return rc;
}

int ds_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
		 int ldb, float beta, float *C, int ldc)
{
	return gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 0);
}

int ds_gemm_bf16_keep_b(int same, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
			const float *B, int ldb, float beta, float *C, int ldc)
{
	if (!same) {
		pthread_mutex_lock(&lock);
		kept.src = NULL;
		pthread_mutex_unlock(&lock);
	}
	return gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, 1);
}

#else /* !HAVE_DNNL */

int ds_gemm_bf16_usable(void) { return 0; }

const char *ds_gemm_bf16_describe(void)
{
	return "not built with oneDNN (apt-get install libdnnl-dev, configure --with-dnnl)";
}

int ds_gemm_bf16(int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
		 int ldb, float beta, float *C, int ldc)
{
	return -1;
}

int ds_gemm_bf16_keep_b(int same, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
			const float *B, int ldb, float beta, float *C, int ldc)
{
	return -1;
}

#endif
