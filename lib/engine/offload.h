/* offload.h - ZeRO-Infinity inside the engine (private to lib/engine):
 * the fp32 master weights and optimizer states of this rank's update
 * ranges in swap files under offload_optimizer.nvme_path, streamed sub-group
 * by sub-group through pinned host buffers (DeepSpeed's optimizer
 * swappers), and at stage 3 the parameter slices in swap files under
 * offload_param.nvme_path, read ahead of each segment's use (its partitioned
 * parameter swapper).  The swap files are lib/io/swap.h's.
 *
 * The update space: every segment's update range [u0, u0+un) (engine.h)
 * laid end to end, each starting at a multiple of A = 2048 x
 * intra_op_parallelism elements, so that every sub-group (sub_group_size
 * elements, rounded up to A) and every segment's slice is one aligned
 * request of each swap file.  Files: "master" (fp32, when some master is
 * not in memory), one per optimizer state (fp32), "param16" (the model's
 * 16-bit slices of the offloaded segments).  In fp32 runs the parameters
 * are the master weights: an offloaded segment's slice is read from the
 * master file, so it is stored once.
 */
#ifndef DS_ENGINE_OFFLOAD_H
#define DS_ENGINE_OFFLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine.h"
#include "io/swap.h"

/* One segment's update range as the engine lays it out. */
struct ds_offload_range {
	int64_t u0, un;       /* segment-local elements [u0, u0+un) this rank updates */
	int64_t numel;        /* the segment's model elements (elements past it are padding, 0) */
	int64_t elem0;        /* the model's element index of the segment's element 0 */
	float *master;        /* the in-memory fp32 master at u0, or NULL: in the master file */
	const float *g32;     /* the range's fp32 gradients (at u0), or NULL */
	const uint16_t *g16;  /* ... or its 16-bit gradients, in the model's dtype */
	uint16_t *h16;        /* where the range's 16-bit copy lives in memory, or NULL */
	int pstore;           /* offload_param: the range's parameters live on NVMe */
};

/* What an offload configuration costs one rank, from sizes alone (the
 * estimator's and ds_offload_create's one source). */
struct ds_offload_plan {
	int64_t A;            /* alignment of ranges and sub-groups, elements */
	int64_t U;            /* the update space, elements (aligned) */
	int64_t S;            /* elements per sub-group (aligned, at most U) */
	int K;                /* sub-groups */
	int has_master, has_p16;
	int per_set;          /* buffers per sub-group: master (if on NVMe), states, gradient */
	int nsets;            /* sub-groups in flight: 1 + pipeline_read + pipeline_write */
	int64_t pbuf_el;      /* elements per parameter swap buffer (0: none) */
	size_t pinned_bytes;  /* host buffers: the optimizer pool, 16-bit staging, parameter buffers */
	uint64_t nvme_bytes;  /* swap files of this rank, both paths */
	uint64_t nvme_opt_bytes, nvme_param_bytes;
};

/* Which segments' parameters live on NVMe (offload_param): at stage 3 the
 * segments at or above the persistence threshold (the ones stage 3
 * partitions), once the update ranges before them reach max_in_cpu
 * elements.  pstore[s] = 1 for those; all 0 without param offload. */
void ds_offload_pstores(const struct ds_engine_opts *o, int nseg, const int64_t *numel, const int64_t *un,
			int *pstore);
/* 1 when segment s's fp32 master stays in memory: 16-bit runs keep it in
 * memory unless the optimizer is offloaded; fp32 runs unless the segment's
 * parameters are offloaded (they are the master). */
int ds_offload_master_in_memory(const struct ds_engine_opts *o, int pstore);

/* The plan, or DS_EINVAL naming the key for a combination that cannot run
 * (Lamb, an fp32 run's offload_param without offload_optimizer, too few
 * buffers, a buffer_size below the largest slice). */
int ds_offload_plan(const struct ds_engine_opts *o, int nseg, const int64_t *un, const int *pstore,
		    struct ds_offload_plan *p, struct ds_err *err);

struct ds_offload;

/* Create the swap files (checking both paths), the buffers, and write the
 * initial master (ds_gpt_init of model, seed; for ranges whose master is
 * not in memory) and zeroed states.  r is copied. */
int ds_offload_create(struct ds_offload **out, const struct ds_engine_opts *o, const struct ds_offload_range *r,
		      int nseg, const struct ds_gpt *model, int rank, struct ds_err *err);
void ds_offload_destroy(struct ds_offload *f);  /* accepts NULL */

/* One optimizer step t (Adam/AdamW or SGD) with grad_mul over every
 * sub-group: read it (ahead with pipeline_read), update, refresh the
 * 16-bit copy of what it covers, write it back (behind with
 * pipeline_write); every write has finished when it returns. */
int ds_offload_step(struct ds_offload *f, const struct ds_optim_params *hp, int64_t t, float grad_mul,
		    struct ds_err *err);
/* The 16-bit copy of every range from the master (after a load). */
int ds_offload_refresh(struct ds_offload *f, struct ds_err *err);

/* Stage-3 parameter slices of offloaded segments (pstore): get makes
 * segment s's slice present in a parameter buffer (reading it if no buffer
 * holds it) and returns it (fp32 or 16-bit, the range's un elements);
 * put releases it (the buffer keeps it until reused); prefetch starts
 * reading s into a free buffer, if one is free; idle waits for every read
 * and forgets every buffer's contents (before the optimizer rewrites
 * them). */
int ds_offload_param_get(struct ds_offload *f, int s, void **p, struct ds_err *err);
void ds_offload_param_put(struct ds_offload *f, int s);
int ds_offload_param_prefetch(struct ds_offload *f, int s, struct ds_err *err);
int ds_offload_param_idle(struct ds_offload *f, struct ds_err *err);
void ds_offload_param_put_all(struct ds_offload *f);

/* Checkpoints (engine.h ds_engine_ckpt_piece): range s's sub-range
 * [ta, tb) (range-local) comes in pieces of at most a sub-group; piece j
 * brings [*pa, *pb) of it into the window (the first buffer set; writing:
 * written back when the window moves or at ds_offload_ckpt_flush). */
int ds_offload_ckpt_pieces(const struct ds_offload *f, int s, int64_t ta, int64_t tb);
int ds_offload_ckpt_piece(struct ds_offload *f, int s, int64_t ta, int64_t tb, int j, int writing, int64_t *pa,
			  int64_t *pb, struct ds_err *err);
/* Range-local element a of range s in the window: its master (NULL when
 * the master is in memory) and state k. */
float *ds_offload_ckpt_master(struct ds_offload *f, int s, int64_t a);
float *ds_offload_ckpt_state(struct ds_offload *f, int s, int k, int64_t a);
int ds_offload_ckpt_flush(struct ds_offload *f, struct ds_err *err);
/* 1 when range s has anything in swap files (a master or states). */
int ds_offload_swapped(const struct ds_offload *f, int s);

/* I/O since the last call (both swap sets). */
struct ds_offload_stats {
	uint64_t bytes_read, bytes_written;
	double wait_s;  /* blocked on reads and writes */
	double busy_read_s, busy_write_s;  /* some read (write) in flight: the device at work */
	double busy_io_s;  /* some read or write in flight: the device at work for the step */
};
void ds_offload_take_stats(struct ds_offload *f, struct ds_offload_stats *st);
const struct ds_offload_plan *ds_offload_get_plan(const struct ds_offload *f);

#endif
