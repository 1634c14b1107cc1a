/* monitor_int.h - helpers shared by the CSV and TensorBoard sinks (private
 * to lib/monitor). */
#ifndef DS_MONITOR_MONITOR_INT_H
#define DS_MONITOR_MONITOR_INT_H

#include "util/err.h"

/* os.path.join(output_path, job_name) as DeepSpeed forms the log directory
 * ("" + "J" -> "J", "o" + "J" -> "o/J", "o" + "/abs" -> "/abs").
 * Returns a malloc'd string (caller frees) or NULL when out of memory. */
char *ds_monitor_logdir_dup(const char *output_path, const char *job_name);

/* mkdir -p dir (mode 0777 & umask).  Returns 0 or DS_EIO naming the part
 * that failed. */
int ds_monitor_mkdirs(const char *dir, struct ds_err *err);

#endif
