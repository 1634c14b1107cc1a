/* attn_cuda.cu - fused causal attention (attn_cuda.h).
 *
 * Blocks own a tile of BR query rows (forward, dq) or of BC = BR key rows
 * (dk, dv) of one (sample, head) and walk the tiles of the other side that
 * the causal mask leaves, with q, k, v, dy staged in shared memory as
 * float, zero-padded to HSP columns (32, 64 or 128 >= hs).  FMA kernels:
 * 4 threads per row, each computing BR/4 scores and owning HSP/4 output
 * columns; quad shuffles combine a row's max and sum.  Tensor-core kernels
 * (TC, 16-bit types): one warp per 16 rows; the tile's two products run as
 * 16x16x16 wmma operations out of shared memory (a 16-bit copy of the
 * tiles), the softmax in between on fp32 scores in shared memory.  The
 * dropout keep factor of score (t, t2) is Philox element h*T*T + t*T + t2
 * of the sample's stream, as on the CPU.
 */
#include "cuda/cuda_port.h"

#include <math.h>
#include <string.h>

#include <type_traits>

#include "cuda/attn_cuda.h"
#include "cuda/flat_cuda.h"
#include "cuda/gemm_cuda.h"
#include "cuda/gpt_cuda.h"

/* rows [t0, t0 + rows) of a (T, W) matrix's column block at base (hs wide)
 * into sh[rows][ld] as float, zero outside T and past hs */
template <class E, int HSP>
static __device__ void load_tile(float *sh, int ld, const typename E::elem *base, int W, int t0, int rows, int T,
				 int hs)
{
	for (int i = threadIdx.x; i < rows * HSP; i += blockDim.x) {
		const int r = i / HSP, d = i % HSP, t = t0 + r;
		sh[r * ld + d] = t < T && d < hs ? E::load(base + (int64_t)t * W + d) : 0.0f;
	}
}

static __device__ __forceinline__ float dot_rows(const float *a, const float *b, int hs)
{
	float s = 0.0f;
	for (int d = 0; d < hs; d++)
		s = fmaf(a[d], b[d], s);
	return s;
}

/* ---- FMA forward ------------------------------------------------------------ */

template <class E, int HSP, int BR> struct fma_cfg {
	enum { BC = BR, LD = HSP + 1, PL = BC + 1, NJ = BC / 4, ND = HSP / 4, THREADS = 4 * BR };
	static size_t fwd_smem() { return sizeof(float) * ((size_t)(BR + 2 * BC) * LD + (size_t)BR * PL); }
	static size_t dkv_smem() { return sizeof(float) * ((size_t)(2 * BC + 2 * BR) * LD + 2 * (size_t)BC * PL + 2 * BR); }
	static size_t dq_smem() { return sizeof(float) * ((size_t)(2 * BR + 2 * BC) * LD + (size_t)BR * PL); }
};

/* grid (query tiles, NH * samples of this chunk) */
template <class E, int HSP, int BR>
static __global__ void __launch_bounds__(4 * BR)
attn_fwd_fma(typename E::elem *y, float *lse, const typename E::elem *qkv, int T, int C, int NH, float scale,
	     float p, float sc, struct ds_cuda_streams gs)
{
	typedef fma_cfg<E, HSP, BR> K;
	DS_CUDA_DYN_SHARED(float, sm);
	float *Qs = sm, *Ks = Qs + BR * K::LD, *Vs = Ks + K::BC * K::LD, *Ps = Vs + K::BC * K::LD;
	const int hs = C / NH, W = 3 * C, bl = blockIdx.y / NH, h = blockIdx.y % NH;
	const int i0 = blockIdx.x * BR, r = threadIdx.x >> 2, qd = threadIdx.x & 3, t = i0 + r;
	const typename E::elem *base = qkv + (int64_t)bl * T * W + h * hs;
	load_tile<E, HSP>(Qs, K::LD, base, W, i0, BR, T, hs);
	float m = -INFINITY, l = 0.0f, acc[K::ND];
	for (int d = 0; d < K::ND; d++)
		acc[d] = 0.0f;
	const int last = (i0 + BR - 1) / K::BC, ntile = (T + K::BC - 1) / K::BC;
	const int nkt = last + 1 < ntile ? last + 1 : ntile;
	for (int kt = 0; kt < nkt; kt++) {
		__syncthreads();   /* the previous tile's readers are done */
		load_tile<E, HSP>(Ks, K::LD, base + C, W, kt * K::BC, K::BC, T, hs);
		load_tile<E, HSP>(Vs, K::LD, base + 2 * C, W, kt * K::BC, K::BC, T, hs);
		__syncthreads();
		float s[K::NJ], mt = -INFINITY;
		for (int jj = 0; jj < K::NJ; jj++) {
			const int j = qd + 4 * jj, t2 = kt * K::BC + j;
			s[jj] = -INFINITY;
			if (t < T && t2 <= t)
				s[jj] = dot_rows(Qs + r * K::LD, Ks + j * K::LD, hs) * scale;
			mt = s[jj] > mt ? s[jj] : mt;
		}
		for (int o = 1; o < 4; o <<= 1) {
			float x = __shfl_xor_sync(0xffffffffu, mt, o);
			mt = x > mt ? x : mt;
		}
		const float mn = m > mt ? m : mt;
		const float alpha = m == -INFINITY ? 0.0f : ds_expf(m - mn);
		float ls = 0.0f;
		for (int jj = 0; jj < K::NJ; jj++) {
			const int j = qd + 4 * jj, t2 = kt * K::BC + j;
			float pj = s[jj] == -INFINITY ? 0.0f : ds_expf(s[jj] - mn);
			ls += pj;
			if (p > 0.0f && pj != 0.0f)
				pj *= ds_cuda_keep(&gs.g[bl], ((uint64_t)h * T + t) * T + t2, p, sc);
			Ps[r * K::PL + j] = pj;
		}
		ls += __shfl_xor_sync(0xffffffffu, ls, 1);
		ls += __shfl_xor_sync(0xffffffffu, ls, 2);
		l = l * alpha + ls;
		m = mn;
		__syncthreads();   /* the row's probabilities are all in Ps */
		for (int dd = 0; dd < K::ND; dd++) {
			const int d = qd * K::ND + dd;
			float a = acc[dd] * alpha;
			for (int j = 0; j < K::BC; j++)
				a = fmaf(Ps[r * K::PL + j], Vs[j * K::LD + d], a);
			acc[dd] = a;
		}
	}
	if (t < T) {
		typename E::elem *yo = y + ((int64_t)bl * T + t) * C + h * hs;
		for (int dd = 0; dd < K::ND; dd++) {
			const int d = qd * K::ND + dd;
			if (d < hs)
				E::store(yo + d, acc[dd] / l);
		}
		if (qd == 0)
			lse[((int64_t)bl * NH + h) * T + t] = m + logf(l);
	}
}

