/* comms.h - DeepSpeed's comms_logger: per-op bandwidth formulas, the
 * verbose per-call line and the log_summary table (spec/deepspeed-tools.md
 * §5).  The comm module feeds records (op, message size, latency); this
 * module only computes and formats - the caller prints.
 *
 * Bandwidths are in Gbps = bytes/ms * 8 / 1e6, with S the message bytes, t
 * the latency in ms and n the world size:
 *   all_reduce (and _coalesced):  algbw 2S/t,  busbw S/t * 2(n-1)/n
 *   all_gather(_into_tensor), reduce_scatter(_tensor): S <- S*n first,
 *                                 algbw S/t,   busbw algbw * (n-1)/n
 *   all_to_all_single:            algbw S/t,   busbw algbw * (n-1)/n
 *   broadcast, reduce, gather, scatter, barrier, send, recv, isend, irecv:
 *                                 algbw = busbw = S/t
 */
#ifndef DS_MONITOR_COMMS_H
#define DS_MONITOR_COMMS_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

/* algbw and busbw (Gbps) of one call of op.  Returns 0, or DS_EINVAL for an
 * op name DeepSpeed does not know. */
int ds_monitor_comms_bw(const char *op, double bytes, double ms, int world, double *algbw, double *busbw);

/* DeepSpeed's convert_size: 1024 steps, "%s %s" % (round(x, 2), unit):
 * 4096 -> "4.0 KB", 1536 -> "1.5 KB", 0 -> "0B".  Returns buf. */
char *ds_monitor_comms_size(uint64_t bytes, char *buf, size_t n);

/* DeepSpeed's trim_mean: sort v (in place), drop k = round-half-even(n *
 * frac) values from each end, mean of the rest; 0 for n == 0. */
double ds_monitor_trim_mean(double *v, size_t n, double frac);

/* The verbose line of one call:
 * "comm op: all_reduce | time (ms): 1.00 | msg size: 1.0 MB | algbw (Gbps): 16.78 | busbw (Gbps): 14.68" */
int ds_monitor_comms_line(char *buf, size_t n, const char *record_name, double ms, uint64_t bytes, double algbw,
			  double busbw);

/* The comms_logger section (defaults: enabled 0, verbose 0, prof_all 1,
 * debug 0, prof_ops none).  prof_ops is a NULL-terminated list or NULL. */
struct ds_monitor_comms_opts {
	int enabled, verbose, prof_all, debug;
	const char *const *prof_ops;
};

/* DeepSpeed's timed_op test: 1 when a call with this log_name (the op name
 * unless the caller named it) is recorded - enabled and (prof, the call's
 * own flag, or prof_all, or log_name in prof_ops).  With debug, DeepSpeed
 * records it as "<log_name> | [Caller Func: <function>]". */
int ds_monitor_comms_wants(const struct ds_monitor_comms_opts *o, const char *log_name, int prof);

struct ds_monitor_comms;

/* An empty record table for a world of `world` ranks.  Returns 0 or
 * DS_ENOMEM; free with ds_monitor_comms_destroy. */
int ds_monitor_comms_create(struct ds_monitor_comms **out, int world, struct ds_err *err);
void ds_monitor_comms_destroy(struct ds_monitor_comms *c);  /* accepts NULL */

/* Record one call: op is the raw op (for the formula), record_name the row
 * group it is counted under (DeepSpeed: the op, or the caller's log_name).
 * algbw/busbw (may be NULL) receive this call's bandwidths for the verbose
 * line.  Returns 0, DS_EINVAL (unknown op) or DS_ENOMEM. */
int ds_monitor_comms_add(struct ds_monitor_comms *c, const char *op, const char *record_name, uint64_t bytes,
			 double ms, double *algbw, double *busbw, struct ds_err *err);

/* log_summary as DeepSpeed prints it: a header of 7 columns, each
 * left-justified to 20 characters; then per record name (in first-seen
 * order) the name on its own line and one row per message size, ascending:
 * 20 spaces, size, count, total latency, and the 10%-trimmed means of
 * latency, algbw and busbw (%.2f).  Lines end with '\n'.  *out is
 * malloc'd (caller frees).  Returns 0 or DS_ENOMEM. */
int ds_monitor_comms_summary(const struct ds_monitor_comms *c, char **out, struct ds_err *err);

#endif
