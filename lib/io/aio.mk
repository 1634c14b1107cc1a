## lib/io/aio.mk: the async-I/O engine (aio handle; backends aio, posix,
## null) and its unit test.  The libaio backend is compiled only with
## HAVE_LIBAIO; the registry in aio.c lists it under #ifdef (STYLE rule 13).
noinst_LIBRARIES += lib/io/libds_aio.a
lib_io_libds_aio_a_SOURCES = \
	lib/io/aio.c lib/io/aio.h lib/io/aio_int.h \
	lib/io/aio_posix.c lib/io/aio_null.c lib/io/swap.c lib/io/swap.h
if HAVE_LIBAIO
lib_io_libds_aio_a_SOURCES += lib/io/aio_libaio.c
endif
LIBDS += lib/io/libds_aio.a
EXTRA_DIST += lib/io/aio_libaio.c

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_aio
TESTS += tests/unit/test_aio
tests_unit_test_aio_SOURCES = tests/unit/test_aio.c tests/unit/unit.h
tests_unit_test_aio_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_aio_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_swap
TESTS += tests/unit/test_swap
tests_unit_test_swap_SOURCES = tests/unit/test_swap.c tests/unit/unit.h
tests_unit_test_swap_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_swap_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif
