/* report.h - ds-report: what this build and this machine can do.
 *
 * ds_report_run() collects everything into one row model (struct
 * ds_report); ds_report_write() renders it as text (DeepSpeed's ds_report
 * look) or JSON, so both outputs always carry the same content.
 */
#ifndef DS_DRIVER_REPORT_H
#define DS_DRIVER_REPORT_H

#include <stdio.h>
#include "util/err.h"

enum ds_report_section {
	DS_REPORT_FEATURE, /* feature table: installed / compatible / detail */
	DS_REPORT_BUILD,   /* version and configuration of this build */
	DS_REPORT_MACHINE, /* cores, memory, /dev/shm, GPUs */
	DS_REPORT_VERSION  /* versions of the libraries linked */
};

struct ds_report_row {
	int section;          /* enum ds_report_section */
	char name[24];        /* key in text and JSON: "async_io", "shm_size" */
	int installed;        /* features: compiled into this build (1/0) */
	int compatible;       /* features: this machine can use it (1/0) */
	int is_num;           /* 1: JSON writes num (with unit appended to name) */
	long long num;
	const char *unit;     /* "bytes": JSON key becomes name_bytes; or NULL */
	char value[256];      /* the text shown (detail for features) */
	char reason[224];     /* features: why not installed/compatible, "" if fine */
	char fix[224];        /* features: what to do about it */
	char warning[256];    /* a warning on this row, "" when none */
};

#define DS_REPORT_MAX_ROWS 64

struct ds_report {
	int n;
	struct ds_report_row row[DS_REPORT_MAX_ROWS];
};

struct ds_report_opts {
	int json;                  /* render JSON instead of the text report */
	int color;                 /* text: ANSI colours ([YES] green, [NO] yellow) */
	int hide_features;         /* text: leave out the feature table */
	int hide_warnings;         /* text: leave out reasons, fixes and warnings */
	const char *shm_override;  /* test hook: /dev/shm size in bytes (env
				      DS_REPORT_SHM_BYTES), NULL to measure */
};

/* Fill rep (caller-owned, no allocation).  Returns 0, or DS_EINVAL when
 * opts->shm_override is not a byte count. */
int ds_report_run(const struct ds_report_opts *opts, struct ds_report *rep, struct ds_err *err);

/* The row called name in section, or NULL; borrowed from rep. */
const struct ds_report_row *ds_report_find(const struct ds_report *rep, int section, const char *name);

/* Warning text for a /dev/shm of bytes, or NULL when it is large enough
 * (DS_SYSINFO_SHM_MIN); static string. */
const char *ds_report_shm_warning(unsigned long long bytes);

/* Render rep to f as text or JSON (opts->json).  Returns 0, DS_ENOMEM, or
 * DS_EIO when writing fails. */
int ds_report_write(FILE *f, const struct ds_report *rep, const struct ds_report_opts *opts,
		    struct ds_err *err);

#endif
