/* test_autotune.c - ds-autotune's memory model, DeepSpeed's micro-batch list
 * (spec §2 cases 21-22), the baseline order and the three tuners driven by
 * a synthetic evaluator (no processes are launched here).
 */
#include "unit.h"

#include <math.h>
#include <string.h>

#include "tune/autotune.h"

static void test_memory_spec(void **st)
{
	(void)st;
	/* spec case 22: P = 1e9, fp16, 8 ranks, stage 2 -> 2e9 + 0.25e9 + 2e9 */
	assert_true(fabs(ds_autotune_model_state_bytes(1e9, 1, 2, 8) - 4.25e9) < 1);
	/* stage 0 fp32: 4 + 4 + 8 bytes per parameter, nothing divided */
	assert_true(fabs(ds_autotune_model_state_bytes(1e6, 0, 0, 8) - 16e6) < 1e-6);
	/* stage 1 fp32 over 4: 4 + 4 + 8/4 */
	assert_true(fabs(ds_autotune_model_state_bytes(1e6, 0, 1, 4) - 10e6) < 1e-6);
	/* stage 3 fp16 over 8: (2 + 2 + 16) / 8 */
	assert_true(fabs(ds_autotune_model_state_bytes(1e9, 1, 3, 8) - 2.5e9) < 1);
}

static void test_mbs_list(void **st)
{
	(void)st;
	int v[16];
	/* spec case 21: min 1, max 64, n 3, gas 1 -> [32, 64] */
	int n = ds_autotune_mbs_list(1, 64, 3, 0, v, 16);
	assert_int_equal(n, 2);
	assert_int_equal(v[0], 32);
	assert_int_equal(v[1], 64);
	/* min 1, max 16: min raised to 8, stride 2; 10, 12, 14 share 16's gas */
	n = ds_autotune_mbs_list(1, 16, 3, 0, v, 16);
	assert_int_equal(n, 2);
	assert_int_equal(v[0], 8);
	assert_int_equal(v[1], 16);
	/* a per-rank batch of 64 with max 16: 8 -> gas 8, 10 -> 6, 12 -> 5, 14 -> 4 = 16's */
	n = ds_autotune_mbs_list(1, 16, 3, 64, v, 16);
	assert_int_equal(n, 4);
	assert_int_equal(v[0], 8);
	assert_int_equal(v[1], 10);
	assert_int_equal(v[2], 12);
	assert_int_equal(v[3], 16);
}

static void test_better(void **st)
{
	(void)st;
	assert_true(ds_autotune_better(DS_AT_LATENCY, 1.0, 2.0));
	assert_false(ds_autotune_better(DS_AT_LATENCY, 2.0, 1.0));
	assert_true(ds_autotune_better(DS_AT_THROUGHPUT, 2.0, 1.0));
	assert_true(ds_autotune_better(DS_AT_FLOPS, 2.0, 1.0));
	assert_false(ds_autotune_better(DS_AT_THROUGHPUT, NAN, 1.0));
}

/* stages x micro batches {1,2,4,8,16}; flops proportional to mb */
static void make_space(struct ds_autotune_space *s, int nstages)
{
	static const int mbs[] = { 1, 2, 4, 8, 16 };
	memset(s, 0, sizeof(*s));
	for (int st = 0; st < nstages; st++)
		for (int i = 0; i < 5; i++) {
			struct ds_autotune_point *p = &s->p[s->n++];
			p->stage = st, p->mb = mbs[i], p->gas = 1, p->tbs = mbs[i];
			p->flops = 1e9 * mbs[i];
		}
}

static void test_order(void **st)
{
	(void)st;
	static struct ds_autotune_space s;
	make_space(&s, 2);
	s.p[3].status = DS_AT_PRUNED; /* z0 mb 8 */
	int o[32], n = ds_autotune_order(&s, o, 32);
	assert_int_equal(n, 9);
	/* z0: 16, 4, 2, 1 (8 pruned); then z1: 16, 8, 4, 2, 1 */
	static const int want_st[] = { 0, 0, 0, 0, 1, 1, 1, 1, 1 }, want_mb[] = { 16, 4, 2, 1, 16, 8, 4, 2, 1 };
	for (int i = 0; i < n; i++) {
		assert_int_equal(s.p[o[i]].stage, want_st[i]);
		assert_int_equal(s.p[o[i]].mb, want_mb[i]);
	}
}

/* Synthetic trials: seconds per step t = (0.1 + 1e-10 F) * (1 + 0.5 stage);
 * the metric is throughput (tbs / t) or latency (t); mb fail_mb of stage
 * fail_stage fails (oom when asked). */
struct fake {
	int metric, calls, fail_stage, fail_mb, oom;
	int seen[64];
};

static int fake_eval(void *ctx, struct ds_autotune_space *s, int i, double *metric, struct ds_err *err)
{
	(void)err;
	struct fake *f = ctx;
	struct ds_autotune_point *p = &s->p[i];
	f->seen[f->calls++] = i;
	if (p->stage == f->fail_stage && p->mb == f->fail_mb) {
		p->status = DS_AT_FAILED;
		p->oom = f->oom;
		strcpy(p->why, f->oom ? "killed by signal 9" : "exit 1: boom");
		*metric = NAN;
		return 0;
	}
	double t = (0.1 + 1e-10 * p->flops) * (1 + 0.5 * p->stage);
	*metric = f->metric == DS_AT_LATENCY ? t : (double)p->tbs / t;
	return 0;
}

static void test_grid_early_stop(void **st)
{
	(void)st;
	static struct ds_autotune_space s;
	make_space(&s, 4);
	struct fake f = { DS_AT_THROUGHPUT, 0, -1, 0, 0, { 0 } };
	struct ds_autotune_search_opts o = { DS_AT_GRID, DS_AT_THROUGHPUT, 50, 3, 1 };
	struct ds_autotune_search_res r;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_autotune_search(&s, &o, fake_eval, &f, &r, &err), 0);
	/* z0 mb 16 (trial 1) is the best of all: 3 more trials, then stop */
	assert_int_equal(r.trials, 4);
	assert_true(r.stopped_early);
	assert_int_equal(s.p[r.best].stage, 0);
	assert_int_equal(s.p[r.best].mb, 16);
	assert_int_equal(s.p[r.best].order, 1);
}

/* Metrics by trial number, whatever the point. */
static const double *seq_metrics;
static int seq_eval(void *ctx, struct ds_autotune_space *s, int i, double *metric, struct ds_err *err)
{
	(void)ctx, (void)err;
	*metric = seq_metrics[s->p[i].order - 1];
	return 0;
}

static void test_early_stop_noise(void **st)
{
	(void)st;
	static struct ds_autotune_space s;
	struct ds_autotune_search_res r;
	struct ds_err err = DS_ERR_INIT;
	struct ds_autotune_search_opts o = { DS_AT_GRID, DS_AT_THROUGHPUT, 50, 3, 1 };
	/* trial 2 is 1% better: it becomes the best, but the count of 3 runs
	 * from trial 1, so the search stops after trial 4 */
	static const double small[] = { 10, 10.1, 9, 9, 9, 9, 9, 9 };
	make_space(&s, 2);
	seq_metrics = small;
	assert_int_equal(ds_autotune_search(&s, &o, seq_eval, NULL, &r, &err), 0);
	assert_int_equal(r.trials, 4);
	assert_true(r.stopped_early);
	assert_int_equal(s.p[r.best].order, 2);
	/* 5% better restarts the count: trials 3-5 after it, stop after 5 */
	static const double big[] = { 10, 10.5, 9, 9, 9, 9, 9, 9 };
	make_space(&s, 2);
	seq_metrics = big;
	assert_int_equal(ds_autotune_search(&s, &o, seq_eval, NULL, &r, &err), 0);
	assert_int_equal(r.trials, 5);
	assert_int_equal(s.p[r.best].order, 2);
	/* latency: 1% lower does not restart it, 5% lower does */
	o.metric = DS_AT_LATENCY;
	static const double lsmall[] = { 10, 9.9, 11, 11, 11, 11, 11, 11 }, lbig[] = { 10, 9.5, 11, 11, 11, 11, 11 };
	make_space(&s, 2);
	seq_metrics = lsmall;
	assert_int_equal(ds_autotune_search(&s, &o, seq_eval, NULL, &r, &err), 0);
	assert_int_equal(r.trials, 4);
	assert_int_equal(s.p[r.best].order, 2);
	make_space(&s, 2);
	seq_metrics = lbig;
	assert_int_equal(ds_autotune_search(&s, &o, seq_eval, NULL, &r, &err), 0);
	assert_int_equal(r.trials, 5);
}

static void test_failure_goes_on(void **st)
{
	(void)st;
	static struct ds_autotune_space s;
	make_space(&s, 2);
	/* the first trial (z0 mb 16) crashes: the search goes on and finds z0 mb 8 */
	struct fake f = { DS_AT_THROUGHPUT, 0, 0, 16, 0, { 0 } };
	struct ds_autotune_search_opts o = { DS_AT_GRID, DS_AT_THROUGHPUT, 50, 50, 1 };
	struct ds_autotune_search_res r;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_autotune_search(&s, &o, fake_eval, &f, &r, &err), 0);
	assert_int_equal(r.trials, 10);
	assert_int_equal(s.p[4].status, DS_AT_FAILED);
	assert_string_equal(s.p[4].why, "exit 1: boom");
	assert_int_equal(s.p[r.best].stage, 0);
	assert_int_equal(s.p[r.best].mb, 8);
}

