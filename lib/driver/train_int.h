/* train_int.h - what the parts of ds-train's driver share (private). */
#ifndef DS_DRIVER_TRAIN_INT_H
#define DS_DRIVER_TRAIN_INT_H

#include "comm/comm.h"
#include "config/config.h"
#include "config/model.h"
#include "config/train_opts.h"
#include "engine/engine.h"
#include "io/dataset.h"
#include "monitor/comms.h"
#include "monitor/out.h"
#include "optim/sched.h"

/* Everything a run resolved from the two config files and the flags. */
struct ds_train_setup {
	struct ds_config *cfg;
	struct ds_model_config model;
	struct ds_engine_opts eng;
	struct ds_sched_params sched;
	double org_lr;                 /* optimizer.params.lr */
	long long tb, mb, ga;          /* batch triad */
	int W, rank;                   /* the job: world size and rank */
	/* 3D layout (comm/topo.h): tensor- and pipeline-parallel sizes, and the
	 * data-parallel size and rank the batch triad and the rows follow */
	int tp, pp, dp, dp_rank;
	int pp_cfg;                    /* pipeline.stages of the config when it set pp (0: it did not) */
	long long steps_per_print;
	int wall_clock;
	int ckpt_profile;              /* activation_checkpointing.profile (with checkpointing on) */
	long long train_iters;
	long long start_profile_step, end_profile_step;  /* --metrics-json window */
	int csv_enabled, tb_enabled;
	const char *csv_path, *csv_job, *tb_path, *tb_job;
	const char *tag_validation;
	char unimplemented[256];       /* --check: why the trainer would refuse the config ("" if not) */
	/* comms_logger; prof_ops points into comms_ops (malloc'd, NULL-ended) */
	struct ds_monitor_comms_opts comms;
	const char **comms_ops;
	int nonfinite_abort;           /* dstk.nonfinite_policy "abort" */
	long long nonfinite_max;       /* dstk.nonfinite_max_consecutive (skip policy) */
	struct ds_config_auto autos;   /* what resolved the config's "auto" values (micro_fit included) */
	char fit_why[200];             /* autos.micro_fit_why points here */
	int device_kind;               /* enum ds_device_kind asked: --device, else dstk.device */
	const char *device_from;       /* "--device" or "dstk.device" */
	char device_why[256];          /* ds_train_device's line: what was chosen and why */
};

/* Load and map both config files (world size W).  Fills s; release with
 * ds_train_setup_release. */
int ds_train_setup_load(struct ds_train_setup *s, const struct ds_train_opts *o, int W, int rank,
			struct ds_err *err);
void ds_train_setup_release(struct ds_train_setup *s);

/* The compute backend and device the run asked for (s->device_kind) gets
 * on this machine (lib/compute: the GPU probe only when not cpu): sets
 * s->eng.compute and s->eng.device, why says what was chosen and why in
 * one line ("device auto (dstk.device): cpu (built without CUDA)").
 * DS_ENOTSUP (not built), DS_EIO (no device answers), DS_EINVAL (a bad
 * local rank), err naming the flag or key. */
int ds_train_device(struct ds_train_setup *s, char *why, size_t whysz, struct ds_err *err);
/* Ranks sharing this node (memory, NVMe): the launcher's local size
 * (OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE), else W. */
int ds_train_ranks_per_node(int W);
/* ZeRO-Infinity: the offload sections and the "aio" section of c as the
 * engine takes them at ZeRO stage `stage` (optimizer offload at stages
 * 1-3, parameter offload at stage 3); ds-train's and ds-autotune's. */
void ds_train_offload_opts(const struct ds_config *c, int stage, struct ds_engine_offload *o);
/* ZeRO-Infinity: each nvme_path the run uses exists, may be written,
 * accepts O_DIRECT and has room for the swap files of per_node ranks (the
 * memory plan's NVMe bytes).  Returns 0 or DS_EINVAL naming the file, key
 * and path. */
int ds_train_check_nvme(const struct ds_train_setup *s, int per_node, struct ds_err *err);
/* Remove dir's global_step<N> checkpoints (N <= newest) but the keep
 * newest (NeoX's keep_last_n_checkpoints); 0, DS_EIO or DS_ENOMEM. */
int ds_train_prune_checkpoints(const char *dir, int64_t keep, int64_t newest, struct ds_err *err);
/* Log (info) each "auto" value the config resolved and how many keys of
 * switched-off sections it ignored. */
void ds_train_setup_log_notes(const struct ds_train_setup *s);

/* The comms_logger of a run: records what the communicator reports when
 * comms_logger.enabled (see commlog.c). */
struct ds_train_commlog;
/* Attach a logger to comm when s->comms.enabled (else *out = NULL and
 * nothing is recorded).  Returns 0 or DS_ENOMEM. */
int ds_train_commlog_start(struct ds_train_commlog **out, const struct ds_train_setup *s, struct ds_comm *comm,
			   struct ds_err *err);
/* Rank 0: write DeepSpeed's log_summary table to out's results; every
 * rank stops recording.  Returns 0 or the first error a record met (an
 * unknown op, out of memory). */
int ds_train_commlog_summary(struct ds_train_commlog *l, const struct ds_monitor_out *out, struct ds_err *err);
/* Detach from comm and free; accepts NULL. */
void ds_train_commlog_stop(struct ds_train_commlog *l, struct ds_comm *comm);

/* Progress of a run, saved in and restored from checkpoints. */
struct ds_train_state {
	long long iteration;        /* optimizer steps taken (global_steps) */
	long long sched_steps;      /* non-skipped steps (drive the LR schedule) */
	long long consumed;         /* global samples consumed */
	long long skipped;          /* skipped steps so far */
};

/* Save the run as global_step<iteration> under dir (rank 0 writes; every
 * rank must call).  Returns 0 or DS_E*. */
int ds_train_save(const char *dir, struct ds_engine *e, const struct ds_train_setup *s,
		  const struct ds_train_state *st, struct ds_comm *comm, struct ds_err *err);

/* Load a checkpoint (dir + tag: NULL latest, "auto" the newest that
 * verifies and fits, chosen by all ranks of comm together) into the engine
 * and *st; weights_only skips optimizer state and progress.  Everything the
 * load reads is checked to be there first.  *tag_out (may be NULL) receives
 * a malloc'd copy of the tag, or NULL when auto found no finished
 * checkpoint (then nothing is loaded: start from scratch). */
int ds_train_load(const char *dir, const char *tag, int weights_only, struct ds_engine *e,
		  const struct ds_train_setup *s, struct ds_train_state *st, struct ds_comm *comm, char **tag_out,
		  struct ds_err *err);

/* A 1-bit optimizer's state beyond its element states (train_state_onebit.c:
 * counters, per-tensor values, this rank's error feedback, 0/1 Adam's
 * rank-local weights); nothing for other optimizers.  save: every rank
 * calls it inside ds_train_save's writer, errors kept in later as the
 * writer's other calls do.  load: inside the load, before the 16-bit copy
 * is refreshed; 0 or DS_E*. */
struct ds_ckpt;
void ds_train_save_onebit(struct ds_ckpt *ck, struct ds_engine *e, int W, int rank, struct ds_err *later);
int ds_train_load_onebit(struct ds_ckpt *ck, struct ds_engine *e, int W, int rank, struct ds_err *err);

#endif
