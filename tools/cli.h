/* cli.h - the command-line conventions every dstk tool shares.
 *
 * Compiled into each tool, not into libds (which never prints): these
 * helpers write to stdout/stderr, because they are exactly what a main()
 * would otherwise repeat.  A tool uses them like this:
 *
 *	ds_cli_blas_core(argv);                   // OpenBLAS's kernels (first)
 *	ds_cli_normalize_args(argc, argv);        // --foo_bar -> --foo-bar
 *	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1)
 *		switch (c) {
 *		case 'h': usage(stdout); return 0;
 *		case OPT_VERSION: return ds_cli_version("ds-x");
 *		default: return ds_cli_try_help("ds-x");   // getopt said why
 *		}
 *	if (optind < argc) return ds_cli_usage_error("ds-x", "unexpected argument '%s'", argv[optind]);
 *	rc = ds_x_run(&opts, &res, &err);
 *	if (rc < 0) return ds_cli_fail("ds-x", &err);
 *
 * longopts then lists only the dash spelling of each long option.
 */
#ifndef DS_TOOLS_CLI_H
#define DS_TOOLS_CLI_H

#include "util/err.h"

/* First in every main(): when the loaded OpenBLAS fell back to its SSE3
 * Prescott kernels on a CPU it does not know, run this program again with
 * OPENBLAS_CORETYPE naming the kernel set cpuid allows (app/blas_core.h);
 * a user's OPENBLAS_CORETYPE is kept.  Returns when nothing was needed or
 * the exec failed (the run then says so in its log and ds-report). */
void ds_cli_blas_core(char **argv);

/* Print "TOOL (dstk) VERSION" and "features: ..." to stdout; returns 0. */
int ds_cli_version(const char *tool);

/* Print "TOOL: MESSAGE" and "Try 'TOOL --help' for more information." to
 * stderr; returns 2, the usage exit status. */
int ds_cli_usage_error(const char *tool, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Only the "Try 'TOOL --help' ..." line on stderr (after getopt_long has
 * printed its own one-line complaint); returns 2. */
int ds_cli_try_help(const char *tool);

/* Print "TOOL: " err->msg to stderr; returns ds_exit_code(err->code)
 * (2 input, 3 not built in, ...), or 1 when err carries no code. */
int ds_cli_fail(const char *tool, const struct ds_err *err);

/* Rewrite in place every "--long_name[=value]" before a bare "--" into
 * "--long-name[=value]" (the value is left alone), so both DeepSpeed's and
 * Megatron's spellings reach getopt_long as the dash form.  A separate
 * option value that itself starts with "--" would be rewritten too: give
 * such a value as --opt=VALUE. */
void ds_cli_normalize_args(int argc, char **argv);

#endif