/* ---- backward: D = rowsum(dy * y), then dk/dv and dq ------------------------------ */

template <class E>
static __global__ void attn_bwd_pre(float *D, const typename E::elem *dy, const typename E::elem *y, int T, int C,
				    int NH, int64_t rows)
{
	const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;   /* (b, h, t) */
	if (i >= rows)
		return;
	const int hs = C / NH, t = (int)(i % T), h = (int)(i / T % NH);
	const int64_t b = i / T / NH, off = (b * T + t) * C + (int64_t)h * hs;
	float s = 0.0f;
	for (int d = 0; d < hs; d++)
		s = fmaf(E::load(dy + off + d), E::load(y + off + d), s);
	D[i] = s;
}

/* score (t, t2)'s P, keep-scaled P and dS = P (dP' keep - D); zeros off the mask */
static __device__ __forceinline__ void bwd_elem(float s, float L, float Dt, float dpd, float keep, float *pd,
						float *ds)
{
	const float P = ds_expf(s - L);
	*pd = P * keep;
	*ds = P * (dpd * keep - Dt);
}

/* grid (key tiles, NH * samples): dk, dv of BC keys over the query tiles */
template <class E, int HSP, int BR>
static __global__ void __launch_bounds__(4 * BR)
attn_bwd_dkv_fma(typename E::elem *dqkv, const typename E::elem *dy, const typename E::elem *qkv,
		 const float *lse, const float *D, int T, int C, int NH, float scale, float p, float sc,
		 struct ds_cuda_streams gs)
{
	typedef fma_cfg<E, HSP, BR> K;
	DS_CUDA_DYN_SHARED(float, sm);
	float *Ks = sm, *Vs = Ks + K::BC * K::LD, *Qs = Vs + K::BC * K::LD, *dOs = Qs + BR * K::LD;
	float *PdT = dOs + BR * K::LD, *dST = PdT + K::BC * K::PL, *Ls = dST + K::BC * K::PL, *Dsh = Ls + BR;
	const int hs = C / NH, W = 3 * C, bl = blockIdx.y / NH, h = blockIdx.y % NH;
	const int j0 = blockIdx.x * K::BC, jr = threadIdx.x >> 2, qd = threadIdx.x & 3, t2 = j0 + jr;
	const typename E::elem *base = qkv + (int64_t)bl * T * W + h * hs;
	const typename E::elem *dyb = dy + (int64_t)bl * T * C + h * hs;
	const float *Lb = lse + ((int64_t)bl * NH + h) * T, *Db = D + ((int64_t)bl * NH + h) * T;
	load_tile<E, HSP>(Ks, K::LD, base + C, W, j0, K::BC, T, hs);
	load_tile<E, HSP>(Vs, K::LD, base + 2 * C, W, j0, K::BC, T, hs);
	float ak[K::ND], av[K::ND];
	for (int d = 0; d < K::ND; d++)
		ak[d] = av[d] = 0.0f;
	const int nit = (T + BR - 1) / BR;
	for (int it = j0 / BR; it < nit; it++) {
		__syncthreads();
		load_tile<E, HSP>(Qs, K::LD, base, W, it * BR, BR, T, hs);
		load_tile<E, HSP>(dOs, K::LD, dyb, C, it * BR, BR, T, hs);
		for (int i = threadIdx.x; i < BR; i += blockDim.x) {
			const int t = it * BR + i;
			Ls[i] = t < T ? Lb[t] : 0.0f;
			Dsh[i] = t < T ? Db[t] : 0.0f;
		}
		__syncthreads();
		for (int kk = 0; kk < BR / 4; kk++) {
			const int ii = qd + 4 * kk, t = it * BR + ii;
			float pd = 0.0f, ds = 0.0f;
			if (t < T && t2 <= t) {
				const float s = dot_rows(Qs + ii * K::LD, Ks + jr * K::LD, hs) * scale;
				const float dpd = dot_rows(dOs + ii * K::LD, Vs + jr * K::LD, hs);
				const float keep = p > 0.0f ? ds_cuda_keep(&gs.g[bl], ((uint64_t)h * T + t) * T + t2, p, sc) : 1.0f;
				bwd_elem(s, Ls[ii], Dsh[ii], dpd, keep, &pd, &ds);
			}
			PdT[jr * K::PL + ii] = pd;
			dST[jr * K::PL + ii] = ds;
		}
		__syncthreads();
		for (int dd = 0; dd < K::ND; dd++) {
			const int d = qd * K::ND + dd;
			float a = av[dd], b = ak[dd];
			for (int ii = 0; ii < BR; ii++) {
				a = fmaf(PdT[jr * K::PL + ii], dOs[ii * K::LD + d], a);
				b = fmaf(dST[jr * K::PL + ii], Qs[ii * K::LD + d], b);
			}
			av[dd] = a;
			ak[dd] = b;
		}
	}
	if (t2 < T) {
		typename E::elem *o = dqkv + ((int64_t)bl * T + t2) * W + h * hs;
		for (int dd = 0; dd < K::ND; dd++) {
			const int d = qd * K::ND + dd;
			if (d < hs) {
				E::store(o + C + d, ak[dd] * scale);
				E::store(o + 2 * C + d, av[dd]);
			}
		}
	}
}

/* grid (query tiles, NH * samples): dq of BR queries over the key tiles */
template <class E, int HSP, int BR>
static __global__ void __launch_bounds__(4 * BR)
attn_bwd_dq_fma(typename E::elem *dqkv, const typename E::elem *dy, const typename E::elem *qkv,
		const float *lse, const float *D, int T, int C, int NH, float scale, float p, float sc,
		struct ds_cuda_streams gs)
{
	typedef fma_cfg<E, HSP, BR> K;
	DS_CUDA_DYN_SHARED(float, sm);
	float *Qs = sm, *dOs = Qs + BR * K::LD, *Ks = dOs + BR * K::LD, *Vs = Ks + K::BC * K::LD;
	float *dSs = Vs + K::BC * K::LD;
	const int hs = C / NH, W = 3 * C, bl = blockIdx.y / NH, h = blockIdx.y % NH;
	const int i0 = blockIdx.x * BR, r = threadIdx.x >> 2, qd = threadIdx.x & 3, t = i0 + r;
	const typename E::elem *base = qkv + (int64_t)bl * T * W + h * hs;
	load_tile<E, HSP>(Qs, K::LD, base, W, i0, BR, T, hs);
	load_tile<E, HSP>(dOs, K::LD, dy + (int64_t)bl * T * C + h * hs, C, i0, BR, T, hs);
	const int64_t row = ((int64_t)bl * NH + h) * T + t;
	const float L = t < T ? lse[row] : 0.0f, Dt = t < T ? D[row] : 0.0f;
	float aq[K::ND];
	for (int d = 0; d < K::ND; d++)
		aq[d] = 0.0f;
	const int last = (i0 + BR - 1) / K::BC, ntile = (T + K::BC - 1) / K::BC;
	const int nkt = last + 1 < ntile ? last + 1 : ntile;
	for (int kt = 0; kt < nkt; kt++) {
		__syncthreads();
		load_tile<E, HSP>(Ks, K::LD, base + C, W, kt * K::BC, K::BC, T, hs);
		load_tile<E, HSP>(Vs, K::LD, base + 2 * C, W, kt * K::BC, K::BC, T, hs);
		__syncthreads();
		for (int jj = 0; jj < K::NJ; jj++) {
			const int j = qd + 4 * jj, t2 = kt * K::BC + j;
			float pd = 0.0f, ds = 0.0f;
			if (t < T && t2 <= t) {
				const float s = dot_rows(Qs + r * K::LD, Ks + j * K::LD, hs) * scale;
				const float dpd = dot_rows(dOs + r * K::LD, Vs + j * K::LD, hs);
				const float keep = p > 0.0f ? ds_cuda_keep(&gs.g[bl], ((uint64_t)h * T + t) * T + t2, p, sc) : 1.0f;
				bwd_elem(s, L, Dt, dpd, keep, &pd, &ds);
			}
			dSs[r * K::PL + j] = ds;
		}
		__syncthreads();
		for (int dd = 0; dd < K::ND; dd++) {
			const int d = qd * K::ND + dd;
			float a = aq[dd];
			for (int j = 0; j < K::BC; j++)
				a = fmaf(dSs[r * K::PL + j], Ks[j * K::LD + d], a);
			aq[dd] = a;
		}
	}
	if (t < T) {
		typename E::elem *o = dqkv + ((int64_t)bl * T + t) * W + h * hs;
		for (int dd = 0; dd < K::ND; dd++) {
			const int d = qd * K::ND + dd;
			if (d < hs)
				E::store(o + d, aq[dd] * scale);
		}
	}
}

/* ---- tensor-core kernels (16-bit types) ------------------------------------------
 * BR/16 warps, warp w owning rows [16w, 16w+16) of every product; 2 threads
 * per row for the element-wise stages (row r: threads 2r, 2r+1, both in
 * warp r/16, each taking half of the columns).  Shared memory: the tiles
 * in 16 bits (leading dimension HSP+8), scores and gradients in fp32 (BC+4),
 * probabilities in 16 bits (BC+8), the fp32 accumulators (HSP+4): padded
 * so that rows fall on different banks, every array 128-byte aligned, as
 * wmma's 32-byte pointer alignment needs. */

namespace wm = nvcuda::wmma;

/* carves a block's dynamic shared memory; the same calls on a NULL base
 * give the size */
struct carve {
	char *p;
	size_t n;
	template <class T> __host__ __device__ T *take(size_t count)
	{
		T *r = (T *)(p ? p + n : NULL);
		n += (count * sizeof(T) + 127) / 128 * 128;
		return r;
	}
};

template <int HSP, int BR> struct tc_cfg {
	enum { BC = BR, NW = BR / 16, THREADS = 32 * NW, LH = HSP + 8, LS = BC + 4, LP = BC + 8, LO = HSP + 4 };
};

/* rows [t0, t0 + rows) of a 16-bit (T, W) matrix's column block at base
 * into sh[rows][ld] as the same bits, zero outside T and past hs */
template <int HSP>
static __device__ void load_tile16(uint16_t *sh, int ld, const uint16_t *base, int W, int t0, int rows, int T, int hs)
{
	for (int i = threadIdx.x; i < rows * HSP; i += blockDim.x) {
		const int r = i / HSP, d = i % HSP, t = t0 + r;
		sh[r * ld + d] = t < T && d < hs ? base[(int64_t)t * W + d] : (uint16_t)0;
	}
}

/* out[16 rows][16*nc cols] (fp32, ldo) = A[16][16*nk] (lda) times B, where
 * B's block (k, n) is Bt row n, col k (bt: B given transposed, i.e.
 * col_major) or row k, col n; one warp */
template <class E, int NK, int NC, bool BT, bool ACC>
static __device__ void warp_mm(float *out, int ldo, const uint16_t *A, int lda, const uint16_t *B, int ldb)
{
	typedef typename E::wmma_t W_;
	typedef typename std::conditional<BT, wm::col_major, wm::row_major>::type LB;
	for (int n = 0; n < NC; n++) {
		wm::fragment<wm::accumulator, 16, 16, 16, float> c;
		if (ACC)
			wm::load_matrix_sync(c, out + 16 * n, ldo, wm::mem_row_major);
		else
			wm::fill_fragment(c, 0.0f);
		for (int k = 0; k < NK; k++) {
			wm::fragment<wm::matrix_a, 16, 16, 16, W_, wm::row_major> a;
			wm::fragment<wm::matrix_b, 16, 16, 16, W_, LB> b;
			wm::load_matrix_sync(a, (const W_ *)(A + 16 * k), lda);
			wm::load_matrix_sync(b, (const W_ *)(BT ? B + (size_t)16 * n * ldb + 16 * k
							     : B + (size_t)16 * k * ldb + 16 * n), ldb);
			wm::mma_sync(c, a, b, c);
		}
		wm::store_matrix_sync(out + 16 * n, c, ldo, wm::mem_row_major);
	}
}

template <class E, int HSP, int BR>
static __global__ void __launch_bounds__(2 * BR)
attn_fwd_tc(uint16_t *y, float *lse, const uint16_t *qkv, int T, int C, int NH, float scale, float p, float sc,
	    struct ds_cuda_streams gs)
{
	typedef tc_cfg<HSP, BR> K;
	DS_CUDA_DYN_SHARED(char, sm);
	carve cv = { sm, 0 };
	uint16_t *Qh = cv.take<uint16_t>(BR * K::LH), *Kh = cv.take<uint16_t>(K::BC * K::LH);
	uint16_t *Vh = cv.take<uint16_t>(K::BC * K::LH), *Ph = cv.take<uint16_t>(BR * K::LP);
	float *S = cv.take<float>(BR * K::LS), *O = cv.take<float>(BR * K::LO);
	const int hs = C / NH, W = 3 * C, bl = blockIdx.y / NH, h = blockIdx.y % NH, w = threadIdx.x / 32;
	const int i0 = blockIdx.x * BR, r = threadIdx.x >> 1, half = threadIdx.x & 1, t = i0 + r;
	const uint16_t *base = qkv + (int64_t)bl * T * W + h * hs;
	load_tile16<HSP>(Qh, K::LH, base, W, i0, BR, T, hs);
	for (int i = threadIdx.x; i < BR * K::LO; i += blockDim.x)
		O[i] = 0.0f;
	float m = -INFINITY, l = 0.0f;
	const int last = (i0 + BR - 1) / K::BC, ntile = (T + K::BC - 1) / K::BC;
	const int nkt = last + 1 < ntile ? last + 1 : ntile;
	for (int kt = 0; kt < nkt; kt++) {
		__syncthreads();
		load_tile16<HSP>(Kh, K::LH, base + C, W, kt * K::BC, K::BC, T, hs);
		load_tile16<HSP>(Vh, K::LH, base + 2 * C, W, kt * K::BC, K::BC, T, hs);
		__syncthreads();
		/* S = Q K^T (K read as col_major: its rows are B's columns) */
		warp_mm<E, HSP / 16, K::BC / 16, true, false>(S + 16 * w * K::LS, K::LS, Qh + 16 * w * K::LH, K::LH, Kh,
							      K::LH);
		__syncthreads();
		const int c0 = half * (K::BC / 2);
		float mt = -INFINITY;
		for (int c = c0; c < c0 + K::BC / 2; c++) {
			const int t2 = kt * K::BC + c;
			float s = t < T && t2 <= t ? S[r * K::LS + c] * scale : -INFINITY;
			S[r * K::LS + c] = s;
			mt = s > mt ? s : mt;
		}
		const float mo = __shfl_xor_sync(0xffffffffu, mt, 1);
		mt = mo > mt ? mo : mt;
		const float mn = m > mt ? m : mt;
		const float alpha = m == -INFINITY ? 0.0f : ds_expf(m - mn);
		float ls = 0.0f;
		struct ds_cuda_keeper kp;
		kp.init(&gs.g[bl], p, sc);
		for (int c = c0; c < c0 + K::BC / 2; c++) {
			const int t2 = kt * K::BC + c;
			const float s = S[r * K::LS + c];
			float pj = s == -INFINITY ? 0.0f : ds_expf(s - mn);
			ls += pj;
			if (p > 0.0f && pj != 0.0f)
				pj *= kp.at(((uint64_t)h * T + t) * T + t2);
			E::store(Ph + r * K::LP + c, pj);
		}
		ls += __shfl_xor_sync(0xffffffffu, ls, 1);
		l = l * alpha + ls;
		m = mn;
		for (int d = half * (HSP / 2); d < (half + 1) * (HSP / 2); d++)
			O[r * K::LO + d] *= alpha;
		__syncthreads();
		/* O += P V */
		warp_mm<E, K::BC / 16, HSP / 16, false, true>(O + 16 * w * K::LO, K::LO, Ph + 16 * w * K::LP, K::LP, Vh,
							      K::LH);
	}
	__syncthreads();
	if (t < T) {
		uint16_t *yo = y + ((int64_t)bl * T + t) * C + h * hs;
		for (int d = half * (HSP / 2); d < (half + 1) * (HSP / 2) && d < hs; d++)
			E::store(yo + d, O[r * K::LO + d] / l);
		if (!half)
			lse[((int64_t)bl * NH + h) * T + t] = m + logf(l);
	}
}

/* grid (key tiles, NH * samples): dk, dv of BC keys */
template <class E, int HSP, int BR>
static __global__ void __launch_bounds__(2 * BR)
attn_bwd_dkv_tc(uint16_t *dqkv, const uint16_t *dy, const uint16_t *qkv, const float *lse, const float *D,
		int T, int C, int NH, float scale, float p, float sc, struct ds_cuda_streams gs)
{
	typedef tc_cfg<HSP, BR> K;
	enum { LQ = BR + 4, LQP = BR + 8 };   /* rows are keys, columns queries here */
	DS_CUDA_DYN_SHARED(char, sm);
	carve cv = { sm, 0 };
	uint16_t *Kh = cv.take<uint16_t>(K::BC * K::LH), *Vh = cv.take<uint16_t>(K::BC * K::LH);
	uint16_t *Qh = cv.take<uint16_t>(BR * K::LH), *dOh = cv.take<uint16_t>(BR * K::LH);
	uint16_t *PdT = cv.take<uint16_t>(K::BC * LQP), *dST = cv.take<uint16_t>(K::BC * LQP);
	float *ST = cv.take<float>(K::BC * LQ), *dPT = cv.take<float>(K::BC * LQ);
	float *dKs = cv.take<float>(K::BC * K::LO), *dVs = cv.take<float>(K::BC * K::LO);
	float *Ls = cv.take<float>(BR), *Dsh = cv.take<float>(BR);
	const int hs = C / NH, W = 3 * C, bl = blockIdx.y / NH, h = blockIdx.y % NH, w = threadIdx.x / 32;
	const int j0 = blockIdx.x * K::BC, jr = threadIdx.x >> 1, half = threadIdx.x & 1, t2 = j0 + jr;
	const uint16_t *base = qkv + (int64_t)bl * T * W + h * hs, *dyb = dy + (int64_t)bl * T * C + h * hs;
	const float *Lb = lse + ((int64_t)bl * NH + h) * T, *Db = D + ((int64_t)bl * NH + h) * T;
	load_tile16<HSP>(Kh, K::LH, base + C, W, j0, K::BC, T, hs);
	load_tile16<HSP>(Vh, K::LH, base + 2 * C, W, j0, K::BC, T, hs);
	for (int i = threadIdx.x; i < K::BC * K::LO; i += blockDim.x)
		dKs[i] = dVs[i] = 0.0f;
	const int nit = (T + BR - 1) / BR;
	for (int it = j0 / BR; it < nit; it++) {
		__syncthreads();
		load_tile16<HSP>(Qh, K::LH, base, W, it * BR, BR, T, hs);
		load_tile16<HSP>(dOh, K::LH, dyb, C, it * BR, BR, T, hs);
		for (int i = threadIdx.x; i < BR; i += blockDim.x) {
			const int t = it * BR + i;
			Ls[i] = t < T ? Lb[t] : 0.0f;
			Dsh[i] = t < T ? Db[t] : 0.0f;
		}
		__syncthreads();
		/* S^T = K Q^T, dP'^T = V dO^T (keys x queries) */
		warp_mm<E, HSP / 16, BR / 16, true, false>(ST + 16 * w * LQ, LQ, Kh + 16 * w * K::LH, K::LH, Qh, K::LH);
		warp_mm<E, HSP / 16, BR / 16, true, false>(dPT + 16 * w * LQ, LQ, Vh + 16 * w * K::LH, K::LH, dOh, K::LH);
		__syncthreads();
		for (int ii = half * (BR / 2); ii < (half + 1) * (BR / 2); ii++) {
			const int t = it * BR + ii;
			float pd = 0.0f, ds = 0.0f;
			if (t < T && t2 <= t) {
				const float keep = p > 0.0f ? ds_cuda_keep(&gs.g[bl], ((uint64_t)h * T + t) * T + t2, p, sc) : 1.0f;
				bwd_elem(ST[jr * LQ + ii] * scale, Ls[ii], Dsh[ii], dPT[jr * LQ + ii], keep, &pd, &ds);
			}
			E::store(PdT + jr * LQP + ii, pd);
			E::store(dST + jr * LQP + ii, ds);
		}
		__syncthreads();
		/* dV += P'^T dO, dK += dS^T Q */
		warp_mm<E, BR / 16, HSP / 16, false, true>(dVs + 16 * w * K::LO, K::LO, PdT + 16 * w * LQP, LQP, dOh, K::LH);
		warp_mm<E, BR / 16, HSP / 16, false, true>(dKs + 16 * w * K::LO, K::LO, dST + 16 * w * LQP, LQP, Qh, K::LH);
	}
	__syncthreads();
	if (t2 < T) {
		uint16_t *o = dqkv + ((int64_t)bl * T + t2) * W + h * hs;
		for (int d = half * (HSP / 2); d < (half + 1) * (HSP / 2) && d < hs; d++) {
			E::store(o + C + d, dKs[jr * K::LO + d] * scale);
			E::store(o + 2 * C + d, dVs[jr * K::LO + d]);
		}
	}
}

/* grid (query tiles, NH * samples): dq of BR queries */
template <class E, int HSP, int BR>
static __global__ void __launch_bounds__(2 * BR)
attn_bwd_dq_tc(uint16_t *dqkv, const uint16_t *dy, const uint16_t *qkv, const float *lse, const float *D,
	       int T, int C, int NH, float scale, float p, float sc, struct ds_cuda_streams gs)
{
	typedef tc_cfg<HSP, BR> K;
	DS_CUDA_DYN_SHARED(char, sm);
	carve cv = { sm, 0 };
	uint16_t *Qh = cv.take<uint16_t>(BR * K::LH), *dOh = cv.take<uint16_t>(BR * K::LH);
	uint16_t *Kh = cv.take<uint16_t>(K::BC * K::LH), *Vh = cv.take<uint16_t>(K::BC * K::LH);
	uint16_t *dSh = cv.take<uint16_t>(BR * K::LP);
	float *S = cv.take<float>(BR * K::LS), *dP = cv.take<float>(BR * K::LS), *dQs = cv.take<float>(BR * K::LO);
	const int hs = C / NH, W = 3 * C, bl = blockIdx.y / NH, h = blockIdx.y % NH, w = threadIdx.x / 32;
	const int i0 = blockIdx.x * BR, r = threadIdx.x >> 1, half = threadIdx.x & 1, t = i0 + r;
	const uint16_t *base = qkv + (int64_t)bl * T * W + h * hs;
	load_tile16<HSP>(Qh, K::LH, base, W, i0, BR, T, hs);
	load_tile16<HSP>(dOh, K::LH, dy + (int64_t)bl * T * C + h * hs, C, i0, BR, T, hs);
	for (int i = threadIdx.x; i < BR * K::LO; i += blockDim.x)
		dQs[i] = 0.0f;
	const int64_t row = ((int64_t)bl * NH + h) * T + t;
	const float L = t < T ? lse[row] : 0.0f, Dt = t < T ? D[row] : 0.0f;
	const int last = (i0 + BR - 1) / K::BC, ntile = (T + K::BC - 1) / K::BC;
	const int nkt = last + 1 < ntile ? last + 1 : ntile;
	for (int kt = 0; kt < nkt; kt++) {
		__syncthreads();
		load_tile16<HSP>(Kh, K::LH, base + C, W, kt * K::BC, K::BC, T, hs);
		load_tile16<HSP>(Vh, K::LH, base + 2 * C, W, kt * K::BC, K::BC, T, hs);
		__syncthreads();
		warp_mm<E, HSP / 16, K::BC / 16, true, false>(S + 16 * w * K::LS, K::LS, Qh + 16 * w * K::LH, K::LH, Kh,
							      K::LH);
		warp_mm<E, HSP / 16, K::BC / 16, true, false>(dP + 16 * w * K::LS, K::LS, dOh + 16 * w * K::LH, K::LH, Vh,
							      K::LH);
		__syncthreads();
		struct ds_cuda_keeper kp;
		kp.init(&gs.g[bl], p, sc);
		for (int c = half * (K::BC / 2); c < (half + 1) * (K::BC / 2); c++) {
			const int t2 = kt * K::BC + c;
			float pd = 0.0f, ds = 0.0f;
			if (t < T && t2 <= t) {
				const float keep = p > 0.0f ? kp.at(((uint64_t)h * T + t) * T + t2) : 1.0f;
				bwd_elem(S[r * K::LS + c] * scale, L, Dt, dP[r * K::LS + c], keep, &pd, &ds);
			}
			E::store(dSh + r * K::LP + c, ds);
		}
		__syncthreads();
		/* dQ += dS K */
		warp_mm<E, K::BC / 16, HSP / 16, false, true>(dQs + 16 * w * K::LO, K::LO, dSh + 16 * w * K::LP, K::LP, Kh,
							      K::LH);
	}
	__syncthreads();
	if (t < T) {
		uint16_t *o = dqkv + ((int64_t)bl * T + t) * W + h * hs;
		for (int d = half * (HSP / 2); d < (half + 1) * (HSP / 2) && d < hs; d++)
			E::store(o + d, dQs[r * K::LO + d] * scale);
	}
}

