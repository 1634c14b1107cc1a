/* convert.h - ds-ckpt-convert's work: inspect, verify and convert checkpoints.
 *
 * Formats: dstk HDF5 checkpoints (DESIGN.md layout), weights-only HDF5 in
 * fp32/fp16/bf16, Hugging Face safetensors (GPT-2 and GPT-NeoX names, with
 * config.json) and llm.c model files.  Every conversion streams tensor by
 * tensor (peak memory ~ two copies of the largest tensor) and writes its
 * output under a temporary name, renamed only when complete.
 */
#ifndef DS_DRIVER_CONVERT_H
#define DS_DRIVER_CONVERT_H

#include <stdint.h>
#include <stdio.h>

#include "util/err.h"

enum ds_convert_cmd { DS_CONVERT_CONVERT = 0, DS_CONVERT_INSPECT = 1, DS_CONVERT_VERIFY = 2 };

enum ds_convert_fmt {
	DS_FMT_AUTO = 0,         /* input: detect from the file; output: required */
	DS_FMT_CKPT = 1,         /* dstk checkpoint (SAVE dir, tag dir or state.h5) */
	DS_FMT_SAFETENSORS = 2,  /* model.safetensors + config.json */
	DS_FMT_LLMC = 3,         /* llm.c model file */
	DS_FMT_FP32 = 4,         /* weights-only HDF5, fp32 */
	DS_FMT_FP16 = 5,         /* weights-only HDF5, fp16 */
	DS_FMT_BF16 = 6          /* weights-only HDF5, bf16 */
};

struct ds_convert_opts {
	int cmd;                 /* enum ds_convert_cmd */
	const char *input;       /* file or directory */
	const char *output;      /* -o: file (llmc, fp32/16/bf16), directory (safetensors, ckpt) */
	int from, to;            /* enum ds_convert_fmt */
	const char *hf_config;   /* config.json for --from safetensors (default: next to the file) */
	int dtype;               /* --dtype of safetensors and llmc output: DS_FMT_FP32
				  * (default), DS_FMT_FP16 (safetensors), DS_FMT_BF16 */
	int json;                /* inspect/verify/convert summary as JSON */
	int approx_gelu;         /* --approx-gelu: import HF's exact GELU as dstk's tanh GELU */
};
#define DS_CONVERT_OPTS_INIT { DS_CONVERT_CONVERT, NULL, NULL, DS_FMT_AUTO, DS_FMT_AUTO, NULL, DS_FMT_FP32, 0, 0 }

struct ds_convert_result {
	int ntensors;            /* tensors read (convert) or listed (inspect/verify) */
	uint64_t bytes_out;      /* bytes of tensor data written */
	uint64_t largest_bytes;  /* fp32 bytes of the largest tensor */
	uint64_t peak_rss;       /* peak resident set size of the process, bytes */
	int bad;                 /* verify: datasets whose checksums failed */
};

/* Format name ("safetensors") or code (-1 when unknown) for the CLI. */
const char *ds_convert_fmt_name(int fmt);
int ds_convert_fmt_parse(const char *s);

/* Run o, writing the report (inspect table/JSON, verify lines, convert
 * summary) to out.  Returns 0; DS_ECHECK when verify found a bad checksum
 * (err names it); DS_EINVAL / DS_ECORRUPT for bad input (exit 2); DS_EIO. */
int ds_convert_run(const struct ds_convert_opts *o, FILE *out, struct ds_convert_result *res,
		   struct ds_err *err);

#endif
