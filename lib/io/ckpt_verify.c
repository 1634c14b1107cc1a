/* ckpt_verify.c - checking checkpoints: every byte of a tag against its
 * manifest and every chunk against the datasets' checksums
 * (ds_ckpt_verify), what a resume needs being there (ds_ckpt_check_need),
 * and `auto`, the newest tag of a directory that passes both, chosen by
 * all ranks together (ds_ckpt_pick); see ckpt.h.
 */
#include "config.h"

#include "io/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "io/ckpt_int.h"
#include "util/log.h"

/* ---- every byte ---------------------------------------------------------- */

/* The first extent of m at or after byte off (m->n if none). */
static size_t ext_at(const struct ds_ckpt_manifest *m, uint64_t off)
{
	size_t lo = 0, hi = m->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (m->x[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The dataset and the manifest tell the same story: its bytes are exactly
 * the tensor extents from its offset on, one per chunk, with the CRCs of
 * its crc32c attribute.  (Both were written together; a mismatch is a
 * checkpoint put together from two saves.) */
static int same_story(struct ds_ckpt *c, const struct ds_ckpt_rt *t, struct ds_err *err)
{
	const struct ds_ckpt_manifest *m = c->man;
	uint64_t total = t->info.numel * ds_ckpt_dtype_size(t->info.dtype);
	size_t k = t->off == UINT64_MAX ? m->n : ext_at(m, t->off);
	for (uint64_t ch = 0; ch < t->nchunks; ch++, k++) {
		uint64_t len = (ch + 1) * t->chunk_bytes < total ? t->chunk_bytes : total - ch * t->chunk_bytes;
		if (k >= m->n || m->x[k].off != t->off + ch * t->chunk_bytes || m->x[k].len != len ||
		    m->x[k].kind != DS_CKPT_EXT_DATA || m->x[k].crc != t->crc[ch])
			return ds_err_set(err, DS_ECORRUPT, "%s: /%s: chunk %llu is not where or what the manifest says; "
					  "the checkpoint is damaged", c->file, t->info.name, (unsigned long long)ch);
	}
	return 0;
}

/* The message for extent x of dataset t failing its CRC (got). */
static int bad_chunk(struct ds_ckpt *c, const struct ds_ckpt_rt *t, const struct ds_ckpt_extent *x, uint32_t got,
		     struct ds_err *err)
{
	uint64_t cb = t->chunk_bytes ? t->chunk_bytes : x->len;
	return ds_err_set(err, DS_ECORRUPT, "%s: dataset /%s: chunk %llu (bytes %llu..%llu of the file) fails its "
			  "CRC-32C (manifest %08x, read %08x); the checkpoint is damaged: load another tag or --load "
			  "auto", c->file, t->info.name, (unsigned long long)((x->off - t->off) / cb),
			  (unsigned long long)x->off, (unsigned long long)(x->off + x->len), x->crc, got);
}

struct bad_ext {
	struct ds_ckpt_extent *x;
	uint32_t *got;
	size_t n, cap;
};

static void on_bad_ext(void *ud, const struct ds_ckpt_extent *x, uint32_t got)
{
	struct bad_ext *b = ud;
	if (b->n == b->cap) {
		size_t cap = b->cap ? 2 * b->cap : 16;
		struct ds_ckpt_extent *nx = realloc(b->x, cap * sizeof *nx);
		uint32_t *ng = nx ? realloc(b->got, cap * sizeof *ng) : NULL;
		if (nx)
			b->x = nx;
		if (!ng)
			return;
		b->got = ng;
		b->cap = cap;
	}
	b->x[b->n] = *x;
	b->got[b->n++] = got;
}

/* Tell cb about tensor t's outcome; keep the first failure in *first, err. */
static void report(ds_ckpt_verify_fn cb, void *ud, const struct ds_ckpt_tensor_info *t, int rc,
		   const struct ds_err *e, int *first, struct ds_err *err)
{
	if (cb)
		cb(ud, t, rc, e->msg);
	if (rc < 0 && *first == 0) {
		*first = rc;
		if (err)
			*err = *e;
	}
}

/* With a manifest: every byte, then each tensor against it. */
static int verify_manifest(struct ds_ckpt *c, const struct ds_ckpt_tensor_info *v, size_t n, ds_ckpt_verify_fn cb,
			   void *ud, struct ds_err *err)
{
	struct bad_ext bad = { 0 };
	struct ds_err all = DS_ERR_INIT;
	int first = 0, mrc = ds_ckpt_manifest_check(c->file, c->man, "md", 0, UINT64_MAX, on_bad_ext, &bad, &all);
	if (mrc == DS_EIO || mrc == DS_ENOMEM) {
		if (err)
			*err = all;
		first = mrc;
		goto out;
	}
	uint64_t claimed = 0;  /* tensor bytes of the datasets, to match the manifest's */
	for (size_t i = 0; i < n; i++) {
		struct ds_err e = DS_ERR_INIT;
		struct ds_ckpt_rt t;
		int rc = ds_ckpt_rt_open(c, v[i].name, &t, 1, &e);
		if (rc == 0) {
			uint64_t total = t.info.numel * ds_ckpt_dtype_size(t.info.dtype);
			rc = same_story(c, &t, &e);
			claimed += total;
			for (size_t b = 0; rc == 0 && b < bad.n; b++)
				if (bad.x[b].off >= t.off && bad.x[b].off < t.off + total)
					rc = bad_chunk(c, &t, &bad.x[b], bad.got[b], &e);
			ds_ckpt_rt_close(&t);
		}
		report(cb, ud, &v[i], rc, &e, &first, err);
	}
	/* what no tensor accounts for: HDF5's bytes, or tensor extents of no dataset */
	uint64_t data = 0;
	for (size_t k = 0; k < c->man->n; k++)
		data += c->man->x[k].kind == DS_CKPT_EXT_DATA ? c->man->x[k].len : 0;
	if (first == 0 && mrc < 0) {  /* bytes of no dataset: HDF5's */
		first = mrc;
		if (err)
			*err = all;
	}
	if (first == 0 && data != claimed)
		first = ds_err_set(err, DS_ECORRUPT, "%s: the manifest lists %llu bytes of tensor data, the datasets "
				   "%llu; the checkpoint is damaged", c->file, (unsigned long long)data,
				   (unsigned long long)claimed);
out:
	free(bad.x);
	free(bad.got);
	return first;
}

int ds_ckpt_verify(struct ds_ckpt *c, ds_ckpt_verify_fn cb, void *ud, struct ds_err *err)
{
	struct ds_ckpt_tensor_info *v;
	size_t n;
	int first = 0;
	DS_TRY(ds_ckpt_list(c, &v, &n, err));
	if (c->man) {
		first = verify_manifest(c, v, n, cb, ud, err);
		free(v);
		return first;
	}
	/* a checkpoint of an older dstk: each dataset against its chunk CRCs */
	for (size_t i = 0; i < n; i++) {
		struct ds_err e = DS_ERR_INIT;
		struct ds_ckpt_rt t;
		int rc = ds_ckpt_rt_open(c, v[i].name, &t, 1, &e);
		if (rc == 0) {
			rc = ds_ckpt_rt_read(c, &t, 0, t.info.numel, NULL, &e);
			ds_ckpt_rt_close(&t);
		}
		report(cb, ud, &v[i], rc, &e, &first, err);
	}
	free(v);
	return first;
}

int ds_ckpt_has_manifest(const struct ds_ckpt *c)
{
	return c->man != NULL;
}

/* Say which dataset the first of the bad extents (in file order) belongs
 * to, in err. */
static void name_dataset(struct ds_ckpt *c, const struct bad_ext *bad, struct ds_err *err)
{
	struct ds_ckpt_tensor_info *v;
	size_t n, first = 0;
	for (size_t b = 1; b < bad->n; b++)
		if (bad->x[b].off < bad->x[first].off)
			first = b;
	const struct ds_ckpt_extent *x = &bad->x[first];
	if (ds_ckpt_list(c, &v, &n, NULL) < 0)
		return;
	for (size_t i = 0; i < n; i++) {
		struct ds_ckpt_rt t;
		if (ds_ckpt_rt_open(c, v[i].name, &t, 1, NULL) < 0)
			continue;
		uint64_t total = t.info.numel * ds_ckpt_dtype_size(t.info.dtype);
		if (t.off != UINT64_MAX && x->off >= t.off && x->off < t.off + total)
			bad_chunk(c, &t, x, bad->got[first], err);
		ds_ckpt_rt_close(&t);
	}
	free(v);
}

/* This rank's share (part of parts) of a full verification: the tensor
 * bytes in its slice of the file (the metadata was checked at open), or,
 * without a manifest, every parts-th dataset. */
static int verify_share(struct ds_ckpt *c, int part, int parts, struct ds_err *err)
{
	if (c->man) {
		uint64_t sz = c->man->size, lo = sz / (uint64_t)parts * (uint64_t)part;
		uint64_t hi = part == parts - 1 ? UINT64_MAX : sz / (uint64_t)parts * (uint64_t)(part + 1);
		struct bad_ext bad = { 0 };
		int rc = ds_ckpt_manifest_check(c->file, c->man, "d", lo, hi, on_bad_ext, &bad, err);
		struct ds_ckpt_tensor_info *v;
		size_t n;
		if (rc == DS_ECORRUPT && bad.n)
			name_dataset(c, &bad, err);
		free(bad.x);
		free(bad.got);
		if (rc < 0 || part != 0)
			return rc;
		/* rank 0 also checks that the datasets and the manifest agree */
		DS_TRY(ds_ckpt_list(c, &v, &n, err));
		for (size_t i = 0; i < n && rc == 0; i++) {
			struct ds_ckpt_rt t;
			if ((rc = ds_ckpt_rt_open(c, v[i].name, &t, 1, err)) == 0) {
				rc = same_story(c, &t, err);
				ds_ckpt_rt_close(&t);
			}
		}
		free(v);
		return rc;
	}
	struct ds_ckpt_tensor_info *v;
	size_t n;
	int rc = 0;
	DS_TRY(ds_ckpt_list(c, &v, &n, err));
	for (size_t i = (size_t)part; i < n && rc == 0; i += (size_t)parts) {
		struct ds_ckpt_rt t;
		if ((rc = ds_ckpt_rt_open(c, v[i].name, &t, 1, err)) == 0) {
			rc = ds_ckpt_rt_read(c, &t, 0, t.info.numel, NULL, err);
			ds_ckpt_rt_close(&t);
		}
	}
	free(v);
	return rc;
}

/* ---- what a resume needs ------------------------------------------------- */

int ds_ckpt_saved_states(struct ds_ckpt *c, char (*names)[DS_CKPT_STATE_MAX], int max, int *n, struct ds_err *err)
{
	char *list = NULL, *type = NULL;
	int rc = 0;
	*n = 0;
	if (ds_ckpt_attr_has(c, "optimizer", "states")) {
		DS_TRY(ds_ckpt_attr_get_str_dup(c, "optimizer", "states", &list, err));
		for (char *save = NULL, *s = strtok_r(list, ",", &save); s && rc == 0; s = strtok_r(NULL, ",", &save)) {
			if (*n >= max || strlen(s) >= DS_CKPT_STATE_MAX)
				rc = ds_err_set(err, DS_ECORRUPT, "%s: /optimizer states \"%.64s\" is not a list of %d names",
						c->file, s, max);
			else
				snprintf(names[(*n)++], DS_CKPT_STATE_MAX, "%s", s);
		}
		free(list);
		return rc;
	}
	/* written before the list was: the states of the optimizer's type */
	if (!ds_ckpt_attr_has(c, "optimizer", "type"))
		return 0;
	DS_TRY(ds_ckpt_attr_get_str_dup(c, "optimizer", "type", &type, err));
	if (!strcasecmp(type, "sgd")) {
		hid_t g = ds_ckpt_open_obj(c, "optimizer/momentum_buffer");
		if (g >= 0) {
			H5Oclose(g);
			if (max > 0)
				snprintf(names[(*n)++], DS_CKPT_STATE_MAX, "momentum_buffer");
		}
		H5Eclear2(H5E_DEFAULT);
	} else if (max >= 2) {
		snprintf(names[(*n)++], DS_CKPT_STATE_MAX, "exp_avg");
		snprintf(names[(*n)++], DS_CKPT_STATE_MAX, "exp_avg_sq");
	}
	free(type);
	return 0;
}

/* One problem: count it, keep the first, tell cb. */
struct need_ctx {
	struct ds_ckpt *c;
	ds_ckpt_need_fn cb;
	void *ud;
	int count;
	char first[DS_ERR_MSG_MAX];
};

static void problem(struct need_ctx *x, const char *name, const char *what)
{
	if (!x->count++)
		snprintf(x->first, sizeof x->first, "/%s %s", name, what);
	if (x->cb)
		x->cb(x->ud, name, what);
}

static void fmt_shape(char *b, size_t n, const char *dt, int ndim, const uint64_t *shape)
{
	size_t k = (size_t)snprintf(b, n, "%s[", dt);
	for (int i = 0; i < ndim && k < n; i++)
		k += (size_t)snprintf(b + k, n - k, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
	if (k < n)
		snprintf(b + k, n - k, "]");
}

static void need_tensor(struct need_ctx *x, const char *name, const struct ds_ckpt_need_tensor *t, int any16)
{
	struct ds_ckpt_tensor_info info;
	uint64_t want[2] = { t->shape[0], t->ndim > 1 ? t->shape[1] : 0 };
	char what[256], have[96], need[96];
	if (ds_ckpt_tensor_info(x->c, name, &info, NULL) < 0) {
		problem(x, name, "is missing");
		return;
	}
	int dt_ok = info.dtype == DS_CKPT_F32 || (any16 && (info.dtype == DS_CKPT_F16 || info.dtype == DS_CKPT_BF16));
	int shape_ok = info.ndim == t->ndim && info.shape[0] == want[0] && (t->ndim < 2 || info.shape[1] == want[1]);
	if (dt_ok && shape_ok)
		return;
	fmt_shape(have, sizeof have, ds_ckpt_dtype_name(info.dtype), info.ndim, info.shape);
	fmt_shape(need, sizeof need, any16 ? "f32/f16/bf16" : "f32", t->ndim, want);
	snprintf(what, sizeof what, "is %s where %s is needed", have, need);
	problem(x, name, what);
}

int ds_ckpt_check_need(struct ds_ckpt *c, const struct ds_ckpt_need *need, ds_ckpt_need_fn cb, void *ud,
		       struct ds_err *err)
{
	static const char *const counters[][2] = { { "optimizer", "step" }, { "scheduler", "steps" },
						   { "data", "skipped_steps" } };
	struct need_ctx x = { c, cb, ud, 0, "" };
	char name[DS_CKPT_NAME_MAX];
	int total = 0;
	for (int i = 0; i < need->ntensors; i++) {
		const struct ds_ckpt_need_tensor *t = &need->tensors[i];
		snprintf(name, sizeof name, "model/%s", t->name);
		need_tensor(&x, name, t, need->any16);
		total++;
		for (int k = 0; k < need->nstates; k++) {
			snprintf(name, sizeof name, "optimizer/%s/%s", need->states[k], t->name);
			need_tensor(&x, name, t, 0);
			total++;
		}
	}
	for (size_t k = 0; need->progress && k < sizeof counters / sizeof counters[0]; k++, total++) {
		int64_t v;
		snprintf(name, sizeof name, "%s@%s", counters[k][0], counters[k][1]);
		if (ds_ckpt_attr_get_i64(c, counters[k][0], counters[k][1], &v, NULL) < 0)
			problem(&x, name, "(the step counter attribute) is missing");
	}
	if (!x.count)
		return 0;
	return ds_err_set(err, DS_EINVAL, "%s: %s%s (%d of the %d tensors and counters a resume reads are missing or "
			  "of another shape)", c->file, x.first, x.count > 1 ? ", and more" : "", x.count, total);
}

/* ---- --load auto ----------------------------------------------------------- */

/* global_step<digits> exactly; its step, or -1.  *tmp: it ends in .tmp. */
static long long tag_step(const char *name, int *tmp)
{
	const char *d = name + 11, *p = d;
	*tmp = 0;
	if (strncmp(name, "global_step", 11) != 0 || !*d)
		return -1;
	for (; *p >= '0' && *p <= '9'; p++)
		;
	if (p == d || p - d > 18 || (*p && strcmp(p, ".tmp")))
		return -1;
	*tmp = *p != '\0';
	return strtoll(d, NULL, 10);
}

static int cmp_desc(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* The steps of dir's finished tags and unfinished saves (.tmp), newest
 * first; a missing directory has none.  steps[0..*nt) tags, then *nu tmp. */
static int list_tags(const char *dir, long long **steps, size_t *nt, size_t *nu, struct ds_err *err)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	long long *v = NULL, *u = NULL;
	size_t n = 0, m = 0, cap = 0, capu = 0;
	*steps = NULL;
	*nt = *nu = 0;
	if (!dp) {
		if (errno == ENOENT)
			return 0;
		return ds_err_set(err, DS_EINVAL, "%s: cannot open checkpoint directory: %s", dir, strerror(errno));
	}
	while ((de = readdir(dp))) {
		int tmp;
		long long s = tag_step(de->d_name, &tmp);
		long long **a = tmp ? &u : &v;
		size_t *k = tmp ? &m : &n, *c = tmp ? &capu : &cap;
		if (s < 0)
			continue;
		if (*k == *c) {
			*c = *c ? 2 * *c : 16;
			long long *na = realloc(*a, *c * sizeof *na);
			if (!na) {
				closedir(dp);
				free(v);
				free(u);
				return ds_err_set(err, DS_ENOMEM, "out of memory");
			}
			*a = na;
		}
		(*a)[(*k)++] = s;
	}
	closedir(dp);
	qsort(v, n, sizeof *v, cmp_desc);
	qsort(u, m, sizeof *u, cmp_desc);
	long long *all = malloc((n + m + 1) * sizeof *all);
	if (!all) {
		free(v);
		free(u);
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	if (n)
		memcpy(all, v, n * sizeof *all);
	if (m)
		memcpy(all + n, u, m * sizeof *all);
	free(v);
	free(u);
	*steps = all;
	*nt = n;
	*nu = m;
	return 0;
}

static int add_skip(struct ds_ckpt_skip **sk, size_t *n, const char *tag, const char *why)
{
	struct ds_ckpt_skip *ns = realloc(*sk, (*n + 1) * sizeof *ns);
	if (!ns)
		return -1;
	*sk = ns;
	snprintf(ns[*n].tag, sizeof ns[*n].tag, "%s", tag);
	snprintf(ns[*n].why, sizeof ns[*n].why, "%s", why);
	(*n)++;
	return 0;
}

int ds_ckpt_pick(struct ds_ckpt **out, const char *dir, struct ds_comm *comm, ds_ckpt_accept_fn accept, void *ud,
		 struct ds_ckpt_skip **skipped, size_t *nskipped, struct ds_err *err)
{
	int W = comm ? ds_comm_size(comm) : 1, rank = comm ? ds_comm_rank(comm) : 0, rc = 0;
	long long *steps = NULL, chosen = -1;
	size_t nt = 0, nu = 0, tried = 0;
	int64_t cnt[2] = { 0, 0 };
	struct ds_err last = DS_ERR_INIT;
	*out = NULL;
	*skipped = NULL;
	*nskipped = 0;
	ds_ckpt_h5_quiet();
	/* rank 0 lists the directory for everyone (all see the same list) */
	if (rank == 0) {
		rc = list_tags(dir, &steps, &nt, &nu, err);
		cnt[0] = rc < 0 ? -1 : (int64_t)nt;
		cnt[1] = (int64_t)nu;
	}
	if (W > 1) {
		if (ds_comm_broadcast(comm, cnt, 2, DS_I64, 0, err) < 0)
			return DS_EIO;
		if (cnt[0] < 0)
			return ds_ckpt_agree(comm, rank == 0 ? rc : 0, dir, err);
		if (rank != 0) {
			nt = (size_t)cnt[0];
			nu = (size_t)cnt[1];
			steps = malloc((nt + nu + 1) * sizeof *steps);
			if (!steps)
				return ds_err_set(err, DS_ENOMEM, "out of memory");  /* then the broadcast hangs: as OOM would */
		}
		if (nt + nu && ds_comm_broadcast(comm, steps, nt + nu, DS_I64, 0, err) < 0) {
			free(steps);
			return DS_EIO;
		}
	} else if (rc < 0) {
		return rc;
	}
	for (size_t i = 0; i < nt; i++) {
		struct ds_ckpt *c = NULL;
		struct ds_err e = DS_ERR_INIT;
		char tag[64];
		snprintf(tag, sizeof tag, "global_step%lld", steps[i]);
		tried++;
		/* damage (any code of opening or verifying) skips the tag; accept's
		 * DS_EINVAL (the checkpoint is not what this run needs) stops */
		int r = ds_ckpt_open_tag(&c, dir, tag, NULL, &e);
		if (r < 0)
			r = DS_ECORRUPT;
		else if (!accept || (r = accept(ud, c, &e)) == 0)
			r = verify_share(c, rank, W, &e) < 0 ? DS_ECORRUPT : 0;
		r = ds_ckpt_agree(comm, r, tag, &e);
		if (r == 0) {
			*out = c;
			chosen = steps[i];
			break;
		}
		ds_ckpt_close(c);
		if (r == DS_EINVAL) {
			if (err)
				*err = e;
			free(steps);
			return r;
		}
		last = e;
		if (add_skip(skipped, nskipped, tag, e.msg) < 0) {
			free(steps);
			return ds_err_set(err, DS_ENOMEM, "out of memory");
		}
	}
	/* unfinished saves newer than what was chosen (killed while saving) */
	for (size_t i = nt; i < nt + nu; i++) {
		char tag[64];
		if (*out && steps[i] <= chosen)
			continue;
		snprintf(tag, sizeof tag, "global_step%lld.tmp", steps[i]);
		if (add_skip(skipped, nskipped, tag, "an unfinished save (the job stopped while saving); it is "
			     "replaced when that step is saved again") < 0) {
			free(steps);
			return ds_err_set(err, DS_ENOMEM, "out of memory");
		}
	}
	free(steps);
	if (*out || !tried)
		return 0;
	return ds_err_set(err, DS_ECORRUPT, "%s: none of the %zu checkpoints verifies; the newest failure: %s", dir,
			  tried, last.msg);
}
