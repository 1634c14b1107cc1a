/* test_schedule.c - the pipeline schedules and layer partitions against
 * DeepSpeed's own code: tests/data/pipe_schedule.txt and pipe_partition.txt
 * hold what deepspeed/runtime/pipe/schedule.py (TrainSchedule,
 * InferenceSchedule) and runtime/utils.py (partition_uniform,
 * partition_balanced) produce, made by contrib/reference/pipe_reference.py.
 * Also: the 1F1B bubble count, the NeoX layer list of a model and the parts
 * its stages run. */
#include "unit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/schedule.h"
#include "model/pipe.h"

/* one step's instructions as DeepSpeed's repr joins them */
static void render(const struct ds_pipe_cmd *c, int n, int step, char *buf, size_t cap)
{
	size_t o = 0;
	buf[0] = 0;
	for (int i = 0; i < n; i++) {
		if (c[i].step != step)
			continue;
		if (c[i].buf >= 0)
			o += (size_t)snprintf(buf + o, cap - o, "%s%s(buffer_id=%d)", o ? "; " : "", ds_pipe_op_name(c[i].op),
					      c[i].buf);
		else
			o += (size_t)snprintf(buf + o, cap - o, "%s%s()", o ? "; " : "", ds_pipe_op_name(c[i].op));
	}
}

static void test_schedules(void **state)
{
	(void)state;
	FILE *f = fopen(DS_TEST_SRC("tests/data/pipe_schedule.txt"), "r");
	assert_non_null(f);
	char line[4096], kind[16], got[4096];
	int lines = 0, m, p, s, k;
	struct ds_pipe_cmd cmds[1024];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		int off = 0;
		assert_int_equal(sscanf(line, "%15s %d %d %d %d: %n", kind, &m, &p, &s, &k, &off), 5);
		const char *want = strchr(line, ':') + 2;
		if (!*(want - 1))
			want = "";
		int train = !strcmp(kind, "train");
		int n = train ? ds_pipe_train_schedule(m, p, s, cmds, 1024) : ds_pipe_infer_schedule(m, p, s, cmds, 1024);
		assert_true(n >= 0 && n <= 1024);
		render(cmds, n, k, got, sizeof got);
		if (strcmp(got, want))
			fprintf(stderr, "# %s m %d p %d stage %d step %d:\n#   got  %s\n#   want %s\n", kind, m, p, s, k, got,
				want);
		assert_string_equal(got, want);
		lines++;
	}
	fclose(f);
	assert_true(lines > 400);
	/* the buffers: max(2, min(p - s, m)); bad sizes refused */
	assert_int_equal(ds_pipe_num_buffers(8, 4, 0), 4);
	assert_int_equal(ds_pipe_num_buffers(8, 4, 3), 2);
	assert_int_equal(ds_pipe_num_buffers(1, 4, 0), 2);
	assert_int_equal(ds_pipe_train_schedule(0, 2, 0, NULL, 0), -1);
	assert_int_equal(ds_pipe_train_schedule(4, 2, 2, NULL, 0), -1);
}

/* every stage idles 2 (p - 1) of the 2 (m + p - 1) steps: the bubble
 * (p - 1) / (m + p - 1) of 1F1B */
static void test_bubble(void **state)
{
	(void)state;
	for (int p = 1; p <= 8; p++)
		for (int m = 1; m <= 16; m++)
			for (int s = 0; s < p; s++) {
				assert_int_equal(ds_pipe_idle_steps(m, p, s), 2 * (p - 1));
				/* each micro-batch forward and backward exactly once, forward first */
				struct ds_pipe_cmd c[512];
				int n = ds_pipe_train_schedule(m, p, s, c, 512), fw[16] = { 0 }, bw[16] = { 0 };
				for (int i = 0; i < n; i++) {
					if (c[i].op == DS_PIPE_FORWARD)
						fw[c[i].micro]++;
					if (c[i].op == DS_PIPE_BACKWARD) {
						assert_int_equal(fw[c[i].micro], 1);
						bw[c[i].micro]++;
					}
				}
				for (int i = 0; i < m; i++)
					assert_true(fw[i] == 1 && bw[i] == 1);
			}
}

