/* gpt_cuda.cu - CUDA versions of every CPU kernel of the GPT passes
 * (gpt_cuda.h), on the per-element math of kernels/common/gpt_math.h and
 * the Philox streams of util/rng.h.  Row statistics take one block per row
 * (256 threads, fixed-order trees: statistics of the norms in double like
 * the CPU's); column sums are partial sums over fixed 256-row chunks, then
 * one pass over the chunks in order; the embedding gradient is added token
 * by token by one owner block per token class, in row order.  Built by
 * nvcc for the device and by g++ for the emulated unit test (cuda_port.h).
 */
#include "cuda/cuda_port.h"

#include <math.h>
#include <string.h>

#include "cuda/gpt_cuda.h"

#define ROW_THREADS 256

/* ---- dropout -------------------------------------------------------------- */

/* thread k: elements 4k..4k+3 of sample blockIdx.y, one Philox block */
static __global__ void dropout_k(float *x, int64_t n, struct ds_cuda_streams gs, float p, float sc)
{
	int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (4 * k >= n)
		return;
	float *xs = x + (int64_t)blockIdx.y * n;
	uint32_t r[4];
	ds_rng_draw4(&gs.g[blockIdx.y], (uint64_t)k, r);
	for (int j = 0; j < 4 && 4 * k + j < n; j++) {
		int64_t i = 4 * k + j;
		xs[i] = ds_dropout_keep(r[j], p) ? xs[i] * sc : 0.0f;
	}
}

extern "C" int ds_kernel_cuda_dropout_rows(float *x, int B, int64_t n, const struct ds_rng *gs, float p,
					   void *stream)
{
	if (p <= 0.0f || n <= 0 || B <= 0)
		return 0;
	const float sc = 1.0f / (1.0f - p);
	const unsigned nb = ds_cuda_blocks((n + 3) / 4, 256);
	for (int b0 = 0; b0 < B; b0 += DS_CUDA_STREAMS) {
		int m = B - b0 < DS_CUDA_STREAMS ? B - b0 : DS_CUDA_STREAMS;
		struct ds_cuda_streams s;
		ds_cuda_streams_fill(&s, gs, b0, m);
		DS_CUDA_LAUNCH(dropout_k, dim3(nb, (unsigned)m), 256, 0, stream, x + (int64_t)b0 * n, n, s, p, sc);
	}
	return ds_cuda_status();
}

extern "C" int ds_kernel_cuda_dropout(float *x, int64_t n, const struct ds_rng *g, float p, void *stream)
{
	return ds_kernel_cuda_dropout_rows(x, 1, n, g, p, stream);
}

/* ---- embeddings ----------------------------------------------------------- */

static __global__ void embed_fwd_k(float *out, const int32_t *tok, const float *wte, const float *pos, int64_t N,
				   int T, int C)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= N * C)
		return;
	int64_t bt = i / C;
	int c = (int)(i % C);
	float w = wte[(int64_t)tok[bt] * C + c];
	out[i] = pos ? w + pos[(bt % T) * C + c] : w;
}

extern "C" int ds_kernel_cuda_embed_forward(float *out, const int32_t *tok, const float *wte, const float *pos,
					    int B, int T, int C, void *stream)
{
	int64_t n = (int64_t)B * T * C;
	if (n <= 0)
		return 0;
	DS_CUDA_LAUNCH(embed_fwd_k, ds_cuda_blocks(n, 256), 256, 0, stream, out, tok, wte, pos, (int64_t)B * T, T, C);
	return ds_cuda_status();
}

/* Block k owns the tokens v with v % gridDim.x == k: it walks all N rows
 * in order, collects (ballot, prefix counts) the rows of its tokens tile by
 * tile, and adds each such row to its token's gradient row, thread c
 * owning channels c, c+256, ...  Every element sees its additions in row
 * order, as on the CPU, and no two blocks touch the same row. */
