/* timer.h - monotonic wall-clock timers. */
#ifndef DS_UTIL_TIMER_H
#define DS_UTIL_TIMER_H

/* Seconds from CLOCK_MONOTONIC. */
double ds_now(void);

/* Accumulating stopwatch: start/stop pairs add to total. */
struct ds_timer { double start; double total; long count; };
#define DS_TIMER_INIT { 0, 0, 0 }
static inline void ds_timer_start(struct ds_timer *t) { t->start = ds_now(); }
static inline double ds_timer_stop(struct ds_timer *t)
{
	double d = ds_now() - t->start;
	t->total += d;
	t->count++;
	return d;
}

#endif
