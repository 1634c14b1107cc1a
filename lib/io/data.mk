## lib/io/data.mk: token datasets (text, Megatron .bin/.idx, llm.c shards),
## the window sampler and the train/valid/test split.
noinst_LIBRARIES += lib/io/libds_data.a
lib_io_libds_data_a_SOURCES = \
	lib/io/dataset.c lib/io/dataset.h lib/io/dataset_int.h lib/io/dataset_blend.c \
	lib/io/dataset_text.c lib/io/dataset_megatron.c lib/io/dataset_llmc.c
LIBDS += lib/io/libds_data.a

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_data
TESTS += tests/unit/test_data
tests_unit_test_data_SOURCES = tests/unit/test_data.c tests/unit/unit.h
tests_unit_test_data_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_data_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif

## The bundled default corpus (share/data/README says where it comes from).
dsdatadir = $(pkgdatadir)/data
dsdata_DATA = share/data/devils-dictionary.txt share/data/README
