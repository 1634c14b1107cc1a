/* test_data.c - the dataset readers, the sampler and the split.
 *
 * Fixtures are written byte by byte from spec/formats.md into a temporary
 * directory (Megatron .idx/.bin, llm.c shards), with token values chosen by
 * hand, so the tests need no Python and no committed binaries.
 */
#include "unit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/dataset.h"

static char tmpdir[256];

static const char *tpath(const char *name)
{
	static char buf[8][512];
	static int k;
	k = (k + 1) % 8;
	snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
	return buf[k];
}

static void put(const char *name, const void *p, size_t n)
{
	FILE *f = fopen(tpath(name), "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(p, 1, n, f), n);
	fclose(f);
}

/* little-endian byte writers */
static size_t w8(uint8_t *b, size_t o, uint8_t v) { b[o] = v; return o + 1; }
static size_t w16(uint8_t *b, size_t o, uint16_t v) { b[o] = v & 0xff; b[o + 1] = v >> 8; return o + 2; }
static size_t w32(uint8_t *b, size_t o, uint32_t v) { for (int i = 0; i < 4; i++) b[o + i] = (v >> (8 * i)) & 0xff; return o + 4; }
static size_t w64(uint8_t *b, size_t o, uint64_t v) { for (int i = 0; i < 8; i++) b[o + i] = (v >> (8 * i)) & 0xff; return o + 8; }

/* Megatron fixture: 3 documents of one sequence each, sizes 3, 2, 4:
 * {10,11,12} {20,21} {30,31,32,33}, dtype code `code` (8 u16 or 4 i32).
 * .idx = 34 + 3*4 + 3*8 + 4*8 = 102 bytes. */
static size_t make_idx(uint8_t *b, int code, size_t item)
{
	static const int32_t sizes[3] = { 3, 2, 4 };
	size_t o = 0;
	memcpy(b, "MMIDIDX\0\0", 9);
	o = 9;
	o = w64(b, o, 1);          /* version @9 */
	o = w8(b, o, (uint8_t)code); /* dtype @17 */
	o = w64(b, o, 3);          /* S @18 */
	o = w64(b, o, 4);          /* D @26 */
	assert_int_equal(o, 34);
	for (int i = 0; i < 3; i++)
		o = w32(b, o, (uint32_t)sizes[i]);
	o = w64(b, o, 0);
	o = w64(b, o, 3 * item);
	o = w64(b, o, 5 * item);
	for (int i = 0; i < 4; i++)
		o = w64(b, o, (uint64_t)i);
	return o;
}

static const uint32_t mega_tok[9] = { 10, 11, 12, 20, 21, 30, 31, 32, 33 };

static void make_megatron(const char *prefix, int code)
{
	uint8_t idx[256], bin[64];
	size_t item = code == 8 ? 2 : 4, n = make_idx(idx, code, item), o = 0;
	char name[128];
	assert_int_equal(n, 102);
	for (int i = 0; i < 9; i++)
		o = item == 2 ? w16(bin, o, (uint16_t)mega_tok[i]) : w32(bin, o, mega_tok[i]);
	snprintf(name, sizeof name, "%s.idx", prefix);
	put(name, idx, n);
	snprintf(name, sizeof name, "%s.bin", prefix);
	put(name, bin, o);
}

/* llm.c shard: header [0]=20240520 [1]=1 [2]=n, then uint16 tokens. */
static void make_shard(const char *name, const uint16_t *tok, uint32_t n, uint32_t magic, uint32_t claimed)
{
	uint8_t *b = calloc(1, 1024 + 2 * n);
	size_t o;
	assert_non_null(b);
	w32(b, 0, magic);
	w32(b, 4, 1);
	w32(b, 8, claimed);
	o = 1024;
	for (uint32_t i = 0; i < n; i++)
		o = w16(b, o, tok[i]);
	put(name, b, o);
	free(b);
}

static int setup(void **state)
{
	(void)state;
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ds-test-data-XXXXXX");
	assert_non_null(mkdtemp(tmpdir));
	return 0;
}

static int teardown(void **state)
{
	char cmd[512];
	(void)state;
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	return system(cmd) == 0 ? 0 : -1;
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

/* ---- readers ---------------------------------------------------------- */

static void test_text(void **state)
{
	struct ds_dataset *d;
	struct ds_err e = DS_ERR_INIT;
	uint32_t t[5];
	int f;
	(void)state;
	OK(ds_data_format_parse("megatron", &f, &e));
	assert_int_equal(f, DS_DATA_MEGATRON);
	OK(ds_data_format_parse("text", &f, &e));
	assert_int_equal(f, DS_DATA_TEXT);
	expect_err(ds_data_format_parse("hdf5", &f, &e), DS_EINVAL, &e, "'hdf5'", "llmc");
	put("a.txt", "Hello, world\n", 13);
	OK(ds_dataset_open(&d, tpath("a.txt"), DS_DATA_AUTO, &e));
	assert_string_equal(ds_dataset_format_name(d), "text");
	assert_int_equal(ds_dataset_num_tokens(d), 13);
	OK(ds_dataset_read(d, 7, 5, t, &e));
	assert_int_equal(t[0], 'w');
	assert_int_equal(t[4], 'd');
	/* past the end */
	assert_int_equal(ds_dataset_read(d, 10, 4, t, &e), DS_EINVAL);
	ds_dataset_destroy(d);
}

static void test_megatron(void **state)
{
	struct ds_dataset *d;
	struct ds_err e = DS_ERR_INIT;
	uint32_t t[9];
	int32_t ti[4];
	static const int codes[2] = { 8, 4 };
	(void)state;
	for (int k = 0; k < 2; k++) {
		char pre[64];
		snprintf(pre, sizeof pre, "mega%d", codes[k]);
		make_megatron(pre, codes[k]);
		/* by prefix, and by the .bin name */
		OK(ds_dataset_open(&d, tpath(pre), DS_DATA_AUTO, &e));
		assert_string_equal(ds_dataset_format_name(d), "megatron");
		assert_int_equal(ds_dataset_num_tokens(d), 9);
		OK(ds_dataset_read(d, 0, 9, t, &e));
		for (int i = 0; i < 9; i++)
			assert_int_equal(t[i], mega_tok[i]);
		/* a read across the document boundary 2|3 */
		OK(ds_dataset_read_i32(d, 2, 4, ti, &e));
		assert_int_equal(ti[0], 12);
		assert_int_equal(ti[1], 20);
		assert_int_equal(ti[2], 21);
		assert_int_equal(ti[3], 30);
		ds_dataset_destroy(d);
		char bin[80];
		snprintf(bin, sizeof bin, "%s.bin", pre);
		OK(ds_dataset_open(&d, tpath(bin), DS_DATA_AUTO, &e));
		assert_int_equal(ds_dataset_num_tokens(d), 9);
		ds_dataset_destroy(d);
	}
}

static void test_llmc(void **state)
{
	static const uint16_t a[5] = { 1, 2, 3, 50000, 5 }, b[3] = { 7, 8, 9 };
	struct ds_dataset *d;
	struct ds_err e = DS_ERR_INIT;
	uint32_t t[8];
	char list[600];
	(void)state;
	make_shard("tok_000.bin", a, 5, 20240520, 5);
	make_shard("tok_001.bin", b, 3, 20240520, 3);
	/* glob, sorted */
	char pat[400];
	snprintf(pat, sizeof pat, "%s/tok_*.bin", tmpdir);
	OK(ds_dataset_open(&d, pat, DS_DATA_AUTO, &e));
	assert_string_equal(ds_dataset_format_name(d), "llmc");
	assert_int_equal(ds_dataset_num_tokens(d), 8);
	OK(ds_dataset_read(d, 2, 5, t, &e));
	assert_int_equal(t[0], 3);
	assert_int_equal(t[1], 50000);
	assert_int_equal(t[2], 5);
	assert_int_equal(t[3], 7);
	assert_int_equal(t[4], 8);
	ds_dataset_destroy(d);
	/* explicit list in reverse order */
	snprintf(list, sizeof list, "%s,%s", tpath("tok_001.bin"), tpath("tok_000.bin"));
	OK(ds_dataset_open(&d, list, DS_DATA_AUTO, &e));
	OK(ds_dataset_read(d, 0, 4, t, &e));
	assert_int_equal(t[0], 7);
	assert_int_equal(t[3], 1);
	ds_dataset_destroy(d);
	/* one shard, detected by its magic */
	OK(ds_dataset_open(&d, tpath("tok_001.bin"), DS_DATA_AUTO, &e));
	assert_string_equal(ds_dataset_format_name(d), "llmc");
	assert_int_equal(ds_dataset_num_tokens(d), 3);
	ds_dataset_destroy(d);
}

/* ---- bad data --------------------------------------------------------- */

static void test_missing(void **state)
{
	struct ds_dataset *d;
	struct ds_err e = DS_ERR_INIT;
	char pat[400];
	(void)state;
	expect_err(ds_dataset_open(&d, tpath("nope.txt"), DS_DATA_AUTO, &e), DS_EINVAL, &e, "nope.txt", "no such file");
	assert_null(d);
	snprintf(pat, sizeof pat, "%s/none_*.bin", tmpdir);
	expect_err(ds_dataset_open(&d, pat, DS_DATA_AUTO, &e), DS_EINVAL, &e, "none_*.bin", "no llm.c shard");
	/* Megatron .idx without its .bin */
	make_megatron("orphan", 8);
	unlink(tpath("orphan.bin"));
	expect_err(ds_dataset_open(&d, tpath("orphan"), DS_DATA_AUTO, &e), DS_EINVAL, &e, "orphan.bin", "no such file");
}

static void test_bad_idx(void **state)
{
	uint8_t idx[256], bin[64] = { 0 };
	struct ds_dataset *d;
	struct ds_err e = DS_ERR_INIT;
	size_t n;
	(void)state;
	put("bad.bin", bin, 18);
	/* bad magic */
	n = make_idx(idx, 8, 2);
	idx[0] = 'X';
	put("bad.idx", idx, n);
	expect_err(ds_dataset_open(&d, tpath("bad"), DS_DATA_MEGATRON, &e), DS_ECORRUPT, &e, "bad.idx", "byte offset 0");
	/* truncated: header fine, arrays cut */
	n = make_idx(idx, 8, 2);
	put("bad.idx", idx, 60);
	expect_err(ds_dataset_open(&d, tpath("bad"), DS_DATA_MEGATRON, &e), DS_ECORRUPT, &e, "bad.idx", "truncated");
	/* shorter than the header */
	put("bad.idx", idx, 20);
	expect_err(ds_dataset_open(&d, tpath("bad"), DS_DATA_MEGATRON, &e), DS_ECORRUPT, &e, "bad.idx", "34-byte MMIDIDX header");
	/* S so large that the arrays are beyond the file */
	w64(idx, 18, 1000000);
	put("bad.idx", idx, n);
	expect_err(ds_dataset_open(&d, tpath("bad"), DS_DATA_MEGATRON, &e), DS_ECORRUPT, &e, "bad.idx", "1000000 sequences");
	/* wrong version */
	n = make_idx(idx, 8, 2);
	w64(idx, 9, 2);
	put("bad.idx", idx, n);
	expect_err(ds_dataset_open(&d, tpath("bad"), DS_DATA_MEGATRON, &e), DS_ECORRUPT, &e, "bad.idx", "byte offset 9");
	/* a float dtype code */
	n = make_idx(idx, 6, 4);
	put("bad.idx", idx, n);
	expect_err(ds_dataset_open(&d, tpath("bad"), DS_DATA_MEGATRON, &e), DS_ECORRUPT, &e, "bad.idx", "byte offset 17");
	/* pointers[1] wrong: @34+12+8 = 54 */
	n = make_idx(idx, 8, 2);
	w64(idx, 54, 4);
	put("bad.idx", idx, n);
	expect_err(ds_dataset_open(&d, tpath("bad"), DS_DATA_MEGATRON, &e), DS_ECORRUPT, &e, "bad.idx", "byte offset 54");
	/* doc_idx not ending at S: doc_idx[3] @ 34+36+24 = 94 */
	n = make_idx(idx, 8, 2);
	w64(idx, 94, 2);
	put("bad.idx", idx, n);
	expect_err(ds_dataset_open(&d, tpath("bad"), DS_DATA_MEGATRON, &e), DS_ECORRUPT, &e, "bad.idx", "byte offset 94");
	/* .bin shorter than the index says (9 tokens x 2 = 18 bytes) */
	n = make_idx(idx, 8, 2);
	put("bad.idx", idx, n);
	put("bad.bin", bin, 17);
	expect_err(ds_dataset_open(&d, tpath("bad"), DS_DATA_MEGATRON, &e), DS_ECORRUPT, &e, "bad.bin", "truncated");
	/* and the untouched fixture opens */
	put("bad.bin", bin, 18);
	OK(ds_dataset_open(&d, tpath("bad"), DS_DATA_MEGATRON, &e));
	ds_dataset_destroy(d);
}

static void test_bad_llmc(void **state)
{
	static const uint16_t a[4] = { 1, 2, 3, 4 };
	struct ds_dataset *d;
	struct ds_err e = DS_ERR_INIT;
	(void)state;
	make_shard("m.bin", a, 4, 20240521, 4);
	expect_err(ds_dataset_open(&d, tpath("m.bin"), DS_DATA_LLMC, &e), DS_ECORRUPT, &e, "m.bin", "bad magic 20240521");
	/* header claims 5 tokens, file holds 4 */
	make_shard("m.bin", a, 4, 20240520, 5);
	expect_err(ds_dataset_open(&d, tpath("m.bin"), DS_DATA_LLMC, &e), DS_ECORRUPT, &e, "m.bin", "says 5 tokens");
	/* shorter than the header */
	put("m.bin", a, 8);
	expect_err(ds_dataset_open(&d, tpath("m.bin"), DS_DATA_LLMC, &e), DS_ECORRUPT, &e, "m.bin", "1024-byte");
}

static void test_vocab(void **state)
{
	static const uint16_t a[3] = { 1, 2, 3 }, b[4] = { 7, 8, 300, 9 };
	struct ds_dataset *d;
	struct ds_err e = DS_ERR_INIT;
	uint32_t t[8];
	char list[600];
	(void)state;
	/* text: byte 0xC8 = 200 at offset 6, vocab 128 */
	put("v.txt", "abcdef\xc8ghijk", 12);
	OK(ds_dataset_open(&d, tpath("v.txt"), DS_DATA_TEXT, &e));
	ds_dataset_set_vocab(d, 128);
	OK(ds_dataset_read(d, 0, 6, t, &e));
	expect_err(ds_dataset_read(d, 4, 4, t, &e), DS_EINVAL, &e, "v.txt: byte offset 6", "token id 200 >= vocab_size 128");
	expect_err(ds_dataset_scan(d, &e), DS_EINVAL, &e, "v.txt: byte offset 6", "token id 200");
	ds_dataset_set_vocab(d, 256);
	OK(ds_dataset_scan(d, &e));
	ds_dataset_destroy(d);
	/* llm.c: token 300 is stream token 5, in the second shard at byte 1024 + 2*2 */
	make_shard("v0.bin", a, 3, 20240520, 3);
	make_shard("v1.bin", b, 4, 20240520, 4);
	snprintf(list, sizeof list, "%s,%s", tpath("v0.bin"), tpath("v1.bin"));
	OK(ds_dataset_open(&d, list, DS_DATA_AUTO, &e));
	ds_dataset_set_vocab(d, 256);
	expect_err(ds_dataset_scan(d, &e), DS_EINVAL, &e, "v1.bin: byte offset 1028", "token 5 of the stream");
	ds_dataset_destroy(d);
	/* Megatron i32 with a negative id in the .bin: token 4 at byte 16 */
	make_megatron("neg", 4);
	{
		uint8_t bin[36];
		size_t o = 0;
		for (int i = 0; i < 9; i++)
			o = w32(bin, o, i == 4 ? 0xffffffffu : mega_tok[i]);
		put("neg.bin", bin, o);
	}
	OK(ds_dataset_open(&d, tpath("neg"), DS_DATA_AUTO, &e));
	ds_dataset_set_vocab(d, 50304);
	expect_err(ds_dataset_scan(d, &e), DS_EINVAL, &e, "neg.bin: byte offset 16", "negative");
	ds_dataset_destroy(d);
}

static void test_too_short(void **state)
{
	struct ds_dataset *d;
	struct ds_err e = DS_ERR_INIT;
	struct ds_sampler s;
	uint64_t nw;
	(void)state;
	put("short.txt", "abcdefgh", 8);
	OK(ds_dataset_open(&d, tpath("short.txt"), DS_DATA_AUTO, &e));
	expect_err(ds_dataset_num_windows(d, 8, &nw, &e), DS_EINVAL, &e, "short.txt", "has 8 tokens");
	assert_non_null(strstr(e.msg, "needs 9"));
	expect_err(ds_sampler_init(&s, d, 8, 0, 1, 1, 0, &e), DS_EINVAL, &e, "short.txt", "needs 9");
	/* 9 tokens is exactly one window */
	OK(ds_dataset_num_windows(d, 7, &nw, &e));
	assert_int_equal(nw, 1);
	ds_dataset_destroy(d);
	put("empty.txt", "", 0);
	OK(ds_dataset_open(&d, tpath("empty.txt"), DS_DATA_AUTO, &e));
	expect_err(ds_dataset_num_windows(d, 4, &nw, &e), DS_EINVAL, &e, "empty.txt", "has 0 tokens");
	ds_dataset_destroy(d);
}

/* ---- permutation and sampler ------------------------------------------ */

static void test_permute(void **state)
{
	static const uint64_t ns[] = { 1, 2, 3, 5, 7, 16, 17, 255, 1000, 4097 };
	(void)state;
	for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
		uint64_t n = ns[k], fixed = 0;
		uint8_t *seen = calloc(n, 1);
		assert_non_null(seen);
		for (uint64_t i = 0; i < n; i++) {
			uint64_t p = ds_data_permute(i, n, 1234, 0, 3);
			assert_true(p < n);
			assert_int_equal(seen[p], 0);
			seen[p] = 1;
			fixed += p == i;
			/* deterministic */
			assert_int_equal(p, ds_data_permute(i, n, 1234, 0, 3));
		}
		if (n >= 255)
			assert_true(fixed < n / 20);  /* expected about 1 fixed point */
		free(seen);
	}
	/* epochs, seeds and streams give different orders */
	int de = 0, ds = 0, dst = 0;
	for (uint64_t i = 0; i < 1000; i++) {
		uint64_t p = ds_data_permute(i, 1000, 42, 0, 0);
		de += p != ds_data_permute(i, 1000, 42, 0, 1);
		ds += p != ds_data_permute(i, 1000, 43, 0, 0);
		dst += p != ds_data_permute(i, 1000, 42, 1, 0);
	}
	assert_true(de > 900 && ds > 900 && dst > 900);
	/* roughly uniform: where element 0 lands, over 4000 epochs, n = 8:
	 * 500 expected per slot; chi-square with 7 dof < 30 (p ~ 1e-4) */
	uint64_t cnt[8] = { 0 };
	for (uint64_t ep = 0; ep < 4000; ep++)
		cnt[ds_data_permute(0, 8, 7, 0, ep)]++;
	double chi = 0;
	for (int j = 0; j < 8; j++)
		chi += ((double)cnt[j] - 500.0) * ((double)cnt[j] - 500.0) / 500.0;
	assert_true(chi < 30.0);
}

static void test_sampler(void **state)
{
	struct ds_dataset *d;
	struct ds_err e = DS_ERR_INIT;
	struct ds_sampler s, s2;
	char text[101];
	int32_t tok[9];
	uint64_t nw, ep, w;
	(void)state;
	for (int i = 0; i < 100; i++)
		text[i] = (char)(' ' + i % 90);
	put("s.txt", text, 100);
	OK(ds_dataset_open(&d, tpath("s.txt"), DS_DATA_AUTO, &e));
	/* floor((100 - 1) / 8) = 12 windows */
	OK(ds_dataset_num_windows(d, 8, &nw, &e));
	assert_int_equal(nw, 12);
	OK(ds_sampler_init(&s, d, 8, 0, nw, 99, DS_SPLIT_TRAIN, &e));
	OK(ds_sampler_init(&s2, d, 8, 0, nw, 99, DS_SPLIT_TRAIN, &e));
	for (uint64_t epoch = 0; epoch < 3; epoch++) {
		int seen[12] = { 0 };
		for (uint64_t i = 0; i < nw; i++) {
			uint64_t g = epoch * nw + i, w2, e2;
			ds_sampler_locate(&s, g, &ep, &w);
			ds_sampler_locate(&s2, g, &e2, &w2);
			assert_int_equal(ep, epoch);
			assert_int_equal(w, w2);
			assert_true(w < 12);
			seen[w]++;
			/* the tokens are window w: bytes [8w, 8w + 9) */
			OK(ds_sampler_get(&s, g, tok, &e));
			for (int j = 0; j < 9; j++)
				assert_int_equal(tok[j], (unsigned char)text[8 * w + j]);
		}
		for (int j = 0; j < 12; j++)
			assert_int_equal(seen[j], 1);
	}
	/* no shuffle: identity order */
	s.shuffle = 0;
	ds_sampler_locate(&s, 13, &ep, &w);
	assert_int_equal(ep, 1);
	assert_int_equal(w, 1);
	ds_dataset_destroy(d);
}

static void test_split(void **state)
{
	uint64_t b[3], e[3];
	struct ds_err err = DS_ERR_INIT;
	(void)state;
	assert_int_equal(ds_data_split_parse("949,50,1", 1000, b, e, &err), 0);
	assert_int_equal(b[0], 0); assert_int_equal(e[0], 949);
	assert_int_equal(b[1], 949); assert_int_equal(e[1], 999);
	assert_int_equal(b[2], 999); assert_int_equal(e[2], 1000);
	/* "969, 30, 1" of 100: 96.9 -> 97, 3, 0.1 -> 0 */
	assert_int_equal(ds_data_split_parse("969, 30, 1", 100, b, e, &err), 0);
	assert_int_equal(e[0], 97); assert_int_equal(e[1], 100); assert_int_equal(e[2], 100);
	/* thirds of 10: [0,3,6,9], excess -1 moves every boundary up: [0,4,7,10] */
	assert_int_equal(ds_data_split_parse("1/1/1", 10, b, e, &err), 0);
	assert_int_equal(e[0], 4); assert_int_equal(b[1], 4); assert_int_equal(e[1], 7);
	assert_int_equal(b[2], 7); assert_int_equal(e[2], 10);
	/* halves of 5: round(2.5) = 2 (half to even), [0,2,4,4] -> [0,3,5,5] */
	assert_int_equal(ds_data_split_parse("1,1", 5, b, e, &err), 0);
	assert_int_equal(e[0], 3); assert_int_equal(e[1], 5); assert_int_equal(e[2], 5);
	expect_err(ds_data_split_parse("a,b", 5, b, e, &err), DS_EINVAL, &err, "split \"a,b\"", "offset 0");
	expect_err(ds_data_split_parse("0,0,0", 5, b, e, &err), DS_EINVAL, &err, "0,0,0", "sum to 0");
	expect_err(ds_data_split_parse("1,2,3,4", 5, b, e, &err), DS_EINVAL, &err, "1,2,3,4", "more than three");
}

static void test_data_open(void **state)
{
	struct ds_data dd;
	struct ds_err e = DS_ERR_INIT;
	struct ds_data_opts o = { 0 };
	char text[1001];
	int32_t tok[11];
	(void)state;
	for (int i = 0; i < 1000; i++)
		text[i] = (char)('a' + i % 26);
	put("big.txt", text, 1000);
	put("val.txt", text, 200);
	o.path = tpath("big.txt");
	o.seq_length = 10;
	o.vocab_size = 256;
	o.seed = 5;
	o.split = "90,10,0";
	/* 99 windows: 89 train, 10 valid, 0 test */
	OK(ds_data_open(&dd, &o, &e));
	assert_int_equal(dd.train.count, 89);
	assert_int_equal(dd.valid.first, 89);
	assert_int_equal(dd.valid.count, 10);
	assert_int_equal(dd.test.count, 0);
	for (uint64_t g = 0; g < 30; g++) {
		uint64_t ep, w;
		ds_sampler_locate(&dd.valid, g, &ep, &w);
		assert_true(w >= 89 && w < 99);
		ds_sampler_locate(&dd.train, g, &ep, &w);
		assert_true(w < 89);
	}
	expect_err(ds_sampler_get(&dd.test, 0, tok, &e), DS_EINVAL, &e, "big.txt", "no samples");
	ds_data_release(&dd);
	/* a separate validation set */
	o.valid_path = tpath("val.txt");
	OK(ds_data_open(&dd, &o, &e));
	assert_int_equal(dd.train.count, 99);
	assert_int_equal(dd.valid.count, 19);
	OK(ds_sampler_get(&dd.valid, 0, tok, &e));
	ds_data_release(&dd);
	/* bad token found by the up-front scan */
	text[500] = (char)0xff;
	put("big.txt", text, 1000);
	o.valid_path = NULL;
	o.vocab_size = 128;
	expect_err(ds_data_open(&dd, &o, &e), DS_EINVAL, &e, "big.txt: byte offset 500", "token id 255");
	/* no train windows left */
	o.vocab_size = 256;
	o.split = "0,1,0";
	expect_err(ds_data_open(&dd, &o, &e), DS_EINVAL, &e, "big.txt", "for training");
}

static void test_bundled(void **state)
{
	struct ds_dataset *d;
	struct ds_err e = DS_ERR_INIT;
	uint32_t t[16];
	(void)state;
	OK(ds_dataset_open(&d, ds_data_default_corpus(), DS_DATA_AUTO, &e));
	assert_string_equal(ds_dataset_format_name(d), "text");
	assert_int_equal(ds_dataset_num_tokens(d), 383157);  /* share/data/README */
	ds_dataset_set_vocab(d, 128);  /* plain ASCII */
	OK(ds_dataset_scan(d, &e));
	OK(ds_dataset_read(d, 0, 12, t, &e));
	assert_int_equal(t[0], ' ');
	ds_dataset_destroy(d);
}

/* Fixtures written by contrib/data/text2tokens.py (numpy, not our code) from
 * the first 5000 bytes of the corpus: the three readers agree token for
 * token.  devil5k.idx has 21 documents (paragraphs). */
static void test_python_fixtures(void **state)
{
	struct ds_dataset *txt, *mg, *lc;
	struct ds_err e = DS_ERR_INIT;
	static uint32_t a[5000], b[5000];
	(void)state;
	OK(ds_dataset_open(&txt, DS_TEST_SRC("share/data/devils-dictionary.txt"), DS_DATA_AUTO, &e));
	OK(ds_dataset_open(&mg, DS_TEST_SRC("tests/data/devil5k"), DS_DATA_AUTO, &e));
	OK(ds_dataset_open(&lc, DS_TEST_SRC("tests/data/devil5k_*.bin"), DS_DATA_AUTO, &e));
	assert_string_equal(ds_dataset_format_name(mg), "megatron");
	assert_string_equal(ds_dataset_format_name(lc), "llmc");
	assert_int_equal(ds_dataset_num_tokens(mg), 5000);
	assert_int_equal(ds_dataset_num_tokens(lc), 5000);
	OK(ds_dataset_read(txt, 0, 5000, a, &e));
	OK(ds_dataset_read(mg, 0, 5000, b, &e));
	assert_memory_equal(a, b, sizeof a);
	memset(b, 0, sizeof b);
	OK(ds_dataset_read(lc, 0, 5000, b, &e));  /* across the 3000-token shard boundary */
	assert_memory_equal(a, b, sizeof a);
	/* the same stream in three formats has one fingerprint */
	uint32_t f1, f2, f3;
	OK(ds_dataset_fingerprint(mg, &f1, &e));
	OK(ds_dataset_fingerprint(lc, &f2, &e));
	assert_int_equal(f1, f2);
	OK(ds_dataset_fingerprint(txt, &f3, &e));
	assert_int_not_equal(f1, f3);  /* the whole corpus is longer */
	ds_dataset_destroy(txt);
	ds_dataset_destroy(mg);
	ds_dataset_destroy(lc);
}

static void test_fingerprint(void **state)
{
	struct ds_dataset *d;
	struct ds_err e = DS_ERR_INIT;
	static char text[20000];
	uint32_t f0, f1;
	(void)state;
	for (size_t i = 0; i < sizeof text; i++)
		text[i] = (char)('A' + i % 23);
	put("fp.txt", text, sizeof text);
	OK(ds_dataset_open(&d, tpath("fp.txt"), DS_DATA_AUTO, &e));
	OK(ds_dataset_fingerprint(d, &f0, &e));
	ds_dataset_destroy(d);
	text[100] = 'z';  /* inside the first 4096 tokens */
	put("fp.txt", text, sizeof text);
	OK(ds_dataset_open(&d, tpath("fp.txt"), DS_DATA_AUTO, &e));
	OK(ds_dataset_fingerprint(d, &f1, &e));
	assert_int_not_equal(f0, f1);
	ds_dataset_destroy(d);
	text[100] = 'A' + 100 % 23;
	put("fp.txt", text, sizeof text - 1);  /* one token shorter */
	OK(ds_dataset_open(&d, tpath("fp.txt"), DS_DATA_AUTO, &e));
	OK(ds_dataset_fingerprint(d, &f1, &e));
	assert_int_not_equal(f0, f1);
	ds_dataset_destroy(d);
	put("fp.txt", text, sizeof text);  /* back to the original */
	OK(ds_dataset_open(&d, tpath("fp.txt"), DS_DATA_AUTO, &e));
	OK(ds_dataset_fingerprint(d, &f1, &e));
	assert_int_equal(f0, f1);
	ds_dataset_destroy(d);
}

/* ---- blends ------------------------------------------------------------ */

/* The greedy sequence of helpers.cpp build_blending_indices, worked by hand:
 * w x max(i, 1) - drawn per part, the largest wins, the first on a tie. */
static void test_blend_sequence(void **state)
{
	int part[20];
	uint64_t sample[20];
	(void)state;
	/* 1/4, 3/4: i=0 errors (.25, .75) -> 1; i=1 (.25, -.25) -> 0; i=2 (-.5, .5) -> 1;
	 * i=3 (-.25, .25) -> 1; i=4 (0, 0) -> 0 on the tie; then 0 1 1 1 every 4 */
	static const int p1[12] = { 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1 };
	static const uint64_t s1[12] = { 0, 0, 1, 2, 1, 3, 4, 5, 2, 6, 7, 8 };
	double w1[2] = { 0.25, 0.75 };
	ds_blend_sequence(w1, 2, 12, part, sample);
	for (int i = 0; i < 12; i++) {
		assert_int_equal(part[i], p1[i]);
		assert_int_equal(sample[i], s1[i]);
	}
	/* 1/2, 1/4, 1/4: 0 1 2 0 every 4 (ties at i = 1, 4 and 8 go to the lowest part) */
	static const int p2[8] = { 0, 1, 2, 0, 0, 1, 2, 0 };
	static const uint64_t s2[8] = { 0, 0, 0, 1, 2, 1, 1, 3 };
	double w2[3] = { 0.5, 0.25, 0.25 };
	ds_blend_sequence(w2, 3, 8, part, sample);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(part[i], p2[i]);
		assert_int_equal(sample[i], s2[i]);
	}
	/* NeoX's quirk: max(i, 1) makes i = 1 a tie at 0 for a weight of 0,
	 * so part 0 gets one sample although its weight is 0 */
	double w3[2] = { 0, 1 };
	ds_blend_sequence(w3, 2, 6, part, NULL);
	assert_int_equal(part[0], 1);
	assert_int_equal(part[1], 0);
	for (int i = 2; i < 6; i++)
		assert_int_equal(part[i], 1);
	/* 0.3, 0.7 (inexact in binary): the sequence a transcription of the
	 * C++ loop into Python gives */
	static const int p4[20] = { 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1 };
	double w4[2] = { 0.3, 0.7 };
	ds_blend_sequence(w4, 2, 20, part, sample);
	for (int i = 0; i < 20; i++)
		assert_int_equal(part[i], p4[i]);
	assert_int_equal(sample[19], 13);
}

/* NeoX's get_normalized_weights_and_num_samples and weights_by_num_docs;
 * the figures are what its Python functions give. */
static void test_blend_weights(void **state)
{
	struct ds_err e = DS_ERR_INIT;
	double w[3], norm[3];
	uint64_t cnt[3];
	(void)state;
	/* 1:3 over 8 steps of 8 samples: ceil(64 x 0.25 x 1.005) = 17, ceil(48.24) = 49 */
	w[0] = 1, w[1] = 3;
	OK(ds_blend_weights(w, 2, 64, norm, cnt, &e));
	assert_true(norm[0] == 0.25 && norm[1] == 0.75);
	assert_int_equal(cnt[0], 17);
	assert_int_equal(cnt[1], 49);
	w[0] = 1, w[1] = 2;  /* 1000/3 x 1.005 rounds to 334.99999999999994: ceil 335 */
	OK(ds_blend_weights(w, 2, 1000, norm, cnt, &e));
	assert_int_equal(cnt[0], 335);
	assert_int_equal(cnt[1], 670);
	w[0] = 2, w[1] = 1, w[2] = 1;
	OK(ds_blend_weights(w, 3, 80, norm, cnt, &e));
	assert_int_equal(cnt[0], 41);
	assert_int_equal(cnt[1], 21);
	assert_int_equal(cnt[2], 21);
	w[1] = -1;
	expect_err(ds_blend_weights(w, 3, 80, norm, cnt, &e), DS_EINVAL, &e, "blend weight 2 is -1", "non-negative");
	w[0] = w[1] = w[2] = 0;
	expect_err(ds_blend_weights(w, 3, 80, norm, cnt, &e), DS_EINVAL, &e, "sum to 0", NULL);
	/* by documents: NeoX's weights_by_num_docs([3, 21], alpha=0.3) and with alpha 1
	 * (p (1 - p) for two parts is the same for both: equal weights) */
	uint64_t docs[3] = { 3, 21, 0 };
	ds_blend_weights_by_docs(docs, 2, 0.3, w);
	assert_true(fabs(w[0] - 0.7961068136322248) < 1e-15 && fabs(w[1] - 0.20389318636777526) < 1e-15);
	ds_blend_weights_by_docs(docs, 2, 1.0, w);
	assert_true(fabs(w[0] - 0.5) < 1e-15 && fabs(w[1] - 0.5) < 1e-15);
	ds_blend_weights_by_docs(docs, 1, 0.3, w);
	assert_true(w[0] == 1.0);
}

/* Class of a token: 1 for the letters of a.txt, 2 for the digits of b.txt. */
static int klass(int32_t t)
{
	return t >= 'a' && t <= 'z' ? 1 : t >= '0' && t <= '9' ? 2 : 0;
}

/* --data "1 a.txt 3 b.txt": each sample's tokens come from the dataset the
 * sequence names, in the proportions of the weights; the order does not
 * depend on how the samples are asked for; past the blend's size each
 * dataset continues into new samples. */
static void test_blend_data(void **state)
{
	struct ds_data dd, da;
	struct ds_err e = DS_ERR_INIT;
	struct ds_data_opts o = { 0 };
	char a[401], b[401], spec[1200];
	int32_t tok[9], ref[9];
	int part[66];
	(void)state;
	for (int i = 0; i < 400; i++) {
		a[i] = (char)('a' + i % 26);
		b[i] = (char)('0' + i % 10);
	}
	put("a.txt", a, 400);
	put("b.txt", b, 400);
	snprintf(spec, sizeof spec, "1 %s 3 %s", tpath("a.txt"), tpath("b.txt"));
	o.path = spec;
	o.seq_length = 8;
	o.vocab_size = 256;
	o.seed = 3;
	o.split = "1,0,0";
	o.samples[0] = 64;  /* 8 steps of 8 */
	OK(ds_data_open(&dd, &o, &e));
	assert_non_null(dd.blend[0]);
	assert_null(dd.blend[1]);
	assert_int_equal(dd.nds, 2);
	/* 17 + 49 samples (NeoX's counts), the sequence of 1/4, 3/4 */
	assert_int_equal(dd.train.count, 66);
	assert_int_equal(ds_blend_size(dd.blend[0]), 66);
	double wt;
	uint64_t cnt;
	ds_blend_part(dd.blend[0], 1, &wt, &cnt);
	assert_true(wt == 0.75);
	assert_int_equal(cnt, 49);
	double w[2] = { 0.25, 0.75 };
	ds_blend_sequence(w, 2, 66, part, NULL);
	int drawn[3] = { 0, 0, 0 };
	for (uint64_t g = 0; g < 64; g++) {
		OK(ds_sampler_get(&dd.train, g, tok, &e));
		int k = klass(tok[0]);
		for (int j = 1; j < 9; j++)
			assert_int_equal(klass(tok[j]), k);
		assert_int_equal(k, part[g] + 1);
		drawn[k]++;
	}
	assert_int_equal(drawn[1], 16);
	assert_int_equal(drawn[2], 48);
	uint64_t dr[2];
	ds_blend_drawn(dd.blend[0], 64, dr);
	assert_int_equal(dr[0], 16);
	assert_int_equal(dr[1], 48);
	/* past the size: a.txt drew 17 samples in [0, 66) and its first at 1, so
	 * sample 66 + 1 is its sample 17 + 0: each dataset goes on where it stopped */
	int d;
	uint64_t k;
	ds_blend_locate(dd.blend[0], 67, &d, &k);
	assert_int_equal(d, 0);
	assert_int_equal(k, 17);
	ds_blend_drawn(dd.blend[0], 66 + 64, dr);
	assert_int_equal(dr[0], 17 + 16);
	/* the lookup replays from a stored row: the same answers backwards */
	OK(ds_sampler_get(&dd.train, 63, ref, &e));
	OK(ds_sampler_get(&dd.train, 5, tok, &e));
	OK(ds_sampler_get(&dd.train, 63, tok, &e));
	assert_memory_equal(tok, ref, sizeof tok);
	ds_data_release(&dd);
	/* the weight all on the first dataset: exactly --data a.txt alone */
	snprintf(spec, sizeof spec, "1 %s 0 %s", tpath("a.txt"), tpath("b.txt"));
	OK(ds_data_open(&dd, &o, &e));
	o.path = tpath("a.txt");
	OK(ds_data_open(&da, &o, &e));
	for (uint64_t g = 0; g < 200; g++) {
		OK(ds_sampler_get(&dd.train, g, tok, &e));
		OK(ds_sampler_get(&da.train, g, ref, &e));
		assert_memory_equal(tok, ref, sizeof tok);
	}
	ds_data_release(&dd);
	ds_data_release(&da);
	/* a split blend: the valid parts of both, in the weights' proportions */
	snprintf(spec, sizeof spec, "0.5 %s 0.5 %s", tpath("a.txt"), tpath("b.txt"));
	o.path = spec;
	o.split = "8,2,0";
	o.samples[1] = 40;
	OK(ds_data_open(&dd, &o, &e));
	assert_non_null(dd.blend[1]);
	assert_null(dd.blend[2]);  /* no test windows: empty */
	assert_int_equal(dd.test.count, 0);
	memset(drawn, 0, sizeof drawn);
	for (uint64_t g = 0; g < 40; g++) {
		uint64_t ep, win;
		OK(ds_sampler_get(&dd.valid, g, tok, &e));
		drawn[klass(tok[0])]++;
		ds_sampler_locate(&dd.valid, g, &ep, &win);
		assert_true(win >= 39 && win < 49);  /* 49 windows: 8,2,0 -> train [0, 39), valid [39, 49) */
	}
	assert_int_equal(drawn[1], 20);
	assert_int_equal(drawn[2], 20);
	ds_data_release(&dd);
	o.samples[1] = 0;
	/* separate valid and test blends */
	o.split = NULL;
	o.path = tpath("a.txt");
	o.valid_path = spec;
	o.test_path = spec;
	OK(ds_data_open(&dd, &o, &e));
	assert_null(dd.blend[0]);
	assert_non_null(dd.blend[1]);
	assert_non_null(dd.blend[2]);
	assert_int_equal(dd.nds, 5);
	assert_int_equal(dd.valid.count, 2 * 50);  /* one epoch of each (49 windows) x 1.005, rounded up */
	ds_data_release(&dd);
	o.valid_path = o.test_path = NULL;
}

