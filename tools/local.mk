## tools: one thin main() per executable; the work is in libds.
bin_PROGRAMS += tools/ds-report
tools_ds_report_SOURCES = tools/ds-report.c
tools_ds_report_LDADD = $(DS_LDADD)
dist_man1_MANS += share/man/ds-report.1
