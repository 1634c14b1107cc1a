/* test_estimate.c - the memory estimator against numbers worked out by hand
 * from the ZeRO formulas (spec §7: 4 bytes of fp32 parameters, 4 of
 * gradients, 8 of Adam states per element; stage 1 divides the optimizer
 * states by W, stage 2 also the gradients, stage 3 also the parameters;
 * mixed precision 2 + 2 + 12, as in the ZeRO paper) and
 * the engine's padding of each segment to W*16 elements, and against what a
 * real engine allocates through ds_alloc in this process (1 rank; the MPI
 * ranks are tests/mpi/memory.bats's). */
#include "unit.h"

#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "config/model.h"
#include "engine/engine.h"
#include "engine/estimate.h"
#include "model/gpt.h"
#include "util/mem.h"

static struct ds_comm *comm;

static int setup(void **state)
{
	(void)state;
	struct ds_err err = DS_ERR_INIT;
	return ds_comm_create(&comm, "self", &err);
}

static int teardown(void **state)
{
	(void)state;
	ds_comm_destroy(comm);
	return 0;
}

/* gpt-test.json: 2 layers, C 64, 4 heads, T 32, vocab 256, learned
 * positions, layernorm, gelu, tied.  By hand:
 *   segment 0: wte 256*64 + wpe 32*64             = 18432
 *   a layer:   12 C^2 + 13 C = 49152 + 832         = 49984
 *   final:     ln_f weight + bias = 2 C            =   128
 *   total 18432 + 2*49984 + 128                    = 118528 */
static void opts_test_model(struct ds_engine_opts *o, int stage, int mb, int ga)
{
	struct ds_err err = DS_ERR_INIT;
	ds_engine_opts_init(o);
	int rc = ds_model_config_load(DS_TEST_SRC("share/models/gpt-test.json"), &o->model, &err);
	if (rc)
		fprintf(stderr, "# %s\n", err.msg);
	assert_int_equal(rc, 0);
	o->zero_stage = stage;
	o->micro_batch = mb;
	o->grad_accum = ga;
}

static struct ds_engine_mem est(const struct ds_engine_opts *o, int W)
{
	struct ds_engine_mem m;
	struct ds_err err = DS_ERR_INIT;
	int rc = ds_engine_mem_estimate(o, W, &m, &err);
	if (rc)
		fprintf(stderr, "# %s\n", err.msg);
	assert_int_equal(rc, 0);
	return m;
}

static void test_hand_count(void **state)
{
	(void)state;
	struct ds_engine_opts o;
	opts_test_model(&o, 0, 2, 2);
	struct ds_engine_mem m = est(&o, 1);
	assert_int_equal(m.num_params, 118528);
	assert_int_equal(m.padded, 118528);  /* every segment is a multiple of 16 */
	assert_int_equal(m.nseg, 4);
	assert_int_equal(m.nstates, 2);
	/* stage 0: 16 bytes per parameter (4 + 4 + 8) */
	assert_int_equal(m.bytes[DS_MEM_PARAMS], 474112);
	assert_int_equal(m.bytes[DS_MEM_GRADS], 474112);
	assert_int_equal(m.bytes[DS_MEM_OPTIM], 948224);
	assert_int_equal(m.model_state, 1896448);
	/* scratch: the largest segment (a layer), 49984 floats */
	assert_int_equal(m.bytes[DS_MEM_COMM], 199936);
	/* rows: in + tg = 2 * 2*32 int32, the step's 2*2 rows of 33 tokens,
	 * and 4 optimizer headers */
	assert_int_equal(m.bytes[DS_MEM_OTHER], 512 + 528 + 4 * sizeof(struct ds_optim));
	assert_int_equal(m.bytes[DS_MEM_ACT], ds_gpt_activation_bytes(&o.model, 2, 32, 0, 0));
	size_t sum = 0;
	for (int c = 0; c < DS_MEM_NCAT; c++)
		sum += m.bytes[c];
	assert_int_equal(m.total, sum);
}

/* W = 3 pads: align 48 -> 18432, 50016, 50016, 144 (118608 elements);
 * shards 6144, 16672, 16672, 48 (39536). */
static void test_hand_count_padded_stage3(void **state)
{
	(void)state;
	struct ds_engine_opts o;
	opts_test_model(&o, 3, 2, 2);
	o.stage3_param_persistence_threshold = 0;
	struct ds_engine_mem m = est(&o, 3);
	assert_int_equal(m.padded, 118608);
	assert_int_equal(m.nseg_partitioned, 4);
	assert_int_equal(m.bytes[DS_MEM_PARAMS], 39536 * 4);
	assert_int_equal(m.bytes[DS_MEM_GRADS], 39536 * 4);
	assert_int_equal(m.bytes[DS_MEM_OPTIM], 2 * 39536 * 4);
	/* scratch of the largest shard + 3 parameter and 2 gradient buffers
	 * of the largest padded segment */
	assert_int_equal(m.bytes[DS_MEM_COMM], 16672 * 4 + 5 * 50016 * 4);
	/* the default threshold (1e5) keeps every segment of this model whole */
	o.stage3_param_persistence_threshold = 100000;
	m = est(&o, 3);
	assert_int_equal(m.nseg_partitioned, 0);
	assert_int_equal(m.bytes[DS_MEM_PARAMS], 118608 * 4);
	assert_int_equal(m.bytes[DS_MEM_GRADS], 39536 * 4);
	/* the engine allocates the three parameter slots at stage 3 (W > 1)
	 * even when no segment ends up partitioned */
	assert_int_equal(m.bytes[DS_MEM_COMM], 16672 * 4 + 5 * 50016 * 4);
}

/* Model-state bytes per rank over W = 1, 2, 4 (no padding at these W for
 * this model) follow (4 + 4 + 8/W), (4 + 12/W), 16/W bytes per element. */
static void test_zero_formulas(void **state)
{
	(void)state;
	const double P = 118528;
	for (int W = 1; W <= 4; W *= 2)
		for (int stage = 0; stage <= 3; stage++) {
			struct ds_engine_opts o;
			opts_test_model(&o, stage, 1, 1);
			o.stage3_param_persistence_threshold = 0;
			struct ds_engine_mem m = est(&o, W);
			double per = stage == 0 ? 16 : stage == 1 ? 8 + 8.0 / W : stage == 2 ? 4 + 12.0 / W : 16.0 / W;
			if (W == 1)
				per = 16;
			assert_int_equal(m.model_state, (size_t)(per * P));
		}
	/* SGD without momentum keeps no state; with momentum one */
	struct ds_engine_opts o;
	opts_test_model(&o, 1, 1, 1);
	ds_optim_params_init(&o.optim, DS_OPTIM_SGD);
	assert_int_equal(est(&o, 2).bytes[DS_MEM_OPTIM], 0);
	o.optim.momentum = 0.9;
	assert_int_equal(est(&o, 2).bytes[DS_MEM_OPTIM], 118528 / 2 * 4);
}

/* fp16/bf16 with Adam, the ZeRO paper's mixed-precision count: 2 bytes of
 * 16-bit parameters, 2 of 16-bit gradients and K = 12 of fp32 master
 * weights and Adam states per element - 16 at stage 0, stage 1 dividing
 * the 12 by W, stage 2 also the gradients (2 + 14/W), stage 3 everything
 * (16/W).  Gradients accumulated in fp32 (data_types.grad_accum_dtype
 * "fp32") hold 4 bytes instead: 18, 6 + 12/W, 2 + 16/W, 18/W. */