static void test_blend_bad(void **state)
{
	struct ds_data dd;
	struct ds_err e = DS_ERR_INIT;
	struct ds_data_opts o = { 0 };
	char spec[1200];
	(void)state;
	o.seq_length = 8;
	o.vocab_size = 256;
	o.path = spec;
	snprintf(spec, sizeof spec, "1 %s 2", tpath("a.txt"));
	expect_err(ds_data_open(&dd, &o, &e), DS_EINVAL, &e, "data blend", "an odd number of words");
	snprintf(spec, sizeof spec, "1 %s -2 %s", tpath("a.txt"), tpath("b.txt"));
	expect_err(ds_data_open(&dd, &o, &e), DS_EINVAL, &e, "word 3 '-2' is not a weight", NULL);
	snprintf(spec, sizeof spec, "0 %s 0 %s", tpath("a.txt"), tpath("b.txt"));
	expect_err(ds_data_open(&dd, &o, &e), DS_EINVAL, &e, "sum to 0", NULL);
	snprintf(spec, sizeof spec, "1 %s 1 %s", tpath("a.txt"), tpath("nothere"));
	expect_err(ds_data_open(&dd, &o, &e), DS_EINVAL, &e, "nothere: no such file", NULL);
	/* a path with a space that does not start with a number is one path */
	snprintf(spec, sizeof spec, "%s", tpath("with space.txt"));
	put("with space.txt", "0123456789abcdef0123", 20);
	OK(ds_data_open(&dd, &o, &e));
	assert_null(dd.blend[0]);
	ds_data_release(&dd);
	/* weights from document counts need a document index */
	o.weight_by_docs = 1;
	o.alpha = 0.3;
	snprintf(spec, sizeof spec, "1 %s 1 %s", tpath("a.txt"), tpath("b.txt"));
	expect_err(ds_data_open(&dd, &o, &e), DS_EINVAL, &e, "a.txt: a text dataset has no document index",
		   "weight_by_num_documents");
}

