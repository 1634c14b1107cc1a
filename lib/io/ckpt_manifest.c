/* ckpt_manifest.c - the manifest of a checkpoint file: a CRC-32C of every
 * byte of state.h5, so that its bytes are checked before the HDF5 library
 * parses any of them (a damaged object header can crash HDF5 1.10).
 *
 * state.h5.manifest is text, written by rank 0 once state.h5 is closed and
 * synced, and fsynced before the tag directory is renamed:
 *
 *     dstk-ckpt-manifest 1
 *     file state.h5 1484463
 *     m 0 2048 1a2b3c4d            HDF5's bytes (metadata, free space)
 *     d 2048 65536 5e6f7a8b        one CRC chunk of a tensor's bytes
 *     ...
 *     end 0badf00d                 CRC-32C of every byte above this line
 *
 * The extents tile the file in order.  The tensor extents carry the CRCs
 * the writing ranks computed from their own buffers (the same as the
 * datasets' crc32c attributes), so a parallel save stays parallel: only
 * the bytes between the tensors -- HDF5's, small -- are read back, by rank
 * 0.  A reader checks the manifest's own CRC, that the extents tile the
 * file as it is now, and the CRC of every metadata extent before H5Fopen;
 * the tensor bytes are checked as they are read (chunk CRCs), or all at
 * once by ds_ckpt_verify.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/ckpt_int.h"
#include "util/crc32c.h"
#include "util/file.h"
#include "util/progress.h"

#define MAGIC "dstk-ckpt-manifest 1\n"
#define MAX_BYTES ((size_t)1 << 30)  /* 30 M extents: a 30 TB file at 1 MiB chunks */
enum { BUF_BYTES = 1 << 20 };

char *ds_ckpt_manifest_path(const char *file)
{
	size_t n = strlen(file) + sizeof ".manifest";
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s.manifest", file);
	return s;
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

static const char *kind_name(int kind)
{
	return kind == DS_CKPT_EXT_DATA ? "tensor data" : "HDF5 metadata";
}

/* CRC of bytes [off, off + len) of fd, read through buf (BUF_BYTES). */
static int crc_range(int fd, uint64_t off, uint64_t len, uint8_t *buf, uint32_t *crc)
{
	uint32_t v = 0;
	while (len) {
		size_t k = len < BUF_BYTES ? (size_t)len : BUF_BYTES;
		if (ds_pread_full(fd, buf, k, off) != 0) {
			if (errno == 0)
				errno = EIO;
			return -1;
		}
		v = ds_crc32c(v, buf, k);
		off += k;
		len -= k;
	}
	*crc = v;
	return 0;
}

/* ---- writing ---- */

struct sbuf {
	char *p;
	size_t n, cap;
};

static int sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int sb_printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? b->cap - b->n : 0, fmt, ap);
		va_end(ap);
		if (k < 0)
			return -1;
		if (b->p && b->n + (size_t)k < b->cap) {
			b->n += (size_t)k;
			return 0;
		}
		size_t cap = b->cap ? 2 * b->cap : 1 << 16;
		while (cap < b->n + (size_t)k + 1)
			cap *= 2;
		char *np = realloc(b->p, cap);
		if (!np)
			return -1;
		b->p = np;
		b->cap = cap;
	}
}

