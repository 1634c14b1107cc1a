/* ckpt_write.c - the checkpoint writer: create, tensors written in slices
 * with their chunk CRC-32C pieces, attributes, and the atomic commit
 * (global_step<N>.tmp, fsync, manifest, rename, then `latest`); see ckpt.h.
 *
 * HDF5 runs on rank 0 only, and only for metadata: rank 0 creates state.h5,
 * the groups, the attributes and every dataset with its space allocated at
 * once (contiguous, never filled), and tells the other ranks where each
 * dataset's bytes start.  Every rank then pwrite(2)s its own slices there,
 * CRCing them as it goes.  So no HDF5 call is collective: a rank that fails
 * can never leave another inside HDF5, and every outcome is agreed through
 * the communicator (agree(): the lowest failing rank's message reaches all).
 * HDF5's metadata cache keeps everything in memory (no evictions), so HDF5
 * touches the disk only when rank 0 flushes at commit; when that flush (or
 * a data write) fails, rank 0 closes the file with its descriptor swapped
 * for an anonymous memory file (close_h5), because HDF5 1.10 crashes at exit
 * after a failed H5Fclose.
 */
#include "config.h"

#include "io/ckpt.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/ckpt_int.h"
#include "util/crc32c.h"
#include "util/file.h"
#include "util/progress.h"

/* Tensors go to disk as their in-memory bytes: the file types are little
 * endian (file_type below). */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint writes assume a little-endian host"
#endif

#define piece ds_ckpt_crc_piece  /* the public record, ckpt.h */

static int reserve_pieces(struct ds_ckpt_wt *w, size_t n, struct ds_err *err);

static int fsync_path(const char *p)
{
	int fd = open(p, O_RDONLY | O_CLOEXEC), rc;
	if (fd < 0)
		return -1;
	rc = fsync(fd);
	close(fd);
	return rc;
}

static int mkdir_p(const char *dir, struct ds_err *err)
{
	char *s = strdup(dir);
	if (!s)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (char *p = s + 1; ; p++) {
		if (*p == '/' || *p == '\0') {
			char c = *p;
			*p = '\0';
			if (mkdir(s, 0777) != 0 && errno != EEXIST) {
				int e = errno;
				free(s);
				return ds_err_set(err, DS_EIO, "%s: cannot create directory: %s", dir, strerror(e));
			}
			*p = c;
			if (!c)
				break;
		}
	}
	free(s);
	return 0;
}

static hid_t file_type(int dtype)
{
	switch (dtype) {
	case DS_CKPT_F32: return H5T_IEEE_F32LE;
	case DS_CKPT_F64: return H5T_IEEE_F64LE;
	case DS_CKPT_F16: case DS_CKPT_BF16: return H5T_STD_U16LE;
	case DS_CKPT_I32: return H5T_STD_I32LE;
	case DS_CKPT_I64: return H5T_STD_I64LE;
	default: return H5T_STD_U8LE;
	}
}

/* ---- CRC combination (zlib's crc32_combine, for the Castagnoli poly) --- */

static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
	uint32_t sum = 0;
	for (; vec; vec >>= 1, mat++)
		if (vec & 1)
			sum ^= *mat;
	return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
	for (int n = 0; n < 32; n++)
		sq[n] = gf2_times(mat, mat[n]);
}

uint32_t ds_ckpt_crc_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
	uint32_t even[32], odd[32], row = 1;
	if (len_b == 0)
		return crc_a;
	/* odd: the operator for one zero bit */
	odd[0] = 0x82f63b78u;
	for (int n = 1; n < 32; n++, row <<= 1)
		odd[n] = row;
	gf2_square(even, odd);  /* two zero bits */
	gf2_square(odd, even);  /* four zero bits */
	do {  /* apply len_b zero bytes to crc_a */
		gf2_square(even, odd);
		if (len_b & 1)
			crc_a = gf2_times(even, crc_a);
		len_b >>= 1;
		if (!len_b)
			break;
		gf2_square(odd, even);
		if (len_b & 1)
			crc_a = gf2_times(odd, crc_a);
		len_b >>= 1;
	} while (len_b);
	return crc_a ^ crc_b;
}

/* ---- attributes --------------------------------------------------------- */

static herr_t attr_put(hid_t obj, const char *key, hid_t ftype, hid_t mtype, hid_t space, const void *buf)
{
	hid_t a;
	herr_t rc;
	if (H5Aexists(obj, key) > 0 && H5Adelete(obj, key) < 0)
		return -1;
	a = H5Acreate2(obj, key, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
	if (a < 0)
		return -1;
	rc = H5Awrite(a, mtype, buf);
	H5Aclose(a);
	return rc;
}

static herr_t attr_put_scalar(hid_t obj, const char *key, hid_t ftype, hid_t mtype, const void *v)
{
	hid_t s = H5Screate(H5S_SCALAR);
	herr_t rc = attr_put(obj, key, ftype, mtype, s, v);
	H5Sclose(s);
	return rc;
}

static herr_t attr_put_str(hid_t obj, const char *key, const char *v)
{
	hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate(H5S_SCALAR);
	herr_t rc;
	const char *p = v ? v : "";
	H5Tset_size(t, H5T_VARIABLE);
	H5Tset_cset(t, H5T_CSET_UTF8);
	rc = attr_put(obj, key, t, t, s, &p);
	H5Tclose(t);
	H5Sclose(s);
	return rc;
}

/* ---- groups --------------------------------------------------------------- */

/* Create every missing group on the path prefix of name up to `upto`
 * characters, tracking link creation order (so listings follow the
 * parameter registry). */
static int ensure_groups(struct ds_ckpt *c, const char *name, size_t upto, struct ds_err *err)
{
	char path[DS_CKPT_NAME_MAX];
	if (upto >= sizeof path)
		return ds_err_set(err, DS_EINVAL, "%s: name too long (%zu bytes)", c->file, upto);
	for (size_t i = 1; i <= upto; i++) {
		if (i < upto && name[i] != '/')
			continue;
		memcpy(path, name, i);
		path[i] = '\0';
		htri_t ex = H5Lexists(c->f, path, H5P_DEFAULT);
		if (ex > 0)
			continue;
		hid_t gcpl = H5Pcreate(H5P_GROUP_CREATE), g;
		H5Pset_link_creation_order(gcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
		g = ex < 0 ? -1 : H5Gcreate2(c->f, path, H5P_DEFAULT, gcpl, H5P_DEFAULT);
		H5Pclose(gcpl);
		if (g < 0) {
			char m[160];
			return ds_err_set(err, DS_EIO, "%s: cannot create group /%s: %s", c->file, path, ds_ckpt_h5msg(m));
		}
		H5Gclose(g);
	}
	return 0;
}

/* ---- writer ----------------------------------------------------------------- */

static int write_meta(struct ds_ckpt *c, const struct ds_ckpt_meta *m, struct ds_err *err)
{
	hid_t r = H5Gopen2(c->f, "/", H5P_DEFAULT);
	int64_t ver = DS_CKPT_FORMAT_VERSION;
	herr_t rc = r < 0 ? -1 : 0;
	char msg[160];
	if (rc >= 0) rc = attr_put_scalar(r, "format_version", H5T_STD_I64LE, H5T_NATIVE_INT64, &ver);
	if (rc >= 0) rc = attr_put_scalar(r, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, &m->step);
	if (rc >= 0) rc = attr_put_scalar(r, "consumed_samples", H5T_STD_I64LE, H5T_NATIVE_INT64, &m->consumed_samples);
	if (rc >= 0) rc = attr_put_scalar(r, "world_size", H5T_STD_I64LE, H5T_NATIVE_INT64, &m->world_size);
	if (rc >= 0) rc = attr_put_scalar(r, "zero_stage", H5T_STD_I64LE, H5T_NATIVE_INT64, &m->zero_stage);
	if (rc >= 0) rc = attr_put_str(r, "dtype", m->dtype ? m->dtype : "fp32");
	if (rc >= 0) rc = attr_put_str(r, "config_json", m->config_json);
	if (rc >= 0) rc = attr_put_str(r, "model_json", m->model_json);
	if (rc >= 0) rc = attr_put_str(r, "dstk_version", PACKAGE_VERSION);
	if (r >= 0)
		H5Gclose(r);
	if (rc < 0)
		return ds_err_set(err, DS_EIO, "%s: cannot write the root attributes: %s", c->file, ds_ckpt_h5msg(msg));
	return 0;
}

/* Remember this rank's first failure (commit reports it to every rank);
 * returns rc.  A serial caller's bad argument (DS_EINVAL: nothing was
 * done) is its own business; in a parallel save the ranks must agree. */
static int note(struct ds_ckpt *c, int rc, const struct ds_err *err)
{
	if (rc < 0 && c->wrc == 0 && (c->par || rc != DS_EINVAL)) {
		c->wrc = rc;
		if (err && err->msg[0])
			c->werr = *err;
		else
			ds_err_set(&c->werr, rc, "%s: a write failed", c->file);
	}
	return rc;
}

int ds_ckpt_fail(struct ds_ckpt *c, const struct ds_err *err)
{
	int rc = err && err->code < 0 ? err->code : DS_EIO;
	if (c->wrc == 0) {
		c->wrc = rc;
		if (err && err->msg[0])
			c->werr = *err;
		else
			ds_err_set(&c->werr, rc, "%s: a write failed", c->file);
	}
	return rc;
}

/* The ranks agree on an outcome (ds_ckpt_agree). */
static int agree(struct ds_ckpt *c, int rc, struct ds_err *err)
{
	return ds_ckpt_agree(c->par ? c->comm : NULL, rc, c->file, err);
}

/* "rank R " in a parallel save's messages, else "". */
static const char *who(const struct ds_ckpt *c, char *buf, size_t n)
{
	if (c->par)
		snprintf(buf, n, "rank %d ", c->rank);
	else if (n)
		buf[0] = '\0';
	return buf;
}

/* "; <save>/latest still names global_stepN" (or that there is none, or
 * that the tag is complete but `latest` did not follow): what a failed save
 * leaves the user. */
static void latest_note(const struct ds_ckpt *c, char *buf, size_t n)
{
	char tag[128] = "", *p = ds_ckpt_join(c->save_dir, "latest");
	FILE *f = p ? fopen(p, "r") : NULL;
	if (f) {
		if (!fgets(tag, sizeof tag, f))
			tag[0] = '\0';
		fclose(f);
		tag[strcspn(tag, " \t\r\n")] = '\0';
	}
	if (c->committed)  /* the tag is in place; only `latest` could not follow */
		snprintf(buf, n, "; %s/%s is complete (--load auto takes it) but %s %s%s", c->save_dir, c->tag, p,
			 tag[0] ? "still names " : "was not written", tag);
	else if (tag[0])
		snprintf(buf, n, "; %s still names %s", p, tag);
	else
		snprintf(buf, n, "; there is no earlier checkpoint in %s", c->save_dir);
	free(p);
}

/* ---- test-only faults (ckpt.h) ---- */

static int errno_named(const char *s)
{
	static const struct { const char *name; int e; } tab[] = {
		{ "ENOSPC", ENOSPC }, { "EIO", EIO }, { "EDQUOT", EDQUOT }, { "EACCES", EACCES },
		{ "EROFS", EROFS }, { "EFBIG", EFBIG },
	};
	for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
		if (!strcmp(s, tab[i].name))
			return tab[i].e;
	return atoi(s) > 0 ? atoi(s) : EIO;
}

static void faults_from_env(struct ds_ckpt *c)
{
	const char *f = getenv("DS_TEST_FAULT_CKPT_FAIL_RANK");
	char point[32] = "";
	int r = -1, n = 1;
	c->fault_rank = f && *f ? atoi(f) : -1;
	c->fault_errno = 0;
	if ((f = getenv("DS_TEST_FAULT_CKPT_WRITE")) && sscanf(f, "%d:%31s", &r, point) == 2 && r == c->rank)
		c->fault_errno = errno_named(point);
	c->fault_meta = (f = getenv("DS_TEST_FAULT_CKPT_META")) && *f && *f != '0' ? errno_named(f) : 0;
	c->kill_point[0] = '\0';
	if ((f = getenv("DS_TEST_FAULT_CKPT_KILL")) && sscanf(f, "%d:%31[a-z]:%d", &r, point, &n) >= 2 &&
	    r == c->rank) {
		snprintf(c->kill_point, sizeof c->kill_point, "%s", point);
		c->kill_n = n > 0 ? n : 1;
	}
}

/* DS_TEST_FAULT_CKPT_KILL: die here as a SIGKILL would kill the job, at the
 * N-th time this process reaches the point (counted over all its saves). */
static void maybe_kill(struct ds_ckpt *c, const char *point)
{
	static int reached;
	if (c->kill_point[0] && !strcmp(c->kill_point, point) && ++reached == c->kill_n)
		raise(SIGKILL);
}

/* ---- closing HDF5's file on rank 0 ---- */

/* The system's reason in HDF5's error stack ("No space left on device"
 * from the "errno = 28" of a failed write), else its innermost message. */
struct h5why { int err, pri; char desc[160]; };

static herr_t why_cb(unsigned n, const H5E_error2_t *e, void *ud)
{
	struct h5why *w = ud;
	const char *p = e->desc ? strstr(e->desc, "errno = ") : NULL;
	if (n == 0 && e->desc)
		snprintf(w->desc, sizeof w->desc, "%s", e->desc);
	if (p) {
		int pri = strstr(e->desc, "write failed") ? 2 : 1;  /* the write, not a later truncate */
		if (pri > w->pri) {
			w->pri = pri;
			w->err = atoi(p + 8);
		}
	}
	return 0;
}

static const char *h5why(char *buf, size_t n)
{
	struct h5why w = { 0, 0, "" };
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, why_cb, &w);
	H5Eclear2(H5E_DEFAULT);
	snprintf(buf, n, "%s", w.err > 0 ? strerror(w.err) : w.desc[0] ? w.desc : "unknown HDF5 error");
	return buf;
}

static int range_cmp(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;
	return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The byte ranges of [0, size) that hold no tensor bytes -- HDF5's own --
 * as pairs {begin, end} (malloc'd, *n of them; NULL when out of memory). */
static uint64_t (*hdf5_ranges(const struct ds_ckpt *c, uint64_t size, size_t *n))[2]
{
	uint64_t (*t)[2] = malloc((c->nt + 1) * sizeof *t), (*g)[2] = malloc((c->nt + 1) * sizeof *g), pos = 0;
	size_t nt = 0, ng = 0;
	if (!t || !g) {
		free(t);
		free(g);
		return NULL;
	}
	for (size_t i = 0; i < c->nt; i++)
		if (c->t[i].off != UINT64_MAX) {
			t[nt][0] = c->t[i].off;
			t[nt++][1] = c->t[i].off + c->t[i].numel * c->t[i].es;
		}
	qsort(t, nt, sizeof *t, range_cmp);
	for (size_t i = 0; i <= nt; i++) {
		uint64_t b = i < nt ? t[i][0] : size;
		if (b > size)
			b = size;
		if (b > pos) {
			g[ng][0] = pos;
			g[ng++][1] = b;
		}
		if (i < nt && t[i][1] > pos)
			pos = t[i][1];
	}
	free(t);
	*n = ng;
	return g;
}

/* Copy bytes [b, e) from fd `from` to fd `to` at the same offsets. */
static int copy_range(int from, int to, uint64_t b, uint64_t e)
{
	uint8_t buf[1 << 16];
	while (b < e) {
		size_t k = e - b < sizeof buf ? (size_t)(e - b) : sizeof buf;
		if (ds_pread_full(from, buf, k, b) != 0 || ds_pwrite_full(to, buf, k, b) != 0)
			return -1;
		b += k;
	}
	return 0;
}

/* An anonymous file in memory: memfd_create, or where the kernel lacks it
 * (before 3.17) an unlinked file in /dev/shm or $TMPDIR.  -1 on failure. */
static int anon_file(void)
{
	int fd = memfd_create("ds-ckpt-close", MFD_CLOEXEC);
	for (int i = 0; fd < 0 && i < 2; i++) {
		const char *d = i == 0 ? "/dev/shm" : getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
		char p[4096];
		snprintf(p, sizeof p, "%s/ds-ckpt-close-XXXXXX", d);
		fd = mkostemp(p, O_CLOEXEC);
		if (fd >= 0)
			unlink(p);
	}
	return fd;
}

/* Copy HDF5's bytes [b, e) from the memory file to the real one (or fail
 * as DS_TEST_FAULT_CKPT_META says). */
static int put_h5(const struct ds_ckpt *c, int mfd, int real, uint64_t b, uint64_t e)
{
	if (c->fault_meta && b < e) {
		errno = c->fault_meta;
		return -1;
	}
	return copy_range(mfd, real, b, e);
}

/* Close rank 0's HDF5 file without HDF5 ever meeting a failed write (HDF5
 * 1.10 cannot close a file after a failed flush, and crashes at exit):
 * while it flushes and closes, its descriptor points at an anonymous
 * memory file, mfd.  keep: mfd first gets a copy of HDF5's part of the
 * file -- everything but the tensors' bytes, where HDF5 never writes --
 * and afterwards that part, and whatever HDF5 wrote past the old end of
 * the file, goes to the real file with our own writes, then fsync.
 * Otherwise (an abandoned save) what HDF5 writes is dropped.  Returns 0 or
 * DS_EIO naming the file and the system's reason. */
static int close_h5(struct ds_ckpt *c, int keep, struct ds_err *err)
{
	off_t sentinel = 0;  /* mfd's size unless HDF5 truncates it: far past the file's end */
	int rc = 0, *fdp = NULL, real = -1, mfd = -1, ok = 1;
	uint64_t (*g)[2] = NULL, old_size = 0, end;
	size_t ng = 0;
	struct stat st;
	char why[160];
	if (c->f < 0)
		return 0;
	for (size_t i = 0; i < c->nt; i++)
		if (c->t[i].dset >= 0) {
			H5Dclose(c->t[i].dset);
			c->t[i].dset = -1;
		}
	if (H5Fget_vfd_handle(c->f, H5P_DEFAULT, (void **)&fdp) < 0 || !fdp || *fdp < 0)
		ok = 0;
	if (ok) {
		real = dup(*fdp);
		mfd = anon_file();
		ok = real >= 0 && mfd >= 0 && fstat(real, &st) == 0;
		old_size = ok ? (uint64_t)st.st_size : 0;
		sentinel = (off_t)old_size + ((off_t)1 << 40);
		ok = ok && ftruncate(mfd, sentinel) == 0;
	}
	int staged = ok && keep && (g = hdf5_ranges(c, old_size, &ng)) != NULL;
	for (size_t i = 0; staged && i < ng; i++)
		staged = copy_range(real, mfd, g[i][0], g[i][1]) == 0;
	if (ok)  /* from here HDF5 writes into mfd */
		ok = dup2(mfd, *fdp) >= 0;
	if (keep && (!ok || !staged)) {
		rc = ds_err_set(err, DS_EIO, "%s: cannot stage the HDF5 metadata: %s", c->file, strerror(errno));
		keep = 0;
	}
	H5Eclear2(H5E_DEFAULT);
	if (keep && H5Fflush(c->f, H5F_SCOPE_LOCAL) < 0)
		rc = ds_err_set(err, DS_EIO, "%s: cannot write the HDF5 metadata: %s", c->file, h5why(why, sizeof why));
	if (H5Fclose(c->f) < 0 && rc == 0 && keep)
		rc = ds_err_set(err, DS_EIO, "%s: cannot close: %s", c->file, h5why(why, sizeof why));
	c->f = -1;
	H5Eclear2(H5E_DEFAULT);
	if (keep && rc == 0) {
		/* HDF5's bytes: its part of the old file (up to where it may have
		 * shrunk the file), then its data past the old end */
		ok = fstat(mfd, &st) == 0;
		end = st.st_size != sentinel ? (uint64_t)st.st_size : UINT64_MAX;
		for (size_t i = 0; ok && i < ng && g[i][0] < end; i++)
			ok = put_h5(c, mfd, real, g[i][0], g[i][1] < end ? g[i][1] : end) == 0;
		for (off_t d = (off_t)old_size, h; ok && (d = lseek(mfd, d, SEEK_DATA)) >= 0 && (uint64_t)d < end; d = h) {
			h = lseek(mfd, d, SEEK_HOLE);
			ok = h > d && put_h5(c, mfd, real, (uint64_t)d, (uint64_t)h < end ? (uint64_t)h : end) == 0;
		}
		if (ok && st.st_size != sentinel && ftruncate(real, st.st_size) != 0)
			ok = 0;
		if (ok && fsync(real) != 0)
			ok = 0;
		if (!ok)
			rc = ds_err_set(err, DS_EIO, "%s: cannot write the HDF5 metadata: %s", c->file,
					strerror(errno ? errno : EIO));
	}
	if (mfd >= 0)
		close(mfd);
	if (real >= 0)
		close(real);
	free(g);
	return rc;
}

/* An abandoned save: rank 0 closes its file without keeping anything and
 * removes the .tmp directory.  Not collective. */
void ds_ckpt_writer_abandon(struct ds_ckpt *c)
{
	struct ds_err e = DS_ERR_INIT;
	if (c->dfd >= 0) {
		close(c->dfd);
		c->dfd = -1;
	}
	close_h5(c, 0, &e);
	if (!c->committed && c->dir && c->rank == 0 && c->made_dir)
		ds_ckpt_rm_rf(c->dir);
	c->made_dir = 0;
}

/* ---- create ---- */

/* Rank 0: the .tmp directory and state.h5 with the root attributes and
 * the standard groups. */
static int create_file(struct ds_ckpt *c, const struct ds_ckpt_meta *meta, struct ds_err *err)
{
	static const char *const groups[] = { "model", "optimizer", "scheduler", "loss_scaler", "data", "rng" };
	char msg[160];
	int rc = mkdir_p(c->save_dir, err);
	if (rc == 0 && (ds_ckpt_rm_rf(c->dir) != 0 || mkdir(c->dir, 0777) != 0))
		rc = ds_err_set(err, DS_EIO, "%s: cannot create: %s", c->dir, strerror(errno));
	if (rc < 0)
		return rc;
	c->made_dir = 1;
	hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = ds_ckpt_fapl(1);
	H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
	c->f = H5Fcreate(c->file, H5F_ACC_TRUNC, fcpl, fapl);
	H5Pclose(fcpl);
	H5Pclose(fapl);
	if (c->f < 0)
		return ds_err_set(err, DS_EIO, "%s: cannot create: %s", c->file, h5why(msg, sizeof msg));
	DS_TRY(write_meta(c, meta, err));
	for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++)
		DS_TRY(ensure_groups(c, groups[i], strlen(groups[i]), err));
	return 0;
}

int ds_ckpt_create(struct ds_ckpt **out, const char *save_dir, const struct ds_ckpt_meta *meta, struct ds_err *err)
{
	return ds_ckpt_create_comm(out, save_dir, meta, NULL, err);
}

int ds_ckpt_create_comm(struct ds_ckpt **out, const char *save_dir, const struct ds_ckpt_meta *meta,
			struct ds_comm *comm, struct ds_err *err)
{
	struct ds_ckpt *c;
	char tag[64];
	int rc = 0;
	*out = NULL;
	ds_ckpt_h5_quiet();
	if (!save_dir || !*save_dir)
		return ds_err_set(err, DS_EINVAL, "no checkpoint directory given (--save DIR)");
	if (meta->step < 0)
		return ds_err_set(err, DS_EINVAL, "%s: step %lld is negative", save_dir, (long long)meta->step);
	c = calloc(1, sizeof *c);
	if (!c)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	c->writing = 1;
	c->f = -1;
	c->dfd = -1;
	c->chunk_bytes = DS_CKPT_CHUNK_BYTES;
	c->comm = comm;
	c->W = comm ? ds_comm_size(comm) : 1;
	c->par = c->W > 1;
	c->rank = comm ? ds_comm_rank(comm) : 0;
	faults_from_env(c);
	snprintf(tag, sizeof tag, "global_step%lld", (long long)meta->step);
	c->save_dir = strdup(save_dir);
	c->tag = strdup(tag);
	snprintf(tag + strlen(tag), sizeof tag - strlen(tag), ".tmp");
	c->dir = ds_ckpt_join(save_dir, tag);
	c->file = c->dir ? ds_ckpt_join(c->dir, "state.h5") : NULL;
	if (!c->save_dir || !c->tag || !c->file)
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
	/* rank 0 makes the directory and the file, then every rank opens the
	 * file for its tensor bytes; each step is agreed */
	if (rc == 0 && c->rank == 0)
		rc = create_file(c, meta, err);
	if ((rc = agree(c, rc, err)) == 0) {
		c->dfd = open(c->file, O_WRONLY | O_CLOEXEC);
		if (c->dfd < 0)
			rc = ds_err_set(err, DS_EIO, "%s: rank %d cannot open for writing: %s", c->file, c->rank,
					strerror(errno));
		rc = agree(c, rc, err);
	}
	if (rc < 0) {
		ds_ckpt_close(c);
		return rc;
	}
	maybe_kill(c, "create");
	*out = c;
	return 0;
}

int ds_ckpt_set_chunk_bytes(struct ds_ckpt *c, size_t bytes, struct ds_err *err)
{
	if (bytes == 0 || bytes % 8)
		return ds_err_set(err, DS_EINVAL, "crc_chunk_bytes %zu must be a positive multiple of 8", bytes);
	c->chunk_bytes = bytes;
	return 0;
}

static struct ds_ckpt_wt *find_w(struct ds_ckpt *c, const char *name)
{
	for (size_t k = 0; k < c->nt; k++) {
		size_t i = (c->last + k) % c->nt;
		if (strcmp(c->t[i].name, name) == 0) {
			c->last = i;
			return &c->t[i];
		}
	}
	return NULL;
}

/* ---- tensors ---- */

/* Rank 0: the dataset of w, its bytes allocated now (contiguous, never
 * filled: every byte is written once by pwrite); *off its file offset. */
static int create_dataset(struct ds_ckpt *c, struct ds_ckpt_wt *w, uint64_t *off, struct ds_err *err)
{
	const char *slash = strrchr(w->name, '/');
	hid_t space, dcpl;
	haddr_t a;
	char msg[160];
	if (slash)
		DS_TRY(ensure_groups(c, w->name, (size_t)(slash - w->name), err));
	space = H5Screate_simple(w->ndim, w->shape, NULL);
	dcpl = H5Pcreate(H5P_DATASET_CREATE);
	H5Pset_layout(dcpl, H5D_CONTIGUOUS);
	H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
	H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
	w->dset = H5Dcreate2(c->f, w->name, file_type(w->dtype), space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
	H5Pclose(dcpl);
	H5Sclose(space);
	if (w->dset < 0)
		return ds_err_set(err, DS_EIO, "%s: cannot create dataset /%s: %s", c->file, w->name, h5why(msg, sizeof msg));
	uint64_t cb = w->chunk_bytes;
	if (attr_put_str(w->dset, "dtype", ds_ckpt_dtype_name(w->dtype)) < 0 ||
	    attr_put_scalar(w->dset, "crc_chunk_bytes", H5T_STD_U64LE, H5T_NATIVE_UINT64, &cb) < 0)
		return ds_err_set(err, DS_EIO, "%s: /%s: cannot write attributes: %s", c->file, w->name,
				  h5why(msg, sizeof msg));
	a = H5Dget_offset(w->dset);
	if (a == HADDR_UNDEF)
		return ds_err_set(err, DS_EIO, "%s: /%s: HDF5 allocated no file space for it", c->file, w->name);
	*off = (uint64_t)a;
	return 0;
}

static int tensor_create(struct ds_ckpt *c, const char *name, int dtype, int ndim, const uint64_t *shape,
			 struct ds_err *err)
{
	struct ds_ckpt_wt *w;
	uint64_t off = UINT64_MAX;
	int rc = 0;
	name = ds_ckpt_skip_slash(name);
	if (!c->writing || c->committed)
		return ds_err_set(err, DS_EINVAL, "%s: opened for reading; cannot create %s", c->file, name);
	if (!*name || strlen(name) >= DS_CKPT_NAME_MAX)
		return ds_err_set(err, DS_EINVAL, "%s: bad tensor name '%s'", c->file, name);
	if (!ds_ckpt_dtype_size(dtype) || ndim < 1 || ndim > DS_CKPT_MAX_DIMS)
		return ds_err_set(err, DS_EINVAL, "%s: tensor %s: bad dtype %d or ndim %d", c->file, name, dtype, ndim);
	if (find_w(c, name))
		return ds_err_set(err, DS_EINVAL, "%s: tensor %s created twice", c->file, name);
	uint64_t numel = 1;
	for (int i = 0; i < ndim; i++)
		numel *= shape[i];
	if (numel == 0)
		return ds_err_set(err, DS_EINVAL, "%s: tensor %s has no elements", c->file, name);
	if (c->nt == c->capt) {
		size_t cap = c->capt ? 2 * c->capt : 64;
		struct ds_ckpt_wt *t = realloc(c->t, cap * sizeof *t);
		if (!t)
			return ds_err_set(err, DS_ENOMEM, "out of memory");
		c->t = t;
		c->capt = cap;
	}
	w = &c->t[c->nt];
	memset(w, 0, sizeof *w);
	w->dset = -1;
	w->dtype = dtype;
	w->ndim = ndim;
	w->es = ds_ckpt_dtype_size(dtype);
	w->chunk_bytes = c->chunk_bytes;
	w->numel = numel;
	for (int i = 0; i < ndim; i++)
		w->shape[i] = shape[i];
	w->name = strdup(name);
	if (!w->name)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	c->last = c->nt++;
	/* rank 0 makes the dataset (unless it failed before) and hands out
	 * its offset; UINT64_MAX: none, the ranks skip its writes */
	if (c->rank == 0 && c->wrc == 0)
		rc = create_dataset(c, w, &off, err);
	if (c->par) {
		struct ds_err e = DS_ERR_INIT;
		if (ds_comm_broadcast(c->comm, &off, 1, DS_I64, 0, &e) < 0) {
			off = UINT64_MAX;
			if (rc == 0)
				rc = ds_err_set(err, DS_EIO, "%s: /%s: rank %d: %s", c->file, name, c->rank, e.msg);
		}
	}
	w->off = rc < 0 ? UINT64_MAX : off;
	return rc;
}

int ds_ckpt_tensor_create(struct ds_ckpt *c, const char *name, int dtype, int ndim, const uint64_t *shape,
			  struct ds_err *err)
{
	return note(c, tensor_create(c, name, dtype, ndim, shape, err), err);
}

/* pwrite bytes [bb, be) of w's data from p (its byte bb), or fail as the
 * test faults say. */
static int put_bytes(struct ds_ckpt *c, struct ds_ckpt_wt *w, uint64_t bb, uint64_t be, const uint8_t *p,
		     struct ds_err *err)
{
	int e = 0;
	if (c->fault_errno)
		e = c->fault_errno;
	else if (ds_pwrite_full(c->dfd, p, (size_t)(be - bb), w->off + bb) != 0)
		e = errno;
	ds_progress_note();
	if (!e)
		return 0;
	char buf[32];
	return ds_err_set(err, DS_EIO, "%s: %scannot write /%s (%llu bytes at offset %llu): %s", c->file,
			  who(c, buf, sizeof buf), w->name, (unsigned long long)(be - bb),
			  (unsigned long long)(w->off + bb), strerror(e));
}

/* Write elements [begin, end) of w from data: one CRC piece per chunk the
 * range touches, computed and written in runs of about RUN_BYTES (the
 * threads share the CRCs, then the run goes out while it is in cache). */
static int write_range(struct ds_ckpt *c, struct ds_ckpt_wt *w, uint64_t begin, uint64_t end, const void *data,
		       struct ds_err *err)
{
	const uint8_t *p = data;
	uint64_t bb = begin * w->es, be = end * w->es, cb = w->chunk_bytes;
	size_t k0 = w->np, nnew = (size_t)((be - 1) / cb - bb / cb + 1);
	DS_TRY(reserve_pieces(w, nnew, err));
	for (size_t k = 0; k < nnew; k++) {
		uint64_t ch = bb / cb + k, cs = ch * cb > bb ? ch * cb : bb, ce = (ch + 1) * cb < be ? (ch + 1) * cb : be;
		w->p[k0 + k] = (struct piece){ ch, cs - ch * cb, ce - cs, 0, 0 };
	}
	for (size_t k = 0; k < nnew; ) {
		size_t ke = k + 1;
		uint64_t bytes = w->p[k0 + k].len;
		while (ke < nnew && bytes + w->p[k0 + ke].len <= RUN_BYTES)
			bytes += w->p[k0 + ke++].len;
		#pragma omp parallel for schedule(dynamic, 1) if (ke - k > 2)
		for (size_t j = k; j < ke; j++) {
			struct piece *q = &w->p[k0 + j];
			q->crc = ds_crc32c(0, p + (q->chunk * cb + q->off - bb), (size_t)q->len);
		}
		uint64_t rb = w->p[k0 + k].chunk * cb + w->p[k0 + k].off;
		uint64_t re = w->p[k0 + ke - 1].chunk * cb + w->p[k0 + ke - 1].off + w->p[k0 + ke - 1].len;
		DS_TRY(put_bytes(c, w, rb, re, p + (rb - bb), err));
		k = ke;
	}
	w->np += nnew;
	return 0;
}

int ds_ckpt_tensor_write(struct ds_ckpt *c, const char *name, uint64_t begin, uint64_t end, const void *data,
			 struct ds_err *err)
{
	struct ds_ckpt_wt *w;
	name = ds_ckpt_skip_slash(name);
	if (!c->writing || c->committed)
		return ds_err_set(err, DS_EINVAL, "%s: not open for writing", c->file);
	w = find_w(c, name);
	if (!w)
		return note(c, ds_err_set(err, DS_EINVAL, "%s: tensor %s was not created", c->file, name), err);
	if (begin > end || end > w->numel)
		return note(c, ds_err_set(err, DS_EINVAL, "%s: /%s: slice [%llu, %llu) outside its %llu elements",
					  c->file, name, (unsigned long long)begin, (unsigned long long)end,
					  (unsigned long long)w->numel), err);
	if (begin == end)
		return 0;
	if (c->wrc < 0) {  /* this rank failed already: the save is lost, write nothing more */
		if (err)
			*err = c->werr;
		return c->wrc;
	}
	if (w->off == UINT64_MAX)  /* rank 0 could not create it; commit tells why */
		return 0;
	maybe_kill(c, "write");
	if (c->fault_rank == c->rank) {
		if (c->par)
			return note(c, ds_err_set(err, DS_EIO, "%s: /%s: rank %d: planted write failure "
						  "(DS_TEST_FAULT_CKPT_FAIL_RANK)", c->file, name, c->rank), err);
		return note(c, ds_err_set(err, DS_EIO, "%s: /%s: planted write failure (DS_TEST_FAULT_CKPT_FAIL_RANK)",
					  c->file, name), err);
	}
	return note(c, write_range(c, w, begin, end, data, err), err);
}

/* Make room for n more pieces of w. */
static int reserve_pieces(struct ds_ckpt_wt *w, size_t n, struct ds_err *err)
{
	if (w->np + n <= w->cap)
		return 0;
	size_t cap = w->cap ? w->cap : 16;
	while (cap < w->np + n)
		cap *= 2;
	struct piece *np = realloc(w->p, cap * sizeof *np);
	if (!np)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	w->p = np;
	w->cap = cap;
	return 0;
}

int ds_ckpt_tensor_pieces(struct ds_ckpt *c, const char *name, const struct ds_ckpt_crc_piece **p, size_t *n,
			  struct ds_err *err)
{
	struct ds_ckpt_wt *w;
	*p = NULL;
	*n = 0;
	name = ds_ckpt_skip_slash(name);
	if (!c->writing || c->committed)
		return ds_err_set(err, DS_EINVAL, "%s: not open for writing", c->file);
	if (!(w = find_w(c, name)))
		return ds_err_set(err, DS_EINVAL, "%s: tensor %s was not created", c->file, name);
	*p = w->p;
	*n = w->np;
	return 0;
}

int ds_ckpt_tensor_add_pieces(struct ds_ckpt *c, const char *name, const struct ds_ckpt_crc_piece *p, size_t n,
			      struct ds_err *err)
{
	struct ds_ckpt_wt *w;
	name = ds_ckpt_skip_slash(name);
	if (!c->writing || c->committed)
		return ds_err_set(err, DS_EINVAL, "%s: not open for writing", c->file);
	if (!(w = find_w(c, name)))
		return ds_err_set(err, DS_EINVAL, "%s: tensor %s was not created", c->file, name);
	uint64_t total = w->numel * w->es, cb = w->chunk_bytes, nch = (total + cb - 1) / cb;
	for (size_t i = 0; i < n; i++) {
		uint64_t clen = p[i].chunk == nch - 1 ? total - p[i].chunk * cb : cb;
		if (p[i].chunk >= nch || p[i].len == 0 || p[i].off > clen || p[i].len > clen - p[i].off)
			return ds_err_set(err, DS_EINVAL, "%s: /%s: CRC piece (chunk %llu, bytes %llu+%llu) outside the "
					  "tensor's %llu chunks of %llu bytes", c->file, name,
					  (unsigned long long)p[i].chunk, (unsigned long long)p[i].off,
					  (unsigned long long)p[i].len, (unsigned long long)nch, (unsigned long long)cb);
	}
	DS_TRY(reserve_pieces(w, n, err));
	memcpy(w->p + w->np, p, n * sizeof *p);
	w->np += n;
	return 0;
}

int ds_ckpt_tensor_put(struct ds_ckpt *c, const char *name, int dtype, int ndim, const uint64_t *shape,
		       const void *data, struct ds_err *err)
{
	uint64_t n = 1;
	DS_TRY(ds_ckpt_tensor_create(c, name, dtype, ndim, shape, err));
	for (int i = 0; i < ndim; i++)
		n *= shape[i];
	return ds_ckpt_tensor_write(c, name, 0, n, data, err);
}

/* ---- commit ---- */

static int piece_cmp(const void *a, const void *b)
{
	const struct piece *x = a, *y = b;
	if (x->chunk != y->chunk)
		return x->chunk < y->chunk ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/* Rank 0: combine the pieces into one CRC per chunk (kept in w->crc for the
 * manifest) and store them as the dataset's crc32c attribute. */
static int finish_tensor(struct ds_ckpt *c, struct ds_ckpt_wt *w, struct ds_err *err)
{
	uint64_t total = w->numel * w->es, cb = w->chunk_bytes, nch = (total + cb - 1) / cb;
	uint32_t *crc = calloc(nch, sizeof *crc);
	size_t k = 0;
	int rc = 0;
	char msg[160];
	if (!crc)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	qsort(w->p, w->np, sizeof *w->p, piece_cmp);
	for (uint64_t ch = 0; ch < nch && rc == 0; ch++) {
		uint64_t len = ch == nch - 1 ? total - ch * cb : cb, pos = 0;
		uint32_t v = 0;
		for (; k < w->np && w->p[k].chunk == ch; k++) {
			if (w->p[k].off != pos)
				break;
			v = ds_ckpt_crc_combine(v, w->p[k].crc, w->p[k].len);
			pos += w->p[k].len;
		}
		/* a piece of this chunk left over (it did not start where the last
		 * one ended), or bytes missing at the end */
		if (pos != len || (k < w->np && w->p[k].chunk == ch)) {
			uint64_t at = (ch * cb + pos) / w->es;
			if (k < w->np && w->p[k].chunk == ch && w->p[k].off < pos)
				rc = ds_err_set(err, DS_EINVAL, "%s: /%s: element %llu written twice", c->file, w->name,
						(unsigned long long)((ch * cb + w->p[k].off) / w->es));
			else
				rc = ds_err_set(err, DS_EINVAL, "%s: /%s: elements from %llu on were never written; "
						"every element of a tensor must be written before commit", c->file,
						w->name, (unsigned long long)at);
		}
		crc[ch] = v;
	}
	if (rc == 0) {
		hsize_t n = nch;
		hid_t s = H5Screate_simple(1, &n, NULL);
		if (attr_put(w->dset, "crc32c", H5T_STD_U32LE, H5T_NATIVE_UINT32, s, crc) < 0)
			rc = ds_err_set(err, DS_EIO, "%s: /%s: cannot store checksums: %s", c->file, w->name,
					h5why(msg, sizeof msg));
		H5Sclose(s);
	}
	free(w->crc);
	w->crc = rc == 0 ? crc : NULL;
	if (rc < 0)
		free(crc);
	return rc;
}

/* Rank 0, state.h5 closed and synced: its manifest, every tensor's chunks
 * with the CRCs the writers computed and the HDF5 metadata between them. */
static int write_manifest(struct ds_ckpt *c, struct ds_err *err)
{
	size_t n = 0, k = 0;
	struct ds_ckpt_extent *x;
	int fd, rc;
	for (size_t i = 0; i < c->nt; i++)
		n += (size_t)((c->t[i].numel * c->t[i].es + c->t[i].chunk_bytes - 1) / c->t[i].chunk_bytes);
	x = malloc((n ? n : 1) * sizeof *x);
	if (!x)
		return ds_err_set(err, DS_ENOMEM, "out of memory for %zu manifest extents", n);
	for (size_t i = 0; i < c->nt; i++) {
		const struct ds_ckpt_wt *w = &c->t[i];
		uint64_t total = w->numel * w->es, cb = w->chunk_bytes;
		for (uint64_t ch = 0; ch * cb < total; ch++)
			x[k++] = (struct ds_ckpt_extent){ w->off + ch * cb, ch * cb + cb < total ? cb : total - ch * cb,
							  w->crc[ch], DS_CKPT_EXT_DATA };
	}
	fd = open(c->file, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		rc = ds_err_set(err, DS_EIO, "%s: cannot reopen: %s", c->file, strerror(errno));
	else
		rc = ds_ckpt_manifest_write(fd, c->file, x, k, err);
	if (fd >= 0)
		close(fd);
	free(x);
	return rc;
}

static int write_latest(struct ds_ckpt *c, struct ds_err *err)
{
	char *tmp = ds_ckpt_join(c->save_dir, "latest.tmp"), *fin = ds_ckpt_join(c->save_dir, "latest");
	int rc = 0, fd = -1;
	if (!tmp || !fin) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0 || dprintf(fd, "%s\n", c->tag) < 0 || fsync(fd) != 0) {
		rc = ds_err_set(err, DS_EIO, "%s: cannot write: %s", tmp, strerror(errno));
		goto out;
	}
	close(fd);
	fd = -1;
	if (rename(tmp, fin) != 0) {
		rc = ds_err_set(err, DS_EIO, "%s: cannot rename to %s: %s", tmp, fin, strerror(errno));
		goto out;
	}
	fsync_path(c->save_dir);
out:
	if (fd >= 0)
		close(fd);
	if (rc < 0 && tmp)
		unlink(tmp);
	free(tmp);
	free(fin);
	return rc;
}

/* Rename the complete, synced SAVE/tag.tmp to SAVE/tag, then replace
 * `latest` (c->committed is set once the tag directory is in place). */
static int publish(struct ds_ckpt *c, struct ds_err *err)
{
	char *fin = NULL, *old = NULL;
	int rc = 0, moved_old = 0;
	if (fsync_path(c->dir) != 0)
		return ds_err_set(err, DS_EIO, "%s: fsync failed: %s", c->dir, strerror(errno));
	fin = ds_ckpt_join(c->save_dir, c->tag);
	old = fin ? ds_ckpt_join(c->save_dir, ".replaced") : NULL;
	if (!old) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	/* Saving a step that exists (a rerun): move the old one aside first,
	 * since rename(2) will not replace a non-empty directory. */
	if (access(fin, F_OK) == 0) {
		ds_ckpt_rm_rf(old);
		if (rename(fin, old) != 0) {
			rc = ds_err_set(err, DS_EIO, "%s: cannot move aside: %s", fin, strerror(errno));
			goto out;
		}
		moved_old = 1;
	}
	if (rename(c->dir, fin) != 0) {
		rc = ds_err_set(err, DS_EIO, "%s: cannot rename to %s: %s", c->dir, fin, strerror(errno));
		if (moved_old)
			rename(old, fin);
		goto out;
	}
	if (moved_old)
		ds_ckpt_rm_rf(old);
	fsync_path(c->save_dir);
	c->committed = 1;
	/* from here the tag is complete; only `latest` remains */
	free(c->dir);
	c->dir = fin;
	fin = NULL;
	free(c->file);
	c->file = ds_ckpt_join(c->dir, "state.h5");
	maybe_kill(c, "latest");
	rc = write_latest(c, err);
out:
	free(fin);
	free(old);
	return rc;
}

/* One record of the pieces exchange: a piece and the index of its tensor
 * (the same on every rank, since tensor_create is collective). */
struct xpiece { uint64_t tensor, chunk, off, len, crc; };

/* Allgather every rank's CRC pieces; rank 0 keeps the others'. */
static int gather_pieces(struct ds_ckpt *c, struct ds_err *err)
{
	int W = c->W, rc;
	int64_t *cnt = calloc((size_t)W, sizeof *cnt), n = 0, maxn = 0;
	struct xpiece *mine = NULL, *all = NULL;
	if (!cnt)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (size_t i = 0; i < c->nt; i++)
		n += (int64_t)c->t[i].np;
	cnt[c->rank] = n;
	if ((rc = ds_comm_allgather(c->comm, &n, cnt, 1, DS_I64, err)) < 0)
		goto out;
	for (int r = 0; r < W; r++)
		maxn = cnt[r] > maxn ? cnt[r] : maxn;
	mine = calloc((size_t)(maxn ? maxn : 1), sizeof *mine);
	all = calloc((size_t)(maxn ? maxn : 1) * (size_t)W, sizeof *all);
	if (!mine || !all) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory for %lld CRC pieces", (long long)maxn * W);
		goto out;
	}
	n = 0;
	for (size_t i = 0; i < c->nt; i++)
		for (size_t k = 0; k < c->t[i].np; k++, n++) {
			const struct piece *q = &c->t[i].p[k];
			mine[n] = (struct xpiece){ i, q->chunk, q->off, q->len, q->crc };
		}
	if (maxn && (rc = ds_comm_allgather(c->comm, mine, all, (size_t)maxn * sizeof *mine, DS_U8, err)) < 0)
		goto out;
	for (int r = 1; r < W && rc == 0 && c->rank == 0; r++) {
		for (int64_t k = 0; k < cnt[r] && rc == 0; k++) {
			const struct xpiece *x = &all[(size_t)r * (size_t)maxn + (size_t)k];
			struct piece q = { x->chunk, x->off, x->len, (uint32_t)x->crc, 0 };
			if (x->tensor >= c->nt)
				rc = ds_err_set(err, DS_EINVAL, "%s: rank %d sent CRC pieces of tensor %llu of %zu; the "
						"ranks created different tensors", c->file, r,
						(unsigned long long)x->tensor, c->nt);
			else
				rc = ds_ckpt_tensor_add_pieces(c, c->t[x->tensor].name, &q, 1, err);
		}
	}
out:
	free(cnt);
	free(mine);
	free(all);
	return rc;
}

/* Rank 0, every rank's bytes on disk: checksums, HDF5 metadata, manifest,
 * rename, `latest`.  On failure before the rename the save is abandoned
 * here (the .tmp directory removed). */
static int finalize(struct ds_ckpt *c, struct ds_err *err)
{
	int rc = 0;
	for (size_t i = 0; i < c->nt && rc == 0; i++)
		rc = finish_tensor(c, &c->t[i], err);
	if (rc == 0)
		rc = close_h5(c, 1, err);
	if (rc == 0) {
		maybe_kill(c, "close");
		rc = write_manifest(c, err);
	}
	if (rc == 0) {
		maybe_kill(c, "rename");
		rc = publish(c, err);
	}
	if (rc < 0 && !c->committed)
		ds_ckpt_writer_abandon(c);
	return rc;
}

int ds_ckpt_commit(struct ds_ckpt *c, struct ds_err *err)
{
	struct ds_err e = DS_ERR_INIT;
	char tail[DS_ERR_MSG_MAX];
	int rc;
	if (!c->writing || c->committed)
		return ds_err_set(err, DS_EINVAL, "%s: not an open checkpoint writer", c->file ? c->file : "checkpoint");
	maybe_kill(c, "commit");
	/* every rank's bytes on disk (a file system may report a full disk
	 * only now), then all agree that everything was written */
	if (c->dfd >= 0) {
		if (c->wrc == 0 && fdatasync(c->dfd) != 0)
			note(c, ds_err_set(&e, DS_EIO, "%s: %scannot write its bytes to disk: %s", c->file,
					   who(c, tail, sizeof tail), strerror(errno)), &e);
		close(c->dfd);
		c->dfd = -1;
	}
	e = c->werr;
	rc = agree(c, c->wrc, &e);
	if (rc == 0 && c->par)
		rc = agree(c, gather_pieces(c, &e), &e);
	if (rc == 0)
		rc = agree(c, c->rank == 0 ? finalize(c, &e) : 0, &e);
	if (rc == 0)
		return 0;
	/* failed everywhere: rank 0 removes what is left, the others wait
	 * for that, so the job ends with nothing half-written on disk */
	if (!c->committed)
		ds_ckpt_writer_abandon(c);
	if (c->par)
		ds_comm_barrier(c->comm, NULL);
	latest_note(c, tail, sizeof tail);
	ds_err_set(err, rc, "%.*s%s", (int)(sizeof e.msg - strlen(tail) - 1), e.msg, tail);
	return rc;
}

/* ---- attribute API ------------------------------------------------------------ */

/* Rank 0 writes every attribute; the other ranks' calls do nothing. */
static int attr_set(struct ds_ckpt *c, const char *group, const char *key, int kind, const void *v,
		    struct ds_err *err)
{
	const char *g = ds_ckpt_skip_slash(group ? group : "");
	hid_t o;
	herr_t rc;
	char msg[160];
	if (!c->writing || c->committed)
		return ds_err_set(err, DS_EINVAL, "%s: attributes are set on a checkpoint being written", c->file);
	if (c->rank != 0)
		return 0;
	if (c->wrc < 0) {
		if (err)
			*err = c->werr;
		return c->wrc;
	}
	if (*g)
		DS_TRY(note(c, ensure_groups(c, g, strlen(g), err), err));
	o = ds_ckpt_open_obj(c, g);
	if (o < 0)
		return note(c, ds_err_set(err, DS_EIO, "%s: cannot open /%s: %s", c->file, g, h5why(msg, sizeof msg)), err);
	if (kind == 0)
		rc = attr_put_scalar(o, key, H5T_STD_I64LE, H5T_NATIVE_INT64, v);
	else if (kind == 1)
		rc = attr_put_scalar(o, key, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v);
	else
		rc = attr_put_str(o, key, v);
	H5Oclose(o);
	if (rc < 0)
		return note(c, ds_err_set(err, DS_EIO, "%s: /%s: cannot set attribute %s: %s", c->file, g, key,
					  h5why(msg, sizeof msg)), err);
	return 0;
}

int ds_ckpt_attr_set_i64(struct ds_ckpt *c, const char *group, const char *key, int64_t v, struct ds_err *err)
{
	return attr_set(c, group, key, 0, &v, err);
}

int ds_ckpt_attr_set_f64(struct ds_ckpt *c, const char *group, const char *key, double v, struct ds_err *err)
{
	return attr_set(c, group, key, 1, &v, err);
}

int ds_ckpt_attr_set_str(struct ds_ckpt *c, const char *group, const char *key, const char *v, struct ds_err *err)
{
	return attr_set(c, group, key, 2, v, err);
}
