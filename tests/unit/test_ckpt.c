/* test_ckpt.c - HDF5 checkpoints: bitwise round trip, slices, attributes,
 * CRC corruption detection, `latest`/`auto` and failed saves; the manifest,
 * every single-byte flip of a checkpoint's metadata, write faults, the
 * choice of --load auto and what a resume needs (issue 16).
 *
 * Independent checks go through the HDF5 C API directly (shapes, the stored
 * crc32c array against ds_crc32c of the raw bytes, the data offset used to
 * flip a byte on disk), not through the reader under test.
 */
#include "unit.h"

#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/model.h"
#include "io/ckpt.h"
#include "driver/ckpt_need.h"
#include "model/gpt.h"
#include "util/crc32c.h"
#include "util/log.h"

static char tmpdir[256];

static const char *tp(const char *rel)
{
	static char buf[64][600];  /* a ring: callers keep pointers for a whole test */
	static int k;
	k = (k + 1) % 64;
	snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, rel);
	return buf[k];
}

static int exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0;
}

/* Expect success; on failure show the message. */
#define OK(x) do { int rc_ = (x); if (rc_ != 0) fail_msg("%s: rc %d: %s", #x, rc_, e.msg); } while (0)

static void expect_err(int rc, int code, const struct ds_err *e, const char *s1, const char *s2)
{
	if (rc != code || !strstr(e->msg, s1) || (s2 && !strstr(e->msg, s2)))
		print_error("rc %d (want %d), message: %s\n", rc, code, e->msg);
	assert_int_equal(rc, code);
	assert_non_null(strstr(e->msg, s1));
	if (s2)
		assert_non_null(strstr(e->msg, s2));
	assert_null(strchr(e->msg, '\n'));
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-test-ckpt-XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	ds_log_init(0, DS_LOG_ERROR, 0);  /* the auto fallback warns; keep the TAP output clean */
	return 0;
}

static int teardown(void **state)
{
	char cmd[512];
	(void)state;
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
}

static char *slurp(const char *p)
{
	FILE *f = fopen(p, "rb");
	char *b = calloc(1, 4096);
	if (f) {
		size_t n = fread(b, 1, 4095, f);
		b[n] = '\0';
		fclose(f);
	}
	return b;
}

/* Deterministic test data: float i -> i * 0.37 - 5 with a non-trivial bit
 * pattern in every byte. */
static void fill_f32(float *v, size_t n, float salt)
{
	for (size_t i = 0; i < n; i++)
		v[i] = (float)i * 0.37f - 5.0f + salt;
}

/* A small checkpoint of step `step` in dir, tensor model/w of 100 f32 with
 * salt, and model/b of 10 f32; crc chunk 64 bytes. */
static void save_small(const char *dir, int64_t step, float salt)
{
	struct ds_ckpt *c;
	struct ds_err e = DS_ERR_INIT;
	struct ds_ckpt_meta m = { .step = step, .consumed_samples = step * 8, .world_size = 1 };
	float w[100], b[10];
	uint64_t sw[1] = { 100 }, sb[1] = { 10 };
	fill_f32(w, 100, salt);
	fill_f32(b, 10, -salt);
	OK(ds_ckpt_create(&c, dir, &m, &e));
	OK(ds_ckpt_set_chunk_bytes(c, 64, &e));
	OK(ds_ckpt_tensor_put(c, "model/w", DS_CKPT_F32, 1, sw, w, &e));
	OK(ds_ckpt_tensor_put(c, "model/b", DS_CKPT_F32, 1, sb, b, &e));
	if (ds_ckpt_commit(c, &e) != 0)
		fail_msg("%s", e.msg);
	ds_ckpt_close(c);
}

