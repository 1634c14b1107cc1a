/* test_tune.c - the search strategies on synthetic score functions whose
 * optimum is known by construction, the sweep-file parser, and the "aio"
 * section merged into a DeepSpeed config (through the null engine).
 */
#include "config.h"
#include "unit.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver/nvme_tune.h"
#include "tune/search.h"

/* A separable unimodal score with its peak at index `peak` in every
 * dimension; records every point it is asked for. */
struct synth {
	int peak[DS_TUNE_MAX_DIMS];
	int nd, calls, fail_at;
	int seen[4096][4];
	double flat; /* >0: a constant score (nothing to gain) */
};

static int synth_eval(void *arg, const int *idx, const char *phase, double *score, struct ds_err *err)
{
	struct synth *s = arg;
	double v = 100;
	(void)phase;
	if (s->fail_at && s->calls + 1 == s->fail_at)
		return ds_err_set(err, DS_EIO, "trial %d failed", s->fail_at);
	for (int d = 0; d < s->nd; d++) {
		int dist = abs(idx[d] - s->peak[d]);
		v -= 3.0 * dist;
		s->seen[s->calls][d] = idx[d];
	}
	s->calls++;
	*score = s->flat > 0 ? s->flat : v;
	return 0;
}

static void make_space(struct ds_tune_space *sp)
{
	int64_t a[7] = { 7, 1, 2, 3, 4, 5, 6 }, b[6] = { 10, 20, 30, 40, 50, 60 }, c[2] = { 1, 0 }, d[4] = { 8, 1, 2, 4 };
	memset(sp, 0, sizeof(*sp));
	assert_int_equal(ds_tune_space_add(sp, "a", a, 7, NULL), 0);
	assert_int_equal(ds_tune_space_add(sp, "b", b, 6, NULL), 0);
	assert_int_equal(ds_tune_space_add(sp, "c", c, 2, NULL), 0);
	assert_int_equal(ds_tune_space_add(sp, "d", d, 4, NULL), 0);
}

static void test_space(void **state)
{
	(void)state;
	struct ds_tune_space sp;
	struct ds_err err = DS_ERR_INIT;
	int64_t dup[] = { 3, 1, 3, 2, 1 };

	make_space(&sp);
	assert_int_equal(ds_tune_space_size(&sp), 7 * 6 * 2 * 4);
	assert_int_equal(sp.d[0].v[0], 1); /* sorted */
	assert_int_equal(sp.d[0].v[6], 7);
	assert_int_equal(ds_tune_space_add(&sp, "e", dup, 5, NULL), 0);
	assert_int_equal(sp.d[4].n, 3); /* deduplicated */
	assert_int_equal(ds_tune_space_add(&sp, "e", dup, 5, &err), DS_EINVAL);
	assert_int_equal(ds_tune_space_find(&sp, "d"), 3);
	assert_int_equal(ds_tune_dim_nearest(&sp.d[3], 3), 1); /* 2 and 4 tie: the first */
	assert_int_equal(ds_tune_dim_nearest(&sp.d[3], 100), 3);
}

/* Grid: every point once, last dimension fastest, and the true optimum. */
static void test_grid(void **state)
{
	(void)state;
	struct ds_tune_space sp;
	struct ds_tune_search_opts o = DS_TUNE_SEARCH_OPTS_INIT;
	struct ds_tune_search_res r;
	static struct synth s = { .peak = { 5, 1, 0, 3 }, .nd = 4 };

	make_space(&sp);
	o.exhaustive = 1;
	assert_int_equal(ds_tune_search(&sp, &o, synth_eval, &s, &r, NULL), 0);
	assert_int_equal(r.trials, 336);
	assert_int_equal(s.calls, 336);
	assert_int_equal(s.seen[1][3], 1);  /* second point: last dimension moved */
	assert_int_equal(s.seen[4][2], 1);
	assert_int_equal(r.best[0], 5);
	assert_int_equal(r.best[1], 1);
	assert_int_equal(r.best[2], 0);
	assert_int_equal(r.best[3], 3);
	assert_true(r.best_score == 100.0);
}

/* Coarse + refine reaches the optimum of a unimodal function with far fewer
 * trials than the grid, never asking twice for a point. */
static void test_pattern_finds_peak(void **state)
{
	(void)state;
	static const int peaks[][4] = { { 5, 1, 0, 3 }, { 0, 0, 0, 0 }, { 6, 5, 1, 3 }, { 2, 4, 1, 1 } };
	for (size_t k = 0; k < 4; k++) {
		struct ds_tune_space sp;
		struct ds_tune_search_opts o = DS_TUNE_SEARCH_OPTS_INIT;
		struct ds_tune_search_res r;
		static struct synth s;
		memset(&s, 0, sizeof(s));
		s.nd = 4;
		memcpy(s.peak, peaks[k], sizeof(peaks[k]));
		make_space(&sp);
		assert_int_equal(ds_tune_search(&sp, &o, synth_eval, &s, &r, NULL), 0);
		for (int d = 0; d < 4; d++)
			assert_int_equal(r.best[d], peaks[k][d]);
		assert_true(r.trials < 60);
		assert_int_equal(r.trials, s.calls);
		for (int i = 0; i < s.calls; i++)
			for (int j = 0; j < i; j++)
				assert_true(memcmp(s.seen[i], s.seen[j], sizeof(s.seen[i])) != 0);
	}
}

/* Nothing to gain: start + coarse sweep + one round per step size, then stop. */
static void test_pattern_stops_without_gain(void **state)
{
	(void)state;
	struct ds_tune_space sp;
	struct ds_tune_search_opts o = DS_TUNE_SEARCH_OPTS_INIT;
	struct ds_tune_search_res r;
	static struct synth s = { .nd = 4, .flat = 5 };

	make_space(&sp);
	assert_int_equal(ds_tune_search(&sp, &o, synth_eval, &s, &r, NULL), 0);
	/* start (3,3,1,2); coarse a: 0,6 (3 seen); b: 0,2,5; c: 0; d: 0,1,3
	 * = 1 + 2 + 3 + 1 + 3 = 10; refine step 1 around the start:
	 * a 2,4; b 2 seen, 4; c -; d 1 seen, 3 seen = 3 new -> 13 */
	assert_int_equal(r.trials, 13);
	assert_int_equal(r.capped, 0);
	o.max_trials = 4;
	memset(&s, 0, sizeof(s));
	s.nd = 4;
	s.flat = 5;
	assert_int_equal(ds_tune_search(&sp, &o, synth_eval, &s, &r, NULL), 0);
	assert_int_equal(r.trials, 4);
	assert_int_equal(r.capped, 1);
}

static void test_evaluator_error_stops(void **state)
{
	(void)state;
	struct ds_tune_space sp;
	struct ds_tune_search_opts o = DS_TUNE_SEARCH_OPTS_INIT;
	struct ds_tune_search_res r;
	struct ds_err err = DS_ERR_INIT;
	static struct synth s = { .nd = 4, .fail_at = 3 };

	make_space(&sp);
	assert_int_equal(ds_tune_search(&sp, &o, synth_eval, &s, &r, &err), DS_EIO);
	assert_string_equal(err.msg, "trial 3 failed");
	assert_int_equal(s.calls, 2);
}

/* A lucky first draw: point (6,0,0,0) scores 110 once, then 60 (mean 85);
 * the true peak (5,1,0,3) scores 100 every time.  Confirm must pick the peak. */
struct lucky {
	int calls, lucky_seen;
};

static int lucky_eval(void *arg, const int *idx, const char *phase, double *score, struct ds_err *err)
{
	struct lucky *l = arg;
	static const int peak[4] = { 5, 1, 0, 3 };
	double v = 100;
	(void)err;
	l->calls++;
	if (idx[0] == 6 && idx[1] == 0 && idx[2] == 0 && idx[3] == 0) {
		*score = l->lucky_seen++ ? 60 : 110;
		assert_true(!strcmp(phase, "grid") || !strcmp(phase, "confirm"));
		return 0;
	}
	for (int d = 0; d < 4; d++)
		v -= 3.0 * abs(idx[d] - peak[d]);
	*score = v;
	return 0;
}

static void test_confirm_beats_a_lucky_draw(void **state)
{
	(void)state;
	struct ds_tune_space sp;
	struct ds_tune_search_opts o = DS_TUNE_SEARCH_OPTS_INIT;
	struct ds_tune_search_res r;
	struct lucky l = { 0, 0 };

	make_space(&sp);
	o.exhaustive = 1;
	o.confirm = 2;
	assert_int_equal(ds_tune_search(&sp, &o, lucky_eval, &l, &r, NULL), 0);
	assert_int_equal(r.trials, 336 + 2);
	assert_int_equal(l.lucky_seen, 2);
	assert_int_equal(r.best[0], 5);
	assert_int_equal(r.best[3], 3);
	assert_true(r.best_score == 100.0); /* mean of 100 and 100 */
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

#define EXPECT_LOAD_ERR(json, text) do { \
		write_file("test_tune.sweep.json", json); \
		ds_err_clear(&err); \
		assert_int_equal(ds_nvme_tune_space_load("test_tune.sweep.json", 0, &sp, &err), DS_EINVAL); \
		if (!strstr(err.msg, text)) \
			fail_msg("'%s' lacks '%s'", err.msg, text); \
	} while (0)

