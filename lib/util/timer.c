/* timer.c - monotonic timers (see timer.h). */

#include "util/timer.h"

#include <time.h>

double ds_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