template <class E, int HSP, int BR> static size_t tc_smem(int which)
{
	typedef tc_cfg<HSP, BR> K;
	carve cv = { NULL, 0 };
	if (which == 0) {   /* forward */
		cv.take<uint16_t>(BR * K::LH), cv.take<uint16_t>(K::BC * K::LH), cv.take<uint16_t>(K::BC * K::LH);
		cv.take<uint16_t>(BR * K::LP), cv.take<float>(BR * K::LS), cv.take<float>(BR * K::LO);
	} else if (which == 1) {   /* dk, dv */
		cv.take<uint16_t>(K::BC * K::LH), cv.take<uint16_t>(K::BC * K::LH), cv.take<uint16_t>(BR * K::LH);
		cv.take<uint16_t>(BR * K::LH), cv.take<uint16_t>(K::BC * (BR + 8)), cv.take<uint16_t>(K::BC * (BR + 8));
		cv.take<float>(K::BC * (BR + 4)), cv.take<float>(K::BC * (BR + 4)), cv.take<float>(K::BC * K::LO);
		cv.take<float>(K::BC * K::LO), cv.take<float>(BR), cv.take<float>(BR);
	} else {   /* dq */
		cv.take<uint16_t>(BR * K::LH), cv.take<uint16_t>(BR * K::LH), cv.take<uint16_t>(K::BC * K::LH);
		cv.take<uint16_t>(K::BC * K::LH), cv.take<uint16_t>(BR * K::LP), cv.take<float>(BR * K::LS);
		cv.take<float>(BR * K::LS), cv.take<float>(BR * K::LO);
	}
	return cv.n;
}

/* ---- launch ------------------------------------------------------------------ */

struct attn_args {
	void *y;
	float *lse;
	const void *qkv, *dy, *yin;
	void *dqkv;
	const float *lse_in;
	int B, T, C, NH;
	float p, sc, scale;
	const struct ds_rng *gs;
	void *stream;
};

template <class E, int HSP, int BR> static int fwd_fma(const struct attn_args *a)
{
	typedef fma_cfg<E, HSP, BR> K;
	typedef typename E::elem T_;
	auto k = attn_fwd_fma<E, HSP, BR>;
	const size_t sh = K::fwd_smem();
	DS_CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sh));
	const int64_t W = 3 * (int64_t)a->C;
	for (int b0 = 0; b0 < a->B; b0 += DS_CUDA_STREAMS) {
		const int m = a->B - b0 < DS_CUDA_STREAMS ? a->B - b0 : DS_CUDA_STREAMS;
		struct ds_cuda_streams s;
		memset(&s, 0, sizeof(s));
		if (a->p > 0.0f)
			ds_cuda_streams_fill(&s, a->gs, b0, m);
		DS_CUDA_LAUNCH(k, dim3(ds_cuda_blocks(a->T, BR), (unsigned)(a->NH * m)), K::THREADS, sh, a->stream,
			       (T_ *)a->y + (int64_t)b0 * a->T * a->C, a->lse + (int64_t)b0 * a->NH * a->T,
			       (const T_ *)a->qkv + (int64_t)b0 * a->T * W, a->T, a->C, a->NH, a->scale, a->p, a->sc, s);
	}
	return ds_cuda_status();
}

template <class E, int HSP, int BR> static int bwd_fma(const struct attn_args *a, const float *D)
{
	typedef fma_cfg<E, HSP, BR> K;
	typedef typename E::elem T_;
	auto k1 = attn_bwd_dkv_fma<E, HSP, BR>;
	auto k2 = attn_bwd_dq_fma<E, HSP, BR>;
	const size_t s1 = K::dkv_smem(), s2 = K::dq_smem();
	DS_CUDA_TRY(cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1));
	DS_CUDA_TRY(cudaFuncSetAttribute(k2, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2));
	const int64_t W = 3 * (int64_t)a->C;
	for (int b0 = 0; b0 < a->B; b0 += DS_CUDA_STREAMS) {
		const int m = a->B - b0 < DS_CUDA_STREAMS ? a->B - b0 : DS_CUDA_STREAMS;
		struct ds_cuda_streams s;
		memset(&s, 0, sizeof(s));
		if (a->p > 0.0f)
			ds_cuda_streams_fill(&s, a->gs, b0, m);
		T_ *dq = (T_ *)a->dqkv + (int64_t)b0 * a->T * W;
		const T_ *dy = (const T_ *)a->dy + (int64_t)b0 * a->T * a->C, *q = (const T_ *)a->qkv + (int64_t)b0 * a->T * W;
		const float *L = a->lse_in + (int64_t)b0 * a->NH * a->T, *Dp = D + (int64_t)b0 * a->NH * a->T;
		const dim3 g(ds_cuda_blocks(a->T, BR), (unsigned)(a->NH * m));
		DS_CUDA_LAUNCH(k1, g, K::THREADS, s1, a->stream, dq, dy, q, L, Dp, a->T, a->C, a->NH, a->scale, a->p, a->sc,
			       s);
		DS_CUDA_LAUNCH(k2, g, K::THREADS, s2, a->stream, dq, dy, q, L, Dp, a->T, a->C, a->NH, a->scale, a->p, a->sc,
			       s);
	}
	return ds_cuda_status();
}

/* the FMA kernels' tile shape for a head size: HSP columns, BR rows */
template <class E> static int fwd_fma_hs(const struct attn_args *a, int hs)
{
	if (hs <= 32)
		return fwd_fma<E, 32, 64>(a);
	if (hs <= 64)
		return fwd_fma<E, 64, 64>(a);
	return fwd_fma<E, 128, 32>(a);
}

template <class E> static int bwd_fma_hs(const struct attn_args *a, int hs, const float *D)
{
	if (hs <= 32)
		return bwd_fma<E, 32, 64>(a, D);
	if (hs <= 64)
		return bwd_fma<E, 64, 64>(a, D);
	return bwd_fma<E, 128, 32>(a, D);
}

template <class E, int HSP, int BR> static int fwd_tc(const struct attn_args *a)
{
	typedef tc_cfg<HSP, BR> K;
	auto k = attn_fwd_tc<E, HSP, BR>;
	const size_t sh = tc_smem<E, HSP, BR>(0);
	DS_CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sh));
	const int64_t W = 3 * (int64_t)a->C;
	for (int b0 = 0; b0 < a->B; b0 += DS_CUDA_STREAMS) {
		const int m = a->B - b0 < DS_CUDA_STREAMS ? a->B - b0 : DS_CUDA_STREAMS;
		struct ds_cuda_streams s;
		memset(&s, 0, sizeof(s));
		if (a->p > 0.0f)
			ds_cuda_streams_fill(&s, a->gs, b0, m);
		DS_CUDA_LAUNCH(k, dim3(ds_cuda_blocks(a->T, BR), (unsigned)(a->NH * m)), K::THREADS, sh, a->stream,
			       (uint16_t *)a->y + (int64_t)b0 * a->T * a->C, a->lse + (int64_t)b0 * a->NH * a->T,
			       (const uint16_t *)a->qkv + (int64_t)b0 * a->T * W, a->T, a->C, a->NH, a->scale, a->p, a->sc,
			       s);
	}
	return ds_cuda_status();
}

