/* test_convert.c - safetensors parser and writer, llm.c files and the HF
 * name/layout mapping of ds-ckpt-convert, against hand-built bytes: header
 * JSON, offsets and dtypes, every bad-input path of the parser, an llm.c
 * file written here in llm.c's own order and round-tripped through
 * safetensors, and the NeoX per-head qkv interleave worked out by hand.
 */
#include "unit.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/convert.h"
#include "driver/convert_hf.h"
#include "io/llmc.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "util/log.h"

static char tmpdir[256];

static int setup(void **state)
{
	(void)state;
	ds_log_init(0, DS_LOG_WARN, 0);
	snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_convert.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[300];
	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static const char *tpath(const char *name)
{
	static char p[4][512];
	static int k;
	k = (k + 1) % 4;
	snprintf(p[k], sizeof(p[k]), "%s/%s", tmpdir, name);
	return p[k];
}

static void write_file(const char *path, const void *buf, size_t n)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, n, f), n);
	fclose(f);
}

static void *read_file(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *b;
	long sz;
	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	b = malloc((size_t)sz + 1);
	assert_int_equal(fread(b, 1, (size_t)sz, f), (size_t)sz);
	fclose(f);
	*n = (size_t)sz;
	return b;
}

/* A safetensors file from a header text and data bytes. */
static void st_file(const char *path, const char *hdr, const void *data, size_t n)
{
	unsigned char h8[8];
	size_t hl = strlen(hdr);
	char *buf = malloc(8 + hl + n);
	for (int i = 0; i < 8; i++)
		h8[i] = (unsigned char)((uint64_t)hl >> (8 * i));
	memcpy(buf, h8, 8);
	memcpy(buf + 8, hdr, hl);
	memcpy(buf + 8 + hl, data, n);
	write_file(path, buf, 8 + hl + n);
	free(buf);
}

/* ---- safetensors header ------------------------------------------------ */

static void test_st_header_good(void **state)
{
	const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
			"\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[24,30]},"
			"\"a\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
			"\"e\":{\"dtype\":\"I64\",\"shape\":[0],\"data_offsets\":[30,30]}}   ";
	struct ds_st_index idx;
	struct ds_err err = DS_ERR_INIT;
	(void)state;
	assert_int_equal(ds_st_parse_header(h, strlen(h), 30, "x", &idx, &err), 0);
	assert_int_equal(idx.nt, 3);
	/* sorted by offset */
	assert_string_equal(idx.t[0].name, "a");
	assert_int_equal(idx.t[0].dtype, DS_ST_F32);
	assert_int_equal(idx.t[0].ndim, 2);
	assert_int_equal(idx.t[0].shape[0], 2);
	assert_int_equal(idx.t[0].shape[1], 3);
	assert_int_equal(idx.t[1].dtype, DS_ST_BF16);
	assert_int_equal(idx.t[1].begin, 24);
	assert_int_equal(idx.t[1].end, 30);
	assert_int_equal(ds_st_index_find(&idx, "e"), 2);
	assert_int_equal(ds_st_index_find(&idx, "zz"), -1);
	assert_string_equal(ds_st_index_meta(&idx, "format"), "pt");
	ds_st_index_release(&idx);
}

static void expect_bad(const char *h, uint64_t data_len, const char *needle)
{
	struct ds_st_index idx;
	struct ds_err err = DS_ERR_INIT;
	int rc = ds_st_parse_header(h, strlen(h), data_len, "f.st", &idx, &err);
	if (rc != DS_ECORRUPT || !strstr(err.msg, needle))
		fprintf(stderr, "# header %s -> %d '%s' (wanted '%s')\n", h, rc, err.msg, needle);
	assert_int_equal(rc, DS_ECORRUPT);
	assert_non_null(strstr(err.msg, needle));
	assert_non_null(strstr(err.msg, "f.st"));
}

