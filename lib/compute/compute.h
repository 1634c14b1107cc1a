/* compute.h - the compute backend: every tensor operation the model runs
 * (issue 18), as a table of functions in the fio/IOR manner.
 *
 * lib/model/gpt.c and moe.c call nothing else for their tensors: buffers,
 * the 16-bit storage passes, the matrix products with gemm()'s contract
 * and every kernel of kernels/cpu/gpt_kernels.h.  lib/engine allocates its
 * flat buffers and optimizer states here and runs its step's arithmetic on
 * flat fp32 buffers through the last entries (scale, sumsq, the dense
 * optimizers).  Implementations:
 *   cpu   compute_cpu.c: kernels/cpu exactly as the model called them
 *         before this table, and the engine's loops and lib/optim exactly
 *         as the engine called them (the oracle every other backend is
 *         held to);
 *   cuda  compute_cuda.c, kernels/cuda's launchers (built with CUDA): fp32
 *         dense models and the engine's fp32 dense step, on one rank or
 *         data-parallel over many (ZeRO 0-3, collectives on its buffers
 *         through lib/comm's device path: comm_devmem below),
 *         checked over the host emulation of CUDA only (never on a GPU);
 *         in ds_compute_all, so --device cuda selects it for what it
 *         covers; auto stays cpu until it has run on a GPU
 *         (ds_compute_select).  cuBLAS is loaded when it starts, never
 *         linked (kernels/cuda/gemm_cuda.cu).
 * A process drives one device (DeepSpeed's accelerator), so a backend's
 * state (device, stream, handles) is its own, set by init(); the table's
 * functions take the arguments of the CPU kernels they stand for.
 *
 * Selection (--device cpu|cuda|auto, "dstk": {"device": ...}) and the
 * device a rank uses are pure functions below, unit-tested on the CPU.
 */
#ifndef DS_COMPUTE_COMPUTE_H
#define DS_COMPUTE_COMPUTE_H

#include <stddef.h>
#include <stdint.h>

#include "common/optim_math.h"   /* struct ds_range */
#include "cpu/gemm_bf16.h"   /* struct ds_gemm_bf16_batch, DS_GEMM_BF16_*, enum ds_bf16_mode */
#include "util/err.h"
#include "util/rng.h"

/* What a run asks of a backend beyond the dense fp32 model. */
struct ds_compute_needs {
	int half;           /* enum ds_half_kind of the activations (0: fp32) */
	int moe;            /* MoE layers */
	int tp, pp;         /* tensor, pipeline parallel sizes (1: none) */
	int onebit;         /* a 1-bit optimizer */
	int nvme;           /* ZeRO-Infinity's NVMe offload */
};

struct ds_optim;   /* optim/optim.h */
struct ds_comm_devmem;   /* comm/comm.h */

struct ds_compute_ops {
	const char *name;   /* "cpu", "cuda" */
	/* 1 when its buffers are host memory the caller may read and write
	 * directly (cpu), 0 when only the entries below may touch them */
	int host;
	/* NULL when the backend runs everything needs asks for, else the
	 * first thing it does not, as words for "...: X is not ..." */
	const char *(*uncovered)(const struct ds_compute_needs *needs);
	/* Bind this process to device (the cpu backend ignores it). */
	int (*init)(int device, struct ds_err *err);

	/* Wait for the work queued so far: 0, or the first error of any entry
	 * since the last check (the entries return nothing; a device backend
	 * keeps its first failure until here). */
	int (*check)(struct ds_err *err);

	/* ---- buffers (the backend's memory; host memory on cpu) ---- */
	void *(*alloc)(size_t bytes);                /* NULL when out of memory */
	void (*free)(void *p);
	void (*zero)(void *p, size_t bytes);
	void (*copy)(void *dst, const void *src, size_t bytes);     /* within the backend's memory */
	void (*to_host)(void *host, const void *src, size_t bytes);
	void (*from_host)(void *dst, const void *host, size_t bytes);
	/* the same, queued after the work the backend holds and returning at
	 * once: host (pinned_alloc's memory) is read or written until check()
	 * returns and must be left alone until then (cpu: done when it
	 * returns) */
	void (*to_host_async)(void *host, const void *src, size_t bytes);
	void (*from_host_async)(void *dst, const void *host, size_t bytes);

	/* x (rows, ld): columns [col0, col1) of every row write v (the
	 * logits' padding columns) */
	void (*fill_cols)(float *x, int64_t rows, int64_t ld, int col0, int col1, float v);

	/* ---- 16-bit storage (kind: enum ds_half_kind, util/half.h) ---- */
	void (*half_round)(int kind, float *x, size_t n);
	void (*half_pack)(int kind, uint16_t *dst, const float *src, size_t n);
	void (*half_unpack)(int kind, float *dst, const uint16_t *src, size_t n);
	/* dst = src rounded to bf16 values (dst may be src) and h its bits, in
	 * one pass where a rounding pass and a pack make two (util/half.h's
	 * ds_bf16_round_pack_n); a host backend's, for its bf16 copies (NULL
	 * on cuda, as the bf16 storage entries below) */
	void (*half_round_pack)(float *dst, uint16_t *h, const float *src, size_t n);
	/* the engine's 16-bit gradients: acc (16-bit, kind) = acc + g, added in
	 * fp32 and rounded once (its hadd) */
	void (*half_add)(int kind, uint16_t *acc, const float *g, int64_t n);
	/* p (16-bit, n) in place: widen from `from`; unless f is 1, round to
	 * `cast` (DS_HALF_NONE: no rounding), times f, round to `cast` again;
	 * pack as `to`; nothing when from == to and f is 1 (its hrecast: the
	 * 16-bit reduction's pre- and postscale) */
	void (*half_recast)(uint16_t *p, int64_t n, int from, int cast, float f, int to);
	/* acc[0..n) += g, then rounded to kind (DS_HALF_NONE: kept fp32): a
	 * 16-bit model's micro-step gradients held in fp32 (accumulate_half) */
	void (*accumulate)(int kind, float *acc, const float *g, int64_t n);

	/* ---- matrix products ----
	 * gemm: C (M,N) = alpha op(A) op(B) + beta C, cblas_sgemm's row-major
	 * arguments (ta/tb nonzero: transposed), beta 0 overwrites C; with bt a
	 * batch of such products (gemm_bf16.h's struct ds_gemm_bf16_batch,
	 * NULL: one).  mm is the run's enum ds_bf16_mode, or -1 for fp32: a
	 * bf16 mode lets the backend round A and B to bf16 and accumulate in
	 * fp32 where it chose to for the shape; the choice depends on the
	 * shape, the machine and the build only, so a run repeats its results.
	 * DS_GEMM_BF16_CR in bt->flags: C is left rounded to bf16 values (alpha
	 * op(A) op(B) + beta C rounded once, bit for bit the product without the
	 * flag and then half_round(bf16) over every entry's M x N, the gap
	 * beyond N untouched), in any mode: dstk's kernel rounds as it stores,
	 * the other implementations run that pass themselves.  bt->a16/b16
	 * (bf16 copies of A, B) are read instead of converting where the
	 * backend converts (oneDNN on cpu); gemm_hints says where.  Where a
	 * copy is given, the fp32 operand is never read and may be stale (the
	 * model's backward keeps what only products read in bf16): a product
	 * that runs on sgemm unpacks the copy (cpu; check() reports running
	 * out of memory for it). */
	void (*gemm)(int mm, const struct ds_gemm_bf16_batch *bt, int ta, int tb, int M, int N, int K, float alpha,
		     const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
	/* gemm for row chunks of one product against one B: same says B is
	 * unchanged since the previous call (a bf16 copy may be reused); every
	 * chunk is planned for the shape of the first, M0 rows; a16, b16 (or
	 * NULL): bf16 copies of A and B, as bt->a16/b16 of gemm (with b16 there
	 * is nothing to keep; a16 is read only with b16). */
	void (*gemm_keep_b)(int mm, int same, int M0, int ta, int tb, int M, int N, int K, float alpha, const float *A,
			    int lda, const float *B, int ldb, const uint16_t *a16, const uint16_t *b16, float beta,
			    float *C, int ldc);
	/* Whether a bf16 mode's product of this shape (count > 1: a batch of
	 * that many) reads the bf16 copies gemm is given instead of converting
	 * its operands: 2 when a copy made for two products pays for itself
	 * (oneDNN on cpu), 1 when copies pay only where the caller holds them
	 * already (dstk's kernels, which pack from them at half the bytes), 0
	 * when they would go unread. */
	int (*gemm_hints)(int mm, int count, int M, int N, int K);
	/* Whether the head's three products (logits (N,V) = A (N,C) B^T and
	 * their two gradients) run with bf16 logits in one go: a nonzero
	 * backend token for gemm16, or 0 (the caller takes the fp32 chunks).
	 * The caller keeps those logits dense (row stride V), which oneDNN's
	 * AMX kernel needs. */
	int (*head16)(int mm, int N, int V, int C);
	/* gemm with A and/or C in bf16 (DS_GEMM_BF16_A16/C16), token from
	 * head16, b16 B's bf16 copy or NULL: 0, or -1 when it cannot (nothing
	 * written). */
	int (*gemm16)(int token, unsigned flags, int ta, int tb, int M, int N, int K, float alpha, const void *A,
		      int lda, const float *B, int ldb, const uint16_t *b16, float beta, void *C, int ldc);
	/* What a bf16 mode means here: 0, or -1 with why (mode not possible). */
	int (*mm_check)(int mode, char *why, size_t whysz);
	/* One line on what mode does here; 1 when some products run in bf16. */
	int (*mm_plan)(int mode, char *buf, size_t n);

	/* ---- the GPT kernels: kernels/cpu/gpt_kernels.h's contracts ----
	 * r16 (layernorm, causal softmax, activation, add): nonzero leaves the
	 * output (out, dinp, att, datt) rounded to bf16 values, bit for bit the
	 * kernel and then half_round(bf16) over it (the ds_kernel_*_r
	 * variants: rounded row by row as written on cpu; the kernel and the
	 * rounding launcher on cuda); 0: the plain kernel. */
	void (*dropout)(float *x, int64_t n, const struct ds_rng *g, float p);
	void (*embed_forward)(float *out, const int32_t *tok, const float *wte, const float *pos, int B, int T, int C);
	void (*embed_backward)(float *dwte, float *dpos, const float *dout, const int32_t *tok, int B, int T, int C);
	void (*vocab_embed_forward)(float *out, const int32_t *tok, const float *wte_l, int v0, int rows, int B, int T,
				    int C);
	void (*pos_add)(float *out, const float *pos, int B, int T, int C);
	void (*vocab_embed_backward)(float *dwte_l, float *dpos, const float *dout, const int32_t *tok, int v0,
				     int rows, int B, int T, int C);
	void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *w,
				  const float *b, int64_t N, int C, float eps, int r16);
	void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout, const float *inp,
				   const float *w, const float *mean, const float *rstd, int64_t N, int C, int r16);
	void (*rmsnorm_forward)(float *out, float *rms, float *inv, const float *inp, const float *w, int64_t N,
				int C, float eps);
	void (*rmsnorm_backward)(float *dinp, float *dw, const float *dout, const float *inp, const float *w,
				 const float *rms, const float *inv, int64_t N, int C);
	void (*bias_fill)(float *out, const float *b, int64_t N, int OC);
	void (*bias_add)(float *out, const float *b, int64_t N, int OC);
	void (*bias_backward)(float *db, const float *dout, int64_t N, int OC);
	/* out (n) = a + b, out may be a or b (the residual adds); r16 as above */
	void (*add)(float *out, const float *a, const float *b, int64_t n, int r16);
	void (*rotary)(float *qkv, const float *cs, const float *sn, int B, int T, int C, int NH, int rd,
		       int inverse);
	void (*causal_softmax_forward)(float *att, int B, int NH, int T, int r16);
	void (*attention_dropout_h0)(float *attd, const float *att, int B, int NH, int h0, int T, float p,
				     const struct ds_rng *gs);
	void (*causal_softmax_backward_h0)(float *datt, const float *att, int B, int NH, int h0, int T, float scale,
					   float p, const struct ds_rng *gs, int r16);
	/* The softmax of a bf16 run that keeps P's bf16 copy, written as it
	 * goes (f32: P in fp32 too, else att only read), and its backward (no dropout) from that copy, dP rounded as
	 * read, dS into ds16 or (NULL) datt: gpt_kernels.h's
	 * ds_kernel_causal_softmax_forward16/backward16.  Host backends whose
	 * gemm_hints can be nonzero only (the model calls them only where it
	 * keeps such copies); NULL on cuda. */
	void (*causal_softmax_forward16)(float *att, uint16_t *att16, int B, int NH, int T, int f32);
	void (*causal_softmax_backward16)(float *datt, const uint16_t *att16, uint16_t *ds16, int B, int NH, int T,
					  float scale);
	/* The norm's and the activation's outputs in bf16 alone, for a bf16
	 * run whose products read them only through that copy, the
	 * activation's input's bits too, and its backward reading them and
	 * writing dinp's bits beside it (gpt_kernels.h's
	 * ds_kernel_layernorm_forward16, ds_kernel_act_forward16,
	 * ds_kernel_act_backward16); host backends with bf16 copies only, as
	 * above. */
	void (*layernorm_forward16)(uint16_t *out16, float *mean, float *rstd, const float *inp, const float *w,
				    const float *b, int64_t N, int C, float eps);
	void (*act_forward16)(uint16_t *out16, uint16_t *in16, const float *inp, int64_t N, int F, int act);
	void (*act_backward16)(float *dinp, uint16_t *d16, const float *dout, const uint16_t *inp16, int64_t N, int F,
			       int act);
	/* The bias gradient from dout's bf16 bits (gpt_kernels.h's
	 * ds_kernel_bias_backward16), where only that copy of dout is kept
	 * rounded; host backends with bf16 copies only, as above. */
	void (*bias_backward16)(float *db, const uint16_t *dout16, int64_t N, int OC);
	/* layernorm_backward with r16 1, the input from its bits where inp16
	 * is not NULL and dinp's bits into d16 where it is not NULL, and add
	 * with r16 1 writing out's bits too (ds_kernel_layernorm_backward16,
	 * ds_kernel_add16); host backends with bf16 copies only, as above. */
	void (*layernorm_backward16)(float *dinp, uint16_t *d16, float *dw, float *db, const float *dout,
				     const float *inp, const uint16_t *inp16, const float *w, const float *mean,
				     const float *rstd, int64_t N, int C);
	void (*add16)(float *out, uint16_t *out16, const float *a, const float *b, int64_t n);
	void (*act_forward)(float *out, const float *inp, int64_t N, int F, int act, int r16);
	void (*act_backward)(float *dinp, const float *dout, const float *inp, int64_t N, int F, int act, int r16);
	double (*xent_forward)(float *lse, const float *logits, const int32_t *targets, int64_t N, int V, int Vp);
	void (*xent_backward)(float *logits, const float *lse, const int32_t *targets, int64_t N, int V, int Vp,
			      float dscale);
	double (*xent_forward16)(float *lse, uint16_t *logits, const int32_t *targets, int64_t N, int V, int Vp);
	void (*xent_backward16)(uint16_t *logits, const float *lse, const int32_t *targets, int64_t N, int V, int Vp,
				float dscale);
	void (*xent_vp_max)(float *mx, float *pred, const float *logits, const int32_t *targets, int v0, int64_t N,
			    int Vl, int Vpl);
	void (*xent_vp_sumexp)(float *se, const float *logits, const float *mx, int64_t N, int Vl, int Vpl);
	void (*xent_vp_backward)(float *logits, const float *lse, const int32_t *targets, int v0, int64_t N, int Vl,
				 int Vpl, float dscale);

	/* ---- the engine's step on flat fp32 buffers (lib/engine) ----
	 * x, g, p and the optimizer's states are the backend's memory; what
	 * is said to be host memory is the caller's. */
	/* x[0..n) *= f (nothing when f is 1) */
	void (*scale)(float *x, int64_t n, float f);
	/* acc (2 doubles, host): acc[0] += the sum of x[0..n)^2 in double over
	 * fixed chunks added in order (the same bits every run; cpu: lib/optim's
	 * ds_clip_sumsq), acc[1] = 1 when an element is inf or nan (else kept) */
	void (*sumsq)(double *acc, const float *x, int64_t n);
	/* Adam/AdamW or SGD over o's shard, lib/optim's ds_optim_step with o's
	 * states in the backend's memory: p -= update(g * grad_mul), o->step
	 * advanced.  0, or DS_EINVAL (bad hyper-parameters, Lamb). */
	int (*optim_step)(struct ds_optim *o, float *p, const float *g, float grad_mul, struct ds_err *err);
	/* Lamb in two phases, lib/optim's ds_lamb_partial_norms (sums: host,
	 * 2 * nranges doubles) and ds_lamb_apply (sums reduced, host; advances
	 * o->step).  0 or a DS_E* code. */
	int (*lamb_partial)(struct ds_optim *o, const float *p, const float *g, float grad_mul,
			    const struct ds_range *ranges, int nranges, double *sums, struct ds_err *err);
	int (*lamb_apply)(struct ds_optim *o, float *p, const struct ds_range *ranges, int nranges, const double *sums,
			  struct ds_err *err);

	/* ---- collectives on its buffers (lib/comm) ----
	 * Fill dm (comm.h's struct ds_comm_devmem, zeroed by the caller) with
	 * this process's device, stream, synchronous copies, pinned host
	 * memory, is_dev (true for memory alloc() returned, offsets into it
	 * included) and the device's name, for ds_comm_set_devmem; after
	 * init().  0 or DS_E*.  NULL on a host backend (its buffers are host
	 * memory: the host collectives take them as they are). */
	int (*comm_devmem)(struct ds_comm_devmem *dm, struct ds_err *err);

	/* ---- the backend's memory ----
	 * mem_info: its free and total bytes now (cuda: cudaMemGetInfo; cpu:
	 * the host's, sysconf): 0, or a DS_E* code.  mem_held: what alloc
	 * holds now and its high-water mark since the last reset (reset
	 * nonzero restarts it at the bytes held now; cpu: util/mem.h's
	 * allocator), the device side of the memory plan's check */
	int (*mem_info)(size_t *free_bytes, size_t *total_bytes, struct ds_err *err);
	void (*mem_held)(size_t *held, size_t *peak, int reset);
	/* Host memory the device copies to and from directly (cuda:
	 * cudaMallocHost, page-locked; cpu: libds's allocator, its memory is
	 * the host's already): what ZeRO-Offload keeps on the host.  NULL when
	 * out of memory; not counted by mem_held (the caller counts it). */
	void *(*pinned_alloc)(size_t bytes);
	void (*pinned_free)(void *p);
};

extern const struct ds_compute_ops ds_compute_cpu;

/* An optimizer (optim/optim.h) over n elements for backend ops: on a host
 * backend ds_optim_create's; else its states in ops's memory, or with
 * pinned in its pinned host memory (ZeRO-Offload), zeroed, each of at
 * least one element as ds_optim_create's.  0; DS_ENOMEM with *failed the
 * state that did not come (the caller names it: (*o)->state_names[k]);
 * or ds_optim_create's errors in err.  *o, when set, goes to
 * ds_compute_optim_destroy with the same ops and pinned. */
struct ds_optim_params;
int ds_compute_optim_create(const struct ds_compute_ops *ops, int pinned, struct ds_optim **o,
			    const struct ds_optim_params *hp, size_t n, int *failed, struct ds_err *err);
void ds_compute_optim_destroy(const struct ds_compute_ops *ops, int pinned, struct ds_optim *o);

/* The cuda backend (compute_cuda.c, only in builds with CUDA): in
 * ds_compute_all there, chosen by --device cuda only (not auto, yet); the
 * emulated tests hand it to the engine (ds_engine_opts.compute) directly. */
extern const struct ds_compute_ops ds_compute_cuda;

/* The backends, NULL-terminated (cpu first). */
extern const struct ds_compute_ops *const ds_compute_all[];