/* File offset of dataset name's contiguous data, through HDF5 directly. */
static long long data_offset(const char *file, const char *name)
{
	hid_t f = H5Fopen(file, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(f, name, H5P_DEFAULT);
	haddr_t a = H5Dget_offset(d);
	H5Dclose(d);
	H5Fclose(f);
	assert_true(a != HADDR_UNDEF);
	return (long long)a;
}

static void flip_byte(const char *file, long long off)
{
	FILE *f = fopen(file, "r+b");
	int ch;
	assert_non_null(f);
	assert_int_equal(fseek(f, off, SEEK_SET), 0);
	ch = fgetc(f);
	assert_int_equal(fseek(f, off, SEEK_SET), 0);
	fputc(ch ^ 0x40, f);
	fclose(f);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_crc_combine(void **state)
{
	uint8_t buf[1777];
	(void)state;
	for (size_t i = 0; i < sizeof buf; i++)
		buf[i] = (uint8_t)(i * 131 + 7);
	static const size_t cuts[] = { 0, 1, 8, 1000, 1776, 1777 };
	uint32_t whole = ds_crc32c(0, buf, sizeof buf);
	for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
		size_t a = cuts[k];
		uint32_t ca = ds_crc32c(0, buf, a), cb = ds_crc32c(0, buf + a, sizeof buf - a);
		assert_int_equal(ds_ckpt_crc_combine(ca, cb, sizeof buf - a), whole);
	}
	/* the published check value through a 4 + 5 split */
	assert_int_equal(ds_ckpt_crc_combine(ds_crc32c(0, "1234", 4), ds_crc32c(0, "56789", 5), 5), 0xE3069283u);
}

struct vstat { int ok, bad; char last_bad[DS_CKPT_NAME_MAX]; };

static void vcb(void *ud, const struct ds_ckpt_tensor_info *t, int status, const char *msg)
{
	struct vstat *v = ud;
	(void)msg;
	if (status == 0) {
		v->ok++;
	} else {
		v->bad++;
		snprintf(v->last_bad, sizeof v->last_bad, "%s", t->name);
	}
}

static void test_roundtrip(void **state)
{
	const char *dir = tp("rt");
	struct ds_ckpt *c;
	struct ds_err e = DS_ERR_INIT;
	struct ds_ckpt_meta m = { .step = 100, .consumed_samples = 3200, .world_size = 4, .zero_stage = 2,
				  .dtype = "bf16", .config_json = "{\"train_batch_size\": 32}",
				  .model_json = "{\"num_layers\": 2}" };
	static const char *wname = "model/transformer.wte.weight";
	uint64_t s2[2] = { 37, 11 }, s1[1] = { 11 }, s3[3] = { 3, 4, 5 }, sbf[2] = { 5, 3 }, si[1] = { 4 };
	float wte[37 * 11], bias[11], avg[37 * 11], rd[37 * 11];
	uint8_t cube[60], rcube[60];
	uint16_t bf[15], rbf[15];
	int64_t iv[4] = { -1, 0, 1LL << 40, 7 }, riv[4];
	(void)state;
	fill_f32(wte, 37 * 11, 0.5f);
	fill_f32(bias, 11, 2.0f);
	fill_f32(avg, 37 * 11, -1.0f);
	for (int i = 0; i < 60; i++)
		cube[i] = (uint8_t)(i * 7);
	for (int i = 0; i < 15; i++)
		bf[i] = (uint16_t)(0x3f80 + i);

	OK(ds_ckpt_create(&c, dir, &m, &e));
	assert_true(exists(tp("rt/global_step100.tmp/state.h5")));
	OK(ds_ckpt_set_chunk_bytes(c, 64, &e));
	/* wte in three slices out of order, boundaries off the 16-element chunks,
	 * as three ranks would write them */
	OK(ds_ckpt_tensor_create(c, wname, DS_CKPT_F32, 2, s2, &e));
	OK(ds_ckpt_tensor_write(c, wname, 200, 407, wte + 200, &e));
	OK(ds_ckpt_tensor_write(c, wname, 0, 57, wte, &e));
	OK(ds_ckpt_tensor_write(c, wname, 57, 200, wte + 57, &e));
	OK(ds_ckpt_tensor_put(c, "model/transformer.h.0.ln_1.bias", DS_CKPT_F32, 1, s1, bias, &e));
	OK(ds_ckpt_tensor_put(c, "optimizer/exp_avg/transformer.wte.weight", DS_CKPT_F32, 2, s2, avg, &e));
	OK(ds_ckpt_tensor_put(c, "model/cube", DS_CKPT_U8, 3, s3, cube, &e));
	OK(ds_ckpt_tensor_put(c, "model/half", DS_CKPT_BF16, 2, sbf, bf, &e));
	OK(ds_ckpt_tensor_put(c, "rng/counters", DS_CKPT_I64, 1, si, iv, &e));
	expect_err(ds_ckpt_tensor_create(c, wname, DS_CKPT_F32, 2, s2, &e), DS_EINVAL, &e, wname, "twice");
	OK(ds_ckpt_attr_set_i64(c, "scheduler", "last_step", 100, &e));
	OK(ds_ckpt_attr_set_f64(c, "scheduler", "lr", 3.0e-4, &e));
	OK(ds_ckpt_attr_set_f64(c, "loss_scaler", "scale", 65536.0, &e));
	OK(ds_ckpt_attr_set_str(c, "optimizer", "type", "AdamW", &e));
	OK(ds_ckpt_attr_set_i64(c, "data", "consumed_samples", 3200, &e));
	OK(ds_ckpt_attr_set_i64(c, "rng", "seed", 1234, &e));
	OK(ds_ckpt_attr_set_f64(c, "optimizer", "beta1", 0.9, &e));
	assert_int_equal(ds_ckpt_attr_set_f64(c, "optimizer", "beta1", 0.95, &e), 0);  /* overwrite */
	OK(ds_ckpt_commit(c, &e));
	ds_ckpt_close(c);

	/* the layout on disk */
	assert_false(exists(tp("rt/global_step100.tmp")));
	assert_true(exists(tp("rt/global_step100/state.h5")));
	assert_false(exists(tp("rt/latest.tmp")));
	char *l = slurp(tp("rt/latest"));
	assert_string_equal(l, "global_step100\n");
	free(l);

	/* independent look through HDF5: full logical shape, and the stored
	 * crc32c of chunk k is the CRC of bytes [64k, 64k+64) of the tensor */
	{
		hid_t f = H5Fopen(tp("rt/global_step100/state.h5"), H5F_ACC_RDONLY, H5P_DEFAULT);
		hid_t d = H5Dopen2(f, "/model/transformer.wte.weight", H5P_DEFAULT), s = H5Dget_space(d);
		hsize_t dims[2];
		uint32_t crc[26];
		assert_int_equal(H5Sget_simple_extent_ndims(s), 2);
		H5Sget_simple_extent_dims(s, dims, NULL);
		assert_int_equal(dims[0], 37);
		assert_int_equal(dims[1], 11);
		hid_t a = H5Aopen(d, "crc32c", H5P_DEFAULT), as = H5Aget_space(a);
		assert_int_equal(H5Sget_simple_extent_npoints(as), 26);  /* ceil(1628 / 64) */
		assert_true(H5Aread(a, H5T_NATIVE_UINT32, crc) >= 0);
		for (int k = 0; k < 26; k++) {
			size_t n = k == 25 ? 1628 - 64 * 25 : 64;
			assert_int_equal(crc[k], ds_crc32c(0, (const uint8_t *)wte + 64 * k, n));
		}
		H5Sclose(as);
		H5Aclose(a);
		H5Sclose(s);
		H5Dclose(d);
		H5Fclose(f);
	}

	/* read back through `latest` */
	OK(ds_ckpt_open(&c, dir, NULL, &e));
	assert_string_equal(ds_ckpt_tag(c), "global_step100");
	struct ds_ckpt_meta r;
	OK(ds_ckpt_meta_get(c, &r, &e));
	assert_int_equal(r.format_version, DS_CKPT_FORMAT_VERSION);
	assert_int_equal(r.step, 100);
	assert_int_equal(r.consumed_samples, 3200);
	assert_int_equal(r.world_size, 4);
	assert_int_equal(r.zero_stage, 2);
	assert_string_equal(r.dtype, "bf16");
	assert_string_equal(r.config_json, m.config_json);
	assert_string_equal(r.model_json, m.model_json);

	struct ds_ckpt_tensor_info *v;
	size_t n;
	OK(ds_ckpt_list(c, &v, &n, &e));
	assert_int_equal(n, 6);
	/* groups in creation order (model, optimizer, ..., rng), tensors too */
	assert_string_equal(v[0].name, wname);
	assert_int_equal(v[0].ndim, 2);
	assert_int_equal(v[0].numel, 407);
	assert_string_equal(v[1].name, "model/transformer.h.0.ln_1.bias");
	assert_string_equal(v[2].name, "model/cube");
	assert_int_equal(v[2].dtype, DS_CKPT_U8);
	assert_string_equal(v[3].name, "model/half");
	assert_int_equal(v[3].dtype, DS_CKPT_BF16);
	assert_string_equal(v[4].name, "optimizer/exp_avg/transformer.wte.weight");
	assert_string_equal(v[5].name, "rng/counters");
	free(v);

	/* whole tensors, bitwise */
	OK(ds_ckpt_tensor_read(c, wname, 0, 407, rd, &e));
	assert_memory_equal(rd, wte, sizeof wte);
	OK(ds_ckpt_tensor_read(c, "/optimizer/exp_avg/transformer.wte.weight", 0, 407, rd, &e));
	assert_memory_equal(rd, avg, sizeof avg);
	OK(ds_ckpt_tensor_read(c, "model/cube", 0, 60, rcube, &e));
	assert_memory_equal(rcube, cube, 60);
	OK(ds_ckpt_tensor_read(c, "model/half", 0, 15, rbf, &e));
	assert_memory_equal(rbf, bf, sizeof bf);
	OK(ds_ckpt_tensor_read(c, "rng/counters", 0, 4, riv, &e));
	assert_memory_equal(riv, iv, sizeof iv);
	/* slices: inside a chunk, across chunks and rows, single elements, the tail */
	static const uint64_t sl[][2] = { { 0, 1 }, { 3, 9 }, { 10, 40 }, { 15, 17 }, { 16, 32 }, { 100, 407 },
					  { 406, 407 }, { 11, 22 }, { 5, 300 }, { 200, 200 } };
	for (size_t k = 0; k < sizeof sl / sizeof sl[0]; k++) {
		memset(rd, 0, sizeof rd);
		OK(ds_ckpt_tensor_read(c, wname, sl[k][0], sl[k][1], rd, &e));
		assert_memory_equal(rd, wte + sl[k][0], (sl[k][1] - sl[k][0]) * sizeof(float));
	}
	for (uint64_t b = 0; b < 60; b += 7)
		for (uint64_t en = b + 1; en <= 60; en += 5) {
			memset(rcube, 0, sizeof rcube);
			OK(ds_ckpt_tensor_read(c, "model/cube", b, en, rcube, &e));
			assert_memory_equal(rcube, cube + b, en - b);
		}
	expect_err(ds_ckpt_tensor_read(c, wname, 400, 408, rd, &e), DS_EINVAL, &e, wname, "outside");
	expect_err(ds_ckpt_tensor_read(c, "model/nope", 0, 1, rd, &e), DS_EINVAL, &e, "model/nope", "no tensor");

	/* attributes */
	int64_t i64;
	double f64;
	char *s;
	OK(ds_ckpt_attr_get_i64(c, "scheduler", "last_step", &i64, &e));
	assert_int_equal(i64, 100);
	OK(ds_ckpt_attr_get_f64(c, "scheduler", "lr", &f64, &e));
	assert_true(f64 == 3.0e-4);
	OK(ds_ckpt_attr_get_f64(c, "optimizer", "beta1", &f64, &e));
	assert_true(f64 == 0.95);
	OK(ds_ckpt_attr_get_str_dup(c, "optimizer", "type", &s, &e));
	assert_string_equal(s, "AdamW");
	free(s);
	OK(ds_ckpt_attr_get_i64(c, "/", "step", &i64, &e));
	assert_int_equal(i64, 100);
	OK(ds_ckpt_attr_get_str_dup(c, "", "dstk_version", &s, &e));
	assert_true(strlen(s) > 0);
	free(s);
	assert_true(ds_ckpt_attr_has(c, "loss_scaler", "scale"));
	assert_false(ds_ckpt_attr_has(c, "loss_scaler", "growth"));
	expect_err(ds_ckpt_attr_get_i64(c, "data", "epoch", &i64, &e), DS_EINVAL, &e, "/data", "epoch");
	expect_err(ds_ckpt_attr_get_i64(c, "nogroup", "x", &i64, &e), DS_EINVAL, &e, "nogroup", NULL);
	expect_err(ds_ckpt_attr_get_i64(c, "optimizer", "type", &i64, &e), DS_ECORRUPT, &e, "type", "number");
	/* a reader cannot write */
	expect_err(ds_ckpt_attr_set_i64(c, "data", "x", 1, &e), DS_EINVAL, &e, "state.h5", NULL);

	struct vstat vs = { 0 };
	OK(ds_ckpt_verify(c, vcb, &vs, &e));
	assert_int_equal(vs.ok, 6);
	assert_int_equal(vs.bad, 0);
	ds_ckpt_close(c);
}

static void test_corrupt(void **state)
{
	const char *dir = tp("cor");
	const char *file = tp("cor/global_step7/state.h5");
	struct ds_ckpt *c;
	struct ds_err e = DS_ERR_INIT;
	float w[100], rd[100];
	(void)state;
	save_small(dir, 7, 0.0f);
	fill_f32(w, 100, 0.0f);
	/* byte 200 of /model/w lies in chunk 3 (bytes 192..256 = elements 48..63) */
	flip_byte(file, data_offset(file, "/model/w") + 200);
	OK(ds_ckpt_open(&c, dir, "global_step7", &e));
	/* slices that do not touch chunk 3 still load */
	OK(ds_ckpt_tensor_read(c, "model/w", 0, 48, rd, &e));
	assert_memory_equal(rd, w, 48 * sizeof(float));
	OK(ds_ckpt_tensor_read(c, "model/w", 64, 100, rd, &e));
	assert_memory_equal(rd, w + 64, 36 * sizeof(float));
	/* one that does is refused, naming dataset and chunk */
	expect_err(ds_ckpt_tensor_read(c, "model/w", 60, 61, rd, &e), DS_ECORRUPT, &e, "/model/w", "chunk 3");
	expect_err(ds_ckpt_tensor_read(c, "model/w", 0, 100, rd, &e), DS_ECORRUPT, &e, "/model/w", "chunk 3");
	assert_non_null(strstr(e.msg, "global_step7/state.h5"));
	/* verify visits every tensor and names the bad one */
	struct vstat vs = { 0 };
	expect_err(ds_ckpt_verify(c, vcb, &vs, &e), DS_ECORRUPT, &e, "/model/w", "CRC-32C");
	assert_int_equal(vs.ok, 1);
	assert_int_equal(vs.bad, 1);
	assert_string_equal(vs.last_bad, "model/w");
	ds_ckpt_close(c);
}

static void test_latest_auto(void **state)
{
	const char *dir = tp("auto");
	struct ds_ckpt *c;
	struct ds_err e = DS_ERR_INIT;
	float rd[100], w[100];
	(void)state;
	save_small(dir, 10, 1.0f);
	save_small(dir, 20, 2.0f);
	char *l = slurp(tp("auto/latest"));
	assert_string_equal(l, "global_step20\n");
	free(l);
	/* a crashed save of step 30: a .tmp directory with a half file */
	mkdir(tp("auto/global_step30.tmp"), 0777);
	FILE *f = fopen(tp("auto/global_step30.tmp/state.h5"), "wb");
	fputs("\x89HDF\r\n\x1a\n half", f);
	fclose(f);
	/* and a step 40 whose state.h5 is not HDF5 at all */
	mkdir(tp("auto/global_step40"), 0777);
	f = fopen(tp("auto/global_step40/state.h5"), "wb");
	fputs("garbage", f);
	fclose(f);
	OK(ds_ckpt_open(&c, dir, "latest", &e));
	assert_string_equal(ds_ckpt_tag(c), "global_step20");
	ds_ckpt_close(c);
	/* auto skips the .tmp and the broken 40, takes 20 */
	OK(ds_ckpt_open(&c, dir, "auto", &e));
	assert_string_equal(ds_ckpt_tag(c), "global_step20");
	fill_f32(w, 100, 2.0f);
	OK(ds_ckpt_tensor_read(c, "model/w", 0, 100, rd, &e));
	assert_memory_equal(rd, w, sizeof w);
	ds_ckpt_close(c);
	/* corrupt the newest valid one: auto falls back to 10 */
	const char *f20 = tp("auto/global_step20/state.h5");
	flip_byte(f20, data_offset(f20, "/model/b") + 5);
	/* ... saying so on stderr, naming the tag and the dataset */
	fflush(stderr);
	int saved = dup(2), fd = open(tp("auto.log"), O_WRONLY | O_CREAT | O_TRUNC, 0666);
	dup2(fd, 2);
	close(fd);
	ds_log_init(0, DS_LOG_WARN, 0);
	int rc = ds_ckpt_open(&c, dir, "auto", &e);
	ds_log_init(0, DS_LOG_ERROR, 0);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	OK(rc);
	assert_string_equal(ds_ckpt_tag(c), "global_step10");
	char *log = slurp(tp("auto.log"));
	assert_non_null(strstr(log, "warning: checkpoint"));
	assert_non_null(strstr(log, "global_step20 skipped"));
	assert_non_null(strstr(log, "/model/b"));
	assert_non_null(strstr(log, "global_step40 skipped"));
	free(log);
	struct ds_ckpt_meta m;
	OK(ds_ckpt_meta_get(c, &m, &e));
	assert_int_equal(m.step, 10);
	assert_int_equal(m.consumed_samples, 80);
	ds_ckpt_close(c);
	/* nothing valid left: one error naming the directory */
	const char *f10 = tp("auto/global_step10/state.h5");
	flip_byte(f10, data_offset(f10, "/model/w") + 1);
	expect_err(ds_ckpt_open(&c, dir, "auto", &e), DS_ECORRUPT, &e, dir, "none of the 3");
	assert_null(c);
}

static void test_failed_save(void **state)
{
	const char *dir = tp("fail");
	struct ds_ckpt *c;
	struct ds_err e = DS_ERR_INIT;
	struct ds_ckpt_meta m = { .step = 20 };
	float w[100], rd[100];
	uint64_t s[1] = { 100 };
	(void)state;
	save_small(dir, 10, 1.0f);
	fill_f32(w, 100, 9.0f);
	/* elements never written: commit refuses, nothing changes on disk */
	OK(ds_ckpt_create(&c, dir, &m, &e));
	OK(ds_ckpt_tensor_create(c, "model/w", DS_CKPT_F32, 1, s, &e));
	OK(ds_ckpt_tensor_write(c, "model/w", 0, 40, w, &e));
	OK(ds_ckpt_tensor_write(c, "model/w", 50, 100, w + 50, &e));
	expect_err(ds_ckpt_commit(c, &e), DS_EINVAL, &e, "/model/w", "from 40 on were never written");
	ds_ckpt_close(c);
	assert_false(exists(tp("fail/global_step20.tmp")));
	assert_false(exists(tp("fail/global_step20")));
	char *l = slurp(tp("fail/latest"));
	assert_string_equal(l, "global_step10\n");
	free(l);
	/* overlapping slices */
	OK(ds_ckpt_create(&c, dir, &m, &e));
	OK(ds_ckpt_tensor_create(c, "model/w", DS_CKPT_F32, 1, s, &e));
	OK(ds_ckpt_tensor_write(c, "model/w", 0, 60, w, &e));
	OK(ds_ckpt_tensor_write(c, "model/w", 50, 100, w + 50, &e));
	expect_err(ds_ckpt_commit(c, &e), DS_EINVAL, &e, "/model/w", "element 50 written twice");
	expect_err(ds_ckpt_tensor_write(c, "model/x", 0, 1, w, &e), DS_EINVAL, &e, "model/x", "not created");
	expect_err(ds_ckpt_tensor_write(c, "model/w", 90, 101, w, &e), DS_EINVAL, &e, "model/w", "outside");
	ds_ckpt_close(c);
	/* an overlap that ends exactly at the end of the tensor */
	OK(ds_ckpt_create(&c, dir, &m, &e));
	OK(ds_ckpt_tensor_create(c, "model/w", DS_CKPT_F32, 1, s, &e));
	OK(ds_ckpt_tensor_write(c, "model/w", 0, 100, w, &e));
	OK(ds_ckpt_tensor_write(c, "model/w", 98, 100, w + 98, &e));
	expect_err(ds_ckpt_commit(c, &e), DS_EINVAL, &e, "/model/w", "element 98 written twice");
	/* abandoned (the process gives up): the .tmp goes away */
	ds_ckpt_close(c);
	assert_false(exists(tp("fail/global_step20.tmp")));
	/* a stale .tmp from a crash is replaced by the next save of that step */
	mkdir(tp("fail/global_step20.tmp"), 0777);
	FILE *f = fopen(tp("fail/global_step20.tmp/junk"), "w");
	fclose(f);
	/* re-saving step 10 replaces it; latest still names 10 */
	save_small(dir, 10, 5.0f);
	OK(ds_ckpt_open(&c, dir, NULL, &e));
	assert_string_equal(ds_ckpt_tag(c), "global_step10");
	fill_f32(w, 100, 5.0f);
	OK(ds_ckpt_tensor_read(c, "model/w", 0, 100, rd, &e));
	assert_memory_equal(rd, w, sizeof w);
	ds_ckpt_close(c);
	assert_false(exists(tp("fail/.replaced")));
	save_small(dir, 20, 6.0f);
	assert_false(exists(tp("fail/global_step20.tmp")));
	OK(ds_ckpt_open(&c, dir, NULL, &e));
	assert_string_equal(ds_ckpt_tag(c), "global_step20");
	ds_ckpt_close(c);
	/* a tag directory may be given directly */
	OK(ds_ckpt_open(&c, tp("fail/global_step10/"), NULL, &e));
	assert_string_equal(ds_ckpt_tag(c), "global_step10");
	ds_ckpt_close(c);
	/* and so may the file */
	OK(ds_ckpt_open(&c, tp("fail/global_step10/state.h5"), "auto", &e));
	assert_string_equal(ds_ckpt_tag(c), "global_step10");
	assert_string_equal(ds_ckpt_file(c), tp("fail/global_step10/state.h5"));
	OK(ds_ckpt_tensor_read(c, "model/w", 0, 100, rd, &e));
	assert_memory_equal(rd, w, sizeof w);
	ds_ckpt_close(c);
}

static void test_bad_files(void **state)
{
	const char *dir = tp("bad");
	struct ds_ckpt *c;
	struct ds_err e = DS_ERR_INIT;
	(void)state;
	mkdir(dir, 0777);
	expect_err(ds_ckpt_open(&c, dir, NULL, &e), DS_EINVAL, &e, "bad/latest", "no such file");
	expect_err(ds_ckpt_open(&c, dir, "auto", &e), DS_EINVAL, &e, dir, "no finished global_stepN");
	expect_err(ds_ckpt_open(&c, tp("nodir"), "auto", &e), DS_EINVAL, &e, "nodir", NULL);
	/* latest names a tag that is gone */
	FILE *f = fopen(tp("bad/latest"), "w");
	fputs("global_step5\n", f);
	fclose(f);
	expect_err(ds_ckpt_open(&c, dir, NULL, &e), DS_EINVAL, &e, "global_step5/state.h5", "no such file");
	/* not HDF5 */
	mkdir(tp("bad/global_step5"), 0777);
	f = fopen(tp("bad/global_step5/state.h5"), "w");
	fputs("{\"not\": \"hdf5\"}\n", f);
	fclose(f);
	expect_err(ds_ckpt_open(&c, dir, NULL, &e), DS_ECORRUPT, &e, "global_step5/state.h5", "not an HDF5 file");
	/* HDF5, but not ours */
	hid_t h = H5Fcreate(tp("bad/global_step5/state.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
	H5Fclose(h);
	expect_err(ds_ckpt_open(&c, dir, NULL, &e), DS_ECORRUPT, &e, "global_step5/state.h5", "not a dstk checkpoint");
	/* truncated: a real checkpoint cut in half */
	save_small(tp("bad2"), 5, 0.0f);
	const char *f5 = tp("bad2/global_step5/state.h5");
	struct stat st;
	assert_int_equal(stat(f5, &st), 0);
	assert_int_equal(truncate(f5, st.st_size / 2), 0);
	expect_err(ds_ckpt_open(&c, tp("bad2"), NULL, &e), DS_ECORRUPT, &e, "global_step5/state.h5", "truncated");
	/* a newer format version (as a dstk without manifests would write it:
	 * a changed file fails its manifest) */
	save_small(tp("bad3"), 5, 0.0f);
	assert_int_equal(unlink(tp("bad3/global_step5/state.h5.manifest")), 0);
	h = H5Fopen(tp("bad3/global_step5/state.h5"), H5F_ACC_RDWR, H5P_DEFAULT);
	hid_t a = H5Aopen(h, "format_version", H5P_DEFAULT);
	int64_t v = DS_CKPT_FORMAT_VERSION + 1;
	H5Awrite(a, H5T_NATIVE_INT64, &v);
	H5Aclose(a);
	H5Fclose(h);
	expect_err(ds_ckpt_open(&c, tp("bad3"), NULL, &e), DS_EINVAL, &e, "state.h5", "format version 2");
	/* bad arguments */
	struct ds_ckpt_meta m = { .step = -1 };
	expect_err(ds_ckpt_create(&c, tp("bad4"), &m, &e), DS_EINVAL, &e, "bad4", "negative");
	m.step = 1;
	OK(ds_ckpt_create(&c, tp("bad4"), &m, &e));
	expect_err(ds_ckpt_set_chunk_bytes(c, 12, &e), DS_EINVAL, &e, "12", "multiple of 8");
	uint64_t z[2] = { 3, 0 };
	expect_err(ds_ckpt_tensor_create(c, "model/z", DS_CKPT_F32, 2, z, &e), DS_EINVAL, &e, "model/z", "no elements");
	ds_ckpt_close(c);
	assert_false(exists(tp("bad4/global_step1.tmp")));
	assert_false(exists(tp("bad4/latest")));
}

/* More than 16384 chunks: the crc32c attribute outgrows the 64 KiB of
 * compact attribute storage and must still round-trip. */
static void test_many_chunks(void **state)
{
	const char *dir = tp("many");
	struct ds_ckpt *c;
	struct ds_err e = DS_ERR_INIT;
	struct ds_ckpt_meta m = { .step = 1 };
	enum { N = 40000 };  /* 160000 bytes / 8 = 20000 chunks */
	uint64_t s[1] = { N };
	float *w = malloc(N * sizeof *w), *rd = malloc(N * sizeof *rd);
	(void)state;
	fill_f32(w, N, 3.0f);
	OK(ds_ckpt_create(&c, dir, &m, &e));
	OK(ds_ckpt_set_chunk_bytes(c, 8, &e));
	OK(ds_ckpt_tensor_put(c, "model/long", DS_CKPT_F32, 1, s, w, &e));
	OK(ds_ckpt_commit(c, &e));
	ds_ckpt_close(c);
	OK(ds_ckpt_open(&c, dir, NULL, &e));
	OK(ds_ckpt_tensor_read(c, "model/long", 0, N, rd, &e));
	assert_memory_equal(rd, w, N * sizeof *w);
	OK(ds_ckpt_tensor_read(c, "model/long", 12345, 12347, rd, &e));
	assert_memory_equal(rd, w + 12345, 2 * sizeof *w);
	OK(ds_ckpt_verify(c, NULL, NULL, &e));
	ds_ckpt_close(c);
	const char *f = tp("many/global_step1/state.h5");
	flip_byte(f, data_offset(f, "/model/long") + 8 * 19999 + 3);
	OK(ds_ckpt_open(&c, dir, NULL, &e));
	expect_err(ds_ckpt_verify(c, NULL, NULL, &e), DS_ECORRUPT, &e, "/model/long", "chunk 19999");
	ds_ckpt_close(c);
	free(w);
	free(rd);
}

/* Two "ranks" write halves of one tensor with separate writers; rank 0 takes
 * rank 1's CRC pieces and its commit stores the CRC array of the whole
 * tensor (checked against ds_crc32c of each 64-byte chunk, read from the
 * file by HDF5 directly).  Rank 1's data never reaches rank 0's file here
 * (serial HDF5), so only the checksums are compared. */
static void test_pieces(void **state)
{
	struct ds_ckpt *r0, *r1;
	struct ds_err e = DS_ERR_INIT;
	struct ds_ckpt_meta m0 = { .step = 1 }, m1 = { .step = 2 };
	const struct ds_ckpt_crc_piece *p;
	size_t n;
	float w[100];
	uint64_t s[2] = { 10, 10 };
	uint32_t crc[7];
	(void)state;
	fill_f32(w, 100, 4.0f);
	OK(ds_ckpt_create(&r0, tp("pc"), &m0, &e));
	OK(ds_ckpt_create(&r1, tp("pc"), &m1, &e));
	OK(ds_ckpt_set_chunk_bytes(r0, 64, &e));
	OK(ds_ckpt_set_chunk_bytes(r1, 64, &e));
	OK(ds_ckpt_tensor_create(r0, "model/w", DS_CKPT_F32, 2, s, &e));
	OK(ds_ckpt_tensor_create(r1, "model/w", DS_CKPT_F32, 2, s, &e));
	/* the boundary at element 37 splits chunk 2 (elements 32..47) */
	OK(ds_ckpt_tensor_write(r0, "model/w", 0, 37, w, &e));
	OK(ds_ckpt_tensor_write(r1, "model/w", 37, 100, w + 37, &e));
	OK(ds_ckpt_tensor_pieces(r1, "model/w", &p, &n, &e));
	assert_int_equal(n, 5);  /* chunks 2 (part), 3, 4, 5, 6 */
	assert_int_equal(p[0].chunk, 2);
	assert_int_equal(p[0].off, 20);
	assert_int_equal(p[0].len, 44);
	assert_int_equal(p[0].crc, ds_crc32c(0, (const uint8_t *)w + 148, 44));
	OK(ds_ckpt_tensor_add_pieces(r0, "model/w", p, n, &e));
	struct ds_ckpt_crc_piece bad = { 7, 0, 4, 0, 0 };
	expect_err(ds_ckpt_tensor_add_pieces(r0, "model/w", &bad, 1, &e), DS_EINVAL, &e, "/model/w", "chunk 7");
	ds_ckpt_close(r1);  /* rank 1's own file is not committed */
	OK(ds_ckpt_commit(r0, &e));
	ds_ckpt_close(r0);
	hid_t f = H5Fopen(tp("pc/global_step1/state.h5"), H5F_ACC_RDONLY, H5P_DEFAULT);
	hid_t d = H5Dopen2(f, "/model/w", H5P_DEFAULT), a = H5Aopen(d, "crc32c", H5P_DEFAULT);
	assert_true(H5Aread(a, H5T_NATIVE_UINT32, crc) >= 0);
	for (int k = 0; k < 7; k++)
		assert_int_equal(crc[k], ds_crc32c(0, (const uint8_t *)w + 64 * k, k == 6 ? 16 : 64));
	H5Aclose(a);
	H5Dclose(d);
	H5Fclose(f);
	assert_false(exists(tp("pc/global_step2.tmp")));
}

/* 12 MB with the default 1 MiB chunks: writes and reads stream in several
 * 4 MiB runs; slices cross run and chunk boundaries. */
static void test_big(void **state)
{
	struct ds_ckpt *c;
	struct ds_err e = DS_ERR_INIT;
	struct ds_ckpt_meta m = { .step = 3 };
	enum { N = 3000000 };
	uint64_t s[2] = { 3000, 1000 };
	float *w = malloc(N * sizeof *w), *rd = malloc(N * sizeof *rd);
	(void)state;
	assert_non_null(w);
	assert_non_null(rd);
	for (size_t i = 0; i < N; i++)
		w[i] = (float)(i % 65521) * 0.25f - (float)(i / 65521);
	OK(ds_ckpt_create(&c, tp("big"), &m, &e));
	OK(ds_ckpt_tensor_create(c, "model/big", DS_CKPT_F32, 2, s, &e));
	OK(ds_ckpt_tensor_write(c, "model/big", 1500003, N, w + 1500003, &e));
	OK(ds_ckpt_tensor_write(c, "model/big", 0, 1500003, w, &e));
	OK(ds_ckpt_commit(c, &e));
	ds_ckpt_close(c);
	OK(ds_ckpt_open(&c, tp("big"), NULL, &e));
	OK(ds_ckpt_tensor_read(c, "model/big", 0, N, rd, &e));
	assert_memory_equal(rd, w, (size_t)N * sizeof *w);
	/* 262144 floats per chunk: from inside chunk 1 to inside chunk 9 */
	OK(ds_ckpt_tensor_read(c, "model/big", 262145, 2359300, rd, &e));
	assert_memory_equal(rd, w + 262145, (size_t)(2359300 - 262145) * sizeof *w);
	OK(ds_ckpt_verify(c, NULL, NULL, &e));
	ds_ckpt_close(c);
	const char *f = tp("big/global_step3/state.h5");
	flip_byte(f, data_offset(f, "/model/big") + 5 * 1048576 + 77);
	OK(ds_ckpt_open(&c, tp("big"), NULL, &e));
	OK(ds_ckpt_tensor_read(c, "model/big", 0, 5 * 262144, rd, &e));
	expect_err(ds_ckpt_tensor_read(c, "model/big", 0, N, rd, &e), DS_ECORRUPT, &e, "/model/big", "chunk 5 ");
	ds_ckpt_close(c);
	free(w);
	free(rd);
}


/* ---- issue 16: manifest, byte flips, faults, --load auto, contents ------- */

/* One line of a manifest as the test reads it itself. */
struct mext { char kind; long long off, len; unsigned crc; };

static int read_manifest(const char *file, struct mext *x, int max)
{
	char p[700], line[256];
	int n = 0;
	snprintf(p, sizeof p, "%s.manifest", file);
	FILE *f = fopen(p, "r");
	assert_non_null(f);
	while (fgets(line, sizeof line, f))
		if ((line[0] == 'm' || line[0] == 'd') && line[1] == ' ' && n < max &&
		    sscanf(line + 2, "%lld %lld %x", &x[n].off, &x[n].len, &x[n].crc) == 3)
			x[n++].kind = line[0];
	fclose(f);
	return n;
}

static unsigned char *read_all(const char *file, size_t *n)
{
	FILE *f = fopen(file, "rb");
	struct stat st;
	assert_non_null(f);
	assert_int_equal(fstat(fileno(f), &st), 0);
	unsigned char *b = malloc((size_t)st.st_size + 1);
	assert_int_equal(fread(b, 1, (size_t)st.st_size, f), (size_t)st.st_size);
	fclose(f);
	*n = (size_t)st.st_size;
	return b;
}

static void test_manifest(void **state)
{
	const char *f = tp("man/global_step5/state.h5");
	struct mext x[256];
	size_t size;
	(void)state;
	save_small(tp("man"), 5, 1.0f);
	unsigned char *b = read_all(f, &size);
	int n = read_manifest(f, x, 256);
	/* the extents tile the file in order, and each CRC is that of its bytes */
	long long pos = 0;
	int data = 0;
	for (int i = 0; i < n; i++) {
		assert_int_equal(x[i].off, pos);
		assert_true(x[i].len > 0);
		assert_int_equal(x[i].crc, ds_crc32c(0, b + x[i].off, (size_t)x[i].len));
		pos += x[i].len;
		data += x[i].kind == 'd';
	}
	assert_int_equal(pos, (long long)size);
	/* the tensor extents: each dataset's bytes in its 64-byte CRC chunks,
	 * with its crc32c attribute's values (read through HDF5 directly) */
	static const struct { const char *name; int bytes; } ds[] = { { "/model/w", 400 }, { "/model/b", 40 } };
	assert_int_equal(data, 7 + 1);
	for (int k = 0; k < 2; k++) {
		long long off = data_offset(f, ds[k].name);
		unsigned crc[8];
		hid_t h = H5Fopen(f, H5F_ACC_RDONLY, H5P_DEFAULT), d = H5Dopen2(h, ds[k].name, H5P_DEFAULT);
		hid_t a = H5Aopen(d, "crc32c", H5P_DEFAULT);
		assert_true(H5Aread(a, H5T_NATIVE_UINT, crc) >= 0);
		H5Aclose(a);
		H5Dclose(d);
		H5Fclose(h);
		int i = 0;
		while (i < n && x[i].off != off)
			i++;
		for (int ch = 0; ch * 64 < ds[k].bytes; ch++, i++) {
			assert_true(i < n);
			assert_int_equal(x[i].kind, 'd');
			assert_int_equal(x[i].off, off + ch * 64);
			assert_int_equal(x[i].len, (ch + 1) * 64 <= ds[k].bytes ? 64 : ds[k].bytes - ch * 64);
			assert_int_equal(x[i].crc, crc[ch]);
		}
	}
	/* its own last line: the CRC of everything above it */
	char mp[700];
	size_t mn;
	snprintf(mp, sizeof mp, "%s.manifest", f);
	unsigned char *m = read_all(mp, &mn);
	unsigned want;
	assert_true(mn > 13 && sscanf((char *)m + mn - 13, "end %x", &want) == 1);
	assert_int_equal(want, ds_crc32c(0, m, mn - 13));
	free(m);
	free(b);
}

/* --load auto's pick in DIR skips global_step20, naming it, for
 * global_step10: 1, else 0. */
static int picks_previous(const char *dir)
{
	struct ds_err e = DS_ERR_INIT;
	struct ds_ckpt *c;
	struct ds_ckpt_skip *sk;
	size_t nsk;
	int ok = ds_ckpt_pick(&c, dir, NULL, NULL, NULL, &sk, &nsk, &e) == 0 && c &&
		 !strcmp(ds_ckpt_tag(c), "global_step10") && nsk == 1 && !strcmp(sk[0].tag, "global_step20");
	free(sk);
	ds_ckpt_close(c);
	return ok;
}

/* Every single-byte flip of a small checkpoint's HDF5 metadata and of its
 * manifest -- each byte, not a sample -- is refused before HDF5 reads the
 * file, by open (what load and verify go through), and --load auto's pick
 * then takes the previous tag.  Every flip of a tensor byte is caught by verify,
 * naming the dataset.  A crash would end this test program. */
static void test_flip_sweep(void **state)
{
	const char *dir = tp("flip"), *f = tp("flip/global_step20/state.h5");
	char mp[700];
	struct mext x[256];
	struct ds_err e = DS_ERR_INIT;
	struct ds_ckpt *c;
	long long meta = 0, meta_refused = 0, autos = 0, autos_ok = 0, man = 0, man_refused = 0, data = 0,
		  data_caught = 0;
	(void)state;
	save_small(dir, 10, 1.0f);
	save_small(dir, 20, 2.0f);
	snprintf(mp, sizeof mp, "%s.manifest", f);
	int n = read_manifest(f, x, 256);
	for (int i = 0; i < n; i++)
		for (long long off = x[i].off; off < x[i].off + x[i].len; off++) {
			flip_byte(f, off);
			int rc = ds_ckpt_open(&c, dir, "global_step20", &e);
			if (x[i].kind == 'm') {
				meta++;
				meta_refused += rc == DS_ECORRUPT && strstr(e.msg, "HDF5 metadata") && !c;
				autos++;
				autos_ok += picks_previous(dir);
			} else {
				data++;
				if (rc == 0 && ds_ckpt_verify(c, NULL, NULL, &e) == DS_ECORRUPT &&
				    (strstr(e.msg, "/model/w") || strstr(e.msg, "/model/b")))
					data_caught++;
			}
			ds_ckpt_close(c);
			flip_byte(f, off);  /* back */
		}
	size_t mn;
	free(read_all(mp, &mn));
	for (size_t off = 0; off < mn; off++) {
		flip_byte(mp, (long long)off);
		man++;
		man_refused += ds_ckpt_open(&c, dir, "global_step20", &e) == DS_ECORRUPT && !c;
		ds_ckpt_close(c);
		autos++;
		autos_ok += picks_previous(dir);
		flip_byte(mp, (long long)off);
	}
	print_message("flip sweep: %lld metadata bytes, %lld refused before HDF5; auto fell back on %lld of %lld flips; "
		      "%lld manifest bytes, %lld refused; %lld tensor bytes, %lld caught by verify\n", meta,
		      meta_refused, autos_ok, autos, man, man_refused, data, data_caught);
	assert_true(meta > 1000);
	assert_int_equal(meta_refused, meta);
	assert_int_equal(autos_ok, autos);
	assert_int_equal(man_refused, man);
	assert_int_equal(data_caught, data);
	/* and the untouched checkpoint still opens and verifies */
	OK(ds_ckpt_open(&c, dir, "global_step20", &e));
	OK(ds_ckpt_verify(c, NULL, NULL, &e));
	ds_ckpt_close(c);
}

/* A checkpoint of an older dstk (no manifest) still opens and verifies,
 * through the datasets' chunk CRCs. */
static void test_no_manifest(void **state)
{
	const char *f = tp("old/global_step3/state.h5");
	char mp[700];
	struct ds_err e = DS_ERR_INIT;
	struct ds_ckpt *c;
	(void)state;
	save_small(tp("old"), 3, 1.0f);
	snprintf(mp, sizeof mp, "%s.manifest", f);
	assert_int_equal(unlink(mp), 0);
	OK(ds_ckpt_open(&c, tp("old"), NULL, &e));
	assert_int_equal(ds_ckpt_has_manifest(c), 0);
	OK(ds_ckpt_verify(c, NULL, NULL, &e));
	ds_ckpt_close(c);
	flip_byte(f, data_offset(f, "/model/w") + 70);
	OK(ds_ckpt_open(&c, tp("old"), NULL, &e));
	expect_err(ds_ckpt_verify(c, NULL, NULL, &e), DS_ECORRUPT, &e, "/model/w", "chunk 1");
	ds_ckpt_close(c);
}

/* The test-only faults make the writes fail as a full disk would: one line
 * with the file and the system's reason and what latest names, the .tmp
 * gone, latest kept, and the next save works. */
static void test_write_faults(void **state)
{
	static const struct { const char *var, *val, *want; } f[] = {
		{ "DS_TEST_FAULT_CKPT_WRITE", "0:ENOSPC", "No space left on device" },
		{ "DS_TEST_FAULT_CKPT_WRITE", "0:EDQUOT", "quota exceeded" },
		{ "DS_TEST_FAULT_CKPT_META", "ENOSPC", "HDF5 metadata: No space left on device" },
		{ "DS_TEST_FAULT_CKPT_META", "EIO", "HDF5 metadata: Input/output error" },
	};
	const char *dir = tp("wf");
	struct ds_err e = DS_ERR_INIT;
	struct ds_ckpt *c;
	struct ds_ckpt_meta m = { .step = 20 };
	float w[100];
	uint64_t s[1] = { 100 };
	(void)state;
	fill_f32(w, 100, 3.0f);
	save_small(dir, 10, 1.0f);
	for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
		setenv(f[i].var, f[i].val, 1);
		OK(ds_ckpt_create(&c, dir, &m, &e));
		ds_ckpt_tensor_put(c, "model/w", DS_CKPT_F32, 1, s, w, &e);
		expect_err(ds_ckpt_commit(c, &e), DS_EIO, &e, "wf/global_step20.tmp/state.h5", f[i].want);
		assert_non_null(strstr(e.msg, "wf/latest still names global_step10"));
		ds_ckpt_close(c);
		unsetenv(f[i].var);
		assert_false(exists(tp("wf/global_step20.tmp")));
		assert_false(exists(tp("wf/global_step20")));
		char *l = slurp(tp("wf/latest"));
		assert_string_equal(l, "global_step10\n");
		free(l);
	}
	save_small(dir, 20, 2.0f);
	OK(ds_ckpt_open(&c, dir, NULL, &e));
	assert_string_equal(ds_ckpt_tag(c), "global_step20");
	OK(ds_ckpt_verify(c, NULL, NULL, &e));
	ds_ckpt_close(c);
}

static int refuse_all(void *ud, struct ds_ckpt *c, struct ds_err *err)
{
	(void)ud;
	return ds_err_set(err, DS_EINVAL, "%s: not for this run", ds_ckpt_file(c));
}

/* --load auto's choice: the newest tag that verifies; newer ones named with
 * the reason, unfinished saves too; none finished: nothing, no error. */
static void test_pick(void **state)
{
	const char *dir = tp("pick");
	struct ds_ckpt *c;
	struct ds_ckpt_skip *sk;
	size_t nsk;
	struct ds_err e = DS_ERR_INIT;
	(void)state;
	/* a missing directory and one with only an unfinished save: start fresh */
	OK(ds_ckpt_pick(&c, dir, NULL, NULL, NULL, &sk, &nsk, &e));
	assert_null(c);
	assert_int_equal(nsk, 0);
	free(sk);
	mkdir(dir, 0777);
	mkdir(tp("pick/global_step30.tmp"), 0777);
	OK(ds_ckpt_pick(&c, dir, NULL, NULL, NULL, &sk, &nsk, &e));
	assert_null(c);
	assert_int_equal(nsk, 1);
	assert_string_equal(sk[0].tag, "global_step30.tmp");
	assert_non_null(strstr(sk[0].why, "unfinished save"));
	free(sk);
	/* 10 good, 20 with a damaged tensor, 40 without its state.h5 */
	save_small(dir, 10, 1.0f);
	save_small(dir, 20, 2.0f);
	const char *f20 = tp("pick/global_step20/state.h5");
	flip_byte(f20, data_offset(f20, "/model/b") + 3);
	mkdir(tp("pick/global_step40"), 0777);
	OK(ds_ckpt_pick(&c, dir, NULL, NULL, NULL, &sk, &nsk, &e));
	assert_non_null(c);
	assert_string_equal(ds_ckpt_tag(c), "global_step10");
	ds_ckpt_close(c);
	assert_int_equal(nsk, 3);
	assert_string_equal(sk[0].tag, "global_step40");
	assert_non_null(strstr(sk[0].why, "no such file"));
	assert_string_equal(sk[1].tag, "global_step20");
	assert_non_null(strstr(sk[1].why, "/model/b"));
	assert_non_null(strstr(sk[1].why, "CRC-32C"));
	assert_string_equal(sk[2].tag, "global_step30.tmp");
	free(sk);
	/* a checkpoint that does not fit the run stops the search (20 opens;
	 * its bytes would be checked after the fit) */
	expect_err(ds_ckpt_pick(&c, dir, NULL, refuse_all, NULL, &sk, &nsk, &e), DS_EINVAL, &e, "global_step20",
		   "not for this run");
	assert_null(c);
	free(sk);
}

/* What a resume reads: every tensor of the model under model/ and each
 * optimizer state, in the model's shapes, and the step counters. */
static void test_check_need(void **state)
{
	struct ds_model_config cfg;
	struct ds_gpt *model;
	struct ds_ckpt *c;
	struct ds_err e = DS_ERR_INIT;
	struct ds_ckpt_meta m = { .step = 2 };
	const char *states[2] = { "exp_avg", "exp_avg_sq" };
	char names[4][DS_CKPT_STATE_MAX];
	int ns;
	(void)state;
	OK(ds_model_config_load_string("{\"num_layers\": 1, \"hidden_size\": 8, \"num_attention_heads\": 2, "
				       "\"seq_length\": 4, \"vocab_size\": 16}", "test", &cfg, &e));
	OK(ds_gpt_create(&model, &cfg, &e));
	/* everything but exp_avg_sq of the last tensor, and wpe with the wrong shape */
	OK(ds_ckpt_create(&c, tp("need"), &m, &e));
	for (int i = 0; i < ds_gpt_num_tensors(model); i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(model, i);
		uint64_t shape[2] = { (uint64_t)t->shape[0], (uint64_t)t->shape[1] };
		float *z = calloc((size_t)t->numel + 1, sizeof *z);
		char name[DS_CKPT_NAME_MAX];
		snprintf(name, sizeof name, "model/%s", t->name);
		if (strstr(t->name, "wpe"))
			shape[0]++;
		float *zz = calloc((size_t)(shape[0] * (t->ndim > 1 ? shape[1] : 1)), sizeof *zz);
		OK(ds_ckpt_tensor_put(c, name, DS_CKPT_F32, t->ndim, shape, zz, &e));
		shape[0] = (uint64_t)t->shape[0];
		for (int k = 0; k < 2; k++) {
			if (k == 1 && i == ds_gpt_num_tensors(model) - 1)
				continue;
			snprintf(name, sizeof name, "optimizer/%s/%s", states[k], t->name);
			OK(ds_ckpt_tensor_put(c, name, DS_CKPT_F32, t->ndim, shape, z, &e));
		}
		free(z);
		free(zz);
	}
	OK(ds_ckpt_attr_set_i64(c, "optimizer", "step", 2, &e));
	OK(ds_ckpt_attr_set_str(c, "optimizer", "type", "adamw", &e));
	OK(ds_ckpt_attr_set_i64(c, "scheduler", "steps", 2, &e));
	OK(ds_ckpt_commit(c, &e));
	ds_ckpt_close(c);
	OK(ds_ckpt_open(&c, tp("need"), NULL, &e));
	/* the states a checkpoint without the "states" list holds: its type's */
	OK(ds_ckpt_saved_states(c, names, 4, &ns, &e));
	assert_int_equal(ns, 2);
	assert_string_equal(names[1], "exp_avg_sq");
	struct ds_ckpt_need_tensor *nt = ds_ckpt_need_tensors(model);
	assert_non_null(nt);
	struct ds_ckpt_need need = { nt, ds_gpt_num_tensors(model), 0, states, 2, 1 };
	expect_err(ds_ckpt_check_need(c, &need, NULL, NULL, &e), DS_EINVAL, &e, "wpe.weight", "is f32[5, 8] where "
		   "f32[4, 8] is needed");
	assert_non_null(strstr(e.msg, "(3 of the"));  /* wpe, the missing state, data skipped_steps */
	/* weights only: the model's tensors alone */
	struct ds_ckpt_need w = { nt, ds_gpt_num_tensors(model), 1, NULL, 0, 0 };
	expect_err(ds_ckpt_check_need(c, &w, NULL, NULL, &e), DS_EINVAL, &e, "wpe", "(1 of the");
	ds_ckpt_close(c);
	free(nt);
	ds_gpt_destroy(model);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_crc_combine),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_corrupt),
		cmocka_unit_test(test_latest_auto),
		cmocka_unit_test(test_failed_save),
		cmocka_unit_test(test_bad_files),
		cmocka_unit_test(test_many_chunks),
		cmocka_unit_test(test_pieces),
		cmocka_unit_test(test_big),
		cmocka_unit_test(test_manifest),
		cmocka_unit_test(test_flip_sweep),
		cmocka_unit_test(test_no_manifest),
		cmocka_unit_test(test_write_faults),
		cmocka_unit_test(test_pick),
		cmocka_unit_test(test_check_need),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
