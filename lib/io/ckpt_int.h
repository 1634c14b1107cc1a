/* ckpt_int.h - private to lib/io/ckpt*.c: the checkpoint handle that the
 * writer (ckpt_write.c), reader (ckpt_read.c) and verifier (ckpt_verify.c)
 * share, the helpers of ckpt.c, and the MPI-IO hooks of the writer
 * (ckpt_mpio.c fills them with parallel HDF5 in MPI builds; ckpt_mpio_stub.c
 * stands in for them elsewhere, so the writer has no #ifdef). */
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
	hid_t dset;
	struct ds_ckpt_crc_piece *p;
	size_t np, cap;
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
	/* writer: the ranks writing this file (comm NULL: this process alone) */
	struct ds_comm *comm;
	int par, rank;       /* par: more than one rank, MPI-IO */
	hid_t dxpl;          /* collective transfer (par) or H5P_DEFAULT */
	int wrc;             /* this rank's first failure while writing (0: none) */
	struct ds_err werr;  /* and its message, for commit's vote */
	int fault_rank;      /* DS_TEST_FAULT_CKPT_FAIL_RANK, -1 off */
};

/* Bytes moved per H5Dread/H5Dwrite when streaming whole chunks: small
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

/* ---- ckpt_verify.c ---- */

/* `auto`: the newest global_step<N> of dir whose checksums all verify. */
int ds_ckpt_open_auto(struct ds_ckpt **out, const char *dir, struct ds_err *err);

/* ---- MPI-IO hooks (ckpt_mpio.c or ckpt_mpio_stub.c) ---- */

/* 1 when this build links parallel HDF5 and can write with MPI-IO. */
extern const int ds_ckpt_mpio_built;

/* Make fapl open files with the MPI-IO driver over comm's MPI
 * communicator, metadata written collectively.  DS_ENOTSUP in a build
 * without MPI or when comm is not an MPI communicator. */
int ds_ckpt_mpio_fapl(hid_t fapl, const struct ds_comm *comm, struct ds_err *err);

/* A dataset transfer property list asking for collective MPI-IO
 * (H5FD_MPIO_COLLECTIVE); H5P_DEFAULT in a build without MPI.  Close with
 * ds_ckpt_mpio_dxpl_close. */
hid_t ds_ckpt_mpio_dxpl(void);
void ds_ckpt_mpio_dxpl_close(hid_t dxpl);

#endif
