## lib/config: the DeepSpeed config table and engine, the model config,
## ds-train's options and its --check.
noinst_LIBRARIES += lib/config/libds_config.a
lib_config_libds_config_a_SOURCES = \
	lib/config/config.c lib/config/config.h lib/config/config_int.h \
	lib/config/rules.c lib/config/table.c lib/config/table.h \
	lib/config/keys.h lib/config/keys_ds.c lib/config/values.h \
	lib/config/model.c lib/config/model.h lib/config/model_moe.c \
	lib/config/train_opts.c lib/config/train_opts.h \
	lib/config/neox.c lib/config/neox.h lib/config/yaml.h
if HAVE_LIBYAML
lib_config_libds_config_a_SOURCES += lib/config/yaml.c
else
lib_config_libds_config_a_SOURCES += lib/config/yaml_stub.c
endif
EXTRA_DIST += lib/config/yaml.c lib/config/yaml_stub.c
LIBDS += lib/config/libds_config.a
EXTRA_DIST += contrib/config/gen_keys.py

## the example DeepSpeed configs and the bundled models ds-train defaults to
dsconfig_configsdir = $(pkgdatadir)/configs
dist_dsconfig_configs_DATA = \
	share/configs/activation-checkpointing.json \
	share/configs/adam-l2.json \
	share/configs/adam.json \
	share/configs/adamw.json \
	share/configs/autotuning.json \
	share/configs/basic-fp16-zero2.json \
	share/configs/batch.json \
	share/configs/bf16.json \
	share/configs/comms-logger.json \
	share/configs/default.json \
	share/configs/flops-profiler.json \
	share/configs/fp16.json \
	share/configs/hf-bf16-zero2-offload.json \
	share/configs/lamb.json \
	share/configs/large-bf16-zero3-offload.json \
	share/configs/lr-range-test.json \
	share/configs/monitor.json \
	share/configs/one-cycle.json \
	share/configs/sgd.json \
	share/configs/structure.json \
	share/configs/warmup-cosine-lr.json \
	share/configs/warmup-decay-lr.json \
	share/configs/warmup-lr.json \
	share/configs/zero1.json \
	share/configs/zero2-offload.json \
	share/configs/zero2.json \
	share/configs/zero3-nvme.json \
	share/configs/zero3-offload.json
dsconfig_modelsdir = $(pkgdatadir)/models
dist_dsconfig_models_DATA = share/models/gpt-test.json share/models/gpt-tiny.json \
	share/models/gpt-test-moe-top2.json share/models/gpt-test-prmoe.json

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_config
TESTS += tests/unit/test_config
tests_unit_test_config_SOURCES = tests/unit/test_config.c tests/unit/unit.h
tests_unit_test_config_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_config_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif
