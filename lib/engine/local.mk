## lib/engine: the training engine (flat buffers, ZeRO, step) and the
## machine ceilings that MFU and the benchmarks compare against.
noinst_LIBRARIES += lib/engine/libds_engine.a
lib_engine_libds_engine_a_SOURCES = lib/engine/ceiling.c lib/engine/ceiling.h
LIBDS += lib/engine/libds_engine.a
