## lib/train: the ds-train run (the top layer: engine + data + checkpoints
## + monitors + signals).
noinst_LIBRARIES += lib/train/libds_train.a
lib_train_libds_train_a_SOURCES = lib/train/train.c lib/train/train.h lib/train/setup.c lib/train/train_int.h \
	lib/train/state.c lib/train/check.c lib/train/commlog.c lib/train/watchdog.c lib/train/watchdog.h
LIBDS += lib/train/libds_train.a

if HAVE_BATS
TESTS += tests/cli/ds-train-memory.bats tests/cli/ds-train-deadline.bats tests/cli/ds-train-watchdog.bats
if HAVE_MPI
TESTS += tests/mpi/memory.bats tests/mpi/comms.bats
endif
endif
EXTRA_DIST += tests/cli/ds-train-memory.bats tests/mpi/memory.bats tests/mpi/comms.bats tests/cli/ds-train-deadline.bats tests/cli/ds-train-watchdog.bats

## fp16/bf16 training runs (issue 5)
if HAVE_BATS
TESTS += tests/cli/ds-train-mixed.bats
endif
EXTRA_DIST += tests/cli/ds-train-mixed.bats