static void test_sweep_file(void **state)
{
	(void)state;
	struct ds_tune_space sp;
	struct ds_err err = DS_ERR_INIT;

	/* DeepSpeed's default sweep, as its ds_nvme_tune writes it */
	write_file("test_tune.sweep.json", "{\"block_size\": [\"1M\", \"8M\"], \"queue_depth\": [32, 128],"
		   " \"sequential_requests\": [false], \"single_submit\": [false], \"io_parallel\": [1, 8]}");
	assert_int_equal(ds_nvme_tune_space_load("test_tune.sweep.json", 0, &sp, &err), 0);
	assert_int_equal(sp.ndims, 5);
	assert_string_equal(sp.d[0].name, "block_size");
	assert_int_equal(sp.d[0].v[0], 1048576);
	assert_int_equal(sp.d[0].v[1], 8388608);
	assert_string_equal(sp.d[2].name, "overlap_events");
	assert_int_equal(sp.d[2].n, 1);
	assert_int_equal(sp.d[2].v[0], 1); /* sequential false = overlapped */
	assert_string_equal(sp.d[4].name, "intra_op_parallelism");
	assert_int_equal(ds_tune_space_size(&sp), 8);
	EXPECT_LOAD_ERR("{\"queue_depth\": [0]}", "test_tune.sweep.json: key 'queue_depth': 0 is out of range [1, 4096]");
	EXPECT_LOAD_ERR("{\"block_size\": [1000]}", "key 'block_size': 1000 is not a multiple of 4096");
	EXPECT_LOAD_ERR("{\"queue_dept\": [8]}", "unknown key 'queue_dept'");
	EXPECT_LOAD_ERR("{\"queue_depth\": [8,", "test_tune.sweep.json: line 1 column");
	EXPECT_LOAD_ERR("[1, 2]", "expected a JSON object");
	EXPECT_LOAD_ERR("{\"single_submit\": [2]}", "key 'single_submit': expected true or false");
	EXPECT_LOAD_ERR("{\"io_parallel\": [1], \"intra_op_parallelism\": [2]}", "sets intra_op_parallelism a second time");
	unlink("test_tune.sweep.json");
}

/* A full run on the null engine, then the config merge: other keys kept,
 * the aio section DeepSpeed's current names with real booleans. */
static void test_null_run_and_config_merge(void **state)
{
	(void)state;
	struct ds_nvme_tune_opts o = DS_NVME_TUNE_OPTS_INIT;
	struct ds_nvme_tune_res res;
	struct ds_err err = DS_ERR_INIT;
	const char *dirs[] = { "." };
	json_error_t je;

	o.dirs = dirs;
	o.ndirs = 1;
	o.engine = "null";
	o.io_size = 1 << 20;
	if (ds_nvme_tune_run(&o, &res, &err) < 0)
		fail_msg("%s", err.msg);
	assert_true(res.ntrials > 1);
	assert_int_equal(res.space_size, 7 * 6 * 4 * 2 * 2);
	for (int i = 0; i < res.ntrials; i++) {
		const struct ds_nvme_trial *t = &res.trials[i];
		assert_int_equal(t->pinned_bytes,
				 (uint64_t)t->aio.queue_depth * t->aio.block_size * (uint64_t)t->aio.intra_op_parallelism);
	}
	/* the reported best is the second measurement of the best point */
	assert_string_equal(res.trials[res.best].phase, "confirm");
	assert_string_equal(res.trials[res.ntrials - 1].phase, "confirm");
	assert_string_equal(res.trials[res.ntrials - 3].phase, "confirm");
	assert_string_not_equal(res.trials[res.ntrials - 4].phase, "confirm");
	write_file("test_tune.ds.json", "{\"train_batch_size\": 8, \"aio\": {\"thread_count\": 3, \"block_size\": 1}}");
	assert_int_equal(ds_nvme_tune_config_merge("test_tune.ds.json", "test_tune.out.json", &res, &err), 0);
	json_t *j = json_load_file("test_tune.out.json", 0, &je);
	assert_non_null(j);
	assert_int_equal(json_integer_value(json_object_get(j, "train_batch_size")), 8);
	json_t *aio = json_object_get(j, "aio");
	assert_null(json_object_get(aio, "thread_count"));
	assert_int_equal(json_integer_value(json_object_get(aio, "block_size")), res.trials[res.best].aio.block_size);
	assert_int_equal(json_integer_value(json_object_get(aio, "intra_op_parallelism")),
			 res.trials[res.best].aio.intra_op_parallelism);
	assert_true(json_is_boolean(json_object_get(aio, "single_submit")));
	assert_true(json_is_boolean(json_object_get(aio, "overlap_events")));
	assert_true(json_is_false(json_object_get(aio, "use_gds")));
	json_decref(j);
	/* a bad config is refused before anything is written */
	write_file("test_tune.bad.json", "{\"aio\": 3}");
	assert_int_equal(ds_nvme_tune_config_check("test_tune.bad.json", &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "key 'aio': expected an object"));
	unlink("test_tune.ds.json");
	unlink("test_tune.out.json");
	unlink("test_tune.bad.json");
	ds_nvme_tune_res_release(&res);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_space),
		cmocka_unit_test(test_grid),
		cmocka_unit_test(test_pattern_finds_peak),
		cmocka_unit_test(test_pattern_stops_without_gain),
		cmocka_unit_test(test_evaluator_error_stops),
		cmocka_unit_test(test_confirm_beats_a_lucky_draw),
		cmocka_unit_test(test_sweep_file),
		cmocka_unit_test(test_null_run_and_config_merge),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
