/* swap.h - ZeRO-Infinity's scratch on NVMe: the swap files of one rank of
 * one run (offload_optimizer / offload_param device "nvme").
 *
 * A swap set lives in a fresh private directory under nvme_path
 * (dstk-swap.<host>.r<rank>.XXXXXX, mode 0700).  Each file is created
 * there with O_DIRECT, given its whole size with fallocate, and unlinked
 * at once; the directory is removed as soon as the files exist.  So the
 * scratch is freed when the process ends however it ends (exit, a signal,
 * a crash, SIGKILL), two runs or ranks sharing nvme_path never meet, and
 * nothing under nvme_path can be taken for a checkpoint.  Reads go through
 * one aio handle and writes through another (as DeepSpeed's pipelined
 * swappers), so a read ahead and a write behind are in flight together;
 * a wait completes everything queued on its handle.  Offsets and lengths
 * are multiples of ds_swap_align(aio) bytes; buffers are DS_AIO_ALIGN
 * aligned (ds_swap_buf_alloc).  Test-only: DS_TEST_FAULT_SWAP_EIO=N makes
 * the process's N-th swap read or write fail with DS_EIO, as a failing
 * device would.
 */
#ifndef DS_IO_SWAP_H
#define DS_IO_SWAP_H

#include <stddef.h>
#include <stdint.h>

#include "io/aio.h"
#include "util/err.h"

struct ds_swap_opts {
	const char *dir;        /* nvme_path: an existing, writable directory that accepts O_DIRECT */
	const char *key;        /* the config key that named dir, for messages */
	int rank;               /* in the directory's name */
	struct ds_aio_opts aio; /* the config's "aio" section (engine NULL: aio when built, else posix) */
	/* busy groups (ds_aio_add_busy_group) the read handle, the write
	 * handle, and both join; each may be NULL */
	struct ds_aio_busy *busy_read, *busy_write, *busy_io;
};

struct ds_swap;

/* Bytes that every offset and length must be a multiple of: DS_AIO_ALIGN
 * per intra-op thread (each thread moves an equal, aligned chunk). */
uint64_t ds_swap_align(const struct ds_aio_opts *aio);

/* Check dir for a swap set of need bytes before anything is allocated:
 * DS_EINVAL with one line naming key and dir when it is missing, not a
 * directory, not writable, holds less than need bytes free, or refuses
 * O_DIRECT.  Test-only: DS_TEST_NVME_FREE_BYTES=N makes the file system
 * look N bytes free (the too-small path on any machine);
 * DS_TEST_FAULT_NO_ODIRECT (aio.h) the refusal. */
int ds_swap_check_dir(const char *dir, const char *key, uint64_t need, struct ds_err *err);

/* Create the directory and the two aio handles.  Returns 0, DS_EINVAL
 * (ds_swap_check_dir's reasons, an aio setting out of range) or DS_EIO. */
int ds_swap_create(struct ds_swap **out, const struct ds_swap_opts *o, struct ds_err *err);
/* Wait for everything queued, close the files, remove the directory if
 * it is still there; accepts NULL. */
void ds_swap_destroy(struct ds_swap *s);

/* A file of bytes (a multiple of ds_swap_align), allocated on the device
 * now; name labels it in messages.  Returns its index (>= 0) or DS_EINVAL
 * (no room: names key, dir and the bytes), DS_EIO. */
int ds_swap_add(struct ds_swap *s, const char *name, uint64_t bytes, struct ds_err *err);
/* All files added: remove the (now empty) directory. */
void ds_swap_seal(struct ds_swap *s);

/* Queue a read of n bytes of file f at off into buf (on the read handle),
 * or a write of buf (on the write handle); buf stays untouched until the
 * matching wait.  Returns 0 or DS_EINVAL (alignment, range). */
int ds_swap_read(struct ds_swap *s, int f, uint64_t off, void *buf, uint64_t n, struct ds_err *err);
int ds_swap_write(struct ds_swap *s, int f, uint64_t off, const void *buf, uint64_t n, struct ds_err *err);
/* Wait for every queued read (write).  Returns 0 or the first failure. */
int ds_swap_wait_reads(struct ds_swap *s, struct ds_err *err);
int ds_swap_wait_writes(struct ds_swap *s, struct ds_err *err);
/* 1 when reads (writes) are queued and not yet waited for. */
int ds_swap_reads_pending(const struct ds_swap *s);
int ds_swap_writes_pending(const struct ds_swap *s);

/* What the set moved since the last ds_swap_take_stats. */
struct ds_swap_stats {
	uint64_t bytes_read, bytes_written;
	uint64_t reads, writes;          /* operations queued */
	double wait_read_s, wait_write_s; /* seconds blocked in the waits */
	double busy_read_s, busy_write_s; /* seconds some read (write) was in flight (ds_aio_busy_seconds) */
};
void ds_swap_take_stats(struct ds_swap *s, struct ds_swap_stats *st);
/* Bytes of all files (what the set holds on the device). */
uint64_t ds_swap_bytes(const struct ds_swap *s);
/* The engine the handles use ("aio", "posix"); static. */
const char *ds_swap_engine(const struct ds_swap *s);

/* A zeroed buffer of bytes aligned for O_DIRECT (ds_alloc accounting),
 * NULL on failure; free with ds_free. */
void *ds_swap_buf_alloc(size_t bytes);

#endif
