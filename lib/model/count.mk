## lib/model/count.mk: analytic params/MACs/flops per module (the flops
## profiler's counts, the trainer's MFU and the autotuner's cost model).
noinst_LIBRARIES += lib/model/libds_count.a
lib_model_libds_count_a_SOURCES = lib/model/count.c lib/model/count.h
LIBDS += lib/model/libds_count.a

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_count
TESTS += tests/unit/test_count
tests_unit_test_count_SOURCES = tests/unit/test_count.c tests/unit/unit.h
tests_unit_test_count_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_count_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif
