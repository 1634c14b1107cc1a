/* compute_cuda.c - the cuda compute backend (compute.h): the table's
 * entries as kernels/cuda's launchers on one device and one stream.
 *
 * Built only with CUDA, and in ds_compute_all[] there: --device cuda
 * chooses it (auto does not: it has never run on a GPU).  The engine runs
 * it on one rank or data-parallel over many: comm_devmem hands the
 * communicator (lib/comm's device path: NCCL, or MPI staged through
 * pinned memory) this backend's copies, pinned memory, stream and an
 * is_dev that knows its allocations; tests/mpi/engine_cuda_check runs
 * ZeRO 0-3 at 2 and 4 ranks over the emulation against the 1-rank run and
 * the cpu backend, in fp32, bf16, fp16 and fp32 with a 16-bit
 * communication_data_type.  cuBLAS is loaded by kernels/cuda/gemm_cuda.cu at init(), not
 * linked, so a cpu run never maps it.  test_compute_cuda_emu (the model)
 * and test_engine_cuda_emu
 * (the engine's buffers, norm, clipping and optimizers) run it over the
 * host emulation of CUDA (where host code that touches device memory
 * aborts, as a GPU would fault) against the cpu backend, and
 * tests/cli/ds-train-cuda-emu.sh runs tests/gpu/train.bats there.
 * Memory: alloc counts what it holds (mem_held) and mem_info answers
 * cudaMemGetInfo, so ds-train checks the memory plan's device rows
 * (engine/estimate.h, ds_engine_mem_place) against the device before
 * training and reports the real bytes after; tests/cli/
 * ds-train-check-cuda.bats and tests/mpi/engine-cuda.bats hold them equal
 * over the emulation.  Its own buffers (the loss rows, the sums) are
 * ds_cuda_malloc's directly and not in the plan.
 *
 * Covered: fp32, fp16 and bf16 training of dense models on one
 * tensor-parallel rank, on one or many data-parallel ones (the 16-bit
 * reductions' casts and scaling through half_round/half_pack/half_unpack/
 * half_recast, on device buffers), with the
 * engine's step (Adam/AdamW, SGD, Lamb) on
 * the device.  A 16-bit run keeps the CPU path's numerics contract: the
 * 16-bit parameter copy, activations rounded as the kernels write them
 * (the plain kernel, then the rounding launcher: the same bits), 16-bit
 * gradients accumulated in fp32 and rounded once (half_add), the overflow
 * check in sumsq's non-finite flag, all on device buffers; the loss scaler
 * itself is the engine's host arithmetic on one flag per step.  Products:
 * bf16 modes round A and B to bf16 and run cuBLAS with fp32 accumulation
 * on the tensor cores (ds_cuda_gemm_rounded), for every shape (the cpu
 * path only where it has a bf16 GEMM); fp16 runs keep the CPU's fp32
 * products (pedantic fp32, no TF32), not fp16 inputs on the tensor cores:
 * not every input is an fp16 value on the CPU path (the attention
 * probabilities after dropout's 1/(1-p) are not rounded before their
 * product), so packing them to fp16 would round once more than the cpu
 * does (seen on the emulation: the dropout model's first loss moved by
 * 9e-7, the model without dropout not at all).
 * Not yet (each entry sets an error that check() reports as DS_ENOTSUP):
 * the vocabulary-parallel embedding and loss, the row-parallel bias and
 * attention dropout keyed from another rank's first head (tensor
 * parallelism), and bf16 logits kept in 16 bits (head16 says no, so the
 * model takes the fp32 row chunks of the head, rounded like the cpu's).  The entries return nothing: a launcher's failure is
 * kept (the first one) and check() reports it after synchronising.  A
 * process drives one device, so the state is the process's.
 */
#include "compute/compute.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"   /* struct ds_comm_devmem */
#include "common/gpt_math.h"   /* ds_act_gated */
#include "cuda/attn_cuda.h"
#include "cuda/ds_cuda.h"
#include "cuda/flat_cuda.h"
#include "cuda/gemm_cuda.h"
#include "cuda/gpt_cuda.h"
#include "optim/optim.h"

