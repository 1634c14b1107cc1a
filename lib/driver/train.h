/* train.h - the ds-train run: the loop that joins the engine, the data,
 * checkpoints, monitors and signals.  This is the top layer of libds: it
 * may use every module below it; tools/ds-train.c only parses flags.
 */
#ifndef DS_DRIVER_TRAIN_H
#define DS_DRIVER_TRAIN_H

#include <stdio.h>

#include "config/train_opts.h"
#include "util/err.h"

/* Figures of a finished run (rank 0's view). */
struct ds_train_result {
	long long steps;          /* optimizer steps taken by this run */
	long long last_step;      /* iteration number of the last step */
	double first_loss, last_loss;
	long long skipped;
	int saved;                /* a checkpoint was written */
};

/* Train as o says.  Returns 0; DS_ESIGNAL after saving on SIGTERM/SIGUSR1
 * (exit 4: requeue); DS_EINVAL for bad configs, data or checkpoints (err
 * names the file and key); other DS_E* for runtime failures. */
int ds_train_run(const struct ds_train_opts *o, struct ds_train_result *res, struct ds_err *err);

/* --check: ds_train_check's output, then the memory estimate per rank at
 * o->world_size ranks (a table; in JSON the "memory" object).  Returns 0,
 * or what ds_train_check returns for a bad config. */
int ds_train_check_run(const struct ds_train_opts *o, FILE *out, struct ds_err *err);

#endif
