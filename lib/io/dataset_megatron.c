/* dataset_megatron.c - the Megatron/GPT-NeoX indexed dataset (MMIDIDX).
 *
 * prefix.idx (little-endian, 34-byte header, arrays unaligned):
 *   @0 "MMIDIDX\0\0"  @9 u64 version=1  @17 u8 dtype  @18 u64 S  @26 u64 D
 *   @34 int32 sizes[S], int64 pointers[S] (byte offsets in .bin), int64 doc_idx[D]
 * prefix.bin: the tokens of all sequences back to back.  We check that the
 * pointers are the prefix sums of sizes (as every Megatron/NeoX writer makes
 * them), so the token stream is simply the .bin read from offset 0.
 */
#include "io/dataset_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IDX_HDR 34

struct megatron {
	struct ds_dataset_map idx, bin;
	int type;         /* DS_TOK_* */
	size_t itemsize;
	uint64_t ntok;
	uint64_t nseq, ndoc;
};

static uint64_t le64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static int32_t le32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }

static int check_idx(struct megatron *g, struct ds_err *err)
{
	const uint8_t *p = g->idx.p;
	const char *f = g->idx.file;
	uint64_t ver, S, D, need, run = 0;
	int code;
	if (g->idx.size < IDX_HDR)
		return ds_err_set(err, DS_ECORRUPT, "%s: %zu bytes, shorter than the %d-byte MMIDIDX header (truncated)",
				  f, g->idx.size, IDX_HDR);
	if (memcmp(p, "MMIDIDX\0\0", 9) != 0) {
		if (memcmp(p, "TNTIDX\0\0", 8) == 0)
			return ds_err_set(err, DS_ECORRUPT, "%s: byte offset 0: legacy TNTIDX index (lazy/cached format) "
					  "is not supported; re-run preprocess_data.py with --dataset-impl mmap", f);
		return ds_err_set(err, DS_ECORRUPT, "%s: byte offset 0: bad magic, not a Megatron MMIDIDX index", f);
	}
	ver = le64(p + 9);
	if (ver != 1)
		return ds_err_set(err, DS_ECORRUPT, "%s: byte offset 9: version %llu, expected 1", f,
				  (unsigned long long)ver);
	code = p[17];
	if (code == 6 || code == 7 || !ds_dataset_tok_size(code) || code == DS_TOK_U32)
		return ds_err_set(err, DS_ECORRUPT, "%s: byte offset 17: dtype code %d is not an integer token type "
				  "(1 u8, 2 i8, 3 i16, 4 i32, 5 i64, 8 u16)", f, code);
	g->type = code;
	g->itemsize = ds_dataset_tok_size(code);
	S = le64(p + 18);
	D = le64(p + 26);
	if (S > (1ull << 56) || D > (1ull << 56) ||
	    (need = IDX_HDR + 12 * S + 8 * D) > g->idx.size)
		return ds_err_set(err, DS_ECORRUPT, "%s: header says %llu sequences and %llu doc_idx entries, needing "
				  "%llu bytes, but the file has %zu (truncated or corrupt .idx)", f,
				  (unsigned long long)S, (unsigned long long)D,
				  S > (1ull << 56) || D > (1ull << 56) ? 0ull : (unsigned long long)(IDX_HDR + 12 * S + 8 * D),
				  g->idx.size);
	g->nseq = S;
	g->ndoc = D;
	for (uint64_t i = 0; i < S; i++) {
		int32_t sz = le32(p + IDX_HDR + 4 * i);
		uint64_t ptr = le64(p + IDX_HDR + 4 * S + 8 * i);
		if (sz < 0)
			return ds_err_set(err, DS_ECORRUPT, "%s: byte offset %llu: sizes[%llu] = %d is negative", f,
					  (unsigned long long)(IDX_HDR + 4 * i), (unsigned long long)i, sz);
		if (ptr != run)
			return ds_err_set(err, DS_ECORRUPT, "%s: byte offset %llu: pointers[%llu] = %llu, expected %llu "
					  "(the prefix sum of sizes x %zu bytes)", f,
					  (unsigned long long)(IDX_HDR + 4 * S + 8 * i), (unsigned long long)i,
					  (unsigned long long)ptr, (unsigned long long)run, g->itemsize);
		run += (uint64_t)sz * g->itemsize;
	}
	const uint8_t *di = p + IDX_HDR + 12 * S;
	uint64_t prev = 0;
	for (uint64_t j = 0; j < D; j++) {
		uint64_t v = le64(di + 8 * j);
		if ((j == 0 && v != 0) || v < prev || v > S || (j == D - 1 && v != S))
			return ds_err_set(err, DS_ECORRUPT, "%s: byte offset %llu: doc_idx[%llu] = %llu is not a valid "
					  "document boundary (must rise from 0 to %llu)", f,
					  (unsigned long long)(IDX_HDR + 12 * S + 8 * j), (unsigned long long)j,
					  (unsigned long long)v, (unsigned long long)S);
		prev = v;
	}
	if (run > g->bin.size)
		return ds_err_set(err, DS_ECORRUPT, "%s: %zu bytes, but %s describes %llu bytes of tokens (truncated .bin)",
				  g->bin.file, g->bin.size, f, (unsigned long long)run);
	g->ntok = run / g->itemsize;
	return 0;
}

