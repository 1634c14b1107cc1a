/* tb.c - TensorBoard event files: hand-encoded Event protobufs in TFRecord
 * framing with masked CRC-32C, flushed by the caller at each logging step.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "monitor/monitor_int.h"
#include "monitor/tb.h"
#include "util/crc32c.h"

struct ds_monitor_tb {
	FILE *f;
	char *path;
};

/* TensorBoard's _global_uid: the n-th event file this process opened. */
static unsigned tb_uid;

static double now_unix(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- protobuf wire format, only what Event needs ---- */

struct pb {
	uint8_t *buf;
	size_t cap, len;
};

static void pb_byte(struct pb *p, uint8_t b)
{
	if (p->len < p->cap)
		p->buf[p->len] = b;
	p->len++;
}

static void pb_varint(struct pb *p, uint64_t v)
{
	do {
		pb_byte(p, (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
		v >>= 7;
	} while (v);
}

static void pb_fixed(struct pb *p, uint64_t v, int nbytes)
{
	for (int i = 0; i < nbytes; i++)
		pb_byte(p, (uint8_t)(v >> (8 * i)));
}

static void pb_bytes(struct pb *p, const void *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		pb_byte(p, ((const uint8_t *)s)[i]);
}

static size_t varint_len(uint64_t v)
{
	size_t k = 1;
	while (v > 0x7f) {
		v >>= 7;
		k++;
	}
	return k;
}

/* Event fields 1 and 2, common to every event. */
static void pb_head(struct pb *p, double wall_time, long long step)
{
	uint64_t wt;
	memcpy(&wt, &wall_time, 8);
	pb_byte(p, 0x09); /* 1: wall_time, fixed64 */
	pb_fixed(p, wt, 8);
	if (step != 0) {
		pb_byte(p, 0x10); /* 2: step, varint (negative: 10 bytes) */
		pb_varint(p, (uint64_t)step);
	}
}

size_t ds_monitor_tb_event_start(uint8_t *buf, size_t cap, double wall_time, long long step)
{
	struct pb p = { buf, cap, 0 };
	pb_head(&p, wall_time, step);
	pb_byte(&p, 0x3a); /* 7: session_log */
	pb_byte(&p, 2);
	pb_byte(&p, 0x08); /* SessionLog 1: status = START (1) */
	pb_byte(&p, 1);
	return p.len;
}

size_t ds_monitor_tb_event(uint8_t *buf, size_t cap, double wall_time, long long step, const char *tag, float value)
{
	struct pb p = { buf, cap, 0 };
	pb_head(&p, wall_time, step);
	if (!tag) {
		static const char ver[] = "brain.Event:2";
		pb_byte(&p, 0x1a); /* 3: file_version */
		pb_varint(&p, sizeof ver - 1);
		pb_bytes(&p, ver, sizeof ver - 1);
		return p.len;
	}
	size_t tl = strlen(tag);
	size_t vlen = 1 + varint_len(tl) + tl + 5;  /* Value: tag + simple_value */
	size_t slen = 1 + varint_len(vlen) + vlen;  /* Summary: value */
	uint32_t fv;
	memcpy(&fv, &value, 4);
	pb_byte(&p, 0x2a); /* 5: summary */
	pb_varint(&p, slen);
	pb_byte(&p, 0x0a); /* Summary 1: value */
	pb_varint(&p, vlen);
	pb_byte(&p, 0x0a); /* Value 1: tag */
	pb_varint(&p, tl);
	pb_bytes(&p, tag, tl);
	pb_byte(&p, 0x15); /* Value 2: simple_value, fixed32 */
	pb_fixed(&p, fv, 4);
	return p.len;
}

static void put_le(uint8_t *o, uint64_t v, int nbytes)
{
	for (int i = 0; i < nbytes; i++)
		o[i] = (uint8_t)(v >> (8 * i));
}

void ds_monitor_tb_frame(uint8_t *out, const uint8_t *data, size_t n)
{
	put_le(out, n, 8);
	put_le(out + 8, ds_crc32c_mask(ds_crc32c(0, out, 8)), 4);
	memcpy(out + 12, data, n);
	put_le(out + 12 + n, ds_crc32c_mask(ds_crc32c(0, data, n)), 4);
}

/* Frame and append one event: a scalar (tag), the file_version event (no
 * tag), or with start set the SessionLog START event. */
static int write_event(struct ds_monitor_tb *tb, double wall_time, long long step, const char *tag, float value,
		       int start, struct ds_err *err)
{
	uint8_t small[512];
	size_t n = start ? ds_monitor_tb_event_start(NULL, 0, wall_time, step)
			 : ds_monitor_tb_event(NULL, 0, wall_time, step, tag, value);
	uint8_t *rec = n + 16 <= sizeof small ? small : malloc(n + 16);
	uint8_t *data = rec ? malloc(n) : NULL;
	int rc = 0;
	if (!rec || !data) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	if (start)
		ds_monitor_tb_event_start(data, n, wall_time, step);
	else
		ds_monitor_tb_event(data, n, wall_time, step, tag, value);
	ds_monitor_tb_frame(rec, data, n);
	if (fwrite(rec, 1, n + 16, tb->f) != n + 16)
		rc = ds_err_set(err, DS_EIO, "%s: write error: %s", tb->path, strerror(errno));
out:
	free(data);
	if (rec != small)
		free(rec);
	return rc;
}

int ds_monitor_tb_open(struct ds_monitor_tb **out, const char *dir, double wall_time, struct ds_err *err)
{
	*out = NULL;
	if (wall_time < 0)
		wall_time = now_unix();
	DS_TRY(ds_monitor_mkdirs(dir, err));
	char host[256] = "localhost";
	gethostname(host, sizeof host - 1);
	host[sizeof host - 1] = '\0';
	struct ds_monitor_tb *tb = calloc(1, sizeof *tb);
	if (!tb)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	if (asprintf(&tb->path, "%s%sevents.out.tfevents.%010lld.%s.%ld.%u", dir, *dir ? "/" : "",
		     (long long)wall_time, host, (long)getpid(), tb_uid++) < 0) {
		free(tb);
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	tb->f = fopen(tb->path, "wb");
	if (!tb->f) {
		int rc = ds_err_set(err, DS_EIO, "%s: cannot create: %s", tb->path, strerror(errno));
		ds_monitor_tb_close(tb);
		return rc;
	}
	int rc = write_event(tb, wall_time, 0, NULL, 0, 0, err);
	if (!rc)
		rc = ds_monitor_tb_flush(tb, err);
	if (rc) {
		ds_monitor_tb_close(tb);
		return rc;
	}
	*out = tb;
	return 0;
}

int ds_monitor_tb_scalar(struct ds_monitor_tb *tb, const char *tag, double value, long long step,
			 double wall_time, struct ds_err *err)
{
	return write_event(tb, wall_time < 0 ? now_unix() : wall_time, step, tag, (float)value, 0, err);
}

int ds_monitor_tb_purge(struct ds_monitor_tb *tb, long long step, double wall_time, struct ds_err *err)
{
	if (wall_time < 0)
		wall_time = now_unix();
	DS_TRY(write_event(tb, wall_time, step, NULL, 0, 0, err));
	DS_TRY(write_event(tb, wall_time, step, NULL, 0, 1, err));
	return ds_monitor_tb_flush(tb, err);
}

int ds_monitor_tb_flush(struct ds_monitor_tb *tb, struct ds_err *err)
{
	if (fflush(tb->f) != 0)
		return ds_err_set(err, DS_EIO, "%s: write error: %s", tb->path, strerror(errno));
	return 0;
}

const char *ds_monitor_tb_path(const struct ds_monitor_tb *tb)
{
	return tb->path;
}

void ds_monitor_tb_close(struct ds_monitor_tb *tb)
{
	if (!tb)
		return;
	if (tb->f)
		fclose(tb->f);
	free(tb->path);
	free(tb);
}