static int ext_cmp(const void *a, const void *b)
{
	const struct ds_ckpt_extent *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

static int add_meta(struct sbuf *b, int fd, uint64_t off, uint64_t end, uint8_t *buf)
{
	uint32_t crc;
	if (end <= off)
		return 0;
	if (crc_range(fd, off, end - off, buf, &crc) != 0)
		return -1;
	return sb_printf(b, "m %llu %llu %08x\n", (unsigned long long)off, (unsigned long long)(end - off), crc);
}

int ds_ckpt_manifest_write(int fd, const char *file, struct ds_ckpt_extent *data, size_t n, struct ds_err *err)
{
	struct sbuf b = { NULL, 0, 0 };
	struct stat st;
	uint8_t *buf = malloc(BUF_BYTES);
	char *path = ds_ckpt_manifest_path(file);
	uint64_t pos = 0;
	int rc = 0, mfd = -1;
	if (!buf || !path) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	if (fstat(fd, &st) != 0) {
		rc = ds_err_set(err, DS_EIO, "%s: %s", file, strerror(errno));
		goto out;
	}
	qsort(data, n, sizeof *data, ext_cmp);
	if (sb_printf(&b, MAGIC "file %s %llu\n", base_name(file), (unsigned long long)st.st_size) < 0)
		goto nomem;
	for (size_t i = 0; i < n; i++) {
		if (data[i].off < pos || data[i].off + data[i].len > (uint64_t)st.st_size) {
			rc = ds_err_set(err, DS_EINTERNAL, "%s: tensor bytes %llu..%llu overlap others or lie beyond "
					"the file's %lld bytes", file, (unsigned long long)data[i].off,
					(unsigned long long)(data[i].off + data[i].len), (long long)st.st_size);
			goto out;
		}
		if (add_meta(&b, fd, pos, data[i].off, buf) != 0)
			goto ioerr;
		if (sb_printf(&b, "d %llu %llu %08x\n", (unsigned long long)data[i].off,
			      (unsigned long long)data[i].len, data[i].crc) < 0)
			goto nomem;
		pos = data[i].off + data[i].len;
	}
	if (add_meta(&b, fd, pos, (uint64_t)st.st_size, buf) != 0)
		goto ioerr;
	if (sb_printf(&b, "end %08x\n", ds_crc32c(0, b.p, b.n)) < 0)
		goto nomem;
	mfd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (mfd < 0 || ds_pwrite_full(mfd, b.p, b.n, 0) != 0 || fsync(mfd) != 0) {
		rc = ds_err_set(err, DS_EIO, "%s: cannot write: %s", path, strerror(errno));
		goto out;
	}
	goto out;
ioerr:
	rc = ds_err_set(err, DS_EIO, "%s: cannot read back HDF5's bytes: %s", file, strerror(errno));
	goto out;
nomem:
	rc = ds_err_set(err, DS_ENOMEM, "out of memory for the manifest of %s", file);
out:
	if (mfd >= 0)
		close(mfd);
	free(b.p);
	free(buf);
	free(path);
	return rc;
}

/* ---- reading ---- */

void ds_ckpt_manifest_free(struct ds_ckpt_manifest *m)
{
	if (!m)
		return;
	free(m->x);
	free(m);
}

/* Parse an unsigned decimal at *p up to the character stop. */
static int get_u64(const char **p, const char *end, char stop, uint64_t *v)
{
	const char *s = *p;
	uint64_t x = 0;
	if (s >= end || *s < '0' || *s > '9')
		return -1;
	for (; s < end && *s >= '0' && *s <= '9'; s++) {
		if (x > (UINT64_MAX - 9) / 10)
			return -1;
		x = x * 10 + (uint64_t)(*s - '0');
	}
	if (s >= end || *s != stop)
		return -1;
	*v = x;
	*p = s + 1;
	return 0;
}

static int get_hex32(const char **p, const char *end, uint32_t *v)
{
	const char *s = *p;
	uint32_t x = 0;
	if (end - s < 9 || s[8] != '\n')
		return -1;
	for (int i = 0; i < 8; i++) {
		char ch = s[i];
		int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
		if (d < 0)
			return -1;
		x = x << 4 | (uint32_t)d;
	}
	*v = x;
	*p = s + 9;
	return 0;
}

/* Parse text[0, n) (its end line already checked) into m. */
static int parse(const char *text, size_t n, const char *file, const char *path, struct ds_ckpt_manifest *m,
		 struct ds_err *err)
{
	const char *p = text, *end = text + n, *name = base_name(file);
	size_t lines = 0, nl = strlen(name);
	uint64_t pos = 0;
	if (n < sizeof MAGIC - 1 || memcmp(p, MAGIC, sizeof MAGIC - 1))
		return ds_err_set(err, DS_ECORRUPT, "%s: not a dstk checkpoint manifest (version 1)", path);
	p += sizeof MAGIC - 1;
	if (end - p < 5 + (ptrdiff_t)nl + 1 || memcmp(p, "file ", 5) || memcmp(p + 5, name, nl) || p[5 + nl] != ' ')
		return ds_err_set(err, DS_ECORRUPT, "%s: does not describe %s", path, name);
	p += 5 + nl + 1;
	if (get_u64(&p, end, '\n', &m->size) != 0)
		return ds_err_set(err, DS_ECORRUPT, "%s: bad file line", path);
	for (const char *q = p; q < end; q++)
		lines += *q == '\n';
	m->x = malloc((lines ? lines : 1) * sizeof *m->x);
	if (!m->x)
		return ds_err_set(err, DS_ENOMEM, "out of memory for %zu manifest extents", lines);
	while (p < end) {
		struct ds_ckpt_extent *x = &m->x[m->n];
		if (end - p < 2 || (p[0] != DS_CKPT_EXT_META && p[0] != DS_CKPT_EXT_DATA) || p[1] != ' ')
			break;
		x->kind = p[0];
		p += 2;
		if (get_u64(&p, end, ' ', &x->off) != 0 || get_u64(&p, end, ' ', &x->len) != 0 ||
		    get_hex32(&p, end, &x->crc) != 0 || x->off != pos || x->len == 0 || x->len > m->size - pos)
			return ds_err_set(err, DS_ECORRUPT, "%s: extent %zu is malformed or out of order", path, m->n + 1);
		pos += x->len;
		m->n++;
	}
	if (p != end || pos != m->size)
		return ds_err_set(err, DS_ECORRUPT, "%s: the extents cover %llu of %s's %llu bytes", path,
				  (unsigned long long)pos, name, (unsigned long long)m->size);
	return 0;
}

int ds_ckpt_manifest_load(const char *file, struct ds_ckpt_manifest **out, struct ds_err *err)
{
	char *path = ds_ckpt_manifest_path(file), *text = NULL;
	struct ds_ckpt_manifest *m = NULL;
	struct stat st, fst;
	int fd = -1, rc = 0;
	*out = NULL;
	if (!path)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno != ENOENT)
			rc = ds_err_set(err, DS_ECORRUPT, "%s: cannot read: %s", path, strerror(errno));
		goto out;  /* none: a checkpoint of an older dstk */
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > MAX_BYTES) {
		rc = ds_err_set(err, DS_ECORRUPT, "%s: not a manifest (%lld bytes)", path, (long long)st.st_size);
		goto out;
	}
	text = malloc((size_t)st.st_size + 1);
	m = calloc(1, sizeof *m);
	if (!text || !m) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	if (ds_pread_full(fd, text, (size_t)st.st_size, 0) != 0) {
		rc = ds_err_set(err, DS_ECORRUPT, "%s: cannot read: %s", path, errno ? strerror(errno) : "short read");
		goto out;
	}
	/* its own checksum first: the last line, "end %08x\n" */
	size_t n = (size_t)st.st_size, body = n >= 13 ? n - 13 : 0;
	const char *q = text + body + 4;
	uint32_t want;
	if (n < 13 || memcmp(text + body, "end ", 4) || (body && text[body - 1] != '\n') ||
	    get_hex32(&q, text + n, &want) != 0) {
		rc = ds_err_set(err, DS_ECORRUPT, "%s: truncated (no end line); the checkpoint is damaged", path);
		goto out;
	}
	if (ds_crc32c(0, text, body) != want) {
		rc = ds_err_set(err, DS_ECORRUPT, "%s: fails its own CRC-32C; the checkpoint is damaged", path);
		goto out;
	}
	if ((rc = parse(text, body, file, path, m, err)) < 0)
		goto out;
	if (stat(file, &fst) != 0) {
		rc = ds_err_set(err, DS_ECORRUPT, "%s: %s", file, strerror(errno));
		goto out;
	}
	if ((uint64_t)fst.st_size != m->size) {
		rc = ds_err_set(err, DS_ECORRUPT, "%s: %lld bytes, but its manifest says %llu (truncated or "
				"appended to); the checkpoint is damaged", file, (long long)fst.st_size,
				(unsigned long long)m->size);
		goto out;
	}
	*out = m;
	m = NULL;
