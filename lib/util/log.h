/* log.h - rank-aware logging to stderr (or the stream the tool sets).
 *
 * Logs and progress go to stderr, results to stdout (STYLE rule 18).  Only
 * rank 0 logs unless ds_log_init() was told all_ranks; each line of a
 * non-zero rank, or of every rank when all_ranks is set, starts "[rank N]".
 * This is libds's one logger; the tool may point it at another stream.
 * Results go through the streams the tool gives a driver (monitor/out.h).
 */
#ifndef DS_UTIL_LOG_H
#define DS_UTIL_LOG_H

#include <stdio.h>

enum ds_log_level { DS_LOG_ERROR = 0, DS_LOG_WARN = 1, DS_LOG_INFO = 2, DS_LOG_DEBUG = 3 };

/* Set this process's rank, the level shown and whether every rank logs. */
void ds_log_init(int rank, int level, int all_ranks);
int ds_log_level(void);
/* Send log lines to f (borrowed; NULL: stderr, the default). */
void ds_log_set_stream(FILE *f);
/* The stream log lines go to (stderr unless set), for a driver that shows
 * a longer diagnostic text (dump_state's config) with the log. */
FILE *ds_log_stream(void);
int ds_log_rank(void);
void ds_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define ds_log_error(...) ds_log(DS_LOG_ERROR, __VA_ARGS__)
#define ds_log_warn(...) ds_log(DS_LOG_WARN, __VA_ARGS__)
#define ds_log_info(...) ds_log(DS_LOG_INFO, __VA_ARGS__)
#define ds_log_debug(...) ds_log(DS_LOG_DEBUG, __VA_ARGS__)

#endif
