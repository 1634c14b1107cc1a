## lib/io/convert.mk: ds-ckpt-convert -- safetensors and llm.c model files,
## HF GPT-2 / GPT-NeoX names, and conversions between them and dstk's HDF5
## checkpoints (lib/io/ckpt), streamed tensor by tensor.
noinst_LIBRARIES += lib/io/libds_convert.a
lib_io_libds_convert_a_SOURCES = \
	lib/io/safetensors.c lib/io/safetensors.h \
	lib/io/llmc.c lib/io/llmc.h \
	lib/io/convert.c lib/io/convert.h lib/io/convert_int.h \
	lib/io/convert_st.c lib/io/convert_llmc.c \
	lib/io/convert_hf.c lib/io/convert_hf.h \
	lib/io/convert_out.c lib/io/convert_out.h \
	lib/io/convert_ckpt.c
LIBDS += lib/io/libds_convert.a

bin_PROGRAMS += tools/ds-ckpt-convert
tools_ds_ckpt_convert_SOURCES = tools/ds-ckpt-convert.c
tools_ds_ckpt_convert_LDADD = $(DS_LDADD)
dist_man1_MANS += share/man/ds-ckpt-convert.1
TESTS += tests/cli/ds-ckpt-convert.bats
EXTRA_DIST += tests/cli/ds-ckpt-convert.bats

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_convert
TESTS += tests/unit/test_convert
tests_unit_test_convert_SOURCES = tests/unit/test_convert.c tests/unit/unit.h
tests_unit_test_convert_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_convert_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif


## tests/data/ckpt-small/ckpt-small: makes the committed checkpoints and
## computes dstk's logits for the export checks (see its README).
check_PROGRAMS += tests/data/ckpt-small/ckpt-small
tests_data_ckpt_small_ckpt_small_SOURCES = tests/data/ckpt-small/ckpt-small.c
tests_data_ckpt_small_ckpt_small_LDADD = $(DS_LDADD)
