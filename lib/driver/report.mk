## lib/driver/report.mk: ds-report's driver (features, build, machine and
## library versions as one row model), the tool and its tests.
lib_driver_libds_driver_a_SOURCES += lib/driver/report.c lib/driver/report.h

bin_PROGRAMS += tools/ds-report
tools_ds_report_SOURCES = tools/ds-report.c tools/cli.c tools/cli.h
## $(CUBLAS_LIBS): the GPU probe's cuBLAS rows (lib/app/gpu_cuda.c); nothing
## else links cuBLAS (kernels/cuda/gemm_cuda.cu loads it when it needs it)
tools_ds_report_LDADD = $(DS_LDADD) $(CUBLAS_LIBS)
dist_man1_MANS += share/man/ds-report.1

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_report
TESTS += tests/unit/test_report
## test_report also checks tools/cli.c's option spelling (compiled in, as
## each tool does)
tests_unit_test_report_SOURCES = tests/unit/test_report.c tests/unit/unit.h tools/cli.c tools/cli.h
tests_unit_test_report_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
tests_unit_test_report_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_report_LDADD = $(DS_LDADD) $(CUBLAS_LIBS) $(CMOCKA_LIBS)
endif

if HAVE_BATS
TESTS += tests/cli/ds-report.bats tests/cli/blas-core.bats
endif
EXTRA_DIST += tests/cli/ds-report.bats tests/cli/blas-core.bats
