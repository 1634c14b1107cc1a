/* flat_cuda.cu - the engine's flat-buffer passes and the optimizer updates
 * on the device (flat_cuda.h).  Element-wise kernels are one thread per
 * element on util/half.h's and optim_math.h's inline functions; the
 * reductions (sum of squares, Lamb's per-range norms) are fixed-size
 * chunks reduced by a fixed tree each, then the chunks added in order by
 * one more kernel, so their bits repeat from run to run.
 */
#include "cuda/cuda_port.h"

#include <math.h>
#include <stdlib.h>

#include "cuda/flat_cuda.h"

#define EW 256   /* threads per block of the element-wise kernels */

#define FOR_N(i, n)                                                                                        \
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;                                        \
	if (i >= (n))                                                                                      \
		return

/* ---- 16-bit rounding, packing, scaling ------------------------------------ */

static __global__ void round_k(enum ds_half_kind k, float *x, int64_t n)
{
	FOR_N(i, n);
	x[i] = ds_cuda_round(k, x[i]);
}

static __global__ void pack_k(enum ds_half_kind k, uint16_t *dst, const float *src, int64_t n)
{
	FOR_N(i, n);
	dst[i] = ds_cuda_pack(k, src[i]);
}

static __global__ void unpack_k(enum ds_half_kind k, float *dst, const uint16_t *src, int64_t n)
{
	FOR_N(i, n);
	dst[i] = ds_cuda_unpack(k, src[i]);
}

static __global__ void scale_k(float *x, int64_t n, float f)
{
	FOR_N(i, n);
	x[i] *= f;
}

extern "C" int ds_cuda_half_round(enum ds_half_kind k, float *x, int64_t n, void *stream)
{
	if (k == DS_HALF_NONE || n <= 0)
		return 0;
	DS_CUDA_LAUNCH(round_k, ds_cuda_blocks(n, EW), EW, 0, stream, k, x, n);
	return ds_cuda_status();
}

extern "C" int ds_cuda_half_pack(enum ds_half_kind k, uint16_t *dst, const float *src, int64_t n, void *stream)
{
	if (n <= 0)
		return 0;
	DS_CUDA_LAUNCH(pack_k, ds_cuda_blocks(n, EW), EW, 0, stream, k, dst, src, n);
	return ds_cuda_status();
}

extern "C" int ds_cuda_half_unpack(enum ds_half_kind k, float *dst, const uint16_t *src, int64_t n, void *stream)
{
	if (n <= 0)
		return 0;
	DS_CUDA_LAUNCH(unpack_k, ds_cuda_blocks(n, EW), EW, 0, stream, k, dst, src, n);
	return ds_cuda_status();
}

extern "C" int ds_cuda_scale(float *x, int64_t n, float f, void *stream)
{
	if (f == 1.0f || n <= 0)
		return 0;
	DS_CUDA_LAUNCH(scale_k, ds_cuda_blocks(n, EW), EW, 0, stream, x, n, f);
	return ds_cuda_status();
}

/* ---- communication casts, accumulation ------------------------------------ */

static __global__ void cast_prescale_k(enum ds_half_kind k, const float *g, uint16_t *h, int64_t n, float f)
{
	FOR_N(i, n);
	float x = g[i];
	if (f != 1.0f)
		x = ds_cuda_round(k, x) * f;
	h[i] = ds_cuda_pack(k, x);
}

extern "C" int ds_cuda_cast_prescale(enum ds_half_kind k, float *g, uint16_t *h, int64_t n, float f, void *stream)
{
	if (n <= 0)
		return 0;
	const char *gb = (const char *)g, *hb = (const char *)h;
	const int alias = hb < gb + n * sizeof(float) && gb < hb + n * sizeof(uint16_t);
	if (!alias) {
		DS_CUDA_LAUNCH(cast_prescale_k, ds_cuda_blocks(n, EW), EW, 0, stream, k, g, h, n, f);
		return ds_cuda_status();
	}
	/* h inside g: threads would overwrite floats others have not read
	 * yet, so the 16-bit result goes to scratch first */
	uint16_t *tmp = NULL;
	DS_CUDA_TRY(cudaMallocAsync((void **)&tmp, (size_t)n * sizeof(uint16_t), (cudaStream_t)stream));
	DS_CUDA_LAUNCH(cast_prescale_k, ds_cuda_blocks(n, EW), EW, 0, stream, k, g, tmp, n, f);
	cudaError_t e = cudaMemcpyAsync(h, tmp, (size_t)n * sizeof(uint16_t), cudaMemcpyDeviceToDevice,
					(cudaStream_t)stream);
	int rc = ds_cuda_status();
	cudaError_t e2 = cudaFreeAsync(tmp, (cudaStream_t)stream);
	return rc ? rc : e != cudaSuccess ? (int)e : (int)e2;
}

static __global__ void hadd_k(enum ds_half_kind k, uint16_t *acc, const float *g, int64_t n)
{
	FOR_N(i, n);
	acc[i] = ds_cuda_pack(k, ds_cuda_unpack(k, acc[i]) + g[i]);
}

extern "C" int ds_cuda_hadd(enum ds_half_kind k, uint16_t *acc, const float *g, int64_t n, void *stream)
{
	if (n <= 0)
		return 0;
	DS_CUDA_LAUNCH(hadd_k, ds_cuda_blocks(n, EW), EW, 0, stream, k, acc, g, n);
	return ds_cuda_status();
}

static __global__ void hrecast_k(uint16_t *p, int64_t n, enum ds_half_kind from, enum ds_half_kind cast, float f,
				 enum ds_half_kind to)
{
	FOR_N(i, n);
	float t = ds_cuda_unpack(from, p[i]);
	if (f != 1.0f)
		t = ds_cuda_round(cast, ds_cuda_round(cast, t) * f);
	p[i] = ds_cuda_pack(to, t);
}

extern "C" int ds_cuda_hrecast(uint16_t *p, int64_t n, enum ds_half_kind from, enum ds_half_kind cast, float f,
			       enum ds_half_kind to, void *stream)
{
	if ((from == to && f == 1.0f) || n <= 0)
		return 0;
	DS_CUDA_LAUNCH(hrecast_k, ds_cuda_blocks(n, EW), EW, 0, stream, p, n, from, cast, f, to);
	return ds_cuda_status();
}

static __global__ void accumulate_k(enum ds_half_kind k, float *acc, const float *g, int64_t n)
{
	FOR_N(i, n);
	acc[i] = ds_cuda_round(k, acc[i] + g[i]);
}

extern "C" int ds_cuda_accumulate(enum ds_half_kind k, float *acc, const float *g, int64_t n, void *stream)
{
	if (n <= 0)
		return 0;
	DS_CUDA_LAUNCH(accumulate_k, ds_cuda_blocks(n, EW), EW, 0, stream, k, acc, g, n);
	return ds_cuda_status();
}

/* ---- sum of squares and the non-finite flag ------------------------------- */

#define SQ_CHUNK 65536
#define SQ_THREADS 256

static __device__ __forceinline__ float load_any(const void *x, enum ds_half_kind k, int64_t i)
{
	if (k == DS_HALF_NONE)
		return ((const float *)x)[i];
	return ds_cuda_unpack(k, ((const uint16_t *)x)[i]);
}

/* block c: chunk c; part[c] = its sum, bad[c] = whether it holds inf/nan */
static __global__ void sumsq_part_k(double *part, int *bad, const void *x, enum ds_half_kind k, int64_t n)
{
	__shared__ double sh[SQ_THREADS];
	__shared__ int shb[SQ_THREADS];
	const int64_t lo = (int64_t)blockIdx.x * SQ_CHUNK, hi = lo + SQ_CHUNK < n ? lo + SQ_CHUNK : n;
	double s = 0;
	int b = 0;
	for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
		float v = load_any(x, k, i);
		b |= !isfinite(v);
		s += (double)v * (double)v;
	}
	s = ds_block_sum(s, sh);
	b = ds_block_max(b, shb);
	if (threadIdx.x == 0) {
		part[blockIdx.x] = s;
		bad[blockIdx.x] = b;
	}
}

/* one block: thread j adds items j, j+256, ... in order, then the tree;
 * acc[0] (add 1) or out[0] (add 0) gets the sum, acc[1] the flag */
static __global__ void final_k(double *out, int add, const double *part, const int *bad, int64_t nch)
{
	__shared__ double sh[SQ_THREADS];
	__shared__ int shb[SQ_THREADS];
	double s = 0;
	int b = 0;
	for (int64_t c = threadIdx.x; c < nch; c += blockDim.x) {
		s += part[c];
		b |= bad ? bad[c] : 0;
	}
	s = ds_block_sum(s, sh);
	b = ds_block_max(b, shb);
	if (threadIdx.x == 0) {
		out[0] = add ? out[0] + s : s;
		if (bad && b)
			out[1] = 1.0;
	}
}

extern "C" int ds_cuda_sumsq(double *acc, const void *x, enum ds_half_kind k, int64_t n, void *stream)
{
	if (n <= 0)
		return 0;
	const int64_t nch = (n + SQ_CHUNK - 1) / SQ_CHUNK;
	void *scratch = NULL;
	DS_CUDA_TRY(cudaMallocAsync(&scratch, (size_t)nch * (sizeof(double) + sizeof(int)), (cudaStream_t)stream));
	double *part = (double *)scratch;
	int *bad = (int *)(part + nch);
	DS_CUDA_LAUNCH(sumsq_part_k, (unsigned)nch, SQ_THREADS, 0, stream, part, bad, x, k, n);
	DS_CUDA_LAUNCH(final_k, 1, SQ_THREADS, 0, stream, acc, 1, (const double *)part, (const int *)bad, nch);
	int rc = ds_cuda_status();
	cudaError_t e = cudaFreeAsync(scratch, (cudaStream_t)stream);
	return rc ? rc : (int)e;
}

extern "C" int ds_cuda_sum(double *out, const double *x, int64_t n, void *stream)
{
	DS_CUDA_LAUNCH(final_k, 1, SQ_THREADS, 0, stream, out, 0, x, (const int *)NULL, n);
	return ds_cuda_status();
}

static __global__ void fill_cols_k(float *x, int64_t rows, int64_t ld, int col0, int w, float v)
{
	FOR_N(i, rows * w);
	x[i / w * ld + col0 + i % w] = v;
}

extern "C" int ds_cuda_fill_cols(float *x, int64_t rows, int64_t ld, int col0, int col1, float v, void *stream)
{
	if (rows <= 0 || col1 <= col0)
		return 0;
	DS_CUDA_LAUNCH(fill_cols_k, ds_cuda_blocks(rows * (col1 - col0), EW), EW, 0, stream, x, rows, ld, col0,
		       col1 - col0, v);
	return ds_cuda_status();
}

/* ---- Adam, SGD -------------------------------------------------------------- */

static __global__ void adam_k(struct ds_adam_coef c, float *p, const float *g, float *m, float *v, int64_t n)
{
	FOR_N(i, n);
	ds_adam_elem(&c, p + i, g + i, m + i, v + i);
}

extern "C" int ds_cuda_adam(const struct ds_adam_coef *c, float *p, const float *g, float *m, float *v, int64_t n,
			    void *stream)
{
	if (n <= 0)
		return 0;
	DS_CUDA_LAUNCH(adam_k, ds_cuda_blocks(n, EW), EW, 0, stream, *c, p, g, m, v, n);
	return ds_cuda_status();
}

static __global__ void sgd_k(struct ds_sgd_coef c, float *p, const float *g, float *buf, int64_t n)
{
	FOR_N(i, n);
	ds_sgd_elem(&c, p + i, g[i], buf ? buf + i : (float *)0);
}

extern "C" int ds_cuda_sgd(const struct ds_sgd_coef *c, float *p, const float *g, float *buf, int64_t n,
			   void *stream)
{
	if (n <= 0)
		return 0;
	DS_CUDA_LAUNCH(sgd_k, ds_cuda_blocks(n, EW), EW, 0, stream, *c, p, g, buf, n);
	return ds_cuda_status();
}

/* ---- Lamb ------------------------------------------------------------------- */

#define LAMB_CHUNK 8192   /* lib/optim/lamb.c's CHUNK */

/* one 8192-element piece of a range, and phase 2's step for its range */
struct lamb_chunk {
	int64_t lo, len;
	int range;
	float step;
};

/* block c: chunk c's moments, and its sums of p^2 and u^2 */
static __global__ void lamb_part_k(struct ds_lamb_coef k, const float *p, const float *g, float *m, float *v,
				   float gm, const struct lamb_chunk *ch, double *part)
{
	__shared__ double sh[SQ_THREADS];
	const struct lamb_chunk c = ch[blockIdx.x];
	double a = 0, b = 0;
	for (int64_t i = c.lo + threadIdx.x; i < c.lo + c.len; i += blockDim.x) {
		float mo = m[i], va = v[i];
		ds_lamb_moments(&k, g[i] * gm, &mo, &va);
		m[i] = mo;
		v[i] = va;
		float u = ds_lamb_u(&k, p[i], mo, va);
		a += (double)p[i] * p[i];
		b += (double)u * u;
	}
	a = ds_block_sum(a, sh);
	b = ds_block_sum(b, sh);
	if (threadIdx.x == 0) {
		part[2 * blockIdx.x] = a;
		part[2 * blockIdx.x + 1] = b;
	}
}

/* thread r: range r's chunks [first[r], first[r+1]) in order */
static __global__ void lamb_sums_k(double *sums, const double *part, const int64_t *first, int nranges)
{
	int r = blockIdx.x * blockDim.x + threadIdx.x;
	if (r >= nranges)
		return;
	double a = 0, b = 0;
	for (int64_t c = first[r]; c < first[r + 1]; c++) {
		a += part[2 * c];
		b += part[2 * c + 1];
	}
	sums[2 * r] = a;
	sums[2 * r + 1] = b;
}

static __global__ void lamb_apply_k(struct ds_lamb_coef k, float *p, const float *m, const float *v,
				    const struct lamb_chunk *ch)
{
	const struct lamb_chunk c = ch[blockIdx.x];
	for (int64_t i = c.lo + threadIdx.x; i < c.lo + c.len; i += blockDim.x)
		p[i] = p[i] - c.step * ds_lamb_u(&k, p[i], m[i], v[i]);
}

/* The chunk table of the ranges (and each range's first chunk) in device
 * scratch: *dev holds the chunks, then nranges + 1 first indices.  Host
 * memory is staged by cudaMemcpyAsync before it returns (pageable source),
 * so the host copy is freed here. */
static int lamb_table(const struct ds_range *ranges, int nranges, const float *steps, void **dev, int64_t *nchunks,
		      void *stream)
{
	int64_t nc = 0;
	for (int r = 0; r < nranges; r++)
		nc += (int64_t)((ranges[r].len + LAMB_CHUNK - 1) / LAMB_CHUNK);
	size_t bytes = (size_t)nc * sizeof(struct lamb_chunk) + ((size_t)nranges + 1) * sizeof(int64_t);
	char *h = (char *)malloc(bytes ? bytes : 1);
	if (!h)
		return (int)cudaErrorMemoryAllocation;
	struct lamb_chunk *c = (struct lamb_chunk *)h;
	int64_t *first = (int64_t *)(h + (size_t)nc * sizeof(struct lamb_chunk)), k = 0;
	for (int r = 0; r < nranges; r++) {
		first[r] = k;
		for (size_t o = 0; o < ranges[r].len; o += LAMB_CHUNK, k++) {
			c[k].lo = (int64_t)(ranges[r].off + o);
			c[k].len = (int64_t)(ranges[r].len - o < LAMB_CHUNK ? ranges[r].len - o : LAMB_CHUNK);
			c[k].range = r;
			c[k].step = steps ? steps[r] : 0.0f;
		}
	}
	first[nranges] = k;
	cudaError_t e = cudaMallocAsync(dev, bytes ? bytes : 1, (cudaStream_t)stream);
	if (e == cudaSuccess)
		e = cudaMemcpyAsync(*dev, h, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream);
	free(h);
	*nchunks = nc;
	return (int)e;
}

extern "C" int ds_cuda_lamb_partial(const struct ds_lamb_coef *k, const float *p, const float *g, float *m, float *v,
				    float grad_mul, const struct ds_range *ranges, int nranges, double *sums,
				    void *stream)
{
	if (nranges <= 0)
		return 0;
	void *tab = NULL;
	int64_t nc = 0;
	int rc = lamb_table(ranges, nranges, NULL, &tab, &nc, stream);
	double *part = NULL;
	if (!rc)
		rc = (int)cudaMallocAsync((void **)&part, (size_t)(nc ? nc : 1) * 2 * sizeof(double), (cudaStream_t)stream);
	if (!rc) {
		const struct lamb_chunk *ch = (const struct lamb_chunk *)tab;
		const int64_t *first = (const int64_t *)(ch + nc);
		if (nc)
			DS_CUDA_LAUNCH(lamb_part_k, (unsigned)nc, SQ_THREADS, 0, stream, *k, p, g, m, v, grad_mul, ch, part);
		DS_CUDA_LAUNCH(lamb_sums_k, ds_cuda_blocks(nranges, 128), 128, 0, stream, sums, part, first, nranges);
		rc = ds_cuda_status();
	}
	if (part)
		cudaFreeAsync(part, (cudaStream_t)stream);
	if (tab)
		cudaFreeAsync(tab, (cudaStream_t)stream);
	return rc;
}

extern "C" int ds_cuda_lamb_apply(const struct ds_lamb_coef *k, float *p, const float *m, const float *v,
				  const struct ds_range *ranges, int nranges, const double *sums, double step_size,
				  double min_coeff, double max_coeff, void *stream)
{
	if (nranges <= 0)
		return 0;
	/* each range's step as lib/optim/lamb.c takes it, on the host */
	float *steps = (float *)malloc((size_t)nranges * sizeof(float));
	if (!steps)
		return (int)cudaErrorMemoryAllocation;
	for (int r = 0; r < nranges; r++)
		steps[r] = (float)(step_size * ds_lamb_ratio(sqrt(sums[2 * r]), sqrt(sums[2 * r + 1]), min_coeff, max_coeff));
	void *tab = NULL;
	int64_t nc = 0;
	int rc = lamb_table(ranges, nranges, steps, &tab, &nc, stream);
	free(steps);
	if (!rc && nc) {
		DS_CUDA_LAUNCH(lamb_apply_k, (unsigned)nc, EW, 0, stream, *k, p, m, v, (const struct lamb_chunk *)tab);
		rc = ds_cuda_status();
	}
	if (tab)
		cudaFreeAsync(tab, (cudaStream_t)stream);
	return rc;
}
