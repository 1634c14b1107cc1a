/* out.c - writing through the tool's streams (see out.h). */
#include "monitor/out.h"

#include <stdarg.h>

void ds_monitor_out_line(const struct ds_monitor_out *o, const char *fmt, ...)
{
	va_list ap;
	if (!o || !o->results)
		return;
	va_start(ap, fmt);
	vfprintf(o->results, fmt, ap);
	va_end(ap);
	fputc('\n', o->results);
	fflush(o->results);
}

void ds_monitor_out_text(const struct ds_monitor_out *o, const char *text)
{
	if (!o || !o->results)
		return;
	fputs(text, o->results);
	fflush(o->results);
}

void ds_monitor_out_progress(const struct ds_monitor_out *o, const char *bar)
{
	if (o && o->progress)
		fputs(bar, o->progress);
}

void ds_monitor_out_progress_erase(const struct ds_monitor_out *o)
{
	ds_monitor_out_progress(o, "\r\033[K");
}

void ds_monitor_out_progress_end(const struct ds_monitor_out *o)
{
	ds_monitor_out_progress(o, "\n");
}
