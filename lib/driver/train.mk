## lib/driver/train.mk: ds-train's driver (set-up, state, --check, the
## comms logger, the hang watchdog, the loop), the tool and its tests.
lib_driver_libds_driver_a_SOURCES += lib/driver/train.c lib/driver/train.h lib/driver/train_setup.c \
	lib/driver/train_int.h lib/driver/ckpt_need.h lib/driver/train_state.c lib/driver/train_state_onebit.c lib/driver/train_check.c lib/driver/train_commlog.c \
	lib/driver/watchdog.c lib/driver/watchdog.h

bin_PROGRAMS += tools/ds-train
tools_ds_train_SOURCES = tools/ds-train.c tools/cli.c tools/cli.h
tools_ds_train_LDADD = $(DS_LDADD)
dist_man1_MANS += share/man/ds-train.1

## ds-train over the host emulation of CUDA (kernels/local.mk's DS_EMU_OBJ,
## linked before libds as the emulated unit tests do, and gpu_count_emu.c
## for the device count): one emulated device, device memory unreachable
## from host code.  Never installed; tests/cli/ds-train-cuda-emu.sh runs
## tests/gpu/train.bats with it.
if HAVE_CUDA
check_PROGRAMS += tests/unit/ds-train-emu
tests_unit_ds_train_emu_SOURCES = tools/ds-train.c tools/cli.c tools/cli.h tests/unit/gpu_count_emu.c
tests_unit_ds_train_emu_LDADD = $(DS_EMU_OBJ) $(DS_LDADD) -lstdc++
EXTRA_tests_unit_ds_train_emu_DEPENDENCIES = $(DS_EMU_OBJ)
endif
EXTRA_DIST += tests/unit/gpu_count_emu.c

if HAVE_BATS
TESTS += tests/cli/ds-train.bats tests/cli/ds-train-check.bats tests/cli/configs-real.bats tests/cli/ds-train-neox.bats
endif
EXTRA_DIST += tests/cli/ds-train.bats tests/cli/ds-train-check.bats tests/cli/configs-real.bats tests/cli/ds-train-neox.bats

if HAVE_BATS
TESTS += tests/cli/ds-train-memory.bats tests/cli/ds-train-deadline.bats tests/cli/ds-train-watchdog.bats
if HAVE_MPI
TESTS += tests/mpi/memory.bats tests/mpi/comms.bats
endif
endif
EXTRA_DIST += tests/cli/ds-train-memory.bats tests/mpi/memory.bats tests/mpi/comms.bats tests/cli/ds-train-deadline.bats tests/cli/ds-train-watchdog.bats

## Mixture of Experts (issue 23)
if HAVE_BATS
TESTS += tests/cli/ds-train-moe.bats
if HAVE_MPI
TESTS += tests/mpi/moe.bats
endif
endif
EXTRA_DIST += tests/cli/ds-train-moe.bats tests/mpi/moe.bats

## the compute backend: --device, dstk.device (issue 18); tests/gpu/train.bats
## over ds-train-emu (skipped without CUDA)
if HAVE_BATS
TESTS += tests/cli/ds-train-device.bats tests/cli/ds-train-cuda-emu.sh tests/cli/ds-train-check-cuda.bats
endif
EXTRA_DIST += tests/cli/ds-train-device.bats tests/cli/ds-train-cuda-emu.sh tests/cli/ds-train-check-cuda.bats

## fp16/bf16 training runs (issue 5)
if HAVE_BATS
TESTS += tests/cli/ds-train-mixed.bats
endif
EXTRA_DIST += tests/cli/ds-train-mixed.bats

## ZeRO-Infinity: optimizer states and parameters offloaded to NVMe (issue 20)
if HAVE_BATS
TESTS += tests/cli/ds-train-nvme.bats
if HAVE_MPI
TESTS += tests/mpi/nvme.bats
endif
endif
EXTRA_DIST += tests/cli/ds-train-nvme.bats tests/mpi/nvme.bats