static struct {
	int device;
	void *stream;
	struct ds_cuda_blas *blas;
	int rc;                 /* first failure since the last check: > 0 a launcher's, -1 not supported */
	char what[160];         /* which entry */
	double *dloss, *dsum;   /* the cross-entropy's per-row losses and their sum (device) */
	int64_t nloss;
	double *dsums;          /* the engine's sums: sumsq's pair, Lamb's 2 per range (device) */
	int64_t nsums;
} g = { -1, NULL, NULL, 0, "", NULL, NULL, 0, NULL, 0 };

static void note(int rc, const char *what)
{
	if (rc && !g.rc) {
		g.rc = rc;
		snprintf(g.what, sizeof g.what, "%s", what);
	}
}

static void notsup(const char *what)
{
	note(-1, what);
}

/* what the device path runs: dense models (fp32, fp16, bf16) on one
 * tensor-parallel and pipeline rank, with the dense optimizers in memory */
static const char *cu_uncovered(const struct ds_compute_needs *n)
{
	return n->moe ? "a Mixture-of-Experts model"
	       : n->onebit ? "a 1-bit optimizer (OneBitAdam, ZeroOneAdam, OneBitLamb)"
	       : n->nvme ? "NVMe offload (ZeRO-Infinity)"
	       : n->tp > 1 ? "tensor parallelism"
	       : n->pp > 1 ? "pipeline parallelism"
		       : NULL;
}

static int cu_init(int device, struct ds_err *err)
{
	int rc, n = 0;
	if (g.blas && g.device == device)
		return 0;
	if ((rc = ds_cuda_device_count(&n)) || device < 0 || device >= n)
		return ds_err_set(err, DS_EIO, "cuda backend: device %d of %d: %s", device, n,
				  rc ? ds_cuda_strerror(rc) : "no such device");
	if ((rc = ds_cuda_set_device(device)) || (rc = ds_cuda_stream_create(&g.stream)) ||
	    (rc = ds_cuda_blas_create(&g.blas, g.stream, 0)))
		return ds_err_set(err, DS_EIO, "cuda backend: setting up device %d: %s", device, ds_cuda_strerror(rc));
	g.device = device;
	return 0;
}

static int cu_check(struct ds_err *err)
{
	note(ds_cuda_stream_sync(g.stream), "synchronising the stream");
	if (!g.rc)
		return 0;
	const int rc = g.rc;
	g.rc = 0;
	if (rc < 0)
		return ds_err_set(err, DS_ENOTSUP, "cuda backend: %s is not implemented on the GPU yet; use --device cpu",
				  g.what);
	return ds_err_set(err, DS_EIO, "cuda backend: %s: %s", g.what, ds_cuda_strerror(rc));
}

/* ---- buffers ----
 * Every live allocation is listed (base, bytes), so that is_dev (the
 * communicator's, cu_comm_devmem) can tell the backend's memory, and
 * offsets into it, from host memory by address alone: the emulation's
 * device memory is host memory, and a real device's pointers need no
 * driver call this way.  A handful of flat buffers and the model's
 * workspace: a linear scan. */
static struct live { const char *p; size_t n; } *live;
static size_t nlive, caplive;
/* the bytes alloc was asked for and holds, and their high-water mark (the
 * memory plan's device rows count these) */
static size_t dheld, dpeak;