static int megatron_open(struct ds_dataset *d, const char *path, struct ds_err *err)
{
	struct megatron *g = calloc(1, sizeof *g);
	size_t n = strlen(path);
	char *pre = malloc(n + 5);
	int rc;
	if (!g || !pre) {
		free(g);
		free(pre);
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", path);
	}
	memcpy(pre, path, n + 1);
	if (n > 4 && (strcmp(pre + n - 4, ".idx") == 0 || strcmp(pre + n - 4, ".bin") == 0))
		pre[n -= 4] = '\0';
	strcpy(pre + n, ".idx");
	rc = ds_dataset_map_open(&g->idx, pre, err);
	if (rc == 0) {
		strcpy(pre + n, ".bin");
		rc = ds_dataset_map_open(&g->bin, pre, err);
	}
	if (rc == 0 && (rc = check_idx(g, err)) == DS_ECORRUPT && err) {
		size_t l = strlen(err->msg);
		snprintf(err->msg + l, sizeof err->msg - l, "; re-create it with Megatron/GPT-NeoX preprocess_data.py");
	}
	free(pre);
	if (rc < 0) {
		ds_dataset_map_close(&g->idx);
		ds_dataset_map_close(&g->bin);
		free(g);
		return rc;
	}
	d->priv = g;
	return 0;
}

static uint64_t megatron_num_tokens(const struct ds_dataset *d)
{
	return ((const struct megatron *)d->priv)->ntok;
}

static void megatron_read(const struct ds_dataset *d, uint64_t off, size_t n, uint32_t *out)
{
	const struct megatron *g = d->priv;
	ds_dataset_tok_convert(g->type, g->bin.p + off * g->itemsize, n, out);
}

static void megatron_where(const struct ds_dataset *d, uint64_t off, const char **file, uint64_t *byte_off)
{
	const struct megatron *g = d->priv;
	*file = g->bin.file;
	*byte_off = off * g->itemsize;
}

/* NeoX's weight_by_num_documents counts indexed_dataset.sizes.shape[0]:
 * the sequences (one per document as preprocess_data.py writes them). */
static uint64_t megatron_num_docs(const struct ds_dataset *d)
{
	return ((const struct megatron *)d->priv)->nseq;
}

static void megatron_close(struct ds_dataset *d)
{
	struct megatron *g = d->priv;
	if (!g)
		return;
	ds_dataset_map_close(&g->idx);
	ds_dataset_map_close(&g->bin);
	free(g);
	d->priv = NULL;
}

const struct ds_dataset_ops ds_dataset_megatron_ops = {
	.name = "megatron",
	.open = megatron_open,
	.num_tokens = megatron_num_tokens,
	.read = megatron_read,
	.where = megatron_where,
	.num_docs = megatron_num_docs,
	.close = megatron_close,
};
