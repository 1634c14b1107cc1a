/* dataset.c - the dataset interface: format detection, checked reads, the
 * window sampler with its per-epoch permutation, and Megatron's split.
 * The readers live in dataset_text.c, dataset_megatron.c, dataset_llmc.c.
 */
#include "io/dataset.h"
#include "io/dataset_int.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/crc32c.h"
#include "util/rng.h"

const struct ds_dataset_ops *const ds_dataset_all[] = {
	&ds_dataset_text_ops, &ds_dataset_megatron_ops, &ds_dataset_llmc_ops, NULL
};

/* ---- file maps and token types --------------------------------------- */

int ds_dataset_map_open(struct ds_dataset_map *m, const char *file, struct ds_err *err)
{
	struct stat st;
	int fd;
	memset(m, 0, sizeof *m);
	fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return ds_err_set(err, DS_EINVAL, "%s: no such file", file);
		return ds_err_set(err, DS_EINVAL, "%s: cannot open: %s", file, strerror(errno));
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return ds_err_set(err, DS_EINVAL, "%s: not a regular file", file);
	}
	m->size = (size_t)st.st_size;
	if (m->size > 0) {
		void *p = mmap(NULL, m->size, PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			int e = errno;
			close(fd);
			return ds_err_set(err, DS_EIO, "%s: mmap of %zu bytes failed: %s", file, m->size, strerror(e));
		}
		m->p = p;
	}
	close(fd);
	m->file = strdup(file);
	if (!m->file) {
		ds_dataset_map_close(m);
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", file);
	}
	return 0;
}

void ds_dataset_map_close(struct ds_dataset_map *m)
{
	if (m->p)
		munmap((void *)m->p, m->size);
	free(m->file);
	memset(m, 0, sizeof *m);
}

size_t ds_dataset_tok_size(int type)
{
	switch (type) {
	case DS_TOK_U8: case DS_TOK_I8: return 1;
	case DS_TOK_I16: case DS_TOK_U16: return 2;
	case DS_TOK_I32: case DS_TOK_U32: return 4;
	case DS_TOK_I64: return 8;
	default: return 0;
	}
}

void ds_dataset_tok_convert(int type, const uint8_t *src, size_t n, uint32_t *out)
{
	size_t i;
	/* The host is little-endian (x86-64, aarch64), as the files are. */
	switch (type) {
	case DS_TOK_U8:
		for (i = 0; i < n; i++) out[i] = src[i];
		break;
	case DS_TOK_I8:
		for (i = 0; i < n; i++) { int8_t v = (int8_t)src[i]; out[i] = v < 0 ? UINT32_MAX : (uint32_t)v; }
		break;
	case DS_TOK_U16:
		for (i = 0; i < n; i++) { uint16_t v; memcpy(&v, src + 2 * i, 2); out[i] = v; }
		break;
	case DS_TOK_I16:
		for (i = 0; i < n; i++) { int16_t v; memcpy(&v, src + 2 * i, 2); out[i] = v < 0 ? UINT32_MAX : (uint32_t)v; }
		break;
	case DS_TOK_U32:
		memcpy(out, src, 4 * n);
		break;
	case DS_TOK_I32:
		for (i = 0; i < n; i++) { int32_t v; memcpy(&v, src + 4 * i, 4); out[i] = v < 0 ? UINT32_MAX : (uint32_t)v; }
		break;
	case DS_TOK_I64:
		for (i = 0; i < n; i++) {
			int64_t v; memcpy(&v, src + 8 * i, 8);
			out[i] = (v < 0 || v > (int64_t)UINT32_MAX) ? UINT32_MAX : (uint32_t)v;
		}
		break;
	}
}

int ds_data_format_parse(const char *name, int *out, struct ds_err *err)
{
	static const char *const names[] = { "auto", "text", "megatron", "llmc" };
	for (int i = 0; i < 4; i++)
		if (name && strcmp(name, names[i]) == 0) {
			*out = i;
			return 0;
		}
	return ds_err_set(err, DS_EINVAL, "data format '%s': use auto, text, megatron or llmc", name ? name : "");
}

/* ---- open: detection --------------------------------------------------- */

static int file_exists(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char *s, const char *suf)
{
	size_t n = strlen(s), m = strlen(suf);
	return n >= m && strcmp(s + n - m, suf) == 0;
}

static int detect(const char *path)
{
	char buf[4096];
	if (strpbrk(path, ",*?["))
		return DS_DATA_LLMC;
	if (ends_with(path, ".idx"))
		return DS_DATA_MEGATRON;
	if (strlen(path) + 5 < sizeof buf) {
		snprintf(buf, sizeof buf, "%s.idx", path);
		if (file_exists(buf))
			return DS_DATA_MEGATRON;
		if (ends_with(path, ".bin")) {
			snprintf(buf, sizeof buf, "%.*s.idx", (int)(strlen(path) - 4), path);
			if (file_exists(buf))
				return DS_DATA_MEGATRON;
		}
	}
	if (file_exists(path)) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		int32_t magic = 0;
		if (fd >= 0) {
			if (read(fd, &magic, 4) != 4)
				magic = 0;
			close(fd);
		}
		if (magic == 20240520 || magic == 20240801)
			return DS_DATA_LLMC;
		return DS_DATA_TEXT;
	}
	return -1;
}

int ds_dataset_open(struct ds_dataset **out, const char *path, int format, struct ds_err *err)
{
	struct ds_dataset *d;
	int rc;
	*out = NULL;
	if (!path || !*path)
		return ds_err_set(err, DS_EINVAL, "no dataset given: pass --data PATH");
	if (format == DS_DATA_AUTO) {
		struct stat st;
		format = detect(path);
		if (format < 0 && stat(path, &st) == 0)  /* there, but not a file to read */
			return ds_err_set(err, DS_EINVAL, "%s: %s, not a data file; give a text file, a Megatron prefix "
					  "(PREFIX for PREFIX.bin + PREFIX.idx) or llm.c shards ('%s/*.bin')", path,
					  S_ISDIR(st.st_mode) ? "a directory" : S_ISCHR(st.st_mode) ? "a character device"
					  : S_ISBLK(st.st_mode) ? "a block device" : S_ISFIFO(st.st_mode) ? "a pipe"
					  : "not a regular file", S_ISDIR(st.st_mode) ? path : "DIR");
		if (format < 0)
			return ds_err_set(err, DS_EINVAL, "%s: no such file (nor a Megatron prefix %s.bin/.idx); "
					  "give a text file, a Megatron prefix or llm.c shards", path, path);
	}
	d = calloc(1, sizeof *d);
	if (!d || !(d->path = strdup(path))) {
		free(d);
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", path);
	}
	switch (format) {
	case DS_DATA_TEXT: d->ops = &ds_dataset_text_ops; break;
	case DS_DATA_MEGATRON: d->ops = &ds_dataset_megatron_ops; break;
	case DS_DATA_LLMC: d->ops = &ds_dataset_llmc_ops; break;
	default:
		free(d->path);
		free(d);
		return ds_err_set(err, DS_EINVAL, "%s: unknown dataset format %d", path, format);
	}
	rc = d->ops->open(d, path, err);
	if (rc < 0) {
		free(d->path);
		free(d);
		return rc;
	}
	*out = d;
	return 0;
}

const char *ds_data_default_corpus(void)
{
	static const char installed[] = DS_DATADIR "/data/devils-dictionary.txt";
	static const char source[] = DS_SRCDIR "/share/data/devils-dictionary.txt";
	return file_exists(installed) ? installed : source;
}

void ds_dataset_destroy(struct ds_dataset *d)
{
	if (!d)
		return;
	d->ops->close(d);
	free(d->path);
	free(d);
}

uint64_t ds_dataset_num_tokens(const struct ds_dataset *d) { return d->ops->num_tokens(d); }