static void test_st_header_bad(void **state)
{
	(void)state;
	expect_bad("[1,2]", 0, "does not start with '{'");
	expect_bad("{\"a\":", 0, "header JSON");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
		   "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "header JSON");
	expect_bad("{\"a\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "shape[0]");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4, "need 8");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "past the data");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 4, "begin <= end");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "starts at data byte 4");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
		   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "no overlap");
	expect_bad("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 12, "8 data bytes after");
	expect_bad("{\"__metadata__\":{\"format\":1}}", 0, "not a string");
	expect_bad("{\"a\":3}", 0, "not an object");
}

/* ---- safetensors files ------------------------------------------------- */

static void test_st_writer_bytes(void **state)
{
	/* the exact file for one F32 tensor [2] = {1, 2}: 8-byte LE length, the
	 * compact header padded with spaces to a multiple of 8, then the data */
	const char *want_hdr = "{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
			       "\"data_offsets\":[0,8]}}";
	size_t hl = strlen(want_hdr), padded = (hl + 7) / 8 * 8, n;
	struct ds_st_writer *w;
	struct ds_err err = DS_ERR_INIT;
	float v[2] = { 1.0f, 2.0f };
	int64_t shape[1] = { 2 };
	unsigned char *b;
	(void)state;
	assert_int_equal(ds_st_writer_create(&w, tpath("one.safetensors"), &err), 0);
	assert_int_equal(ds_st_writer_meta(w, "format", "pt", &err), 0);
	assert_int_equal(ds_st_writer_add(w, "a", DS_ST_F32, 1, shape, &err), 0);
	assert_int_equal(ds_st_writer_add(w, "a", DS_ST_F32, 1, shape, &err), DS_EINVAL);
	assert_int_equal(ds_st_writer_write(w, v, 4, &err), 0);
	/* nothing visible before commit */
	assert_int_equal(access(tpath("one.safetensors"), F_OK), -1);
	assert_int_equal(ds_st_writer_commit(w, &err), DS_EINTERNAL);   /* 4 of 8 bytes */
	assert_int_equal(ds_st_writer_write(w, v + 1, 4, &err), 0);
	assert_int_equal(ds_st_writer_commit(w, &err), 0);
	ds_st_writer_destroy(w);
	b = read_file(tpath("one.safetensors"), &n);
	assert_int_equal(n, 8 + padded + 8);
	assert_int_equal(b[0], padded);
	for (int i = 1; i < 8; i++)
		assert_int_equal(b[i], 0);
	assert_memory_equal(b + 8, want_hdr, hl);
	for (size_t i = hl; i < padded; i++)
		assert_int_equal(b[8 + i], ' ');
	assert_memory_equal(b + 8 + padded, v, 8);
	free(b);
}

static void test_st_writer_abort(void **state)
{
	struct ds_st_writer *w;
	struct ds_err err = DS_ERR_INIT;
	int64_t shape[1] = { 1 };
	float v = 3;
	(void)state;
	write_file(tpath("keep.safetensors"), "old", 3);
	assert_int_equal(ds_st_writer_create(&w, tpath("keep.safetensors"), &err), 0);
	assert_int_equal(ds_st_writer_add(w, "x", DS_ST_F32, 1, shape, &err), 0);
	assert_int_equal(ds_st_writer_write(w, &v, 4, &err), 0);
	ds_st_writer_destroy(w);   /* no commit: the old file stays, no temporary is left */
	{
		size_t n;
		char *b = read_file(tpath("keep.safetensors"), &n);
		assert_int_equal(n, 3);
		free(b);
	}
	assert_int_equal(system("test $(ls -A /tmp/test_convert.*/ | grep -c tmp) -eq 0"), 0);
}

static void test_st_read(void **state)
{
	/* F16 1.0 = 0x3C00, -2.0 = 0xC000; BF16 1.5 = 0x3FC0 */
	unsigned char data[4 * 2 + 2 * 2 + 2] = { 0 };
	float f[2] = { 0.5f, -4.0f }, out[2];
	const char *h = "{\"f\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
			"\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[8,12]},"
			"\"b\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[12,14]}}";
	struct ds_st_file *sf;
	struct ds_err err = DS_ERR_INIT;
	(void)state;
	memcpy(data, f, 8);
	data[8] = 0x00; data[9] = 0x3C; data[10] = 0x00; data[11] = 0xC0;
	data[12] = 0xC0; data[13] = 0x3F;
	st_file(tpath("r.safetensors"), h, data, sizeof(data));
	assert_int_equal(ds_st_open(&sf, tpath("r.safetensors"), &err), 0);
	assert_int_equal(ds_st_read_f32(sf, ds_st_index_find(&sf->idx, "f"), out, &err), 0);
	assert_true(out[0] == 0.5f && out[1] == -4.0f);
	assert_int_equal(ds_st_read_f32(sf, ds_st_index_find(&sf->idx, "h"), out, &err), 0);
	assert_true(out[0] == 1.0f && out[1] == -2.0f);
	assert_int_equal(ds_st_read_f32(sf, ds_st_index_find(&sf->idx, "b"), out, &err), 0);
	assert_true(out[0] == 1.5f);
	ds_st_close(sf);

	/* truncated: the last tensor's bytes are cut off */
	st_file(tpath("t.safetensors"), h, data, sizeof(data) - 1);
	assert_int_equal(ds_st_open(&sf, tpath("t.safetensors"), &err), DS_ECORRUPT);
	assert_non_null(strstr(err.msg, "past the data"));
}

static void test_st_open_bad(void **state)
{
	struct ds_st_file *sf;
	struct ds_err err = DS_ERR_INIT;
	unsigned char big[16] = { 0, 0, 0, 0, 0, 1, 0, 0, '{', '}' };   /* N = 2^40 */
	unsigned char past[16] = { 100, 0, 0, 0, 0, 0, 0, 0, '{', '}' };   /* N = 100 > file */
	(void)state;
	write_file(tpath("short"), "abc", 3);
	assert_int_equal(ds_st_open(&sf, tpath("short"), &err), DS_ECORRUPT);
	assert_non_null(strstr(err.msg, "too short"));
	write_file(tpath("big"), big, sizeof(big));
	assert_int_equal(ds_st_open(&sf, tpath("big"), &err), DS_ECORRUPT);
	assert_non_null(strstr(err.msg, "100 MB"));
	write_file(tpath("past"), past, sizeof(past));
	assert_int_equal(ds_st_open(&sf, tpath("past"), &err), DS_ECORRUPT);
	assert_non_null(strstr(err.msg, "past the end"));
	assert_int_equal(ds_st_open(&sf, tpath("missing"), &err), DS_EINVAL);
}

/* ---- HF mapping --------------------------------------------------------- */

static void cfg_small(struct ds_model_config *c, int neox)
{
	memset(c, 0, sizeof(*c));
	c->family = DS_FAMILY_GPT;
	c->num_layers = 2;
	c->hidden_size = 4;
	c->num_attention_heads = 2;
	c->seq_length = 8;
	c->max_position_embeddings = 8;
	c->vocab_size = 5;
	c->make_vocab_size_divisible_by = 8;
	c->rotary_pct = 1.0;
	c->rotary_emb_base = 10000;
	c->layernorm_epsilon = 1e-5;
	c->rms_norm_epsilon = 1e-8;
	c->init_method_std = 0.02;
	if (neox) {
		c->pos_emb = DS_POS_ROTARY;
		c->no_weight_tying = 1;
		c->gpt_j_residual = 1;
	}
}

static void test_hf_names(void **state)
{
	static const struct { int neox; const char *dstk, *hf; int64_t s0, s1; int xf; } cases[] = {
		{ 0, "transformer.wte.weight", "transformer.wte.weight", 5, 4, DS_HF_UNPAD },
		{ 0, "transformer.wpe.weight", "transformer.wpe.weight", 8, 4, DS_HF_COPY },
		{ 0, "transformer.h.1.attn.c_attn.weight", "transformer.h.1.attn.c_attn.weight", 4, 12, DS_HF_TRANSPOSE },
		{ 0, "transformer.h.0.attn.c_attn.bias", "transformer.h.0.attn.c_attn.bias", 12, 0, DS_HF_COPY },
		{ 0, "transformer.h.0.mlp.c_fc.weight", "transformer.h.0.mlp.c_fc.weight", 4, 16, DS_HF_TRANSPOSE },
		{ 0, "transformer.h.0.mlp.c_proj.weight", "transformer.h.0.mlp.c_proj.weight", 16, 4, DS_HF_TRANSPOSE },
		{ 0, "transformer.ln_f.bias", "transformer.ln_f.bias", 4, 0, DS_HF_COPY },
		{ 1, "transformer.wte.weight", "gpt_neox.embed_in.weight", 5, 4, DS_HF_UNPAD },
		{ 1, "transformer.h.1.ln_1.weight", "gpt_neox.layers.1.input_layernorm.weight", 4, 0, DS_HF_COPY },
		{ 1, "transformer.h.0.ln_2.bias", "gpt_neox.layers.0.post_attention_layernorm.bias", 4, 0, DS_HF_COPY },
		{ 1, "transformer.h.0.attn.c_attn.weight", "gpt_neox.layers.0.attention.query_key_value.weight", 12, 4,
		  DS_HF_QKV_W },
		{ 1, "transformer.h.0.attn.c_attn.bias", "gpt_neox.layers.0.attention.query_key_value.bias", 12, 0,
		  DS_HF_QKV_B },
		{ 1, "transformer.h.1.attn.c_proj.weight", "gpt_neox.layers.1.attention.dense.weight", 4, 4, DS_HF_COPY },
		{ 1, "transformer.h.0.mlp.c_fc.weight", "gpt_neox.layers.0.mlp.dense_h_to_4h.weight", 16, 4, DS_HF_COPY },
		{ 1, "transformer.h.0.mlp.c_proj.bias", "gpt_neox.layers.0.mlp.dense_4h_to_h.bias", 4, 0, DS_HF_COPY },
		{ 1, "transformer.ln_f.weight", "gpt_neox.final_layer_norm.weight", 4, 0, DS_HF_COPY },
		{ 1, "lm_head.weight", "embed_out.weight", 5, 4, DS_HF_UNPAD },
	};
	(void)state;
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct ds_model_config c;
		struct ds_gpt *m;
		struct ds_err err = DS_ERR_INIT;
		char hf[128];
		int64_t shape[2];
		int xf, i;
		cfg_small(&c, cases[k].neox);
		assert_int_equal(ds_gpt_create(&m, &c, &err), 0);
		assert_int_equal(ds_hf_arch_for(ds_gpt_config(m), &err), cases[k].neox ? DS_HF_NEOX : DS_HF_GPT2);
		i = ds_gpt_find(m, cases[k].dstk);
		assert_true(i >= 0);
		assert_int_equal(ds_hf_map(cases[k].neox, ds_gpt_config(m), ds_gpt_tensor(m, i), hf, sizeof(hf), shape,
					   &xf), 0);
		assert_string_equal(hf, cases[k].hf);
		assert_int_equal(shape[0], cases[k].s0);
		assert_int_equal(shape[1], cases[k].s1);
		assert_int_equal(xf, cases[k].xf);
		ds_gpt_destroy(m);
	}
}

