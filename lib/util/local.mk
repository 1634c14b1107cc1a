## lib/util: status codes, logging, allocation, timers, RNG, fp16/bf16, CRC32C.
noinst_LIBRARIES += lib/util/libds_util.a
lib_util_libds_util_a_SOURCES = \
	lib/util/err.c lib/util/err.h \
	lib/util/log.c lib/util/log.h \
	lib/util/mem.c lib/util/mem.h \
	lib/util/timer.c lib/util/timer.h \
	lib/util/half.c lib/util/half.h \
	lib/util/rng.c lib/util/rng.h \
	lib/util/crc32c.c lib/util/crc32c.h \
	lib/util/file.c lib/util/file.h \
	lib/util/progress.c lib/util/progress.h
LIBDS += lib/util/libds_util.a

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_util
TESTS += tests/unit/test_util
tests_unit_test_util_SOURCES = tests/unit/test_util.c tests/unit/unit.h
tests_unit_test_util_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_util_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif

## Benchmark (not a test): a GPT step's matrix products in fp32 sgemm,
## oneDNN bf16 and dstk's AVX512_BF16 kernel (issues 5, 21); built by
## `make check` or `make bench/bf16-gemm`, never run by it.
check_PROGRAMS += bench/bf16-gemm
bench_bf16_gemm_SOURCES = bench/bf16-gemm.c
bench_bf16_gemm_LDADD = $(DS_LDADD)

## Benchmark (not a test): the fp16/bf16 bulk conversions and the 16-bit
## allreduce's sum against the scalar conversions; built by `make check`
## or `make bench/half-bulk`, never run by it.
check_PROGRAMS += bench/half-bulk
bench_half_bulk_SOURCES = bench/half-bulk.c
bench_half_bulk_LDADD = $(DS_LDADD)