static void *cu_alloc(size_t bytes)
{
	void *p = NULL;
	if (nlive == caplive) {
		size_t cap = caplive ? 2 * caplive : 64;
		struct live *l = realloc(live, cap * sizeof *l);
		if (!l)
			return NULL;
		live = l;
		caplive = cap;
	}
	if (ds_cuda_malloc(&p, bytes ? bytes : 1))
		return NULL;
	live[nlive++] = (struct live){ p, bytes ? bytes : 1 };
	dheld += bytes ? bytes : 1;
	if (dheld > dpeak)
		dpeak = dheld;
	return p;
}
static void cu_free(void *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < nlive; i++)
		if (live[i].p == p) {
			dheld -= live[i].n;
			live[i] = live[--nlive];
			break;
		}
	note(ds_cuda_free(p), "cudaFree");
}
static void cu_zero(void *p, size_t bytes) { note(ds_cuda_memset(p, 0, bytes, g.stream), "zero"); }
static void cu_copy(void *dst, const void *src, size_t bytes) { note(ds_cuda_memcpy(dst, src, bytes, g.stream), "copy"); }
static void cu_to_host(void *host, const void *src, size_t bytes)
{
	note(ds_cuda_memcpy(host, src, bytes, g.stream), "copy to host");
	note(ds_cuda_stream_sync(g.stream), "copy to host");   /* the caller reads it now */
}
static void cu_from_host(void *dst, const void *host, size_t bytes)
{
	note(ds_cuda_memcpy(dst, host, bytes, g.stream), "copy from host");
	note(ds_cuda_stream_sync(g.stream), "copy from host");   /* the caller may reuse host at once */
}
/* (the caller waits with cu_check before it touches host) */
static void cu_to_host_async(void *host, const void *src, size_t bytes)
{
	note(ds_cuda_memcpy(host, src, bytes, g.stream), "copy to host");
}
static void cu_from_host_async(void *dst, const void *host, size_t bytes)
{
	note(ds_cuda_memcpy(dst, host, bytes, g.stream), "copy from host");
}
static void cu_fill_cols(float *x, int64_t rows, int64_t ld, int col0, int col1, float v)
{
	note(ds_cuda_fill_cols(x, rows, ld, col0, col1, v, g.stream), "fill_cols");
}

/* ---- 16-bit storage ---- */
static void cu_half_round(int kind, float *x, size_t n)
{
	note(ds_cuda_half_round((enum ds_half_kind)kind, x, (int64_t)n, g.stream), "half_round");
}
static void cu_half_pack(int kind, uint16_t *dst, const float *src, size_t n)
{
	note(ds_cuda_half_pack((enum ds_half_kind)kind, dst, src, (int64_t)n, g.stream), "half_pack");
}
static void cu_half_unpack(int kind, float *dst, const uint16_t *src, size_t n)
{
	note(ds_cuda_half_unpack((enum ds_half_kind)kind, dst, src, (int64_t)n, g.stream), "half_unpack");
}

static void cu_half_add(int kind, uint16_t *acc, const float *gr, int64_t n)
{
	note(ds_cuda_hadd((enum ds_half_kind)kind, acc, gr, n, g.stream), "half_add");
}
static void cu_half_recast(uint16_t *p, int64_t n, int from, int cast, float f, int to)
{
	note(ds_cuda_hrecast(p, n, (enum ds_half_kind)from, (enum ds_half_kind)cast, f, (enum ds_half_kind)to, g.stream),
	     "half_recast");
}
static void cu_accumulate(int kind, float *acc, const float *gr, int64_t n)
{
	note(ds_cuda_accumulate((enum ds_half_kind)kind, acc, gr, n, g.stream), "accumulate");
}

/* ---- matrix products: fp32 (pedantic, no TF32) or the CPU's bf16 contract ---- */
/* DS_GEMM_BF16_CR: C of every entry (M rows of N at ldc) rounded to bf16
 * values after the product by the rounding launcher, row by row where C
 * is strided (the same bits as the cpu kernel's rounding as it stores) */
static void cu_round_c(const struct ds_gemm_bf16_batch *bt, int M, int N, float *C, int ldc)
{
	for (int e = 0; e < bt->count; e++) {
		float *c = C + (e / bt->inner) * bt->sc[0] + (e % bt->inner) * bt->sc[1];
		if (ldc == N)
			cu_half_round(DS_HALF_BF16, c, (size_t)M * N);
		else
			for (int i = 0; i < M; i++)
				cu_half_round(DS_HALF_BF16, c + (long)i * ldc, (size_t)N);
	}
}

