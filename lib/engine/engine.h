/* engine.h - the training engine: flat buffers, ZeRO partitioning,
 * gradient accumulation, reduction, clipping and the optimizer step.
 *
 * Layout (DESIGN.md): parameters, gradients and optimizer states live in
 * flat fp32 buffers in registry order, split into the model's segments
 * (embeddings, one per layer, final norm/head).  Each segment is padded to
 * a multiple of world_size x 16 elements; rank r owns the r-th slice of
 * every segment.  One optimizer runs per segment on the slice this rank
 * updates: the whole segment at stage 0, the owned slice at stages >= 1.
 * The grad norm is taken over owned slices and summed across ranks, so it
 * is the same number at every stage.  At stage 2 (W > 1) gradients are
 * held only for the owned slices: each segment's gradients accumulate in a
 * gather buffer during its backward and are reduce-scattered in the model's
 * post hook every micro-step.  At stage 3 parameters are held only for the
 * owned slices too, allgathered into a buffer just before a segment's
 * forward or backward (the next one prefetched non-blocking) and released
 * after.
 *
 * Samples: at step s the global batch is samples [base, base + TB) of the
 * data order; micro-step a of rank r trains on rows base + a*MB*W + r*MB ..
 * + MB, and dropout is keyed by those global indices, so a run gives the
 * same losses whatever the world size and micro-batch split (to fp32
 * rounding of the reductions).
 *
 * Mixed precision (opts.half = fp16 or bf16; engine_mixed comment in
 * engine.c): the fp32 buffers above are the master weights and the
 * optimizer works on them; the model's parameters are a 16-bit copy of
 * them, refreshed after every step and expanded to fp32 per segment just
 * before its forward or backward, so the passes see exactly 16-bit
 * weights.  With W > 1 at stages >= 1 the fp32 master is kept only for the
 * owned slices (as DeepSpeed's fp32 partitions): at stages 1-2 the updated
 * slice is rounded into the whole 16-bit copy and the 16-bit slices are
 * allgathered after the step; at stage 3 the 16-bit slices are what is
 * allgathered before each pass.  Each micro-step's gradients are rounded to
 * 16 bits and accumulated in 16 bits, held as 2-byte values in the model's
 * format (the whole flat buffer, or the owned slices at stages 2-3): the
 * model's backward writes fp32 into a per-segment widening buffer and the
 * post hook adds it to the held gradients in fp32, rounding the sum once.
 * With grad_accum_fp32 the held gradients are fp32 instead (4 bytes).
 * 16-bit gradients are reduced in the model's dtype by default (DeepSpeed's
 * communication_data_type default: pre/postscale and every pairwise sum
 * rounded to 16 bits, lib/comm's 16-bit sum ops), or with comm_fp32 widened
 * to fp32, summed there and rounded back once; fp32-held gradients are
 * reduced in fp32.  The step (norm, non-finite check, unscaling, clipping,
 * the optimizer) reads the 16-bit gradients widened to fp32 one segment at
 * a time through a gradient slot.  fp16 multiplies the
 * loss by the scaler's scale before backward; an overflow anywhere (inf or
 * nan in any rank's gradients) skips the step and updates the scaler
 * (spec §5: before unscaling); otherwise the gradients are divided by
 * scale * max(1, clip factor) as DeepSpeed's unscale_and_clip_grads does.
 *
 * 3D parallelism (issue 19; tp x pp x dp ranks, comm/topo.h): the engine
 * splits the world into its groups.  ZeRO runs over the data-parallel
 * group (W above is dp, r the data-parallel rank); each rank's flat buffers
 * hold its tensor-parallel shards (model/registry.h) of the segments its
 * pipeline stage runs (the stage part of DeepSpeed's partition,
 * model/pipe.h; the last stage also holds the embedding for a tied head);
 * the model's tensor-parallel collectives are its hooks over the
 * tensor-parallel group.  With pp > 1 a step's GA micro-batches run as
 * DeepSpeed's 1F1B TrainSchedule (pipe.h), the tied embedding's gradient
 * is summed between the first and last stage before the data-parallel
 * reduction, and only ZeRO stages 0-1 are allowed (DeepSpeed's pipeline
 * engine refuses 2 and 3).  The gradient norm counts every logical element
 * once (replicated tensors on tensor-parallel rank 0 only, the tied copy
 * not at all) and the loss is the last stage's, averaged over dp.
 *
 * The engine never touches files but ZeRO-Infinity's swap files: with
 * offload (struct ds_engine_offload, engine/offload.h) the fp32 master
 * weights and optimizer states of the update ranges live in swap files
 * (lib/io/swap.h) and the step streams them sub-group by sub-group, and
 * at stage 3 the offloaded segments' parameter slices are read from swap
 * files just before their gather.  Checkpoints go through the accessors
 * below, driven by the layer above (lib/driver).
 */
#ifndef DS_ENGINE_ENGINE_H
#define DS_ENGINE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "comm/topo.h"
#include "config/model.h"
#include "io/aio.h"
#include "model/gpt.h"
#include "optim/onebit.h"
#include "optim/optim.h"
#include "optim/scaler.h"
#include "util/err.h"
#include "util/half.h"

/* ZeRO-Infinity: offload_optimizer / offload_param device "nvme", with
 * DeepSpeed's meanings (engine/offload.h says what goes where), and
 * ZeRO-Offload's offload_optimizer device "cpu" (cpu below). */
struct ds_engine_offload {
	int optimizer;              /* stages 1-3: optimizer states (and a 16-bit run's fp32 master) on NVMe */
	int param;                  /* stage 3: parameter slices on NVMe */
	const char *opt_path;       /* offload_optimizer.nvme_path (borrowed) */
	const char *param_path;     /* offload_param.nvme_path (borrowed) */
	int64_t sub_group_size;     /* elements the optimizer step streams at a time */
	int opt_buffer_count;       /* optimizer swap buffers of sub_group_size elements */
	int pipeline_read;          /* read the next sub-group while this one is updated */
	int pipeline_write;         /* write the last sub-group while this one is updated */
	int param_buffer_count;     /* parameter swap buffers */
	int64_t param_buffer_size;  /* elements per parameter swap buffer */
	int64_t max_in_cpu;         /* parameter elements kept in memory (the first segments') */
	struct ds_aio_opts aio;     /* the config's "aio" section */
	/* ZeRO-Offload: offload_optimizer.device "cpu" at stages 1-3.  On a
	 * device backend the optimizer states (and a 16-bit run's fp32 master
	 * weights; an fp32 run keeps an fp32 copy of the ranges it updates)
	 * live in the backend's pinned host memory and the optimizer step runs
	 * on the host with the cpu backend's SIMD loops: each segment's
	 * gradient comes over, is stepped, and its new values go back (a
	 * 16-bit run's as its 16-bit copy, packed on the host: half the
	 * bytes).  A host backend's memory is the host's already: nothing
	 * changes there. */
	int cpu;
	/* ZeRO-Offload's offload_param.device "cpu" at stage 3.  On a device
	 * backend in a 16-bit run the 16-bit parameters of every segment at
	 * or above stage3_param_persistence_threshold (DeepSpeed's partitioned
	 * ones) live in pinned host memory: each rank's slice is copied to the
	 * device just before its allgather (a whole segment, where it is not
	 * partitioned: on one rank, just before it is widened), and the step
	 * writes its 16-bit copy there.  An fp32 run's parameters are its
	 * master weights: they move only with cpu above (the host step
	 * updates them in place there), else stay on the device; a host
	 * backend moves nothing. */
	int param_cpu;
};

struct ds_compute_ops;

