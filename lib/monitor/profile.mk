## lib/monitor/profile.mk: the flops-profiler report (text/JSON/CSV from the
## count tree of lib/model/count) and the ds-profile tool.
noinst_LIBRARIES += lib/monitor/libds_profile.a
lib_monitor_libds_profile_a_SOURCES = \
	lib/monitor/profile.c lib/monitor/profile.h \
	lib/monitor/profile_run.c lib/monitor/profile_run.h \
	lib/monitor/profile_measure.c
LIBDS += lib/monitor/libds_profile.a

bin_PROGRAMS += tools/ds-profile
tools_ds_profile_SOURCES = tools/ds-profile.c
tools_ds_profile_LDADD = $(DS_LDADD)
dist_man1_MANS += share/man/ds-profile.1

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_profile
TESTS += tests/unit/test_profile
tests_unit_test_profile_SOURCES = tests/unit/test_profile.c tests/unit/unit.h
tests_unit_test_profile_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_profile_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif

if HAVE_BATS
TESTS += tests/cli/ds-profile.bats
endif
EXTRA_DIST += tests/cli/ds-profile.bats
