/* safetensors.h - read and write Hugging Face safetensors files.
 *
 * Format (spec/formats.md): u64 LE header length N, N bytes of UTF-8 JSON
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
 * {str: str}}, then the data; offsets are relative to the data start and the
 * ranges tile it exactly.  The reader checks all of that before any tensor is
 * read; the writer streams tensor data in declaration order into a temporary
 * file that is renamed only by ds_st_writer_commit.
 */
#ifndef DS_IO_SAFETENSORS_H
#define DS_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define DS_ST_MAX_DIMS 8
#define DS_ST_HEADER_MAX (100u * 1000u * 1000u)   /* the reference reader's limit */

enum ds_st_dtype {
	DS_ST_F32 = 0, DS_ST_F16, DS_ST_BF16, DS_ST_F64, DS_ST_I64, DS_ST_I32, DS_ST_I16,
	DS_ST_I8, DS_ST_U8, DS_ST_BOOL, DS_ST_U16, DS_ST_U32, DS_ST_U64, DS_ST_NDTYPES
};

struct ds_st_tensor {
	char *name;
	int dtype;                        /* enum ds_st_dtype */
	int ndim;
	int64_t shape[DS_ST_MAX_DIMS];
	uint64_t begin, end;              /* byte range relative to the data start */
};

/* A parsed header: tensors in data-offset order, plus __metadata__. */
struct ds_st_index {
	struct ds_st_tensor *t;
	int nt;
	char **meta_key, **meta_val;      /* __metadata__ pairs */
	int nmeta;
};

/* "F32" etc.; NULL for an unknown value. */
const char *ds_st_dtype_name(int dtype);
/* Bytes per element of dtype (1 for BOOL). */
size_t ds_st_dtype_size(int dtype);
/* Code of a dtype string, or -1. */
int ds_st_dtype_parse(const char *s);

/* Parse a header of n bytes for a data section of data_len bytes into *idx
 * (released with ds_st_index_release).  where names the file in messages.
 * Returns 0 or DS_ECORRUPT naming the entry and what is wrong. */
int ds_st_parse_header(const char *json, size_t n, uint64_t data_len, const char *where,
		       struct ds_st_index *idx, struct ds_err *err);
void ds_st_index_release(struct ds_st_index *idx);   /* accepts a zeroed struct */

/* Index of tensor `name` or -1; value of metadata key or NULL (borrowed). */
int ds_st_index_find(const struct ds_st_index *idx, const char *name);
const char *ds_st_index_meta(const struct ds_st_index *idx, const char *key);

/* ---- reading a file ----------------------------------------------------- */

struct ds_st_file {
	char *path;
	int fd;
	uint64_t data_start;              /* 8 + N */
	uint64_t file_size;
	struct ds_st_index idx;
};

/* Open and validate path.  Returns 0, DS_EIO (cannot open) or DS_ECORRUPT
 * (not a safetensors file, truncated, bad header).  Close with ds_st_close. */
int ds_st_open(struct ds_st_file **out, const char *path, struct ds_err *err);
void ds_st_close(struct ds_st_file *f);   /* accepts NULL */

/* Copy the raw bytes of tensor i into dst (end - begin bytes). */
int ds_st_read_raw(const struct ds_st_file *f, int i, void *dst, struct ds_err *err);
/* Tensor i as numel fp32 values (F32, F16, BF16 and F64 are converted);
 * DS_EINVAL for other dtypes. */
int ds_st_read_f32(const struct ds_st_file *f, int i, float *dst, struct ds_err *err);

/* ---- writing a file ----------------------------------------------------- */

struct ds_st_writer;

/* Start a file for path: tensors are declared with ds_st_writer_add, then
 * their data given in the same order with ds_st_writer_write.  Returns 0 or
 * DS_ENOMEM.  Destroy without commit leaves nothing on disk. */
int ds_st_writer_create(struct ds_st_writer **out, const char *path, struct ds_err *err);
/* Add a __metadata__ pair (copied). */
int ds_st_writer_meta(struct ds_st_writer *w, const char *key, const char *val, struct ds_err *err);
/* Declare the next tensor (name copied). DS_EINVAL for a duplicate name. */
int ds_st_writer_add(struct ds_st_writer *w, const char *name, int dtype, int ndim,
		     const int64_t *shape, struct ds_err *err);
/* Append n bytes of data (the header is written on the first call); the
 * total must equal the declared tensors' bytes by commit time. */
int ds_st_writer_write(struct ds_st_writer *w, const void *data, size_t n, struct ds_err *err);
/* Check the byte count, flush, fsync and rename into place.  Returns 0,
 * DS_EINTERNAL (data short of the declarations) or DS_EIO. */
int ds_st_writer_commit(struct ds_st_writer *w, struct ds_err *err);
void ds_st_writer_destroy(struct ds_st_writer *w);   /* accepts NULL; removes an uncommitted file */

#endif
