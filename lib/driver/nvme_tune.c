/* nvme_tune.c - ds_nvme_tune_run and its renderings (see nvme_tune.h).
 *
 * Order of work: check every input (directories, sweep file, io_size
 * against each thread count, free space, log_dir), probe O_DIRECT, write
 * the read files, search, remove the scratch files.  A trial creates one
 * handle per directory, issues the operation on all of them, then waits
 * for all: the directories are one device set.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <csv.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "driver/nvme_tune.h"
#include "util/mem.h"
#include "util/timer.h"

#define GIB (1024.0 * 1024.0 * 1024.0)

/* ---- the space ----------------------------------------------------------- */

void ds_nvme_tune_space_default(const char *engine, struct ds_tune_space *s)
{
	static const int64_t bs[] = { 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20, 8 << 20 };
	static const int64_t qd[] = { 4, 8, 16, 32, 64, 128 };
	static const int64_t par[] = { 1, 2, 4, 8 };
	static const int64_t bools[] = { 0, 1 };

	memset(s, 0, sizeof(*s));
	ds_tune_space_add(s, "block_size", bs, 7, NULL);
	/* posix has one request in flight per thread: depth and submission
	 * modes change nothing there, so they are not searched */
	if (!engine || strcmp(engine, "posix") != 0)
		ds_tune_space_add(s, "queue_depth", qd, 6, NULL);
	ds_tune_space_add(s, "intra_op_parallelism", par, 4, NULL);
	if (!engine || strcmp(engine, "posix") != 0) {
		ds_tune_space_add(s, "overlap_events", bools, 2, NULL);
		ds_tune_space_add(s, "single_submit", bools, 2, NULL);
	}
}

/* One sweep value of key `key` (optdef d) as an integer. */
static int sweep_value(const char *path, const char *key, const struct ds_aio_optdef *d, int invert, json_t *v,
		       int buffered, int64_t *out, struct ds_err *err)
{
	int64_t x;

	if (d->type == DS_AIO_OPT_BOOL) {
		if (json_is_boolean(v))
			x = json_is_true(v);
		else if (json_is_string(v) && !strcmp(json_string_value(v), "true"))
			x = 1; /* DeepSpeed prints its booleans as strings */
		else if (json_is_string(v) && !strcmp(json_string_value(v), "false"))
			x = 0;
		else
			return ds_err_set(err, DS_EINVAL, "%s: key '%s': expected true or false", path, key);
		if (invert)
			x = !x;
	} else if (json_is_integer(v)) {
		x = json_integer_value(v);
	} else if (d->type == DS_AIO_OPT_SIZE && json_is_string(v)) {
		uint64_t u;
		if (ds_parse_size(json_string_value(v), &u) < 0 || u > INT64_MAX)
			return ds_err_set(err, DS_EINVAL, "%s: key '%s': '%s' is not a size (e.g. 1M, 131072)", path, key,
					  json_string_value(v));
		x = (int64_t)u;
	} else {
		return ds_err_set(err, DS_EINVAL, "%s: key '%s': expected %s", path, key,
				  d->type == DS_AIO_OPT_SIZE ? "a size (1048576 or \"1M\")" : "an integer");
	}
	if (x < d->min || x > d->max)
		return ds_err_set(err, DS_EINVAL, "%s: key '%s': %lld is out of range [%lld, %lld]", path, key,
				  (long long)x, (long long)d->min, (long long)d->max);
	if (!strcmp(d->name, "block_size") && !buffered && x % DS_AIO_ALIGN)
		return ds_err_set(err, DS_EINVAL, "%s: key '%s': %lld is not a multiple of %d, as O_DIRECT needs "
				  "(or use --buffered)", path, key, (long long)x, DS_AIO_ALIGN);
	*out = x;
	return 0;
}

int ds_nvme_tune_space_load(const char *path, int buffered, struct ds_tune_space *s, struct ds_err *err)
{
	json_error_t je;
	json_t *root = json_load_file(path, 0, &je), *vals;
	const char *key;
	int rc = 0;

	memset(s, 0, sizeof(*s));
	if (!root) {
		if (je.line < 1)
			return ds_err_set(err, DS_EINVAL, "%s: %s", path, je.text);
		return ds_err_set(err, DS_EINVAL, "%s: line %d column %d: %s", path, je.line, je.column, je.text);
	}
	if (!json_is_object(root)) {
		json_decref(root);
		return ds_err_set(err, DS_EINVAL, "%s: expected a JSON object {\"key\": [values], ...}", path);
	}
	json_object_foreach(root, key, vals) {
		int invert = !strcmp(key, "sequential_requests"); /* DeepSpeed: sequential = not overlapped */
		const struct ds_aio_optdef *d = ds_aio_optdef_find(invert ? "overlap_events" : key);
		int64_t v[DS_TUNE_MAX_VALUES];
		size_t n = json_is_array(vals) ? json_array_size(vals) : 1;

		if (!strcmp(key, "folder_to_device_mapping"))
			continue; /* DeepSpeed's own bookkeeping; directories come from --nvme_dir */
		if (!strcmp(key, "use_gds")) {
			for (size_t i = 0; i < (json_is_array(vals) ? json_array_size(vals) : 1); i++)
				if (json_is_true(json_is_array(vals) ? json_array_get(vals, i) : vals)) {
					rc = ds_err_set(err, DS_ENOTSUP, "%s: key 'use_gds': built without GPUDirect Storage "
							"(NVIDIA cuFile); reconfigure --with-cuda on a machine with GDS", path);
					break;
				}
			if (rc < 0)
				break;
			continue;
		}
		if (!d) {
			rc = ds_err_set(err, DS_EINVAL, "%s: unknown key '%s' (known: block_size, queue_depth, "
					"intra_op_parallelism, single_submit, overlap_events; DeepSpeed's io_parallel and "
					"sequential_requests)", path, key);
			break;
		}
		if (n < 1 || n > DS_TUNE_MAX_VALUES) {
			rc = ds_err_set(err, DS_EINVAL, "%s: key '%s': %zu values, expected 1 to %d", path, key, n,
					DS_TUNE_MAX_VALUES);
			break;
		}
		for (size_t i = 0; i < n && rc == 0; i++)
			rc = sweep_value(path, key, d, invert, json_is_array(vals) ? json_array_get(vals, i) : vals,
					 buffered, &v[i], err);
		if (rc == 0 && ds_tune_space_find(s, d->name) >= 0)
			rc = ds_err_set(err, DS_EINVAL, "%s: key '%s' sets %s a second time", path, key, d->name);
		if (rc == 0)
			rc = ds_tune_space_add(s, d->name, v, (int)n, err);
		if (rc < 0)
			break;
	}
	json_decref(root);
	if (rc == 0 && s->ndims == 0)
		rc = ds_err_set(err, DS_EINVAL, "%s: no settings to sweep", path);
	return rc;
}

/* ---- a run --------------------------------------------------------------- */

struct run {
	const struct ds_nvme_tune_opts *o;
	struct ds_nvme_tune_res *res;
	struct ds_tune_space space;
	struct ds_aio_opts base;
	int nofile, cap;
	char **rpath, **wpath; /* scratch files per directory */
	unsigned char **buf;   /* io_size per directory */
};

static void fill_random(unsigned char *b, uint64_t n, uint64_t seed)
{
	uint64_t x = 0x9E3779B97F4A7C15ull ^ seed;
	uint64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(b + i, &x, 8);
	}
	for (; i < n; i++)
		b[i] = (unsigned char)(x >> (8 * (i % 8)));
}

static int stopped(const struct run *R, struct ds_err *err)
{
	if (R->o->stop && *R->o->stop)
		return ds_err_set(err, DS_ESIGNAL, "stopped by a signal; scratch files removed");
	return 0;
}

/* Drop the cached pages of path (our own files: no root needed). */
static void drop_cache(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	fdatasync(fd);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
}

/* Each directory exists, is one, and is writable (as root, access() says
 * yes to everything: the O_DIRECT probe creates a file to be sure). */
static int check_dirs(const struct ds_nvme_tune_opts *o, int nofile, struct ds_err *err)
{
	struct stat *seen = calloc((size_t)o->ndirs, sizeof(*seen));
	int rc = 0;

	if (!seen)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (int i = 0; i < o->ndirs && rc == 0; i++) {
		const char *d = o->dirs[i];
		if (stat(d, &seen[i]) < 0)
			rc = ds_err_set(err, DS_EINVAL, "--nvme_dir %s: %s; give an existing writable directory", d,
					strerror(errno));
		for (int j = 0; j < i && rc == 0; j++)
			if (seen[j].st_dev == seen[i].st_dev && seen[j].st_ino == seen[i].st_ino)
				rc = ds_err_set(err, DS_EINVAL, "--nvme_dir %s: the same directory as %s", d, o->dirs[j]);
	}
	free(seen);
	if (rc < 0)
		return rc;
	for (int i = 0; i < o->ndirs; i++) {
		const char *d = o->dirs[i];
		struct statvfs vfs;
		struct stat st;
		if (stat(d, &st) < 0)
			return ds_err_set(err, DS_EINVAL, "--nvme_dir %s: %s; give an existing writable directory", d,
					  strerror(errno));
		if (!S_ISDIR(st.st_mode))
			return ds_err_set(err, DS_EINVAL, "--nvme_dir %s: not a directory", d);
		if (statvfs(d, &vfs) < 0)
			return ds_err_set(err, DS_EINVAL, "--nvme_dir %s: statvfs: %s", d, strerror(errno));
		if ((vfs.f_flag & ST_RDONLY) || access(d, W_OK) < 0)
			return ds_err_set(err, DS_EINVAL, "--nvme_dir %s: not writable (%s); give a writable directory", d,
					  (vfs.f_flag & ST_RDONLY) ? "read-only file system" : strerror(errno));
	}
	/* O_DIRECT: refused file systems are found here, not mid-sweep */
	for (int i = 0; i < o->ndirs && !nofile; i++) {
		int r = ds_aio_probe_direct(o->dirs[i], err);
		if (r < 0)
			return ds_err_prefix(err, "--nvme_dir ");
		if (r == 0 && !o->buffered)
			return ds_err_set(err, DS_EINVAL, "--nvme_dir %s: the file system refuses O_DIRECT (probe write "
					  "failed); rerun with --buffered to measure through the page cache", o->dirs[i]);
	}
	return 0;
}

/* Scratch space: both files of every directory on the same file system. */
static int check_space(const struct ds_nvme_tune_opts *o, struct ds_err *err)
{
	uint64_t per_dir = o->io_size * (uint64_t)((o->no_read ? 0 : 1) + (o->no_write ? 0 : 1));
	struct statvfs *vfs = calloc((size_t)o->ndirs, sizeof(*vfs));
	int rc = 0;

	if (!vfs)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (int i = 0; i < o->ndirs && rc == 0; i++)
		if (statvfs(o->dirs[i], &vfs[i]) < 0)
			rc = ds_err_set(err, DS_EINVAL, "--nvme_dir %s: statvfs: %s", o->dirs[i], strerror(errno));
	for (int i = 0; i < o->ndirs && rc == 0; i++) {
		uint64_t have = (uint64_t)vfs[i].f_bavail * vfs[i].f_frsize, need;
		int same = 0;
		char a[32], b[32], c[32];
		for (int j = 0; j < o->ndirs; j++)
			same += vfs[j].f_fsid == vfs[i].f_fsid;
		need = per_dir * (uint64_t)same;
		if (have < need)
			rc = ds_err_set(err, DS_EINVAL, "--nvme_dir %s: needs %s free for the test files (%d file(s) of "
					"--io_size %s), has %s; use a smaller --io_size", o->dirs[i],
					ds_fmt_bytes((double)need, a, sizeof(a)), (int)(need / o->io_size),
					ds_fmt_bytes((double)o->io_size, b, sizeof(b)), ds_fmt_bytes((double)have, c, sizeof(c)));
	}
	free(vfs);
	return rc;
}

/* io_size must split into intra_op_parallelism chunks the engine accepts. */
static int check_io_size(const struct ds_nvme_tune_opts *o, const struct ds_tune_space *s, int64_t fixed_p,
			 struct ds_err *err)
{
	int d = ds_tune_space_find(s, "intra_op_parallelism");
	int n = d >= 0 ? s->d[d].n : 1;
	uint64_t align = o->buffered ? 1 : DS_AIO_ALIGN;

	if (o->io_size == 0)
		return ds_err_set(err, DS_EINVAL, "--io_size 0: give a size such as 400M");
	for (int i = 0; i < n; i++) {
		uint64_t p = d >= 0 ? (uint64_t)s->d[d].v[i] : (uint64_t)fixed_p;
		if (o->io_size % (p * align))
			return ds_err_set(err, DS_EINVAL, "--io_size %llu: does not split into intra_op_parallelism %llu "
					  "chunks of a multiple of %llu bytes%s; use a multiple of %llu",
					  (unsigned long long)o->io_size, (unsigned long long)p, (unsigned long long)align,
					  o->buffered ? "" : " (O_DIRECT)", (unsigned long long)(p * align));
	}
	return 0;
}

/* The aio engine's contexts: every trial must fit in the kernel's limit. */
static int check_aio_nr(const struct ds_nvme_tune_opts *o, const struct ds_tune_space *s, const struct ds_aio_opts *base,
			struct ds_err *err)
{
	int dq = ds_tune_space_find(s, "queue_depth"), dp = ds_tune_space_find(s, "intra_op_parallelism");
	uint64_t qd = dq >= 0 ? (uint64_t)s->d[dq].v[s->d[dq].n - 1] : (uint64_t)base->queue_depth;
	uint64_t p = dp >= 0 ? (uint64_t)s->d[dp].v[s->d[dp].n - 1] : (uint64_t)base->intra_op_parallelism;
	unsigned long long max = 0;
	FILE *f = fopen("/proc/sys/fs/aio-max-nr", "r");

	if (!f)
		return 0; /* not Linux's procfs: io_setup will say */
	if (fscanf(f, "%llu", &max) != 1)
		max = 0;
	fclose(f);
	if (max && qd * p * (uint64_t)o->ndirs > max)
		return ds_err_set(err, DS_EINVAL, "queue_depth %llu x intra_op_parallelism %llu x %d director%s = %llu "
				  "requests exceed /proc/sys/fs/aio-max-nr %llu; sweep smaller values",
				  (unsigned long long)qd, (unsigned long long)p, o->ndirs, o->ndirs == 1 ? "y" : "ies",
				  (unsigned long long)(qd * p * (uint64_t)o->ndirs), max);
	return 0;
}

static char *scratch_path(const char *dir, const char *what)
{
	size_t n = strlen(dir) + 64;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/_dstk_nvme_tune_%s.%ld", dir, what, (long)getpid());
	return p;
}

static void cleanup(struct run *R)
{
	for (int i = 0; i < R->o->ndirs; i++) {
		if (R->rpath && R->rpath[i]) {
			unlink(R->rpath[i]);
			free(R->rpath[i]);
		}
		if (R->wpath && R->wpath[i]) {
			unlink(R->wpath[i]);
			free(R->wpath[i]);
		}
		if (R->buf)
			ds_free(R->buf[i]);
	}
	free(R->rpath);
	free(R->wpath);
	free(R->buf);
}

/* Lay out a scratch file with plain buffered writes, then drop it from the
 * cache.  The write file too: a trial then overwrites allocated blocks, as
 * swapping does, rather than timing the file system's block allocation
 * (an extending O_DIRECT write on ext4 is synchronous, which would also
 * serialise the queue). */
static int make_file(struct run *R, const char *p, int i, struct ds_err *err)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	uint64_t done = 0;

	if (fd < 0)
		return ds_err_set(err, DS_EIO, "create %s: %s", p, strerror(errno));
	while (done < R->o->io_size) {
		ssize_t w = pwrite(fd, R->buf[i] + done, R->o->io_size - done, (off_t)done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = errno;
			close(fd);
			return ds_err_set(err, DS_EIO, "write %s: %s", p, w < 0 ? strerror(e) : "no progress");
		}
		done += (uint64_t)w;
	}
	if (fsync(fd) < 0) {
		int e = errno;
		close(fd);
		return ds_err_set(err, DS_EIO, "fsync %s: %s", p, strerror(e));
	}
	close(fd);
	drop_cache(p);
	return stopped(R, err);
}

/* One operation on every directory at once, loops times.  Fills GiB/s and latencies. */
static int measure(struct run *R, struct ds_aio **h, int write, double *gbps, double *p50, double *p99,
		   double *secs, struct ds_err *err)
{
	const struct ds_nvme_tune_opts *o = R->o;
	struct ds_aio_lat lat = DS_AIO_LAT_INIT;
	double elapsed = 0;
	int rc = 0;

	for (int d = 0; d < o->ndirs; d++)
		ds_aio_lat_enable(h[d], 1);
	for (int l = 0; l < o->loops && rc == 0; l++) {
		int queued = 0;
		if ((rc = stopped(R, err)) < 0)
			break;
		/* O_DIRECT bypasses the cache; buffered reads would hit it */
		if ((o->flush_page_cache || o->buffered) && !R->nofile)
			for (int d = 0; d < o->ndirs; d++)
				drop_cache(write ? R->wpath[d] : R->rpath[d]);
		double t0 = ds_now();
		for (int d = 0; d < o->ndirs && rc == 0; d++, queued++)
			rc = write ? ds_aio_async_pwrite(h[d], R->buf[d], o->io_size, R->wpath[d], 0, err)
				   : ds_aio_async_pread(h[d], R->buf[d], o->io_size, R->rpath[d], 0, err);
		for (int d = 0; d < queued; d++) {
			struct ds_err e = DS_ERR_INIT;
			int r = ds_aio_wait(h[d], &e);
			if (r < 0 && rc == 0) {
				rc = r;
				*err = e;
			}
		}
		/* buffered writes land in the page cache: time them to the device */
		if (rc == 0 && write && o->buffered && !R->nofile)
			for (int d = 0; d < o->ndirs; d++) {
				int fd = open(R->wpath[d], O_WRONLY | O_CLOEXEC);
				if (fd >= 0) {
					fdatasync(fd);
					close(fd);
				}
			}
		elapsed += ds_now() - t0;
	}
	for (int d = 0; d < o->ndirs; d++) {
		ds_aio_lat_enable(h[d], 0);
		ds_aio_lat_take(h[d], &lat);
	}
	if (rc == 0) {
		double bytes = (double)o->io_size * o->ndirs * o->loops;
		*gbps = elapsed > 0 ? bytes / elapsed / GIB : 0;
		*p50 = ds_aio_lat_quantile(&lat, 0.50);
		*p99 = ds_aio_lat_quantile(&lat, 0.99);
		*secs = elapsed;
	}
	ds_aio_lat_release(&lat);
	return rc;
}

/* DeepSpeed's log name: read_block_overlap_ftd1_d32_bs1M_p1.txt */
static void write_log(const struct run *R, const struct ds_nvme_trial *t, int write, double secs, double gbps)
{
	const char *op = write ? "write" : "read", *Op = write ? "Write" : "Read";
	char path[4096], bs[32];
	uint64_t b = t->aio.block_size;
	FILE *f;

	if (b % (1u << 20) == 0)
		snprintf(bs, sizeof(bs), "%lluM", (unsigned long long)(b >> 20));
	else if (b % 1024 == 0)
		snprintf(bs, sizeof(bs), "%lluK", (unsigned long long)(b >> 10));
	else
		snprintf(bs, sizeof(bs), "%llu", (unsigned long long)b);
	snprintf(path, sizeof(path), "%s/_aio_bench_%s_logs", R->o->log_dir, op);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/_aio_bench_%s_logs/%s_%s_%s_ftd%d_d%d_bs%s_p%d.txt", R->o->log_dir, op, op,
		 t->aio.single_submit ? "single" : "block", t->aio.overlap_events ? "overlap" : "sequential",
		 R->o->ndirs, t->aio.queue_depth, bs, t->aio.intra_op_parallelism);
	if (!(f = fopen(path, "w")))
		return; /* logs are a courtesy; the CSV has the same numbers */
	fprintf(f, "Task %s Latency = %.6f sec\nTask %s Speed = %.6f GB/sec\n", Op, secs, Op, gbps);
	fprintf(f, "E2E %s Latency = %.6f sec\nE2E %s Speed = %.6f GB/sec\n", Op, secs, Op, gbps);
	fclose(f);
}

static int trial(void *arg, const int *idx, const char *phase, double *score, struct ds_err *err)
{
	struct run *R = arg;
	const struct ds_nvme_tune_opts *o = R->o;
	struct ds_nvme_tune_res *res = R->res;
	struct ds_nvme_trial t = { .phase = phase, .aio = R->base, .read_gbps = -1, .write_gbps = -1 };
	struct ds_aio **h;
	double rs = 0, ws = 0;
	int rc = 0;

	DS_TRY(stopped(R, err));
	for (int d = 0; d < R->space.ndims; d++)
		DS_TRY(ds_aio_opt_set(&t.aio, ds_aio_optdef_find(R->space.d[d].name), R->space.d[d].v[idx[d]], err));
	if (!(h = calloc((size_t)o->ndirs, sizeof(*h))))
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (int d = 0; d < o->ndirs && rc == 0; d++)
		rc = ds_aio_create(&h[d], &t.aio, err);
	if (rc == 0 && res->do_read)
		rc = measure(R, h, 0, &t.read_gbps, &t.read_p50_us, &t.read_p99_us, &rs, err);
	if (rc == 0 && res->do_write)
		rc = measure(R, h, 1, &t.write_gbps, &t.write_p50_us, &t.write_p99_us, &ws, err);
	for (int d = 0; d < o->ndirs; d++)
		ds_aio_destroy(h[d]);
	free(h);
	if (rc < 0)
		return rc;
	t.pinned_bytes = (uint64_t)t.aio.queue_depth * t.aio.block_size * (uint64_t)t.aio.intra_op_parallelism *
			 (uint64_t)o->ndirs;
	t.score = (t.read_gbps > 0 ? t.read_gbps : 0) + (t.write_gbps > 0 ? t.write_gbps : 0);
	if (res->ntrials == R->cap) {
		int cap = R->cap ? 2 * R->cap : 64;
		struct ds_nvme_trial *p = realloc(res->trials, sizeof(*p) * (size_t)cap);
		if (!p)
			return ds_err_set(err, DS_ENOMEM, "out of memory");
		res->trials = p;
		R->cap = cap;
	}
	t.index = res->ntrials + 1;
	res->trials[res->ntrials++] = t;
	if (o->log_dir) {
		if (res->do_read)
			write_log(R, &t, 0, rs, t.read_gbps);
		if (res->do_write)
			write_log(R, &t, 1, ws, t.write_gbps);
	}
	if (o->on_trial)
		o->on_trial(o->arg, &t);
	*score = t.score;
	return 0;
}

int ds_nvme_tune_run(const struct ds_nvme_tune_opts *o, struct ds_nvme_tune_res *res, struct ds_err *err)
{
	struct run R = { .o = o, .res = res };
	struct ds_tune_search_opts so = DS_TUNE_SEARCH_OPTS_INIT;
	struct ds_tune_search_res sr;
	int start[DS_TUNE_MAX_DIMS];
	const char *engine = o->engine ? o->engine : ds_aio_default_engine();
	double t0 = ds_now();
	int rc;

	memset(res, 0, sizeof(*res));
	res->engine = engine;
	res->io_size = o->io_size;
	res->ndirs = o->ndirs;
	res->loops = o->loops;
	res->do_read = !o->no_read;
	res->do_write = !o->no_write;
	res->direct = !o->buffered;
	res->dirs = o->dirs;
	res->sweep_config = o->sweep_config;
	res->exhaustive = o->exhaustive;
	DS_TRY(ds_aio_engine_check(engine, err));
	R.nofile = ds_aio_engine_nofile(engine);
	if (o->ndirs < 1)
		return ds_err_set(err, DS_EINVAL, "--nvme_dir: give at least one directory");
	if (o->no_read && o->no_write)
		return ds_err_set(err, DS_EINVAL, "--no_read and --no_write together leave nothing to measure");
	if (o->loops < 1)
		return ds_err_set(err, DS_EINVAL, "--loops %d: give at least 1", o->loops);
	/* DeepSpeed ds_io's settings for what the sweep leaves out */
	R.base = (struct ds_aio_opts)DS_AIO_OPTS_INIT;
	R.base.queue_depth = 32;
	R.base.overlap_events = 1;
	R.base.buffered = o->buffered;
	R.base.engine = engine;
	if (o->sweep_config)
		DS_TRY(ds_nvme_tune_space_load(o->sweep_config, o->buffered, &R.space, err));
	else
		ds_nvme_tune_space_default(engine, &R.space);
	res->space_size = ds_tune_space_size(&R.space);
	DS_TRY(check_io_size(o, &R.space, R.base.intra_op_parallelism, err));
	if (!strcmp(engine, "aio"))
		DS_TRY(check_aio_nr(o, &R.space, &R.base, err));
	DS_TRY(check_dirs(o, R.nofile, err));
	if (!R.nofile)
		DS_TRY(check_space(o, err));
	if (o->log_dir && mkdir(o->log_dir, 0755) < 0 && errno != EEXIST)
		return ds_err_set(err, DS_EINVAL, "--log_dir %s: %s", o->log_dir, strerror(errno));

	rc = 0;
	R.rpath = calloc((size_t)o->ndirs, sizeof(char *));
	R.wpath = calloc((size_t)o->ndirs, sizeof(char *));
	R.buf = calloc((size_t)o->ndirs, sizeof(*R.buf));
	if (!R.rpath || !R.wpath || !R.buf)
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
	for (int i = 0; i < o->ndirs && rc == 0; i++) {
		char b[32];
		R.rpath[i] = scratch_path(o->dirs[i], "read");
		R.wpath[i] = scratch_path(o->dirs[i], "write");
		R.buf[i] = ds_alloc_aligned(o->io_size, DS_AIO_ALIGN);
		if (!R.rpath[i] || !R.wpath[i] || !R.buf[i])
			rc = ds_err_set(err, DS_ENOMEM, "cannot allocate --io_size %s per directory",
					ds_fmt_bytes((double)o->io_size, b, sizeof(b)));
		else
			fill_random(R.buf[i], o->io_size, (uint64_t)i + 1);
		if (rc == 0 && res->do_read && !R.nofile)
			rc = make_file(&R, R.rpath[i], i, err);
		if (rc == 0 && res->do_write && !R.nofile)
			rc = make_file(&R, R.wpath[i], i, err);
	}
	if (rc == 0) {
		for (int d = 0; d < R.space.ndims; d++)
			start[d] = ds_tune_dim_nearest(&R.space.d[d],
						       ds_aio_opt_get(&R.base, ds_aio_optdef_find(R.space.d[d].name)));
		so.exhaustive = o->exhaustive;
		so.threshold = o->threshold;
		so.max_seconds = o->exhaustive ? 0 : o->max_seconds;
		so.start = start;
		so.confirm = o->confirm;
		rc = ds_tune_search(&R.space, &so, trial, &R, &sr, err);
	}
	cleanup(&R);
	res->elapsed_s = ds_now() - t0;
	if (rc < 0)
		return rc;
	res->capped = sr.capped;
	if (res->ntrials == 0)
		return ds_err_set(err, DS_EINTERNAL, "no trial ran");
	/* the search's best point; its latest row is the confirming measurement */
	struct ds_aio_opts bo = R.base;
	for (int d = 0; d < R.space.ndims; d++)
		ds_aio_opt_set(&bo, ds_aio_optdef_find(R.space.d[d].name), R.space.d[d].v[sr.best[d]], NULL);
	res->best = 0;
	for (int i = res->ntrials - 1; i >= 0; i--) {
		const struct ds_aio_opts *a = &res->trials[i].aio;
		if (a->block_size == bo.block_size && a->queue_depth == bo.queue_depth &&
		    a->intra_op_parallelism == bo.intra_op_parallelism && a->single_submit == bo.single_submit &&
		    a->overlap_events == bo.overlap_events) {
			res->best = i;
			break;
		}
	}
	return 0;
}

void ds_nvme_tune_res_release(struct ds_nvme_tune_res *res)
{
	free(res->trials);
	res->trials = NULL;
	res->ntrials = 0;
}

/* ---- renderings ------------------------------------------------------------ */

/* The paste-ready "aio" section: DeepSpeed's current keys, real booleans. */
static json_t *aio_section(const struct ds_nvme_tune_res *res)
{
	const struct ds_nvme_trial *b = &res->trials[res->best];
	json_t *a = json_object();
	for (const struct ds_aio_optdef *d = ds_aio_optdefs; d->name; d++) {
		int64_t v = ds_aio_opt_get(&b->aio, d);
		json_object_set_new(a, d->name, d->type == DS_AIO_OPT_BOOL ? json_boolean(v) : json_integer(v));
	}
	json_object_set_new(a, "use_gds", json_false());
	return a;
}

static json_t *num_or_null(double v, int measured)
{
	return measured ? json_real(v) : json_null();
}

static int dump(FILE *f, json_t *j, size_t flags, struct ds_err *err)
{
	int rc = json_dumpf(j, f, flags) < 0 || fputc('\n', f) == EOF ? -1 : 0;
	json_decref(j);
	return rc < 0 ? ds_err_set(err, DS_EIO, "cannot write the output") : 0;
}

int ds_nvme_tune_write_text(FILE *f, const struct ds_nvme_tune_res *res, struct ds_err *err)
{
	const struct ds_nvme_trial *b = &res->trials[res->best];
	char sz[32];
	json_t *w = json_object();

	fprintf(f, "# ds-nvme-tune: %d director%s, engine %s, %s, io_size %s x %d loop%s, %d trial%s of %llu%s, %.1f s\n",
		res->ndirs, res->ndirs == 1 ? "y" : "ies", res->engine,
		res->direct ? "O_DIRECT" : "buffered (page cache, --buffered)",
		ds_fmt_bytes((double)res->io_size, sz, sizeof(sz)), res->loops, res->loops == 1 ? "" : "s", res->ntrials,
		res->ntrials == 1 ? "" : "s", (unsigned long long)res->space_size,
		res->capped ? " (stopped at the time budget)" : "", res->elapsed_s);
	fprintf(f, "Best performance (GB/sec): read = %5.2f, write = %5.2f\n", b->read_gbps > 0 ? b->read_gbps : 0,
		b->write_gbps > 0 ? b->write_gbps : 0);
	json_object_set_new(w, "aio", aio_section(res));
	return dump(f, w, JSON_INDENT(3), err);
}

static json_t *trial_json(const struct ds_nvme_trial *t)
{
	json_t *j = json_object();
	json_object_set_new(j, "trial", json_integer(t->index));
	json_object_set_new(j, "phase", json_string(t->phase));
	json_object_set_new(j, "block_size_bytes", json_integer((json_int_t)t->aio.block_size));
	json_object_set_new(j, "queue_depth", json_integer(t->aio.queue_depth));
	json_object_set_new(j, "intra_op_parallelism", json_integer(t->aio.intra_op_parallelism));
	json_object_set_new(j, "single_submit", json_boolean(t->aio.single_submit));
	json_object_set_new(j, "overlap_events", json_boolean(t->aio.overlap_events));
	json_object_set_new(j, "read_gbps", num_or_null(t->read_gbps, t->read_gbps >= 0));
	json_object_set_new(j, "write_gbps", num_or_null(t->write_gbps, t->write_gbps >= 0));
	json_object_set_new(j, "read_p50_us", num_or_null(t->read_p50_us, t->read_gbps >= 0));
	json_object_set_new(j, "read_p99_us", num_or_null(t->read_p99_us, t->read_gbps >= 0));
	json_object_set_new(j, "write_p50_us", num_or_null(t->write_p50_us, t->write_gbps >= 0));
	json_object_set_new(j, "write_p99_us", num_or_null(t->write_p99_us, t->write_gbps >= 0));
	json_object_set_new(j, "pinned_bytes", json_integer((json_int_t)t->pinned_bytes));
	return j;
}

int ds_nvme_tune_write_json(FILE *f, const struct ds_nvme_tune_res *res, struct ds_err *err)
{
	const struct ds_nvme_trial *b = &res->trials[res->best];
	json_t *j = json_object(), *best = json_object(), *tr = json_array();

	json_object_set_new(j, "tool", json_string("ds-nvme-tune"));
	json_object_set_new(j, "version", json_string(PACKAGE_VERSION));
	json_object_set_new(j, "features", json_string(DS_FEATURES));
	json_t *dirs = json_array();
	for (int i = 0; i < res->ndirs; i++)
		json_array_append_new(dirs, json_string(res->dirs[i]));
	json_object_set_new(j, "nvme_dir", dirs);
	json_object_set_new(j, "sweep_config", res->sweep_config ? json_string(res->sweep_config) : json_null());
	json_object_set_new(j, "search", json_string(res->exhaustive ? "exhaustive" : "coarse+refine"));
	json_object_set_new(j, "engine", json_string(res->engine));
	json_object_set_new(j, "io_mode", json_string(res->direct ? "direct" : "buffered"));
	json_object_set_new(j, "directories", json_integer(res->ndirs));
	json_object_set_new(j, "io_size_bytes", json_integer((json_int_t)res->io_size));
	json_object_set_new(j, "loops", json_integer(res->loops));
	json_object_set_new(j, "trials_run", json_integer(res->ntrials));
	json_object_set_new(j, "space_size", json_integer((json_int_t)res->space_size));
	json_object_set_new(j, "stopped_at_budget", json_boolean(res->capped));
	json_object_set_new(j, "elapsed_s", json_real(res->elapsed_s));
	json_object_set_new(best, "trial", json_integer(b->index));
	json_object_set_new(best, "read_gbps", num_or_null(b->read_gbps, b->read_gbps >= 0));
	json_object_set_new(best, "write_gbps", num_or_null(b->write_gbps, b->write_gbps >= 0));
	json_object_set_new(j, "best", best);
	json_object_set_new(j, "aio", aio_section(res));
	for (int i = 0; i < res->ntrials; i++)
		json_array_append_new(tr, trial_json(&res->trials[i]));
	json_object_set_new(j, "trials", tr);
	return dump(f, j, JSON_INDENT(2), err);
}

static void csv_num(FILE *f, double v, int measured, const char *sep)
{
	if (measured)
		fprintf(f, "%.6g", v);
	fputs(sep, f);
}

int ds_nvme_tune_write_csv(FILE *f, const struct ds_nvme_tune_res *res, struct ds_err *err)
{
	fputs("trial,phase,block_size_bytes,queue_depth,intra_op_parallelism,single_submit,overlap_events,"
	      "read_gbps,write_gbps,read_p50_us,read_p99_us,write_p50_us,write_p99_us,pinned_bytes\n", f);
	for (int i = 0; i < res->ntrials; i++) {
		const struct ds_nvme_trial *t = &res->trials[i];
		int r = t->read_gbps >= 0, w = t->write_gbps >= 0;
		fprintf(f, "%d,", t->index);
		csv_fwrite(f, t->phase, strlen(t->phase));
		fprintf(f, ",%llu,%d,%d,%s,%s,", (unsigned long long)t->aio.block_size, t->aio.queue_depth,
			t->aio.intra_op_parallelism, t->aio.single_submit ? "true" : "false",
			t->aio.overlap_events ? "true" : "false");
		csv_num(f, t->read_gbps, r, ",");
		csv_num(f, t->write_gbps, w, ",");
		csv_num(f, t->read_p50_us, r, ",");
		csv_num(f, t->read_p99_us, r, ",");
		csv_num(f, t->write_p50_us, w, ",");
		csv_num(f, t->write_p99_us, w, ",");
		fprintf(f, "%llu\n", (unsigned long long)t->pinned_bytes);
	}
	return ferror(f) ? ds_err_set(err, DS_EIO, "cannot write the CSV") : 0;
}

int ds_nvme_tune_csv_file(const char *path, const struct ds_nvme_tune_res *res, struct ds_err *err)
{
	char tmp[4096];
	FILE *f;
	int rc;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid()) >= sizeof(tmp))
		return ds_err_set(err, DS_EINVAL, "--csv %s: path too long", path);
	if (!(f = fopen(tmp, "w")))
		return ds_err_set(err, DS_EINVAL, "--csv %s: cannot write (%s)", tmp, strerror(errno));
	rc = ds_nvme_tune_write_csv(f, res, err);
	if (fclose(f) != 0 && rc == 0)
		rc = ds_err_set(err, DS_EIO, "--csv %s: write failed", tmp);
	if (rc == 0 && rename(tmp, path) < 0)
		rc = ds_err_set(err, DS_EIO, "--csv %s: cannot replace (%s)", path, strerror(errno));
	if (rc < 0)
		unlink(tmp);
	return rc;
}

/* ---- --deepspeed_config ------------------------------------------------------ */

static int config_load(const char *path, json_t **out, struct ds_err *err)
{
	json_error_t je;
	json_t *root = json_load_file(path, 0, &je), *aio;

	*out = NULL;
	if (!root)
		return je.line < 1 ? ds_err_set(err, DS_EINVAL, "--deepspeed_config %s: %s", path, je.text)
				   : ds_err_set(err, DS_EINVAL, "--deepspeed_config %s: line %d column %d: %s", path,
						je.line, je.column, je.text);
	if (!json_is_object(root)) {
		json_decref(root);
		return ds_err_set(err, DS_EINVAL, "--deepspeed_config %s: expected a JSON object", path);
	}
	if ((aio = json_object_get(root, "aio")) && !json_is_object(aio)) {
		json_decref(root);
		return ds_err_set(err, DS_EINVAL, "--deepspeed_config %s: key 'aio': expected an object", path);
	}
	*out = root;
	return 0;
}

int ds_nvme_tune_config_check(const char *path, struct ds_err *err)
{
	json_t *root;
	DS_TRY(config_load(path, &root, err));
	json_decref(root);
	return 0;
}

int ds_nvme_tune_config_merge(const char *in, const char *out, const struct ds_nvme_tune_res *res,
			      struct ds_err *err)
{
	json_t *root, *aio, *best, *v;
	const char *k;
	char tmp[4096];
	FILE *f;
	int rc = 0;

	DS_TRY(config_load(in, &root, err));
	if (!(aio = json_object_get(root, "aio"))) {
		aio = json_object();
		json_object_set_new(root, "aio", aio);
	}
	/* older names of intra_op_parallelism would contradict the new value */
	json_object_del(aio, "thread_count");
	json_object_del(aio, "num_threads");
	best = aio_section(res);
	json_object_foreach(best, k, v)
		json_object_set(aio, k, v);
	json_decref(best);
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", out, (long)getpid()) >= sizeof(tmp))
		rc = ds_err_set(err, DS_EINVAL, "%s: path too long", out);
	else if ((f = fopen(tmp, "w")) == NULL)
		rc = ds_err_set(err, DS_EIO, "%s: cannot write (%s)", tmp, strerror(errno));
	else if ((json_dumpf(root, f, JSON_INDENT(2)) < 0 || fputc('\n', f) == EOF) | (fclose(f) != 0))
		rc = ds_err_set(err, DS_EIO, "%s: write failed", tmp);
	else if (rename(tmp, out) < 0)
		rc = ds_err_set(err, DS_EIO, "%s: cannot replace (%s)", out, strerror(errno));
	if (rc < 0)
		unlink(tmp);
	json_decref(root);
	return rc;
}