struct ds_engine_opts {
	struct ds_model_config model;  /* copied */
	int micro_batch;               /* MB, rows per rank per micro-step */
	int grad_accum;                /* GA */
	int seq_length;                /* T (0: the model's seq_length) */
	struct ds_optim_params optim;  /* lr is the base; the caller sets lr per step */
	double gradient_clipping;      /* 0: off */
	int zero_stage;                /* 0..3 */
	int64_t reduce_bucket_size;    /* elements per gradient reduction, stages 0-1 (0: the whole flat buffer at once) */
	int64_t allgather_bucket_size; /* elements per parameter allgather (0: one per segment) */
	int prescale_gradients;        /* divide by W before the reduction */
	double gradient_predivide_factor; /* f of spec §6 (1 = plain mean) */
	uint64_t seed;                 /* parameter init and dropout */
	int checkpointing;             /* activation checkpointing per layer */
	/* stage 3 (DeepSpeed's meanings, in elements): gather the next
	 * segment ahead when it is at most prefetch_bucket_size and the
	 * gathered total stays within max_live_parameters; segments smaller
	 * than param_persistence_threshold are not partitioned */
	int64_t stage3_prefetch_bucket_size;
	int64_t stage3_max_live_parameters;
	int64_t stage3_param_persistence_threshold;
	/* zero_optimization.overlap_comm (W > 1): start each gradient
	 * reduction non-blocking as soon as backward has finished what it
	 * covers - a bucket of the flat buffer (stages 0-1, last micro-step)
	 * or a segment (stages 2-3, every micro-step) - and wait for it only
	 * when its buffer or its result is needed.  Same sums, same losses. */
	int overlap_comm;
	/* mixed precision: the model's dtype (DS_HALF_NONE: fp32), whether
	 * gradients accumulate in fp32 (data_types.grad_accum_dtype "fp32")
	 * rather than in that dtype, and the fp16 loss scaler (copied; kind
	 * DS_SCALER_NONE for fp32 and bf16) */
	enum ds_half_kind half;
	int grad_accum_fp32;
	/* a 16-bit model with 16-bit gradients: reduce them in fp32
	 * (communication_data_type "fp32") rather than in the model's dtype
	 * (DeepSpeed's default); ignored otherwise */
	int comm_fp32;
	int bf16_matmul;               /* bf16: enum ds_bf16_mode of the products (dstk.bf16_matmul; 0 auto) */
	/* the compute backend the model runs on (lib/compute/compute.h;
	 * NULL: cpu) and its device (ignored by cpu), chosen by the driver */
	const struct ds_compute_ops *compute;
	int device;
	/* communication_data_type fp16/bf16 of an fp32 model (DS_HALF_NONE:
	 * reduce in fp32; ignored for a 16-bit model): each gradient
	 * reduction casts to that type, scales and sums there (the 16-bit sum
	 * ops of lib/comm) and casts the result back to fp32, as DeepSpeed's
	 * allreduce_bucket does; at W = 1 the same casts round the gradients */
	enum ds_half_kind comm_half;
	struct ds_scaler scaler;
	/* 3D parallelism: tensor- and pipeline-parallel sizes (1: none; the
	 * world must be a multiple of tp * pp), the pipeline partition method
	 * ("parameters", "uniform", "type:REGEX"; model/pipe.h), DeepSpeed's
	 * pipeline.pipe_partitioned / grad_partitioned, and
	 * activation_checkpointing.partition_activations (with checkpointing
	 * and tp > 1: each rank keeps 1/tp of every checkpointed input) */
	int tp, pp;
	char pipe_partition[64];
	int pipe_partitioned, grad_partitioned;
	int partition_activations;
	struct ds_engine_offload offload;
};

/* MoE (opts.model.moe): experts are spread over moe.ep_size ranks (which
 * divides the world size) and their segments sharded and reduced over the
 * expert-data-parallel group, as DeepSpeed's _create_expert_and_data_parallel
 * lays them out: ep consecutive ranks exchange tokens, ranks equal modulo
 * ep hold the same experts.  ZeRO stage 3 is refused as DeepSpeed does.
 * Gradients, norms and clipping are those of the whole model on one rank.
 *
 * Fill o with defaults (stage 0, GA 1, no clipping, factor 1, seed 1234,
 * DeepSpeed's stage-3 defaults 5e7 / 1e9 / 1e5, no offload with
 * DeepSpeed's offload and aio defaults). */
void ds_engine_opts_init(struct ds_engine_opts *o);   /* also tp = pp = 1, partition "parameters", partitioned sends */

/* What one optimizer step did. */
struct ds_engine_step {
	double loss;        /* mean loss over the global batch */
	double grad_norm;   /* global L2 norm of the averaged gradient, before clipping */
	double lr;          /* learning rate used */
	int skipped;        /* 1 if the step was skipped (non-finite gradients) */
	int overflow;       /* fp16 with a dynamic scaler: the skip was an overflow the scaler handled */
	double loss_scale;  /* the scaler's scale after this step (1 without fp16) */
	double t_fwd, t_bwd, t_reduce, t_step;  /* seconds on this rank */
	/* gradient reductions: wall time with at least one in flight (start to
	 * the first test or wait that saw it finished) and time spent blocked
	 * on them; equal without overlap_comm, the difference was hidden */
	double t_red_flight, t_red_wait;
	/* Mixture of Experts (0 for a dense model): the mean over the global
	 * batch's micro-steps of the aux loss summed over MoE layers (before
	 * moe.loss_coeff; the loss above is the language model's alone), the
	 * fraction of token choices dropped for capacity, and the bytes this
	 * rank sent in the experts' all-to-alls */
	double moe_aux, moe_dropped, moe_a2a_bytes;
	double t_p2p;       /* pipeline: seconds in sends and receives (waiting for a neighbour stage included) */
	/* ZeRO-Infinity: bytes read from and written to the swap files in
	 * this step (passes and optimizer) and the time blocked on them */
	uint64_t swap_read, swap_written;
	double t_swap_wait;
	double t_swap_read_busy, t_swap_write_busy;  /* seconds reads (writes) were in flight */
	double t_swap_io_busy;  /* seconds some read or write was: the swap I/O's share of the step */
};

