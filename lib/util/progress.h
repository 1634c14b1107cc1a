/* progress.h - a process-wide count of work done, for the hang watchdog.
 *
 * Code that makes progress without a collective operation -- a checkpoint
 * chunk written or read, a micro-batch through the model -- ticks it; the
 * watchdog (lib/train/watchdog.c) counts a tick as progress, as it counts a
 * finished collective, so a long save or a long step without
 * communication is not taken for a hang.  Lock-free; any thread may tick.
 */
#ifndef DS_UTIL_PROGRESS_H
#define DS_UTIL_PROGRESS_H

/* One unit of work done. */
void ds_progress_note(void);

/* Units done so far by this process. */
unsigned long long ds_progress_count(void);

#endif
