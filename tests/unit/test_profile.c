/* test_profile.c - lib/driver/profile: DeepSpeed's number formats (spec
 * case 12 and 13), the summary lines with engine info and recompute factor
 * (spec case 25), the aggregated and detailed layout, JSON and CSV, on a
 * small hand-countable GPT.
 */
#include "unit.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/count.h"
#include "driver/profile.h"

static void test_number_format(void **state)
{
	char b[64];
	/* spec case 12 */
	assert_string_equal(ds_profile_number(0, b, sizeof(b)), "0 ");
	assert_string_equal(ds_profile_number(999, b, sizeof(b)), "999 ");
	assert_string_equal(ds_profile_number(1000, b, sizeof(b)), "1 K");
	assert_string_equal(ds_profile_number(999999, b, sizeof(b)), "1000 K");
	assert_string_equal(ds_profile_number(1234567, b, sizeof(b)), "1.23 M");
	assert_string_equal(ds_profile_number(336234306, b, sizeof(b)), "336.23 M");
	assert_string_equal(ds_profile_number(3.13993e12, b, sizeof(b)), "3.14 T");
	assert_string_equal(ds_profile_number(0.07667, b, sizeof(b)), "76.67 m");
	assert_string_equal(ds_profile_number(3.409e-5, b, sizeof(b)), "34.09 u");
	assert_string_equal(ds_profile_number(12.5, b, sizeof(b)), "12.5 ");
	/* spec case 13 and the seed's figures */
	assert_string_equal(ds_profile_number(80.0 * 128 * 1024 * 1024, b, sizeof(b)), "10.74 G");
	assert_string_equal(ds_profile_params(24.0 * 12596224, b, sizeof(b)), "302.31 M");
	assert_string_equal(ds_profile_macs(3139932356608.0, b, sizeof(b)), "3.14 TMACs");
	assert_string_equal(ds_profile_number(6279864713216.0, b, sizeof(b)), "6.28 T");
	assert_string_equal(ds_profile_macs(4294967296.0, b, sizeof(b)), "4.29 GMACs");
	assert_string_equal(ds_profile_number(8589934592.0, b, sizeof(b)), "8.59 G");
	assert_string_equal(ds_profile_params(4198400, b, sizeof(b)), "4.2 M");
	/* params: G reads B, no trailing space */
	assert_string_equal(ds_profile_params(1.5e9, b, sizeof(b)), "1.5 B");
	assert_string_equal(ds_profile_params(0, b, sizeof(b)), "0");
	assert_string_equal(ds_profile_params(768, b, sizeof(b)), "768");
	assert_string_equal(ds_profile_duration(0.07667, b, sizeof(b)), "76.67 ms");
	assert_string_equal(ds_profile_duration(3.409e-5, b, sizeof(b)), "34.09 us");
	assert_string_equal(ds_profile_flops(81.9e12, b, sizeof(b)), "81.9 TFLOPS");
	assert_string_equal(ds_profile_flops(0, b, sizeof(b)), "0 FLOPS");
}

/* The test model of DESIGN.md: 2 layers, hidden 64, 4 heads, vocab 256. */
static void tiny(struct ds_count *c, int batch, int seq)
{
	struct ds_model_config m;
	struct ds_count_opts o = { batch, seq, DS_COUNT_CURRENT, 0, 1, NULL };
	struct ds_err err = DS_ERR_INIT;
	memset(&m, 0, sizeof(m));
	m.num_layers = 2;
	m.hidden_size = 64;
	m.num_attention_heads = 4;
	m.max_position_embeddings = 32;
	m.vocab_size = 256;
	m.make_vocab_size_divisible_by = 128;
	m.layernorm_epsilon = 1e-5;
	assert_int_equal(ds_count_model(&m, &o, c, &err), 0);
}

static char *render(const struct ds_count *c, const struct ds_profile_view *v,
		    const struct ds_profile_engine *e)
{
	char *buf = NULL;
	size_t len = 0;
	struct ds_err err = DS_ERR_INIT;
	FILE *f = open_memstream(&buf, &len);
	assert_non_null(f);
	assert_int_equal(ds_profile_render(c, v, e, f, &err), 0);
	fclose(f);
	return buf;
}