/* --device / dstk.device */
enum ds_device_kind { DS_DEVICE_CPU = 0, DS_DEVICE_CUDA, DS_DEVICE_AUTO };

/* The kind "cpu", "cuda" or "auto" names, or -1. */
int ds_device_parse(const char *s);
const char *ds_device_name(int kind);

/* Facts the choice depends on (ds_compute_probe fills them). */
struct ds_compute_env {
	int cuda_built;       /* the build has CUDA (configure --with-cuda) */
	const struct ds_compute_ops *cuda;  /* the cuda backend of this build, NULL: none (no CUDA) */
	int device_count;     /* devices that answered (0: none) */
	char why_none[160];   /* when device_count is 0: why */
	const char *ompi_local_rank;    /* OMPI_COMM_WORLD_LOCAL_RANK, NULL when unset */
	const char *slurm_localid;      /* SLURM_LOCALID, NULL when unset */
};

/* This process's facts: the GPU probe of lib/app (only when asked is cuda:
 * a cpu run, and auto while it keeps to cpu, never touch CUDA) and the two
 * variables. */
void ds_compute_probe(struct ds_compute_env *env, int asked);

/* The local rank from the launcher's variables: OMPI_COMM_WORLD_LOCAL_RANK,
 * else SLURM_LOCALID, else 0.  The first one set must be a whole number
 * 0..65535: anything else is DS_EINVAL naming the variable. */
