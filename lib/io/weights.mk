## lib/io/weights.mk: model-weight file formats -- safetensors (validating
## reader, streaming writer), llm.c model files, and output files that
## appear only when complete (temporary name, fsync, rename).
noinst_LIBRARIES += lib/io/libds_weights.a
lib_io_libds_weights_a_SOURCES = \
	lib/io/safetensors.c lib/io/safetensors.h \
	lib/io/llmc.c lib/io/llmc.h \
	lib/io/convert_out.c lib/io/convert_out.h
LIBDS += lib/io/libds_weights.a