struct ds_engine;

/* Build the model, allocate buffers (ds_alloc) and initialise parameters
 * from opts->seed.  comm is borrowed and must outlive the engine.
 * Returns 0, DS_EINVAL (bad option, names it) or DS_ENOMEM. */
int ds_engine_create(struct ds_engine **out, const struct ds_engine_opts *opts, struct ds_comm *comm,
		     struct ds_err *err);
void ds_engine_destroy(struct ds_engine *e);  /* accepts NULL */

/* The compute backend the engine's buffers belong to (opts.compute, or
 * cpu; borrowed).  When its host flag is 0 (a device), the accessors
 * below show host copies of tensor i while it is the current checkpoint
 * piece (ds_engine_ckpt_piece(e, i, 0, writing)) and nothing for other
 * tensors; what the caller wrote through them goes to the device when
 * the next piece is brought in, by ds_engine_params_loaded or
 * ds_engine_sync_params, or before the next step or evaluation. */
const struct ds_compute_ops *ds_engine_compute(const struct ds_engine *e);
/* A device backend's communicator (the engine's copy of the one it was
 * created with, its device path set: ds_comm_backend and
 * ds_comm_devpath_why say which and why), NULL on a host backend. */
const struct ds_comm *ds_engine_dev_comm(const struct ds_engine *e);

/* What a run of opts asks of a compute backend beyond the dense fp32
 * model (compute.h's needs): the one list that ds-train's --device choice
 * and ds_engine_create's refusal both ask uncovered() about. */
struct ds_compute_needs;
void ds_engine_compute_needs(const struct ds_engine_opts *opts, struct ds_compute_needs *needs);

/* This rank's model: its tensor-parallel shards (the registry's shapes are
 * the shard's, gshape the logical tensor's). */
const struct ds_gpt *ds_engine_model(const struct ds_engine *e);
/* The job's layout and this rank's coordinates (borrowed). */
const struct ds_topo *ds_engine_topo(const struct ds_engine *e);
/* This rank's stage part, and the stage bounds over the pipeline layer
 * list (pp + 1 entries, model/pipe.h; NULL when pp is 1). */
const struct ds_gpt_part *ds_engine_part(const struct ds_engine *e);
const int *ds_engine_stage_bounds(const struct ds_engine *e);
/* Seconds this rank spent recomputing checkpointed layers' forward in
 * backward since the engine was created (0 without checkpointing). */
double ds_engine_recompute_seconds(const struct ds_engine *e);
int64_t ds_engine_num_params(const struct ds_engine *e);   /* of the whole (logical) model */
/* Optimizer steps taken (restored by ds_engine_set_steps). */
int64_t ds_engine_steps(const struct ds_engine *e);

/* What one optimizer step takes. */
struct ds_engine_batch {
	const int32_t *tokens;  /* GA*MB rows of T+1 token ids (inputs the first T, targets the last T) */
	int64_t base;           /* global sample index of the step's first sample (header comment) */
	int64_t step;           /* the step's number, 1-based; keys dropout */
	double lr;              /* the schedule's values for this step: lr, */
	int has_betas;          /* and, when set, Adam's betas */
	double beta1, beta2;
};

/* One optimizer step on this rank's rows in->tokens; what it did in *res.
 * Returns 0 or a DS_E* code. */
int ds_engine_train_step(struct ds_engine *e, const struct ds_engine_batch *in, struct ds_engine_step *res,
			 struct ds_err *err);

/* Mean loss of `rows` rows (T+1 tokens each) without dropout or gradients,
 * averaged over all ranks' rows (each rank passes its own). */
int ds_engine_eval(struct ds_engine *e, const int32_t *tokens, int rows, double *loss, struct ds_err *err);

/* ---- state for checkpoints --------------------------------------------- */

/* Offloaded state (ZeRO-Infinity) is reached a piece at a time: tensor i's
 * master weights and optimizer states come in ds_engine_ckpt_pieces(e, i)
 * pieces (1 without offload).  ds_engine_ckpt_piece(e, i, j, writing)
 * brings piece j into host memory; until the next piece call the
 * accessors below return piece j's part of what they return without
 * offload (the in-memory parameters of an offloaded tensor come whole with
 * piece 0 and empty after).  writing: what the caller writes through them
 * is stored when the next piece is brought in, or by
 * ds_engine_params_loaded.  On a device backend (ds_engine_compute) a
 * tensor is one piece, copied to and from the device the same way.
 * Returns 0, DS_EIO (a swap file, the device) or DS_ENOMEM. */