static __global__ void embed_bwd_k(float *dwte, const float *dout, const int32_t *tok, int64_t N, int C)
{
	__shared__ int wcount[ROW_THREADS / 32];
	__shared__ int64_t list[ROW_THREADS];
	const unsigned K = gridDim.x, k = blockIdx.x;
	const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
	for (int64_t base = 0; base < N; base += blockDim.x) {
		int64_t i = base + threadIdx.x;
		int mine = i < N && (unsigned)tok[i] % K == k;
		unsigned bal = __ballot_sync(0xffffffffu, mine);
		if (lane == 0)
			wcount[w] = __popc(bal);
		__syncthreads();
		int off = 0, total = 0;
		for (int j = 0; j < (int)(blockDim.x / 32); j++) {
			off += j < w ? wcount[j] : 0;
			total += wcount[j];
		}
		if (mine)
			list[off + __popc(bal & ((1u << lane) - 1u))] = i;
		__syncthreads();
		for (int m = 0; m < total; m++) {
			const int64_t bt = list[m];
			float *d = dwte + (int64_t)tok[bt] * C;
			const float *g = dout + bt * C;
			for (int c = threadIdx.x; c < C; c += blockDim.x)
				d[c] += g[c];
		}
		__syncthreads();
	}
}

/* dpos[t, c] += dout[b, t, c] over b in order */
static __global__ void embed_bwd_pos_k(float *dpos, const float *dout, int B, int T, int C)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= (int64_t)T * C)
		return;
	float s = dpos[i];
	for (int b = 0; b < B; b++)
		s += dout[(int64_t)b * T * C + i];
	dpos[i] = s;
}

extern "C" int ds_kernel_cuda_embed_backward(float *dwte, float *dpos, const float *dout, const int32_t *tok, int B,
					     int T, int C, void *stream)
{
	int64_t N = (int64_t)B * T;
	if (N <= 0 || C <= 0)
		return 0;
	unsigned owners = N < 256 ? (unsigned)N : 256;
	DS_CUDA_LAUNCH(embed_bwd_k, owners, ROW_THREADS, 0, stream, dwte, dout, tok, N, C);
	if (dpos)
		DS_CUDA_LAUNCH(embed_bwd_pos_k, ds_cuda_blocks((int64_t)T * C, 256), 256, 0, stream, dpos, dout, B, T, C);
	return ds_cuda_status();
}

/* ---- column sums: fixed 256-row chunks, then the chunks in order ------------ */

#define COL_ROWS 256

struct ln_cols {
	const float *dout, *inp, *mean, *rstd;
	__device__ void operator()(int64_t n, int c, int C, float *v) const
	{
		float g = dout[n * C + c];
		v[0] = g * (inp[n * C + c] - mean[n]) * rstd[n];
		v[1] = g;
	}
};

struct rms_cols {
	const float *dout, *inp, *inv;
	__device__ void operator()(int64_t n, int c, int C, float *v) const
	{
		v[0] = dout[n * C + c] * (inp[n * C + c] * inv[n]);
	}
};

struct bias_cols {
	const float *dout;
	__device__ void operator()(int64_t n, int c, int C, float *v) const { v[0] = dout[n * C + c]; }
};

/* block (32 channels, 8 row lanes) x chunk blockIdx.y of COL_ROWS rows:
 * part[k][chunk][c] = the chunk's sum of value k */
template <int NV, class Op> static __global__ void colsum_part_k(float *part, Op op, int64_t N, int C)
{
	__shared__ float sh[NV][8][32];
	const int c = blockIdx.x * 32 + threadIdx.x;
	const int64_t r0 = (int64_t)blockIdx.y * COL_ROWS, r1 = r0 + COL_ROWS < N ? r0 + COL_ROWS : N;
	float acc[NV];
	for (int k = 0; k < NV; k++)
		acc[k] = 0.0f;
	if (c < C)
		for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
			float v[NV];
			op(r, c, C, v);
			for (int k = 0; k < NV; k++)
				acc[k] += v[k];
		}
	for (int k = 0; k < NV; k++)
		sh[k][threadIdx.y][threadIdx.x] = acc[k];
	__syncthreads();
	if (threadIdx.y == 0 && c < C)
		for (int k = 0; k < NV; k++) {
			float s = sh[k][0][threadIdx.x];
			for (int y = 1; y < 8; y++)
				s += sh[k][y][threadIdx.x];
			part[((int64_t)k * gridDim.y + blockIdx.y) * C + c] = s;
		}
}