static void test_hf_qkv_interleave(void **state)
{
	/* C 4, 2 heads of 2: dstk rows [q0 q1 q2 q3 | k0..k3 | v0..v3]; NeoX
	 * wants head 0 = (q0 q1 k0 k1 v0 v1), head 1 = (q2 q3 k2 k3 v2 v3) */
	static const float want[12] = { 0, 1, 4, 5, 8, 9, 2, 3, 6, 7, 10, 11 };
	struct ds_model_config c;
	struct ds_gpt *m;
	struct ds_err err = DS_ERR_INIT;
	float src[12 * 4], dst[12 * 4], back[12 * 4];
	const struct ds_gpt_tensor *b, *w;
	(void)state;
	cfg_small(&c, 1);
	assert_int_equal(ds_gpt_create(&m, &c, &err), 0);
	b = ds_gpt_tensor(m, ds_gpt_find(m, "transformer.h.0.attn.c_attn.bias"));
	w = ds_gpt_tensor(m, ds_gpt_find(m, "transformer.h.0.attn.c_attn.weight"));
	for (int i = 0; i < 12; i++)
		src[i] = (float)i;
	ds_hf_apply(DS_HF_QKV_B, ds_gpt_config(m), b, src, dst);
	assert_memory_equal(dst, want, sizeof(want));
	for (int i = 0; i < 48; i++)
		src[i] = (float)i;
	ds_hf_apply(DS_HF_QKV_W, ds_gpt_config(m), w, src, dst);
	for (int r = 0; r < 12; r++)
		for (int j = 0; j < 4; j++)
			assert_true(dst[r * 4 + j] == want[r] * 4 + j);
	ds_hf_apply_inverse(DS_HF_QKV_W, ds_gpt_config(m), w, dst, back);
	assert_memory_equal(back, src, sizeof(back));
	ds_gpt_destroy(m);
}

static void test_hf_arch_refusals(void **state)
{
	struct ds_model_config c;
	struct ds_err err = DS_ERR_INIT;
	(void)state;
	cfg_small(&c, 0);
	c.norm = DS_NORM_RMSNORM;
	assert_int_equal(ds_hf_arch_for(&c, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "rmsnorm"));
	cfg_small(&c, 1);
	c.activation = DS_ACT_SWIGLU;
	assert_int_equal(ds_hf_arch_for(&c, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "swiglu"));
	c.activation = DS_ACT_GEGLU_EXACT;
	assert_int_equal(ds_hf_arch_for(&c, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "geglu_exact"));
	cfg_small(&c, 0);
	c.pos_emb = DS_POS_SINUSOIDAL;
	assert_int_equal(ds_hf_arch_for(&c, &err), DS_EINVAL);
	cfg_small(&c, 0);
	c.gpt_j_residual = 1;
	assert_int_equal(ds_hf_arch_for(&c, &err), DS_EINVAL);
	/* head_dim 2 x 0.5 = 1 rotated dim: transformers would rotate 1, dstk 0 */
	cfg_small(&c, 1);
	c.rotary_pct = 0.5;
	assert_int_equal(ds_hf_arch_for(&c, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "odd"));
}

/* config.json and back, for both architectures and both GELUs: the tanh
 * gelu is transformers' "gelu_new", gelu_exact its "gelu" (the erf form) */
