## lib/engine: the training engine (flat buffers, ZeRO, step) and its
## memory estimator.
noinst_LIBRARIES += lib/engine/libds_engine.a
lib_engine_libds_engine_a_SOURCES = lib/engine/engine.c lib/engine/engine.h \
	lib/engine/engine_onebit.c lib/engine/engine_onebit.h \
	lib/engine/offload.c lib/engine/offload.h \
	lib/engine/estimate.c lib/engine/estimate.h lib/engine/schedule.c lib/engine/schedule.h \
	lib/engine/pipe.c lib/engine/pipe.h
LIBDS += lib/engine/libds_engine.a

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_engine
TESTS += tests/unit/test_engine
tests_unit_test_engine_SOURCES = tests/unit/test_engine.c tests/unit/unit.h
tests_unit_test_engine_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_engine_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
check_PROGRAMS += tests/unit/test_offload
TESTS += tests/unit/test_offload
tests_unit_test_offload_SOURCES = tests/unit/test_offload.c tests/unit/unit.h
tests_unit_test_offload_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_offload_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
check_PROGRAMS += tests/unit/test_estimate
TESTS += tests/unit/test_estimate
tests_unit_test_estimate_SOURCES = tests/unit/test_estimate.c tests/unit/unit.h
tests_unit_test_estimate_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_estimate_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
check_PROGRAMS += tests/unit/test_schedule
TESTS += tests/unit/test_schedule
tests_unit_test_schedule_SOURCES = tests/unit/test_schedule.c tests/unit/unit.h
tests_unit_test_schedule_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_schedule_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif

## The engine on the cuda backend over the host emulation of CUDA
## (kernels/local.mk's DS_EMU_OBJ), against the engine on cpu.
if HAVE_CUDA
if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_engine_cuda_emu
TESTS += tests/unit/test_engine_cuda_emu
tests_unit_test_engine_cuda_emu_SOURCES = tests/unit/test_engine_cuda_emu.c tests/unit/unit.h
tests_unit_test_engine_cuda_emu_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS) -I$(top_srcdir)/tests/unit
tests_unit_test_engine_cuda_emu_LDADD = $(DS_EMU_OBJ) $(DS_LDADD) $(CMOCKA_LIBS) -lstdc++
EXTRA_tests_unit_test_engine_cuda_emu_DEPENDENCIES = $(DS_EMU_OBJ)
endif
endif
EXTRA_DIST += tests/unit/test_engine_cuda_emu.c

if HAVE_MPI
if HAVE_BATS
TESTS += tests/mpi/train.bats tests/mpi/ckpt.bats tests/mpi/watchdog.bats tests/mpi/3d.bats
endif
endif

## The engine on the emulated cuda backend under mpirun (ZeRO 0-3 over the
## communicator's device path) against the cpu backend and the 1-rank run;
## tests/mpi/engine-cuda.bats skips, saying why, without CUDA (the
## emulation's objects are built where cmocka is, kernels/local.mk).
if HAVE_MPI
if HAVE_CUDA
if HAVE_CMOCKA
check_PROGRAMS += tests/mpi/engine_cuda_check
tests_mpi_engine_cuda_check_SOURCES = tests/mpi/engine_cuda_check.c
tests_mpi_engine_cuda_check_LDADD = $(DS_EMU_OBJ) $(DS_LDADD) -lstdc++
EXTRA_tests_mpi_engine_cuda_check_DEPENDENCIES = $(DS_EMU_OBJ)
endif
endif
if HAVE_BATS
TESTS += tests/mpi/engine-cuda.bats
endif
endif
EXTRA_DIST += tests/mpi/engine_cuda_check.c tests/mpi/engine-cuda.bats
EXTRA_DIST += tests/data/pipe_schedule.txt tests/data/pipe_partition.txt tests/mpi/3d.bats tests/data/neox-test-dropout.json tests/mpi/train.bats tests/mpi/ckpt.bats tests/mpi/watchdog.bats tests/mpi/train_helper.bash tests/data/gpt-test-dropout.json
