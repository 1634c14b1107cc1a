/* convert_hf.h - Hugging Face names, layouts and config.json for dstk models.
 *
 * GPT-2 (GPT2LMHeadModel): transformer.{wte,wpe,h.N.*,ln_f}, Conv1D weights
 * stored [in, out] (the transpose of dstk's [out, in]), wte [V, C] unpadded,
 * lm_head.weight only when untied.  GPT-NeoX (GPTNeoXForCausalLM):
 * gpt_neox.{embed_in, layers.N.*, final_layer_norm}, embed_out, nn.Linear
 * [out, in] weights, and query_key_value rows interleaved per head
 * [h0 q,k,v | h1 q,k,v | ...] where dstk's c_attn is [q | k | v].
 */
#ifndef DS_DRIVER_CONVERT_HF_H
#define DS_DRIVER_CONVERT_HF_H

#include <stddef.h>
#include <stdint.h>

#include "config/model.h"
#include "model/registry.h"
#include "util/err.h"

enum ds_hf_arch { DS_HF_GPT2 = 0, DS_HF_NEOX = 1 };

/* How a dstk tensor becomes its HF tensor. */
enum ds_hf_xform {
	DS_HF_COPY = 0,        /* same bytes */
	DS_HF_TRANSPOSE = 1,   /* [out, in] -> [in, out] (GPT-2 Conv1D) */
	DS_HF_UNPAD = 2,       /* first vocab_size rows of [Vp, C] */
	DS_HF_QKV_W = 3,       /* NeoX: rows [q|k|v] -> per-head [q,k,v] */
	DS_HF_QKV_B = 4        /* NeoX: the same permutation of the bias */
};

/* "gpt2" or "gpt_neox". */
const char *ds_hf_arch_name(int arch);

/* The HF architecture for model m: learned positions -> GPT-2 (sequential
 * residual only), rotary -> GPT-NeoX; both need layernorm and gelu or
 * gelu_exact (config.json's "gelu_new" or "gelu").
 * Returns the arch, or DS_EINVAL naming the option HF cannot express. */
int ds_hf_arch_for(const struct ds_model_config *m, struct ds_err *err);

/* HF name, shape and transform of dstk tensor t (buf of n bytes).  Returns
 * 0, or DS_EINVAL for a tensor the arch has no name for. */
int ds_hf_map(int arch, const struct ds_model_config *m, const struct ds_gpt_tensor *t, char *buf,
	      size_t n, int64_t shape[2], int *xform);

/* Apply xform to src (dstk layout of t) into dst (HF layout); inverse
 * does the reverse (HF -> dstk; rows past vocab_size of UNPAD are zeroed). */
void ds_hf_apply(int xform, const struct ds_model_config *m, const struct ds_gpt_tensor *t,
		 const float *src, float *dst);
void ds_hf_apply_inverse(int xform, const struct ds_model_config *m, const struct ds_gpt_tensor *t,
			 const float *src, float *dst);

/* config.json text for model m stored as torch_dtype ("float32",
 * "float16", "bfloat16") (malloc'd; caller frees), or NULL. */
char *ds_hf_config_json(int arch, const struct ds_model_config *m, const char *torch_dtype);

/* Parse an HF config.json (GPT2Config or GPTNeoXConfig) into *m (all
 * dstk fields set; seq_length = max positions) and *arch.  The exact GELU
 * ("gelu", GPT-NeoX's default) becomes gelu_exact, or with approx_gelu
 * dstk's tanh gelu with a warning.  Returns 0 or DS_EINVAL naming the file
 * and the key. */
int ds_hf_config_load(const char *path, struct ds_model_config *m, int *arch, int approx_gelu,
		      struct ds_err *err);

/* ---- dstk model JSON (the checkpoint's "model JSON" attribute) ---------- */

/* Model JSON of m with GPT-NeoX key names (malloc'd; caller frees), or NULL. */
char *ds_convert_model_json(const struct ds_model_config *m);
/* Parse a model JSON text (where names it in messages) into *m with the
 * documented defaults, derived fields filled.  Returns 0 or DS_EINVAL. */
int ds_convert_model_parse(const char *text, const char *where, struct ds_model_config *m,
			   struct ds_err *err);

#endif