static void test_hf_config_roundtrip(void **state)
{
	(void)state;
	for (int v = 0; v < 4; v++) {
		int neox = v & 1, exact = v >> 1;
		struct ds_model_config c, back;
		struct ds_err err = DS_ERR_INIT;
		char *js;
		int arch;
		cfg_small(&c, neox);
		c.activation = exact ? DS_ACT_GELU_EXACT : DS_ACT_GELU;
		assert_int_equal(ds_hf_arch_for(&c, &err), neox);   /* both GELUs export */
		c.intermediate_size = 12;
		c.rotary_pct = neox ? 0.5 : 1.0;
		c.layernorm_epsilon = 1e-6;
		js = ds_hf_config_json(neox, &c, "float32");
		assert_non_null(js);
		assert_non_null(strstr(js, neox ? "\"GPTNeoXForCausalLM\"" : "\"GPT2LMHeadModel\""));
		json_t *cj = json_loads(js, 0, NULL);
		assert_string_equal(json_string_value(json_object_get(cj, neox ? "hidden_act" : "activation_function")),
				    exact ? "gelu" : "gelu_new");
		json_decref(cj);
		write_file(tpath("config.json"), js, strlen(js));
		free(js);
		assert_int_equal(ds_hf_config_load(tpath("config.json"), &back, &arch, 0, &err), 0);
		assert_int_equal(back.activation, c.activation);
		assert_int_equal(arch, neox);
		assert_int_equal(back.num_layers, 2);
		assert_int_equal(back.hidden_size, 4);
		assert_int_equal(back.num_attention_heads, 2);
		assert_int_equal(back.vocab_size, 5);
		assert_int_equal(back.intermediate_size, 12);
		assert_int_equal(back.max_position_embeddings, 8);
		assert_int_equal(back.no_weight_tying, c.no_weight_tying);
		assert_int_equal(back.gpt_j_residual, c.gpt_j_residual);
		assert_int_equal(back.pos_emb, c.pos_emb);
		assert_true(back.rotary_pct == c.rotary_pct);
		assert_true(back.layernorm_epsilon == 1e-6);
	}
}

