/* test_monitor.c - lib/monitor (except the flops profile): log line text,
 * Python-repr floats, CSV monitor files (DeepSpeed's bytes, one header
 * across restarts, resume trimming), TensorBoard records (hand-encoded
 * bytes, CRCs checked by a bit-by-bit CRC-32C written here), comms_logger
 * formulas and table, and the metrics JSON.  Expected values are the spec's
 * cases or worked by hand in the comments.
 */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit.h"

#include "monitor/comms.h"
#include "monitor/csvmon.h"
#include "monitor/log.h"
#include "monitor/metrics.h"
#include "monitor/monitor.h"
#include "monitor/tb.h"
#include "util/err.h"

static char tmpdir[256];

static int setup_dir(void **state)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/test_monitor.XXXXXX");
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_dir(void **state)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

/* A fresh directory under tmpdir for one test. */
static const char *subdir(const char *name)
{
	static char p[512];
	snprintf(p, sizeof p, "%s/%s", tmpdir, name);
	mkdir(p, 0777);
	return p;
}

/* Whole file as a NUL-terminated string (caller frees), NULL if absent. */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	size_t k = fread(s, 1, (size_t)n, f);
	fclose(f);
	s[k] = '\0';
	if (len)
		*len = k;
	return s;
}

static void assert_file(const char *path, const char *want)
{
	char *s = slurp(path, NULL);
	assert_non_null(s);
	assert_string_equal(s, want);
	free(s);
}

static void spit(const char *path, const char *text)
{
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* ---- stdout lines ---- */

static void test_step_line(void **state)
{
	char b[512];
	struct ds_monitor_step s = {
		.step = 120, .total_steps = 1000, .consumed_samples = 3840, .loss = 2.3456781, .lr = 3e-4,
		.grad_norm = 0.81234, .fp16 = 1, .loss_scale = 65536, .skipped = 0, .samples_per_s = 812.34,
		.tokens_per_s = 103973.6, .tflops = 0.1234, .mfu = 0.7071, .peak_rss_bytes = 1.2 * 1073741824.0,
	};
	int n = ds_monitor_step_line(b, sizeof b, &s);
	const char *want = "step 120/1000 | samples 3840 | loss 2.345678 | lr 3.000e-04 | grad_norm 0.8123 | "
			   "loss_scale 65536 | skipped 0 | samples/s 812.3 | tokens/s 103974 | TFLOPS 0.123 | "
			   "MFU 0.71 | mem 1.2 GiB";
	assert_string_equal(b, want);
	assert_int_equal(n, strlen(want));

	/* a short buffer truncates but reports the full length */
	char small[10];
	assert_int_equal(ds_monitor_step_line(small, sizeof small, &s), strlen(want));
	assert_string_equal(small, "step 120/");

	/* fp32: no loss_scale/skipped; unknown fields left out; NaN shown */
	struct ds_monitor_step f = { .step = 5, .total_steps = 0, .consumed_samples = -1, .loss = 10,
				     .lr = 1e-3, .grad_norm = NAN, .samples_per_s = -1, .tokens_per_s = -1,
				     .tflops = -1, .mfu = -1 };
	ds_monitor_step_line(b, sizeof b, &f);
	assert_string_equal(b, "step 5 | loss 10.000000 | lr 1.000e-03 | grad_norm nan");

	/* bf16 that skipped a non-finite step says so; fp16 at scale 0.5 */
	f.skipped = 2;
	f.grad_norm = -1;
	ds_monitor_step_line(b, sizeof b, &f);
	assert_string_equal(b, "step 5 | loss 10.000000 | lr 1.000e-03 | skipped 2");
	f.fp16 = 1;
	f.loss_scale = 0.5;
	ds_monitor_step_line(b, sizeof b, &f);
	assert_string_equal(b, "step 5 | loss 10.000000 | lr 1.000e-03 | loss_scale 0.5 | skipped 2");
	f.loss_scale = 4294967296.0; /* ZeRO's 2^32 default */
	ds_monitor_step_line(b, sizeof b, &f);
	assert_string_equal(b, "step 5 | loss 10.000000 | lr 1.000e-03 | loss_scale 4294967296 | skipped 2");
}

static void test_eval_line(void **state)
{
	char b[128];
	ds_monitor_eval_line(b, sizeof b, 100, 2.302585093); /* ln 10 */
	assert_string_equal(b, "eval step 100 | loss 2.302585 | ppl 10.0000");
}

static void test_progress(void **state)
{
	char b[256];
	/* 45 of 100 at 12.3 it/s: 9 of 20 cells, eta 55/12.3 = 4.47 s */
	ds_monitor_progress(b, sizeof b, 45, 100, 12.3, 20);
	assert_string_equal(b, "\r[#########...........]  45/100  45% 12.3 it/s eta 0:04\033[K");
	ds_monitor_progress(b, sizeof b, 100, 100, 0, 20);
	assert_string_equal(b, "\r[####################] 100/100 100% eta --:--\033[K");
	/* 3725 s left -> 1:02:05 */
	ds_monitor_progress(b, sizeof b, 0, 3725, 1.0, 4);
	assert_string_equal(b, "\r[....]    0/3725   0% 1.0 it/s eta 1:02:05\033[K");
}

/* Python 3 repr() of each value, as DeepSpeed's csv writer prints it. */
static void test_python_repr(void **state)
{
	static const struct { double v; const char *s; } cases[] = {
		{ 0.001, "0.001" },
		{ 65536.0, "65536.0" },
		{ 1e-05, "1e-05" },
		{ 0.0001, "0.0001" },
		{ 0.5, "0.5" },
		{ 0.05, "0.05" },
		{ 1.5, "1.5" },
		{ 100.0, "100.0" },
		{ 12345.678, "12345.678" },
		{ 1e16, "1e+16" },
		{ 1e15, "1000000000000000.0" },
		{ 0.30000000000000004, "0.30000000000000004" },
		{ (double)0.1f, "0.10000000149011612" },
		{ 123456789012345678.0, "1.2345678901234568e+17" },
		{ 0.0, "0.0" },
		{ -0.0, "-0.0" },
		{ -2.5, "-2.5" },
		{ 2.5e-300, "2.5e-300" },
		{ 5e-324, "5e-324" },
		{ 1.7976931348623157e308, "1.7976931348623157e+308" },
	};
	char b[64];
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		ds_monitor_fmt_double(b, sizeof b, cases[i].v);
		assert_string_equal(b, cases[i].s);
	}
	ds_monitor_fmt_double(b, sizeof b, NAN);
	assert_string_equal(b, "nan");
	ds_monitor_fmt_double(b, sizeof b, -INFINITY);
	assert_string_equal(b, "-inf");
	/* and every text reads back as the same double */
	uint64_t x = 0x9E3779B97F4A7C15ull;
	for (int i = 0; i < 20000; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		double v;
		memcpy(&v, &x, 8);
		if (!isfinite(v))
			continue;
		ds_monitor_fmt_double(b, sizeof b, v);
		assert_true(strtod(b, NULL) == v);
	}
}

static void test_wallclock(void **state)
{
	struct ds_monitor_wallclock w = DS_MONITOR_WALLCLOCK_INIT;
	char b[256];
	ds_monitor_wallclock_line(&w, 0, b, sizeof b);
	assert_string_equal(b, "time (ms)");
	ds_monitor_wallclock_add(&w, DS_WC_FWD, 0.01234);
	ds_monitor_wallclock_add(&w, DS_WC_BWD, 0.025);
	ds_monitor_wallclock_add(&w, DS_WC_STEP, 0.0031);
	ds_monitor_wallclock_line(&w, 1, b, sizeof b);
	assert_string_equal(b, "time (ms) | fwd_microstep: 12.34 | bwd_microstep: 25.00 | step_microstep: 3.10");
	ds_monitor_wallclock_add(&w, DS_WC_FWD, 0.001);
	ds_monitor_wallclock_line(&w, 1, b, sizeof b); /* sums since the last micro line */
	assert_string_equal(b, "time (ms) | fwd_microstep: 1.00 | bwd_microstep: 0.00 | step_microstep: 0.00");
	assert_true(fabs(ds_monitor_wallclock_ms(&w, DS_WC_FWD) - 13.34) < 1e-9);
	ds_monitor_wallclock_line(&w, 0, b, sizeof b);
	assert_string_equal(b, "time (ms) | fwd: 13.34 | bwd: 25.00 | step: 3.10");
	ds_monitor_wallclock_add(&w, DS_WC_BWD_ALLREDUCE, 0.002);
	ds_monitor_wallclock_line(&w, 0, b, sizeof b);
	assert_string_equal(b, "time (ms) | fwd: 0.00 | bwd: 0.00 | bwd_allreduce: 2.00 | step: 0.00");
	assert_string_equal(ds_monitor_wallclock_tag(DS_WC_FWD), "Train/Samples/elapsed_time_ms_forward");
	assert_string_equal(ds_monitor_wallclock_tag(DS_WC_BWD_INNER),
			    "Train/Samples/elapsed_time_ms_backward_inner");
}

/* ---- CSV monitor ---- */

static void test_csv_deepspeed_case16(void **state)
{
	/* spec case 16: out="o", job="J", first lr event at 64 */
	char out[600], path[700];
	snprintf(out, sizeof out, "%s/o", subdir("c16"));
	struct ds_err err = DS_ERR_INIT;
	struct ds_monitor_csv *c;
	assert_int_equal(ds_monitor_csv_open(&c, out, "J", 0, &err), 0);
	assert_int_equal(ds_monitor_csv_write(c, "Train/Samples/lr", 0.001, 64, &err), 0);
	ds_monitor_csv_close(c);
	snprintf(path, sizeof path, "%s/J/Train_Samples_lr.csv", out);
	assert_file(path, "step,lr\r\n64,0.001\r\n");
}

