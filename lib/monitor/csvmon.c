/* csvmon.c - the csv_monitor sink: DeepSpeed's file naming and rows, one
 * header per file across restarts, trimming of rows a resumed run rewrites.
 */
#include <csv.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "monitor/csvmon.h"
#include "monitor/log.h"
#include "monitor/monitor_int.h"

struct csv_tag {
	char *tag;
	char *path;
	FILE *f;
};

struct ds_monitor_csv {
	char *dir;
	int resume;
	struct csv_tag *tags;
	int ntags, cap;
};

char *ds_monitor_logdir_dup(const char *output_path, const char *job_name)
{
	const char *o = output_path ? output_path : "";
	const char *j = job_name ? job_name : "";
	if (!*o || *j == '/')
		return strdup(j);
	char *s;
	if (asprintf(&s, "%s%s%s", o, o[strlen(o) - 1] == '/' ? "" : "/", j) < 0)
		return NULL;
	return s;
}

int ds_monitor_mkdirs(const char *dir, struct ds_err *err)
{
	if (!*dir)
		return 0;
	char *d = strdup(dir);
	if (!d)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	int rc = 0;
	for (char *p = d + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		struct stat st;
		if (mkdir(d, 0777) < 0 && errno != EEXIST) {
			rc = ds_err_set(err, DS_EIO, "%s: cannot create directory: %s", d, strerror(errno));
			break;
		}
		if (stat(d, &st) < 0 || !S_ISDIR(st.st_mode)) {
			rc = ds_err_set(err, DS_EIO, "%s: exists and is not a directory; choose another output_path", d);
			break;
		}
		*p = c;
		if (!c)
			break;
	}
	free(d);
	return rc;
}

/* Python's csv QUOTE_MINIMAL: quote a field only when it holds the
 * delimiter, the quote or a line end; libcsv does the quoting. */
static int write_field(FILE *f, const char *s)
{
	if (strpbrk(s, ",\"\r\n"))
		return csv_fwrite(f, s, strlen(s));
	return fputs(s, f) < 0 ? -1 : 0;
}

static const char *header_of(const char *tag)
{
	const char *h = strrchr(tag, '/');
	return h ? h + 1 : tag;
}

/* ---- reading an existing file back (libcsv), keeping the rows we want ---- */

struct scan {
	const char *path;
	const char *header;
	FILE *out;            /* the kept rows go here */
	long long drop_from;  /* drop rows with step >= this (LLONG_MAX: none) */
	long row;             /* 1-based line of the row being read */
	int nf;
	char *f[2];
	long dropped;
	int bad;              /* first problem, reported after the parse */
	char msg[256];
};

static void scan_field(void *s, size_t len, void *data)
{
	struct scan *sc = data;
	if (sc->nf < 2)
		sc->f[sc->nf] = strndup(s ? s : "", len);
	sc->nf++;
}

static void scan_row(int c, void *data)
{
	struct scan *sc = data;
	sc->row++;
	if (sc->bad)
		goto out;
	if (sc->row == 1) {
		if (sc->nf != 2 || !sc->f[0] || !sc->f[1] || strcmp(sc->f[0], "step") || strcmp(sc->f[1], sc->header)) {
			sc->bad = DS_EINVAL;
			snprintf(sc->msg, sizeof sc->msg, "first row is not the header 'step,%s'", sc->header);
			goto out;
		}
		if (c == -1)
			sc->dropped++; /* rewritten below with its line end */
		if (write_field(sc->out, "step") < 0 || fputc(',', sc->out) < 0 ||
		    write_field(sc->out, sc->header) < 0 || fputs("\r\n", sc->out) < 0)
			sc->bad = DS_EIO;
		goto out;
	}
	char *end = NULL;
	long long step = 0;
	if (sc->nf == 2 && sc->f[0] && sc->f[1]) {
		errno = 0;
		step = strtoll(sc->f[0], &end, 10);
	}
	if (!end || end == sc->f[0] || *end || errno) {
		if (c == -1) { /* a half-written last row: drop it */
			sc->dropped++;
			goto out;
		}
		sc->bad = DS_EINVAL;
		snprintf(sc->msg, sizeof sc->msg, "line %ld is not a 'step,value' row", sc->row);
		goto out;
	}
	if (c == -1 || step >= sc->drop_from) {
		sc->dropped++;
		goto out;
	}
	if (write_field(sc->out, sc->f[0]) < 0 || fputc(',', sc->out) < 0 || write_field(sc->out, sc->f[1]) < 0 ||
	    fputs("\r\n", sc->out) < 0)
		sc->bad = DS_EIO;
out:
	free(sc->f[0]);
	free(sc->f[1]);
	sc->f[0] = sc->f[1] = NULL;
	sc->nf = 0;
}

