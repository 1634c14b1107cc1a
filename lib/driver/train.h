/* train.h - the ds-train run: the loop that joins the engine, the data,
 * checkpoints and monitors.  A driver (lib/driver): it may use every
 * module below it.  tools/ds-train.c parses the flags, creates the
 * communicator, installs the signal handlers and chooses the streams; the
 * driver reports through the hooks below and returns its errors.
 */
#ifndef DS_DRIVER_TRAIN_H
#define DS_DRIVER_TRAIN_H

#include <signal.h>
#include <stdio.h>

#include "comm/comm.h"
#include "config/train_opts.h"
#include "monitor/out.h"
#include "util/err.h"

/* What the tool gives the run besides the options. */
struct ds_train_hooks {
	/* results (step, eval, memory lines, the flops profile, the comms
	 * table; rank 0 writes) and the progress bar; NULL: nothing shown */
	const struct ds_monitor_out *out;
	/* set by the tool's SIGTERM/SIGUSR1 handler to the signal's number:
	 * every rank agrees at the next step boundary, saves and stops with
	 * DS_ESIGNAL; NULL: never */
	const volatile sig_atomic_t *stop;
	/* CLOCK_MONOTONIC seconds at which *stop was first set (0 unknown),
	 * for dstk.signal_lead_s; may be NULL */
	const volatile sig_atomic_t *stop_at;
	/* dstk.watchdog_timeout_s: called from the watchdog thread on a stall
	 * with the report (driver/watchdog.h); ds-train prints it and exits 5 */
	void (*on_watchdog)(void *ctx, const char *report, int first);
	/* called when the run fails where other ranks may be waiting in a
	 * collective (after the engine exists, with W > 1), before the run
	 * frees anything - freeing may itself wait on them.  ds-train ends the
	 * job there (ds_comm_abort).  NULL: the run cleans up and returns. */
	void (*on_stranded)(void *ctx, struct ds_comm *comm, int rc, const struct ds_err *err);
	void *ctx;
};

/* Figures of a finished run (rank 0's view). */
struct ds_train_result {
	long long steps;          /* optimizer steps taken by this run */
	long long last_step;      /* iteration number of the last step */
	double first_loss, last_loss;
	long long skipped;
	int saved;                /* a checkpoint was written */
	int stranded;             /* failed where other ranks may wait in a collective (on_stranded was called) */
};

/* Train as o says on comm (borrowed; every rank calls).  h may be NULL.
 * Returns 0; DS_ESIGNAL after saving on a stop request (exit 4: requeue);
 * DS_EINVAL for bad configs, data or checkpoints (err names the file and
 * key); other DS_E* for runtime failures. */
int ds_train_run(const struct ds_train_opts *o, struct ds_comm *comm, const struct ds_train_hooks *h,
		 struct ds_train_result *res, struct ds_err *err);

/* --check: ds_train_check's output, then the memory estimate per rank at
 * o->world_size ranks (a table; in JSON the "memory" object).  Returns 0,
 * or what ds_train_check returns for a bad config. */
int ds_train_check_run(const struct ds_train_opts *o, FILE *out, struct ds_err *err);

#endif
