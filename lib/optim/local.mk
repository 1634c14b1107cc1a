## lib/optim: optimizers on flat fp32 shards (Adam/AdamW SIMD kernels, Lamb,
## SGD, the 1-bit family of onebit.c), LR schedules, the fp16 loss scaler and clipping helpers.
noinst_LIBRARIES += lib/optim/libds_optim.a
lib_optim_libds_optim_a_SOURCES = \
	lib/optim/optim.c lib/optim/optim.h \
	lib/optim/adam.c lib/optim/lamb.c \
	lib/optim/onebit.c lib/optim/onebit.h \
	lib/optim/sched.c lib/optim/sched.h \
	lib/optim/scaler.c lib/optim/scaler.h \
	lib/optim/clip.c lib/optim/clip.h
LIBDS += lib/optim/libds_optim.a

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_optim tests/unit/test_sched tests/unit/test_scaler
TESTS += tests/unit/test_optim tests/unit/test_sched tests/unit/test_scaler
tests_unit_test_optim_SOURCES = tests/unit/test_optim.c tests/unit/unit.h
tests_unit_test_optim_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_optim_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
tests_unit_test_sched_SOURCES = tests/unit/test_sched.c tests/unit/unit.h
tests_unit_test_sched_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_sched_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
tests_unit_test_scaler_SOURCES = tests/unit/test_scaler.c tests/unit/unit.h
tests_unit_test_scaler_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_scaler_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
check_PROGRAMS += tests/unit/test_onebit_optim
TESTS += tests/unit/test_onebit_optim
tests_unit_test_onebit_optim_SOURCES = tests/unit/test_onebit_optim.c tests/unit/unit.h
tests_unit_test_onebit_optim_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_onebit_optim_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif

## Benchmark (not a test): built by `make check` or `make bench/adamw`,
## never run by it.
check_PROGRAMS += bench/adamw
bench_adamw_SOURCES = bench/adamw.c
bench_adamw_LDADD = $(DS_LDADD)
