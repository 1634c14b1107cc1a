/* commlog.c - DeepSpeed's comms_logger for ds-train: the communicator
 * reports every finished collective (comm.h, ds_comm_set_logger); the ones
 * comms_logger selects (prof_all, or prof_ops) are counted in the table of
 * lib/monitor/comms.h, printed as they happen with verbose (rank 0, as
 * DeepSpeed's log_dist(..., ranks=[0])), and summarised by rank 0 at the end
 * of the run - the log_summary() call a DeepSpeed training script makes
 * after training.  Each rank records its own calls; the table shows rank
 * 0's, as DeepSpeed's does. */
#include "driver/train_int.h"

#include <stdio.h>
#include <stdlib.h>

#include "monitor/out.h"
#include "util/log.h"

struct ds_train_commlog {
	struct ds_monitor_comms_opts o;
	struct ds_monitor_comms *tab;
	int rank;
	struct ds_err err;  /* the first failure; reported with the summary */
};

static void on_record(void *ctx, const struct ds_comm_record *r)
{
	struct ds_train_commlog *l = ctx;
	if (l->err.code < 0 || !ds_monitor_comms_wants(&l->o, r->op, 0))
		return;
	char name[160], line[320];
	const char *rec = r->op;
	if (l->o.debug) {
		snprintf(name, sizeof name, "%s | [Caller Func: %s]", r->op, r->caller ? r->caller : "?");
		rec = name;
	}
	/* a no-op collective (world of one) can finish within the clock's
	 * resolution: count it as 1 ns rather than divide by zero */
	double ms = r->seconds > 0 ? r->seconds * 1e3 : 1e-6;
	double alg, bus;
	if (ds_monitor_comms_add(l->tab, r->op, rec, r->bytes, ms, &alg, &bus, &l->err) < 0)
		return;
	if (l->o.verbose && l->rank == 0) {
		ds_monitor_comms_line(line, sizeof line, rec, ms, r->bytes, alg, bus);
		ds_log_info("%s", line);
	}
}

int ds_train_commlog_start(struct ds_train_commlog **out, const struct ds_train_setup *s, struct ds_comm *comm,
			   struct ds_err *err)
{
	*out = NULL;
	if (!s->comms.enabled)
		return 0;
	struct ds_train_commlog *l = calloc(1, sizeof *l);
	if (!l)
		return ds_err_set(err, DS_ENOMEM, "out of memory for the comms logger");
	l->o = s->comms;
	l->rank = ds_comm_rank(comm);
	ds_err_clear(&l->err);
	int rc = ds_monitor_comms_create(&l->tab, ds_comm_size(comm), err);
	if (rc < 0) {
		free(l);
		return rc;
	}
	ds_comm_set_logger(comm, on_record, l);
	*out = l;
	return 0;
}

int ds_train_commlog_summary(struct ds_train_commlog *l, const struct ds_monitor_out *out, struct ds_err *err)
{
	if (!l)
		return 0;
	if (l->err.code < 0)
		return ds_err_set(err, l->err.code, "comms_logger: %s", l->err.msg);
	/* the table closes the log: what the run does after it (the memory
	 * report) is neither counted nor printed per call */
	l->o.enabled = 0;
	if (l->rank != 0)
		return 0;
	char *text;
	DS_TRY(ds_monitor_comms_summary(l->tab, &text, err));
	ds_monitor_out_text(out, text);
	free(text);
	return 0;
}

void ds_train_commlog_stop(struct ds_train_commlog *l, struct ds_comm *comm)
{
	if (!l)
		return;
	if (comm)
		ds_comm_set_logger(comm, NULL, NULL);
	ds_monitor_comms_destroy(l->tab);
	free(l);
}