static void cu_gemm(int mm, const struct ds_gemm_bf16_batch *bt, int ta, int tb, int M, int N, int K, float alpha,
		    const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	const struct ds_gemm_bf16_batch *cr = bt && (bt->flags & DS_GEMM_BF16_CR) ? bt : NULL;
	if (bt && bt->count == 1)
		bt = NULL;   /* one product (entry 0 sits at offset 0) */
	struct ds_cuda_batch cb;
	if (bt) {
		cb.count = bt->count;
		cb.inner = bt->inner;
		memcpy(cb.sa, bt->sa, sizeof cb.sa);
		memcpy(cb.sb, bt->sb, sizeof cb.sb);
		memcpy(cb.sc, bt->sc, sizeof cb.sc);
	}
	int rc;
	if (mm >= 0 && mm != DS_BF16_MM_FP32)
		rc = ds_cuda_gemm_rounded(g.blas, bt ? &cb : NULL, DS_HALF_BF16, ta, tb, M, N, K, alpha, A, lda, B, ldb,
					  beta, C, ldc, g.stream);
	else if (bt)
		rc = ds_cuda_gemm_batch(g.blas, &cb, DS_HALF_NONE, DS_HALF_NONE, ta, tb, M, N, K, alpha, A, lda, B, ldb,
					beta, C, ldc);
	else
		rc = ds_cuda_gemm(g.blas, DS_HALF_NONE, DS_HALF_NONE, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C,
				  ldc);
	note(rc, "gemm");
	if (cr && !rc)
		cu_round_c(cr, M, N, C, ldc);
}
static void cu_gemm_keep_b(int mm, int same, int M0, int ta, int tb, int M, int N, int K, float alpha,
			   const float *A, int lda, const float *B, int ldb, const uint16_t *a16, const uint16_t *b16,
			   float beta, float *C, int ldc)
{
	cu_gemm(mm, NULL, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
/* cuBLAS is given fp32 operands: no bf16 copies to read */
static int cu_gemm_hints(int mm, int count, int M, int N, int K) { return 0; }
static int cu_head16(int mm, int N, int V, int C) { return 0; }
static int cu_gemm16(int token, unsigned flags, int ta, int tb, int M, int N, int K, float alpha, const void *A,
		     int lda, const float *B, int ldb, const uint16_t *b16, float beta, void *C, int ldc)
{
	return -1;
}
static int cu_mm_check(int mode, char *why, size_t whysz) { return 0; }
static int cu_mm_plan(int mode, char *buf, size_t n)
{
	if (mode == DS_BF16_MM_FP32) {
		snprintf(buf, n, "fp32 products on the GPU (cuBLAS, no TF32)");
		return 0;
	}
	snprintf(buf, n, "bf16 products on the GPU's tensor cores (cuBLAS: inputs rounded to bf16, fp32 accumulation)");
	return 1;
}

/* ---- the GPT kernels ---- */
#define L(call, name) note(call, name)
static void cu_dropout(float *x, int64_t n, const struct ds_rng *gr, float p)
{
	L(ds_kernel_cuda_dropout(x, n, gr, p, g.stream), "dropout");
}
static void cu_embed_forward(float *out, const int32_t *tok, const float *wte, const float *pos, int B, int T, int C)
{
	L(ds_kernel_cuda_embed_forward(out, tok, wte, pos, B, T, C, g.stream), "embed_forward");
}
static void cu_embed_backward(float *dwte, float *dpos, const float *dout, const int32_t *tok, int B, int T, int C)
{
	L(ds_kernel_cuda_embed_backward(dwte, dpos, dout, tok, B, T, C, g.stream), "embed_backward");
}
static void cu_vocab_embed_forward(float *out, const int32_t *tok, const float *wte_l, int v0, int rows, int B,
				   int T, int C)
{
	notsup("the vocabulary-parallel embedding (tensor parallelism)");
}
static void cu_pos_add(float *out, const float *pos, int B, int T, int C)
{
	notsup("the positions added after a vocabulary-parallel embedding (tensor parallelism)");
}
static void cu_vocab_embed_backward(float *dwte_l, float *dpos, const float *dout, const int32_t *tok, int v0,
				    int rows, int B, int T, int C)
{
	notsup("the vocabulary-parallel embedding (tensor parallelism)");
}
/* r16: the kernel, then the rounding launcher over its output (n floats) */
static void r16_after(int r16, float *x, int64_t n)
{
	if (r16)
		cu_half_round(DS_HALF_BF16, x, (size_t)n);
}
static void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
				 const float *b, int64_t N, int C, float eps, int r16)
{
	L(ds_kernel_cuda_layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps, g.stream), "layernorm_forward");
	r16_after(r16, out, N * C);
}
static void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
				  const float *w, const float *mean, const float *rstd, int64_t N, int C, int r16)
{
	L(ds_kernel_cuda_layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C, g.stream),
	  "layernorm_backward");
	r16_after(r16, dinp, N * C);
}
static void cu_rmsnorm_forward(float *out, float *rms, float *inv, const float *inp, const float *w, int64_t N, int C,
			       float eps)
{
	L(ds_kernel_cuda_rmsnorm_forward(out, rms, inv, inp, w, N, C, eps, g.stream), "rmsnorm_forward");
}
static void cu_rmsnorm_backward(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
				const float *rms, const float *inv, int64_t N, int C)
{
	L(ds_kernel_cuda_rmsnorm_backward(dinp, dw, dout, inp, w, rms, inv, N, C, g.stream), "rmsnorm_backward");
}
static void cu_bias_fill(float *out, const float *b, int64_t N, int OC)
{
	L(ds_kernel_cuda_bias_fill(out, b, N, OC, g.stream), "bias_fill");
}
static void cu_bias_add(float *out, const float *b, int64_t N, int OC)
{
	notsup("the row-parallel bias (tensor parallelism)");
}
static void cu_bias_backward(float *db, const float *dout, int64_t N, int OC)
{
	L(ds_kernel_cuda_bias_backward(db, dout, N, OC, g.stream), "bias_backward");
}
static void cu_add(float *out, const float *a, const float *b, int64_t n, int r16)
{
	if (out != a && out != b)
		cu_copy(out, a, (size_t)n * sizeof(float));
	L(ds_kernel_cuda_add_inplace(out, out == b ? a : b, n, g.stream), "add");   /* a + b = b + a, to the bit */
	r16_after(r16, out, n);
}
static void cu_rotary(float *qkv, const float *cs, const float *sn, int B, int T, int C, int NH, int rd, int inverse)
{
	L(ds_kernel_cuda_rotary(qkv, cs, sn, B, T, C, NH, rd, inverse, g.stream), "rotary");
}
static void cu_causal_softmax_forward(float *att, int B, int NH, int T, int r16)
{
	L(ds_kernel_cuda_causal_softmax_forward(att, B, NH, T, g.stream), "causal_softmax_forward");
	r16_after(r16, att, (int64_t)B * NH * T * T);
}
static void cu_attention_dropout_h0(float *attd, const float *att, int B, int NH, int h0, int T, float p,
				    const struct ds_rng *gs)
{
	if (h0)
		notsup("attention dropout of a tensor-parallel rank's heads");
	else
		L(ds_kernel_cuda_attention_dropout(attd, att, B, NH, T, p, gs, g.stream), "attention_dropout");
}
static void cu_causal_softmax_backward_h0(float *datt, const float *att, int B, int NH, int h0, int T, float scale,
					  float p, const struct ds_rng *gs, int r16)
{
	if (h0) {
		notsup("the attention backward of a tensor-parallel rank's heads");
		return;
	}
	L(ds_kernel_cuda_causal_softmax_backward(datt, att, B, NH, T, scale, p, gs, g.stream), "causal_softmax_backward");
	r16_after(r16, datt, (int64_t)B * NH * T * T);
}
static void cu_act_forward(float *out, const float *inp, int64_t N, int F, int act, int r16)
{
	L(ds_kernel_cuda_act_forward(out, inp, N, F, act, g.stream), "act_forward");
	r16_after(r16, out, N * F);
}
static void cu_act_backward(float *dinp, const float *dout, const float *inp, int64_t N, int F, int act, int r16)
{
	L(ds_kernel_cuda_act_backward(dinp, dout, inp, N, F, act, g.stream), "act_backward");
	r16_after(r16, dinp, N * (ds_act_gated(act) ? 2 * F : F));   /* a gated one's [da | db] */
}
/* the per-row losses on the device, their sum in a fixed tree, to the host */
static double cu_xent_forward(float *lse, const float *logits, const int32_t *targets, int64_t N, int V, int Vp)
{
	double sum = 0;
	if (N > g.nloss) {
		note(ds_cuda_free(g.dloss), "cudaFree");
		g.dloss = NULL;
		g.nloss = 0;
		if (ds_cuda_malloc((void **)&g.dloss, (size_t)(N + 1) * sizeof(double)) || !g.dloss) {
			note(2 /* cudaErrorMemoryAllocation */, "the cross-entropy's row losses");
			return 0;
		}
		g.nloss = N;
		g.dsum = g.dloss + N;
	}
	L(ds_kernel_cuda_xent_forward(lse, targets ? g.dloss : NULL, logits, targets, N, V, Vp, g.stream),
	  "xent_forward");
	if (!targets)
		return 0;
	L(ds_cuda_sum(g.dsum, g.dloss, N, g.stream), "xent_forward's sum");
	cu_to_host(&sum, g.dsum, sizeof sum);
	return sum;
}
static void cu_xent_backward(float *logits, const float *lse, const int32_t *targets, int64_t N, int V, int Vp,
			     float dscale)
{
	L(ds_kernel_cuda_xent_backward(logits, lse, targets, N, V, Vp, dscale, g.stream), "xent_backward");
}
static double cu_xent_forward16(float *lse, uint16_t *logits, const int32_t *targets, int64_t N, int V, int Vp)
{
	notsup("bf16 logits");
	return 0;
}
static void cu_xent_backward16(uint16_t *logits, const float *lse, const int32_t *targets, int64_t N, int V, int Vp,
			       float dscale)
{
	notsup("bf16 logits");
}
static void cu_xent_vp_max(float *mx, float *pred, const float *logits, const int32_t *targets, int v0, int64_t N,
			   int Vl, int Vpl)
{
	notsup("the vocabulary-parallel loss (tensor parallelism)");
}
static void cu_xent_vp_sumexp(float *se, const float *logits, const float *mx, int64_t N, int Vl, int Vpl)
{
	notsup("the vocabulary-parallel loss (tensor parallelism)");
}
static void cu_xent_vp_backward(float *logits, const float *lse, const int32_t *targets, int v0, int64_t N, int Vl,
				int Vpl, float dscale)
{
	notsup("the vocabulary-parallel loss (tensor parallelism)");
}

