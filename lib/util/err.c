/* err.c - status codes and error messages (see err.h). */
#include "util/err.h"

#include <stdio.h>
#include <string.h>

int ds_err_vset(struct ds_err *err, int code, const char *fmt, va_list ap)
{
	if (err) {
		err->code = code;
		vsnprintf(err->msg, sizeof err->msg, fmt, ap);
	}
	return code;
}

int ds_err_set(struct ds_err *err, int code, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	ds_err_vset(err, code, fmt, ap);
	va_end(ap);
	return code;
}

int ds_err_prefix(struct ds_err *err, const char *fmt, ...)
{
	char pre[DS_ERR_MSG_MAX], old[DS_ERR_MSG_MAX];
	va_list ap;
	if (!err)
		return 0;
	va_start(ap, fmt);
	vsnprintf(pre, sizeof pre, fmt, ap);
	va_end(ap);
	memcpy(old, err->msg, sizeof old);
	snprintf(err->msg, sizeof err->msg, "%s%s", pre, old);
	return err->code;
}

void ds_err_clear(struct ds_err *err)
{
	if (err) {
		err->code = 0;
		err->msg[0] = '\0';
	}
}

int ds_exit_code(int code)
{
	switch (code) {
	case DS_OK: return 0;
	case DS_EINVAL: case DS_ECORRUPT: return 2;
	case DS_ENOTSUP: return 3;
	case DS_ESIGNAL: return 4;
	case DS_ETIMEOUT: return 5;
	default: return 1;
	}
}

const char *ds_status_name(int code)
{
	switch (code) {
	case DS_OK: return "ok";
	case DS_EINVAL: return "input error";
	case DS_ECORRUPT: return "corrupt input";
	case DS_EIO: return "I/O error";
	case DS_ENOMEM: return "out of memory";
	case DS_ENOTSUP: return "not built in";
	case DS_ECHECK: return "check failed";
	case DS_ESIGNAL: return "stopped on signal";
	case DS_ETIMEOUT: return "watchdog timeout";
	default: return "internal error";
	}
}
