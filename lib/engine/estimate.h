/* estimate.h - the memory estimator: bytes one rank of a ds-train run
 * holds through ds_alloc, per category, from the configs alone (no buffer
 * is allocated).
 *
 * It follows the engine's real layout (engine.h), not an idealised one:
 * every segment is padded to a multiple of W*16 elements, one optimizer per
 * segment holds its states for the range this rank updates, stage 2 (W > 1)
 * keeps gradients only for the owned slices plus two whole-segment gather
 * buffers, stage 3 keeps parameters only for the owned slices of the
 * segments at or above stage3_param_persistence_threshold plus three
 * gather/prefetch buffers, and a reduce-scatter scratch of the largest
 * shard exists at every stage.  The bucketed allreduce and allgather of
 * stages 0-1 run in place on the flat buffers, so reduce_bucket_size and
 * allgather_bucket_size cost no memory here.  Transient buffers (Lamb's
 * partial norms, a checkpoint's staging tensor) and what MPI or the C
 * library allocate themselves are not counted.  fp16/bf16 (o->half): the
 * parameters row is the 16-bit model copy (2 bytes per held parameter), the
 * gradients row 2 bytes per held element unless they accumulate in fp32
 * (plus one fp32 bucket under communication when 16-bit gradients reduce
 * in fp32 at stages 0-1), and
 * the fp32 master weights count under optimizer_states, as DeepSpeed and
 * the ZeRO paper count them; with W > 1 at stages >= 1 the master is kept
 * for the owned slices only.  They also add the fp32 widening buffers
 * every segment passes through: 2 parameter (3 at stage 3 on W > 1)
 * and 2 gradient slots of the largest segment (plus 3 16-bit gather slots
 * at stage 3), under communication.
 *
 * 3D parallelism (o->tp, o->pp; W is the job's ranks): ZeRO pads and
 * splits over dp = W / (tp * pp); a rank holds its tensor-parallel shards
 * of the segments its pipeline stage runs (the first stage's copy of a
 * tied embedding also on the last), one activation workspace of its part
 * per pipeline buffer (max(2, min(pp - stage, GA)), DeepSpeed's
 * num_pipe_buffers) and, under communication, 4 (B, T, C) send/receive
 * buffers per pipeline buffer.  Stages differ: ds_engine_mem_estimate_stage
 * gives one stage's ranks, ds_engine_mem_estimate the stage that needs the
 * most (its number in pipe_stage).  ZeRO-Infinity (engine/offload.h):
 * what lives in swap files leaves the rows above (a 16-bit run's master
 * and the states with offload_optimizer nvme, offloaded segments'
 * parameter slices with offload_param nvme); swap_buffers holds the host
 * buffers between the files and the compute (pinned on a GPU build), and
 * nvme_bytes what the files hold, which is not host memory.
 */
#ifndef DS_ENGINE_ESTIMATE_H
#define DS_ENGINE_ESTIMATE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "util/err.h"

enum ds_engine_mem_cat {
	DS_MEM_PARAMS = 0,  /* parameters held (whole or the owned slices): fp32, or fp16/bf16 copy */
	DS_MEM_GRADS,       /* gradients held: fp32, or 16-bit in 16-bit runs */
	DS_MEM_OPTIM,       /* optimizer states (exp_avg, exp_avg_sq / momentum); + fp32 master in 16-bit runs */
	DS_MEM_COMM,        /* reduce-scatter scratch, stage-2/3 gather buffers */
	DS_MEM_ACT,         /* the model's activation workspace (ds_gpt_activation_bytes) */
	DS_MEM_OTHER,       /* input/target rows, ds-train's batch, optimizer headers */
	DS_MEM_SWAP,        /* ZeRO-Infinity's swap buffers (optimizer pool, 16-bit staging, parameter buffers) */
	DS_MEM_NCAT
};

/* One rank's bytes (every rank holds the same amounts). */
struct ds_engine_mem {
	int stage, world_size;
	int tp, pp, dp;              /* the layout (world_size = tp * pp * dp) */
	int pipe_stage;              /* the pipeline stage estimated */
	struct ds_gpt_part part;     /* what it runs */
	int pipe_buffers;            /* its workspaces (1 without pipelining) */
	int64_t num_params;          /* the model's elements, whole tensors (with ep > 1 this rank's experts only) */
	int64_t num_params_expert;   /* of them, experts' (MoE) */
	int64_t padded;              /* flat elements after padding each segment */
	int nseg, nseg_partitioned;  /* segments; of them parameter-partitioned (stage 3) */
	int nstates;                 /* optimizer states per element */
	size_t bytes[DS_MEM_NCAT];
	size_t model_state;          /* params + grads + optimizer states */
	size_t act_saved;     /* of bytes[DS_MEM_ACT], what forward keeps for backward (ds_gpt_activation_saved_bytes) */
	size_t total;                /* sum of every category */
	/* ZeRO-Infinity: bytes of this rank's swap files (offload_optimizer
	 * and offload_param nvme_path; not host memory) */
	uint64_t nvme_bytes, nvme_opt_bytes, nvme_param_bytes;
	int nvme_master;             /* the optimizer's files hold the fp32 master too (16-bit runs, fp32 offload_param) */
	int64_t sub_group;           /* elements per optimizer sub-group streamed (0: none) */
	int nsub_groups;
	int nseg_offloaded;          /* segments whose parameter slices are in swap files */
	int64_t param_buffer;        /* elements per parameter swap buffer (0: none) */
	/* Where each row lives (ds_engine_mem_place; all host until then:
	 * the cpu plan) */
	int device;                  /* 1: a device backend's plan (--device cuda) */
	int place[DS_MEM_NCAT];      /* enum ds_mem_place of each category */
	size_t pinned_staging;       /* the communicator's pinned staging (staged MPI path, W > 1) */
	size_t device_total;         /* the rows on the device */
	size_t host_total;           /* the rows in host memory, pinned included */
	size_t pinned_total;         /* of host_total, pinned (swap buffers, comm staging, ZeRO-Offload's row) */
	/* ZeRO-Offload (offload.cpu, stages 1-3): the optimizer_states row of
	 * the host plan, and what a device plan adds to it (an fp32 run's host
	 * copy of its update ranges, one segment's gradient staging in fp32
	 * and a 16-bit run's in 16 bits), all pinned host memory there;
	 * offloaded: the device plan moved it */
	size_t optim_host, offload_extra;
	int offloaded;
	/* offload_param cpu (stage 3, 16-bit runs): the 16-bit parameters of
	 * the nseg_param_host segments at or above the persistence threshold
	 * (param_host bytes) and the device staging that carries them over
	 * (param_host_extra, communication); params_all / comm_all: those rows
	 * of the host plan.  params_pinned: what a device plan moved out of
	 * the parameters row into pinned host memory (0: nothing moved) */
	size_t params_all, comm_all, param_host, param_host_extra, params_pinned;
	int nseg_param_host;
};

enum ds_mem_place { DS_MEM_HOST = 0, DS_MEM_DEVICE, DS_MEM_PINNED };

/* A device backend's plan (device nonzero; o is the estimate's options):
 * the engine's flat buffers, the fp32 master, the optimizer states, its
 * slots and the model's workspace (parameters, gradients,
 * optimizer_states, communication, activations) are the backend's alloc,
 * so device memory; the token rows and optimizer headers (other) stay in
 * host memory, the swap buffers are pinned, and with W > 1 the
 * communicator's staged path (MPI through pinned host memory, where NCCL
 * cannot be used) holds pinned_staging: one buffer of the largest
 * collective the step makes on device buffers (ds_comm_staged_bytes), one
 * per call in flight with overlap_comm.  ZeRO-Offload (o->offload.cpu,
 * stages 1-3) moves optimizer_states to pinned host memory and adds its
 * host copy and staging to the row (offload_extra); offload_param cpu
 * (stage 3, a 16-bit run) moves param_host bytes of the parameters row to
 * pinned host memory (params_pinned, counted in the totals) and adds
 * param_host_extra to communication.  device 0 leaves
 * every row host memory (the cpu plan) and only sets the totals. */
void ds_engine_mem_place(struct ds_engine_mem *m, const struct ds_engine_opts *o, int device);
const char *ds_engine_mem_place_name(int place);   /* "device", "host", "pinned host" */

/* A device plan against free device bytes: 0 when it fits, else the first
 * category (in table order) at which the running device total crosses
 * free_bytes, + 1; *sum gets the running total there. */
int ds_engine_mem_device_fit(const struct ds_engine_mem *m, size_t free_bytes, size_t *sum);

/* Estimate what ds_engine_create(o) on a communicator of W ranks (and
 * ds-train's batch buffer of grad_accum x micro_batch rows of T+1 tokens)
 * allocates through ds_alloc on each rank.  Returns 0, or DS_EINVAL (bad
 * stage, batch or model; err names it) / DS_ENOMEM. */
int ds_engine_mem_estimate(const struct ds_engine_opts *o, int W, struct ds_engine_mem *m, struct ds_err *err);
/* The same for the ranks of pipeline stage `stage` (0 <= stage < o->pp). */
int ds_engine_mem_estimate_stage(const struct ds_engine_opts *o, int W, int stage, struct ds_engine_mem *m,
				 struct ds_err *err);

/* The memory one rank may use: override when nonzero, else Slurm's
 * SLURM_MEM_PER_NODE / per_node or SLURM_MEM_PER_CPU x SLURM_CPUS_PER_TASK,
 * else 90% of MemAvailable / per_node (4 GiB without /proc/meminfo).
 * Where it came from goes to from ("--mem-per-rank", ...). */
uint64_t ds_engine_mem_budget(int per_node, uint64_t override, char *from, size_t n);

/* Short name of a category ("parameters", ...) for tables and JSON keys. */
const char *ds_engine_mem_cat_name(int cat);

/* One-line description of what a category holds for this estimate (e.g.
 * "fp32, owned 1/4 slices of 4 segments"), written into buf. */
const char *ds_engine_mem_cat_note(const struct ds_engine_mem *m, const struct ds_engine_opts *o, int cat,
				   char *buf, size_t n);

#endif
