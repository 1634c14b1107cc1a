/* dataset_llmc.c - llm.c token shards, concatenated in order.
 *
 * Each shard: 256 x int32 header, [0] magic 20240520, [1] version 1, [2]
 * token count, then uint16 tokens; the llama-3 variant (20240801, version 7)
 * has uint32 tokens.  The file size must be exactly 1024 + itemsize * count.
 * The path is one shard, a glob (sorted, as llm.c's dataloader) or a
 * comma-separated list.
 */
#include "io/dataset_int.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LLMC_HDR 1024

struct shard {
	struct ds_dataset_map m;
	int type;           /* DS_TOK_U16 or DS_TOK_U32 */
	uint64_t first;     /* stream offset of its first token */
	uint64_t ntok;
};

struct llmc {
	struct shard *sh;
	size_t n;
	uint64_t ntok;
};

static int open_shard(struct shard *s, const char *file, struct ds_err *err)
{
	int32_t h[3];
	size_t es;
	DS_TRY(ds_dataset_map_open(&s->m, file, err));
	if (s->m.size < LLMC_HDR)
		return ds_err_set(err, DS_ECORRUPT, "%s: %zu bytes, shorter than the 1024-byte llm.c shard header "
				  "(truncated)", file, s->m.size);
	memcpy(h, s->m.p, sizeof h);
	if (h[0] == 20240520 && h[1] == 1)
		s->type = DS_TOK_U16;
	else if (h[0] == 20240801 && h[1] == 7)
		s->type = DS_TOK_U32;
	else if (h[0] == 20240520 || h[0] == 20240801)
		return ds_err_set(err, DS_ECORRUPT, "%s: byte offset 4: version %d not supported for magic %d "
				  "(20240520 needs 1, 20240801 needs 7)", file, h[1], h[0]);
	else
		return ds_err_set(err, DS_ECORRUPT, "%s: byte offset 0: bad magic %d, not an llm.c token shard "
				  "(expected 20240520)", file, h[0]);
	es = ds_dataset_tok_size(s->type);
	if (h[2] < 0 || (uint64_t)LLMC_HDR + es * (uint64_t)h[2] != s->m.size)
		return ds_err_set(err, DS_ECORRUPT, "%s: byte offset 8: header says %d tokens (%llu bytes with the "
				  "header) but the file has %zu bytes (truncated or corrupt shard)", file, h[2],
				  (unsigned long long)(LLMC_HDR + es * (uint64_t)(h[2] < 0 ? 0 : h[2])), s->m.size);
	s->ntok = (uint64_t)h[2];
	return 0;
}

static void llmc_free(struct llmc *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		ds_dataset_map_close(&l->sh[i].m);
	free(l->sh);
	free(l);
}

static int llmc_open(struct ds_dataset *d, const char *path, struct ds_err *err)
{
	struct llmc *l = calloc(1, sizeof *l);
	char **names = NULL, *copy = NULL;
	size_t nn = 0;
	glob_t gl;
	int globbed = 0, rc = 0;
	if (!l)
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", path);
	if (strchr(path, ',')) {
		char *tok, *save = NULL;
		copy = strdup(path);
		names = calloc(strlen(path) / 2 + 2, sizeof *names);
		if (!copy || !names) {
			rc = ds_err_set(err, DS_ENOMEM, "%s: out of memory", path);
			goto out;
		}
		for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
			names[nn++] = tok;
	} else if (strpbrk(path, "*?[")) {
		int g = glob(path, 0, NULL, &gl);
		if (g == GLOB_NOMATCH) {
			rc = ds_err_set(err, DS_EINVAL, "%s: no llm.c shard matches this pattern", path);
			goto out;
		}
		if (g != 0) {
			rc = ds_err_set(err, DS_EIO, "%s: glob failed", path);
			goto out;
		}
		globbed = 1;
		names = gl.gl_pathv;
		nn = gl.gl_pathc;
	} else {
		copy = strdup(path);
		names = calloc(1, sizeof *names);
		if (!copy || !names) {
			rc = ds_err_set(err, DS_ENOMEM, "%s: out of memory", path);
			goto out;
		}
		names[nn++] = copy;
	}
	if (nn == 0) {
		rc = ds_err_set(err, DS_EINVAL, "%s: no llm.c shard given", path);
		goto out;
	}
	l->sh = calloc(nn, sizeof *l->sh);
	if (!l->sh) {
		rc = ds_err_set(err, DS_ENOMEM, "%s: out of memory", path);
		goto out;
	}
	for (size_t i = 0; i < nn && rc == 0; i++) {
		rc = open_shard(&l->sh[i], names[i], err);
		if (rc == DS_ECORRUPT && err) {
			size_t n = strlen(err->msg);
			snprintf(err->msg + n, sizeof err->msg - n, "; re-create it with llm.c's data scripts");
		}
		l->n = i + 1;
		l->sh[i].first = l->ntok;
		l->ntok += l->sh[i].ntok;
	}
out:
	if (globbed)
		globfree(&gl);
	else
		free(names);
	free(copy);
	if (rc < 0) {
		llmc_free(l);
		return rc;
	}
	d->priv = l;
	return 0;
}

static uint64_t llmc_num_tokens(const struct ds_dataset *d)
{
	return ((const struct llmc *)d->priv)->ntok;
}

/* Index of the shard holding stream token off (shards may be empty). */
static size_t find(const struct llmc *l, uint64_t off)
{
	size_t lo = 0, hi = l->n;
	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;
		if (l->sh[mid].first <= off)
			lo = mid;
		else
			hi = mid;
	}
	while (lo + 1 < l->n && off >= l->sh[lo].first + l->sh[lo].ntok)
		lo++;
	return lo;
}

static void llmc_read(const struct ds_dataset *d, uint64_t off, size_t n, uint32_t *out)
{
	const struct llmc *l = d->priv;
	size_t i = find(l, off);
	while (n > 0) {
		const struct shard *s = &l->sh[i++];
		uint64_t in = off - s->first, take = s->ntok - in;
		if (take > n)
			take = n;
		ds_dataset_tok_convert(s->type, s->m.p + LLMC_HDR + in * ds_dataset_tok_size(s->type), (size_t)take, out);
		out += take;
		off += take;
		n -= (size_t)take;
	}
}

static void llmc_where(const struct ds_dataset *d, uint64_t off, const char **file, uint64_t *byte_off)
{
	const struct llmc *l = d->priv;
	const struct shard *s = &l->sh[find(l, off)];
	*file = s->m.file;
	*byte_off = LLMC_HDR + (off - s->first) * ds_dataset_tok_size(s->type);
}

static void llmc_close(struct ds_dataset *d)
{
	llmc_free(d->priv);
	d->priv = NULL;
}

const struct ds_dataset_ops ds_dataset_llmc_ops = {
	.name = "llmc",
	.open = llmc_open,
	.num_tokens = llmc_num_tokens,
	.read = llmc_read,
	.where = llmc_where,
	.close = llmc_close,
};