static void test_hf_config_bad(void **state)
{
	struct ds_model_config c;
	struct ds_err err = DS_ERR_INIT;
	int arch;
	(void)state;
	write_file(tpath("c1.json"), "{\"model_type\":\"llama\"}", 22);
	assert_int_equal(ds_hf_config_load(tpath("c1.json"), &c, &arch, 0, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "llama"));
	{
		const char *t = "{\"model_type\":\"gpt2\",\"n_layer\":2,\"n_embd\":4,\"n_head\":2,\"n_positions\":8,"
				"\"vocab_size\":5,\"activation_function\":\"relu\"}";
		write_file(tpath("c2.json"), t, strlen(t));
	}
	assert_int_equal(ds_hf_config_load(tpath("c2.json"), &c, &arch, 0, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "activation_function"));
	{
		const char *t = "{\"model_type\":\"gpt2\",\"n_layer\":2}";
		write_file(tpath("c3.json"), t, strlen(t));
	}
	assert_int_equal(ds_hf_config_load(tpath("c3.json"), &c, &arch, 0, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "n_embd"));
	/* GPT-NeoX without hidden_act means transformers' default, the exact
	 * GELU: gelu_exact, or the tanh GELU with approx_gelu */
	{
		const char *t = "{\"model_type\":\"gpt_neox\",\"num_hidden_layers\":2,\"hidden_size\":8,"
				"\"num_attention_heads\":2,\"max_position_embeddings\":8,\"vocab_size\":5}";
		write_file(tpath("c4.json"), t, strlen(t));
	}
	assert_int_equal(ds_hf_config_load(tpath("c4.json"), &c, &arch, 0, &err), 0);
	assert_int_equal(c.activation, DS_ACT_GELU_EXACT);
	ds_log_init(0, DS_LOG_ERROR, 0);
	assert_int_equal(ds_hf_config_load(tpath("c4.json"), &c, &arch, 1, &err), 0);
	ds_log_init(0, DS_LOG_WARN, 0);
	assert_int_equal(c.activation, DS_ACT_GELU);
	assert_int_equal(c.gpt_j_residual, 1);     /* use_parallel_residual's default */
	assert_int_equal(c.no_weight_tying, 1);    /* tie_word_embeddings' default for NeoX */
	assert_true(c.rotary_pct == 0.25);         /* GPTNeoXConfig's default */
}

static void test_model_json_roundtrip(void **state)
{
	struct ds_model_config c, back;
	struct ds_err err = DS_ERR_INIT;
	char *js;
	(void)state;
	cfg_small(&c, 1);
	c.rotary_pct = 0.25;
	c.intermediate_size = 12;
	c.hidden_dropout = 0.1;
	js = ds_convert_model_json(&c);
	assert_non_null(js);
	assert_int_equal(ds_convert_model_parse(js, "m", &back, &err), 0);
	free(js);
	assert_int_equal(back.make_vocab_size_divisible_by, 8);
	assert_int_equal(back.padded_vocab_size, 8);
	assert_true(back.rotary_pct == 0.25 && back.hidden_dropout == 0.1);
	assert_int_equal(back.no_weight_tying, 1);
	assert_int_equal(ds_convert_model_parse("{\"num_layerz\":2}", "m", &back, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "num_layerz"));
}

/* ---- llm.c -------------------------------------------------------------- */

/* An llm.c file written here in llm.c's order: L 2, C 4, NH 2, V 5, Vp 8,
 * maxT 8; element k of the parameter section holds k * 0.25 except wte rows
 * V..Vp-1, which llm.c keeps zero. */
static size_t make_llmc(const char *path, int version)
{
	struct ds_llmc_header h = { version, 8, 5, 2, 2, 4, 8 };
	int64_t n = ds_llmc_num_params(&h);
	int32_t w[256];
	size_t total = 1024 + (size_t)n * (version == 3 ? 4 : 2);
	char *buf = calloc(1, total);
	ds_llmc_encode_header(&h, w);
	memcpy(buf, w, 1024);
	for (int64_t k = 0; k < n; k++) {
		float v = (k >= 5 * 4 && k < 8 * 4) ? 0.0f : (float)k * 0.25f;
		if (version == 3) {
			memcpy(buf + 1024 + 4 * k, &v, 4);
		} else {
			uint32_t u;
			memcpy(&u, &v, 4);
			uint16_t b = (uint16_t)(u >> 16);   /* k/4 is exact in bf16 for k < 1024 */
			memcpy(buf + 1024 + 2 * k, &b, 2);
		}
	}
	write_file(path, buf, total);
	free(buf);
	return total;
}

static void test_llmc_header(void **state)
{
	struct ds_llmc_header h = { 3, 1024, 50257, 12, 12, 768, 50304 }, back;
	struct ds_err err = DS_ERR_INIT;
	int32_t w[256];
	(void)state;
	/* spec/formats.md: GPT-2 124M is 124,475,904 floats, 497,904,640 bytes */
	assert_int_equal(ds_llmc_num_params(&h), 124475904);
	ds_llmc_encode_header(&h, w);
	assert_int_equal(w[0], 20240326);
	assert_int_equal(ds_llmc_parse_header(w, 497904640, "g", &back, &err), 0);
	assert_int_equal(back.Vp, 50304);
	assert_int_equal(ds_llmc_parse_header(w, 497904636, "g", &back, &err), DS_ECORRUPT);
	assert_non_null(strstr(err.msg, "truncated"));
	w[1] = 4;
	assert_int_equal(ds_llmc_parse_header(w, 0, "g", &back, &err), DS_ECORRUPT);
	assert_non_null(strstr(err.msg, "version"));
	w[1] = 3;
	w[0] = 20240327;
	assert_int_equal(ds_llmc_parse_header(w, 0, "g", &back, &err), DS_ECORRUPT);
	assert_non_null(strstr(err.msg, "magic"));
}

/* llm.c's GPT-2 computes the tanh GELU: a gelu model fits its header, a
 * gelu_exact one is refused naming the activation */
static void test_llmc_gelu_only(void **state)
{
	struct ds_model_config c;
	struct ds_llmc_header h;
	struct ds_err err = DS_ERR_INIT;
	(void)state;
	cfg_small(&c, 0);
	c.intermediate_size = 4 * c.hidden_size;
	assert_int_equal(ds_llmc_header_for(&c, DS_LLMC_V_FP32, &h, &err), 0);
	c.activation = DS_ACT_GELU_EXACT;
	assert_int_equal(ds_llmc_header_for(&c, DS_LLMC_V_FP32, &h, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "gelu_exact"));
}

static void test_llmc_locate(void **state)
{
	struct ds_llmc_header h = { 3, 8, 5, 2, 2, 4, 8 };
	int64_t off, n;
	char name[96];
	(void)state;
	/* wte 32, wpe 32, ln1w 2x4, ln1b 2x4, qkvw 2x48: layer 1's qkvw at 32+32+8+8+48 */
	assert_int_equal(ds_llmc_locate(&h, "transformer.h.1.attn.c_attn.weight", &off, &n), 0);
	assert_int_equal(off, 128);
	assert_int_equal(n, 48);
	assert_int_equal(ds_llmc_locate(&h, "transformer.wte.weight", &off, &n), 0);
	assert_int_equal(off, 0);
	assert_int_equal(n, 20);
	assert_int_equal(ds_llmc_locate(&h, "lm_head.weight", &off, &n), -1);
	assert_int_equal(ds_llmc_tensor_count(&h), 28);
	assert_int_equal(ds_llmc_tensor_name(&h, 3, name, sizeof(name)), 0);
	assert_string_equal(name, "transformer.h.1.ln_1.weight");
	assert_int_equal(ds_llmc_tensor_name(&h, 27, name, sizeof(name)), 0);
	assert_string_equal(name, "transformer.ln_f.bias");
}

