/* ckpt.h - world-size independent checkpoints in HDF5 (DESIGN.md).
 *
 *   SAVE/latest                   the newest complete tag ("global_step<N>\n")
 *   SAVE/global_step<N>/state.h5  root attributes (format_version, step, ...),
 *       /model/<name>, /optimizer/<state>/<name>: whole logical tensors, and
 *       groups (/optimizer /scheduler /loss_scaler /data /rng) of attributes.
 * Every tensor dataset carries "dtype", "crc_chunk_bytes" and "crc32c": one
 * CRC-32C per chunk of crc_chunk_bytes of its row-major bytes, checked for
 * exactly the chunks a read touches.  A save goes to global_step<N>.tmp/ and
 * is fsynced and renamed before `latest` is replaced (latest.tmp + rename).
 * Writes take a flat element range [begin, end) of a tensor, so each rank can
 * write its ZeRO slice; each slice's CRC is kept as per-chunk pieces that
 * commit combines (ds_ckpt_crc_combine), so pieces from other ranks can join
 * them.
 *
 * Parallel saves (ds_ckpt_create_comm over an MPI communicator of more than
 * one rank; MPI builds link parallel HDF5).  All ranks open the same
 * state.h5 with the MPI-IO driver and write their own ranges of the same
 * whole-tensor datasets, so the file is exactly what a serial save writes
 * (any reader, any world size).  Checksums: a CRC chunk may have several
 * writers (ZeRO slices do not follow chunk bounds), so no rank can checksum
 * a chunk from the file.  Instead each rank CRCs the bytes it writes, one
 * piece per chunk it touches, from its own buffer; commit allgathers the
 * pieces, every rank joins them in offset order with ds_ckpt_crc_combine
 * (exact: CRC(A||B) from CRC(A), CRC(B), |B|) and checks that they tile each
 * chunk once, so every rank stores the same crc32c array collectively.
 * Success is agreed collectively: after the file is flushed and closed by
 * all, the ranks vote (allreduce); only when every rank succeeded does
 * rank 0 rename global_step<N>.tmp and replace `latest`; otherwise the tmp
 * directory is removed and the previous checkpoint stays `latest`.  A rank
 * that failed keeps joining every collective call (empty writes), so no
 * rank waits forever for it.
 *
 * Test-only: DS_TEST_FAULT_CKPT_FAIL_RANK=R makes rank R's first non-empty
 * tensor_write fail (nothing written), as an I/O error would (rank 0 in a
 * serial save).
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
 * file) -- then every writer call below is collective: all ranks make the
 * same calls in the same order with the same arguments, except that
 * ds_ckpt_tensor_write takes each rank's own range (empty if it has none;
 * ranges of different ranks must not overlap and together cover the
 * tensor).  A call that fails on one rank returns its error there, but the
 * rank must go on making the calls (commit reports the failure to all).
 * Errors name the failing rank.  DS_ENOTSUP in a build without MPI. */
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
 * written), close and fsync state.h5, rename global_step<N>.tmp to
 * global_step<N>, then replace `latest`.  On failure the previous checkpoint
 * and `latest` are untouched.  Parallel: collective, and it fails on every
 * rank if any rank failed a write (the others' message names that rank). */
int ds_ckpt_commit(struct ds_ckpt *c, struct ds_err *err);

/* ---- reading ---------------------------------------------------------- */

/* Open a checkpoint of load_dir.  tag NULL or "latest": the tag named in
 * load_dir/latest; "auto": the newest global_step<N> whose checksums all
 * verify (others, and *.tmp, skipped with a warning); otherwise that tag.
 * load_dir may also be a tag directory holding state.h5, or an HDF5 file
 * of this layout itself (tag ignored); the tag is then the directory's name.
 * Returns 0, DS_EINVAL (missing) or DS_ECORRUPT (not a dstk checkpoint,
 * truncated, newer format), with one line naming the file. */
int ds_ckpt_open(struct ds_ckpt **out, const char *load_dir, const char *tag, struct ds_err *err);

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

/* Recompute every checksum (memory: one chunk).  Returns 0, or the first
 * failure's DS_ECORRUPT in err after visiting all tensors; cb may be NULL. */
int ds_ckpt_verify(struct ds_ckpt *c, ds_ckpt_verify_fn cb, void *ud, struct ds_err *err);

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

/* Close a reader, or abandon an uncommitted writer (its .tmp directory is
 * removed; nothing else on disk changes).  Accepts NULL. */
void ds_ckpt_close(struct ds_ckpt *c);

/* Bytes per element of a dtype, and its name ("f32", "bf16", ...). */
size_t ds_ckpt_dtype_size(int dtype);
const char *ds_ckpt_dtype_name(int dtype);

/* CRC-32C of A||B from crc(A), crc(B) and |B| (zlib's GF(2) method), so
 * slices written separately (by separate ranks) combine into chunk CRCs. */
uint32_t ds_ckpt_crc_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#endif
