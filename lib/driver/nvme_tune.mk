## lib/driver/nvme_tune.mk: ds-nvme-tune's driver (trials on lib/io's aio
## engine, searched by lib/tune), the tool and its tests.
lib_driver_libds_driver_a_SOURCES += lib/driver/nvme_tune.c lib/driver/nvme_tune.h

bin_PROGRAMS += tools/ds-nvme-tune
tools_ds_nvme_tune_SOURCES = tools/ds-nvme-tune.c tools/cli.c tools/cli.h
tools_ds_nvme_tune_LDADD = $(DS_LDADD)
dist_man1_MANS += share/man/ds-nvme-tune.1

if HAVE_BATS
TESTS += tests/cli/ds-nvme-tune.bats
endif
EXTRA_DIST += tests/cli/ds-nvme-tune.bats