static void test_partitions(void **state)
{
	(void)state;
	FILE *f = fopen(DS_TEST_SRC("tests/data/pipe_partition.txt"), "r");
	assert_non_null(f);
	char line[4096], kind[16];
	int n, p, lines = 0;
	while (fgets(line, sizeof line, f)) {
		int off = 0;
		assert_int_equal(sscanf(line, "%15s %d %d %n", kind, &n, &p, &off), 3);
		int64_t w[64];
		char *q = line + off;
		for (int i = 0; i < n; i++) {
			w[i] = strtoll(q, &q, 10);
			q++;   /* ',' or ':' */
		}
		int want[65], got[65];
		for (int i = 0; i <= p; i++)
			want[i] = (int)strtol(q, &q, 10);
		if (!strcmp(kind, "uniform"))
			ds_pipe_partition_uniform(n, p, got);
		else
			assert_int_equal(ds_pipe_partition_balanced(w, n, p, got), 0);
		for (int i = 0; i <= p; i++) {
			if (got[i] != want[i])
				fprintf(stderr, "# %s", line);
			assert_int_equal(got[i], want[i]);
		}
		lines++;
	}
	fclose(f);
	assert_true(lines >= 10);
}

static void mkmodel(struct ds_gpt **m, int L, int untied)
{
	struct ds_model_config c;
	struct ds_err err = DS_ERR_INIT;
	memset(&c, 0, sizeof c);
	c.family = DS_FAMILY_GPT;
	c.num_layers = L;
	c.hidden_size = 16;
	c.num_attention_heads = 2;
	c.seq_length = 8;
	c.max_position_embeddings = 16;
	c.vocab_size = 100;
	c.make_vocab_size_divisible_by = 128;
	c.no_weight_tying = untied;
	assert_int_equal(ds_gpt_create(m, &c, &err), 0);
}

/* NeoX's layer list and the parts of its stages */
static void test_layers_and_parts(void **state)
{
	(void)state;
	struct ds_gpt *m;
	struct ds_err err = DS_ERR_INIT;
	struct ds_pipe_layer ly[16];
	mkmodel(&m, 4, 0);
	assert_int_equal(ds_pipe_layers(m, ly, 16), 9);
	assert_string_equal(ly[0].type, "EmbeddingPipe");
	assert_string_equal(ly[1].type, "_pre_transformer_block");
	assert_string_equal(ly[5].type, "ParallelTransformerLayerPipe");
	assert_int_equal(ly[5].layer, 3);
	assert_string_equal(ly[7].type, "NormPipe");
	assert_string_equal(ly[8].type, "EmbeddingPipe");   /* tied: the TiedLayerSpec */
	assert_true(ly[8].params == ly[0].params && ly[0].params == 128 * 16 + 16 * 16);
	assert_int_equal(ly[1].params, 0);
	/* type:transformer over 2 stages: two layers each */
	int b[5];
	assert_int_equal(ds_pipe_partition(m, 2, "type:transformer|mlp", b, &err), 0);
	assert_true(b[0] == 0 && b[1] == 4 && b[2] == 9);
	struct ds_gpt_part p;
	ds_pipe_stage_part(m, b, 0, &p);
	assert_true(p.embed && p.l0 == 0 && p.l1 == 2 && !p.norm && !p.head);
	ds_pipe_stage_part(m, b, 1, &p);
	assert_true(!p.embed && p.l0 == 2 && p.l1 == 4 && p.norm && p.head);
	/* uniform over 4 stages of 9 items: 3 2 2 2 */
	assert_int_equal(ds_pipe_partition(m, 4, "uniform", b, &err), 0);
	assert_true(b[1] == 3 && b[2] == 5 && b[3] == 7 && b[4] == 9);
	ds_pipe_stage_part(m, b, 3, &p);
	assert_true(!p.embed && p.l0 == 4 && p.l1 == 4 && p.norm && p.head);
	ds_pipe_stage_part(m, b, 2, &p);   /* layer 3 and the post block */
	assert_true(!p.embed && p.l0 == 3 && p.l1 == 4 && !p.norm && !p.head);
	assert_int_equal(ds_pipe_partition(m, 2, "type:attention", b, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "found no valid layers"));
	assert_int_equal(ds_pipe_partition(m, 2, "profile", b, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "not implemented"));
	ds_gpt_destroy(m);
	mkmodel(&m, 2, 1);
	assert_int_equal(ds_pipe_layers(m, ly, 16), 7);
	assert_string_equal(ly[6].type, "ParallelLinearPipe");
	assert_int_equal(ly[6].params, 128 * 16);
	ds_gpt_destroy(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_schedules),
		cmocka_unit_test(test_bubble),
		cmocka_unit_test(test_partitions),
		cmocka_unit_test(test_layers_and_parts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
