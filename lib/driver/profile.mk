## lib/driver/profile.mk: the flops-profiler report (text/JSON/CSV from the
## count tree of lib/model/count), ds-profile's driver (with --measure on
## the model) and the ds-profile tool.
lib_driver_libds_driver_a_SOURCES += \
	lib/driver/profile.c lib/driver/profile.h \
	lib/driver/profile_run.c lib/driver/profile_run.h \
	lib/driver/profile_measure.c

bin_PROGRAMS += tools/ds-profile
tools_ds_profile_SOURCES = tools/ds-profile.c tools/cli.c tools/cli.h
tools_ds_profile_LDADD = $(DS_LDADD)
dist_man1_MANS += share/man/ds-profile.1

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_profile
TESTS += tests/unit/test_profile
tests_unit_test_profile_SOURCES = tests/unit/test_profile.c tests/unit/unit.h
tests_unit_test_profile_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_profile_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif

## ds-profile over the host emulation of CUDA (as tests/unit/ds-train-emu,
## lib/driver/train.mk): --measure --device cuda checked without a GPU by
## tests/cli/ds-profile-cuda.bats.  Never installed.
if HAVE_CUDA
check_PROGRAMS += tests/unit/ds-profile-emu
tests_unit_ds_profile_emu_SOURCES = tools/ds-profile.c tools/cli.c tools/cli.h tests/unit/gpu_count_emu.c
tests_unit_ds_profile_emu_LDADD = $(DS_EMU_OBJ) $(DS_LDADD) -lstdc++
EXTRA_tests_unit_ds_profile_emu_DEPENDENCIES = $(DS_EMU_OBJ)
endif

if HAVE_BATS
TESTS += tests/cli/ds-profile.bats tests/cli/ds-profile-cuda.bats
endif
EXTRA_DIST += tests/cli/ds-profile.bats tests/cli/ds-profile-cuda.bats tests/gpu/profile.bats
