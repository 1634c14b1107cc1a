/* ckpt_int.h - private to lib/io/ckpt*.c: the checkpoint handle that the
 * writer (ckpt_write.c), reader (ckpt_read.c) and verifier (ckpt_verify.c)
 * share, the helpers of ckpt.c and the manifest (ckpt_manifest.c). */
#ifndef DS_IO_CKPT_INT_H
#define DS_IO_CKPT_INT_H

#include <hdf5.h>

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "io/ckpt.h"
#include "util/err.h"

/* A tensor being written: its dataset and the CRC pieces of the slices
 * written so far. */
struct ds_ckpt_wt {
	char *name;
	int dtype, ndim;
	size_t es;
	uint64_t numel, chunk_bytes;
	hsize_t shape[DS_CKPT_MAX_DIMS];
	hid_t dset;                  /* rank 0 */
	uint64_t off;                /* file offset of its bytes; UINT64_MAX: no dataset */
	struct ds_ckpt_crc_piece *p;
	size_t np, cap;
	uint32_t *crc;               /* rank 0 at commit: one per chunk */
};

/* One byte range of state.h5 in its manifest (ckpt_manifest.c). */
enum { DS_CKPT_EXT_META = 'm', DS_CKPT_EXT_DATA = 'd' };
struct ds_ckpt_extent {
	uint64_t off, len;
	uint32_t crc;
	int kind;                    /* DS_CKPT_EXT_META (HDF5's) or DS_CKPT_EXT_DATA (a tensor chunk) */
};
struct ds_ckpt_manifest {
	uint64_t size;               /* of state.h5 */
	size_t n;
	struct ds_ckpt_extent *x;    /* in file order, tiling [0, size) */
};

struct ds_ckpt {
	int writing, committed;
	char *save_dir;  /* writer: SAVE; reader: the load directory */
	char *tag;
	char *dir;       /* directory holding state.h5 (SAVE/tag.tmp while writing) */
	char *file;      /* .../state.h5 */
	hid_t f;
	size_t chunk_bytes;
	struct ds_ckpt_wt *t;
	size_t nt, capt, last;
	char *m_dtype, *m_config, *m_model;  /* meta strings handed out by meta_get */
	uint8_t *tmp;                        /* one chunk, for partial chunks */
	size_t tmp_size;
	struct ds_ckpt_manifest *man;        /* reader: NULL when state.h5 has none */
	/* writer: the ranks writing this file (comm NULL: this process alone) */
	struct ds_comm *comm;
	int par, rank, W;    /* par: more than one rank */
	int dfd;             /* this rank's descriptor of state.h5 for tensor bytes, -1 */
	int made_dir;        /* rank 0 created the .tmp directory */
	int wrc;             /* this rank's first failure while writing (0: none) */
	struct ds_err werr;  /* and its message, for commit's vote */
	/* test-only faults (ckpt.h) */
	int fault_rank;      /* DS_TEST_FAULT_CKPT_FAIL_RANK, -1 off */
	int fault_errno;     /* DS_TEST_FAULT_CKPT_WRITE for this rank, 0 off */
	int fault_meta;      /* DS_TEST_FAULT_CKPT_META */
	char kill_point[32]; /* DS_TEST_FAULT_CKPT_KILL for this rank, "" off */
	int kill_n;
};

/* Bytes moved per H5Dread/pwrite when streaming whole chunks: small
 * enough that the CRC pass finds them in cache, large enough to amortise
 * the call. */
enum { RUN_BYTES = 4 << 20 };

/* ---- ckpt.c ---- */

/* "a/b", malloc'd (NULL when out of memory). */
char *ds_ckpt_join(const char *a, const char *b);
/* The innermost message of HDF5's error stack into buf (160 bytes), which
 * is returned; the stack is cleared. */
const char *ds_ckpt_h5msg(char *buf);
/* Turn off HDF5's printing of its error stack (libds never prints). */
void ds_ckpt_h5_quiet(void);
/* File access properties (create: new files in the 1.8 object format). */
hid_t ds_ckpt_fapl(int create);
/* rm -rf p: 0, or -1 with errno. */
int ds_ckpt_rm_rf(const char *p);
const char *ds_ckpt_skip_slash(const char *s);
/* The HDF5 memory type of a dtype. */
hid_t ds_ckpt_mem_type(int dtype);
/* Move elements [b, e) of dset to (write) or from (read) buf with the
 * transfer properties dxpl (see ckpt.c). */
