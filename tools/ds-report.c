/* ds-report - what this build of dstk and this machine can do.
 *
 * DeepSpeed's ds_report for dstk: build configuration, a feature table
 * (installed / compatible, with the reason and fix for what is missing),
 * machine facts and library versions.  The work is in lib/driver/report.c.
 */
#include "config.h"
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "driver/report.h"

#define TOOL "ds-report"

enum { OPT_VERSION = 256, OPT_HIDE_OPS, OPT_HIDE_WARN, OPT_COLOR };

static const struct option longopts[] = {
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, OPT_VERSION },
	{ "json", no_argument, NULL, 'j' },
	{ "hide-operator-status", no_argument, NULL, OPT_HIDE_OPS },
	{ "hide-errors-and-warnings", no_argument, NULL, OPT_HIDE_WARN },
	{ "color", required_argument, NULL, OPT_COLOR },
	{ NULL, 0, NULL, 0 }
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: " TOOL " [OPTIONS]\n"
		"Report what this build of dstk and this machine can do: build configuration,\n"
		"features (installed / compatible, with the fix for each missing one),\n"
		"machine facts and library versions.\n"
		"\n"
		"  -j, --json                      print the same report as JSON\n"
		"      --hide-operator-status      leave out the feature table\n"
		"      --hide-errors-and-warnings  leave out reasons, fixes and warnings\n"
		"      --color=WHEN                colour the table: auto, always, never\n"
		"                                  (default: auto = stdout is a terminal and\n"
		"                                  NO_COLOR is unset)\n"
		"  -h, --help                      show this help and exit\n"
		"      --version                   show version and compiled features\n"
		"\n"
		"Long options accept '_' for '-' (DeepSpeed's --hide_operator_status).\n"
		"Exit status: 0 ok, 1 output failed, 2 usage error.\n"
		"\n"
		"Examples:\n"
		"  " TOOL "\n"
		"  " TOOL " --json | jq '.features.async_io'\n");
}

/* --color=WHEN: 1/0, or -1 for a bad value. */
static int parse_color(const char *when)
{
	if (strcmp(when, "always") == 0)
		return 1;
	if (strcmp(when, "never") == 0)
		return 0;
	if (strcmp(when, "auto") == 0)
		return isatty(STDOUT_FILENO) && getenv("NO_COLOR") == NULL;
	return -1;
}

int main(int argc, char **argv)
{
	struct ds_report_opts o = { 0 };
	static struct ds_report rep;
	struct ds_err err = DS_ERR_INIT;
	int c;

	ds_cli_blas_core(argv);   /* first: may run this program again (cli.h) */
	o.color = parse_color("auto");
	o.shm_override = getenv("DS_REPORT_SHM_BYTES");
	ds_cli_normalize_args(argc, argv);
	while ((c = getopt_long(argc, argv, "hj", longopts, NULL)) != -1) {
		switch (c) {
		case 'h':
			usage(stdout);
			return 0;
		case OPT_VERSION:
			return ds_cli_version(TOOL);
		case 'j':
			o.json = 1;
			break;
		case OPT_HIDE_OPS:
			o.hide_features = 1;
			break;
		case OPT_HIDE_WARN:
			o.hide_warnings = 1;
			break;
		case OPT_COLOR:
			if ((o.color = parse_color(optarg)) < 0)
				return ds_cli_usage_error(TOOL, "--color: '%s' is not auto, always or never", optarg);
			break;
		default:
			return ds_cli_try_help(TOOL);
		}
	}
	if (optind < argc)
		return ds_cli_usage_error(TOOL, "unexpected argument '%s'", argv[optind]);
	if (ds_report_run(&o, &rep, &err) < 0 || ds_report_write(stdout, &rep, &o, &err) < 0)
		return ds_cli_fail(TOOL, &err);
	return 0;
}