/* Check an existing non-empty file and drop the rows we must not keep. */
static int scan_existing(const char *path, const char *header, long long drop_from, struct ds_err *err)
{
	int rc = 0;
	char *tmp = NULL;
	FILE *in = NULL;
	struct csv_parser p;
	int have_parser = 0;
	struct scan sc = { .path = path, .header = header, .drop_from = drop_from };

	if (asprintf(&tmp, "%s.tmp", path) < 0) {
		tmp = NULL;
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	in = fopen(path, "rb");
	if (!in) {
		rc = ds_err_set(err, DS_EIO, "%s: cannot read: %s", path, strerror(errno));
		goto out;
	}
	sc.out = fopen(tmp, "wb");
	if (!sc.out) {
		rc = ds_err_set(err, DS_EIO, "%s: cannot write: %s", tmp, strerror(errno));
		goto out;
	}
	if (csv_init(&p, CSV_APPEND_NULL) != 0) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	have_parser = 1;
	char buf[65536];
	size_t k;
	while ((k = fread(buf, 1, sizeof buf, in)) > 0) {
		if (csv_parse(&p, buf, k, scan_field, scan_row, &sc) != k) {
			rc = ds_err_set(err, DS_EINVAL, "%s: not a CSV file (%s); move it away or choose another output_path",
					path, csv_strerror(csv_error(&p)));
			goto out;
		}
	}
	if (ferror(in)) {
		rc = ds_err_set(err, DS_EIO, "%s: read error", path);
		goto out;
	}
	csv_fini(&p, scan_field, scan_row, &sc);
	if (sc.bad == DS_EINVAL) {
		rc = ds_err_set(err, DS_EINVAL, "%s: %s; move it away or choose another csv_monitor output_path",
				path, sc.msg);
		goto out;
	}
	if (sc.bad || fflush(sc.out) != 0 || fsync(fileno(sc.out)) != 0) {
		rc = ds_err_set(err, DS_EIO, "%s: write error: %s", tmp, strerror(errno));
		goto out;
	}
	if (sc.dropped && rename(tmp, path) != 0) {
		rc = ds_err_set(err, DS_EIO, "%s: cannot replace: %s", path, strerror(errno));
		goto out;
	}
out:
	free(sc.f[0]);
	free(sc.f[1]);
	if (have_parser)
		csv_free(&p);
	if (in)
		fclose(in);
	if (sc.out)
		fclose(sc.out);
	if (tmp && (rc || !sc.dropped))
		unlink(tmp);
	free(tmp);
	return rc;
}

static int open_tag(struct ds_monitor_csv *c, const char *tag, long long x0, struct csv_tag *t, struct ds_err *err)
{
	char *name = strdup(tag);
	if (!name)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (char *q = name; *q; q++)
		if (*q == '/' || *q == ' ')
			*q = '_';
	int rc = asprintf(&t->path, "%s%s%s.csv", c->dir, *c->dir ? "/" : "", name);
	free(name);
	if (rc < 0) {
		t->path = NULL;
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	const char *header = header_of(tag);
	struct stat st;
	int fresh = stat(t->path, &st) != 0 || st.st_size == 0;
	if (!fresh)
		DS_TRY(scan_existing(t->path, header, c->resume ? x0 : LLONG_MAX, err));
	t->f = fopen(t->path, "ab");
	if (!t->f)
		return ds_err_set(err, DS_EIO, "%s: cannot open for append: %s", t->path, strerror(errno));
	if (fresh && (write_field(t->f, "step") < 0 || fputc(',', t->f) < 0 || write_field(t->f, header) < 0 ||
		      fputs("\r\n", t->f) < 0))
		return ds_err_set(err, DS_EIO, "%s: write error: %s", t->path, strerror(errno));
	return 0;
}

int ds_monitor_csv_open(struct ds_monitor_csv **out, const char *output_path, const char *job_name, int resume,
			struct ds_err *err)
{
	*out = NULL;
	struct ds_monitor_csv *c = calloc(1, sizeof *c);
	if (!c || !(c->dir = ds_monitor_logdir_dup(output_path, job_name))) {
		free(c);
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	c->resume = resume;
	int rc = ds_monitor_mkdirs(c->dir, err);
	if (rc) {
		ds_monitor_csv_close(c);
		return ds_err_prefix(err, "csv_monitor: ");
	}
	*out = c;
	return 0;
}

int ds_monitor_csv_write(struct ds_monitor_csv *c, const char *tag, double value, long long x, struct ds_err *err)
{
	struct csv_tag *t = NULL;
	for (int i = 0; i < c->ntags; i++)
		if (!strcmp(c->tags[i].tag, tag))
			t = &c->tags[i];
	if (!t) {
		if (c->ntags == c->cap) {
			int cap = c->cap ? 2 * c->cap : 8;
			struct csv_tag *nt = realloc(c->tags, (size_t)cap * sizeof *nt);
			if (!nt)
				return ds_err_set(err, DS_ENOMEM, "out of memory");
			c->tags = nt;
			c->cap = cap;
		}
		t = &c->tags[c->ntags];
		memset(t, 0, sizeof *t);
		if (!(t->tag = strdup(tag)))
			return ds_err_set(err, DS_ENOMEM, "out of memory");
		c->ntags++;
		int rc = open_tag(c, tag, x, t, err);
		if (rc) {
			if (t->f)
				fclose(t->f);
			free(t->tag);
			free(t->path);
			c->ntags--;
			return rc;
		}
	}
	char v[40];
	ds_monitor_fmt_double(v, sizeof v, value);
	if (fprintf(t->f, "%lld,%s\r\n", x, v) < 0)
		return ds_err_set(err, DS_EIO, "%s: write error: %s", t->path, strerror(errno));
	return 0;
}

int ds_monitor_csv_flush(struct ds_monitor_csv *c, struct ds_err *err)
{
	for (int i = 0; i < c->ntags; i++)
		if (fflush(c->tags[i].f) != 0)
			return ds_err_set(err, DS_EIO, "%s: write error: %s", c->tags[i].path, strerror(errno));
	return 0;
}

const char *ds_monitor_csv_dir(const struct ds_monitor_csv *c)
{
	return c->dir;
}

void ds_monitor_csv_close(struct ds_monitor_csv *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->ntags; i++) {
		if (c->tags[i].f)
			fclose(c->tags[i].f);
		free(c->tags[i].tag);
		free(c->tags[i].path);
	}
	free(c->tags);
	free(c->dir);
	free(c);
}
