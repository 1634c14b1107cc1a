/* test_search.c - lib/tune's one search loop, ds_tune_run, on its own: a
 * listed strategy and synthetic objectives whose visit order, trial count,
 * best point and stop reason are worked out by hand in the comments; and
 * the pattern (coarse-then-refine) strategy's whole visit order on a small
 * space.  ds-nvme-tune's and ds-autotune's uses are in test_tune.c and
 * test_autotune.c.
 */
#include "unit.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tune/search.h"

/* A strategy that proposes a fixed list of one-dimensional points, and
 * records what the loop showed it before each proposal. */
struct listed {
	const int *pts;
	int n, next;
	int seen_trials[32], seen_have[32], seen_best[32];
	int asked;
};

static int listed_next(void *self, const struct ds_tune_progress *pr, int *idx, const char **phase)
{
	struct listed *l = self;
	l->seen_trials[l->asked] = pr->trials;
	l->seen_have[l->asked] = pr->have_best;
	l->seen_best[l->asked] = pr->have_best ? pr->best[0] : -1;
	l->asked++;
	if (l->next == l->n)
		return 0;
	idx[0] = l->pts[l->next++];
	*phase = "listed";
	return 1;
}

/* The objective: a table indexed by the point; records the points asked. */
struct table {
	const double *score;
	int calls, order[32];
	const char *phase[32];
};

static int table_eval(void *arg, const int *idx, const char *phase, double *score, struct ds_err *err)
{
	struct table *t = arg;
	(void)err;
	t->phase[t->calls] = phase;
	t->order[t->calls++] = idx[0];
	*score = t->score[idx[0]];
	return 0;
}

static void run_listed(const int *pts, int n, const double *score, const struct ds_tune_search_opts *o,
		       struct listed *l, struct table *t, struct ds_tune_search_res *r)
{
	struct ds_tune_strategy st = { listed_next, l };
	memset(l, 0, sizeof(*l));
	memset(t, 0, sizeof(*t));
	l->pts = pts;
	l->n = n;
	t->score = score;
	assert_int_equal(ds_tune_run(&st, 1, o, table_eval, t, r, NULL), 0);
}

/* Every proposed point once, in the strategy's order; a point proposed
 * again is not measured again; a failed trial (NaN) counts and never wins. */
static void test_loop_order_and_best(void **state)
{
	(void)state;
	/* point:             0   1    2   3    4 */
	static const double sc[] = { 5, 9, NAN, 7, 9 };
	static const int pts[] = { 2, 0, 3, 0, 1, 3, 4 };
	struct ds_tune_search_opts o = DS_TUNE_SEARCH_OPTS_INIT;
	struct ds_tune_search_res r;
	struct listed l;
	struct table t;

	run_listed(pts, 7, sc, &o, &l, &t, &r);
	/* measured: 2 (NaN), 0 (5), 3 (7), 1 (9), 4 (9, a tie: not better) */
	assert_int_equal(t.calls, 5);
	static const int want[] = { 2, 0, 3, 1, 4 };
	for (int i = 0; i < 5; i++) {
		assert_int_equal(t.order[i], want[i]);
		assert_string_equal(t.phase[i], "listed");
	}
	assert_int_equal(r.trials, 5);
	assert_int_equal(r.have_best, 1);
	assert_int_equal(r.best[0], 1);
	assert_true(r.best_score == 9);
	assert_int_equal(r.capped, 0);
	assert_int_equal(r.stopped_early, 0);
	/* what the strategy saw before each proposal (8 asks: 7 points + the end) */
	assert_int_equal(l.asked, 8);
	static const int tr[] = { 0, 1, 2, 3, 3, 4, 4, 5 };
	static const int hv[] = { 0, 0, 1, 1, 1, 1, 1, 1 };
	static const int bp[] = { -1, -1, 0, 3, 3, 1, 1, 1 };
	for (int i = 0; i < 8; i++) {
		assert_int_equal(l.seen_trials[i], tr[i]);
		assert_int_equal(l.seen_have[i], hv[i]);
		assert_int_equal(l.seen_best[i], bp[i]);
	}

	/* minimising: the lowest wins, NaN still never does */
	o.minimize = 1;
	run_listed(pts, 7, sc, &o, &l, &t, &r);
	assert_int_equal(r.trials, 5);
	assert_int_equal(r.best[0], 0);
	assert_true(r.best_score == 5);

	/* every trial failed: no best */
	static const double nan5[] = { NAN, NAN, NAN, NAN, NAN };
	o.minimize = 0;
	run_listed(pts, 7, nan5, &o, &l, &t, &r);
	assert_int_equal(r.trials, 5);
	assert_int_equal(r.have_best, 0);
}

/* max_trials stops before a new evaluation; a repeat does not count. */
static void test_loop_trial_cap(void **state)
{
	(void)state;
	static const double sc[] = { 1, 2, 3, 4, 5 };
	static const int pts[] = { 4, 4, 3, 2, 1 };
	struct ds_tune_search_opts o = DS_TUNE_SEARCH_OPTS_INIT;
	struct ds_tune_search_res r;
	struct listed l;
	struct table t;

	o.max_trials = 2;
	run_listed(pts, 5, sc, &o, &l, &t, &r);
	assert_int_equal(t.calls, 2);
	assert_int_equal(t.order[0], 4);
	assert_int_equal(t.order[1], 3);
	assert_int_equal(r.trials, 2);
	assert_int_equal(r.capped, 1);
	assert_int_equal(r.best[0], 4);
	/* the cap equal to what the strategy has: done, not capped */
	o.max_trials = 4;
	run_listed(pts, 5, sc, &o, &l, &t, &r);
	assert_int_equal(r.trials, 4);
	assert_int_equal(r.capped, 0);
}

/* Early stopping: early_stop trials in a row without a gain beyond
 * min_gain (relative) over the best.  A smaller gain still moves the best
 * but does not restart the count. */
static void test_loop_early_stop(void **state)
{
	(void)state;
	/* point:                    0   1     2     3   4   5 */
	static const double sc[] = { 10, 20, 20.1, 20.2, 19, 30 };
	static const int pts[] = { 0, 1, 2, 3, 4, 5 };
	struct ds_tune_search_opts o = DS_TUNE_SEARCH_OPTS_INIT;
	struct ds_tune_search_res r;
	struct listed l;
	struct table t;

	o.early_stop = 2;
	o.min_gain = 0.02;
	/* trial 1: 10 (first best, count restarts at 1); trial 2: 20 > 10.2
	 * (restarts at 2); trial 3: 20.1 <= 20.4 (best, no restart); trial 4:
	 * 20.2 <= 20.502 (best, no restart); 4 >= 2 + 2: stop, 30 never tried */
	run_listed(pts, 6, sc, &o, &l, &t, &r);
	assert_int_equal(t.calls, 4);
	assert_int_equal(r.trials, 4);
	assert_int_equal(r.stopped_early, 1);
	assert_int_equal(r.capped, 0);
	assert_int_equal(r.best[0], 3);
	assert_true(r.best_score == 20.2);
	/* min_gain 0: any gain restarts; 19 after 20.2 is the only miss, then
	 * 30 restarts, and the list ends before two misses in a row */
	o.min_gain = 0;
	run_listed(pts, 6, sc, &o, &l, &t, &r);
	assert_int_equal(r.trials, 6);
	assert_int_equal(r.stopped_early, 0);
	assert_int_equal(r.best[0], 5);
	/* at the trial cap the search is capped, not stopped early */
	o.min_gain = 0.02;
	o.max_trials = 4;
	run_listed(pts, 6, sc, &o, &l, &t, &r);
	assert_int_equal(r.trials, 4);
	assert_int_equal(r.stopped_early, 0);
}

/* Confirm re-measures the top points in the search's direction: scores
 * come from a list of draws per point; the best mean wins. */
struct draws {
	int calls[4];
	double v[4][2];
	const char *last_phase;
};

static int draws_eval(void *arg, const int *idx, const char *phase, double *score, struct ds_err *err)
{
	struct draws *d = arg;
	(void)err;
	d->last_phase = phase;
	*score = d->v[idx[0]][d->calls[idx[0]]++];
	return 0;
}

static void test_loop_confirm(void **state)
{
	(void)state;
	static const int pts[] = { 0, 1, 2, 3 };
	struct ds_tune_search_opts o = DS_TUNE_SEARCH_OPTS_INIT;
	struct ds_tune_search_res r;
	struct listed l = { .pts = pts, .n = 4 };
	struct ds_tune_strategy st = { listed_next, &l };
	/* maximising: top two are 3 (12) and 1 (11); again 6 and 10: means 9
	 * and 10.5, so point 1 wins; points 0 and 2 are measured once */
	struct draws d = { .v = { { 1, 0 }, { 11, 10 }, { 5, 0 }, { 12, 6 } } };

	o.confirm = 2;
	assert_int_equal(ds_tune_run(&st, 1, &o, draws_eval, &d, &r, NULL), 0);
	assert_int_equal(r.trials, 6);
	assert_int_equal(d.calls[0], 1);
	assert_int_equal(d.calls[1], 2);
	assert_int_equal(d.calls[2], 1);
	assert_int_equal(d.calls[3], 2);
	assert_string_equal(d.last_phase, "confirm");
	assert_int_equal(r.best[0], 1);
	assert_true(r.best_score == 10.5);

	/* minimising: top two are 0 (1) and 2 (5); again 9 and 4: means 5
	 * and 4.5, so point 2 wins */
	struct draws m = { .v = { { 1, 9 }, { 11, 0 }, { 5, 4 }, { 12, 0 } } };
	memset(&l, 0, sizeof(l));
	l.pts = pts;
	l.n = 4;
	o.minimize = 1;
	assert_int_equal(ds_tune_run(&st, 1, &o, draws_eval, &m, &r, NULL), 0);
	assert_int_equal(r.trials, 6);
	assert_int_equal(m.calls[0], 2);
	assert_int_equal(m.calls[2], 2);
	assert_int_equal(m.calls[1], 1);
	assert_int_equal(r.best[0], 2);
	assert_true(r.best_score == 4.5);
}