template <class E, int HSP, int BR> static int bwd_tc(const struct attn_args *a, const float *D)
{
	typedef tc_cfg<HSP, BR> K;
	auto k1 = attn_bwd_dkv_tc<E, HSP, BR>;
	auto k2 = attn_bwd_dq_tc<E, HSP, BR>;
	const size_t s1 = tc_smem<E, HSP, BR>(1), s2 = tc_smem<E, HSP, BR>(2);
	DS_CUDA_TRY(cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s1));
	DS_CUDA_TRY(cudaFuncSetAttribute(k2, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)s2));
	const int64_t W = 3 * (int64_t)a->C;
	for (int b0 = 0; b0 < a->B; b0 += DS_CUDA_STREAMS) {
		const int m = a->B - b0 < DS_CUDA_STREAMS ? a->B - b0 : DS_CUDA_STREAMS;
		struct ds_cuda_streams s;
		memset(&s, 0, sizeof(s));
		if (a->p > 0.0f)
			ds_cuda_streams_fill(&s, a->gs, b0, m);
		uint16_t *dq = (uint16_t *)a->dqkv + (int64_t)b0 * a->T * W;
		const uint16_t *dy = (const uint16_t *)a->dy + (int64_t)b0 * a->T * a->C;
		const uint16_t *q = (const uint16_t *)a->qkv + (int64_t)b0 * a->T * W;
		const float *L = a->lse_in + (int64_t)b0 * a->NH * a->T, *Dp = D + (int64_t)b0 * a->NH * a->T;
		const dim3 g(ds_cuda_blocks(a->T, BR), (unsigned)(a->NH * m));
		DS_CUDA_LAUNCH(k1, g, K::THREADS, s1, a->stream, dq, dy, q, L, Dp, a->T, a->C, a->NH, a->scale, a->p, a->sc,
			       s);
		DS_CUDA_LAUNCH(k2, g, K::THREADS, s2, a->stream, dq, dy, q, L, Dp, a->T, a->C, a->NH, a->scale, a->p, a->sc,
			       s);
	}
	return ds_cuda_status();
}

template <class E> static int fwd_tc_hs(const struct attn_args *a, int hs)
{
	if (hs <= 32)
		return fwd_tc<E, 32, 64>(a);
	if (hs <= 64)
		return fwd_tc<E, 64, 64>(a);
	return fwd_tc<E, 128, 32>(a);
}

template <class E> static int bwd_tc_hs(const struct attn_args *a, int hs, const float *D)
{
	if (hs <= 32)
		return bwd_tc<E, 32, 64>(a, D);
	if (hs <= 64)
		return bwd_tc<E, 64, 64>(a, D);
	return bwd_tc<E, 128, 32>(a, D);
}

extern "C" enum ds_attn_impl ds_cuda_attention_pick(enum ds_half_kind dt, int hs)
{
	return ds_cuda_attention_supported(DS_ATTN_TC, dt, hs) ? DS_ATTN_TC : DS_ATTN_FMA;
}

extern "C" int ds_cuda_attention_supported(enum ds_attn_impl impl, enum ds_half_kind dt, int hs)
{
	if (hs < 1 || hs > 128)
		return 0;
	if (impl == DS_ATTN_TC)
		return dt == DS_HALF_FP16 || dt == DS_HALF_BF16;
	return impl == DS_ATTN_FMA || impl == DS_ATTN_AUTO;
}

static int check(int B, int T, int C, int NH, enum ds_half_kind dt, enum ds_attn_impl *impl)
{
	if (B < 0 || T < 0 || NH <= 0 || C % NH)
		return 0;
	const int hs = C / NH;
	if (*impl == DS_ATTN_AUTO)
		*impl = ds_cuda_attention_pick(dt, hs);
	return ds_cuda_attention_supported(*impl, dt, hs);
}

extern "C" int ds_cuda_attention_forward(void *y, float *lse, const void *qkv, int B, int T, int C, int NH, float p,
					 const struct ds_rng *gs, enum ds_half_kind dt, enum ds_attn_impl impl,
					 void *stream)
{
	if (!check(B, T, C, NH, dt, &impl))
		return (int)cudaErrorInvalidValue;
	if (!B || !T)
		return 0;
	struct attn_args a;
	memset(&a, 0, sizeof(a));
	a.y = y;
	a.lse = lse;
	a.qkv = qkv;
	a.B = B;
	a.T = T;
	a.C = C;
	a.NH = NH;
	a.p = p > 0.0f ? p : 0.0f;
	a.sc = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
	a.scale = 1.0f / sqrtf((float)(C / NH));
	a.gs = gs;
	a.stream = stream;
	const int hs = C / NH;
	if (impl == DS_ATTN_TC)
		return dt == DS_HALF_FP16 ? fwd_tc_hs<ds_f16>(&a, hs) : fwd_tc_hs<ds_bf16>(&a, hs);
	if (dt == DS_HALF_FP16)
		return fwd_fma_hs<ds_f16>(&a, hs);
	if (dt == DS_HALF_BF16)
		return fwd_fma_hs<ds_bf16>(&a, hs);
	return fwd_fma_hs<ds_f32>(&a, hs);
}

