/* csvmon.h - DeepSpeed's csv_monitor: one CSV file per tag.
 *
 * Layout as DeepSpeed (spec/deepspeed-tools.md §5): the file of tag
 * "Train/Samples/lr" is <output_path>/<job_name>/Train_Samples_lr.csv ('/'
 * and ' ' become '_'), its header is "step,lr" (the tag's last '/' part),
 * rows are "step,value" with Python's csv line end "\r\n", and the step
 * column is the x-value the caller gives (global samples for DeepSpeed's
 * tags).  Values are written as Python's repr() writes them (the shortest
 * text that reads back as the same double: full precision), the header with
 * libcsv's quoting only where Python's csv would quote (a ',', '"', CR, LF).
 *
 * Better than DeepSpeed: one header per file, also across restarts.  An
 * existing file is appended to after checking (with libcsv) that its first
 * row is the expected header; a last row cut short by a crash (no line end)
 * is dropped.  With resume set, the first event of a tag in this process at
 * x-value x0 also drops the rows with step >= x0 that the resumed run is
 * about to write again, so a run resumed from an older checkpoint leaves no
 * duplicate or stale rows.  Rows are dropped by writing the kept ones to
 * "<file>.tmp" and renaming it over the file, so a crash loses nothing.
 */
#ifndef DS_MONITOR_CSVMON_H
#define DS_MONITOR_CSVMON_H

#include "util/err.h"

struct ds_monitor_csv;

/* Create the directory join(output_path, job_name) and a writer for it.
 * Files are opened at each tag's first event.  Returns 0 or DS_EIO /
 * DS_ENOMEM; *out is freed with ds_monitor_csv_close. */
int ds_monitor_csv_open(struct ds_monitor_csv **out, const char *output_path, const char *job_name, int resume,
			struct ds_err *err);

/* Append the row "x,value" to tag's file (opening, checking and on resume
 * trimming it at its first event).  Returns 0, DS_EINVAL (an existing file
 * whose header is not this tag's, or a row without a step: names file and
 * line) or DS_EIO. */
int ds_monitor_csv_write(struct ds_monitor_csv *c, const char *tag, double value, long long x, struct ds_err *err);

/* Push written rows to the files.  Returns 0 or DS_EIO. */
int ds_monitor_csv_flush(struct ds_monitor_csv *c, struct ds_err *err);

/* The directory the files go to (borrowed). */
const char *ds_monitor_csv_dir(const struct ds_monitor_csv *c);

/* Flush and close every file; accepts NULL. */
void ds_monitor_csv_close(struct ds_monitor_csv *c);

#endif
