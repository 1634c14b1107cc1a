/* aio.h - the async-I/O engine: DeepSpeed's aio_handle for dstk.
 *
 * A handle reads or writes a caller's buffer to a file at an offset with
 * intra_op_parallelism threads, each owning its own context (a libaio
 * io_context for the `aio` engine) and a contiguous chunk of the buffer,
 * split into block_size requests.  Backends: `aio` (libaio, when built),
 * `posix` (pread/pwrite, always built) and `null` (no I/O, for tests).
 * O_DIRECT is the default: buffer, offset and per-thread chunk must be
 * multiples of DS_AIO_ALIGN, and that is checked before anything is queued.
 * Test-only: DS_TEST_FAULT_NO_ODIRECT=1 in the environment makes every
 * O_DIRECT open (and ds_aio_probe_direct) fail as a file system that refuses
 * O_DIRECT would, so the refusal path can be tested on any file system.
 * Test-only: DS_TEST_FAULT_AIO_QUEUE_FULL=1 makes the aio engine's
 * io_submit behave as a full kernel queue (partial submits, EAGAIN).
 */
#ifndef DS_IO_AIO_H
#define DS_IO_AIO_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define DS_AIO_ALIGN 4096 /* bytes: buffer, offset and length alignment for O_DIRECT */

/* Settings of a handle, with DeepSpeed's meanings. */
struct ds_aio_opts {
	uint64_t block_size;      /* bytes per request (iocb); the last one of a chunk may be short */
	int queue_depth;          /* requests in flight per thread */
	int single_submit;        /* 1: one io_submit call per request; 0: one per batch */
	int overlap_events;       /* 1: keep queue_depth in flight, refill as they complete;
	                           * 0: submit a batch of queue_depth, drain it, repeat */
	int intra_op_parallelism; /* threads per operation, each a contiguous chunk */
	int buffered;             /* 1: through the page cache, no O_DIRECT */
	const char *engine;       /* "aio", "posix", "null"; NULL: aio if built, else posix */
};

/* DeepSpeed's aio_handle constructor defaults. */
#define DS_AIO_OPTS_INIT { 1048576, 128, 0, 0, 1, 0, NULL }

/* The handle settings as data (STYLE rule 11): one table drives range
 * checks, sweep-file parsing and the "aio" JSON section.  Keys are
 * DeepSpeed's current names; `aio.` is the namespace in messages. */
enum ds_aio_opt_type { DS_AIO_OPT_SIZE, DS_AIO_OPT_INT, DS_AIO_OPT_BOOL };
struct ds_aio_optdef {
	const char *name;          /* "block_size", "queue_depth", ... */
	enum ds_aio_opt_type type; /* SIZE: uint64_t field, INT/BOOL: int field */
	size_t off;                /* offsetof(struct ds_aio_opts, field) */
	int64_t def;               /* default of DeepSpeed's config "aio" section */
	int64_t min, max;          /* inclusive range */
	const char *help;
};
/* NULL-terminated table of the five tunable settings. */
extern const struct ds_aio_optdef ds_aio_optdefs[];

/* The entry for name (aliases: io_parallel, num_threads, thread_count for
 * intra_op_parallelism), or NULL; borrowed, static. */
const struct ds_aio_optdef *ds_aio_optdef_find(const char *name);
/* Value of d's field in o. */
int64_t ds_aio_opt_get(const struct ds_aio_opts *o, const struct ds_aio_optdef *d);
/* Set d's field in o after a range check; DS_EINVAL "aio.NAME: ..." otherwise. */
int ds_aio_opt_set(struct ds_aio_opts *o, const struct ds_aio_optdef *d, int64_t v, struct ds_err *err);
/* Range-check every setting of o and block_size alignment (unless buffered). */
int ds_aio_opts_check(const struct ds_aio_opts *o, struct ds_err *err);

/* Engines of this build, space-separated ("aio posix null"); static. */
const char *ds_aio_engines(void);
/* The engine a NULL opts->engine selects: "aio" when built, else "posix". */
const char *ds_aio_default_engine(void);
/* 0 when name is an engine of this build; DS_ENOTSUP naming --with-libaio
 * for "aio" without libaio; DS_EINVAL for an unknown name. */
int ds_aio_engine_check(const char *name, struct ds_err *err);
/* 1 when engine `name` never touches files (null), else 0. */
int ds_aio_engine_nofile(const char *name);

struct ds_aio;

/* Create a handle and start its threads.  Returns 0 or DS_EINVAL (a setting
 * out of range), DS_ENOTSUP (engine not built), DS_EIO (io_setup failed). */
int ds_aio_create(struct ds_aio **h, const struct ds_aio_opts *o, struct ds_err *err);
/* Wait for outstanding requests, stop the threads, free; accepts NULL. */
void ds_aio_destroy(struct ds_aio *h);

/* Queue a read of nbytes from path at file offset off into buf (async), or
 * queue it and wait (sync: returns like ds_aio_wait).  The buffer must stay
 * valid until ds_aio_wait returns.  Async returns 0 once queued; errors found
 * up front (alignment, divisibility, open) are DS_EINVAL / DS_EIO. */
int ds_aio_pread(struct ds_aio *h, void *buf, uint64_t nbytes, const char *path, uint64_t off,
		 int async, struct ds_err *err);
/* As ds_aio_pread, writing buf to path (created 0600 if missing, never truncated). */
int ds_aio_pwrite(struct ds_aio *h, const void *buf, uint64_t nbytes, const char *path, uint64_t off,
		  int async, struct ds_err *err);