int ds_engine_ckpt_pieces(struct ds_engine *e, int i);
int ds_engine_ckpt_piece(struct ds_engine *e, int i, int j, int writing, struct ds_err *err);

/* Tensors are the registry's of ds_engine_model: with tensor parallelism
 * this rank's shard (element indices below are the shard's; the driver
 * maps them to logical ones, ds_gpt_tensor_global).  A tensor of a
 * segment this pipeline stage does not hold has nothing here.
 *
 * Pointer to tensor i's parameters (the whole tensor), or NULL when this
 * rank holds only a slice of it (stage 3, or a 16-bit run at stages 1-2
 * with W > 1: use ds_engine_param_range) or none. */
float *ds_engine_param(struct ds_engine *e, int i);

/* 1 when tensor i's fp32 parameters are partitioned across ranks (stage
 * 3; fp16/bf16 at stages 1-2 with W > 1; the same answer on every rank),
 * else 0. */
int ds_engine_param_partitioned(const struct ds_engine *e, int i);

/* The parameters of tensor i this rank holds: a pointer to element *begin
 * and the range [*begin, *end) (the whole tensor unless partitioned, then
 * the ZeRO slice, possibly empty).  Loading writes through it. */
float *ds_engine_param_range(struct ds_engine *e, int i, int64_t *begin, int64_t *end);

/* The slice [*begin, *end) of tensor i (element indices within the tensor)
 * that this rank writes to a checkpoint: its ZeRO slice of the tensor's
 * segment (possibly empty), the same split whatever the stage; empty for
 * a tensor held elsewhere, for the last stage's copy of a tied embedding
 * and for a replicated tensor on tensor-parallel ranks but 0, so that the
 * ranks together write every logical element once. */
void ds_engine_save_slice(const struct ds_engine *e, int i, int64_t *begin, int64_t *end);

/* Optimizer state `name` ("exp_avg", ...) of tensor i: a pointer to element
 * *begin of the tensor, and the range [*begin, *end) this rank holds (the
 * whole tensor at stage 0, the owned slice otherwise).  NULL when the
 * optimizer has no such state. */
float *ds_engine_state(struct ds_engine *e, int i, const char *name, int64_t *begin, int64_t *end);

/* Names of the optimizer's states (count, and name k). */
int ds_engine_num_states(const struct ds_engine *e);
const char *ds_engine_state_name(const struct ds_engine *e, int k);

/* The 1-bit optimizer of a OneBitAdam/ZeroOneAdam/OneBitLamb run (its
 * counters, per-tensor values and this rank's error feedback, for
 * checkpoints), else NULL.  Borrowed.  Its element states are the ones
 * above; its flat layout is the engine's (a tensor's elements through
 * ds_engine_state). */
struct ds_onebit *ds_engine_onebit(struct ds_engine *e);

/* The loss scaler (borrowed; a checkpoint saves it) and its replacement
 * with a loaded state (copied). */
const struct ds_scaler *ds_engine_scaler(const struct ds_engine *e);
void ds_engine_set_scaler(struct ds_engine *e, const struct ds_scaler *s);

/* Set the number of optimizer steps taken (after loading a checkpoint). */
void ds_engine_set_steps(struct ds_engine *e, int64_t steps);

/* After parameters were loaded slice by slice: make every rank's full
 * parameter copy whole again (allgather of the owned slices) and refresh
 * the 16-bit model copy from the master weights. */
int ds_engine_sync_params(struct ds_engine *e, struct ds_err *err);

/* After this rank wrote every parameter it holds (ds_engine_param_range):
 * refresh the 16-bit model copy from them.  Collective in fp16/bf16 runs
 * (W > 1, stages >= 1): the owned master slices are rounded and the 16-bit
 * slices allgathered into the whole 16-bit segments. */
int ds_engine_params_loaded(struct ds_engine *e, struct ds_err *err);

/* Bytes of model state this rank holds in memory (params, grads,
 * optimizer states, ZeRO-Offload's host copy and staging; not what lives
 * in swap files) and of activations/workspace. */
size_t ds_engine_state_bytes(const struct ds_engine *e);
size_t ds_engine_activation_bytes(const struct ds_engine *e);
/* ZeRO-Infinity: the host buffers between the swap files and the compute
 * (pinned on a GPU build) and the bytes of this rank's swap files. */
size_t ds_engine_swap_buffer_bytes(const struct ds_engine *e);
uint64_t ds_engine_nvme_bytes(const struct ds_engine *e);
/* ZeRO-Offload on a device backend: the pinned host bytes the engine
 * holds (optimizer states, the master, the step's staging); 0 otherwise. */
size_t ds_engine_pinned_bytes(const struct ds_engine *e);

#endif
