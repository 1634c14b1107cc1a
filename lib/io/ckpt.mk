## lib/io/ckpt.mk: HDF5 checkpoints (atomic save, chunk CRC-32C, slices,
## latest/auto).  Serial HDF5 calls only, so the file builds against
## hdf5-serial and hdf5-openmpi alike.
noinst_LIBRARIES += lib/io/libds_ckpt.a
lib_io_libds_ckpt_a_SOURCES = lib/io/ckpt.c lib/io/ckpt.h
LIBDS += lib/io/libds_ckpt.a

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_ckpt
TESTS += tests/unit/test_ckpt
tests_unit_test_ckpt_SOURCES = tests/unit/test_ckpt.c tests/unit/unit.h
tests_unit_test_ckpt_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_ckpt_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif
