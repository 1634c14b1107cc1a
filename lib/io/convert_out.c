/* convert_out.c - temporary file + fsync + rename, see convert_out.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/convert_out.h"

int ds_outfile_open(struct ds_outfile *o, const char *path, struct ds_err *err)
{
	const char *slash = strrchr(path, '/');
	size_t dlen = slash ? (size_t)(slash - path + 1) : 0;
	size_t n = strlen(path) + 32;
	memset(o, 0, sizeof(*o));
	o->path = strdup(path);
	o->tmp = malloc(n);
	if (!o->path || !o->tmp) {
		ds_outfile_abort(o);
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", path);
	}
	snprintf(o->tmp, n, "%.*s.%s.tmp.%ld", (int)dlen, path, path + dlen, (long)getpid());
	o->f = fopen(o->tmp, "wb");
	if (!o->f) {
		int e = errno;
		ds_outfile_abort(o);
		return ds_err_set(err, DS_EIO, "%s: cannot create: %s", path, strerror(e));
	}
	return 0;
}

int ds_outfile_write(struct ds_outfile *o, const void *buf, size_t n, struct ds_err *err)
{
	if (n && fwrite(buf, 1, n, o->f) != n)
		return ds_err_set(err, DS_EIO, "%s: write failed: %s", o->tmp, strerror(errno));
	return 0;
}

int ds_outfile_commit(struct ds_outfile *o, struct ds_err *err)
{
	int rc = 0;
	if (fflush(o->f) != 0 || fsync(fileno(o->f)) != 0)
		rc = ds_err_set(err, DS_EIO, "%s: write failed: %s", o->tmp, strerror(errno));
	if (fclose(o->f) != 0 && rc == 0)
		rc = ds_err_set(err, DS_EIO, "%s: close failed: %s", o->tmp, strerror(errno));
	o->f = NULL;
	if (rc == 0 && rename(o->tmp, o->path) != 0)
		rc = ds_err_set(err, DS_EIO, "%s: rename from %s failed: %s", o->path, o->tmp, strerror(errno));
	if (rc == 0) {
		free(o->tmp);
		o->tmp = NULL;
	}
	ds_outfile_abort(o);
	return rc;
}

void ds_outfile_abort(struct ds_outfile *o)
{
	if (o->f)
		fclose(o->f);
	if (o->tmp)
		unlink(o->tmp);
	free(o->tmp);
	free(o->path);
	memset(o, 0, sizeof(*o));
}