/* The pattern strategy's whole visit order on a 9 x 3 space with its peak
 * at (5, 2): score = 100 - 10 |a - 5| - 5 |b - 2|. */
struct visits {
	int calls, p[32][2];
	const char *phase[32];
};

static int peak_eval(void *arg, const int *idx, const char *phase, double *score, struct ds_err *err)
{
	struct visits *v = arg;
	(void)err;
	v->p[v->calls][0] = idx[0];
	v->p[v->calls][1] = idx[1];
	v->phase[v->calls++] = phase;
	*score = 100 - 10 * abs(idx[0] - 5) - 5 * abs(idx[1] - 2);
	return 0;
}

static void test_pattern_visit_order(void **state)
{
	(void)state;
	int64_t a[9] = { 0, 1, 2, 3, 4, 5, 6, 7, 8 }, b[3] = { 0, 1, 2 };
	struct ds_tune_space sp;
	struct ds_tune_search_opts o = DS_TUNE_SEARCH_OPTS_INIT;
	struct ds_tune_search_res r;
	struct visits v;

	memset(&sp, 0, sizeof(sp));
	assert_int_equal(ds_tune_space_add(&sp, "a", a, 9, NULL), 0);
	assert_int_equal(ds_tune_space_add(&sp, "b", b, 3, NULL), 0);
	/* start: the middles (4, 1) = 85.  Coarse a over 0, 4, 8 at b 1:
	 * (0,1) 45, (4,1) seen, (8,1) 65.  Coarse b over 0, 1, 2 at a 4:
	 * (4,0) 80, (4,1) seen, (4,2) 90 - the best.  Refine at step
	 * (9-1)/4 = 2 around (4,2): (2,2) 70, (6,2) 90 (a tie, not better),
	 * (4,0) seen, (4,4) outside; no gain, step 1: (3,2) 80, (5,2) 100,
	 * (4,1) seen, (4,3) outside; gain 10/90 > 0.02, again around (5,2):
	 * (4,2) seen, (6,2) seen, (5,1) 95, (5,3) outside; no gain at step
	 * 1: done. */
	static const int want[][2] = { { 4, 1 }, { 0, 1 }, { 8, 1 }, { 4, 0 }, { 4, 2 },
				       { 2, 2 }, { 6, 2 }, { 3, 2 }, { 5, 2 }, { 5, 1 } };
	static const char *const phase[] = { "start", "coarse", "coarse", "coarse", "coarse",
					     "refine", "refine", "refine", "refine", "refine" };
	memset(&v, 0, sizeof(v));
	assert_int_equal(ds_tune_search(&sp, &o, peak_eval, &v, &r, NULL), 0);
	assert_int_equal(v.calls, 10);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(v.p[i][0], want[i][0]);
		assert_int_equal(v.p[i][1], want[i][1]);
		assert_string_equal(v.phase[i], phase[i]);
	}
	assert_int_equal(r.trials, 10);
	assert_int_equal(r.best[0], 5);
	assert_int_equal(r.best[1], 2);
	assert_true(r.best_score == 100);

	/* threshold 0.2: the step-1 round's gain of 10/90 is not enough, so
	 * the search stops after (5,2) without the last round */
	o.threshold = 0.2;
	memset(&v, 0, sizeof(v));
	assert_int_equal(ds_tune_search(&sp, &o, peak_eval, &v, &r, NULL), 0);
	assert_int_equal(v.calls, 9);
	assert_int_equal(r.best[0], 5);
	assert_int_equal(r.best[1], 2);

	/* a start point given: (8, 0) = 60, then coarse a at b 0: (0,0) 40,
	 * (4,0) 80 (best), (8,0) seen */
	static const int start[2] = { 8, 0 };
	o.threshold = 0.02;
	o.start = start;
	memset(&v, 0, sizeof(v));
	assert_int_equal(ds_tune_search(&sp, &o, peak_eval, &v, &r, NULL), 0);
	assert_int_equal(v.p[0][0], 8);
	assert_int_equal(v.p[0][1], 0);
	assert_int_equal(v.p[1][0], 0);
	assert_int_equal(v.p[2][0], 4);
	assert_int_equal(v.p[3][0], 4); /* coarse b from the best, (4,0) seen: (4,1) */
	assert_int_equal(v.p[3][1], 1);
	assert_int_equal(r.best[0], 5);
	assert_int_equal(r.best[1], 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_loop_order_and_best),
		cmocka_unit_test(test_loop_trial_cap),
		cmocka_unit_test(test_loop_early_stop),
		cmocka_unit_test(test_loop_confirm),
		cmocka_unit_test(test_pattern_visit_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
