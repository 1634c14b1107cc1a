## tests: every result is a TAP line, counted by automake's tap-driver, so
## `make check` and .ci/run report test cases, not test files.
## cmocka prints TAP when CMOCKA_MESSAGE_OUTPUT=TAP; bats prints TAP itself.
## The cmocka programs (the tests without an extension) run through
## tests/unit/cmocka-tap.sh, which turns cmocka 1.1.x's "not ok N # SKIP"
## into "ok N # SKIP", so a skip() counts as SKIP, not FAIL (tests/unit/tap.bats).
## --ignore-exit: a failing case is counted once (its "not ok" line), not
## again for the exit status; a crash still shows as a short plan (ERROR).
LOG_DRIVER = env AM_TAP_AWK='$(AWK)' $(SHELL) $(top_srcdir)/build-aux/tap-driver.sh
AM_LOG_DRIVER_FLAGS = --ignore-exit
AM_BATS_LOG_DRIVER_FLAGS = --ignore-exit
TEST_EXTENSIONS = .bats .sh
BATS_LOG_DRIVER = $(LOG_DRIVER)
## Every test file runs under tests/bound.sh: DS_TEST_FILE_TIMEOUT seconds
## (600), then a "Bail out!" (an ERROR naming the file and test) instead of
## a hang.
LOG_COMPILER = $(top_srcdir)/tests/bound.sh bash $(top_srcdir)/tests/unit/cmocka-tap.sh
BATS_LOG_COMPILER = $(top_srcdir)/tests/bound.sh $(BATS)
AM_BATS_LOG_FLAGS = --tap
SH_LOG_DRIVER = $(LOG_DRIVER)
SH_LOG_COMPILER = $(top_srcdir)/tests/bound.sh bash
AM_SH_LOG_DRIVER_FLAGS = --ignore-exit
AM_TESTS_ENVIRONMENT = \
	CMOCKA_MESSAGE_OUTPUT=TAP; export CMOCKA_MESSAGE_OUTPUT; \
	DS_BUILDDIR='$(abs_top_builddir)'; export DS_BUILDDIR; \
	DS_SRCDIR='$(abs_top_srcdir)'; export DS_SRCDIR; \
	PATH='$(abs_top_builddir)/tools':"$$PATH"; export PATH; \
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-2}; export OMP_NUM_THREADS; \
	LC_ALL=C; export LC_ALL; \
	SHELLCHECK='$(SHELLCHECK)'; export SHELLCHECK;
EXTRA_DIST += tests/bound.sh tests/bounded.bash tests/cli/helper.bash tests/unit/unit.h tests/unit/cmocka-tap.sh tests/data

## The harness itself: a cmocka program with a passing, a skipped and a
## failing case (never run as a test of its own) and the bats file that runs
## it through the driver and the wrapper above.
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/tap_cases
tests_unit_tap_cases_SOURCES = tests/unit/tap_cases.c tests/unit/unit.h
tests_unit_tap_cases_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_tap_cases_LDADD = $(CMOCKA_LIBS)
if HAVE_BATS
TESTS += tests/unit/tap.bats
endif
endif
EXTRA_DIST += tests/unit/tap.bats

## The ShellCheck pass over every shell file (tests/shellcheck.sh, one TAP
## line per file; skipped where configure found no shellcheck), with
## tests/bats-lint.awk for the && assertion that ShellCheck does not see.
TESTS += tests/shellcheck.sh
if HAVE_BATS
TESTS += tests/lint.bats
endif
EXTRA_DIST += tests/shellcheck.sh tests/bats-lint.awk tests/lint.bats

if HAVE_BATS
TESTS += tests/cli/bounded.bats
endif
EXTRA_DIST += tests/cli/bounded.bats

## bench/gpu-step.sh without a GPU: its dry run, the bf16 refusal's fp32
## fallback and the per-part timeout (issue 18; the figures need a GPU)
if HAVE_BATS
TESTS += tests/cli/gpu-step.bats
endif
EXTRA_DIST += tests/cli/gpu-step.bats

## The layer rule (DESIGN.md "Layers"): no module includes one above it;
## and libds never prints, exits or aborts (STYLE rule 4).
TESTS += tests/layers.sh tests/quiet.sh
EXTRA_DIST += tests/layers.sh tests/quiet.sh
