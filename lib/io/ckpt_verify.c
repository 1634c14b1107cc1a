/* ckpt_verify.c - checking checkpoints: every chunk checksum of a tag
 * (ds_ckpt_verify) and `auto`, the newest tag of a directory that verifies
 * (see ckpt.h).
 */
#include "config.h"

#include "io/ckpt.h"

#include <dirent.h>
#include <errno.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/ckpt_int.h"
#include "util/log.h"

/* global_step<digits> exactly (never .tmp); its step, or -1. */
static long long tag_step(const char *name)
{
	const char *d = name + 11;
	if (strncmp(name, "global_step", 11) != 0 || !*d)
		return -1;
	for (const char *p = d; *p; p++)
		if (*p < '0' || *p > '9')
			return -1;
	return strtoll(d, NULL, 10);
}

static int cmp_desc(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

int ds_ckpt_open_auto(struct ds_ckpt **out, const char *dir, struct ds_err *err)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	long long *steps = NULL;
	size_t n = 0, cap = 0, tried = 0;
	struct ds_err last = DS_ERR_INIT;
	int rc;
	if (!dp)
		return ds_err_set(err, DS_EINVAL, "%s: cannot open checkpoint directory: %s", dir, strerror(errno));
	while ((de = readdir(dp))) {
		long long s = tag_step(de->d_name);
		if (s < 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			long long *ns = realloc(steps, cap * sizeof *ns);
			if (!ns) {
				closedir(dp);
				free(steps);
				return ds_err_set(err, DS_ENOMEM, "out of memory");
			}
			steps = ns;
		}
		steps[n++] = s;
	}
	closedir(dp);
	qsort(steps, n, sizeof *steps, cmp_desc);
	for (size_t i = 0; i < n; i++) {
		char tag[64];
		struct ds_ckpt *c;
		snprintf(tag, sizeof tag, "global_step%lld", steps[i]);
		tried++;
		rc = ds_ckpt_open_tag(&c, dir, tag, NULL, &last);
		if (rc == 0)
			rc = ds_ckpt_verify(c, NULL, NULL, &last);
		if (rc == 0) {
			free(steps);
			*out = c;
			return 0;
		}
		ds_log_warn("checkpoint %s/%s skipped: %s", dir, tag, last.msg);
		ds_ckpt_close(c);  /* NULL when it did not open */
	}
	free(steps);
	if (!tried)
		return ds_err_set(err, DS_EINVAL, "%s: no global_stepN checkpoint to load (auto)", dir);
	return ds_err_set(err, DS_ECORRUPT, "%s: none of the %zu checkpoints verifies; newest failure: %s", dir, tried,
			  last.msg);
}

int ds_ckpt_verify(struct ds_ckpt *c, ds_ckpt_verify_fn cb, void *ud, struct ds_err *err)
{
	struct ds_ckpt_tensor_info *v;
	size_t n;
	int first = 0;
	DS_TRY(ds_ckpt_list(c, &v, &n, err));
	for (size_t i = 0; i < n; i++) {
		struct ds_err e = DS_ERR_INIT;
		struct ds_ckpt_rt t;
		int rc = ds_ckpt_rt_open(c, v[i].name, &t, 1, &e);
		if (rc == 0) {
			rc = ds_ckpt_rt_read(c, &t, 0, t.info.numel, NULL, &e);
			ds_ckpt_rt_close(&t);
		}
		if (cb)
			cb(ud, &v[i], rc, e.msg);
		if (rc < 0 && first == 0) {
			first = rc;
			if (err)
				*err = e;
		}
	}
	free(v);
	return first;
}

