#!/usr/bin/env bats
# tap.bats - the test harness counts a cmocka skip() as skipped on every CPU:
# the unit tests run through tests/unit/cmocka-tap.sh under automake's TAP
# driver, and tap_cases (one passing, one skipping, one failing case) must
# come out PASS, SKIP, FAIL.  Without the wrapper cmocka 1.1.x's skip line
# ("not ok N # SKIP") is a FAIL, which failed `make check` on CPUs without
# AMX (issue 15).
load ../cli/helper

setup() {
	cd "$BATS_TEST_TMPDIR" || return 1
}

@test "every cmocka unit test runs through the TAP wrapper" {
	# the unit tests are the tests without an extension: LOG_COMPILER
	run -0 grep -E '^LOG_COMPILER = ' "$DS_BUILDDIR/Makefile"
	assert_output --regexp '/tests/unit/cmocka-tap\.sh$'
}

@test "a cmocka case that calls skip() counts as SKIP, a failing one still as FAIL" {
	prog="$DS_BUILDDIR/tests/unit/tap_cases"
	# cmocka itself marks case 2 skipped (1.1.5: "not ok 2 # SKIP case_skips")
	run -1 "$prog"
	assert_line --regexp '^(not )?ok 2 # SKIP case_skips$'
	# the command `make check` runs for a unit test (tests/local.mk)
	run -0 env AM_TAP_AWK=awk bash "$DS_SRCDIR/build-aux/tap-driver.sh" \
		--test-name tap_cases --log-file c.log --trs-file c.trs --color-tests no --ignore-exit \
		-- bash "$DS_SRCDIR/tests/unit/cmocka-tap.sh" "$prog"
	assert_line 'PASS: tap_cases 1 - case_passes'
	assert_line 'SKIP: tap_cases 2 # SKIP case_skips'
	assert_line 'FAIL: tap_cases 3 - case_fails'
	run -0 grep '^:test-result:' c.trs
	assert_output $':test-result: PASS\n:test-result: SKIP\n:test-result: FAIL'
	# the reason the case printed reaches the log
	run -0 grep -F '# skipped: the way a test without its CPU feature skips' c.log
}
