## lib/io/ckpt.mk: HDF5 checkpoints (atomic save, chunk CRC-32C, manifest,
## slices, latest/auto): ckpt.c (shared), ckpt_write.c, ckpt_read.c,
## ckpt_verify.c, ckpt_manifest.c.  Serial HDF5 calls only (rank 0 writes
## the metadata, every rank pwrites its slices), so they build against
## hdf5-serial and hdf5-openmpi alike.
noinst_LIBRARIES += lib/io/libds_ckpt.a
lib_io_libds_ckpt_a_SOURCES = lib/io/ckpt.c lib/io/ckpt_write.c lib/io/ckpt_read.c lib/io/ckpt_verify.c \
	lib/io/ckpt_manifest.c lib/io/ckpt.h lib/io/ckpt_int.h
LIBDS += lib/io/libds_ckpt.a

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_ckpt
TESTS += tests/unit/test_ckpt
tests_unit_test_ckpt_SOURCES = tests/unit/test_ckpt.c tests/unit/unit.h
tests_unit_test_ckpt_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_ckpt_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif

if HAVE_MPI
check_PROGRAMS += tests/mpi/ckpt_check
tests_mpi_ckpt_check_SOURCES = tests/mpi/ckpt_check.c
tests_mpi_ckpt_check_LDADD = $(DS_LDADD)
endif

## issue 16: faults while checkpointing (a full disk, kills, damaged files)
if HAVE_BATS
TESTS += tests/cli/ds-train-faults.bats
if HAVE_MPI
TESTS += tests/mpi/ckpt-faults.bats
endif
endif
EXTRA_DIST += tests/cli/ds-train-faults.bats tests/mpi/ckpt-faults.bats
