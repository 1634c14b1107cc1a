/* convert_out.h - output files that appear only when complete.
 *
 * A file is written under a temporary name in the same directory
 * (".NAME.tmp.PID") and renamed over NAME only after fsync, so a failed or
 * interrupted conversion never leaves a partial file and never damages what
 * was already there (issue 8).
 */
#ifndef DS_IO_CONVERT_OUT_H
#define DS_IO_CONVERT_OUT_H

#include <stdio.h>

#include "util/err.h"

struct ds_outfile {
	char *path;     /* final name */
	char *tmp;      /* temporary name */
	FILE *f;
};

/* Open a temporary file for path.  Returns 0 or DS_EIO (names the directory). */
int ds_outfile_open(struct ds_outfile *o, const char *path, struct ds_err *err);
/* Write n bytes; DS_EIO on failure (names the file). */
int ds_outfile_write(struct ds_outfile *o, const void *buf, size_t n, struct ds_err *err);
/* Flush, fsync and rename into place; 0 or DS_EIO. */
int ds_outfile_commit(struct ds_outfile *o, struct ds_err *err);
/* Remove the temporary file if not committed and free; accepts a zeroed struct. */
void ds_outfile_abort(struct ds_outfile *o);

#endif
