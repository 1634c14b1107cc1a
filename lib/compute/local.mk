## lib/compute: the compute backend table the model calls for every tensor
## operation (cpu: kernels/cpu; cuda: not yet), --device's selection and the
## device a rank uses.
noinst_LIBRARIES += lib/compute/libds_compute.a
lib_compute_libds_compute_a_SOURCES = lib/compute/compute.c lib/compute/compute.h \
	lib/compute/compute_cpu.c
LIBDS += lib/compute/libds_compute.a


if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_compute
TESTS += tests/unit/test_compute
tests_unit_test_compute_SOURCES = tests/unit/test_compute.c tests/unit/unit.h
tests_unit_test_compute_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_compute_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif
