## lib/driver/profile.mk: the flops-profiler report (text/JSON/CSV from the
## count tree of lib/model/count), ds-profile's driver (with --measure on
## the model) and the ds-profile tool.
lib_driver_libds_driver_a_SOURCES += \
	lib/driver/profile.c lib/driver/profile.h \
	lib/driver/profile_run.c lib/driver/profile_run.h \
	lib/driver/profile_measure.c

bin_PROGRAMS += tools/ds-profile
tools_ds_profile_SOURCES = tools/ds-profile.c tools/cli.c tools/cli.h
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