static void test_csv_header_once_across_restarts(void **state)
{
	const char *d = subdir("restart");
	char path[600];
	snprintf(path, sizeof path, "%s/J/Train_Samples_train_loss.csv", d);
	struct ds_err err = DS_ERR_INIT;
	struct ds_monitor_csv *c;
	for (int run = 0; run < 2; run++) {
		assert_int_equal(ds_monitor_csv_open(&c, d, "J", 0, &err), 0);
		assert_int_equal(ds_monitor_csv_write(c, "Train/Samples/train_loss", 2.5 - run, 64 * run, &err), 0);
		assert_int_equal(ds_monitor_csv_flush(c, &err), 0);
		ds_monitor_csv_close(c);
	}
	assert_file(path, "step,train_loss\r\n0,2.5\r\n64,1.5\r\n");

	/* a crash mid-row: the half row goes, the header stays single */
	spit(path, "step,train_loss\r\n0,2.5\r\n64,1.");
	assert_int_equal(ds_monitor_csv_open(&c, d, "J", 0, &err), 0);
	assert_int_equal(ds_monitor_csv_write(c, "Train/Samples/train_loss", 1.25, 64, &err), 0);
	ds_monitor_csv_close(c);
	assert_file(path, "step,train_loss\r\n0,2.5\r\n64,1.25\r\n");
}

static void test_csv_resume_trims(void **state)
{
	const char *d = subdir("resume");
	char loss[600], lr[600];
	snprintf(loss, sizeof loss, "%s/J/Train_Samples_train_loss.csv", d);
	snprintf(lr, sizeof lr, "%s/J/Train_Samples_lr.csv", d);
	struct ds_err err = DS_ERR_INIT;
	struct ds_monitor_csv *c;
	/* first run: 5 steps of tbs 64 (loss at s*64, lr at (s+1)*64) */
	assert_int_equal(ds_monitor_csv_open(&c, d, "J", 0, &err), 0);
	for (int s = 0; s < 5; s++) {
		assert_int_equal(ds_monitor_csv_write(c, "Train/Samples/train_loss", 5 - s, s * 64, &err), 0);
		assert_int_equal(ds_monitor_csv_write(c, "Train/Samples/lr", 0.5 * (s + 1), (s + 1) * 64, &err), 0);
	}
	ds_monitor_csv_close(c);
	/* resumed from the checkpoint after step 2: the run rewrites loss from
	 * x=128 and lr from x=192 */
	assert_int_equal(ds_monitor_csv_open(&c, d, "J", 1, &err), 0);
	assert_int_equal(ds_monitor_csv_write(c, "Train/Samples/train_loss", 2.75, 128, &err), 0);
	assert_int_equal(ds_monitor_csv_write(c, "Train/Samples/lr", 1.75, 192, &err), 0);
	ds_monitor_csv_close(c);
	assert_file(loss, "step,train_loss\r\n0,5.0\r\n64,4.0\r\n128,2.75\r\n");
	assert_file(lr, "step,lr\r\n64,0.5\r\n128,1.0\r\n192,1.75\r\n");
	char tmp[700];
	snprintf(tmp, sizeof tmp, "%s.tmp", loss);
	assert_int_equal(access(tmp, F_OK), -1);
}

static void test_csv_full_precision(void **state)
{
	const char *d = subdir("prec");
	const double v[] = { 2.3456780910491943, 0.30000000000000004, 1e-300, 6.02214076e23, -1.0 / 3, 65536 };
	struct ds_err err = DS_ERR_INIT;
	struct ds_monitor_csv *c;
	assert_int_equal(ds_monitor_csv_open(&c, d, "", 0, &err), 0);
	for (int i = 0; i < 6; i++)
		assert_int_equal(ds_monitor_csv_write(c, "loss", v[i], i, &err), 0);
	ds_monitor_csv_close(c);
	char path[600], line[128];
	snprintf(path, sizeof path, "%s/loss.csv", d); /* no '/' in the tag: header is the tag */
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	assert_non_null(fgets(line, sizeof line, f));
	assert_string_equal(line, "step,loss\r\n");
	for (int i = 0; i < 6; i++) {
		assert_non_null(fgets(line, sizeof line, f));
		char *end;
		assert_int_equal(strtol(line, &end, 10), i);
		assert_int_equal(*end, ',');
		assert_true(strtod(end + 1, NULL) == v[i]);
	}
	assert_null(fgets(line, sizeof line, f));
	fclose(f);
}

