## lib/driver/autotune.mk: ds-autotune's driver (the space from the config,
## trials as real ds-train runs, results_dir), the tool and its tests.
lib_driver_libds_driver_a_SOURCES += lib/driver/autotune_run.c lib/driver/autotune.h

bin_PROGRAMS += tools/ds-autotune
tools_ds_autotune_SOURCES = tools/ds-autotune.c tools/cli.c tools/cli.h
tools_ds_autotune_LDADD = $(DS_LDADD)
dist_man1_MANS += share/man/ds-autotune.1

if HAVE_BATS
TESTS += tests/cli/ds-autotune.bats
endif
EXTRA_DIST += tests/cli/ds-autotune.bats
