## lib/tune: experiment spaces and search strategies (shared by
## ds-nvme-tune and ds-autotune), and ds-nvme-tune's run on lib/io's engine.
noinst_LIBRARIES += lib/tune/libds_tune.a
lib_tune_libds_tune_a_SOURCES = \
	lib/tune/search.c lib/tune/search.h \
	lib/tune/nvme_tune.c lib/tune/nvme_tune.h
LIBDS += lib/tune/libds_tune.a

bin_PROGRAMS += tools/ds-nvme-tune
tools_ds_nvme_tune_SOURCES = tools/ds-nvme-tune.c
tools_ds_nvme_tune_LDADD = $(DS_LDADD)
dist_man1_MANS += share/man/ds-nvme-tune.1

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_tune
TESTS += tests/unit/test_tune
tests_unit_test_tune_SOURCES = tests/unit/test_tune.c tests/unit/unit.h
tests_unit_test_tune_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_tune_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif

if HAVE_BATS
TESTS += tests/cli/ds-nvme-tune.bats
endif
EXTRA_DIST += tests/cli/ds-nvme-tune.bats

## ds-autotune: the space, memory model and tuners (autotune.c) and the
## trial runner (autotune_run.c); tool, man page and tests.
lib_tune_libds_tune_a_SOURCES += \
	lib/tune/autotune.c lib/tune/autotune.h lib/tune/autotune_run.c

bin_PROGRAMS += tools/ds-autotune
tools_ds_autotune_SOURCES = tools/ds-autotune.c
tools_ds_autotune_LDADD = $(DS_LDADD)
dist_man1_MANS += share/man/ds-autotune.1

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_autotune
TESTS += tests/unit/test_autotune
tests_unit_test_autotune_SOURCES = tests/unit/test_autotune.c tests/unit/unit.h
tests_unit_test_autotune_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_autotune_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif

if HAVE_BATS
TESTS += tests/cli/ds-autotune.bats
endif
EXTRA_DIST += tests/cli/ds-autotune.bats