extern "C" int ds_cuda_attention_backward(void *dqkv, const void *dy, const void *qkv, const void *y, const float *lse,
					  int B, int T, int C, int NH, float p, const struct ds_rng *gs,
					  enum ds_half_kind dt, enum ds_attn_impl impl, void *stream)
{
	if (!check(B, T, C, NH, dt, &impl))
		return (int)cudaErrorInvalidValue;
	if (!B || !T)
		return 0;
	struct attn_args a;
	memset(&a, 0, sizeof(a));
	a.dqkv = dqkv;
	a.dy = dy;
	a.qkv = qkv;
	a.yin = y;
	a.lse_in = lse;
	a.B = B;
	a.T = T;
	a.C = C;
	a.NH = NH;
	a.p = p > 0.0f ? p : 0.0f;
	a.sc = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;
	a.scale = 1.0f / sqrtf((float)(C / NH));
	a.gs = gs;
	a.stream = stream;
	const int hs = C / NH;
	const int64_t rows = (int64_t)B * NH * T;
	float *D = NULL;
	DS_CUDA_TRY(cudaMallocAsync((void **)&D, (size_t)rows * sizeof(float), (cudaStream_t)stream));
	int rc;
	if (dt == DS_HALF_FP16) {
		DS_CUDA_LAUNCH(attn_bwd_pre<ds_f16>, ds_cuda_blocks(rows, 256), 256, 0, stream, D, (const uint16_t *)dy,
			       (const uint16_t *)y, T, C, NH, rows);
		rc = impl == DS_ATTN_TC ? bwd_tc_hs<ds_f16>(&a, hs, D) : bwd_fma_hs<ds_f16>(&a, hs, D);
	} else if (dt == DS_HALF_BF16) {
		DS_CUDA_LAUNCH(attn_bwd_pre<ds_bf16>, ds_cuda_blocks(rows, 256), 256, 0, stream, D, (const uint16_t *)dy,
			       (const uint16_t *)y, T, C, NH, rows);
		rc = impl == DS_ATTN_TC ? bwd_tc_hs<ds_bf16>(&a, hs, D) : bwd_fma_hs<ds_bf16>(&a, hs, D);
	} else {
		DS_CUDA_LAUNCH(attn_bwd_pre<ds_f32>, ds_cuda_blocks(rows, 256), 256, 0, stream, D, (const float *)dy,
			       (const float *)y, T, C, NH, rows);
		rc = bwd_fma_hs<ds_f32>(&a, hs, D);
	}
	cudaError_t e = cudaFreeAsync(D, (cudaStream_t)stream);
	return rc ? rc : (int)e;
}

/* ---- unfused: gpt.c's attention_forward / attention_backward ------------------ */

static int ugemm(struct ds_cuda_blas *b, enum ds_half_kind mm, const struct ds_cuda_batch *bt, int ta, int tb, int M,
		 int N, int K, float alpha, const float *A, int lda, const float *B, int ldb, float *C, int ldc,
		 void *stream)
{
	if (mm == DS_HALF_NONE)
		return ds_cuda_gemm_batch(b, bt, DS_HALF_NONE, DS_HALF_NONE, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C,
					  ldc);
	return ds_cuda_gemm_rounded(b, bt, mm, ta, tb, M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc, stream);
}

#define UTRY(x)                                                                                            \
	do {                                                                                               \
		int ds_r_ = (x);                                                                           \
		if (ds_r_)                                                                                 \
			return ds_r_;                                                                      \
	} while (0)

extern "C" int ds_cuda_attention_unfused_forward(struct ds_cuda_blas *b, enum ds_half_kind mm, enum ds_half_kind half,
						 float *y, float *att, float *attd, const float *qkv, int B, int T, int C,
						 int NH, float p, const struct ds_rng *gs, void *stream)
{
	if (NH <= 0 || C % NH)
		return (int)cudaErrorInvalidValue;
	if (B <= 0 || T <= 0)
		return 0;
	const int hs = C / NH, C3 = 3 * C;
	const long TT = (long)T * T, TC3 = (long)T * C3;
	const float scale = 1.0f / sqrtf((float)hs);
	UTRY(ds_cuda_blas_set_stream(b, stream));
	/* att[b,h] (T,T) = scale * q k^T */
	const struct ds_cuda_batch s = { B * NH, NH, { TC3, hs }, { TC3, hs }, { NH * TT, TT } };
	UTRY(ugemm(b, mm, &s, 0, 1, T, T, hs, scale, qkv, C3, qkv + C, C3, att, T, stream));
	UTRY(ds_kernel_cuda_causal_softmax_forward(att, B, NH, T, stream));
	UTRY(ds_cuda_half_round(half, att, (int64_t)B * NH * TT, stream));
	const float *P = att;
	if (p > 0.0f) {
		UTRY(ds_kernel_cuda_attention_dropout(attd, att, B, NH, T, p, gs, stream));
		P = attd;
	}
	/* y[b,:,h] (T,hs) = P (T,T) @ v */
	const struct ds_cuda_batch yb = { B * NH, NH, { NH * TT, TT }, { TC3, hs }, { (long)T * C, hs } };
	return ugemm(b, mm, &yb, 0, 0, T, hs, T, 1.0f, P, T, qkv + 2 * C, C3, y, C, stream);
}

extern "C" int ds_cuda_attention_unfused_backward(struct ds_cuda_blas *b, enum ds_half_kind mm,
						  enum ds_half_kind half, float *dqkv, const float *dy, const float *qkv,
						  const float *att, float *attd, float *datt, int B, int T, int C, int NH,
						  float p, const struct ds_rng *gs, void *stream)
{
	if (NH <= 0 || C % NH)
		return (int)cudaErrorInvalidValue;
	if (B <= 0 || T <= 0)
		return 0;
	const int hs = C / NH, C3 = 3 * C;
	const long TT = (long)T * T, TC3 = (long)T * C3, TC = (long)T * C;
	const float scale = 1.0f / sqrtf((float)hs);
	UTRY(ds_cuda_blas_set_stream(b, stream));
	if (p > 0.0f)   /* the dropped probabilities again, from the same keys */
		UTRY(ds_kernel_cuda_attention_dropout(attd, att, B, NH, T, p, gs, stream));
	/* datt (T,T) = dy v^T;  dv (T,hs) = P'^T dy */
	const struct ds_cuda_batch dp = { B * NH, NH, { TC, hs }, { TC3, hs }, { NH * TT, TT } };
	UTRY(ugemm(b, mm, &dp, 0, 1, T, T, hs, 1.0f, dy, C, qkv + 2 * C, C3, datt, T, stream));
	const struct ds_cuda_batch dv = { B * NH, NH, { NH * TT, TT }, { TC, hs }, { TC3, hs } };
	UTRY(ugemm(b, mm, &dv, 1, 0, T, hs, T, 1.0f, p > 0.0f ? attd : att, T, dy, C, dqkv + 2 * C, C3, stream));
	UTRY(ds_cuda_half_round(half, datt, (int64_t)B * NH * TT, stream));
	UTRY(ds_kernel_cuda_causal_softmax_backward(datt, att, B, NH, T, scale, p, p > 0.0f ? gs : NULL, stream));
	UTRY(ds_cuda_half_round(half, datt, (int64_t)B * NH * TT, stream));
	/* dq (T,hs) = dS k;  dk (T,hs) = dS^T q */
	const struct ds_cuda_batch dq = { B * NH, NH, { NH * TT, TT }, { TC3, hs }, { TC3, hs } };
	UTRY(ugemm(b, mm, &dq, 0, 0, T, hs, T, 1.0f, datt, T, qkv + C, C3, dqkv, C3, stream));
	return ugemm(b, mm, &dq, 1, 0, T, hs, T, 1.0f, datt, T, qkv, C3, dqkv + C, C3, stream);
}