/* weight_by_num_documents: a 3-document and the 21-document Megatron set,
 * weighted as NeoX's weights_by_num_docs([3, 21], 0.3) says: 0.796 / 0.204. */
static void test_blend_docs(void **state)
{
	struct ds_data dd;
	struct ds_err e = DS_ERR_INIT;
	struct ds_data_opts o = { 0 };
	char spec[1200];
	(void)state;
	make_megatron("m3", 8);
	snprintf(spec, sizeof spec, "1 %s 1 %s", tpath("m3"), DS_TEST_SRC("tests/data/devil5k"));
	o.path = spec;
	o.seq_length = 4;
	o.seed = 1;
	o.split = "1,0,0";
	o.samples[0] = 100;
	o.weight_by_docs = 1;
	o.alpha = 0.3;
	OK(ds_data_open(&dd, &o, &e));
	double w0, w1;
	uint64_t c0, c1;
	ds_blend_part(dd.blend[0], 0, &w0, &c0);
	ds_blend_part(dd.blend[0], 1, &w1, &c1);
	assert_true(fabs(w0 - 0.7961068136322248) < 1e-15);
	assert_true(fabs(w1 - 0.20389318636777526) < 1e-15);
	assert_int_equal(c0, 81);
	assert_int_equal(c1, 21);
	ds_data_release(&dd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_text),
		cmocka_unit_test(test_megatron),
		cmocka_unit_test(test_llmc),
		cmocka_unit_test(test_missing),
		cmocka_unit_test(test_bad_idx),
		cmocka_unit_test(test_bad_llmc),
		cmocka_unit_test(test_vocab),
		cmocka_unit_test(test_too_short),
		cmocka_unit_test(test_permute),
		cmocka_unit_test(test_sampler),
		cmocka_unit_test(test_split),
		cmocka_unit_test(test_data_open),
		cmocka_unit_test(test_bundled),
		cmocka_unit_test(test_python_fixtures),
		cmocka_unit_test(test_fingerprint),
		cmocka_unit_test(test_blend_sequence),
		cmocka_unit_test(test_blend_weights),
		cmocka_unit_test(test_blend_data),
		cmocka_unit_test(test_blend_bad),
		cmocka_unit_test(test_blend_docs),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