static void test_latency_minimised(void **st)
{
	(void)st;
	static struct ds_autotune_space s;
	make_space(&s, 2);
	struct fake f = { DS_AT_LATENCY, 0, -1, 0, 0, { 0 } };
	struct ds_autotune_search_opts o = { DS_AT_GRID, DS_AT_LATENCY, 50, 50, 1 };
	struct ds_autotune_search_res r;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_autotune_search(&s, &o, fake_eval, &f, &r, &err), 0);
	/* shortest step: the smallest micro batch at stage 0 (0.1 + 0.1 s) */
	assert_int_equal(s.p[r.best].stage, 0);
	assert_int_equal(s.p[r.best].mb, 1);
	assert_true(fabs(s.p[r.best].metric - 0.2) < 1e-12);
}

static void test_random_same_points(void **st)
{
	(void)st;
	static struct ds_autotune_space s;
	make_space(&s, 2);
	struct fake f = { DS_AT_THROUGHPUT, 0, -1, 0, 0, { 0 } };
	struct ds_autotune_search_opts o = { DS_AT_RANDOM, DS_AT_THROUGHPUT, 50, 50, 7 };
	struct ds_autotune_search_res r;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_autotune_search(&s, &o, fake_eval, &f, &r, &err), 0);
	assert_int_equal(r.trials, 10);
	int hit[10] = { 0 }, inorder = 1;
	for (int k = 0; k < 10; k++)
		hit[f.seen[k]]++;
	for (int k = 0; k < 10; k++)
		assert_int_equal(hit[k], 1);
	int o2[10];
	ds_autotune_order(&s, o2, 10);
	for (int k = 0; k < 10; k++)
		inorder &= f.seen[k] == o2[k];
	assert_false(inorder); /* shuffled */
	assert_int_equal(s.p[r.best].mb, 16);
	assert_int_equal(s.p[r.best].stage, 0);
}

static void test_model_based(void **st)
{
	(void)st;
	static struct ds_autotune_space s;
	make_space(&s, 4);
	struct fake f = { DS_AT_THROUGHPUT, 0, -1, 0, 0, { 0 } };
	struct ds_autotune_search_opts o = { DS_AT_MODEL, DS_AT_THROUGHPUT, 50, 3, 1 };
	struct ds_autotune_search_res r;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_autotune_search(&s, &o, fake_eval, &f, &r, &err), 0);
	assert_int_equal(s.p[r.best].stage, 0);
	assert_int_equal(s.p[r.best].mb, 16);
	assert_true(r.trials <= 8); /* of 20 */
	/* the third pick comes from the fit: the largest micro batch of an untried stage */
	assert_int_equal(s.p[f.seen[2]].mb, 16);
	assert_int_not_equal(s.p[f.seen[2]].stage, 0);
}

static void test_model_based_oom_prunes(void **st)
{
	(void)st;
	static struct ds_autotune_space s;
	make_space(&s, 3);
	/* latency: the model runs small micro batches first; z1 mb 2 runs out of
	 * memory, so z0/z1 points with mb >= 2 still pending are not run */
	struct fake f = { DS_AT_LATENCY, 0, 1, 2, 1, { 0 } };
	struct ds_autotune_search_opts o = { DS_AT_MODEL, DS_AT_LATENCY, 50, 50, 1 };
	struct ds_autotune_search_res r;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_autotune_search(&s, &o, fake_eval, &f, &r, &err), 0);
	int failed = -1, infeasible = 0;
	for (int i = 0; i < s.n; i++)
		if (s.p[i].status == DS_AT_FAILED)
			failed = i;
	assert_int_not_equal(failed, -1);
	assert_int_equal(s.p[failed].stage, 1);
	assert_int_equal(s.p[failed].mb, 2);
	assert_true(s.p[failed].oom);
	for (int i = 0; i < s.n; i++) {
		const struct ds_autotune_point *p = &s.p[i];
		if (p->status == DS_AT_INFEASIBLE) {
			infeasible++;
			assert_true(p->stage <= 1 && p->mb >= 2);
			assert_int_equal(p->order, 0);
			assert_true(strstr(p->why, "ran out of memory") != NULL);
		}
		if (p->stage == 2) /* a z1 failure says nothing about z2 */
			assert_int_not_equal(p->status, DS_AT_INFEASIBLE);
	}
	assert_true(infeasible >= 1);
	assert_int_equal(r.trials + infeasible, s.n);
	assert_int_equal(s.p[r.best].mb, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_memory_spec),
		cmocka_unit_test(test_mbs_list),
		cmocka_unit_test(test_better),
		cmocka_unit_test(test_order),
		cmocka_unit_test(test_grid_early_stop),
		cmocka_unit_test(test_early_stop_noise),
		cmocka_unit_test(test_failure_goes_on),
		cmocka_unit_test(test_latency_minimised),
		cmocka_unit_test(test_random_same_points),
		cmocka_unit_test(test_model_based),
		cmocka_unit_test(test_model_based_oom_prunes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