static void test_llmc_roundtrip(void **state)
{
	(void)state;
	for (int version = 3; version <= 5; version += 2) {
		struct ds_convert_opts o = DS_CONVERT_OPTS_INIT;
		struct ds_convert_result res;
		struct ds_err err = DS_ERR_INIT;
		struct ds_st_file *sf;
		size_t n0, n1;
		char *a, *b;
		float qkv[4 * 12];
		FILE *devnull = fopen("/dev/null", "w");
		size_t total = make_llmc(tpath("m.bin"), version);
		/* llm.c -> safetensors */
		o.input = tpath("m.bin");
		o.output = tpath("st");
		o.to = DS_FMT_SAFETENSORS;
		if (ds_convert_run(&o, devnull, &res, &err))
			fprintf(stderr, "# %s\n", err.msg);
		assert_int_equal(res.ntensors, 28);
		assert_int_equal(ds_st_open(&sf, tpath("st/model.safetensors"), &err), 0);
		assert_string_equal(ds_st_index_meta(&sf->idx, "format"), "pt");
		/* HF wte is [V, C] = the first 20 values; c_attn of layer 1 is the
		 * transpose of llm.c's qkvw[1] (elements 128..175, [12, 4]) */
		int i = ds_st_index_find(&sf->idx, "transformer.wte.weight");
		assert_int_equal(sf->idx.t[i].shape[0], 5);
		i = ds_st_index_find(&sf->idx, "transformer.h.1.attn.c_attn.weight");
		assert_int_equal(sf->idx.t[i].shape[0], 4);
		assert_int_equal(sf->idx.t[i].shape[1], 12);
		assert_int_equal(ds_st_read_f32(sf, i, qkv, &err), 0);
		for (int r = 0; r < 12; r++)
			for (int c = 0; c < 4; c++)
				assert_true(qkv[c * 12 + r] == (float)(64 + 16 + 48 + r * 4 + c) * 0.25f);
		ds_st_close(sf);
		/* safetensors -> llm.c: the same bytes */
		o.input = tpath("st");
		o.output = tpath("back.bin");
		o.to = DS_FMT_LLMC;
		o.dtype = version == 5 ? DS_FMT_BF16 : DS_FMT_FP32;
		if (ds_convert_run(&o, devnull, &res, &err))
			fprintf(stderr, "# %s\n", err.msg);
		a = read_file(tpath("m.bin"), &n0);
		b = read_file(tpath("back.bin"), &n1);
		assert_int_equal(n0, total);
		assert_int_equal(n1, total);
		assert_memory_equal(a, b, total);
		free(a);
		free(b);
		fclose(devnull);
	}
}

static void test_llmc_refusals(void **state)
{
	struct ds_convert_opts o = DS_CONVERT_OPTS_INIT;
	struct ds_convert_result res;
	struct ds_err err = DS_ERR_INIT;
	FILE *devnull = fopen("/dev/null", "w");
	size_t n;
	char *buf;
	(void)state;
	make_llmc(tpath("m.bin"), 3);
	/* a truncated llm.c file */
	buf = read_file(tpath("m.bin"), &n);
	write_file(tpath("cut.bin"), buf, n - 4);
	free(buf);
	o.input = tpath("cut.bin");
	o.output = tpath("cut-out");
	o.to = DS_FMT_SAFETENSORS;
	assert_int_equal(ds_convert_run(&o, devnull, &res, &err), DS_ECORRUPT);
	assert_non_null(strstr(err.msg, "truncated"));
	assert_int_equal(access(tpath("cut-out/model.safetensors"), F_OK), -1);
	/* a file that is none of the formats */
	write_file(tpath("junk"), "hello world, this is text", 25);
	o.input = tpath("junk");
	assert_int_equal(ds_convert_run(&o, devnull, &res, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "not a dstk checkpoint"));
	fclose(devnull);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_st_header_good),
		cmocka_unit_test(test_st_header_bad),
		cmocka_unit_test(test_st_writer_bytes),
		cmocka_unit_test(test_st_writer_abort),
		cmocka_unit_test(test_st_read),
		cmocka_unit_test(test_st_open_bad),
		cmocka_unit_test(test_hf_names),
		cmocka_unit_test(test_hf_qkv_interleave),
		cmocka_unit_test(test_hf_arch_refusals),
		cmocka_unit_test(test_hf_config_roundtrip),
		cmocka_unit_test(test_hf_config_bad),
		cmocka_unit_test(test_model_json_roundtrip),
		cmocka_unit_test(test_llmc_header),
		cmocka_unit_test(test_llmc_gelu_only),
		cmocka_unit_test(test_llmc_locate),
		cmocka_unit_test(test_llmc_roundtrip),
		cmocka_unit_test(test_llmc_refusals),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