int ds_dataset_num_docs(const struct ds_dataset *d, uint64_t *out, struct ds_err *err)
{
	*out = 0;
	if (!d->ops->num_docs)
		return ds_err_set(err, DS_EINVAL, "%s: a %s dataset has no document index to weigh a blend by "
				  "(weight_by_num_documents); use Megatron/GPT-NeoX .bin/.idx data or give weights",
				  d->path, d->ops->name);
	*out = d->ops->num_docs(d);
	return 0;
}
const char *ds_dataset_format_name(const struct ds_dataset *d) { return d->ops->name; }
const char *ds_dataset_path(const struct ds_dataset *d) { return d->path; }
void ds_dataset_set_vocab(struct ds_dataset *d, uint64_t vocab_size) { d->vocab_size = vocab_size; }

/* ---- checked reads ---------------------------------------------------- */

static int bad_token(const struct ds_dataset *d, uint64_t off, uint32_t v, struct ds_err *err)
{
	const char *file;
	uint64_t boff;
	d->ops->where(d, off, &file, &boff);
	if (v == UINT32_MAX)
		return ds_err_set(err, DS_EINVAL, "%s: byte offset %llu (token %llu of the stream): negative or "
				  "out-of-range token id, vocab_size is %llu", file, (unsigned long long)boff,
				  (unsigned long long)off, (unsigned long long)d->vocab_size);
	return ds_err_set(err, DS_EINVAL, "%s: byte offset %llu (token %llu of the stream): token id %u >= "
			  "vocab_size %llu; use a model with a larger vocab_size or the matching tokenizer",
			  file, (unsigned long long)boff, (unsigned long long)off, v,
			  (unsigned long long)d->vocab_size);
}

int ds_dataset_read(const struct ds_dataset *d, uint64_t off, size_t n, uint32_t *out, struct ds_err *err)
{
	uint64_t nt = d->ops->num_tokens(d);
	if (off > nt || n > nt - off)
		return ds_err_set(err, DS_EINVAL, "%s: tokens [%llu, %llu) past the end (%llu tokens)", d->path,
				  (unsigned long long)off, (unsigned long long)(off + n), (unsigned long long)nt);
	if (n == 0)
		return 0;
	d->ops->read(d, off, n, out);
	if (d->vocab_size) {
		/* a max first (vectorises), the position only when it fails */
		uint32_t mx = 0;
		for (size_t i = 0; i < n; i++)
			mx = out[i] > mx ? out[i] : mx;
		if (mx >= d->vocab_size)
			for (size_t i = 0; i < n; i++)
				if (out[i] >= d->vocab_size)
					return bad_token(d, off + i, out[i], err);
	}
	return 0;
}

int ds_dataset_read_i32(const struct ds_dataset *d, uint64_t off, size_t n, int32_t *out, struct ds_err *err)
{
	int rc = ds_dataset_read(d, off, n, (uint32_t *)out, err);
	if (rc < 0)
		return rc;
	if (!d->vocab_size || d->vocab_size > (uint64_t)INT32_MAX + 1) {
		for (size_t i = 0; i < n; i++)
			if ((uint32_t)out[i] > (uint32_t)INT32_MAX)
				return bad_token(d, off + i, UINT32_MAX, err);
	}
	return 0;
}

int ds_dataset_scan(const struct ds_dataset *d, struct ds_err *err)
{
	enum { BLK = 1 << 16 };
	uint32_t *buf;
	uint64_t nt = d->ops->num_tokens(d), off;
	int rc = 0;
	if (!d->vocab_size)
		return 0;
	buf = malloc(BLK * sizeof *buf);
	if (!buf)
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", d->path);
	for (off = 0; off < nt && rc == 0; off += BLK) {
		size_t n = nt - off < BLK ? (size_t)(nt - off) : BLK;
		rc = ds_dataset_read(d, off, n, buf, err);
	}
	free(buf);
	return rc;
}

int ds_dataset_fingerprint(const struct ds_dataset *d, uint32_t *out, struct ds_err *err)
{
	enum { EDGE = 4096 };
	uint32_t *buf = malloc(EDGE * sizeof *buf), crc;
	uint64_t nt = d->ops->num_tokens(d), le = nt;
	size_t n = nt < EDGE ? (size_t)nt : EDGE;
	if (!buf)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	crc = ds_crc32c(0, &le, sizeof le);
	/* raw tokens: the fingerprint must not depend on the vocab check */
	if (n) {
		d->ops->read(d, 0, n, buf);
		crc = ds_crc32c(crc, buf, n * sizeof *buf);
		d->ops->read(d, nt - n, n, buf);
		crc = ds_crc32c(crc, buf, n * sizeof *buf);
	}
	free(buf);
	*out = crc;
	return 0;
}

/* ---- the permutation ---------------------------------------------------
 * A balanced Feistel network on 2k bits (2^2k >= n, so at most 4n) with
 * Philox as the round function is a pseudo-random permutation of [0, 2^2k);
 * cycle-walking (apply again while the value is >= n) restricts it to a
 * permutation of [0, n).  Expected walks < 4; O(1) memory.
 */
enum { FEISTEL_ROUNDS = 6 };

uint64_t ds_data_permute(uint64_t i, uint64_t n, uint64_t seed, uint32_t stream, uint64_t epoch)
{
	struct ds_rng r[FEISTEL_ROUNDS];
	unsigned bits = 2, half;
	uint64_t mask, x = i;
	if (n <= 1 || i >= n)
		return i;
	while (bits < 64 && (n - 1) >> bits)
		bits++;
	bits += bits & 1;
	half = bits / 2;
	mask = half >= 64 ? UINT64_MAX : (1ull << half) - 1;
	for (int k = 0; k < FEISTEL_ROUNDS; k++)
		ds_rng_init(&r[k], seed, epoch, ((uint64_t)stream << 8) | (uint64_t)k);
	do {
		uint64_t L = x >> half, R = x & mask;
		for (int k = 0; k < FEISTEL_ROUNDS; k++) {
			uint32_t o[4];
			ds_rng_block(&r[k], R, o);
			uint64_t f = (((uint64_t)o[1] << 32) | o[0]) & mask;
			uint64_t t = L ^ f;
			L = R;
			R = t;
		}
		x = (L << half) | R;
	} while (x >= n);
	return x;
}

/* ---- windows, split, sampler --------------------------------------------- */

int ds_dataset_num_windows(const struct ds_dataset *d, uint64_t T, uint64_t *out, struct ds_err *err)
{
	uint64_t nt = ds_dataset_num_tokens(d);
	*out = 0;
	if (T == 0)
		return ds_err_set(err, DS_EINVAL, "seq_length must be > 0");
	if (nt < T + 1)
		return ds_err_set(err, DS_EINVAL, "%s: the %s dataset has %llu tokens, but one sample of seq_length %llu "
				  "needs %llu; use more data or a smaller seq_length", d->path, d->ops->name,
				  (unsigned long long)nt, (unsigned long long)T, (unsigned long long)(T + 1));
	*out = (nt - 1) / T;
	return 0;
}

