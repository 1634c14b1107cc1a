## kernels: cpu/ (C, OpenMP, SIMD), cuda/ (.cu), common/ (shared inline math)
noinst_LIBRARIES += kernels/libds_kernels.a
kernels_libds_kernels_a_SOURCES = kernels/cpu/gpt_kernels.c kernels/cpu/gpt_kernels.h \
	kernels/common/gpt_math.h
## -fno-trapping-math lets the element-wise loops with clamps vectorise; it
## changes no result (no FP exception is ever inspected).
kernels_libds_kernels_a_CFLAGS = $(AM_CFLAGS) -fno-trapping-math
LIBDS += kernels/libds_kernels.a

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_kernels
TESTS += tests/unit/test_kernels
tests_unit_test_kernels_SOURCES = tests/unit/test_kernels.c tests/unit/unit.h
tests_unit_test_kernels_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_kernels_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif
