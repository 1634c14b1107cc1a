/* nvme_tune.h - ds-nvme-tune's work: find the fastest aio settings for a set
 * of directories (DeepSpeed's ds_nvme_tune, spec/deepspeed-tools.md §1).
 *
 * Every trial reads and/or writes io_size bytes per directory through one
 * ds_aio handle per directory, all directories at once, and scores
 * read + write GB/s (GB = 2^30 bytes, as DeepSpeed).  The search is
 * lib/tune/search.h's: coarse then refine, or the full product.  Scratch
 * files are `_dstk_nvme_tune_{read,write}.PID` in each directory and are
 * removed on every return path.
 */
#ifndef DS_DRIVER_NVME_TUNE_H
#define DS_DRIVER_NVME_TUNE_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "io/aio.h"
#include "tune/search.h"
#include "util/err.h"

struct ds_nvme_trial {
	int index;               /* 1-based, in the order run */
	const char *phase;       /* "start", "coarse", "refine", "grid", "confirm" (static) */
	struct ds_aio_opts aio;  /* settings of this trial */
	double read_gbps, write_gbps;        /* GiB/s over all directories; -1: not measured */
	double read_p50_us, read_p99_us;     /* per-request latency; 0: not measured */
	double write_p50_us, write_p99_us;
	uint64_t pinned_bytes;   /* queue_depth x block_size x intra_op_parallelism x directories */
	double score;            /* read_gbps + write_gbps (those measured) */
};

struct ds_nvme_tune_opts {
	const char *const *dirs; /* --nvme_dir, driven in parallel as one device set */
	int ndirs;
	const char *sweep_config; /* JSON {key: [values]} replacing the default space, or NULL */
	int no_read, no_write;
	uint64_t io_size;        /* bytes per directory and operation */
	int loops;               /* repetitions per trial and operation */
	const char *log_dir;     /* DeepSpeed-named per-trial logs, or NULL */
	int flush_page_cache;    /* drop the test files' cached pages before each operation */
	int buffered;            /* run through the page cache (no O_DIRECT) */
	int exhaustive;          /* full product instead of coarse + refine */
	const char *engine;      /* aio, posix, null; NULL: the default engine */
	double threshold;        /* refine while a round gains more than this (0.02) */
	double max_seconds;      /* default search: no new trial after this long (50) */
	int confirm;             /* measure the top N again, best mean wins (3); reported: the re-measurement */
	volatile sig_atomic_t *stop; /* set by a signal handler: stop between I/Os, clean up */
	/* called after each trial (progress, --verbose); may be NULL */
	void (*on_trial)(void *arg, const struct ds_nvme_trial *t);
	void *arg;
};
#define DS_NVME_TUNE_OPTS_INIT { NULL, 0, NULL, 0, 0, 400ull << 20, 1, NULL, 0, 0, 0, NULL, 0.02, 50, 3, NULL, NULL, NULL }

struct ds_nvme_tune_res {
	struct ds_nvme_trial *trials; /* owned; release with ds_nvme_tune_res_release */
	int ntrials;
	int best;                /* index into trials */
	int direct;              /* 1: O_DIRECT, 0: buffered (page cache) */
	const char *engine;      /* borrowed from the opts, or static */
	const char *const *dirs; /* borrowed from the opts */
	const char *sweep_config; /* borrowed, or NULL */
	int exhaustive;
	uint64_t io_size;
	int ndirs, loops, do_read, do_write, capped;
	uint64_t space_size;     /* points in the full product */
	double elapsed_s;
};

/* Check the directories, space and sweep file, run the search, fill res.
 * Returns 0; DS_EINVAL (bad input: one line naming the directory, file or
 * key); DS_ENOTSUP (engine not built); DS_EIO; DS_ESIGNAL when *o->stop was
 * set (scratch files removed in every case). */
int ds_nvme_tune_run(const struct ds_nvme_tune_opts *o, struct ds_nvme_tune_res *res, struct ds_err *err);
void ds_nvme_tune_res_release(struct ds_nvme_tune_res *res);

/* Parse a sweep file into a space (keys of ds_aio_optdefs, DeepSpeed's
 * io_parallel and sequential_requests too).  0 or DS_EINVAL. */
int ds_nvme_tune_space_load(const char *path, int buffered, struct ds_tune_space *s, struct ds_err *err);
/* The default space for an engine (posix: block_size and threads only). */
void ds_nvme_tune_space_default(const char *engine, struct ds_tune_space *s);

/* Renderings of res: text (the best GB/s line, then the "aio" section),
 * JSON (everything, with every trial) and CSV (a header, one row a trial). */
int ds_nvme_tune_write_text(FILE *f, const struct ds_nvme_tune_res *res, struct ds_err *err);
int ds_nvme_tune_write_json(FILE *f, const struct ds_nvme_tune_res *res, struct ds_err *err);
int ds_nvme_tune_write_csv(FILE *f, const struct ds_nvme_tune_res *res, struct ds_err *err);
/* The CSV into the file path, via path.tmp.PID renamed when complete
 * (the tool writes "-" to stdout itself, with ds_nvme_tune_write_csv). */
int ds_nvme_tune_csv_file(const char *path, const struct ds_nvme_tune_res *res, struct ds_err *err);

/* 0 when path is a DeepSpeed config that the "aio" section can be merged
 * into (a JSON object whose "aio", if any, is an object); else DS_EINVAL. */
int ds_nvme_tune_config_check(const char *path, struct ds_err *err);
/* Write a copy of config `in` with the best "aio" settings merged in to
 * `out` (may equal in): written to out.tmp.PID, then renamed, so `out` is
 * replaced only by a complete file.  0, DS_EINVAL or DS_EIO. */
int ds_nvme_tune_config_merge(const char *in, const char *out, const struct ds_nvme_tune_res *res,
			      struct ds_err *err);

#endif
