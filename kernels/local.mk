## kernels: cpu/ (C, OpenMP, SIMD; and the machine's ceilings, sgemm and
## triad, that MFU and the benchmarks compare against), cuda/ (.cu),
## common/ (shared inline math)
noinst_LIBRARIES += kernels/libds_kernels.a
kernels_libds_kernels_a_SOURCES = kernels/cpu/gpt_kernels.c kernels/cpu/gpt_kernels.h \
	kernels/cpu/gemm_bf16.c kernels/cpu/gemm_bf16.h \
	kernels/cpu/ceiling.c kernels/cpu/ceiling.h \
	kernels/cpu/onebit.c kernels/cpu/onebit.h \
	kernels/cpu/gemm_bf16_kernel.c kernels/cpu/gemm_bf16_int.h \
	kernels/common/gpt_math.h kernels/common/optim_math.h
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

## CUDA: the launchers of kernels/cuda (gpt_cuda.h: the GPT kernels,
## flat_cuda.h: flat buffers and optimizers, gemm_cuda.h: cuBLAS,
## attn_cuda.h: fused attention; ds_cuda.h: the runtime calls libds needs,
## rt_cuda.cu), built by nvcc into the same library when
## configure found CUDA, for sm_80 and sm_90 (+ compute_90 PTX) with every
## warning an error.  -fmad=false: no contraction of a*b+c into an FMA
## unless the source says fmaf, as gcc -std=c11 compiles the CPU side, so
## the same per-element math rounds alike.
DS_CUDA_SRC = kernels/cuda/gpt_cuda.cu kernels/cuda/flat_cuda.cu kernels/cuda/gemm_cuda.cu \
	kernels/cuda/attn_cuda.cu kernels/cuda/rt_cuda.cu
DS_CUDA_HDR = kernels/cuda/cuda_port.h kernels/cuda/ds_cuda.h kernels/cuda/gpt_cuda.h kernels/cuda/flat_cuda.h \
	kernels/cuda/gemm_cuda.h kernels/cuda/attn_cuda.h kernels/common/gpt_math.h kernels/common/optim_math.h \
	lib/util/half.h lib/util/rng.h
DS_CUDA_OBJ = $(DS_CUDA_SRC:.cu=.$(OBJEXT))
DS_NVCC_FLAGS = -O3 -std=c++17 -fmad=false $(NVCC_GENCODE) -Werror all-warnings -Xcompiler -fPIC,-Wall \
	-I$(top_srcdir)/lib -I$(top_srcdir)/kernels
EXTRA_DIST += $(DS_CUDA_SRC) $(DS_CUDA_HDR)
if HAVE_CUDA
kernels_libds_kernels_a_LIBADD = $(DS_CUDA_OBJ)
CLEANFILES += $(DS_CUDA_OBJ)
kernels/cuda/%.$(OBJEXT): $(srcdir)/kernels/cuda/%.cu $(addprefix $(srcdir)/,$(DS_CUDA_HDR))
	@$(MKDIR_P) kernels/cuda
	$(AM_V_GEN)$(NVCC) $(DS_NVCC_FLAGS) -c $< -o $@
endif

## bench/cuda-kernels: the fused attention, the bf16 GEMM and memory-bound
## kernels on a GPU at GPT-2 sizes against the device's ceilings (built by
## make check, run by bench/gpu-run.sh; says so and exits 0 without a GPU).
if HAVE_CUDA
check_PROGRAMS += bench/cuda-kernels
bench_cuda_kernels_SOURCES = bench/cuda-kernels.c
bench_cuda_kernels_LDADD = $(DS_LDADD)
endif

## The same .cu sources compiled by g++ over a host emulation of CUDA
## (tests/unit/cuda_emu.h: threads as fibers, real barriers; cuBLAS through
## cblas_sgemm, cublas_emu.h) and compared with the CPU kernels on the CPU
## (test_kernels_cuda_emu); test_kernels_cuda runs the same cases
## (kernels_cuda_cases.h) on a GPU and skips without one.
DS_EMU_SRC = tests/unit/cuda_emu.cpp tests/unit/cublas_emu.cpp tests/unit/cuda_emu_selftest.cpp
DS_EMU_HDR = tests/unit/cuda_emu.h tests/unit/cuda_emu_api.h tests/unit/cublas_emu.h \
	tests/unit/emu_selftest.h tests/unit/emu_selftest_api.h tests/unit/kernels_cuda_cases.h
DS_EMU_OBJ = $(patsubst kernels/cuda/%.cu,tests/unit/emu/%.$(OBJEXT),$(DS_CUDA_SRC)) \
	$(patsubst tests/unit/%.cpp,tests/unit/emu/%.$(OBJEXT),$(DS_EMU_SRC))
## (configure --enable-asan instruments them too: ASan then sees a kernel
## that reads or writes past a buffer or its shared memory)
DS_EMU_FLAGS = -std=c++17 -O2 -Wall -Wextra -Werror -D_GNU_SOURCE -I$(top_srcdir)/lib -I$(top_srcdir)/kernels \
	-I$(top_srcdir)/tests/unit $(BLAS_CFLAGS) $(filter -fsanitize=% -fno-omit-frame-pointer,$(CFLAGS))
EXTRA_DIST += $(DS_EMU_SRC) $(DS_EMU_HDR)
if HAVE_CUDA
## (the objects need no cmocka: tests/unit/ds-train-emu, lib/driver/train.mk,
## links them too)
CLEANFILES += $(DS_EMU_OBJ)
tests/unit/emu/%.$(OBJEXT): $(srcdir)/kernels/cuda/%.cu $(addprefix $(srcdir)/,$(DS_CUDA_HDR) $(DS_EMU_HDR))
	@$(MKDIR_P) tests/unit/emu
	$(AM_V_GEN)$(CXX) $(DS_EMU_FLAGS) -x c++ -DDS_CUDA_EMU -c $< -o $@
tests/unit/emu/%.$(OBJEXT): $(srcdir)/tests/unit/%.cpp $(addprefix $(srcdir)/,$(DS_CUDA_HDR) $(DS_EMU_HDR))
	@$(MKDIR_P) tests/unit/emu
	$(AM_V_GEN)$(CXX) $(DS_EMU_FLAGS) -c $< -o $@
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_kernels_cuda tests/unit/test_kernels_cuda_emu
TESTS += tests/unit/test_kernels_cuda tests/unit/test_kernels_cuda_emu
tests_unit_test_kernels_cuda_SOURCES = tests/unit/test_kernels_cuda.c tests/unit/unit.h
tests_unit_test_kernels_cuda_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_kernels_cuda_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
tests_unit_test_kernels_cuda_emu_SOURCES = tests/unit/test_kernels_cuda_emu.c tests/unit/unit.h
tests_unit_test_kernels_cuda_emu_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_kernels_cuda_emu_LDADD = $(DS_EMU_OBJ) $(DS_LDADD) $(CMOCKA_LIBS) -lstdc++
EXTRA_tests_unit_test_kernels_cuda_emu_DEPENDENCIES = $(DS_EMU_OBJ)
endif
endif