static void test_zero_formulas_half(void **state)
{
	(void)state;
	const double P = 118528;
	for (int acc32 = 0; acc32 <= 1; acc32++)
		for (int W = 1; W <= 4; W *= 2)
			for (int stage = 0; stage <= 3; stage++) {
				struct ds_engine_opts o;
				opts_test_model(&o, stage, 1, 1);
				o.stage3_param_persistence_threshold = 0;
				o.half = stage % 2 ? DS_HALF_BF16 : DS_HALF_FP16;
				o.grad_accum_fp32 = acc32;
				struct ds_engine_mem m = est(&o, W);
				double g = acc32 ? 4 : 2;
				double per = stage == 0 ? 2 + g + 12 : stage == 1 ? 2 + g + 12.0 / W
					   : stage == 2 ? 2 + (g + 12) / W : (2 + g + 12) / W;
				if (W == 1)
					per = 2 + g + 12;
				assert_int_equal(m.model_state, (size_t)(per * P));
				assert_int_equal(m.bytes[DS_MEM_GRADS], (size_t)(g * P / (stage >= 2 ? W : 1)));
			}
}

/* The communication row of 16-bit gradients at W = 2 (largest padded
 * segment a layer, 49984 elements; its shard 24992): reduced in the model's
 * dtype, stages 0-1 sum in place and stage 2 packs the segment to send and
 * receives the 16-bit shard inside the fp32 gradient slot (2 x 49984 +
 * 2 x 24992 bytes fit in its 4 x 49984), so nothing is added - unlike an
 * fp32 model's communication_data_type fp16 (2 x 2 x (49984 + 24992)
 * bytes more at stage 2); communication_data_type fp32 (comm_fp32) adds
 * one fp32 bucket at stages 0-1 - reduce_bucket_size elements, at most the
 * whole model - and nothing at stage 2, whose fp32 gradient slots are sent
 * as they are. */
static void test_half_comm_buffers(void **state)
{
	(void)state;
	struct ds_engine_opts o;
	const size_t P = 118528, widen = 24992 * 4 + 4 * 49984 * 4;  /* scratch, 2 + 2 fp32 slots */
	opts_test_model(&o, 0, 1, 1);
	o.half = DS_HALF_FP16;
	assert_int_equal(est(&o, 2).bytes[DS_MEM_COMM], widen);
	o.comm_fp32 = 1;
	assert_int_equal(est(&o, 2).bytes[DS_MEM_COMM], widen + P * 4);
	o.reduce_bucket_size = 5000;
	assert_int_equal(est(&o, 2).bytes[DS_MEM_COMM], widen + 5000 * 4);
	opts_test_model(&o, 2, 1, 1);
	o.comm_half = DS_HALF_BF16;  /* the fp32 model's 16-bit reduction buffers */
	assert_int_equal(est(&o, 2).bytes[DS_MEM_COMM], 24992 * 4 + 2 * 49984 * 4 + 2 * 2 * (49984 + 24992));
	o.comm_half = DS_HALF_NONE;
	o.half = DS_HALF_BF16;
	assert_int_equal(est(&o, 2).bytes[DS_MEM_COMM], widen);
	o.comm_fp32 = 1;
	assert_int_equal(est(&o, 2).bytes[DS_MEM_COMM], widen);
	/* gradients accumulated in fp32 reduce in fp32 with no extra buffer */
	o.comm_fp32 = 0;
	o.grad_accum_fp32 = 1;
	assert_int_equal(est(&o, 2).bytes[DS_MEM_COMM], widen);
	assert_int_equal(est(&o, 2).bytes[DS_MEM_GRADS], P / 2 * 4);
	/* the notes name the gradients' dtype */
	char buf[256];
	o.grad_accum_fp32 = 0;
	struct ds_engine_mem m = est(&o, 2);
	assert_string_equal(ds_engine_mem_cat_note(&m, &o, DS_MEM_GRADS, buf, sizeof buf), "bf16, owned 1/2 slices");
	o.grad_accum_fp32 = 1;
	m = est(&o, 2);
	assert_string_equal(ds_engine_mem_cat_note(&m, &o, DS_MEM_GRADS, buf, sizeof buf), "fp32, owned 1/2 slices");
	opts_test_model(&o, 0, 1, 1);
	o.half = DS_HALF_FP16;
	m = est(&o, 1);
	assert_string_equal(ds_engine_mem_cat_note(&m, &o, DS_MEM_GRADS, buf, sizeof buf), "fp16, every segment whole");
}