/* out_k[c] += the chunks' sums in chunk order */
static __global__ void colsum_final_k(float *o0, float *o1, const float *part, int nch, int C)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= C)
		return;
	float *out[2] = { o0, o1 };
	for (int k = 0; k < 2 && out[k]; k++) {
		float s = 0.0f;
		for (int j = 0; j < nch; j++)
			s += part[((int64_t)k * nch + j) * C + c];
		out[k][c] += s;
	}
}

template <int NV, class Op> static int colsum(float *o0, float *o1, Op op, int64_t N, int C, void *stream)
{
	if (N <= 0 || C <= 0)
		return 0;
	const int64_t nch = (N + COL_ROWS - 1) / COL_ROWS;
	if (nch > 65535)
		return (int)cudaErrorInvalidValue;  /* over 16M rows */
	float *part = NULL;
	DS_CUDA_TRY(cudaMallocAsync((void **)&part, (size_t)NV * nch * C * sizeof(float), (cudaStream_t)stream));
	auto k1 = colsum_part_k<NV, Op>;
	DS_CUDA_LAUNCH(k1, dim3(ds_cuda_blocks(C, 32), (unsigned)nch), dim3(32, 8), 0, stream, part, op, N, C);
	DS_CUDA_LAUNCH(colsum_final_k, ds_cuda_blocks(C, 128), 128, 0, stream, o0, NV > 1 ? o1 : (float *)NULL, part,
		       (int)nch, C);
	int rc = ds_cuda_status();
	cudaError_t e = cudaFreeAsync(part, (cudaStream_t)stream);
	return rc ? rc : (int)e;
}

/* ---- layernorm and rmsnorm ------------------------------------------------- */

static __global__ void layernorm_fwd_k(float *out, float *mean, float *rstd, const float *inp, const float *w,
				       const float *b, int C, float eps)
{
	__shared__ double sh[ROW_THREADS];
	const int64_t n = blockIdx.x;
	const float *x = inp + n * C;
	double s = 0;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		s += x[i];
	s = ds_block_sum(s, sh);
	const double m = s / C;
	double v = 0;
	for (int i = threadIdx.x; i < C; i += blockDim.x) {
		double d = x[i] - m;
		v += d * d;
	}
	v = ds_block_sum(v, sh);
	const float fm = (float)m, rs = (float)(1.0 / sqrt(v / C + eps));
	float *o = out + n * C;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		o[i] = (x[i] - fm) * rs * w[i] + b[i];
	if (threadIdx.x == 0) {
		mean[n] = fm;
		rstd[n] = rs;
	}
}

extern "C" int ds_kernel_cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
						const float *w, const float *b, int64_t N, int C, float eps, void *stream)
{
	if (N <= 0)
		return 0;
	DS_CUDA_LAUNCH(layernorm_fwd_k, (unsigned)N, ROW_THREADS, 0, stream, out, mean, rstd, inp, w, b, C, eps);
	return ds_cuda_status();
}

static __global__ void layernorm_bwd_k(float *dinp, const float *dout, const float *inp, const float *w,
				       const float *mean, const float *rstd, int C)
{
	__shared__ float sh[ROW_THREADS];
	const int64_t n = blockIdx.x;
	const float *x = inp + n * C, *g = dout + n * C;
	const float m = mean[n], rs = rstd[n];
	float sg = 0, sgx = 0;
	for (int i = threadIdx.x; i < C; i += blockDim.x) {
		float dn = w[i] * g[i];
		sg += dn;
		sgx += dn * (x[i] - m) * rs;
	}
	sg = ds_block_sum(sg, sh) / C;
	sgx = ds_block_sum(sgx, sh) / C;
	float *d = dinp + n * C;
	for (int i = threadIdx.x; i < C; i += blockDim.x) {
		float xh = (x[i] - m) * rs;
		d[i] += rs * (w[i] * g[i] - sg - xh * sgx);
	}
}

extern "C" int ds_kernel_cuda_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
						 const float *inp, const float *w, const float *mean,
						 const float *rstd, int64_t N, int C, void *stream)
{
	if (N <= 0)
		return 0;
	DS_CUDA_LAUNCH(layernorm_bwd_k, (unsigned)N, ROW_THREADS, 0, stream, dinp, dout, inp, w, mean, rstd, C);
	int rc = ds_cuda_status();
	if (rc)
		return rc;
	return colsum<2>(dw, db, ln_cols{ dout, inp, mean, rstd }, N, C, stream);
}

static __global__ void rmsnorm_fwd_k(float *out, float *rms, float *inv, const float *inp, const float *w, int C,
				     float eps)
{
	__shared__ double sh[ROW_THREADS];
	const int64_t n = blockIdx.x;
	const float *x = inp + n * C;
	double s = 0;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		s += (double)x[i] * x[i];
	s = ds_block_sum(s, sh);
	const double r = sqrt(s / C);
	const float iv = (float)(1.0 / (r + eps));
	float *o = out + n * C;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		o[i] = w[i] * (x[i] * iv);
	if (threadIdx.x == 0) {
		rms[n] = (float)r;
		inv[n] = iv;
	}
}

extern "C" int ds_kernel_cuda_rmsnorm_forward(float *out, float *rms, float *inv, const float *inp, const float *w,
					      int64_t N, int C, float eps, void *stream)
{
	if (N <= 0)
		return 0;
	DS_CUDA_LAUNCH(rmsnorm_fwd_k, (unsigned)N, ROW_THREADS, 0, stream, out, rms, inv, inp, w, C, eps);
	return ds_cuda_status();
}

static __global__ void rmsnorm_bwd_k(float *dinp, const float *dout, const float *inp, const float *w,
				     const float *rms, const float *inv, int C)
{
	__shared__ float sh[ROW_THREADS];
	const int64_t n = blockIdx.x;
	const float *x = inp + n * C, *g = dout + n * C;
	const float iv = inv[n], r = rms[n];
	float s = 0;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		s += w[i] * g[i] * x[i];
	s = ds_block_sum(s, sh);
	const float k = r > 0 ? iv * iv * s / (C * r) : 0.0f;
	float *d = dinp + n * C;
	for (int i = threadIdx.x; i < C; i += blockDim.x)
		d[i] += iv * w[i] * g[i] - k * x[i];
}

extern "C" int ds_kernel_cuda_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp,
					       const float *w, const float *rms, const float *inv, int64_t N, int C,
					       void *stream)
{
	if (N <= 0)
		return 0;
	DS_CUDA_LAUNCH(rmsnorm_bwd_k, (unsigned)N, ROW_THREADS, 0, stream, dinp, dout, inp, w, rms, inv, C);
	int rc = ds_cuda_status();
	if (rc)
		return rc;
	return colsum<1>(dw, NULL, rms_cols{ dout, inp, inv }, N, C, stream);
}

/* ---- bias, residual, rotary ------------------------------------------------ */

static __global__ void bias_fill_k(float *out, const float *b, int64_t n, int OC)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		out[i] = b ? b[i % OC] : 0.0f;
}

extern "C" int ds_kernel_cuda_bias_fill(float *out, const float *b, int64_t N, int OC, void *stream)
{
	int64_t n = N * OC;
	if (n <= 0)
		return 0;
	DS_CUDA_LAUNCH(bias_fill_k, ds_cuda_blocks(n, 256), 256, 0, stream, out, b, n, OC);
	return ds_cuda_status();
}

extern "C" int ds_kernel_cuda_bias_backward(float *db, const float *dout, int64_t N, int OC, void *stream)
{
	return colsum<1>(db, NULL, bias_cols{ dout }, N, OC, stream);
}

static __global__ void add_k(float *out, const float *a, int64_t n)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		out[i] += a[i];
}

extern "C" int ds_kernel_cuda_add_inplace(float *out, const float *a, int64_t n, void *stream)
{
	if (n <= 0)
		return 0;
	DS_CUDA_LAUNCH(add_k, ds_cuda_blocks(n, 256), 256, 0, stream, out, a, n);
	return ds_cuda_status();
}

/* thread per (bt, part, h, i < rd/2): rotate the pair (i, i + rd/2) */
static __global__ void rotary_k(float *qkv, const float *cs, const float *sn, int64_t n, int T, int C, int NH,
				int rd, float sg)
{
	int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (j >= n)
		return;
	const int half = rd / 2, hs = C / NH;
	const int i = (int)(j % half);
	const int h = (int)(j / half % NH), part = (int)(j / half / NH % 2);
	const int64_t bt = j / half / NH / 2;
	const int t = (int)(bt % T);
	float *x = qkv + bt * 3 * C + part * C + h * hs;
	ds_rotary_pair(&x[i], &x[i + half], cs[(int64_t)t * half + i], sg * sn[(int64_t)t * half + i]);
}

extern "C" int ds_kernel_cuda_rotary(float *qkv, const float *cs, const float *sn, int B, int T, int C, int NH,
				     int rd, int inverse, void *stream)
{
	int64_t n = (int64_t)B * T * 2 * NH * (rd / 2);
	if (n <= 0)
		return 0;
	DS_CUDA_LAUNCH(rotary_k, ds_cuda_blocks(n, 256), 256, 0, stream, qkv, cs, sn, n, T, C, NH, rd,
		       inverse ? -1.0f : 1.0f);
	return ds_cuda_status();
}

/* ---- causal softmax and attention dropout ---------------------------------- */

/* one block per row r of (B,NH,T) rows, t = r % T */
static __global__ void softmax_fwd_k(float *att, int T)
{
	__shared__ float sh[ROW_THREADS];
	const int64_t r = blockIdx.x;
	const int t = (int)(r % T);
	float *a = att + r * T;
	float mx = -INFINITY;
	for (int i = threadIdx.x; i <= t; i += blockDim.x)
		mx = a[i] > mx ? a[i] : mx;
	mx = ds_block_max(mx, sh);
	float sum = 0;
	for (int i = threadIdx.x; i <= t; i += blockDim.x) {
		float e = ds_expf(a[i] - mx);
		a[i] = e;
		sum += e;
	}
	sum = ds_block_sum(sum, sh);
	const float is = 1.0f / sum;
	for (int i = threadIdx.x; i < T; i += blockDim.x)
		a[i] = i <= t ? a[i] * is : 0.0f;
}

extern "C" int ds_kernel_cuda_causal_softmax_forward(float *att, int B, int NH, int T, void *stream)
{
	int64_t rows = (int64_t)B * NH * T;
	if (rows <= 0)
		return 0;
	DS_CUDA_LAUNCH(softmax_fwd_k, (unsigned)rows, ROW_THREADS, 0, stream, att, T);
	return ds_cuda_status();
}

/* element (row, t2) of samples b0 + blockIdx.y: attd = att * keep */
static __global__ void attn_drop_k(float *attd, const float *att, int NH, int T, float p, float sc,
				   struct ds_cuda_streams gs)
{
	const int64_t per = (int64_t)NH * T * T;
	int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= per)
		return;
	const int64_t off = (int64_t)blockIdx.y * per + e;
	const int t = (int)(e / T % T), t2 = (int)(e % T);
	attd[off] = t2 <= t ? att[off] * ds_cuda_keep(&gs.g[blockIdx.y], (uint64_t)e, p, sc) : 0.0f;
}

extern "C" int ds_kernel_cuda_attention_dropout(float *attd, const float *att, int B, int NH, int T, float p,
						const struct ds_rng *gs, void *stream)
{
	const int64_t per = (int64_t)NH * T * T;
	if (per <= 0 || B <= 0)
		return 0;
	const float sc = 1.0f / (1.0f - p);
	for (int b0 = 0; b0 < B; b0 += DS_CUDA_STREAMS) {
		int m = B - b0 < DS_CUDA_STREAMS ? B - b0 : DS_CUDA_STREAMS;
		struct ds_cuda_streams s;
		ds_cuda_streams_fill(&s, gs, b0, m);
		DS_CUDA_LAUNCH(attn_drop_k, dim3(ds_cuda_blocks(per, 256), (unsigned)m), 256, 0, stream,
			       attd + b0 * per, att + b0 * per, NH, T, p, sc, s);
	}
	return ds_cuda_status();
}

/* one block per row of samples b0 + blockIdx.y (rows of a sample: x) */
static __global__ void softmax_bwd_k(float *datt, const float *att, int NH, int T, float scale, float p, float sc,
				     struct ds_cuda_streams gs)
{
	__shared__ float sh[ROW_THREADS];
	const int64_t rs = (int64_t)blockIdx.y * NH * T + blockIdx.x;  /* row in the chunk */
	const int t = (int)(blockIdx.x % T), h = (int)(blockIdx.x / T);
	float *d = datt + rs * T;
	const float *a = att + rs * T;
	const uint64_t base = ((uint64_t)h * T + t) * T;
	float s = 0;
	for (int i = threadIdx.x; i <= t; i += blockDim.x) {
		float di = d[i];
		if (p > 0.0f) {
			di *= ds_cuda_keep(&gs.g[blockIdx.y], base + i, p, sc);
			d[i] = di;
		}
		s += a[i] * di;
	}
	s = ds_block_sum(s, sh);
	for (int i = threadIdx.x; i < T; i += blockDim.x)
		d[i] = i <= t ? scale * a[i] * (d[i] - s) : 0.0f;
}

extern "C" int ds_kernel_cuda_causal_softmax_backward(float *datt, const float *att, int B, int NH, int T,
						      float scale, float p, const struct ds_rng *gs, void *stream)
{
	const int64_t rows = (int64_t)NH * T, per = rows * T;
	if (rows <= 0 || B <= 0)
		return 0;
	const float sc = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
	for (int b0 = 0; b0 < B; b0 += DS_CUDA_STREAMS) {
		int m = B - b0 < DS_CUDA_STREAMS ? B - b0 : DS_CUDA_STREAMS;
		struct ds_cuda_streams s;
		memset(&s, 0, sizeof(s));
		if (p > 0.0f)
			ds_cuda_streams_fill(&s, gs, b0, m);
		DS_CUDA_LAUNCH(softmax_bwd_k, dim3((unsigned)rows, (unsigned)m), ROW_THREADS, 0, stream,
			       datt + b0 * per, att + b0 * per, NH, T, scale, p, sc, s);
	}
	return ds_cuda_status();
}

/* ---- activations ----------------------------------------------------------- */

static __global__ void act_forward_k(float *out, const float *inp, int64_t N, int F, int act)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= N * F)
		return;
	int64_t n = i / F;
	int f = (int)(i % F);
	if (!ds_act_gated(act)) {
		out[i] = act == 3 ? ds_gelu_exact(inp[i]) : ds_gelu(inp[i]);
		return;
	}
	const float *a = inp + n * 2 * F;
	float g = act == 1 ? ds_gelu(a[f]) : act == 4 ? ds_gelu_exact(a[f]) : ds_silu(a[f]);
	out[i] = g * a[F + f];
}

static __global__ void act_backward_k(float *dinp, const float *dout, const float *inp, int64_t N, int F, int act)
{
	int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= N * F)
		return;
	int64_t n = i / F;
	int f = (int)(i % F);
	float g = dout[i];
	if (!ds_act_gated(act)) {
		dinp[i] = (act == 3 ? ds_gelu_exact_grad(inp[i]) : ds_gelu_grad(inp[i])) * g;
		return;
	}
	const float *a = inp + n * 2 * F;
	float *d = dinp + n * 2 * F;
	float x = a[f], b = a[F + f];
	if (act == 1) {
		d[f] = ds_gelu_grad(x) * b * g;
		d[F + f] = ds_gelu(x) * g;
	} else if (act == 4) {
		d[f] = ds_gelu_exact_grad(x) * b * g;
		d[F + f] = ds_gelu_exact(x) * g;
	} else {
		d[f] = ds_silu_grad(x) * b * g;
		d[F + f] = ds_silu(x) * g;
	}
}

extern "C" int ds_kernel_cuda_act_forward(float *out, const float *inp, int64_t N, int F, int act, void *stream)
{
	int64_t n = N * F;
	if (n <= 0)
		return 0;
	DS_CUDA_LAUNCH(act_forward_k, ds_cuda_blocks(n, 256), 256, 0, stream, out, inp, N, F, act);
	return ds_cuda_status();
}

extern "C" int ds_kernel_cuda_act_backward(float *dinp, const float *dout, const float *inp, int64_t N, int F,
					   int act, void *stream)
{
	int64_t n = N * F;
	if (n <= 0)
		return 0;
	DS_CUDA_LAUNCH(act_backward_k, ds_cuda_blocks(n, 256), 256, 0, stream, dinp, dout, inp, N, F, act);
	return ds_cuda_status();
}

/* ---- cross-entropy --------------------------------------------------------- */

static __global__ void xent_forward_k(float *lse, double *losses, const float *logits, const int32_t *targets,
				      int V, int Vp)
{
	__shared__ float sh[ROW_THREADS];
	const int64_t n = blockIdx.x;
	const float *l = logits + n * Vp;
	float mx = -INFINITY;
	for (int i = threadIdx.x; i < V; i += blockDim.x)
		mx = l[i] > mx ? l[i] : mx;
	mx = ds_block_max(mx, sh);
	float s = 0;
	for (int i = threadIdx.x; i < V; i += blockDim.x)
		s += ds_expf(l[i] - mx);
	s = ds_block_sum(s, sh);
	if (threadIdx.x == 0) {
		float z = (float)(mx + log((double)s));
		lse[n] = z;
		if (losses)
			losses[n] = (double)z - (double)l[targets[n]];
	}
}

extern "C" int ds_kernel_cuda_xent_forward(float *lse, double *losses, const float *logits,
					   const int32_t *targets, int64_t N, int V, int Vp, void *stream)
{
	if (N <= 0)
		return 0;
	DS_CUDA_LAUNCH(xent_forward_k, (unsigned)N, ROW_THREADS, 0, stream, lse, losses, logits, targets, V, Vp);
	return ds_cuda_status();
}

/* as the CPU: dscale * e^(l - z), then the target's dscale subtracted */
static __global__ void xent_backward_k(float *logits, const float *lse, const int32_t *targets, int V, int Vp,
				       float dscale)
{
	const int64_t n = blockIdx.x;
	float *l = logits + n * Vp;
	const float z = lse[n];
	const int t = targets[n];
	for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
		float v = i < V ? dscale * ds_expf(l[i] - z) : 0.0f;
		l[i] = i == t ? v - dscale : v;
	}
}

extern "C" int ds_kernel_cuda_xent_backward(float *logits, const float *lse, const int32_t *targets, int64_t N,
					    int V, int Vp, float dscale, void *stream)
{
	if (N <= 0)
		return 0;
	DS_CUDA_LAUNCH(xent_backward_k, (unsigned)N, ROW_THREADS, 0, stream, logits, lse, targets, V, Vp, dscale);
	return ds_cuda_status();
}
