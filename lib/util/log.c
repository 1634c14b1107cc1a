/* log.c - rank-aware logging to stderr or the tool's stream (see log.h). */
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>

static int log_rank = 0;
static int log_lvl = DS_LOG_INFO;
static int log_all = 0;
static FILE *log_stream;  /* NULL: stderr */

void ds_log_init(int rank, int level, int all_ranks)
{
	log_rank = rank;
	log_lvl = level;
	log_all = all_ranks;
}

int ds_log_level(void) { return log_lvl; }
void ds_log_set_stream(FILE *f) { log_stream = f; }
FILE *ds_log_stream(void) { return log_stream ? log_stream : stderr; }
int ds_log_rank(void) { return log_rank; }

void ds_log(int level, const char *fmt, ...)
{
	static const char *tag[] = { "error: ", "warning: ", "", "debug: " };
	char line[2048];
	va_list ap;
	if (level > log_lvl)
		return;
	/* errors from any rank are shown; other levels only on rank 0 */
	if (log_rank != 0 && !log_all && level != DS_LOG_ERROR)
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (log_rank != 0 || log_all)
		fprintf(ds_log_stream(), "[rank %d] %s%s\n", log_rank, tag[level], line);
	else
		fprintf(ds_log_stream(), "%s%s\n", tag[level], line);
}