int ds_compute_local_rank(const char *ompi, const char *slurm, int *local_rank, struct ds_err *err);

/* The device rank's local_rank uses among device_count: local_rank %
 * device_count (ranks beyond the count share devices round-robin), -1
 * when device_count < 1 or local_rank < 0. */
int ds_compute_device_for(int local_rank, int device_count);

/* What a run asked for as kind gets on env: *ops the backend, *device
 * its device (-1 on cpu), why one line for the log ("device auto: cpu
 * (built without CUDA)").  Errors, nothing chosen (cpu), err what to do
 * without naming the flag or key (the caller's prefix):
 *   cuda on a build without CUDA            DS_ENOTSUP naming --with-cuda (exit 3)
 *   cuda with no cuda backend in this build DS_ENOTSUP (exit 3)
 *   cuda for a run it does not cover        DS_ENOTSUP naming what (needs; NULL: none)
 *   cuda while no device answers            DS_EIO (exit 1: the machine, not the input)
 *   cuda with a garbage local rank          DS_EINVAL (exit 2)
 * auto is cpu, why saying the reason cuda is not had or, where it would be
 * ("device auto: cpu (the cuda backend has not yet run on a GPU; ask for
 * it with --device cuda)"): the backend has run on the emulation only, and
 * auto must not move runs onto it unasked.  auto never errs. */
int ds_compute_select(int kind, const struct ds_compute_env *env, const struct ds_compute_needs *needs,
		      const struct ds_compute_ops **ops, int *device, char *why, size_t whysz, struct ds_err *err);

#endif
