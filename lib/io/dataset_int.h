/* dataset_int.h - what the dataset readers share (private to lib/io).
 *
 * struct ds_dataset is the handle every reader fills through its priv
 * pointer; ds_dataset_map_* memory-map one file read-only (an empty file is
 * a valid map of size 0).
 */
#ifndef DS_IO_DATASET_INT_H
#define DS_IO_DATASET_INT_H

#include <stddef.h>
#include <stdint.h>

#include "io/dataset.h"

struct ds_dataset {
	const struct ds_dataset_ops *ops;
	char *path;          /* as given to ds_dataset_open */
	uint64_t vocab_size; /* 0: unchecked */
	void *priv;          /* the reader's state */
};

struct ds_dataset_map {
	char *file;        /* owned copy of the path */
	const uint8_t *p;  /* NULL when size is 0 */
	size_t size;       /* bytes */
};

/* Map file read-only.  Returns 0 or DS_EINVAL "FILE: no such file" /
 * DS_EIO. */
int ds_dataset_map_open(struct ds_dataset_map *m, const char *file, struct ds_err *err);
void ds_dataset_map_close(struct ds_dataset_map *m);  /* accepts a zeroed map */

/* Element types of token arrays (Megatron dtype codes where they agree). */
enum { DS_TOK_U8 = 1, DS_TOK_I8 = 2, DS_TOK_I16 = 3, DS_TOK_I32 = 4, DS_TOK_I64 = 5, DS_TOK_U16 = 8,
       DS_TOK_U32 = 100 };

/* Bytes per element of a DS_TOK_* type (0 if unknown). */
size_t ds_dataset_tok_size(int type);

/* Convert n little-endian elements of type at src to uint32 (negative or
 * > UINT32_MAX values become UINT32_MAX so the vocab check rejects them). */
void ds_dataset_tok_convert(int type, const uint8_t *src, size_t n, uint32_t *out);

extern const struct ds_dataset_ops ds_dataset_text_ops;
extern const struct ds_dataset_ops ds_dataset_megatron_ops;
extern const struct ds_dataset_ops ds_dataset_llmc_ops;

#endif
