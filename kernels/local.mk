## kernels: cpu/ (C, OpenMP, SIMD; and the machine's ceilings, sgemm and
## triad, that MFU and the benchmarks compare against), cuda/ (.cu),
## common/ (shared inline math)
noinst_LIBRARIES += kernels/libds_kernels.a
kernels_libds_kernels_a_SOURCES = kernels/cpu/gpt_kernels.c kernels/cpu/gpt_kernels.h \
	kernels/cpu/gemm_bf16.c kernels/cpu/gemm_bf16.h \
	kernels/cpu/ceiling.c kernels/cpu/ceiling.h \
	kernels/cpu/gemm_bf16_kernel.c kernels/cpu/gemm_bf16_int.h \
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

## CUDA versions of the element-wise kernels (same math, kernels/common),
## compiled by nvcc into the same library when configure found CUDA.
EXTRA_DIST += kernels/cuda/gpt_cuda.cu kernels/cuda/gpt_cuda.h
if HAVE_CUDA
kernels_libds_kernels_a_LIBADD = kernels/cuda/gpt_cuda.$(OBJEXT)
CLEANFILES += kernels/cuda/gpt_cuda.$(OBJEXT)
kernels/cuda/gpt_cuda.$(OBJEXT): $(srcdir)/kernels/cuda/gpt_cuda.cu $(srcdir)/kernels/cuda/gpt_cuda.h \
		$(srcdir)/kernels/common/gpt_math.h
	@$(MKDIR_P) kernels/cuda
	$(NVCC) -O2 -std=c++14 $(NVCC_GENCODE) -Werror all-warnings -Xcompiler -fPIC,-Wall \
		-I$(top_srcdir)/lib -I$(top_srcdir)/kernels \
		-c $(srcdir)/kernels/cuda/gpt_cuda.cu -o $@
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_kernels_cuda
TESTS += tests/unit/test_kernels_cuda
tests_unit_test_kernels_cuda_SOURCES = tests/unit/test_kernels_cuda.c tests/unit/unit.h
tests_unit_test_kernels_cuda_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_kernels_cuda_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif
endif
