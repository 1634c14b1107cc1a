/* ckpt.h - world-size independent checkpoints in HDF5 (DESIGN.md).
 *
 *   SAVE/latest                   the newest complete tag ("global_step<N>\n")
 *   SAVE/global_step<N>/state.h5  root attributes (format_version, step, ...),
 *       /model/<name>, /optimizer/<state>/<name>: whole logical tensors, and
 *       groups (/optimizer /scheduler /loss_scaler /data /rng) of attributes.
 *   SAVE/global_step<N>/state.h5.manifest  a CRC-32C of every byte of
 *       state.h5 (ckpt_manifest.c), checked before HDF5 parses any of it.
 * Every tensor dataset carries "dtype", "crc_chunk_bytes" and "crc32c": one
 * CRC-32C per chunk of crc_chunk_bytes of its row-major bytes, checked for
 * exactly the chunks a read touches.  A save goes to global_step<N>.tmp/ and
 * is fsynced and renamed before `latest` is replaced (latest.tmp + rename).
 * Writes take a flat element range [begin, end) of a tensor, so each rank can
 * write its ZeRO slice; each slice's CRC is kept as per-chunk pieces that
 * commit combines (ds_ckpt_crc_combine), so pieces from other ranks can join
 * them.
 *
 * Parallel saves (ds_ckpt_create_comm over a communicator of more than one
 * rank).  The ranks write one state.h5, the file a serial save writes (any
 * reader, any world size).  HDF5 runs on rank 0 alone and only for the
 * metadata: it creates every dataset with its bytes allocated at once and
 * tells the others where they start; each rank pwrite(2)s its own ranges
 * there, in parallel, CRCing them from its buffer (a CRC chunk may have
 * several writers, since ZeRO slices do not follow chunk bounds: the pieces
 * are joined in offset order with ds_ckpt_crc_combine).  No HDF5 call is
 * collective, so a rank that fails never leaves another inside HDF5; each
 * outcome is agreed through the communicator.  Commit: every rank syncs
 * its bytes, all agree that everything was written, the CRC pieces go to
 * rank 0, which stores the checksums, flushes HDF5's metadata, writes the
 * manifest, renames global_step<N>.tmp and replaces `latest`; its outcome
 * is agreed again.  Any failure -- a full disk, an I/O error, a quota,
 * permissions -- reaches every rank as the same one-line message (the file
 * and the system's reason, naming the rank), the .tmp directory is removed
 * and the previous checkpoint stays `latest`.  A rank that failed keeps
 * making the calls (they do nothing more), so no rank waits for it.
 *
 * Test-only faults (environment variables, read at create):
 *   DS_TEST_FAULT_CKPT_FAIL_RANK=R   rank R's first non-empty tensor_write
 *                                    fails (nothing written)
 *   DS_TEST_FAULT_CKPT_WRITE=R:ERRNO rank R's writes of tensor bytes fail with
 *                                    ERRNO (ENOSPC, EIO, EDQUOT, ...)
 *   DS_TEST_FAULT_CKPT_META=ERRNO    rank 0's writes of HDF5's metadata fail
 *   DS_TEST_FAULT_CKPT_KILL=R:POINT[:N]  rank R raises SIGKILL the N-th time
 *                                    (default 1; counted over the process's
 *                                    saves) it reaches POINT: create (the
 *                                    .tmp file exists), write (a non-empty
 *                                    tensor write), commit, close (state.h5
 *                                    complete, no manifest), rename (manifest
 *                                    written), latest (tag renamed, `latest`
 *                                    not yet replaced)
 */
#ifndef DS_IO_CKPT_H
#define DS_IO_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm.h"
#include "util/err.h"

#define DS_CKPT_FORMAT_VERSION 1
#define DS_CKPT_CHUNK_BYTES (1u << 20)  /* default crc_chunk_bytes */
#define DS_CKPT_MAX_DIMS 8
#define DS_CKPT_NAME_MAX 512
#define DS_CKPT_STATE_MAX 64  /* an optimizer state's name, with its NUL */

enum ds_ckpt_dtype {
	DS_CKPT_F32 = 0, DS_CKPT_F64, DS_CKPT_F16, DS_CKPT_BF16, /* f16/bf16 stored as uint16 bits */
	DS_CKPT_I32, DS_CKPT_I64, DS_CKPT_U8
};

/* The root attributes.  Strings may be NULL when writing ("" is stored);
 * when reading they are borrowed from the handle. */
struct ds_ckpt_meta {
	int64_t format_version;    /* read only: DS_CKPT_FORMAT_VERSION is written */
	int64_t step;
	int64_t consumed_samples;
	int64_t world_size;        /* at save */
	int64_t zero_stage;
	const char *dtype;         /* training dtype: "fp32", "fp16", "bf16" */
	const char *config_json;   /* the effective DeepSpeed config */
	const char *model_json;    /* the model config */
};

struct ds_ckpt_tensor_info {
	char name[DS_CKPT_NAME_MAX];  /* path below the root: "model/transformer.wte.weight" */
	int dtype;                    /* enum ds_ckpt_dtype */
	int ndim;
	uint64_t shape[DS_CKPT_MAX_DIMS];
	uint64_t numel;
};

struct ds_ckpt;

/* ---- writing ---------------------------------------------------------- */

/* Start a save of tag global_step<meta->step> under save_dir (created if
 * missing): a stale global_step<N>.tmp/ is removed, state.h5 is created in a
 * fresh one with the root attributes and the standard groups.  Returns 0 or
 * DS_EIO/DS_EINVAL.  Finish with ds_ckpt_commit, then ds_ckpt_close. */
int ds_ckpt_create(struct ds_ckpt **out, const char *save_dir, const struct ds_ckpt_meta *meta, struct ds_err *err);

/* ds_ckpt_create by every rank of comm together.  comm NULL or of one rank:
 * the same as ds_ckpt_create.  More ranks: a parallel save (top of this
 * file).  create, tensor_create, tensor_write and commit are collective:
 * all ranks make the same calls in the same order with the same arguments,
 * except that ds_ckpt_tensor_write takes each rank's own range (empty if it
 * has none; ranges of different ranks must not overlap and together cover
 * the tensor).  The attribute setters are rank 0's (the others' calls do
 * nothing).  A call that fails on one rank returns its error there, but
 * every rank must go on making the calls: commit returns the first failure
 * to all.  Returns 0, or the error all ranks agree on. */
int ds_ckpt_create_comm(struct ds_ckpt **out, const char *save_dir, const struct ds_ckpt_meta *meta,
			struct ds_comm *comm, struct ds_err *err);

/* CRC chunk size for tensors created after this call (a multiple of 8;
 * tests use small ones).  Returns 0 or DS_EINVAL. */
int ds_ckpt_set_chunk_bytes(struct ds_ckpt *c, size_t bytes, struct ds_err *err);

/* Declare tensor `name` (e.g. "model/transformer.h.0.attn.c_attn.weight";
 * missing groups are created) with its full logical shape. */
int ds_ckpt_tensor_create(struct ds_ckpt *c, const char *name, int dtype, int ndim, const uint64_t *shape,
			  struct ds_err *err);

/* Write elements [begin, end) of the row-major flattening of tensor name
 * from data (end - begin elements of its dtype).  Slices may come in any
 * order; every element must be written once before commit. */
int ds_ckpt_tensor_write(struct ds_ckpt *c, const char *name, uint64_t begin, uint64_t end, const void *data,
			 struct ds_err *err);

/* Record a failure of this rank that happened outside the writer (e.g.
 * copying a slice out of device memory) as if a write had failed: the
 * save is lost and commit returns the first failure to every rank.
 * Returns its code (DS_EIO when err has none). */
int ds_ckpt_fail(struct ds_ckpt *c, const struct ds_err *err);

/* tensor_create + tensor_write of the whole tensor. */
int ds_ckpt_tensor_put(struct ds_ckpt *c, const char *name, int dtype, int ndim, const uint64_t *shape,
		       const void *data, struct ds_err *err);

/* One slice's share of a CRC chunk: bytes [off, off + len) of chunk
 * `chunk` of a tensor, and their CRC-32C. */
struct ds_ckpt_crc_piece {
	uint64_t chunk, off, len;
	uint32_t crc, reserved;
};

/* The pieces recorded so far for tensor name by this writer (borrowed,
 * valid until the next write to that tensor or commit).  With parallel HDF5
 * every rank writes its own slice: ranks allgather their pieces and hand
 * the others' to ds_ckpt_tensor_add_pieces, so each commit sees the whole. */
int ds_ckpt_tensor_pieces(struct ds_ckpt *c, const char *name, const struct ds_ckpt_crc_piece **p, size_t *n,
			  struct ds_err *err);
/* Add pieces of slices written by another process; DS_EINVAL for a piece
 * outside the tensor. */
int ds_ckpt_tensor_add_pieces(struct ds_ckpt *c, const char *name, const struct ds_ckpt_crc_piece *p, size_t n,
			      struct ds_err *err);

/* Store the checksums (DS_EINVAL naming a tensor with elements never
 * written), flush and fsync state.h5, write its manifest, rename
 * global_step<N>.tmp to global_step<N>, then replace `latest`.  On failure
 * the .tmp directory is gone, the previous checkpoint and `latest` are
 * untouched, and the message ends by saying which tag `latest` names.
 * Parallel: collective; every rank returns the same outcome and message
 * (the lowest failing rank's first failure). */
int ds_ckpt_commit(struct ds_ckpt *c, struct ds_err *err);

/* ---- reading ---------------------------------------------------------- */

/* Open a checkpoint of load_dir.  tag NULL or "latest": the tag named in
 * load_dir/latest; "auto": ds_ckpt_pick without a communicator (skipped
 * tags logged as warnings; DS_EINVAL when there is no finished tag);
 * otherwise that tag.  load_dir may also be a tag directory holding
 * state.h5, or an HDF5 file of this layout itself (tag ignored); the tag is
 * then the directory's name.  When state.h5 has a manifest, its size and
 * the CRC of every byte of HDF5's are checked before HDF5 opens it.
 * Returns 0, DS_EINVAL (missing) or DS_ECORRUPT (damaged, not a dstk
 * checkpoint, truncated, newer format), with one line naming the file. */
int ds_ckpt_open(struct ds_ckpt **out, const char *load_dir, const char *tag, struct ds_err *err);

/* 1 when c's state.h5 has a manifest (a checkpoint of an older dstk has
 * none: its HDF5 metadata is not checked before HDF5 reads it). */
int ds_ckpt_has_manifest(const struct ds_ckpt *c);

/* Tag ("global_step100") and the state.h5 path of an open checkpoint (borrowed). */
const char *ds_ckpt_tag(const struct ds_ckpt *c);
const char *ds_ckpt_file(const struct ds_ckpt *c);

/* The root attributes (strings borrowed from c, valid until close). */
int ds_ckpt_meta_get(struct ds_ckpt *c, struct ds_ckpt_meta *m, struct ds_err *err);

/* Every tensor, groups in creation order, depth first.  *out is malloc'd
 * (free it); returns 0 or DS_ECORRUPT. */
int ds_ckpt_list(struct ds_ckpt *c, struct ds_ckpt_tensor_info **out, size_t *n, struct ds_err *err);

/* Shape and dtype of one tensor: 0, or DS_EINVAL when it does not exist. */
int ds_ckpt_tensor_info(struct ds_ckpt *c, const char *name, struct ds_ckpt_tensor_info *info, struct ds_err *err);

/* Read elements [begin, end) into out, verifying the CRC of every chunk the
 * range touches.  DS_ECORRUPT names the dataset and chunk on a mismatch. */
int ds_ckpt_tensor_read(struct ds_ckpt *c, const char *name, uint64_t begin, uint64_t end, void *out,
			struct ds_err *err);

/* Called by ds_ckpt_verify per tensor: status 0 or DS_ECORRUPT with msg. */
typedef void (*ds_ckpt_verify_fn)(void *ud, const struct ds_ckpt_tensor_info *t, int status, const char *msg);

/* Check every byte: with a manifest, the CRC of each of its extents
 * (threads share them) and that each dataset's bytes and checksums are the
 * manifest's; without one, every chunk of every dataset.  Memory: a chunk
 * per thread.  Returns 0, or the first failure's DS_ECORRUPT in err after
 * visiting all tensors; cb may be NULL. */
int ds_ckpt_verify(struct ds_ckpt *c, ds_ckpt_verify_fn cb, void *ud, struct ds_err *err);

/* ---- what a resume needs ---------------------------------------------- */

/* The optimizer states a checkpoint holds per tensor ("exp_avg", ...): its
 * /optimizer "states" attribute, or for checkpoints written before it, the
 * states of its /optimizer "type".  names[0..*n) of at most max. */
int ds_ckpt_saved_states(struct ds_ckpt *c, char (*names)[DS_CKPT_STATE_MAX], int max, int *n, struct ds_err *err);

/* One tensor a resume reads, in its shape (the driver lists a model's). */
struct ds_ckpt_need_tensor {
	const char *name;
	int ndim;                     /* 1 or 2 */
	uint64_t shape[2];
};

/* What a resume reads from a checkpoint. */
struct ds_ckpt_need {
	const struct ds_ckpt_need_tensor *tensors; /* model/<name> for each, in its shape */
	int ntensors;
	int any16;                    /* those may be f16 or bf16 as well as f32 (weights files) */
	const char *const *states;    /* optimizer/<state>/<name>, f32, for each of nstates */
	int nstates;
	int progress;                 /* the counters: optimizer step, scheduler steps, data skipped_steps */
};

/* Called for each thing missing or of the wrong shape or dtype: name
 * ("model/x", "optimizer/exp_avg/x", "scheduler@steps") and what is wrong. */
typedef void (*ds_ckpt_need_fn)(void *ud, const char *name, const char *problem);

/* Check that c holds everything n names, in the right shapes and dtypes.
 * Returns 0, or DS_EINVAL naming the first problem and how many there are
 * (cb, may be NULL, hears of each). */
int ds_ckpt_check_need(struct ds_ckpt *c, const struct ds_ckpt_need *n, ds_ckpt_need_fn cb, void *ud,
		       struct ds_err *err);

/* ---- choosing a tag (--load auto) --------------------------------------- */

/* A tag passed over, and why. */
struct ds_ckpt_skip {
	char tag[64];                 /* "global_step40", or "global_step50.tmp" */
	char why[DS_ERR_MSG_MAX];
};

/* Decides whether an opened, intact checkpoint fits: 0 takes it; DS_EINVAL
 * stops the search (it is not what the run needs); another error skips it. */
typedef int (*ds_ckpt_accept_fn)(void *ud, struct ds_ckpt *c, struct ds_err *err);

/* The newest global_step<N> of dir that opens, that accept (may be NULL)
 * takes and whose every byte verifies -- with comm, every rank of it calls
 * this together: rank 0 lists dir, each rank checks its share of the bytes,
 * and all agree on each tag, so all return the same tag (each with its own
 * reader, *out).  *out NULL and 0 when dir holds no finished checkpoint
 * (missing, empty, only unfinished .tmp saves).  *skipped (malloc'd, free
 * it) lists the newer tags passed over with the reason, and the unfinished
 * saves newer than the one chosen.  Returns 0, DS_EINVAL (accept's, or dir
 * unreadable), or DS_ECORRUPT when finished tags exist but none verifies. */
int ds_ckpt_pick(struct ds_ckpt **out, const char *dir, struct ds_comm *comm, ds_ckpt_accept_fn accept, void *ud,
		 struct ds_ckpt_skip **skipped, size_t *nskipped, struct ds_err *err);

/* ---- attributes on a group ("" or "/" is the root; "scheduler", "data",
 * "optimizer", ...).  Setting needs a writer and creates the group;
 * getting works on both.  A missing key is DS_EINVAL naming group and key. */
int ds_ckpt_attr_set_i64(struct ds_ckpt *c, const char *group, const char *key, int64_t v, struct ds_err *err);
int ds_ckpt_attr_set_f64(struct ds_ckpt *c, const char *group, const char *key, double v, struct ds_err *err);
int ds_ckpt_attr_set_str(struct ds_ckpt *c, const char *group, const char *key, const char *v, struct ds_err *err);
int ds_ckpt_attr_get_i64(struct ds_ckpt *c, const char *group, const char *key, int64_t *v, struct ds_err *err);
int ds_ckpt_attr_get_f64(struct ds_ckpt *c, const char *group, const char *key, double *v, struct ds_err *err);
/* *v is malloc'd: free it. */
int ds_ckpt_attr_get_str_dup(struct ds_ckpt *c, const char *group, const char *key, char **v, struct ds_err *err);
/* 1 if the attribute exists, else 0. */
int ds_ckpt_attr_has(struct ds_ckpt *c, const char *group, const char *key);

/* Close a reader, or abandon an uncommitted writer (rank 0 removes its .tmp
 * directory; nothing else on disk changes).  Not collective.  Accepts NULL. */
void ds_ckpt_close(struct ds_ckpt *c);

/* Bytes per element of a dtype, and its name ("f32", "bf16", ...). */
size_t ds_ckpt_dtype_size(int dtype);
const char *ds_ckpt_dtype_name(int dtype);

/* CRC-32C of A||B from crc(A), crc(B) and |B| (zlib's GF(2) method), so
 * slices written separately (by separate ranks) combine into chunk CRCs. */
uint32_t ds_ckpt_crc_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#endif
