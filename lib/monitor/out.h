/* out.h - where a run's text goes: the streams the tool chose.
 *
 * libds never writes to stdout or stderr on its own (STYLE rule 4).  A tool
 * that wants a driver's lines shown fills a struct ds_monitor_out with its
 * streams (ds-train: results to stdout, the progress bar to stderr when
 * that is a terminal) and the driver writes through it:
 *
 *	struct ds_monitor_out out = { stdout, isatty(2) ? stderr : NULL };
 *
 * results: what a user reads or a script parses - the step, eval and memory
 * lines, the flops profile, the comms table - one flush per call, so lines
 * keep their order with the log on the other stream.  progress: a bar that
 * redraws one terminal line ("\r...", monitor/log.h); lines on results
 * first erase it.  Either may be NULL: that output is dropped.
 */
#ifndef DS_MONITOR_OUT_H
#define DS_MONITOR_OUT_H

#include <stdio.h>

struct ds_monitor_out {
	FILE *results;   /* borrowed; NULL: results are dropped */
	FILE *progress;  /* borrowed; NULL: no progress bar */
};

/* printf-style: one line (a '\n' is added) to o->results, flushed.  o may
 * be NULL. */
void ds_monitor_out_line(const struct ds_monitor_out *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Text as it is (a table of several lines) to o->results, flushed. */
void ds_monitor_out_text(const struct ds_monitor_out *o, const char *text);

/* The progress bar: draw `bar` (monitor/log.h's ds_monitor_progress text),
 * erase it before a results line ("\r\033[K"), or end it with a newline
 * when the work is done.  No-ops without a progress stream. */
void ds_monitor_out_progress(const struct ds_monitor_out *o, const char *bar);
void ds_monitor_out_progress_erase(const struct ds_monitor_out *o);
void ds_monitor_out_progress_end(const struct ds_monitor_out *o);

#endif
