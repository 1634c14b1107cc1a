/* aio_int.h - the backend interface of the async-I/O engine (private).
 *
 * Each backend fills a struct ds_io_ops with designated initialisers
 * (STYLE rule 12) and is listed in ds_io_all[] of aio.c (rule 13).  A
 * backend sees one thread's contiguous chunk at a time; splitting an
 * operation among threads, opening files and alignment checks are aio.c's.
 */
#ifndef DS_IO_AIO_INT_H
#define DS_IO_AIO_INT_H

#include "io/aio.h"

#define DS_IO_CAP_NOFILE 1u /* never touches files: aio.c opens nothing */

/* One thread's share of an operation. */
struct ds_io_xfer {
	int fd;
	int write;         /* 1 pwrite, 0 pread */
	char *buf;         /* chunk start in the caller's buffer */
	uint64_t len;      /* chunk bytes */
	uint64_t off;      /* file offset of the chunk */
	const char *path;  /* for messages */
	struct ds_aio_lat *lat; /* per-request latencies, or NULL */
	struct ds_aio_counters *cnt; /* this thread's counters (never NULL) */
};

struct ds_io_ops {
	const char *name;
	unsigned caps;
	/* per-thread state: created on the thread that uses it; may be NULL */
	int (*thread_init)(void **tctx, const struct ds_aio_opts *o, struct ds_err *err);
	void (*thread_fini)(void *tctx);
	/* transfer x->len bytes in o->block_size requests: 0 or DS_E* */
	int (*xfer)(void *tctx, const struct ds_aio_opts *o, const struct ds_io_xfer *x, struct ds_err *err);
};

extern const struct ds_io_ops ds_io_libaio_ops; /* aio_libaio.c, only with HAVE_LIBAIO */
extern const struct ds_io_ops ds_io_posix_ops;  /* aio_posix.c */
extern const struct ds_io_ops ds_io_null_ops;   /* aio_null.c */

/* The message for a failed request: "read PATH at offset N (L bytes): why". */
int ds_io_req_error(struct ds_err *err, const struct ds_io_xfer *x, uint64_t off, uint64_t len,
		    long res);

#endif