int ds_data_split_parse(const char *split, uint64_t n, uint64_t begin[3], uint64_t end[3], struct ds_err *err)
{
	double w[3] = { 0, 0, 0 }, sum = 0;
	int64_t idx[4];
	const char *p = split;
	int k = 0;
	if (!split || !*split)
		return ds_err_set(err, DS_EINVAL, "split: empty; give weights like \"949,50,1\"");
	while (*p) {
		char *e;
		double v;
		if (k == 3)
			return ds_err_set(err, DS_EINVAL, "split \"%s\": more than three weights (train,valid,test)", split);
		errno = 0;
		v = strtod(p, &e);
		if (e == p || errno || !isfinite(v) || v < 0)
			return ds_err_set(err, DS_EINVAL, "split \"%s\": bad weight at offset %d; give non-negative numbers "
					  "like \"949,50,1\"", split, (int)(p - split));
		w[k++] = v;
		sum += v;
		while (*e == ' ')
			e++;
		if (*e == ',' || *e == '/')
			e++;
		else if (*e)
			return ds_err_set(err, DS_EINVAL, "split \"%s\": unexpected '%c' at offset %d", split, *e,
					  (int)(e - split));
		while (*e == ' ')
			e++;
		p = e;
	}
	if (!(sum > 0))
		return ds_err_set(err, DS_EINVAL, "split \"%s\": weights sum to 0", split);
	/* Megatron: cumulative int(round(frac * size)), then every boundary
	 * shifted by the rounding excess so the last one is exactly size.
	 * Python's round() is half-to-even, as nearbyint in the default mode. */
	idx[0] = 0;
	for (k = 0; k < 3; k++)
		idx[k + 1] = idx[k] + (int64_t)nearbyint(w[k] / sum * (double)n);
	int64_t diff = idx[3] - (int64_t)n;
	for (k = 1; k < 4; k++)
		idx[k] -= diff;
	for (k = 0; k < 3; k++) {
		int64_t b = idx[k] < 0 ? 0 : idx[k], e = idx[k + 1] < b ? b : idx[k + 1];
		begin[k] = (uint64_t)b;
		end[k] = (uint64_t)e > n ? n : (uint64_t)e;
	}
	return 0;
}

int ds_sampler_init(struct ds_sampler *s, const struct ds_dataset *d, uint64_t T, uint64_t first,
		    uint64_t count, uint64_t seed, uint32_t stream, struct ds_err *err)
{
	uint64_t nw;
	memset(s, 0, sizeof *s);
	DS_TRY(ds_dataset_num_windows(d, T, &nw, err));
	if (first > nw || count > nw - first)
		return ds_err_set(err, DS_EINVAL, "%s: windows [%llu, %llu) past the %llu windows of the dataset",
				  d->path, (unsigned long long)first, (unsigned long long)(first + count),
				  (unsigned long long)nw);
	s->ds = d;
	s->seq_length = T;
	s->first = first;
	s->count = count;
	s->seed = seed;
	s->stream = stream;
	s->shuffle = 1;
	return 0;
}

void ds_sampler_locate(const struct ds_sampler *s, uint64_t g, uint64_t *epoch, uint64_t *window)
{
	if (s->blend) {
		int d;
		uint64_t k;
		ds_blend_locate(s->blend, g, &d, &k);
		ds_sampler_locate(ds_blend_part(s->blend, d, NULL, NULL), k, epoch, window);
		return;
	}
	uint64_t e = s->count ? g / s->count : 0, i = s->count ? g % s->count : 0;
	if (s->shuffle)
		i = ds_data_permute(i, s->count, s->seed, s->stream, e);
	*epoch = e;
	*window = s->first + i;
}

int ds_sampler_get(const struct ds_sampler *s, uint64_t g, int32_t *out, struct ds_err *err)
{
	uint64_t e, w;
	if (s->blend && s->count) {
		int d;
		uint64_t k;
		ds_blend_locate(s->blend, g, &d, &k);
		return ds_sampler_get(ds_blend_part(s->blend, d, NULL, NULL), k, out, err);
	}
	if (!s->ds || s->count == 0)
		return ds_err_set(err, DS_EINVAL, "%s: this split has no samples", s->ds ? s->ds->path : "dataset");
	ds_sampler_locate(s, g, &e, &w);
	return ds_dataset_read_i32(s->ds, w * s->seq_length, (size_t)s->seq_length + 1, out, err);
}


/* ---- train / valid / test -------------------------------------------- */

enum { MAX_PARTS = 255 };

/* --data and friends: one path, or Megatron's blend "W1 P1 W2 P2 ...". */
struct spec {
	char *buf;                /* the words, NUL-separated (owned) */
	int n;
	const char *path[MAX_PARTS];
	double w[MAX_PARTS];
};