static void test_text_layout(void **state)
{
	struct ds_count c = DS_COUNT_INIT;
	struct ds_profile_view v = DS_PROFILE_VIEW_INIT;
	tiny(&c, 2, 32);
	v.top_modules = 2;
	v.detailed = 0;
	char *s = render(&c, &v, NULL);
	/* params: wte 256*64 + wpe 32*64 + 2 x 49,984 + ln_f 128 = 118,528 */
	assert_non_null(strstr(s, "\n-------------------------- DeepSpeed Flops Profiler --------------------------\n"
				  "Profile Summary at step 1:\nNotations:\n"));
	assert_non_null(strstr(s, "\nparams per GPU:                                                         118.53 K\n"));
	/* "{:<70}  {:<8}": the value is padded to 8 */
	char want[128];
	snprintf(want, sizeof(want), "\n%-70s  %-8s\n", "fwd flops per GPU: ", "15.9 M");  /* 64 tokens x 248,448 (test_count closed form) */
	assert_non_null(strstr(s, want));
	assert_non_null(strstr(s, "Top 2 modules in terms of params, MACs or fwd latency at different model depths:\n"
				  "depth 0:\n    params      - {'GPTLMHeadModel': '118.53 K'}\n"));
	/* depth 1: the GPT body and the (tied) head, by MACs: body first */
	assert_non_null(strstr(s, "depth 1:\n    params      - {'GPTModel': '118.53 K', 'Linear': '16.38 K'}\n"));
	/* ties keep first-seen order (Python's stable sort): Embedding before LayerNorm;
	 * per layer 64 tokens x 12 x 64^2 Linear + 2 x 2 x 32 x 32 x 64 attention MACs */
	assert_non_null(strstr(s, "depth 2:\n    params      - {'ModuleList': '99.97 K', 'Embedding': '18.43 K'}\n"
				  "    MACs        - {'ModuleList': '6.82 MMACs', 'Embedding': '0 MACs'}\n"));
	/* module_depth -1 prints every level but the deepest (Linear at 5) */
	assert_non_null(strstr(s, "depth 4:"));
	assert_null(strstr(s, "depth 5:"));
	/* unmeasured: no latency lines */
	assert_null(strstr(s, "fwd latency:"));
	assert_null(strstr(s, "Detailed Profile"));
	free(s);

	v.detailed = 1;
	v.module_depth = 2;
	s = render(&c, &v, NULL);
	assert_null(strstr(s, "depth 2:"));
	/* identical layers collapse as torch's ModuleList repr does */
	assert_non_null(strstr(s, "    (h): ModuleList(\n      99.97 K, 84.34% Params, "));
	assert_non_null(strstr(s, "      (0-1): 2 x GPTBlock(\n"));
	assert_non_null(strstr(s, "(c_attn): Linear(12.48 K, 10.53% Params, 786.43 KMACs, "));
	assert_non_null(strstr(s, "in_features=64, out_features=192, bias=True)"));
	free(s);
	ds_count_release(&c);
}

static void test_engine_lines(void **state)
{
	struct ds_count c = DS_COUNT_INIT;
	struct ds_profile_view v = DS_PROFILE_VIEW_INIT;
	struct ds_profile_engine e = { 0 };
	tiny(&c, 8, 32);
	c.nodes[0].latency_s = 0.1;
	e.world_size = 2;
	e.dp_size = 2;
	e.mp_size = 1;
	e.micro_batch = 8;
	e.fwd_s = 0.1;
	e.bwd_s = 0.2;
	e.step_s = 0.1;
	e.breakdown = 1;
	e.recompute_fwd_factor = 0.5;   /* spec case 25 */
	v.profile_step = 5;
	char *s = render(&c, &v, &e);
	assert_non_null(strstr(s, "Profile Summary at step 5:\n"));
	assert_non_null(strstr(s, "\nworld size:                                                             2       \n"
				  "data parallel size:                                                     2       \n"
				  "model parallel size:                                                    1       \n"
				  "batch size per GPU:                                                     8       \n"));
	assert_non_null(strstr(s, "\nbwd FLOPS per GPU = 2.5 * fwd flops per GPU / bwd latency: "));
	assert_non_null(strstr(s, "\nfwd+bwd FLOPS per GPU = 3.5 * fwd flops per GPU / (fwd+bwd latency): "));
	assert_non_null(strstr(s, "\nFLOPS per GPU = 3.5 * fwd flops per GPU / iter latency: "));
	assert_non_null(strstr(s, "\nfwd latency:                                                            100 ms  \n"));
	assert_non_null(strstr(s, "\niter latency:                                                           400 ms  \n"));
	/* samples/second = round(8 * 2 / 0.4, 2), printed as a Python float */
	char want[128];
	snprintf(want, sizeof(want), "\n%-70s  %-8s\n", "samples/second: ", "40.0");
	assert_non_null(strstr(s, want));
	assert_non_null(strstr(s, "    fwd latency - {'GPTLMHeadModel': '100 ms'}\n"));
	free(s);
	ds_count_release(&c);
}

static void test_json_csv(void **state)
{
	struct ds_count c = DS_COUNT_INIT;
	struct ds_profile_view v = DS_PROFILE_VIEW_INIT;
	json_error_t je;
	tiny(&c, 2, 32);
	v.format = DS_PROFILE_JSON;
	char *s = render(&c, &v, NULL);
	json_t *j = json_loads(s, 0, &je);
	assert_non_null(j);
	json_t *sum = json_object_get(j, "summary");
	assert_int_equal(json_integer_value(json_object_get(sum, "params_per_gpu")), 118528);
	assert_int_equal(json_integer_value(json_object_get(sum, "fwd_macs_per_gpu")), c.nodes[0].total.macs);
	assert_int_equal(json_integer_value(json_object_get(sum, "attention_matmul_macs_per_gpu")),
			 2LL * 2 * 2 * 32 * 32 * 64);
	assert_int_equal(json_array_size(json_object_get(j, "modules")), c.n);
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "config"), "family")), "gpt");
	json_decref(j);
	free(s);

	v.format = DS_PROFILE_CSV;
	s = render(&c, &v, NULL);
	assert_memory_equal(s, "path,class,depth,params,macs,flops,attn_matmul_macs,fwd_latency_s\n"
			       ",GPTLMHeadModel,0,118528,", 89);
	assert_non_null(strstr(s, "\ntransformer.h.1.attn.c_attn,Linear,5,12480,786432,1572864,0,0\n"));
	free(s);
	ds_count_release(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_number_format),
		cmocka_unit_test(test_text_layout),
		cmocka_unit_test(test_engine_lines),
		cmocka_unit_test(test_json_csv),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