out:
	if (fd >= 0)
		close(fd);
	ds_ckpt_manifest_free(m);
	free(text);
	free(path);
	return rc;
}

int ds_ckpt_manifest_check(const char *file, const struct ds_ckpt_manifest *m, const char *kinds, uint64_t lo,
			   uint64_t hi, ds_ckpt_extent_fn cb, void *ud, struct ds_err *err)
{
	size_t *idx = malloc((m->n ? m->n : 1) * sizeof *idx), k = 0, bad = SIZE_MAX;
	int fd = open(file, O_RDONLY | O_CLOEXEC), ioerr = 0;
	uint32_t got_bad = 0;
	if (!idx || fd < 0) {
		int e = errno;
		free(idx);
		if (fd >= 0)
			close(fd);
		return fd < 0 ? ds_err_set(err, DS_EIO, "%s: %s", file, strerror(e))
			      : ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	for (size_t i = 0; i < m->n; i++)
		if (strchr(kinds, m->x[i].kind) && m->x[i].off >= lo && m->x[i].off < hi)
			idx[k++] = i;
	#pragma omp parallel if (k > 8)
	{
		uint8_t *buf = malloc(BUF_BYTES);
		#pragma omp for schedule(dynamic, 1)
		for (size_t j = 0; j < k; j++) {
			const struct ds_ckpt_extent *x = &m->x[idx[j]];
			uint32_t got;
			int r = buf ? crc_range(fd, x->off, x->len, buf, &got) : -1;
			ds_progress_note();
			#pragma omp critical(ds_ckpt_manifest_check)
			{
				if (r != 0) {
					if (!ioerr)
						ioerr = buf ? (errno ? errno : EIO) : ENOMEM;
				} else if (got != x->crc) {
					if (cb)
						cb(ud, x, got);
					if (idx[j] < bad) {
						bad = idx[j];
						got_bad = got;
					}
				}
			}
		}
		free(buf);
	}
	close(fd);
	free(idx);
	if (bad != SIZE_MAX) {
		const struct ds_ckpt_extent *x = &m->x[bad];
		return ds_err_set(err, DS_ECORRUPT, "%s: bytes %llu..%llu (%s) fail their CRC-32C (manifest %08x, read "
				  "%08x); the checkpoint is damaged: load another tag or --load auto", file,
				  (unsigned long long)x->off, (unsigned long long)(x->off + x->len), kind_name(x->kind),
				  x->crc, got_bad);
	}
	if (ioerr)
		return ds_err_set(err, DS_EIO, "%s: cannot read: %s", file, strerror(ioerr));
	return 0;
}
