/* progress.c - the process-wide work counter (see progress.h). */
#include "util/progress.h"

#include <stdatomic.h>

static atomic_ullong done;

void ds_progress_note(void)
{
	atomic_fetch_add_explicit(&done, 1, memory_order_relaxed);
}

unsigned long long ds_progress_count(void)
{
	return atomic_load_explicit(&done, memory_order_relaxed);
}