static inline int ds_aio_sync_pread(struct ds_aio *h, void *b, uint64_t n, const char *p, uint64_t off,
				    struct ds_err *err) { return ds_aio_pread(h, b, n, p, off, 0, err); }
static inline int ds_aio_async_pread(struct ds_aio *h, void *b, uint64_t n, const char *p, uint64_t off,
				     struct ds_err *err) { return ds_aio_pread(h, b, n, p, off, 1, err); }
static inline int ds_aio_sync_pwrite(struct ds_aio *h, const void *b, uint64_t n, const char *p,
				     uint64_t off, struct ds_err *err) { return ds_aio_pwrite(h, b, n, p, off, 0, err); }
static inline int ds_aio_async_pwrite(struct ds_aio *h, const void *b, uint64_t n, const char *p,
				      uint64_t off, struct ds_err *err) { return ds_aio_pwrite(h, b, n, p, off, 1, err); }

/* As ds_aio_pread/ds_aio_pwrite on a file the caller opened (and keeps
 * open until ds_aio_wait returns; O_DIRECT unless the handle is buffered):
 * the swap files of lib/io/swap.h, which are unlinked as soon as they are
 * created.  label names the file in messages. */
int ds_aio_pread_fd(struct ds_aio *h, void *buf, uint64_t nbytes, int fd, const char *label, uint64_t off,
		    int async, struct ds_err *err);
int ds_aio_pwrite_fd(struct ds_aio *h, const void *buf, uint64_t nbytes, int fd, const char *label, uint64_t off,
		     int async, struct ds_err *err);

/* Wait for every queued operation.  Returns how many completed (>= 0), or the
 * first failure's code with its message (the others still completed). */
int ds_aio_wait(struct ds_aio *h, struct ds_err *err);

/* Getters: the settings the handle runs with. */
uint64_t ds_aio_get_block_size(const struct ds_aio *h);
int ds_aio_get_queue_depth(const struct ds_aio *h);
int ds_aio_get_single_submit(const struct ds_aio *h);
int ds_aio_get_overlap_events(const struct ds_aio *h);
int ds_aio_get_intra_op_parallelism(const struct ds_aio *h);
int ds_aio_get_buffered(const struct ds_aio *h);
const char *ds_aio_get_engine(const struct ds_aio *h); /* borrowed, static */

/* Seconds since the last call during which some queued operation of h
 * was not yet complete (the device was working for it), and reset: bytes
 * moved over it is the handle's effective bandwidth, whatever the caller
 * did between its waits. */
double ds_aio_busy_seconds(struct ds_aio *h);

/* A busy group: handles whose in-flight time is also counted as one, the
 * seconds during which some operation of any of them was not yet complete.
 * Reads and writes on one device share it, so each handle's own rate is
 * lower while the other works; bytes moved over the group's seconds is the
 * device's rate for all of them together.  Initialise with
 * DS_AIO_BUSY_INIT (or pthread_mutex_init on mu and zeros); a handle joins
 * up to DS_AIO_BUSY_MAX groups with ds_aio_add_busy_group while it is idle
 * (-1 otherwise), and its operations count until the handle is
 * destroyed. */
struct ds_aio_busy {
	pthread_mutex_t mu;
	int nbusy;      /* handles of the group with an operation in flight */
	double t0, s;   /* since when / for how long nbusy > 0 */
};
#define DS_AIO_BUSY_INIT { PTHREAD_MUTEX_INITIALIZER, 0, 0.0, 0.0 }
#define DS_AIO_BUSY_MAX 2
int ds_aio_add_busy_group(struct ds_aio *h, struct ds_aio_busy *g);
/* The group's busy seconds since the last call, and reset. */
double ds_aio_busy_group_seconds(struct ds_aio_busy *g);

/* Per-request latencies (submission to completion), in microseconds. */
struct ds_aio_lat {
	float *us;
	size_t n, cap;
};
#define DS_AIO_LAT_INIT { NULL, 0, 0 }
/* Start (on=1) or stop recording request latencies in h. */
void ds_aio_lat_enable(struct ds_aio *h, int on);
/* Move the latencies h recorded since the last call into *into (appended). */
void ds_aio_lat_take(struct ds_aio *h, struct ds_aio_lat *into);
/* Append one sample (seconds); a failed allocation drops it. */
void ds_aio_lat_add(struct ds_aio_lat *l, double seconds);
/* The q-quantile (0..1, nearest rank) of l in microseconds, 0 when empty; sorts l. */
double ds_aio_lat_quantile(struct ds_aio_lat *l, double q);
void ds_aio_lat_release(struct ds_aio_lat *l);

/* What the threads did since the last ds_aio_counters call (summed). */
struct ds_aio_counters {
	uint64_t requests;     /* block requests completed */
	uint64_t submit_calls; /* io_submit calls that took at least one request (aio engine) */
	uint64_t max_inflight; /* most requests one thread had in flight */
};
/* Fill *c and reset h's counters; call it after ds_aio_wait. */
void ds_aio_counters(struct ds_aio *h, struct ds_aio_counters *c);

/* Probe whether the file system of dir accepts O_DIRECT: create a scratch
 * file there, write DS_AIO_ALIGN aligned bytes with O_DIRECT, remove it.
 * Returns 1 accepted, 0 refused (EINVAL from open or write, or the test
 * fault injection), or DS_EINVAL when dir cannot be written at all. */
int ds_aio_probe_direct(const char *dir, struct ds_err *err);

#endif