static void test_csv_quoting_and_bad_files(void **state)
{
	const char *d = subdir("quote");
	char path[600];
	struct ds_err err = DS_ERR_INIT;
	struct ds_monitor_csv *c;
	/* Python's csv quotes a header with a comma; ' ' and '/' become '_' */
	for (int run = 0; run < 2; run++) {
		assert_int_equal(ds_monitor_csv_open(&c, d, "J", 0, &err), 0);
		assert_int_equal(ds_monitor_csv_write(c, "Eval/a b,\"c\"", run, run, &err), 0);
		ds_monitor_csv_close(c);
	}
	snprintf(path, sizeof path, "%s/J/Eval_a_b,\"c\".csv", d);
	assert_file(path, "step,\"a b,\"\"c\"\"\"\r\n0,0.0\r\n1,1.0\r\n");

	/* a file that is not this tag's is refused, and left as it was */
	snprintf(path, sizeof path, "%s/J/Train_Samples_lr.csv", d);
	spit(path, "foo,bar\r\n1,2\r\n");
	assert_int_equal(ds_monitor_csv_open(&c, d, "J", 1, &err), 0);
	assert_int_equal(ds_monitor_csv_write(c, "Train/Samples/lr", 1, 1, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, path));
	assert_non_null(strstr(err.msg, "'step,lr'"));
	ds_err_clear(&err);
	/* a row without a step, named by line */
	snprintf(path, sizeof path, "%s/J/Train_Samples_loss_scale.csv", d);
	spit(path, "step,loss_scale\r\n1,2\r\nx,3\r\n");
	assert_int_equal(ds_monitor_csv_write(c, "Train/Samples/loss_scale", 1, 1, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "line 3"));
	ds_monitor_csv_close(c);
	assert_file(path, "step,loss_scale\r\n1,2\r\nx,3\r\n");
	snprintf(path, sizeof path, "%s/J/Train_Samples_lr.csv", d);
	assert_file(path, "foo,bar\r\n1,2\r\n");

	/* output_path under a regular file */
	char file[600];
	snprintf(file, sizeof file, "%s/plain", d);
	spit(file, "x");
	assert_int_equal(ds_monitor_csv_open(&c, file, "J", 0, &err), DS_EIO);
	assert_non_null(strstr(err.msg, file));
}

/* ---- TensorBoard ---- */

/* CRC-32C bit by bit (reflected 0x82F63B78), independent of lib/util. */
static uint32_t crc_bitwise(const uint8_t *p, size_t n)
{
	uint32_t c = 0xFFFFFFFFu;
	for (size_t i = 0; i < n; i++) {
		c ^= p[i];
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
	}
	return ~c;
}

static uint32_t mask(uint32_t c)
{
	return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void test_tb_encoding(void **state)
{
	uint8_t b[128];
	/* file_version event at wall time 1.5 (0x3ff8000000000000) */
	static const uint8_t ver[] = { 0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x1a, 13,
				       'b', 'r', 'a', 'i', 'n', '.', 'E', 'v', 'e', 'n', 't', ':', '2' };
	assert_int_equal(ds_monitor_tb_event(b, sizeof b, 1.5, 0, NULL, 0), sizeof ver);
	assert_memory_equal(b, ver, sizeof ver);
	/* scalar: step 300 is the varint ac 02; 0.25f is 0x3e800000;
	 * Value = 0a 01 't' 15 <f> (8 bytes), Summary = 0a 08 <Value> (10) */
	static const uint8_t sc[] = { 0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0xac, 0x02, 0x2a, 0x0a,
				      0x0a, 0x08, 0x0a, 0x01, 't', 0x15, 0x00, 0x00, 0x80, 0x3e };
	assert_int_equal(ds_monitor_tb_event(b, sizeof b, 1.5, 300, "t", 0.25f), sizeof sc);
	assert_memory_equal(b, sc, sizeof sc);
	/* SessionLog START at step 300: field 7 = { 1: 1 } */
	static const uint8_t st[] = { 0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0xac, 0x02, 0x3a, 0x02, 0x08, 0x01 };
	assert_int_equal(ds_monitor_tb_event_start(b, sizeof b, 1.5, 300), sizeof st);
	assert_memory_equal(b, st, sizeof st);
	/* too small a buffer: the length is still reported */
	assert_int_equal(ds_monitor_tb_event(b, 4, 1.5, 300, "t", 0.25f), sizeof sc);
	/* a negative step is ten varint bytes */
	assert_int_equal(ds_monitor_tb_event(b, sizeof b, 1.5, -1, "t", 0.25f), sizeof sc - 2 + 10);

	/* framing: the masked crc of length 24 is a3 7f 4b 22 (platform.md §7) */
	uint8_t rec[24 + 16];
	ds_monitor_tb_frame(rec, sc, 24);
	static const uint8_t head[] = { 24, 0, 0, 0, 0, 0, 0, 0, 0xa3, 0x7f, 0x4b, 0x22 };
	assert_memory_equal(rec, head, sizeof head);
	assert_memory_equal(rec + 12, sc, 24);
	assert_int_equal(le(rec + 36, 4), mask(crc_bitwise(sc, 24)));
	/* the independent CRC agrees with the check value */
	assert_int_equal(crc_bitwise((const uint8_t *)"123456789", 9), 0xE3069283u);
}

static void test_tb_file(void **state)
{
	const char *d = subdir("tb");
	char dir[600];
	snprintf(dir, sizeof dir, "%s/out/job", d);
	struct ds_err err = DS_ERR_INIT;
	struct ds_monitor_tb *tb;
	assert_int_equal(ds_monitor_tb_open(&tb, dir, 1700000000.5, &err), 0);
	assert_int_equal(ds_monitor_tb_scalar(tb, "Train/Samples/train_loss", 2.5, 64, 1700000001.0, &err), 0);
	assert_int_equal(ds_monitor_tb_scalar(tb, "Train/Samples/lr", 3e-4, 128, 1700000002.0, &err), 0);
	assert_int_equal(ds_monitor_tb_flush(tb, &err), 0);
	/* events.out.tfevents.<%010d time>.<host>.<pid>.<n> in the directory */
	char host[256] = "";
	gethostname(host, sizeof host);
	char want[700];
	snprintf(want, sizeof want, "%s/events.out.tfevents.1700000000.%s.%ld.", dir, host, (long)getpid());
	const char *path = ds_monitor_tb_path(tb);
	assert_int_equal(strncmp(path, want, strlen(want)), 0);

	size_t len;
	uint8_t *s = (uint8_t *)slurp(path, &len);
	assert_non_null(s);
	size_t off = 0;
	int nrec = 0;
	uint8_t expect[256];
	while (off < len) {
		assert_true(off + 12 <= len);
		uint64_t n = le(s + off, 8);
		assert_int_equal(le(s + off + 8, 4), mask(crc_bitwise(s + off, 8)));
		assert_true(off + 16 + n <= len);
		assert_int_equal(le(s + off + 12 + n, 4), mask(crc_bitwise(s + off + 12, n)));
		size_t en = nrec == 0 ? ds_monitor_tb_event(expect, sizeof expect, 1700000000.5, 0, NULL, 0)
			  : nrec == 1 ? ds_monitor_tb_event(expect, sizeof expect, 1700000001.0, 64,
							     "Train/Samples/train_loss", 2.5f)
				      : ds_monitor_tb_event(expect, sizeof expect, 1700000002.0, 128,
							     "Train/Samples/lr", 3e-4f);
		assert_int_equal(n, en);
		assert_memory_equal(s + off + 12, expect, en);
		off += 16 + n;
		nrec++;
	}
	assert_int_equal(nrec, 3);
	free(s);
	ds_monitor_tb_close(tb);
	ds_monitor_tb_close(NULL);
}

/* ---- the monitor object ---- */

static int count_entries(const char *dir, const char *prefix)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, prefix, strlen(prefix));
	closedir(d);
	return n;
}

