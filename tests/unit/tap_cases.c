/* tap_cases.c - not a test of dstk: a cmocka program with one case of each
 * outcome (passes, calls skip(), fails), run by tests/unit/tap.bats through
 * the same TAP driver and wrapper as every unit test, to show that a skip
 * is counted as SKIP and a failure still as FAIL. */
#include "unit.h"

static void case_passes(void **state)
{
	(void)state;
	assert_int_equal(2 + 2, 4);
}

static void case_skips(void **state)
{
	(void)state;
	printf("# skipped: the way a test without its CPU feature skips\n");
	skip();
}

static void case_fails(void **state)
{
	(void)state;
	fail_msg("this case fails on purpose");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(case_passes),
		cmocka_unit_test(case_skips),
		cmocka_unit_test(case_fails),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
