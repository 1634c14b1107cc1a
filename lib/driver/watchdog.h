/* watchdog.h - the hang watchdog of ds-train (dstk.watchdog_timeout_s).
 *
 * Each rank runs one watchdog thread.  The training loop marks progress
 * with ds_watchdog_beat (step and phase); the communicator's blocking
 * collectives count as progress too (ds_comm_current_op / ds_comm_ops_done),
 * and so does other work (util/progress.h: each micro-batch's forward and
 * backward, each chunk a checkpoint writes or reads), so a long save or a
 * step without communication is not a stall.
 * Every poll the thread writes this rank's heartbeat (host, pid, step,
 * phase, the collective it is in and for how long) to DIR/rank<R>.hb, so
 * the ranks sharing DIR can see each other without MPI.  When a rank makes
 * no progress for timeout_s, its thread builds a report: the first rank to
 * time out (it claims DIR/report) lists every rank's last heartbeat and
 * names the stalled ranks; the others describe only themselves.  The report
 * goes to the caller's on_stall callback, which is expected to print it and
 * end the process with exit status 5 (tools/ds-train.c does): the main
 * thread is blocked, so nothing can be returned to it.  Without a callback
 * the report is only logged.
 */
#ifndef DS_DRIVER_WATCHDOG_H
#define DS_DRIVER_WATCHDOG_H

#include "util/err.h"

struct ds_watchdog;

/* Called from the watchdog thread once, on a stall.  first: this rank
 * wrote the report of all ranks (else a line about itself). */
typedef void (*ds_watchdog_fn)(void *ctx, const char *report, int first);

struct ds_watchdog_opts {
	double timeout_s;     /* > 0 */
	const char *dir;      /* heartbeat directory shared by the ranks (created) */
	int rank, world;
	const char *host;
	ds_watchdog_fn on_stall;
	void *ctx;
};

/* Start the thread.  Returns 0, DS_EIO (the directory cannot be made) or
 * DS_ENOMEM. */
int ds_watchdog_start(struct ds_watchdog **out, const struct ds_watchdog_opts *o, struct ds_err *err);

struct ds_config;
struct ds_comm;

/* ds-train's watchdog from its config: nothing (*out NULL) when
 * dstk.watchdog_timeout_s is 0 (default 1800).  The heartbeat directory is
 * <dstk.watchdog_dir, else $TMPDIR, else /tmp>/ds-watchdog-<host>-<pid> of
 * rank 0, broadcast to every rank (a collective: all ranks call this);
 * rank 0 first removes the directories this host's dead runs left. */
int ds_watchdog_from_config(struct ds_watchdog **out, const struct ds_config *cfg, struct ds_comm *comm,
			    ds_watchdog_fn on_stall, void *ctx, struct ds_err *err);

/* Progress: this rank is at step (1-based, the step being run) in phase (a
 * static string).  wd may be NULL (no watchdog).  For tests, the variable
 * DS_TEST_WATCHDOG_STALL=RANK:STEP makes that rank hang forever when it
 * enters phase "train_step" of that step. */
void ds_watchdog_beat(struct ds_watchdog *wd, long long step, const char *phase);

/* Stop the thread and remove this rank's heartbeat file; NULL is a no-op. */
void ds_watchdog_stop(struct ds_watchdog *wd);

#endif