/* ---- the engine's step: kernels/cuda/flat_cuda.h's launchers ---- */

/* g.dsums with room for n doubles, zeroed; NULL (noted) when out of memory */
static double *sums_buf(int64_t n)
{
	if (n > g.nsums) {
		note(ds_cuda_free(g.dsums), "cudaFree");
		g.dsums = NULL;
		g.nsums = 0;
		void *p = NULL;
		int rc = ds_cuda_malloc(&p, (size_t)n * sizeof(double));
		if (rc) {
			note(rc, "allocating the engine's sums");
			return NULL;
		}
		g.dsums = p;
		g.nsums = n;
	}
	note(ds_cuda_memset(g.dsums, 0, (size_t)n * sizeof(double), g.stream), "zero");
	return g.dsums;
}

static void cu_scale(float *x, int64_t n, float f) { note(ds_cuda_scale(x, n, f, g.stream), "scale"); }

/* the device's fixed-order sum of one buffer, added to the host's total
 * (the caller's order over buffers, as on cpu) */
static void cu_sumsq(double *acc, const float *x, int64_t n)
{
	double h[2] = { 0, 0 }, *d = sums_buf(2);
	if (!d)
		return;
	note(ds_cuda_sumsq(d, x, DS_HALF_NONE, n, g.stream), "sumsq");
	cu_to_host(h, d, sizeof h);
	acc[0] += h[0];
	if (h[1] != 0)
		acc[1] = 1;
}

