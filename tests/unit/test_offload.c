/* test_offload.c - ZeRO-Infinity in the engine, one process: with the
 * optimizer states (and a 16-bit run's master weights) and the stage-3
 * parameter slices in swap files, training gives bit for bit the losses,
 * norms, weights and states of the same run in memory, at every stage,
 * dtype, optimizer and pipelining choice, with sub-groups that cut across
 * segments; state written through the checkpoint pieces trains on as the
 * in-memory run does (resume either way); the swap files move the bytes
 * the layout predicts; the memory plan is what the engine allocates; and
 * configurations that cannot stream are refused naming the key.
 */
#include "config.h"
#include "unit.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "engine/engine.h"
#include "engine/estimate.h"
#include "util/mem.h"
#include "util/rng.h"

static struct ds_comm *comm;
static char dir[256];

static int setup(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	(void)state;
	snprintf(dir, sizeof(dir), "test_offload.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	return ds_comm_create(&comm, "self", &err);
}

static int teardown(void **state)
{
	char cmd[300];
	(void)state;
	ds_comm_destroy(comm);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd);
}

static int entries(const char *d)
{
	DIR *h = opendir(d);
	struct dirent *e;
	int n = 0;
	assert_non_null(h);
	while ((e = readdir(h)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(h);
	return n;
}

/* 2 layers, hidden 64: segments of 10240 (embeddings), 49984 (each layer)
 * and 128 (final norm) elements, vocabulary 128 */
static void opts_base(struct ds_engine_opts *o, int stage, enum ds_half_kind half, enum ds_optim_type opt)
{
	ds_engine_opts_init(o);
	struct ds_model_config *c = &o->model;
	c->family = DS_FAMILY_GPT;
	c->num_layers = 2;
	c->hidden_size = 64;
	c->num_attention_heads = 4;
	c->seq_length = 16;
	c->max_position_embeddings = 16;
	c->vocab_size = 128;
	c->make_vocab_size_divisible_by = 16;
	c->rotary_pct = 1.0;
	c->rotary_emb_base = 10000;
	c->layernorm_epsilon = 1e-5;
	c->rms_norm_epsilon = 1e-8;
	c->init_method_std = 0.02;
	c->hidden_dropout = 0.1;
	o->micro_batch = 2;
	o->grad_accum = 2;
	o->zero_stage = stage;
	o->half = half;
	if (half == DS_HALF_FP16)
		ds_scaler_init_dynamic(&o->scaler, 256, 1000, 2, 0, 1, 1);
	ds_optim_params_init(&o->optim, opt);
	o->optim.lr = 3e-3;
	o->optim.weight_decay = 0.01;
	if (opt == DS_OPTIM_SGD)
		o->optim.momentum = 0.9;
	o->gradient_clipping = 1.0;
	o->stage3_param_persistence_threshold = 1000;  /* the final norm stays whole */
}

/* offload switches: optimizer, param (stage 3), pipelining bits */
static void offload(struct ds_engine_opts *o, int optimizer, int param, int pr, int pw)
{
	struct ds_engine_offload *f = &o->offload;
	f->optimizer = optimizer;
	f->param = param;
	f->opt_path = f->param_path = dir;
	f->sub_group_size = 16000;  /* sub-groups of 16384: they cut across segments */
	f->pipeline_read = pr;
	f->pipeline_write = pw;
	f->opt_buffer_count = 12;
	f->max_in_cpu = 0;
	f->param_buffer_count = 3;
	f->aio.block_size = 8192;
}

static void rows(int32_t *t, int n, int T, int vocab, uint64_t seed)
{
	struct ds_rng r;
	ds_rng_init(&r, seed, 7, 7);
	for (int i = 0; i < n * (T + 1); i++)
		t[i] = (int32_t)(ds_rng_uniform(&r, (uint64_t)i) * vocab);
}

static struct ds_engine *mk(const struct ds_engine_opts *o)
{
	struct ds_engine *e = NULL;
	struct ds_err err = DS_ERR_INIT;
	int rc = ds_engine_create(&e, o, comm, &err);
	if (rc)
		fprintf(stderr, "# %s\n", err.msg);
	assert_int_equal(rc, 0);
	return e;
}

static void step(struct ds_engine *e, int s, struct ds_engine_step *r)
{
	struct ds_err err = DS_ERR_INIT;
	int32_t tok[4 * 17];
	rows(tok, 4, 16, 128, 100 + (uint64_t)s);
	int rc = ds_engine_train_step(e, &(struct ds_engine_batch){ .tokens = tok, .base = 4 * s, .step = s + 1,
								   .lr = 3e-3 * (1 + s) },
				      r, &err);
	if (rc)
		fprintf(stderr, "# %s\n", err.msg);
	assert_int_equal(rc, 0);
}

/* Every parameter and state of the model, laid end to end in registry
 * order, read through the checkpoint pieces (1 piece in memory). */
struct snap {
	float *p, *st[2];
	int64_t n;
	int ns;
};

static void snapshot(struct ds_engine *e, struct snap *s)
{
	struct ds_err err = DS_ERR_INIT;
	const struct ds_gpt *m = ds_engine_model(e);
	s->n = ds_gpt_num_params(m);
	s->ns = ds_engine_num_states(e);
	s->p = calloc((size_t)s->n, sizeof(float));
	for (int k = 0; k < s->ns; k++)
		s->st[k] = calloc((size_t)s->n, sizeof(float));
	int64_t off = 0;
	for (int i = 0; i < ds_gpt_num_tensors(m); i++) {
		const int64_t tn = ds_gpt_tensor(m, i)->numel;
		int64_t got = 0, gs[2] = { 0, 0 };
		for (int j = 0, np = ds_engine_ckpt_pieces(e, i); j < np; j++) {
			int64_t b, en;
			assert_int_equal(ds_engine_ckpt_piece(e, i, j, 0, &err), 0);
			const float *p = ds_engine_param_range(e, i, &b, &en);
			if (en > b)
				memcpy(s->p + off + b, p, (size_t)(en - b) * sizeof(float));
			got += en - b;
			for (int k = 0; k < s->ns; k++) {
				const float *v = ds_engine_state(e, i, ds_engine_state_name(e, k), &b, &en);
				if (en > b)
					memcpy(s->st[k] + off + b, v, (size_t)(en - b) * sizeof(float));
				gs[k] += en - b;
			}
		}
		assert_int_equal(got, tn);  /* each element exactly once */
		for (int k = 0; k < s->ns; k++)
			assert_int_equal(gs[k], tn);
		off += tn;
	}
}

/* Write snapshot s into e through the pieces (a checkpoint load). */
static void restore(struct ds_engine *e, const struct snap *s, int64_t steps)
{
	struct ds_err err = DS_ERR_INIT;
	const struct ds_gpt *m = ds_engine_model(e);
	int64_t off = 0;
	for (int i = 0; i < ds_gpt_num_tensors(m); i++) {
		for (int j = 0, np = ds_engine_ckpt_pieces(e, i); j < np; j++) {
			int64_t b, en;
			assert_int_equal(ds_engine_ckpt_piece(e, i, j, 1, &err), 0);
			float *p = ds_engine_param_range(e, i, &b, &en);
			if (en > b)
				memcpy(p, s->p + off + b, (size_t)(en - b) * sizeof(float));
			for (int k = 0; k < s->ns; k++) {
				float *v = ds_engine_state(e, i, ds_engine_state_name(e, k), &b, &en);
				if (en > b)
					memcpy(v, s->st[k] + off + b, (size_t)(en - b) * sizeof(float));
			}
		}
		off += ds_gpt_tensor(m, i)->numel;
	}
	ds_engine_set_steps(e, steps);
	assert_int_equal(ds_engine_params_loaded(e, &err), 0);
}

static void snap_free(struct snap *s)
{
	free(s->p);
	for (int k = 0; k < s->ns; k++)
		free(s->st[k]);
}

static void assert_snap_equal(const struct snap *a, const struct snap *b, const char *what)
{
	assert_int_equal(a->n, b->n);
	assert_int_equal(a->ns, b->ns);
	if (memcmp(a->p, b->p, (size_t)a->n * sizeof(float)))
		fail_msg("%s: parameters differ", what);
	for (int k = 0; k < a->ns; k++)
		if (memcmp(a->st[k], b->st[k], (size_t)a->n * sizeof(float)))
			fail_msg("%s: optimizer state %d differs", what, k);
}

/* 3 steps in memory and offloaded: the same bits. */
static void same_run(const struct ds_engine_opts *mem, const struct ds_engine_opts *off, const char *what)
{
	struct ds_engine *a = mk(mem), *b = mk(off);
	assert_int_equal(entries(dir), 0);  /* the swap files have no names */
	for (int s = 0; s < 3; s++) {
		struct ds_engine_step ra, rb;
		step(a, s, &ra);
		step(b, s, &rb);
		if (ra.loss != rb.loss || ra.grad_norm != rb.grad_norm || ra.skipped != rb.skipped)
			fail_msg("%s: step %d: loss %.17g / %.17g, norm %.17g / %.17g", what, s, ra.loss, rb.loss,
				 ra.grad_norm, rb.grad_norm);
		assert_int_equal(ra.swap_read + ra.swap_written, 0);
		if (!rb.skipped)
			assert_true(rb.swap_read > 0 && rb.swap_written > 0);
	}
	struct snap sa, sb;
	snapshot(a, &sa);
	snapshot(b, &sb);
	assert_snap_equal(&sa, &sb, what);
	snap_free(&sa);
	snap_free(&sb);
	ds_engine_destroy(a);
	ds_engine_destroy(b);
	assert_int_equal(entries(dir), 0);
}

static void test_bit_identical(void **state)
{
	(void)state;
	static const enum ds_half_kind halves[] = { DS_HALF_NONE, DS_HALF_BF16, DS_HALF_FP16 };
	static const char *const hn[] = { "fp32", "bf16", "fp16" };
	char what[128];
	/* every stage in fp32 and bf16 with Adam; fp16 (the loss scaler) and
	 * SGD with momentum (one state) at stages 2 and 3 */
	for (int stage = 1; stage <= 3; stage++)
		for (int h = 0; h < 3; h++)
			for (int opt = 0; opt < 2; opt++) {
				if ((h == 2 || opt == 1) && stage == 1)
					continue;
				if (h == 2 && opt == 1)
					continue;
				struct ds_engine_opts m, o;
				enum ds_optim_type ot = opt ? DS_OPTIM_SGD : DS_OPTIM_ADAMW;
				opts_base(&m, stage, halves[h], ot);
				opts_base(&o, stage, halves[h], ot);
				/* pipelining: each combination over the runs */
				int pr = (stage + h + opt) % 2, pw = (stage + opt) % 2;
				offload(&o, 1, stage == 3, pr, pw);
				snprintf(what, sizeof what, "stage %d %s %s read %d write %d", stage, hn[h], opt ? "sgd" : "adamw",
					 pr, pw);
				same_run(&m, &o, what);
			}
	/* parameters alone on NVMe (a 16-bit run: fp32 ones are the master) */
	for (int h = 1; h < 3; h++) {
		struct ds_engine_opts m, o;
		opts_base(&m, 3, halves[h], DS_OPTIM_ADAMW);
		opts_base(&o, 3, halves[h], DS_OPTIM_ADAMW);
		offload(&o, 0, 1, 0, 0);
		snprintf(what, sizeof what, "stage 3 %s parameters only", hn[h]);
		same_run(&m, &o, what);
	}
}

/* A snapshot of the in-memory run after 2 steps, written into an
 * offloaded engine through the pieces, trains on as the in-memory run does
 * (2 more steps: the second sees what the first wrote to the swap files),
 * to the same weights and states; and the other way round. */
static void test_resume_either_way(void **state)
{
	(void)state;
	for (int h = 0; h < 2; h++) {
		enum ds_half_kind half = h ? DS_HALF_BF16 : DS_HALF_NONE;
		struct ds_engine_opts m, o;
		opts_base(&m, 3, half, DS_OPTIM_ADAMW);
		opts_base(&o, 3, half, DS_OPTIM_ADAMW);
		offload(&o, 1, 1, 1, 1);
		struct ds_engine *cont = mk(&m), *mem = mk(&m), *off = mk(&o);
		struct ds_engine_step rc, r;
		struct snap s0, s1, s2, sc, sm;
		for (int s = 0; s < 2; s++)
			step(cont, s, &rc);
		snapshot(cont, &s0);
		restore(off, &s0, 2);
		snapshot(off, &s1);  /* what went in comes out */
		assert_snap_equal(&s0, &s1, "offloaded restore");
		for (int s = 2; s < 4; s++) {
			step(cont, s, &rc);
			step(off, s, &r);
			assert_true(r.loss == rc.loss && r.grad_norm == rc.grad_norm);
		}
		snapshot(cont, &sc);
		snapshot(off, &s2);
		assert_snap_equal(&sc, &s2, "resumed offloaded");
		/* offloaded -> in memory */
		restore(mem, &s2, 4);
		for (int s = 4; s < 6; s++) {
			step(cont, s, &rc);
			step(mem, s, &r);
			assert_true(r.loss == rc.loss && r.grad_norm == rc.grad_norm);
		}
		snap_free(&sc);
		snapshot(cont, &sc);
		snapshot(mem, &sm);
		assert_snap_equal(&sc, &sm, "resumed in memory");
		snap_free(&s0);
		snap_free(&s1);
		snap_free(&s2);
		snap_free(&sc);
		snap_free(&sm);
		ds_engine_destroy(cont);
		ds_engine_destroy(mem);
		ds_engine_destroy(off);
	}
}

/* The bytes one step moves, from the layout alone: every segment's update
 * range (the whole segment padded to 16 at 1 rank) rounded up to 2048
 * elements; the optimizer reads and writes master + 2 Adam states (4 bytes
 * each) of all of it and writes the 16-bit slices of the offloaded
 * segments (2 bytes); forward and backward read those 16-bit slices, each
 * at most twice and at least once (the buffers keep what fits). */
static void test_bytes_per_step(void **state)
{
	(void)state;
	struct ds_engine_opts o;
	struct ds_engine_step r;
	opts_base(&o, 3, DS_HALF_BF16, DS_OPTIM_ADAMW);
	offload(&o, 1, 1, 1, 1);
	struct ds_engine *e = mk(&o);
	const struct ds_gpt *m = ds_engine_model(e);
	uint64_t U = 0, P = 0;
	for (int s = 0; s < ds_gpt_num_segments(m); s++) {
		int64_t n = ds_gpt_segment(m, s)->numel, padded = (n + 15) / 16 * 16;
		int64_t aligned = (padded + 2047) / 2048 * 2048;
		U += (uint64_t)aligned;
		if (n >= 1000)
			P += (uint64_t)aligned;
	}
	step(e, 0, &r);
	step(e, 1, &r);
	assert_int_equal(r.swap_written, U * 12 + U * 2);  /* param16 is written per sub-group over the whole space */
	assert_true(r.swap_read >= U * 12 + P * 2 && r.swap_read <= U * 12 + P * 4);
	ds_engine_destroy(e);
}

/* What the memory plan says is what the engine holds through ds_alloc,
 * less ds-train's batch rows; the NVMe bytes are outside it. */
static void test_plan_matches_engine(void **state)
{
	(void)state;
	struct ds_err err = DS_ERR_INIT;
	for (int c = 0; c < 4; c++) {
		struct ds_engine_opts o;
		struct ds_engine_mem m, m0;
		opts_base(&o, c == 0 ? 1 : 3, c % 2 ? DS_HALF_BF16 : DS_HALF_NONE, DS_OPTIM_ADAMW);
		assert_int_equal(ds_engine_mem_estimate(&o, 1, &m0, &err), 0);
		offload(&o, c != 3, c >= 2, c == 1, c == 1);
		assert_int_equal(ds_engine_mem_estimate(&o, 1, &m, &err), 0);
		size_t before = ds_mem_held();
		struct ds_engine *e = mk(&o);
		size_t rows = (size_t)o.grad_accum * (size_t)o.micro_batch * (size_t)(o.model.seq_length + 1) * 4;
		assert_int_equal(ds_mem_held() - before, m.total - rows);
		assert_int_equal(ds_engine_state_bytes(e), m.model_state);
		assert_int_equal(ds_engine_swap_buffer_bytes(e), m.bytes[DS_MEM_SWAP]);
		assert_int_equal(ds_engine_nvme_bytes(e), m.nvme_bytes);
		assert_true(m.nvme_bytes > 0 && m.bytes[DS_MEM_SWAP] > 0 && m0.bytes[DS_MEM_SWAP] == 0);
		/* what moved out of memory */
		if (c != 3)
			assert_true(m.bytes[DS_MEM_OPTIM] < m0.bytes[DS_MEM_OPTIM]);
		if (c >= 2)
			assert_true(m.bytes[DS_MEM_PARAMS] < m0.bytes[DS_MEM_PARAMS]);
		ds_engine_destroy(e);
		assert_int_equal(ds_mem_held(), before);
	}
}

/* Combinations that cannot stream: DS_EINVAL naming the key. */
static void test_refused(void **state)
{
	(void)state;
	struct ds_err err = DS_ERR_INIT;
	struct ds_engine_opts o;
	struct ds_engine *e = NULL;
	struct ds_engine_mem m;
	opts_base(&o, 3, DS_HALF_NONE, DS_OPTIM_LAMB);
	offload(&o, 1, 0, 0, 0);
	assert_int_equal(ds_engine_create(&e, &o, comm, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "offload_optimizer.device \"nvme\": optimizer Lamb"));
	opts_base(&o, 3, DS_HALF_BF16, DS_OPTIM_ADAMW);
	offload(&o, 1, 0, 1, 1);
	o.offload.opt_buffer_count = 11;  /* 3 sub-groups in flight x 4 */
	assert_int_equal(ds_engine_mem_estimate(&o, 1, &m, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "offload_optimizer.buffer_count 11: too few; streaming needs 12"));
	opts_base(&o, 3, DS_HALF_NONE, DS_OPTIM_ADAMW);
	offload(&o, 0, 1, 0, 0);
	assert_int_equal(ds_engine_mem_estimate(&o, 1, &m, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "in an fp32 run the parameters are the optimizer's master weights"));
	opts_base(&o, 3, DS_HALF_BF16, DS_OPTIM_ADAMW);
	offload(&o, 1, 1, 0, 0);
	o.offload.param_buffer_size = 40000;
	assert_int_equal(ds_engine_mem_estimate(&o, 1, &m, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "offload_param.buffer_size 40000: smaller than this rank's largest"));
	o.offload.param_buffer_size = 100000;
	o.offload.param_buffer_count = 1;
	assert_int_equal(ds_engine_mem_estimate(&o, 1, &m, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "offload_param.buffer_count 1"));
	/* a missing directory: the engine says which key */
	o.offload.param_buffer_count = 2;
	o.offload.opt_path = "/nonexistent/nvme";
	assert_int_equal(ds_engine_create(&e, &o, comm, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "zero_optimization.offload_optimizer.nvme_path: '/nonexistent/nvme'"));
	assert_null(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bit_identical),
		cmocka_unit_test(test_resume_either_way),
		cmocka_unit_test(test_bytes_per_step),
		cmocka_unit_test(test_plan_matches_engine),
		cmocka_unit_test(test_refused),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