static void test_monitor_fanout(void **state)
{
	const char *d = subdir("fan");
	char base[600], p[700];
	snprintf(base, sizeof base, "%s", d);
	struct ds_err err = DS_ERR_INIT;
	struct ds_monitor *m;

	/* nothing enabled: a monitor that writes nothing */
	struct ds_monitor_opts none = { { 0, base, "off" }, { 0, base, "off" }, 0, 0 };
	assert_int_equal(ds_monitor_create(&m, &none, &err), 0);
	assert_false(ds_monitor_enabled(m));
	assert_int_equal(ds_monitor_write(m, DS_MONITOR_LR, 1, 1, &err), 0);
	assert_int_equal(ds_monitor_flush(m, &err), 0);
	assert_null(ds_monitor_tb_file(m));
	ds_monitor_destroy(m);
	snprintf(p, sizeof p, "%s/off", base);
	assert_int_equal(access(p, F_OK), -1);

	/* csv only, default job name */
	struct ds_monitor_opts csv = { { 1, base, NULL }, { 0, NULL, NULL }, 0, 0 };
	assert_int_equal(ds_monitor_create(&m, &csv, &err), 0);
	assert_true(ds_monitor_enabled(m));
	assert_int_equal(ds_monitor_write(m, DS_MONITOR_TRAIN_LOSS, 2.25, 0, &err), 0);
	assert_int_equal(ds_monitor_flush(m, &err), 0);
	snprintf(p, sizeof p, "%s/DeepSpeedJobName/Train_Samples_train_loss.csv", base);
	assert_file(p, "step,train_loss\r\n0,2.25\r\n");
	ds_monitor_destroy(m);

	/* both, into the same job directory: one event file next to the CSVs */
	struct ds_monitor_opts both = { { 1, base, "J" }, { 1, base, "J" }, 0, 0 };
	assert_int_equal(ds_monitor_create(&m, &both, &err), 0);
	assert_int_equal(ds_monitor_write(m, DS_MONITOR_LOSS_SCALE, 65536, 64, &err), 0);
	assert_int_equal(ds_monitor_flush(m, &err), 0);
	assert_non_null(ds_monitor_tb_file(m));
	snprintf(p, sizeof p, "%s/J", base);
	assert_int_equal(count_entries(p, "events.out.tfevents."), 1);
	snprintf(p, sizeof p, "%s/J/Train_Samples_loss_scale.csv", base);
	assert_file(p, "step,loss_scale\r\n64,65536.0\r\n");
	ds_monitor_destroy(m);
	ds_monitor_destroy(NULL);
}

static void test_monitor_log_step(void **state)
{
	const char *d = subdir("logstep");
	char p[700];
	struct ds_err err = DS_ERR_INIT;
	struct ds_monitor *m;
	struct ds_monitor_opts o = { { 1, d, "J" }, { 0, NULL, NULL }, 0, 0 };
	assert_int_equal(ds_monitor_create(&m, &o, &err), 0);
	struct ds_monitor_wallclock w = DS_MONITOR_WALLCLOCK_INIT;
	ds_monitor_wallclock_add(&w, DS_WC_FWD, 0.012);
	/* third step (2 done) of 64 samples: loss at 128, the rest at 192 */
	struct ds_monitor_step_events e = { 2, 64, 3.5, 0.001, 1, 32768, &w, 0, 0 };
	assert_int_equal(ds_monitor_log_step(m, &e, &err), 0);
	e = (struct ds_monitor_step_events){ 3, 64, 3.25, 0.002, 0, 0, NULL, 0, 0 };
	assert_int_equal(ds_monitor_log_step(m, &e, &err), 0);
	static const struct { const char *file, *text; } want[] = {
		{ "Train_Samples_train_loss", "step,train_loss\r\n128,3.5\r\n192,3.25\r\n" },
		{ "Train_Samples_lr", "step,lr\r\n192,0.001\r\n256,0.002\r\n" },
		{ "Train_Samples_loss_scale", "step,loss_scale\r\n192,32768.0\r\n" },
		{ "Train_Samples_elapsed_time_ms_forward", "step,elapsed_time_ms_forward\r\n192,12.0\r\n" },
		{ "Train_Samples_elapsed_time_ms_backward_allreduce",
		  "step,elapsed_time_ms_backward_allreduce\r\n192,0.0\r\n" },
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
		snprintf(p, sizeof p, "%s/J/%s.csv", d, want[i].file);
		assert_file(p, want[i].text);
	}
	ds_monitor_destroy(m);
}

/* ---- comms logger ---- */

static void test_comms_bw(void **state)
{
	double a, b;
	/* spec case 14: all_reduce 1 MiB in 1 ms on 8 ranks */
	assert_int_equal(ds_monitor_comms_bw("all_reduce", 1048576, 1, 8, &a, &b), 0);
	assert_true(fabs(a - 16.777216) < 1e-9); /* 2*2^20/1 *8/1e6 */
	assert_true(fabs(b - 14.680064) < 1e-9); /* 2^20 * 2*7/8 *8/1e6 */
	/* all_gather on 4 ranks: S <- 4 MiB, alg 4 MiB / 2 ms, bus * 3/4 */
	assert_int_equal(ds_monitor_comms_bw("all_gather", 1048576, 2, 4, &a, &b), 0);
	assert_true(fabs(a - 16.777216) < 1e-9);
	assert_true(fabs(b - 12.582912) < 1e-9);
	assert_int_equal(ds_monitor_comms_bw("reduce_scatter_tensor", 1048576, 2, 4, &a, &b), 0);
	assert_true(fabs(b - 12.582912) < 1e-9);
	/* all_to_all_single: no S*n; bus * (n-1)/n */
	assert_int_equal(ds_monitor_comms_bw("all_to_all_single", 1e6, 1, 4, &a, &b), 0);
	assert_true(fabs(a - 8) < 1e-12 && fabs(b - 6) < 1e-12);
	/* broadcast: alg = bus = S/t */
	assert_int_equal(ds_monitor_comms_bw("broadcast", 1e6, 2, 16, &a, &b), 0);
	assert_true(fabs(a - 4) < 1e-12 && fabs(b - 4) < 1e-12);
	assert_int_equal(ds_monitor_comms_bw("allreduce", 1, 1, 2, &a, &b), DS_EINVAL);

	/* which calls are recorded */
	const char *ops[] = { "all_gather", NULL };
	struct ds_monitor_comms_opts co = { 1, 0, 1, 0, NULL };
	assert_true(ds_monitor_comms_wants(&co, "all_reduce", 0));
	co.prof_all = 0;
	assert_false(ds_monitor_comms_wants(&co, "all_reduce", 0));
	assert_true(ds_monitor_comms_wants(&co, "all_reduce", 1));
	co.prof_ops = ops;
	assert_true(ds_monitor_comms_wants(&co, "all_gather", 0));
	co.enabled = 0;
	assert_false(ds_monitor_comms_wants(&co, "all_gather", 1));

	/* spec case 15 and a few more of convert_size */
	char s[48];
	assert_string_equal(ds_monitor_comms_size(4096, s, sizeof s), "4.0 KB");
	assert_string_equal(ds_monitor_comms_size(1536, s, sizeof s), "1.5 KB");
	assert_string_equal(ds_monitor_comms_size(268435456, s, sizeof s), "256.0 MB");
	assert_string_equal(ds_monitor_comms_size(0, s, sizeof s), "0B");
	assert_string_equal(ds_monitor_comms_size(1000, s, sizeof s), "1000.0 B");
	assert_string_equal(ds_monitor_comms_size(1234567, s, sizeof s), "1.18 MB"); /* 1.17737 */
	assert_string_equal(ds_monitor_comms_size(1073741824, s, sizeof s), "1.0 GB");

	char line[256];
	ds_monitor_comms_line(line, sizeof line, "all_reduce", 1, 1048576, 16.777216, 14.680064);
	assert_string_equal(line, "comm op: all_reduce | time (ms): 1.00 | msg size: 1.0 MB | algbw (Gbps): 16.78 | "
				  "busbw (Gbps): 14.68");
}

