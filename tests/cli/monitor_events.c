/* monitor_events.c - test helper for tests/cli/monitor.bats: writes monitor
 * files with known contents for protoc and the shell to check.
 *   monitor_events tb DIR     an event file in DIR with fixed wall times;
 *                             prints its path
 *   monitor_events both DIR   ds_monitor with csv_monitor and tensorboard at
 *                             output_path DIR, job "J"; prints the event file
 *   monitor_events resume DIR tensorboard only, resumed at 128 samples, one
 *                             step of ds_monitor_log_step (tbs 64, fp16)
 */
#include <stdio.h>
#include <string.h>

#include "monitor/monitor.h"
#include "monitor/tb.h"
#include "util/err.h"

static int tb(const char *dir, struct ds_err *err)
{
	struct ds_monitor_tb *t;
	DS_TRY(ds_monitor_tb_open(&t, dir, 1700000000.5, err));
	int rc = ds_monitor_tb_scalar(t, "Train/Samples/train_loss", 2.5, 64, 1700000001.25, err);
	if (!rc)
		rc = ds_monitor_tb_scalar(t, "Train/Samples/lr", 0.25, 128, 1700000002.0, err);
	if (!rc)
		rc = ds_monitor_tb_scalar(t, "Train/Samples/loss_scale", 65536, 300, 1700000003.0, err);
	if (!rc)
		rc = ds_monitor_tb_scalar(t, "a tag, with \"quotes\"", -1.5, -5, 1700000004.0, err);
	if (!rc)
		rc = ds_monitor_tb_flush(t, err);
	if (!rc)
		printf("%s\n", ds_monitor_tb_path(t));
	ds_monitor_tb_close(t);
	return rc;
}

static int both(const char *dir, struct ds_err *err)
{
	struct ds_monitor_opts o = { { 1, dir, "J" }, { 1, dir, "J" }, 0, 0 };
	struct ds_monitor *m;
	DS_TRY(ds_monitor_create(&m, &o, err));
	int rc = ds_monitor_write(m, "Train/Samples/train_loss", 2.345678, 0, err);
	if (!rc)
		rc = ds_monitor_write(m, "Train/Samples/lr", 0.001, 64, err);
	if (!rc)
		rc = ds_monitor_flush(m, err);
	if (!rc)
		printf("%s\n", ds_monitor_tb_file(m));
	ds_monitor_destroy(m);
	return rc;
}

static int resume(const char *dir, struct ds_err *err)
{
	struct ds_monitor_opts o = { { 0, NULL, NULL }, { 1, dir, "J" }, 1, 128 };
	struct ds_monitor *m;
	DS_TRY(ds_monitor_create(&m, &o, err));
	struct ds_monitor_step_events e = { 2, 64, 3.5, 0.001, 1, 32768, NULL, 0, 0 };
	int rc = ds_monitor_log_step(m, &e, err);
	if (!rc)
		printf("%s\n", ds_monitor_tb_file(m));
	ds_monitor_destroy(m);
	return rc;
}

int main(int argc, char **argv)
{
	struct ds_err err = DS_ERR_INIT;
	if (argc != 3 || (strcmp(argv[1], "tb") && strcmp(argv[1], "both") && strcmp(argv[1], "resume"))) {
		fprintf(stderr, "usage: monitor_events tb|both|resume DIR\n");
		return 2;
	}
	int rc = !strcmp(argv[1], "tb") ? tb(argv[2], &err) : !strcmp(argv[1], "both") ? both(argv[2], &err)
											 : resume(argv[2], &err);
	if (rc) {
		fprintf(stderr, "monitor_events: %s\n", err.msg);
		return ds_exit_code(rc);
	}
	return 0;
}
