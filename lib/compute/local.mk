## lib/compute: the compute backend table the model calls for every tensor
## operation (cpu: kernels/cpu; cuda: kernels/cuda, with CUDA), --device's selection and the
## device a rank uses.
noinst_LIBRARIES += lib/compute/libds_compute.a
lib_compute_libds_compute_a_SOURCES = lib/compute/compute.c lib/compute/compute.h \
	lib/compute/compute_cpu.c
if HAVE_CUDA
lib_compute_libds_compute_a_SOURCES += lib/compute/compute_cuda.c
endif
LIBDS += lib/compute/libds_compute.a
EXTRA_DIST += lib/compute/compute_cuda.c


if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_compute
TESTS += tests/unit/test_compute
tests_unit_test_compute_SOURCES = tests/unit/test_compute.c tests/unit/unit.h
tests_unit_test_compute_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_compute_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif

## The cuda backend over the host emulation of CUDA (kernels/local.mk's
## DS_EMU_OBJ: the .cu launchers compiled by g++), against the cpu backend.
if HAVE_CUDA
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_compute_cuda_emu
TESTS += tests/unit/test_compute_cuda_emu
tests_unit_test_compute_cuda_emu_SOURCES = tests/unit/test_compute_cuda_emu.c tests/unit/unit.h
tests_unit_test_compute_cuda_emu_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_compute_cuda_emu_LDADD = $(DS_EMU_OBJ) $(DS_LDADD) $(CMOCKA_LIBS) -lstdc++
EXTRA_tests_unit_test_compute_cuda_emu_DEPENDENCIES = $(DS_EMU_OBJ)
endif
endif
