/* err.h - status codes and error messages for libds.
 *
 * libds never prints, exits or aborts: every fallible function returns 0 or a
 * negative DS_E* code and fills the caller's struct ds_err with one line that
 * names the file, key or offset and says what to do.  Tools map the code to
 * the exit status of DESIGN.md with ds_exit_code().
 */
#ifndef DS_UTIL_ERR_H
#define DS_UTIL_ERR_H

#include <stdarg.h>

enum ds_status {
	DS_OK = 0,
	DS_EINVAL = -1,   /* usage, configuration or input error      -> exit 2 */
	DS_ECORRUPT = -2, /* corrupt or truncated file, bad checksum  -> exit 2 */
	DS_EIO = -3,      /* runtime failure (I/O, system call)       -> exit 1 */
	DS_ENOMEM = -4,   /* allocation failed                        -> exit 1 */
	DS_ENOTSUP = -5,  /* feature not built in                     -> exit 3 */
	DS_ECHECK = -6,   /* a check found a problem (verify)         -> exit 1 */
	DS_ESIGNAL = -7,  /* stopped on a signal after saving         -> exit 4 */
	DS_ETIMEOUT = -8, /* watchdog: a rank or collective stalled   -> exit 5 */
	DS_EINTERNAL = -9 /* a bug in dstk                            -> exit 1 */
};

#define DS_ERR_MSG_MAX 512

struct ds_err {
	int code;                  /* 0 or a DS_E* value */
	char msg[DS_ERR_MSG_MAX];  /* one line, no trailing newline */
};

#define DS_ERR_INIT { 0, "" }

/* Record code and a printf-style message in err (err may be NULL).
 * Returns code, so `return ds_err_set(err, DS_EIO, "open %s", p);` works. */
int ds_err_set(struct ds_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int ds_err_vset(struct ds_err *err, int code, const char *fmt, va_list ap);

/* Prepend context ("file.json: ") to an existing message; returns err->code. */
int ds_err_prefix(struct ds_err *err, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Clear err back to DS_ERR_INIT. */
void ds_err_clear(struct ds_err *err);

/* Exit status of DESIGN.md's table for a status code (0 for DS_OK). */
int ds_exit_code(int code);

/* Short static name of a status code ("input error", ...). */
const char *ds_status_name(int code);

/* Propagate: evaluate expr, return its status if negative. */
#define DS_TRY(expr) do { int ds_try_rc_ = (expr); if (ds_try_rc_ < 0) return ds_try_rc_; } while (0)

#endif