static int is_number(const char *s, double *v)
{
	char *e;
	errno = 0;
	*v = strtod(s, &e);
	return e != s && !*e && !errno;
}

static int spec_parse(struct spec *sp, const char *s, struct ds_err *err)
{
	char *words[2 * MAX_PARTS + 1];
	int nw = 0;
	double v;
	memset(sp, 0, sizeof *sp);
	if (!s || !*s)
		return ds_err_set(err, DS_EINVAL, "no dataset given: pass --data PATH");
	if (!(sp->buf = strdup(s)))
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (char *p = strtok(sp->buf, " \t\n"); p && nw <= 2 * MAX_PARTS; p = strtok(NULL, " \t\n"))
		words[nw++] = p;
	if (nw < 2 || !is_number(words[0], &v)) {
		/* one path (it may hold spaces) */
		strcpy(sp->buf, s);
		sp->n = 1;
		sp->path[0] = sp->buf;
		sp->w[0] = 1;
		return 0;
	}
	if (nw % 2 || nw > 2 * MAX_PARTS)
		return ds_err_set(err, DS_EINVAL, "data blend \"%s\": %s; give WEIGHT PATH pairs (at most %d)", s,
				  nw % 2 ? "an odd number of words" : "too many datasets", MAX_PARTS);
	for (int i = 0; i < nw; i += 2) {
		if (!is_number(words[i], &v) || !isfinite(v) || v < 0)
			return ds_err_set(err, DS_EINVAL, "data blend \"%s\": word %d '%s' is not a weight; give WEIGHT PATH "
					  "pairs with non-negative weights", s, i + 1, words[i]);
		sp->w[sp->n] = v;
		sp->path[sp->n++] = words[i + 1];
	}
	return 0;
}

static int open_checked(struct ds_data *dd, struct ds_dataset **d, const char *path, const struct ds_data_opts *o,
			struct ds_err *err)
{
	uint64_t limit = o->scan_limit ? o->scan_limit : (1ull << 28);
	struct ds_dataset **a = realloc(dd->ds, (size_t)(dd->nds + 1) * sizeof *a);
	if (!a)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	dd->ds = a;
	DS_TRY(ds_dataset_open(d, path, o->format, err));
	dd->ds[dd->nds++] = *d;
	ds_dataset_set_vocab(*d, o->vocab_size);
	if (o->vocab_size && ds_dataset_num_tokens(*d) < limit)
		DS_TRY(ds_dataset_scan(*d, err));
	return 0;
}

/* Sampler k (DS_SPLIT_*) from parts[0..n) with the spec's weights: the
 * part itself when there is one, else a blend of the non-empty parts. */
static int make(struct ds_data *dd, int k, struct ds_sampler *parts, const double *w0, int n,
		const struct ds_data_opts *o, struct ds_err *err)
{
	struct ds_sampler *s = k == 0 ? &dd->train : k == 1 ? &dd->valid : &dd->test;
	double w[MAX_PARTS], norm[MAX_PARTS];
	uint64_t count[MAX_PARTS], total = 0, size = 0;
	int m = 0;
	for (int i = 0; i < n; i++)
		if (parts[i].count) {
			parts[m] = parts[i];
			w[m++] = w0[i];
		}
	if (m == 0) {
		*s = parts[0];  /* empty */
		return 0;
	}
	if (o->weight_by_docs && m > 1) {
		uint64_t docs[MAX_PARTS];
		for (int i = 0; i < m; i++)
			DS_TRY(ds_dataset_num_docs(parts[i].ds, &docs[i], err));
		ds_blend_weights_by_docs(docs, m, o->alpha, w);
	}
	if (m == 1) {
		*s = parts[0];
		return 0;
	}
	for (int i = 0; i < m; i++)
		total += parts[i].count;  /* unknown run length: one epoch of every part */
	DS_TRY(ds_blend_weights(w, m, o->samples[k] ? o->samples[k] : total, norm, count, err));
	for (int i = 0; i < m; i++)
		size += count[i];
	DS_TRY(ds_blend_create(&dd->blend[k], parts, norm, count, m, size, err));
	ds_sampler_blend(s, dd->blend[k]);
	return 0;
}