static void test_trim_mean(void **state)
{
	double v[25];
	/* 10 values with an outlier: k = 1 drops 1 and 100, mean(2..9) = 5.5 */
	double a[10] = { 5, 1, 100, 2, 3, 4, 6, 7, 8, 9 };
	assert_true(ds_monitor_trim_mean(a, 10, 0.1) == 5.5);
	/* n = 15: k = round(1.5) = 2, mean of 3^2..13^2 = (819 - 5) / 11 = 74 */
	for (int i = 0; i < 15; i++)
		v[i] = (double)(15 - i) * (15 - i);
	assert_true(fabs(ds_monitor_trim_mean(v, 15, 0.1) - 74) < 1e-12);
	/* n = 25: k = round(2.5) = 2 (half to even), (4324 - 5) / 21 */
	for (int i = 0; i < 25; i++)
		v[i] = (double)(i + 1) * (i + 1);
	assert_true(fabs(ds_monitor_trim_mean(v, 25, 0.1) - 4319.0 / 21) < 1e-12);
	/* n = 5: k = round(0.5) = 0, the plain mean */
	double b[5] = { 1, 2, 3, 4, 100 };
	assert_true(ds_monitor_trim_mean(b, 5, 0.1) == 22);
	assert_true(ds_monitor_trim_mean(b, 0, 0.1) == 0);
}

/* Seven columns, each padded with spaces to 20 characters. */
static void row(char *out, const char *c[7])
{
	char *p = out;
	for (int i = 0; i < 7; i++) {
		size_t n = strlen(c[i]);
		memcpy(p, c[i], n);
		p += n;
		for (; n < 20; n++)
			*p++ = ' ';
	}
	*p++ = '\n';
	*p = '\0';
}

static void test_comms_summary(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_monitor_comms *c;
	assert_int_equal(ds_monitor_comms_create(&c, 8, &err), 0);
	double a, b;
	assert_int_equal(ds_monitor_comms_add(c, "all_reduce", NULL, 1048576, 1.0, &a, &b, &err), 0);
	assert_true(fabs(a - 16.777216) < 1e-9 && fabs(b - 14.680064) < 1e-9);
	assert_int_equal(ds_monitor_comms_add(c, "broadcast", NULL, 1536, 0.25, NULL, NULL, &err), 0);
	assert_int_equal(ds_monitor_comms_add(c, "all_reduce", NULL, 4096, 0.5, NULL, NULL, &err), 0);
	assert_int_equal(ds_monitor_comms_add(c, "all_reduce", NULL, 1048576, 1.0, NULL, NULL, &err), 0);
	assert_int_equal(ds_monitor_comms_add(c, "bogus", NULL, 1, 1, NULL, NULL, &err), DS_EINVAL);
	char *text;
	assert_int_equal(ds_monitor_comms_summary(c, &text, &err), 0);
	char want[2048], r[256];
	want[0] = '\0';
	row(r, (const char *[]){ "Comm. Op", "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)",
				 "tput_avg (Gbps)", "busbw_avg (Gbps)" });
	strcat(want, r);
	strcat(want, "all_reduce\n");
	/* 4096 B in 0.5 ms on 8: alg 2*4096/0.5*8e-6 = 0.131, bus 4096/0.5*1.75*8e-6 = 0.115 */
	row(r, (const char *[]){ "", "4.0 KB", "1", "0.50", "0.50", "0.13", "0.11" });
	strcat(want, r);
	row(r, (const char *[]){ "", "1.0 MB", "2", "2.00", "1.00", "16.78", "14.68" });
	strcat(want, r);
	strcat(want, "broadcast\n");
	/* 1536 B in 0.25 ms: 1536/0.25*8e-6 = 0.049 */
	row(r, (const char *[]){ "", "1.5 KB", "1", "0.25", "0.25", "0.05", "0.05" });
	strcat(want, r);
	assert_string_equal(text, want);
	free(text);
	ds_monitor_comms_destroy(c);
}

/* ---- metrics JSON ---- */