/* A real engine at 1 rank holds, through ds_alloc, exactly the estimate
 * less ds-train's batch rows (the trainer's, not the engine's). */
static void check_engine(const struct ds_engine_opts *o)
{
	struct ds_engine *e = NULL;
	struct ds_err err = DS_ERR_INIT;
	struct ds_engine_mem m = est(o, 1);
	size_t before = ds_mem_held();
	int rc = ds_engine_create(&e, o, comm, &err);
	if (rc)
		fprintf(stderr, "# %s\n", err.msg);
	assert_int_equal(rc, 0);
	size_t held = ds_mem_held() - before;
	size_t rows = (size_t)o->grad_accum * (size_t)o->micro_batch * (size_t)(o->model.seq_length + 1) * 4;
	assert_int_equal(held, m.total - rows);
	assert_int_equal(ds_engine_state_bytes(e), m.model_state);
	assert_int_equal(ds_engine_activation_bytes(e), m.bytes[DS_MEM_ACT]);
	ds_engine_destroy(e);
	assert_int_equal(ds_mem_held(), before);
}

static void test_matches_engine(void **state)
{
	(void)state;
	struct ds_engine_opts o;
	for (int stage = 0; stage <= 3; stage++) {
		opts_test_model(&o, stage, 2, 3);
		check_engine(&o);
		/* fp16/bf16: the 16-bit model copy, 16-bit gradients and the
		 * widening buffers; then gradients accumulated in fp32 */
		o.half = stage % 2 ? DS_HALF_BF16 : DS_HALF_FP16;
		check_engine(&o);
		o.grad_accum_fp32 = 1;
		check_engine(&o);
	}
	opts_test_model(&o, 1, 1, 1);
	o.half = DS_HALF_FP16;
	ds_optim_params_init(&o.optim, DS_OPTIM_LAMB);
	check_engine(&o);
	opts_test_model(&o, 0, 4, 1);
	o.checkpointing = 1;
	check_engine(&o);
	opts_test_model(&o, 1, 1, 1);
	ds_optim_params_init(&o.optim, DS_OPTIM_LAMB);
	check_engine(&o);
	ds_optim_params_init(&o.optim, DS_OPTIM_SGD);
	check_engine(&o);
	/* untied head, rmsnorm, swiglu, rotary: other segment shapes */
	opts_test_model(&o, 2, 1, 1);
	o.model.no_weight_tying = 1;
	o.model.norm = DS_NORM_RMSNORM;
	o.model.activation = DS_ACT_SWIGLU;
	o.model.pos_emb = DS_POS_ROTARY;
	o.model.rotary_pct = 0.25;
	o.model.hidden_size = 40;
	o.model.num_attention_heads = 5;
	check_engine(&o);
}

static void test_bad_input(void **state)
{
	(void)state;
	struct ds_engine_opts o;
	struct ds_engine_mem m;
	struct ds_err err = DS_ERR_INIT;
	opts_test_model(&o, 4, 1, 1);
	assert_int_equal(ds_engine_mem_estimate(&o, 2, &m, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "zero_optimization.stage"));
	opts_test_model(&o, 1, 1, 1);
	assert_int_equal(ds_engine_mem_estimate(&o, 0, &m, &err), DS_EINVAL);
	assert_string_equal(ds_engine_mem_cat_name(DS_MEM_OPTIM), "optimizer_states");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hand_count),
		cmocka_unit_test(test_hand_count_padded_stage3),
		cmocka_unit_test(test_zero_formulas),
		cmocka_unit_test(test_zero_formulas_half),
		cmocka_unit_test(test_half_comm_buffers),
		cmocka_unit_test(test_matches_engine),
		cmocka_unit_test(test_bad_input),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
