## lib/monitor/log.mk: what training shows and records - the stdout step
## line, progress bar and wall-clock breakdown, the csv_monitor and
## tensorboard sinks, the comms_logger tables and the --metrics-json file.
noinst_LIBRARIES += lib/monitor/libds_monitor.a
lib_monitor_libds_monitor_a_SOURCES = \
	lib/monitor/log.c lib/monitor/log.h \
	lib/monitor/out.c lib/monitor/out.h \
	lib/monitor/monitor.c lib/monitor/monitor.h lib/monitor/monitor_int.h \
	lib/monitor/csvmon.c lib/monitor/csvmon.h \
	lib/monitor/tb.c lib/monitor/tb.h \
	lib/monitor/comms.c lib/monitor/comms.h \
	lib/monitor/metrics.c lib/monitor/metrics.h
LIBDS += lib/monitor/libds_monitor.a

if HAVE_CMOCKA
check_PROGRAMS += tests/unit/test_monitor
TESTS += tests/unit/test_monitor
tests_unit_test_monitor_SOURCES = tests/unit/test_monitor.c tests/unit/unit.h
tests_unit_test_monitor_CFLAGS = $(AM_CFLAGS) $(CMOCKA_CFLAGS)
tests_unit_test_monitor_LDADD = $(DS_LDADD) $(CMOCKA_LIBS)
endif

## tests/cli/monitor.bats decodes the event files that monitor_events writes
## with protoc, an encoder independent of ours.
check_PROGRAMS += tests/cli/monitor_events
tests_cli_monitor_events_SOURCES = tests/cli/monitor_events.c
tests_cli_monitor_events_LDADD = $(DS_LDADD)
if HAVE_BATS
TESTS += tests/cli/monitor.bats
endif
EXTRA_DIST += tests/cli/monitor.bats
