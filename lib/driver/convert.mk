## lib/driver/convert.mk: ds-ckpt-convert -- HF GPT-2 / GPT-NeoX names and
## conversions between safetensors, llm.c model files (lib/io) and dstk's
## HDF5 checkpoints (lib/io/ckpt), streamed tensor by tensor against the
## model's registry.
lib_driver_libds_driver_a_SOURCES += \
	lib/driver/convert.c lib/driver/convert.h lib/driver/convert_int.h \
	lib/driver/convert_st.c lib/driver/convert_mixtral.c lib/driver/convert_llmc.c \
	lib/driver/convert_hf.c lib/driver/convert_hf.h \
	lib/driver/convert_ckpt.c

bin_PROGRAMS += tools/ds-ckpt-convert
tools_ds_ckpt_convert_SOURCES = tools/ds-ckpt-convert.c tools/cli.c tools/cli.h
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
