/* aio.c - the async-I/O handle: settings table, backend registry, worker
 * threads and the checks made before anything is queued (see aio.h).
 *
 * Every operation is appended to one queue; each of the handle's
 * intra_op_parallelism workers takes every operation in order and moves its
 * own contiguous chunk (worker t: bytes [t*c, (t+1)*c), c = nbytes / P)
 * through the backend.  The last worker to finish an operation closes its
 * file.  ds_aio_wait sleeps until the queue is drained.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/aio_int.h"
#include "util/mem.h"
#include "util/timer.h"

/* ---- settings table --------------------------------------------------- */

#define OPT(f) offsetof(struct ds_aio_opts, f)

/* def: DeepSpeed's config "aio" defaults (runtime/swap_tensor/constants.py). */
const struct ds_aio_optdef ds_aio_optdefs[] = {
	{ .name = "block_size", .type = DS_AIO_OPT_SIZE, .off = OPT(block_size), .def = 1048576,
	  .min = 1, .max = 1LL << 30, .help = "bytes per request" },
	{ .name = "queue_depth", .type = DS_AIO_OPT_INT, .off = OPT(queue_depth), .def = 8,
	  .min = 1, .max = 4096, .help = "requests in flight per thread" },
	{ .name = "intra_op_parallelism", .type = DS_AIO_OPT_INT, .off = OPT(intra_op_parallelism), .def = 1,
	  .min = 1, .max = 256, .help = "threads per operation" },
	{ .name = "single_submit", .type = DS_AIO_OPT_BOOL, .off = OPT(single_submit), .def = 0,
	  .min = 0, .max = 1, .help = "one io_submit call per request" },
	{ .name = "overlap_events", .type = DS_AIO_OPT_BOOL, .off = OPT(overlap_events), .def = 1,
	  .min = 0, .max = 1, .help = "refill requests as they complete" },
	{ .name = NULL },
};

const struct ds_aio_optdef *ds_aio_optdef_find(const char *name)
{
	/* older DeepSpeed names of the thread count */
	if (!strcmp(name, "io_parallel") || !strcmp(name, "num_threads") || !strcmp(name, "thread_count"))
		name = "intra_op_parallelism";
	for (const struct ds_aio_optdef *d = ds_aio_optdefs; d->name; d++)
		if (!strcmp(d->name, name))
			return d;
	return NULL;
}

int64_t ds_aio_opt_get(const struct ds_aio_opts *o, const struct ds_aio_optdef *d)
{
	const char *p = (const char *)o + d->off;
	if (d->type == DS_AIO_OPT_SIZE)
		return (int64_t)*(const uint64_t *)p;
	return *(const int *)p;
}

int ds_aio_opt_set(struct ds_aio_opts *o, const struct ds_aio_optdef *d, int64_t v, struct ds_err *err)
{
	char *p = (char *)o + d->off;
	if (v < d->min || v > d->max)
		return ds_err_set(err, DS_EINVAL, "aio.%s: %lld is out of range [%lld, %lld]", d->name, (long long)v,
				  (long long)d->min, (long long)d->max);
	if (d->type == DS_AIO_OPT_SIZE)
		*(uint64_t *)p = (uint64_t)v;
	else
		*(int *)p = (int)v;
	return 0;
}

int ds_aio_opts_check(const struct ds_aio_opts *o, struct ds_err *err)
{
	struct ds_aio_opts tmp = *o;
	for (const struct ds_aio_optdef *d = ds_aio_optdefs; d->name; d++)
		DS_TRY(ds_aio_opt_set(&tmp, d, ds_aio_opt_get(o, d), err));
	if (!o->buffered && o->block_size % DS_AIO_ALIGN)
		return ds_err_set(err, DS_EINVAL, "aio.block_size: %llu is not a multiple of %d, as O_DIRECT needs",
				  (unsigned long long)o->block_size, DS_AIO_ALIGN);
	return 0;
}

/* ---- registry (STYLE rule 13) ----------------------------------------- */

static const struct ds_io_ops *const ds_io_all[] = {
#ifdef HAVE_LIBAIO
	&ds_io_libaio_ops,
#endif
	&ds_io_posix_ops,
	&ds_io_null_ops,
	NULL
};

const char *ds_aio_engines(void)
{
	static char names[64];

	if (!names[0])
		for (int i = 0; ds_io_all[i]; i++)
			snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? " " : "",
				 ds_io_all[i]->name);
	return names;
}

const char *ds_aio_default_engine(void)
{
	return ds_io_all[0]->name;
}

static const struct ds_io_ops *find_ops(const char *name)
{
	for (int i = 0; ds_io_all[i]; i++)
		if (!strcmp(ds_io_all[i]->name, name))
			return ds_io_all[i];
	return NULL;
}

int ds_aio_engine_check(const char *name, struct ds_err *err)
{
	if (find_ops(name))
		return 0;
	if (!strcmp(name, "aio"))
		return ds_err_set(err, DS_ENOTSUP, "engine 'aio': built without libaio (the libaio async-I/O engine); "
				  "reconfigure --with-libaio after apt-get install libaio-dev, or use --engine posix");
	return ds_err_set(err, DS_EINVAL, "unknown engine '%s' (this build has: %s)", name, ds_aio_engines());
}

int ds_aio_engine_nofile(const char *name)
{
	const struct ds_io_ops *ops = find_ops(name);
	return ops && (ops->caps & DS_IO_CAP_NOFILE);
}

/* ---- latencies --------------------------------------------------------- */

void ds_aio_lat_add(struct ds_aio_lat *l, double seconds)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 1024;
		float *p = realloc(l->us, cap * sizeof(*p));
		if (!p)
			return;
		l->us = p;
		l->cap = cap;
	}
	l->us[l->n++] = (float)(seconds * 1e6);
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return (x > y) - (x < y);
}

double ds_aio_lat_quantile(struct ds_aio_lat *l, double q)
{
	if (l->n == 0)
		return 0;
	qsort(l->us, l->n, sizeof(*l->us), cmp_float);
	size_t rank = (size_t)(q * (double)l->n + 0.999999); /* nearest rank, 1-based */
	if (rank < 1)
		rank = 1;
	if (rank > l->n)
		rank = l->n;
	return l->us[rank - 1];
}

void ds_aio_lat_release(struct ds_aio_lat *l)
{
	free(l->us);
	l->us = NULL;
	l->n = l->cap = 0;
}

int ds_io_req_error(struct ds_err *err, const struct ds_io_xfer *x, uint64_t off, uint64_t len, long res)
{
	const char *what = x->write ? "write" : "read";
	if (res < 0)
		return ds_err_set(err, DS_EIO, "%s %s at offset %llu (%llu bytes): %s", what, x->path,
				  (unsigned long long)off, (unsigned long long)len, strerror((int)-res));
	return ds_err_set(err, DS_EIO, "%s %s at offset %llu: %ld of %llu bytes transferred%s", what, x->path,
			  (unsigned long long)off, res, (unsigned long long)len,
			  x->write ? " (device full?)" : " (the file ends there)");
}

/* ---- the handle -------------------------------------------------------- */

struct ds_aio_op {
	int write;
	char *buf;
	uint64_t nbytes, off;
	int fd;
	int own_fd;   /* opened by submit, closed with the op */
	char *path;
	int pending;  /* workers not yet done */
	int status;   /* first failure */
	struct ds_err err;
};

struct ds_aio_worker {
	struct ds_aio *h;
	int id;
	pthread_t th;
	int started;
	void *tctx;
	size_t next;          /* index of the next op in h->q */
	struct ds_aio_lat lat;
	struct ds_aio_counters cnt;
	int init_rc;
	struct ds_err init_err;
};

struct ds_aio {
	struct ds_aio_opts o;
	const struct ds_io_ops *ops;
	pthread_mutex_t mu;
	pthread_cond_t work, done, ready;
	struct ds_aio_op **q;
	size_t nq, capq, ncompleted;
	int stop, nready, lat_on;
	int nw;
	struct ds_aio_worker *w;
	double busy_t0, busy_s;  /* since when / for how long some operation was not yet complete */
	struct ds_aio_busy *grp[DS_AIO_BUSY_MAX]; /* counted with other handles too */
	int ngrp;
};

/* h turns busy (idle): so does each of its groups when no other handle of
 * it was (is) */
static void grp_enter(struct ds_aio *h)
{
	for (int i = 0; i < h->ngrp; i++) {
		struct ds_aio_busy *g = h->grp[i];
		pthread_mutex_lock(&g->mu);
		if (g->nbusy++ == 0)
			g->t0 = ds_now();
		pthread_mutex_unlock(&g->mu);
	}
}

static void grp_leave(struct ds_aio *h)
{
	for (int i = 0; i < h->ngrp; i++) {
		struct ds_aio_busy *g = h->grp[i];
		pthread_mutex_lock(&g->mu);
		if (--g->nbusy == 0)
			g->s += ds_now() - g->t0;
		pthread_mutex_unlock(&g->mu);
	}
}

static void op_free(struct ds_aio_op *op)
{
	if (!op)
		return;
	if (op->fd >= 0 && op->own_fd)
		close(op->fd);
	free(op->path);
	free(op);
}

static void *worker_main(void *arg)
{
	struct ds_aio_worker *w = arg;
	struct ds_aio *h = w->h;
	int rc = 0;

	if (h->ops->thread_init)
		rc = h->ops->thread_init(&w->tctx, &h->o, &w->init_err);
	pthread_mutex_lock(&h->mu);
	w->init_rc = rc;
	h->nready++;
	pthread_cond_broadcast(&h->ready);
	for (;;) {
		while (!h->stop && w->next == h->nq)
			pthread_cond_wait(&h->work, &h->mu);
		if (w->next == h->nq)
			break; /* stop, nothing left */
		struct ds_aio_op *op = h->q[w->next++];
		int lat = h->lat_on;
		pthread_mutex_unlock(&h->mu);

		uint64_t c = op->nbytes / (uint64_t)h->o.intra_op_parallelism, start = (uint64_t)w->id * c;
		struct ds_io_xfer x = { .fd = op->fd, .write = op->write, .buf = op->buf + start, .len = c,
					.off = op->off + start, .path = op->path, .lat = lat ? &w->lat : NULL, .cnt = &w->cnt };
		struct ds_err e = DS_ERR_INIT;
		int r = rc < 0 ? ds_err_set(&e, w->init_rc, "%s", w->init_err.msg) : h->ops->xfer(w->tctx, &h->o, &x, &e);

		pthread_mutex_lock(&h->mu);
		if (r < 0 && op->status == 0) {
			op->status = r;
			op->err = e;
		}
		if (--op->pending == 0) {
			if (++h->ncompleted == h->nq) {
				h->busy_s += ds_now() - h->busy_t0;
				grp_leave(h);
			}
			pthread_cond_broadcast(&h->done);
		}
	}
	pthread_mutex_unlock(&h->mu);
	if (h->ops->thread_fini)
		h->ops->thread_fini(w->tctx);
	return NULL;
}

int ds_aio_create(struct ds_aio **out, const struct ds_aio_opts *o, struct ds_err *err)
{
	struct ds_aio *h;
	const char *engine = o->engine ? o->engine : ds_aio_default_engine();
	int rc;

	*out = NULL;
	DS_TRY(ds_aio_engine_check(engine, err));
	DS_TRY(ds_aio_opts_check(o, err));
	if (!(h = calloc(1, sizeof(*h))))
		return ds_err_set(err, DS_ENOMEM, "aio: out of memory");
	h->o = *o;
	h->ops = find_ops(engine);
	h->o.engine = h->ops->name;
	h->nw = o->intra_op_parallelism;
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->work, NULL);
	pthread_cond_init(&h->done, NULL);
	pthread_cond_init(&h->ready, NULL);
	if (!(h->w = calloc((size_t)h->nw, sizeof(*h->w)))) {
		ds_aio_destroy(h);
		return ds_err_set(err, DS_ENOMEM, "aio: out of memory");
	}
	for (int i = 0; i < h->nw; i++) {
		h->w[i].h = h;
		h->w[i].id = i;
		if (pthread_create(&h->w[i].th, NULL, worker_main, &h->w[i]) != 0) {
			ds_aio_destroy(h);
			return ds_err_set(err, DS_EIO, "aio: cannot start thread %d of %d", i + 1, o->intra_op_parallelism);
		}
		h->w[i].started = 1;
	}
	/* report a backend's setup failure (io_setup) now, not at the first read */
	pthread_mutex_lock(&h->mu);
	while (h->nready < h->nw)
		pthread_cond_wait(&h->ready, &h->mu);
	pthread_mutex_unlock(&h->mu);
	for (int i = 0; i < h->nw; i++)
		if ((rc = h->w[i].init_rc) < 0) {
			ds_err_set(err, rc, "%s", h->w[i].init_err.msg);
			ds_aio_destroy(h);
			return rc;
		}
	*out = h;
	return 0;
}

void ds_aio_destroy(struct ds_aio *h)
{
	if (!h)
		return;
	if (h->w) {
		pthread_mutex_lock(&h->mu);
		h->stop = 1;
		pthread_cond_broadcast(&h->work);
		pthread_mutex_unlock(&h->mu);
		for (int i = 0; i < h->nw; i++) {
			if (h->w[i].started)
				pthread_join(h->w[i].th, NULL);
			ds_aio_lat_release(&h->w[i].lat);
		}
	}
	if (h->ncompleted < h->nq)  /* left busy: the group counts it no more */
		grp_leave(h);
	for (size_t i = 0; i < h->nq; i++)
		op_free(h->q[i]);
	free(h->q);
	free(h->w);
	pthread_mutex_destroy(&h->mu);
	pthread_cond_destroy(&h->work);
	pthread_cond_destroy(&h->done);
	pthread_cond_destroy(&h->ready);
	free(h);
}

/* The checks DeepSpeed leaves to the kernel's EINVAL, with the numbers. */
static int check_request(const struct ds_aio *h, const char *what, const void *buf, uint64_t nbytes,
			 const char *path, uint64_t off, struct ds_err *err)
{
	uint64_t p = (uint64_t)h->o.intra_op_parallelism, c = nbytes / p;

	if (!buf || !path)
		return ds_err_set(err, DS_EINVAL, "%s: no buffer or no path", what);
	if (nbytes == 0)
		return ds_err_set(err, DS_EINVAL, "%s %s: 0 bytes requested", what, path);
	if (nbytes % p)
		return ds_err_set(err, DS_EINVAL, "%s %s: %llu bytes are not divisible by intra_op_parallelism %llu",
				  what, path, (unsigned long long)nbytes, (unsigned long long)p);
	if (h->o.buffered)
		return 0;
	if ((uintptr_t)buf % DS_AIO_ALIGN)
		return ds_err_set(err, DS_EINVAL, "%s %s: buffer address %p is not aligned to %d bytes, as O_DIRECT "
				  "needs (allocate it with ds_alloc_aligned(n, %d))", what, path, buf, DS_AIO_ALIGN,
				  DS_AIO_ALIGN);
	if (off % DS_AIO_ALIGN)
		return ds_err_set(err, DS_EINVAL, "%s %s: offset %llu is not a multiple of %d, as O_DIRECT needs", what,
				  path, (unsigned long long)off, DS_AIO_ALIGN);
	if (c % DS_AIO_ALIGN)
		return ds_err_set(err, DS_EINVAL, "%s %s: %llu bytes / intra_op_parallelism %llu = %llu bytes per "
				  "thread, not a multiple of %d, as O_DIRECT needs", what, path,
				  (unsigned long long)nbytes, (unsigned long long)p, (unsigned long long)c, DS_AIO_ALIGN);
	return 0;
}

static int fault_no_odirect(void)
{
	const char *s = getenv("DS_TEST_FAULT_NO_ODIRECT");
	return s && *s && strcmp(s, "0") != 0;
}

static int open_file(const struct ds_aio *h, const char *path, int write, int *fd, struct ds_err *err)
{
	int flags = write ? O_WRONLY | O_CREAT : O_RDONLY;

	*fd = -1;
	if (h->ops->caps & DS_IO_CAP_NOFILE)
		return 0;
	if (!h->o.buffered) {
		flags |= O_DIRECT;
		if (fault_no_odirect())
			return ds_err_set(err, DS_EINVAL, "%s: the file system refuses O_DIRECT (open: %s; "
					  "DS_TEST_FAULT_NO_ODIRECT); use buffered I/O", path, strerror(EINVAL));
	}
	if ((*fd = open(path, flags | O_CLOEXEC, 0600)) >= 0)
		return 0;
	if (errno == EINVAL && !h->o.buffered)
		return ds_err_set(err, DS_EINVAL, "%s: the file system refuses O_DIRECT (open: %s); use buffered I/O",
				  path, strerror(errno));
	return ds_err_set(err, DS_EIO, "%s %s: %s", write ? "create" : "open", path, strerror(errno));
}

/* Queue an operation on path, opened here (fd < 0), or on the caller's fd
 * (path then only names it in messages). */
static int submit(struct ds_aio *h, int write, void *buf, uint64_t nbytes, const char *path, int fd, uint64_t off,
		  int async, struct ds_err *err)
{
	const char *what = write ? "write" : "read";
	struct ds_aio_op *op;

	DS_TRY(check_request(h, what, buf, nbytes, path, off, err));
	if (!(op = calloc(1, sizeof(*op))) || !(op->path = strdup(path))) {
		free(op);
		return ds_err_set(err, DS_ENOMEM, "aio: out of memory");
	}
	op->write = write;
	op->buf = buf;
	op->nbytes = nbytes;
	op->off = off;
	op->pending = h->nw;
	op->fd = fd;
	op->own_fd = fd < 0;
	if (fd < 0 && open_file(h, path, write, &op->fd, err) < 0) {
		int rc = err ? err->code : DS_EIO;
		op_free(op);
		return rc;
	}
	pthread_mutex_lock(&h->mu);
	if (h->nq == h->capq) {
		size_t cap = h->capq ? 2 * h->capq : 16;
		struct ds_aio_op **q = realloc(h->q, cap * sizeof(*q));
		if (!q) {
			pthread_mutex_unlock(&h->mu);
			op_free(op);
			return ds_err_set(err, DS_ENOMEM, "aio: out of memory");
		}
		h->q = q;
		h->capq = cap;
	}
	if (h->ncompleted == h->nq) {  /* the handle was idle: busy from now */
		h->busy_t0 = ds_now();
		grp_enter(h);
	}
	h->q[h->nq++] = op;
	pthread_cond_broadcast(&h->work);
	pthread_mutex_unlock(&h->mu);
	return async ? 0 : ds_aio_wait(h, err);
}

int ds_aio_pread(struct ds_aio *h, void *buf, uint64_t nbytes, const char *path, uint64_t off, int async,
		 struct ds_err *err)
{
	return submit(h, 0, buf, nbytes, path, -1, off, async, err);
}

int ds_aio_pwrite(struct ds_aio *h, const void *buf, uint64_t nbytes, const char *path, uint64_t off, int async,
		  struct ds_err *err)
{
	return submit(h, 1, (void *)buf, nbytes, path, -1, off, async, err);
}

int ds_aio_pread_fd(struct ds_aio *h, void *buf, uint64_t nbytes, int fd, const char *label, uint64_t off,
		    int async, struct ds_err *err)
{
	if (fd < 0)
		return ds_err_set(err, DS_EINVAL, "read %s: no open file", label ? label : "?");
	return submit(h, 0, buf, nbytes, label ? label : "(fd)", fd, off, async, err);
}

int ds_aio_pwrite_fd(struct ds_aio *h, const void *buf, uint64_t nbytes, int fd, const char *label, uint64_t off,
		     int async, struct ds_err *err)
{
	if (fd < 0)
		return ds_err_set(err, DS_EINVAL, "write %s: no open file", label ? label : "?");
	return submit(h, 1, (void *)buf, nbytes, label ? label : "(fd)", fd, off, async, err);
}

int ds_aio_wait(struct ds_aio *h, struct ds_err *err)
{
	int rc = 0;
	size_t n;

	pthread_mutex_lock(&h->mu);
	while (h->ncompleted < h->nq)
		pthread_cond_wait(&h->done, &h->mu);
	/* every worker has passed every op: the queue can start over */
	n = h->nq;
	for (size_t i = 0; i < n; i++) {
		if (h->q[i]->status < 0 && rc == 0) {
			rc = h->q[i]->status;
			if (err)
				*err = h->q[i]->err;
		}
		op_free(h->q[i]);
	}
	h->nq = h->ncompleted = 0;
	for (int i = 0; i < h->nw; i++)
		h->w[i].next = 0;
	pthread_mutex_unlock(&h->mu);
	return rc < 0 ? rc : (int)n;
}

uint64_t ds_aio_get_block_size(const struct ds_aio *h) { return h->o.block_size; }
int ds_aio_get_queue_depth(const struct ds_aio *h) { return h->o.queue_depth; }
int ds_aio_get_single_submit(const struct ds_aio *h) { return h->o.single_submit; }
int ds_aio_get_overlap_events(const struct ds_aio *h) { return h->o.overlap_events; }
int ds_aio_get_intra_op_parallelism(const struct ds_aio *h) { return h->o.intra_op_parallelism; }
int ds_aio_get_buffered(const struct ds_aio *h) { return h->o.buffered; }
const char *ds_aio_get_engine(const struct ds_aio *h) { return h->ops->name; }

double ds_aio_busy_seconds(struct ds_aio *h)
{
	pthread_mutex_lock(&h->mu);
	double b = h->busy_s;
	if (h->ncompleted < h->nq)  /* busy now: count up to here */
		b += ds_now() - h->busy_t0, h->busy_t0 = ds_now();
	h->busy_s = 0;
	pthread_mutex_unlock(&h->mu);
	return b;
}

int ds_aio_add_busy_group(struct ds_aio *h, struct ds_aio_busy *g)
{
	pthread_mutex_lock(&h->mu);
	if (h->ngrp == DS_AIO_BUSY_MAX || h->ncompleted < h->nq) {
		pthread_mutex_unlock(&h->mu);
		return -1;
	}
	h->grp[h->ngrp++] = g;
	pthread_mutex_unlock(&h->mu);
	return 0;
}

double ds_aio_busy_group_seconds(struct ds_aio_busy *g)
{
	pthread_mutex_lock(&g->mu);
	double b = g->s;
	if (g->nbusy > 0)
		b += ds_now() - g->t0, g->t0 = ds_now();
	g->s = 0;
	pthread_mutex_unlock(&g->mu);
	return b;
}

void ds_aio_lat_enable(struct ds_aio *h, int on)
{
	pthread_mutex_lock(&h->mu);
	h->lat_on = on;
	pthread_mutex_unlock(&h->mu);
}

void ds_aio_lat_take(struct ds_aio *h, struct ds_aio_lat *into)
{
	pthread_mutex_lock(&h->mu);
	for (int i = 0; i < h->nw; i++) {
		struct ds_aio_lat *l = &h->w[i].lat;
		for (size_t k = 0; k < l->n; k++)
			ds_aio_lat_add(into, l->us[k] * 1e-6);
		l->n = 0;
	}
	pthread_mutex_unlock(&h->mu);
}

void ds_aio_counters(struct ds_aio *h, struct ds_aio_counters *c)
{
	memset(c, 0, sizeof(*c));
	pthread_mutex_lock(&h->mu);
	for (int i = 0; i < h->nw; i++) {
		struct ds_aio_counters *w = &h->w[i].cnt;
		c->requests += w->requests;
		c->submit_calls += w->submit_calls;
		if (w->max_inflight > c->max_inflight)
			c->max_inflight = w->max_inflight;
		memset(w, 0, sizeof(*w));
	}
	pthread_mutex_unlock(&h->mu);
}

/* ---- O_DIRECT probe ---------------------------------------------------- */

int ds_aio_probe_direct(const char *dir, struct ds_err *err)
{
	char path[4096];
	void *buf;
	int fd, rc;

	if ((size_t)snprintf(path, sizeof(path), "%s/.ds_odirect_probe.%ld", dir, (long)getpid()) >= sizeof(path))
		return ds_err_set(err, DS_EINVAL, "%s: path too long", dir);
	/* can the directory be written at all? */
	if ((fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600)) < 0)
		return ds_err_set(err, DS_EINVAL, "%s: not writable (cannot create a file there: %s); give a writable directory",
				  dir, strerror(errno));
	close(fd);
	if (fault_no_odirect()) {
		unlink(path);
		return 0;
	}
	if ((fd = open(path, O_WRONLY | O_DIRECT | O_CLOEXEC)) < 0) {
		int e = errno;
		unlink(path);
		if (e == EINVAL)
			return 0;
		return ds_err_set(err, DS_EINVAL, "%s: cannot open a file there with O_DIRECT (%s)", dir, strerror(e));
	}
	if (!(buf = ds_alloc_aligned(DS_AIO_ALIGN, DS_AIO_ALIGN))) {
		close(fd);
		unlink(path);
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	ssize_t w = pwrite(fd, buf, DS_AIO_ALIGN, 0);
	int e = errno;
	ds_free(buf);
	close(fd);
	unlink(path);
	if (w == DS_AIO_ALIGN)
		rc = 1;
	else if (w < 0 && e == EINVAL)
		rc = 0;
	else
		rc = ds_err_set(err, DS_EINVAL, "%s: probe write of %d bytes failed (%s)", dir, DS_AIO_ALIGN,
				w < 0 ? strerror(e) : "short write");
	return rc;
}
