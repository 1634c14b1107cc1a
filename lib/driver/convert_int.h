/* convert_int.h - the pieces of ds_convert_run: a tensor source that hands
 * out dstk-named fp32 tensors one at a time, whatever the input format, and
 * one writer per output format.  Private to lib/driver/convert*.c.
 */
#ifndef DS_DRIVER_CONVERT_INT_H
#define DS_DRIVER_CONVERT_INT_H

#include <stdint.h>
#include <stdio.h>

#include "config/model.h"
#include "driver/convert.h"
#include "model/gpt.h"
#include "util/err.h"

struct ds_csrc {
	const char *kind;              /* "hdf5", "safetensors", "llm.c" */
	char path[4096];               /* the file actually read */
	struct ds_model_config cfg;    /* effective (derived fields set) */
	struct ds_gpt *model;          /* registry of cfg */
	int64_t step;                  /* checkpoint step, else 0 */
	char *model_json;              /* model JSON text (malloc'd) */
	void *ctx;
	/* Fill dst (t->numel floats, dstk [out, in] layout, padded rows too). */
	int (*read)(void *ctx, const struct ds_gpt_tensor *t, float *dst, struct ds_err *err);
	void (*close)(void *ctx);
};

/* Finish a source once cfg is set: build the model (registry) and model JSON. */
int ds_csrc_setup(struct ds_csrc *s, struct ds_err *err);
/* Close and free everything; accepts a zeroed struct. */
void ds_csrc_release(struct ds_csrc *s);
/* fp32 bytes of the largest tensor of s. */
uint64_t ds_csrc_largest(const struct ds_csrc *s);

/* Narrow buf[0..n) to fp16 (bf16 = 0) or bf16 in place: the 16-bit values
 * land in the first 2n bytes of buf, so no second tensor-sized buffer. */
void ds_convert_narrow_inplace(float *buf, size_t n, int bf16);

/* Sources (convert_st.c, convert_llmc.c, convert_ckpt.c): fill *s; on
 * failure the caller still releases it.  DS_EINVAL / DS_ECORRUPT name the
 * file and what is wrong.  safetensors: a file, a directory holding
 * model.safetensors or model.safetensors.index.json (shards), or the index;
 * hf_config NULL means config.json next to it; approx_gelu as
 * ds_hf_config_load. */
int ds_csrc_open_safetensors(struct ds_csrc *s, const char *path, const char *hf_config, int approx_gelu,
			     struct ds_err *err);
int ds_csrc_open_llmc(struct ds_csrc *s, const char *path, struct ds_err *err);
int ds_csrc_open_ckpt(struct ds_csrc *s, const char *path, struct ds_err *err);

/* Writers: return 0 and add the tensor bytes written to *bytes; output
 * appears only when complete.  safetensors (OUTDIR/model.safetensors +
 * config.json) in dtype fmt (DS_FMT_FP32/FP16/BF16); llm.c in version 3/5. */
/* mkdir -p; 0 or DS_EIO naming the directory. */
int ds_convert_make_dir(const char *d, struct ds_err *err);
/* An MoE model under Mixtral's names (convert_mixtral.c): 0, or DS_EINVAL
 * saying what of the architecture is not Mixtral's.  st_dt: DS_ST_*. */
int ds_convert_mixtral_check(const struct ds_model_config *m, struct ds_err *err);
int ds_convert_write_mixtral(struct ds_csrc *s, const char *outdir, int st_dt, uint64_t *bytes,
			     struct ds_err *err);
int ds_convert_write_safetensors(struct ds_csrc *s, const char *outdir, int fmt, uint64_t *bytes,
				 struct ds_err *err);
int ds_convert_write_llmc(struct ds_csrc *s, const char *path, int version, uint64_t *bytes,
			  struct ds_err *err);
/* Weights-only HDF5 with dtype fmt (DS_FMT_FP32/FP16/BF16). */
int ds_convert_write_weights(struct ds_csrc *s, const char *path, int fmt, uint64_t *bytes,
			     struct ds_err *err);
/* A fresh checkpoint (step 0 unless the source has one) under SAVE dir. */
int ds_convert_write_ckpt(struct ds_csrc *s, const char *savedir, uint64_t *bytes, struct ds_err *err);

/* What inspect reports, whatever the format. */
struct ds_cinfo_tensor {
	char name[512];
	int ndim;
	int64_t shape[4];
	const char *dtype;             /* "float32", "float16", "bfloat16" */
	const char *status;            /* checksum: "ok", "BAD", "unchecked", "none"; "MISSING" */
};
struct ds_cinfo {
	const char *format;            /* "checkpoint", "weights", "safetensors", "llm.c" */
	char path[4096];
	char tag[128];                 /* checkpoint tag or "" */
	int64_t step, consumed;        /* -1 when unknown */
	int world_size, zero_stage;    /* -1 when unknown */
	char dtype[32];
	char *config_json, *model_json;  /* malloc'd or NULL */
	struct ds_cinfo_tensor *t;     /* malloc'd */
	int nt, nbad;
	char bad_msg[DS_ERR_MSG_MAX];  /* verify: the first failure as the reader said it */
	/* verify of a dstk checkpoint: */
	int verified;                  /* the fields below are set */
	int manifest;                  /* state.h5 has a manifest (every byte checked) */
	int nmissing;                  /* rows "MISSING": what a resume (or, weights: the model) needs */
	int no_model;                  /* no model JSON: the contents were not checked */
	char missing_msg[DS_ERR_MSG_MAX];
};
/* Render info as text or JSON to out. */
void ds_cinfo_print(const struct ds_cinfo *ci, int json, FILE *out);
void ds_cinfo_release(struct ds_cinfo *ci);

/* inspect / verify of a dstk checkpoint or weights file: fill *ci; with
 * verify every byte is checked (status "ok"/"BAD", ci->nbad) and so is
 * everything a resume needs (rows "MISSING", ci->nmissing).
 * DS_EINVAL/DS_ECORRUPT when path is not a readable checkpoint; with
 * verify, DS_ECHECK when its bytes are damaged before HDF5 may read them. */
int ds_convert_info_ckpt(const char *path, int verify, struct ds_cinfo *ci, struct ds_err *err);

#endif
