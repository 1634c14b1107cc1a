/* llmc.h - llm.c model files (train_gpt2.c's gpt2_124M.bin and friends).
 *
 * spec/formats.md: a header of 256 int32 ([0] 20240326, [1] version 3 = fp32
 * or 5 = bf16, [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp), then the 16
 * GPT-2 parameter tensors layer-stacked in llm.c's order, nn.Linear (out, in)
 * layout, wte padded to Vp rows (rows V..Vp-1 zero).  This module maps each
 * dstk registry tensor to its place in such a file.
 */
#ifndef DS_IO_LLMC_H
#define DS_IO_LLMC_H

#include <stdint.h>

#include "config/model.h"
#include "util/err.h"

#define DS_LLMC_MAGIC 20240326
#define DS_LLMC_V_FP32 3
#define DS_LLMC_V_BF16 5
#define DS_LLMC_HEADER_BYTES 1024

struct ds_llmc_header {
	int version;           /* 3 (fp32) or 5 (bf16) */
	int maxT, V, L, NH, C, Vp;
};

/* Check the 256 int32 words of a header (h[0..255]) against the file size
 * (0 = do not check).  Fills *out; DS_ECORRUPT naming the word otherwise. */
int ds_llmc_parse_header(const int32_t *h, uint64_t file_size, const char *where,
			 struct ds_llmc_header *out, struct ds_err *err);
/* Encode *h into 256 int32 words. */
void ds_llmc_encode_header(const struct ds_llmc_header *h, int32_t *words);

/* Parameters the file holds (sum of the 16 tensors). */
int64_t ds_llmc_num_params(const struct ds_llmc_header *h);

/* The GPT-2 config an llm.c header describes (learned positions, layernorm
 * eps 1e-5, tanh GELU, tied, F = 4C).  make_vocab_size_divisible_by is
 * chosen so that dstk pads V to the file's Vp. */
void ds_llmc_config(const struct ds_llmc_header *h, struct ds_model_config *m);

/* The header for config m, or DS_EINVAL naming what llm.c cannot hold
 * (rotary, rmsnorm, swiglu, untied, parallel residual, F != 4C, ...). */
int ds_llmc_header_for(const struct ds_model_config *m, int version, struct ds_llmc_header *h,
		       struct ds_err *err);

/* Where dstk tensor `name` lives in the file: element offset from the end of
 * the header and element count (for wte: the first V rows only, since dstk
 * may pad differently).  Returns 0, or -1 for a name llm.c has no slot for. */
int ds_llmc_locate(const struct ds_llmc_header *h, const char *name, int64_t *elem_off, int64_t *numel);

/* Number of dstk tensors an llm.c file maps to (12 L + 4), and the dstk
 * name of the k-th in llm.c file order into buf (of n bytes).  Returns 0, -1
 * for k out of range. */
int ds_llmc_tensor_count(const struct ds_llmc_header *h);
int ds_llmc_tensor_name(const struct ds_llmc_header *h, int k, char *buf, size_t n);

#endif
