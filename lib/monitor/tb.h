/* tb.h - TensorBoard event files written without TensorFlow or protobuf.
 *
 * A file is a sequence of TFRecords (u64 LE length, masked crc32c of those 8
 * bytes, the data, masked crc32c of the data; spec/platform.md §7), each
 * holding one tensorboard Event message encoded by hand: wall_time (field 1,
 * double), step (2, int64 varint), file_version (3, "brain.Event:2", the
 * first record) or summary (5) with one Summary.Value {tag (1), simple_value
 * (2, float)} - what torch.utils.tensorboard's add_scalar writes for
 * DeepSpeed.  The file is named as TensorBoard's EventFileWriter names it,
 * events.out.tfevents.<%010d unix time>.<hostname>.<pid>.<n> (n counts
 * the files this process opened, from 0), in join(output_path, job_name).
 */
#ifndef DS_MONITOR_TB_H
#define DS_MONITOR_TB_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct ds_monitor_tb;

/* Create dir (mkdir -p) and a new event file in it whose first record is
 * the file_version event.  wall_time is the Unix time to name and stamp the
 * file with (< 0: now).  Returns 0, DS_EIO or DS_ENOMEM; close with
 * ds_monitor_tb_close. */
int ds_monitor_tb_open(struct ds_monitor_tb **out, const char *dir, double wall_time, struct ds_err *err);

/* Append a scalar event (tag, value as float32, step) stamped wall_time
 * (< 0: now).  Returns 0 or DS_EIO. */
int ds_monitor_tb_scalar(struct ds_monitor_tb *tb, const char *tag, double value, long long step,
			 double wall_time, struct ds_err *err);

/* Mark a restart as torch's SummaryWriter(purge_step=step) does: a
 * file_version event and a SessionLog START event (field 7, status 1), both
 * at step, after which TensorBoard hides the events of earlier files with
 * step >= step (those of the run that is being resumed past).  Returns 0 or
 * DS_EIO. */
int ds_monitor_tb_purge(struct ds_monitor_tb *tb, long long step, double wall_time, struct ds_err *err);

/* Push buffered records to the file.  Returns 0 or DS_EIO. */
int ds_monitor_tb_flush(struct ds_monitor_tb *tb, struct ds_err *err);

/* The event file's path (borrowed). */
const char *ds_monitor_tb_path(const struct ds_monitor_tb *tb);

/* Flush and close; accepts NULL. */
void ds_monitor_tb_close(struct ds_monitor_tb *tb);

/* Encode an Event into buf (up to cap bytes): a scalar summary when tag is
 * not NULL, else the file_version event.  step 0 is left out, as proto3
 * leaves out defaults.  Returns the encoded length (which may exceed cap:
 * then nothing useful was written). */
size_t ds_monitor_tb_event(uint8_t *buf, size_t cap, double wall_time, long long step, const char *tag, float value);

/* The same for the SessionLog START event of ds_monitor_tb_purge. */
size_t ds_monitor_tb_event_start(uint8_t *buf, size_t cap, double wall_time, long long step);

/* Frame n data bytes as one TFRecord into out (n + 16 bytes). */
void ds_monitor_tb_frame(uint8_t *out, const uint8_t *data, size_t n);

#endif