static void test_metrics_json(void **state)
{
	const char *d = subdir("metrics");
	char path[600], tmp[700];
	snprintf(path, sizeof path, "%s/metrics.json", d);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	struct ds_err err = DS_ERR_INIT;
	struct ds_monitor_metrics m = DS_MONITOR_METRICS_INIT;
	/* steps 3..5 are the window: per optimizer step fwd 200 ms, bwd 400 ms,
	 * step 100 ms at gas 2 -> per micro-step 100/200/50 ms, the spec's case
	 * 23: latency 700000 us, throughput 64e6/700000 = 91.43 */
	for (int s = 1; s <= 6; s++) {
		int in = s >= 3 && s <= 5;
		struct ds_monitor_step_rec r = { s, in ? 200 : 999, in ? 400 : 999, in ? 100 : 999,
						 100.0 * s, 1000.0 * s, 0.5 * s, 4.0 - 0.5 * s };
		assert_int_equal(ds_monitor_metrics_add(&m, &r, &err), 0);
	}
	json_t *cfg = json_pack("{s:i}", "train_batch_size", 64);
	struct ds_monitor_metrics_info info = { 3, 5, 2, 64, 0, cfg, NULL };
	assert_int_equal(ds_monitor_metrics_write(&m, &info, path, &err), 0);
	assert_int_equal(access(tmp, F_OK), -1);
	json_error_t je;
	json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
	assert_non_null(o);
	assert_true(json_real_value(json_object_get(o, "fwd")) == 100000);
	assert_true(json_real_value(json_object_get(o, "bwd")) == 200000);
	assert_true(json_real_value(json_object_get(o, "step")) == 50000);
	assert_true(json_real_value(json_object_get(o, "latency")) == 700000);
	assert_true(fabs(json_real_value(json_object_get(o, "throughput")) - 91.428571428571428) < 1e-9);
	assert_true(json_real_value(json_object_get(o, "fwd_ms")) == 200);
	assert_true(json_real_value(json_object_get(o, "samples_per_sec")) == 400); /* (300+400+500)/3 */
	assert_true(json_real_value(json_object_get(o, "tokens_per_sec")) == 4000);
	assert_true(json_real_value(json_object_get(o, "tflops")) == 2);
	assert_true(json_real_value(json_object_get(o, "FLOPS_per_gpu")) == 2e12);
	assert_true(json_real_value(json_object_get(o, "loss")) == 2); /* (2.5+2+1.5)/3 */
	assert_true(json_real_value(json_object_get(o, "loss_last")) == 1.5);
	assert_int_equal(json_integer_value(json_object_get(o, "steps")), 3);
	assert_int_equal(json_integer_value(json_object_get(o, "start_profile_step")), 3);
	assert_int_equal(json_integer_value(json_object_get(o, "end_profile_step")), 5);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "config"), "train_batch_size")), 64);
	json_decref(o);

	/* full precision survives the file */
	struct ds_monitor_metrics one = DS_MONITOR_METRICS_INIT;
	struct ds_monitor_step_rec r = { 1, 1, 1, 1, 1, 1, 1, 2.3456780910491943 };
	assert_int_equal(ds_monitor_metrics_add(&one, &r, &err), 0);
	struct ds_monitor_metrics_info i1 = { 1, 1, 1, 1, 0, NULL, NULL };
	assert_int_equal(ds_monitor_metrics_write(&one, &i1, path, &err), 0);
	o = json_load_file(path, 0, &je);
	assert_non_null(o);
	assert_true(json_real_value(json_object_get(o, "loss")) == 2.3456780910491943);
	assert_null(json_object_get(o, "config"));
	json_decref(o);

	/* an empty window is an input error and leaves the old file alone */
	struct ds_monitor_metrics_info none = { 10, 20, 1, 1, 0, NULL, NULL };
	assert_int_equal(ds_monitor_metrics_write(&one, &none, path, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "start_profile_step 10"));
	o = json_load_file(path, 0, &je);
	assert_non_null(o);
	json_decref(o);
	/* an unwritable place is a runtime error naming the file */
	assert_int_equal(ds_monitor_metrics_write(&one, &i1, "/nonexistent/dir/m.json", &err), DS_EIO);
	assert_non_null(strstr(err.msg, "/nonexistent/dir/m.json"));

	json_decref(cfg);
	ds_monitor_metrics_release(&m);
	ds_monitor_metrics_release(&one);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_step_line),
		cmocka_unit_test(test_eval_line),
		cmocka_unit_test(test_progress),
		cmocka_unit_test(test_python_repr),
		cmocka_unit_test(test_wallclock),
		cmocka_unit_test(test_csv_deepspeed_case16),
		cmocka_unit_test(test_csv_header_once_across_restarts),
		cmocka_unit_test(test_csv_resume_trims),
		cmocka_unit_test(test_csv_full_precision),
		cmocka_unit_test(test_csv_quoting_and_bad_files),
		cmocka_unit_test(test_tb_encoding),
		cmocka_unit_test(test_tb_file),
		cmocka_unit_test(test_monitor_fanout),
		cmocka_unit_test(test_monitor_log_step),
		cmocka_unit_test(test_comms_bw),
		cmocka_unit_test(test_trim_mean),
		cmocka_unit_test(test_comms_summary),
		cmocka_unit_test(test_metrics_json),
	};
	return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