static int cu_optim_step(struct ds_optim *o, float *p, const float *gr, float grad_mul, struct ds_err *err)
{
	DS_TRY(ds_optim_params_check(&o->hp, err));
	const int64_t t = o->step + 1;
	int rc;
	if (o->hp.type == DS_OPTIM_ADAM || o->hp.type == DS_OPTIM_ADAMW) {
		struct ds_adam_coef c;
		ds_adam_coef_init(&c, &o->hp, t, grad_mul);
		rc = ds_cuda_adam(&c, p, gr, o->states[0], o->states[1], (int64_t)o->n, g.stream);
	} else if (o->hp.type == DS_OPTIM_SGD) {
		struct ds_sgd_coef c;
		ds_sgd_coef_init(&c, &o->hp, t, grad_mul);
		rc = ds_cuda_sgd(&c, p, gr, o->nstates ? o->states[0] : NULL, (int64_t)o->n, g.stream);
	} else {
		return ds_err_set(err, DS_EINVAL, "cuda backend: optimizer %s: not a dense Adam or SGD step",
				  ds_optim_type_name(o->hp.type));
	}
	if (rc)
		return ds_err_set(err, DS_EIO, "cuda backend: %s step: %s", ds_optim_type_name(o->hp.type),
				  ds_cuda_strerror(rc));
	o->step = t;
	return 0;
}

