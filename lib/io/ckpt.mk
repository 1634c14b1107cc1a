## lib/io/ckpt.mk: HDF5 checkpoints (atomic save, chunk CRC-32C, slices,
## latest/auto): ckpt.c (shared), ckpt_write.c, ckpt_read.c, ckpt_verify.c.
## They use serial HDF5 calls and build against hdf5-serial and
## hdf5-openmpi alike; the MPI-IO property lists of the
## parallel writer come from ckpt_mpio.c (MPI builds) or its stub.
noinst_LIBRARIES += lib/io/libds_ckpt.a
lib_io_libds_ckpt_a_SOURCES = lib/io/ckpt.c lib/io/ckpt_write.c lib/io/ckpt_read.c lib/io/ckpt_verify.c \
	lib/io/ckpt.h lib/io/ckpt_int.h
if HAVE_MPI
lib_io_libds_ckpt_a_SOURCES += lib/io/ckpt_mpio.c
else
lib_io_libds_ckpt_a_SOURCES += lib/io/ckpt_mpio_stub.c
endif
EXTRA_DIST += lib/io/ckpt_mpio.c lib/io/ckpt_mpio_stub.c
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
