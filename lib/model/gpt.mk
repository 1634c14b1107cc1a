## lib/model/gpt.mk: the GPT family -- parameter registry (one flat buffer,
## named tensors, segments), forward/backward on CPU, and its tests against
## the PyTorch fixtures of contrib/reference.
noinst_LIBRARIES += lib/model/libds_gpt.a
lib_model_libds_gpt_a_SOURCES = lib/model/gpt.c lib/model/gpt.h \
	lib/model/registry.c lib/model/registry.h lib/model/moe.c lib/model/moe.h lib/model/pipe.c lib/model/pipe.h
LIBDS += lib/model/libds_gpt.a

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_model
TESTS += tests/unit/test_model
tests_unit_test_model_SOURCES = tests/unit/test_model.c tests/unit/unit.h
tests_unit_test_model_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_model_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
check_PROGRAMS += tests/unit/test_moe
TESTS += tests/unit/test_moe
tests_unit_test_moe_SOURCES = tests/unit/test_moe.c tests/unit/unit.h
tests_unit_test_moe_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_moe_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
check_PROGRAMS += tests/unit/test_model_par
TESTS += tests/unit/test_model_par
tests_unit_test_model_par_SOURCES = tests/unit/test_model_par.c tests/unit/unit.h
tests_unit_test_model_par_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) -pthread
tests_unit_test_model_par_LDADD = $(DS_LDADD) $(CMOCKA_LIBS) -lpthread
endif
EXTRA_DIST += contrib/reference/moe_reference.py

## bench/gpt-step: forward+backward ms/step and the sgemm ceiling (built by
## `make check`, never run by it; DESIGN.md "Benchmarks").
check_PROGRAMS += bench/gpt-step
bench_gpt_step_SOURCES = bench/gpt-step.c
bench_gpt_step_LDADD = $(DS_LDADD)
