## lib/comm: the communicator (self, mpi; on device buffers nccl, or the host
## backend staging through pinned memory) and its collectives, and the
## compressed allreduce of the 1-bit optimizers (compressed.c, over the
## packing kernels of kernels/cpu/onebit.c).
noinst_LIBRARIES += lib/comm/libds_comm.a
lib_comm_libds_comm_a_SOURCES = lib/comm/comm.c lib/comm/comm.h lib/comm/comm_int.h \
	lib/comm/comm_dev.c lib/comm/comm_staged.c lib/comm/compressed.c lib/comm/topo.c lib/comm/topo.h
if HAVE_MPI
lib_comm_libds_comm_a_SOURCES += lib/comm/comm_mpi.c
else
lib_comm_libds_comm_a_SOURCES += lib/comm/comm_mpi_stub.c
endif
## device buffers over NCCL with CUDA (comm_nccl.c), else a stub naming --with-cuda
if HAVE_CUDA
lib_comm_libds_comm_a_SOURCES += lib/comm/comm_nccl.c
else
lib_comm_libds_comm_a_SOURCES += lib/comm/comm_nccl_stub.c
endif
EXTRA_DIST += lib/comm/comm_nccl.c lib/comm/comm_nccl_stub.c
LIBDS += lib/comm/libds_comm.a

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_comm
TESTS += tests/unit/test_comm
tests_unit_test_comm_SOURCES = tests/unit/test_comm.c tests/unit/unit.h tests/unit/comm_devsim.h
tests_unit_test_comm_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_comm_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
check_PROGRAMS += tests/unit/test_onebit
TESTS += tests/unit/test_onebit
tests_unit_test_onebit_SOURCES = tests/unit/test_onebit.c tests/unit/unit.h tests/unit/onebit_example.h
tests_unit_test_onebit_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_onebit_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif

if HAVE_MPI
check_PROGRAMS += tests/mpi/comm_check tests/mpi/onebit_check
tests_mpi_comm_check_SOURCES = tests/mpi/comm_check.c tests/unit/comm_devsim.h
tests_mpi_comm_check_LDADD = $(DS_LDADD)
tests_mpi_onebit_check_SOURCES = tests/mpi/onebit_check.c tests/unit/onebit_example.h
tests_mpi_onebit_check_LDADD = $(DS_LDADD)
if HAVE_BATS
TESTS += tests/mpi/comm.bats tests/mpi/onebit.bats
endif
endif
EXTRA_DIST += tests/mpi/comm.bats tests/mpi/onebit.bats tests/mpi/helper.bash

## the same checks on CUDA device buffers (NCCL, staged mpi): skips without a
## device; bench/gpu-run.sh runs tests/gpu on the GPU machine
if HAVE_MPI
if HAVE_CUDA
if HAVE_BATS
TESTS += tests/gpu/comm.bats
endif
endif
endif
EXTRA_DIST += tests/gpu/comm.bats

## Benchmark helpers (not tests): raw MPI_Allreduce, and the compressed
## allreduce against it, for bench/comm-busbw.sh; built by `make check` or
## `make bench/comm-raw bench/comm-compressed`, never run by it.
if HAVE_MPI
check_PROGRAMS += bench/comm-raw bench/comm-compressed
bench_comm_raw_SOURCES = bench/comm-raw.c
bench_comm_raw_LDADD = $(DS_LDADD)
bench_comm_compressed_SOURCES = bench/comm-compressed.c
bench_comm_compressed_LDADD = $(DS_LDADD)
endif