herr_t ds_ckpt_xfer(hid_t dset, hid_t mtype, int ndim, const hsize_t *shape, hsize_t b, hsize_t e, void *buf,
		    int write, hid_t dxpl);
/* The ranks of comm agree on an outcome: in, this rank's rc (0 or DS_E*)
 * with its message in *err; out, the same on every rank: 0, or the code and
 * message of the lowest failing rank (a failed collective fails this rank;
 * what names the file for that message).  comm NULL or of one rank: rc. */
int ds_ckpt_agree(struct ds_comm *comm, int rc, const char *what, struct ds_err *err);
/* The group (or root, "" / "/") named group, or -1 when it does not exist. */
hid_t ds_ckpt_open_obj(struct ds_ckpt *c, const char *group);

/* ---- ckpt_read.c ---- */

/* One dataset opened for reading. */
struct ds_ckpt_rt {
	struct ds_ckpt_tensor_info info;
	hid_t dset;
	hsize_t shape[DS_CKPT_MAX_DIMS];
	uint64_t chunk_bytes, nchunks;
	uint32_t *crc;
	uint64_t off;    /* file offset of its bytes (UINT64_MAX: none allocated) */
};

/* Open dir/tag/state.h5 (tag "": dir/state.h5; file non-NULL: that file,
 * dir being its directory) as a reader. */
int ds_ckpt_open_tag(struct ds_ckpt **out, const char *dir, const char *tag, const char *file, struct ds_err *err);
/* Open dataset name with its shape, dtype and (want_crc) checksums. */
int ds_ckpt_rt_open(struct ds_ckpt *c, const char *name, struct ds_ckpt_rt *t, int want_crc, struct ds_err *err);
void ds_ckpt_rt_close(struct ds_ckpt_rt *t);
/* Read elements [b, e) of t into out (NULL: verify only), checking every
 * chunk touched. */
int ds_ckpt_rt_read(struct ds_ckpt *c, struct ds_ckpt_rt *t, uint64_t b, uint64_t e, uint8_t *out,
		    struct ds_err *err);

/* ---- ckpt_write.c ---- */

/* Abandon a writer: rank 0 closes its HDF5 file keeping nothing (this
 * cannot fail) and removes the .tmp directory it made.  Not collective. */
void ds_ckpt_writer_abandon(struct ds_ckpt *c);

/* ---- ckpt_manifest.c ---- */

/* The manifest of file: file + ".manifest" (malloc'd). */
char *ds_ckpt_manifest_path(const char *file);
/* Rank 0 after state.h5 (fd, named file) is closed and synced: write and
 * fsync its manifest.  data: the tensor chunks with their CRCs (sorted
 * here); the bytes between them (HDF5's) are read from fd and CRCd.
 * Returns 0, DS_EIO or DS_EINTERNAL (data outside the file or
 * overlapping). */
int ds_ckpt_manifest_write(int fd, const char *file, struct ds_ckpt_extent *data, size_t n, struct ds_err *err);
/* Read file's manifest: its own checksum, then that its extents tile the
 * file as it is now.  *out NULL (and 0) when there is none; DS_ECORRUPT
 * naming the manifest or the file. */
int ds_ckpt_manifest_load(const char *file, struct ds_ckpt_manifest **out, struct ds_err *err);
void ds_ckpt_manifest_free(struct ds_ckpt_manifest *m);
/* Called for each extent that fails its CRC (got: the CRC read). */
typedef void (*ds_ckpt_extent_fn)(void *ud, const struct ds_ckpt_extent *x, uint32_t got);
/* CRC the extents of m whose kind is in kinds ("m", "d" or "md") and that
 * start in bytes [lo, hi) of file.  Returns 0, DS_ECORRUPT naming the
 * first bad one (cb, may be NULL, hears of each) or DS_EIO. */
int ds_ckpt_manifest_check(const char *file, const struct ds_ckpt_manifest *m, const char *kinds, uint64_t lo,
			   uint64_t hi, ds_ckpt_extent_fn cb, void *ud, struct ds_err *err);

#endif
