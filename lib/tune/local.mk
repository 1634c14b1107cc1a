## lib/tune: experiment spaces and search strategies, shared by
## ds-nvme-tune and ds-autotune (their drivers are in lib/driver).
noinst_LIBRARIES += lib/tune/libds_tune.a
lib_tune_libds_tune_a_SOURCES = \
	lib/tune/search.c lib/tune/search.h \
	lib/tune/autotune.c lib/tune/autotune.h
LIBDS += lib/tune/libds_tune.a

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_search tests/unit/test_tune tests/unit/test_autotune
TESTS += tests/unit/test_search tests/unit/test_tune tests/unit/test_autotune
tests_unit_test_search_SOURCES = tests/unit/test_search.c tests/unit/unit.h
tests_unit_test_search_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_search_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
tests_unit_test_tune_SOURCES = tests/unit/test_tune.c tests/unit/unit.h
tests_unit_test_tune_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_tune_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
tests_unit_test_autotune_SOURCES = tests/unit/test_autotune.c tests/unit/unit.h
tests_unit_test_autotune_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_autotune_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif
