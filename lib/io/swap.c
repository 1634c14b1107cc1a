/* swap.c - the swap files of one rank of one run (see swap.h): a private
 * directory under nvme_path, files created O_DIRECT, allocated and
 * unlinked at once, and two aio handles (reads, writes).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "io/swap.h"
#include "util/mem.h"
#include "util/timer.h"

#define MAXF 8

struct swap_file {
	int fd;
	uint64_t bytes;
	char label[96];
};

struct ds_swap {
	struct ds_swap_opts o;
	char dir[4096];   /* the private directory; "" once removed */
	const char *key;
	struct ds_aio *rd, *wr;
	struct swap_file f[MAXF];
	int nf;
	int rpend, wpend;
	struct ds_swap_stats st;
};

uint64_t ds_swap_align(const struct ds_aio_opts *aio)
{
	int p = aio && aio->intra_op_parallelism > 0 ? aio->intra_op_parallelism : 1;
	return (uint64_t)DS_AIO_ALIGN * (uint64_t)p;
}

static const char *key_of(const char *key) { return key ? key : "nvme_path"; }

int ds_swap_check_dir(const char *dir, const char *key, uint64_t need, struct ds_err *err)
{
	struct stat sb;
	struct statvfs vf;
	char h1[32], h2[32];
	key = key_of(key);
	if (!dir || !*dir)
		return ds_err_set(err, DS_EINVAL, "%s: empty; give a directory on a local NVMe drive", key);
	if (stat(dir, &sb) != 0)
		return ds_err_set(err, DS_EINVAL, "%s: '%s': %s; create it (a directory on a local NVMe drive)", key, dir,
				  strerror(errno));
	if (!S_ISDIR(sb.st_mode))
		return ds_err_set(err, DS_EINVAL, "%s: '%s' is not a directory", key, dir);
	if (access(dir, W_OK | X_OK) != 0)
		return ds_err_set(err, DS_EINVAL, "%s: '%s' is not writable (%s); give a directory this job may write",
				  key, dir, strerror(errno));
	/* creates a file there: also the writability test root's access() skips */
	struct ds_err e = DS_ERR_INIT;
	int rc = ds_aio_probe_direct(dir, &e);
	if (rc < 0)
		return ds_err_set(err, rc, "%s: %s", key, e.msg);
	if (rc == 0)
		return ds_err_set(err, DS_EINVAL, "%s: '%s' refuses O_DIRECT (tmpfs or a network file system?); NVMe "
				  "offload reads and writes around the page cache: use a local NVMe file system", key, dir);
	uint64_t avail = 0;
	if (statvfs(dir, &vf) == 0)
		avail = (uint64_t)vf.f_bavail * (uint64_t)vf.f_frsize;
	const char *fake = getenv("DS_TEST_NVME_FREE_BYTES");
	if (fake && *fake)
		avail = strtoull(fake, NULL, 10);
	if (avail < need)
		return ds_err_set(err, DS_EINVAL, "%s: '%s' has %s (%llu bytes) free but the swap files need %s (%llu "
				  "bytes); free space there or use a larger NVMe directory", key, dir,
				  ds_fmt_bytes((double)avail, h1, sizeof h1), (unsigned long long)avail,
				  ds_fmt_bytes((double)need, h2, sizeof h2), (unsigned long long)need);
	return 0;
}

int ds_swap_create(struct ds_swap **out, const struct ds_swap_opts *o, struct ds_err *err)
{
	struct ds_swap *s;
	char host[64] = "host";
	int rc;
	*out = NULL;
	DS_TRY(ds_swap_check_dir(o->dir, o->key, 0, err));
	if (!(s = calloc(1, sizeof *s)))
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	s->o = *o;
	s->o.aio.buffered = 0;
	s->key = key_of(o->key);
	for (int i = 0; i < MAXF; i++)
		s->f[i].fd = -1;
	gethostname(host, sizeof host - 1);
	for (char *p = host; *p; p++)
		if (*p == '/' || *p == '.')
			*p = '_';
	if ((size_t)snprintf(s->dir, sizeof s->dir, "%s/dstk-swap.%.40s.r%d.XXXXXX", o->dir, host, o->rank) >=
	    sizeof s->dir) {
		rc = ds_err_set(err, DS_EINVAL, "%s: '%s': path too long", s->key, o->dir);
		goto fail;
	}
	if (!mkdtemp(s->dir)) {
		rc = ds_err_set(err, DS_EINVAL, "%s: cannot create a directory in '%s': %s", s->key, o->dir,
				strerror(errno));
		s->dir[0] = 0;
		goto fail;
	}
	if ((rc = ds_aio_create(&s->rd, &s->o.aio, err)) < 0 || (rc = ds_aio_create(&s->wr, &s->o.aio, err)) < 0) {
		ds_err_prefix(err, "aio: ");
		goto fail;
	}
	struct ds_aio_busy *gr[2][2] = { { o->busy_read, o->busy_io }, { o->busy_write, o->busy_io } };
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++)
			if (gr[i][j])
				ds_aio_add_busy_group(i ? s->wr : s->rd, gr[i][j]); /* idle and new: cannot fail */
	*out = s;
	return 0;
fail:
	ds_swap_destroy(s);
	return rc;
}

void ds_swap_seal(struct ds_swap *s)
{
	if (s && s->dir[0]) {
		rmdir(s->dir);
		s->dir[0] = 0;
	}
}

void ds_swap_destroy(struct ds_swap *s)
{
	if (!s)
		return;
	if (s->rd)
		ds_aio_wait(s->rd, NULL);
	if (s->wr)
		ds_aio_wait(s->wr, NULL);
	ds_aio_destroy(s->rd);
	ds_aio_destroy(s->wr);
	for (int i = 0; i < s->nf; i++)
		if (s->f[i].fd >= 0)
			close(s->f[i].fd);
	ds_swap_seal(s);
	free(s);
}

int ds_swap_add(struct ds_swap *s, const char *name, uint64_t bytes, struct ds_err *err)
{
	char path[4200], h[32];
	const uint64_t al = ds_swap_align(&s->o.aio);
	if (s->nf == MAXF)
		return ds_err_set(err, DS_EINVAL, "swap: more than %d files", MAXF);
	if (!s->dir[0])
		return ds_err_set(err, DS_EINVAL, "swap: files are added before ds_swap_seal");
	if (bytes % al)
		return ds_err_set(err, DS_EINVAL, "swap file %s: %llu bytes are not a multiple of %llu", name,
				  (unsigned long long)bytes, (unsigned long long)al);
	snprintf(path, sizeof path, "%s/%s.swp", s->dir, name);
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
	if (fd < 0)
		return ds_err_set(err, errno == EINVAL ? DS_EINVAL : DS_EIO, "%s: create %s: %s", s->key, path,
				  strerror(errno));
	unlink(path);  /* from here on the file lives exactly as long as fd */
	if (bytes > 0) {
		int r = posix_fallocate(fd, 0, (off_t)bytes);
		if (r == ENOSPC || r == EFBIG) {
			close(fd);
			return ds_err_set(err, DS_EINVAL, "%s: '%s' has no room for %s of swap file %s (%s); free space "
					  "there or use a larger NVMe directory", s->key, s->o.dir,
					  ds_fmt_bytes((double)bytes, h, sizeof h), name, strerror(r));
		}
		if (r != 0 && r != EOPNOTSUPP && r != EINVAL) {
			close(fd);
			return ds_err_set(err, DS_EIO, "%s: allocating swap file %s: %s", s->key, name, strerror(r));
		}
	}
	struct swap_file *f = &s->f[s->nf];
	f->fd = fd;
	f->bytes = bytes;
	snprintf(f->label, sizeof f->label, "swap file %s (rank %d)", name, s->o.rank);
	return s->nf++;
}

static int check_range(const struct ds_swap *s, int f, uint64_t off, uint64_t n, const char *what,
		       struct ds_err *err)
{
	const uint64_t al = ds_swap_align(&s->o.aio);
	if (f < 0 || f >= s->nf)
		return ds_err_set(err, DS_EINVAL, "swap: %s of file %d of %d", what, f, s->nf);
	if (off % al || n % al || n == 0 || off + n > s->f[f].bytes)
		return ds_err_set(err, DS_EINVAL, "%s: %s of %llu bytes at %llu: outside the file (%llu bytes) or not "
				  "a multiple of %llu", s->f[f].label, what, (unsigned long long)n,
				  (unsigned long long)off, (unsigned long long)s->f[f].bytes, (unsigned long long)al);
	return 0;
}

/* DS_TEST_FAULT_SWAP_EIO (swap.h): this process's operations so far */
static int planted_eio(const struct ds_swap *s, int f, const char *what, struct ds_err *err)
{
	static long count;
	const char *v = getenv("DS_TEST_FAULT_SWAP_EIO");
	if (!v || !*v || ++count != atol(v))
		return 0;
	return ds_err_set(err, DS_EIO, "%s: %s: %s (planted: DS_TEST_FAULT_SWAP_EIO)", s->f[f].label, what,
			  strerror(EIO));
}

int ds_swap_read(struct ds_swap *s, int f, uint64_t off, void *buf, uint64_t n, struct ds_err *err)
{
	DS_TRY(check_range(s, f, off, n, "read", err));
	DS_TRY(planted_eio(s, f, "read", err));
	DS_TRY(ds_aio_pread_fd(s->rd, buf, n, s->f[f].fd, s->f[f].label, off, 1, err));
	s->rpend = 1;
	s->st.bytes_read += n;
	s->st.reads++;
	return 0;
}

int ds_swap_write(struct ds_swap *s, int f, uint64_t off, const void *buf, uint64_t n, struct ds_err *err)
{
	DS_TRY(check_range(s, f, off, n, "write", err));
	DS_TRY(planted_eio(s, f, "write", err));
	DS_TRY(ds_aio_pwrite_fd(s->wr, buf, n, s->f[f].fd, s->f[f].label, off, 1, err));
	s->wpend = 1;
	s->st.bytes_written += n;
	s->st.writes++;
	return 0;
}

static int wait_on(struct ds_aio *h, int *pend, double *acc, struct ds_err *err)
{
	if (!*pend)
		return 0;
	double t0 = ds_now();
	int rc = ds_aio_wait(h, err);
	*acc += ds_now() - t0;
	*pend = 0;
	return rc < 0 ? rc : 0;
}

int ds_swap_wait_reads(struct ds_swap *s, struct ds_err *err)
{
	return wait_on(s->rd, &s->rpend, &s->st.wait_read_s, err);
}

int ds_swap_wait_writes(struct ds_swap *s, struct ds_err *err)
{
	return wait_on(s->wr, &s->wpend, &s->st.wait_write_s, err);
}

int ds_swap_reads_pending(const struct ds_swap *s) { return s->rpend; }
int ds_swap_writes_pending(const struct ds_swap *s) { return s->wpend; }

void ds_swap_take_stats(struct ds_swap *s, struct ds_swap_stats *st)
{
	s->st.busy_read_s = ds_aio_busy_seconds(s->rd);
	s->st.busy_write_s = ds_aio_busy_seconds(s->wr);
	*st = s->st;
	memset(&s->st, 0, sizeof s->st);
}

uint64_t ds_swap_bytes(const struct ds_swap *s)
{
	uint64_t b = 0;
	for (int i = 0; i < s->nf; i++)
		b += s->f[i].bytes;
	return b;
}

const char *ds_swap_engine(const struct ds_swap *s) { return ds_aio_get_engine(s->rd); }

void *ds_swap_buf_alloc(size_t bytes)
{
	return ds_alloc_aligned(bytes ? bytes : DS_AIO_ALIGN, DS_AIO_ALIGN);
}