static int cu_lamb_partial(struct ds_optim *o, const float *p, const float *gr, float grad_mul,
			   const struct ds_range *ranges, int nranges, double *sums, struct ds_err *err)
{
	struct ds_lamb_coef k;
	ds_lamb_coef_init(&k, &o->hp);
	double *d = sums_buf(2 * (int64_t)(nranges ? nranges : 1));
	int rc = d ? ds_cuda_lamb_partial(&k, p, gr, o->states[0], o->states[1], grad_mul, ranges, nranges, d, g.stream)
		   : g.rc;
	if (rc)
		return ds_err_set(err, DS_EIO, "cuda backend: Lamb's norms: %s", ds_cuda_strerror(rc));
	cu_to_host(sums, d, 2 * (size_t)nranges * sizeof(double));
	return 0;
}

static int cu_lamb_apply(struct ds_optim *o, float *p, const struct ds_range *ranges, int nranges,
			 const double *sums, struct ds_err *err)
{
	struct ds_lamb_coef k;
	ds_lamb_coef_init(&k, &o->hp);
	const int64_t t = o->step + 1;
	int rc = ds_cuda_lamb_apply(&k, p, o->states[0], o->states[1], ranges, nranges, sums,
				    ds_lamb_step_size(&o->hp, t), o->hp.min_coeff, o->hp.max_coeff, g.stream);
	if (rc)
		return ds_err_set(err, DS_EIO, "cuda backend: Lamb's update: %s", ds_cuda_strerror(rc));
	o->step = t;
	return 0;
}

/* ---- the communicator's device path (comm.h, "Device buffers") ----
 * Its copies are synchronous and come after the work the stream holds; a
 * failure is kept for check() as the entries' are, and returned nonzero
 * so that the collective fails at once. */
static int dm_copy(void *dst, const void *src, size_t n, const char *what)
{
	int rc = ds_cuda_memcpy(dst, src, n, g.stream);
	if (!rc)
		rc = ds_cuda_stream_sync(g.stream);
	note(rc, what);
	return rc;
}
static int dm_to_host(void *h, const void *d, size_t n, void *ctx) { (void)ctx; return dm_copy(h, d, n, "collective: copy to host"); }
static int dm_to_dev(void *d, const void *h, size_t n, void *ctx) { (void)ctx; return dm_copy(d, h, n, "collective: copy to device"); }
static int dm_dev_copy(void *d, const void *s, size_t n, void *ctx) { (void)ctx; return dm_copy(d, s, n, "collective: device copy"); }
static void *dm_host_alloc(size_t n, void *ctx)
{
	void *p = NULL;
	(void)ctx;
	return ds_cuda_host_alloc(&p, n) ? NULL : p;
}
static void dm_host_free(void *p, void *ctx)
{
	(void)ctx;
	note(ds_cuda_host_free(p), "collective: freeing pinned memory");
}
static int dm_is_dev(const void *p, void *ctx)
{
	const char *c = p;
	(void)ctx;
	for (size_t i = 0; i < nlive; i++)
		if (c >= live[i].p && c < live[i].p + live[i].n)
			return 1;
	return 0;
}

static int cu_comm_devmem(struct ds_comm_devmem *dm, struct ds_err *err)
{
	if (!g.blas)
		return ds_err_set(err, DS_EINVAL, "cuda backend: comm_devmem before init");
	dm->device = g.device;
	dm->stream = g.stream;
	dm->to_host = dm_to_host;
	dm->to_dev = dm_to_dev;
	dm->dev_copy = dm_dev_copy;
	dm->host_alloc = dm_host_alloc;
	dm->host_free = dm_host_free;
	dm->is_dev = dm_is_dev;
	dm->ctx = NULL;
	/* "" (then "cuda:<device>" stands for it) when the id cannot be had */
	(void)ds_cuda_device_pci_id(g.device, dm->dev_id, (int)sizeof dm->dev_id);
	return 0;
}

static int cu_mem_info(size_t *free_bytes, size_t *total_bytes, struct ds_err *err)
{
	*free_bytes = *total_bytes = 0;
	int rc = ds_cuda_mem_info(free_bytes, total_bytes);
	return rc ? ds_err_set(err, DS_EIO, "cuda backend: cudaMemGetInfo: %s", ds_cuda_strerror(rc)) : 0;
}
/* page-locked host memory (ZeRO-Offload's master, states and staging) */
static void *cu_pinned_alloc(size_t bytes)
{
	void *p = NULL;
	return ds_cuda_host_alloc(&p, bytes) ? NULL : p;
}
static void cu_pinned_free(void *p) { note(ds_cuda_host_free(p), "freeing pinned memory"); }
static void cu_mem_held(size_t *held, size_t *peak, int reset)
{
	if (reset)
		dpeak = dheld;
	*held = dheld;
	*peak = dpeak;
}

const struct ds_compute_ops ds_compute_cuda = {
	.name = "cuda",
	.host = 0,
	.uncovered = cu_uncovered,
	.init = cu_init,
	.check = cu_check,
	.alloc = cu_alloc,
	.free = cu_free,
	.zero = cu_zero,
	.copy = cu_copy,
	.to_host = cu_to_host,
	.from_host = cu_from_host,
	.to_host_async = cu_to_host_async,
	.from_host_async = cu_from_host_async,
	.fill_cols = cu_fill_cols,
	.half_round = cu_half_round,
	.half_pack = cu_half_pack,
	.half_unpack = cu_half_unpack,
	.half_add = cu_half_add,
	.half_recast = cu_half_recast,
	.accumulate = cu_accumulate,
	.gemm = cu_gemm,
	.gemm_keep_b = cu_gemm_keep_b,
	.gemm_hints = cu_gemm_hints,
	.head16 = cu_head16,
	.gemm16 = cu_gemm16,
	.mm_check = cu_mm_check,
	.mm_plan = cu_mm_plan,
	.dropout = cu_dropout,
	.embed_forward = cu_embed_forward,
	.embed_backward = cu_embed_backward,
	.vocab_embed_forward = cu_vocab_embed_forward,
	.pos_add = cu_pos_add,
	.vocab_embed_backward = cu_vocab_embed_backward,
	.layernorm_forward = cu_layernorm_forward,
	.layernorm_backward = cu_layernorm_backward,
	.rmsnorm_forward = cu_rmsnorm_forward,
	.rmsnorm_backward = cu_rmsnorm_backward,
	.bias_fill = cu_bias_fill,
	.bias_add = cu_bias_add,
	.bias_backward = cu_bias_backward,
	.add = cu_add,
	.rotary = cu_rotary,
	.causal_softmax_forward = cu_causal_softmax_forward,
	.attention_dropout_h0 = cu_attention_dropout_h0,
	.causal_softmax_backward_h0 = cu_causal_softmax_backward_h0,
	.act_forward = cu_act_forward,
	.act_backward = cu_act_backward,
	.xent_forward = cu_xent_forward,
	.xent_backward = cu_xent_backward,
	.xent_forward16 = cu_xent_forward16,
	.xent_backward16 = cu_xent_backward16,
	.xent_vp_max = cu_xent_vp_max,
	.xent_vp_sumexp = cu_xent_vp_sumexp,
	.xent_vp_backward = cu_xent_vp_backward,
	.scale = cu_scale,
	.sumsq = cu_sumsq,
	.optim_step = cu_optim_step,
	.lamb_partial = cu_lamb_partial,
	.lamb_apply = cu_lamb_apply,
	.comm_devmem = cu_comm_devmem,
	.mem_info = cu_mem_info,
	.mem_held = cu_mem_held,
	.pinned_alloc = cu_pinned_alloc,
	.pinned_free = cu_pinned_free,
};
