/* cli.c - --version, usage errors and '_'/'-' long options (see cli.h).
 *
 * The wording is fixed here once so that every tool says the same thing and
 * tests/cli/man.bats can check all of them with one pattern.
 */
#include "config.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "app/blas_core.h"

int ds_cli_version(const char *tool)
{
	printf("%s (dstk) %s\nfeatures: %s\n", tool, PACKAGE_VERSION, DS_FEATURES);
	return 0;
}

int ds_cli_try_help(const char *tool)
{
	fprintf(stderr, "Try '%s --help' for more information.\n", tool);
	return 2;
}

int ds_cli_usage_error(const char *tool, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", tool);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return ds_cli_try_help(tool);
}

int ds_cli_fail(const char *tool, const struct ds_err *err)
{
	fprintf(stderr, "%s: %s\n", tool, err->msg[0] ? err->msg : ds_status_name(err->code));
	return err->code < 0 ? ds_exit_code(err->code) : 1;
}

void ds_cli_blas_core(char **argv)
{
	(void)ds_blas_core_reexec(argv);   /* a failed exec is reported by ds_blas_core_note */
}

void ds_cli_normalize_args(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		char *a = argv[i];

		if (a[0] != '-' || a[1] != '-')
			continue;
		if (a[2] == '\0')
			break; /* "--": what follows are operands */
		for (char *p = a + 2; *p && *p != '='; p++)
			if (*p == '_')
				*p = '-';
	}
}