/* The samplers of one --valid-data or --test-data spec (whole datasets). */
static int separate(struct ds_data *dd, int k, const char *path, const struct ds_data_opts *o, struct ds_err *err)
{
	struct spec sp;
	struct ds_sampler parts[MAX_PARTS];
	int rc = spec_parse(&sp, path, err);
	for (int i = 0; rc == 0 && i < sp.n; i++) {
		struct ds_dataset *d;
		uint64_t nw;
		rc = open_checked(dd, &d, sp.path[i], o, err);
		if (rc == 0)
			rc = ds_dataset_num_windows(d, o->seq_length, &nw, err);
		if (rc == 0)
			rc = ds_sampler_init(&parts[i], d, o->seq_length, 0, nw, o->seed, (uint32_t)k, err);
		if (rc == 0 && k == DS_SPLIT_VALID && i == 0)
			dd->valid_ds = d;
	}
	if (rc == 0)
		rc = make(dd, k, parts, sp.w, sp.n, o, err);
	free(sp.buf);
	return rc;
}

int ds_data_open(struct ds_data *dd, const struct ds_data_opts *o, struct ds_err *err)
{
	const char *split = o->split ? o->split : "969,30,1";
	struct spec sp;
	struct ds_sampler parts[3][MAX_PARTS];
	int rc;
	memset(dd, 0, sizeof *dd);
	rc = spec_parse(&sp, o->path, err);
	for (int i = 0; rc == 0 && i < sp.n; i++) {
		struct ds_dataset *d;
		uint64_t nw, b[3], e[3];
		rc = open_checked(dd, &d, sp.path[i], o, err);
		if (rc == 0)
			rc = ds_dataset_num_windows(d, o->seq_length, &nw, err);
		if (rc < 0)
			break;
		if (i == 0)
			dd->train_ds = d;
		if (o->valid_path) {
			rc = ds_sampler_init(&parts[0][i], d, o->seq_length, 0, nw, o->seed, DS_SPLIT_TRAIN, err);
			continue;
		}
		rc = ds_data_split_parse(split, nw, b, e, err);
		if (rc == 0 && e[0] == b[0])
			rc = ds_err_set(err, DS_EINVAL, "%s: split \"%s\" leaves none of its %llu windows (seq_length %llu) "
					"for training; give more data or a larger train weight", sp.path[i], split,
					(unsigned long long)nw, (unsigned long long)o->seq_length);
		for (int k = 0; k < 3 && rc == 0; k++)
			rc = ds_sampler_init(&parts[k][i], d, o->seq_length, b[k], e[k] - b[k], o->seed, (uint32_t)k, err);
	}
	for (int k = 0; k < 3 && rc == 0; k++) {
		if (o->valid_path && k > 0)
			break;
		if (k == DS_SPLIT_TEST && o->test_path)
			break;
		rc = make(dd, k, parts[k], sp.w, sp.n, o, err);
	}
	if (rc == 0 && o->valid_path)
		rc = separate(dd, DS_SPLIT_VALID, o->valid_path, o, err);
	if (rc == 0 && o->test_path)
		rc = separate(dd, DS_SPLIT_TEST, o->test_path, o, err);
	free(sp.buf);
	if (rc < 0)
		ds_data_release(dd);
	return rc;
}

void ds_data_release(struct ds_data *dd)
{
	for (int k = 0; k < 3; k++)
		ds_blend_destroy(dd->blend[k]);
	for (int i = 0; i < dd->nds; i++)
		ds_dataset_destroy(dd->ds[i]);
	free(dd->ds);
	memset(dd, 0, sizeof *dd);
}
