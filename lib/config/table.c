/* table.c - the mechanics shared by the DeepSpeed and the model config:
 * path patterns, value checks against a key's declaration, suggestions for
 * unknown keys, and value formatting.  Internal to lib/config (table.h).
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "config/table.h"
#include "util/log.h"

int ds_config_edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 64 || lb > 64)
		return 99;
	int d[65][65];
	for (size_t i = 0; i <= la; i++)
		d[i][0] = (int)i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = (int)j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			int c = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
			int m = d[i - 1][j - 1] + c;
			if (d[i - 1][j] + 1 < m)
				m = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < m)
				m = d[i][j - 1] + 1;
			d[i][j] = m;
		}
	return d[la][lb];
}

/* Component i of a dotted path into buf; 0 when there is none. */
static int component(const char *p, int i, char *buf, size_t n)
{
	for (; i > 0; i--) {
		p = strchr(p, '.');
		if (!p)
			return 0;
		p++;
	}
	size_t l = strcspn(p, ".");
	if (l >= n)
		l = n - 1;
	memcpy(buf, p, l);
	buf[l] = 0;
	return 1;
}

static int ncomp(const char *p)
{
	int n = 1;
	for (; *p; p++)
		n += *p == '.';
	return n;
}

/* Does pattern's first ncomp(path) components match path? (1 exact, 2 via <name>) */
static int prefix_match(const char *pat, const char *path, int *wild)
{
	int n = ncomp(path);
	*wild = 0;
	if (ncomp(pat) < n)
		return 0;
	for (int i = 0; i < n; i++) {
		char a[128], b[128];
		component(pat, i, a, sizeof(a));
		component(path, i, b, sizeof(b));
		if (!strcmp(a, "<name>"))
			(*wild)++;
		else if (strcmp(a, b))
			return 0;
	}
	return 1;
}

int ds_config_table_find(const struct ds_config_key *t, int n, const char *path)
{
	int best = -1, bestwild = 1 << 20, np = ncomp(path), w;
	for (int i = 0; i < n; i++)
		if (ncomp(t[i].path) == np && prefix_match(t[i].path, path, &w) && w < bestwild)
			best = i, bestwild = w;
	return best;
}

int ds_config_table_is_node(const struct ds_config_key *t, int n, const char *path)
{
	int np = ncomp(path), w;
	for (int i = 0; i < n; i++)
		if (ncomp(t[i].path) > np && prefix_match(t[i].path, path, &w))
			return 1;
	return 0;
}

int ds_config_table_is_wild(const char *pat)
{
	return strstr(pat, "<name>") != NULL;
}

/* 1 when a and b are the same '_'-separated words in another order
 * (comm_overlap, overlap_comm), case-insensitively. */
static int same_words(const char *a, const char *b)
{
	char wa[16][64], wb[16][64];
	int na = 0, nb = 0;
	for (const char *p = a; *p && na < 16; na++) {
		size_t l = strcspn(p, "_");
		snprintf(wa[na], sizeof(wa[0]), "%.*s", (int)(l < 63 ? l : 63), p);
		p += l + (p[l] == '_');
	}
	for (const char *p = b; *p && nb < 16; nb++) {
		size_t l = strcspn(p, "_");
		snprintf(wb[nb], sizeof(wb[0]), "%.*s", (int)(l < 63 ? l : 63), p);
		p += l + (p[l] == '_');
	}
	if (na != nb || na < 2 || !strcasecmp(a, b))
		return 0;
	int used[16] = { 0 };
	for (int i = 0; i < na; i++) {
		int j = 0;
		while (j < nb && (used[j] || strcasecmp(wa[i], wb[j])))
			j++;
		if (j == nb)
			return 0;
		used[j] = 1;
	}
	return 1;
}

void ds_config_table_suggest(const struct ds_config_key *t, int n, const char *path, char *buf, size_t len)
{
	char name[128], parent[512];
	int np = ncomp(path), w;
	const char *dot = strrchr(path, '.');
	snprintf(name, sizeof(name), "%s", dot ? dot + 1 : path);
	snprintf(parent, sizeof(parent), "%.*s", dot ? (int)(dot - path) : 0, path);
	for (char *p = name; *p; p++)
		if (*p == '-')
			*p = '_';
	int bd = (int)strlen(name) / 3;
	if (bd < 1)
		bd = 1;
	bd++;
	buf[0] = 0;
	for (int i = 0; i < n; i++) {
		char c[128];
		if (ncomp(t[i].path) < np)
			continue;
		if (np > 1 && !prefix_match(t[i].path, parent, &w))
			continue;
		component(t[i].path, np - 1, c, sizeof(c));
		if (!strcmp(c, "<name>"))
			continue;
		int d = ds_config_edit_distance(name, c);
		/* a shortened name ("initial_scale", "micro_batch") is a near miss too */
		const char *sub = strlen(name) >= 4 ? strcasestr(c, name) : NULL;
		if (sub && d > (sub == c ? 1 : 2))
			d = sub == c ? 1 : 2;
		if (same_words(name, c))
			d = 0; /* every word right, only their order wrong */
		if (d < bd) {
			bd = d;
			snprintf(buf, len, "%s%s%s", parent, np > 1 ? "." : "", c);
		}
	}
	if (buf[0])
		return;
	/* the right name at the wrong level: suggest its full path */
	for (int i = 0; i < n; i++) {
		const char *ld = strrchr(t[i].path, '.');
		if (!strcmp(ld ? ld + 1 : t[i].path, name) && !ds_config_table_is_wild(t[i].path)) {
			snprintf(buf, len, "%s", t[i].path);
			return;
		}
	}
}

const char *ds_config_table_type_name(int type)
{
	static const char *const names[] = { "boolean", "integer", "number", "string", "one of",
					     "object", "list", "any" };
	return type >= 0 && type <= DS_KT_ANY ? names[type] : "?";
}

/* "a, b or c" of an enum's allowed values */
static void allowed_list(const char *allowed, char *buf, size_t n)
{
	size_t o = 0;
	buf[0] = 0;
	for (const char *p = allowed; *p && o + 1 < n;) {
		size_t l = strcspn(p, "|");
		int last = p[l] == 0;
		o += (size_t)snprintf(buf + o, n - o, "%s\"%.*s\"", o ? (last ? " or " : ", ") : "", (int)l, p);
		p += l + !last;
		if (last)
			break;
	}
}

static int range_check(const struct ds_config_key *k, const char *file, const char *path, double x,
		       const char *shown, struct ds_err *err)
{
	int lo = (k->flags & DS_KEY_MIN) && x < k->min, hi = (k->flags & DS_KEY_MAX) && x > k->max;
	if (!lo && !hi)
		return 0;
	if ((k->flags & DS_KEY_MIN) && (k->flags & DS_KEY_MAX))
		return ds_err_set(err, DS_EINVAL, "%s: key '%s': %s is out of range [%g, %g]", file, path, shown,
				  k->min, k->max);
	if (lo)
		return ds_err_set(err, DS_EINVAL, "%s: key '%s': %s is out of range: must be >= %g", file, path,
				  shown, k->min);
	return ds_err_set(err, DS_EINVAL, "%s: key '%s': %s is out of range: must be <= %g", file, path, shown,
			  k->max);
}

int ds_config_table_check(const struct ds_config_key *k, const char *file, const char *path, json_t *v,
		   json_t **norm, struct ds_err *err)
{
	char shown[64];
	*norm = NULL;
	switch (k->type) {
	case DS_KT_BOOL:
		if (!json_is_boolean(v))
			break;
		return 0;
	case DS_KT_INT: {
		double x;
		if (json_is_integer(v)) {
			x = (double)json_integer_value(v);
			snprintf(shown, sizeof(shown), "%lld", (long long)json_integer_value(v));
			return range_check(k, file, path, x, shown, err);
		}
		if (!json_is_real(v))
			break;
		x = json_real_value(v);
		if (x != floor(x) || fabs(x) > 9.007199254740992e15)
			return ds_err_set(err, DS_EINVAL, "%s: key '%s': expected an integer, got %.17g", file, path,
					  x);
		snprintf(shown, sizeof(shown), "%.17g", x);
		DS_TRY(range_check(k, file, path, x, shown, err));
		*norm = json_integer((json_int_t)x);
		return *norm ? 0 : ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	case DS_KT_FLOAT:
		if (!json_is_number(v))
			break;
		snprintf(shown, sizeof(shown), "%.17g", json_number_value(v));
		return range_check(k, file, path, json_number_value(v), shown, err);
	case DS_KT_STRING:
		if (!json_is_string(v))
			break;
		return 0;
	case DS_KT_ENUM: {
		if (!json_is_string(v))
			break;
		const char *s = json_string_value(v);
		for (const char *p = k->allowed; *p;) {
			size_t l = strcspn(p, "|");
			int eq = strlen(s) == l &&
				 ((k->flags & DS_KEY_NOCASE) ? !strncasecmp(s, p, l) : !strncmp(s, p, l));
			if (eq) {
				if (strncmp(s, p, l))
					*norm = json_stringn(p, l);
				return 0;
			}
			p += l + (p[l] != 0);
		}
		char al[256];
		allowed_list(k->allowed, al, sizeof(al));
		return ds_err_set(err, DS_EINVAL, "%s: key '%s': \"%s\" is not one of %s", file, path, s, al);
	}
	case DS_KT_OBJECT:
		if (!json_is_object(v))
			break;
		return 0;
	case DS_KT_LIST:
		if (!json_is_array(v))
			break;
		return 0;
	default:
		return 0;
	}
	const char *got = json_is_string(v) ? "a string" : json_is_boolean(v) ? "a boolean"
			  : json_is_integer(v) ? "an integer" : json_is_real(v) ? "a number"
			  : json_is_array(v) ? "a list" : json_is_object(v) ? "an object" : "null";
	if (k->type == DS_KT_ENUM) {
		char al[256];
		allowed_list(k->allowed, al, sizeof(al));
		return ds_err_set(err, DS_EINVAL, "%s: key '%s': expected one of %s, got %s", file, path, al, got);
	}
	return ds_err_set(err, DS_EINVAL, "%s: key '%s': expected %s %s, got %s", file, path,
			  k->type == DS_KT_INT || k->type == DS_KT_OBJECT ? "an" : "a", ds_config_table_type_name(k->type),
			  got);
}

int ds_config_table_parse_error(const char *file, const json_error_t *je, struct ds_err *err)
{
	if (je->line < 1)
		return ds_err_set(err, DS_EINVAL, "%s: %s", file, je->text);
	return ds_err_set(err, DS_EINVAL, "%s:%d:%d: %s", file, je->line, je->column, je->text);
}

/* A value as JSON text, reals in the fewest digits that read back exactly. */
void ds_config_table_fmt_value(json_t *v, char *buf, size_t n)
{
	if (json_is_real(v)) {
		double x = json_real_value(v);
		for (int prec = 1; prec <= 17; prec++) {
			snprintf(buf, n, "%.*g", prec, x);
			if (strtod(buf, NULL) == x)
				break;
		}
		if (!strpbrk(buf, ".eEn"))
			snprintf(buf + strlen(buf), n - strlen(buf), ".0");
		return;
	}
	if (json_is_array(v)) {
		size_t o = (size_t)snprintf(buf, n, "[");
		for (size_t i = 0; i < json_array_size(v) && o + 2 < n; i++) {
			if (i)
				o += (size_t)snprintf(buf + o, n - o, ", ");
			if (o + 2 < n)
				ds_config_table_fmt_value(json_array_get(v, i), buf + o, n - o);
			o += strlen(buf + o);
		}
		snprintf(buf + o, n - o, "]");
		return;
	}
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
	snprintf(buf, n, "%s", s ? s : "?");
	free(s);
}

int ds_config_table_load_file(const char *path, json_t **root, struct ds_err *err)
{
	json_error_t je;
	struct stat st;
	*root = NULL;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return ds_err_set(err, DS_EINVAL, "%s: is a directory, not a JSON file", path);
	if (!(*root = json_load_file(path, JSON_REJECT_DUPLICATES, &je)))
		return ds_config_table_parse_error(path, &je, err);
	return 0;
}

void ds_config_errs_add(struct ds_config_errs *e, const char *msg)
{
	if (e->n < DS_CONFIG_MAX_ERRS)
		snprintf(e->line[e->n], sizeof(e->line[0]), "%s", msg);
	e->n++;
}

int ds_config_errs_report(const struct ds_config_errs *e, const char *name, struct ds_err *err)
{
	if (e->n == 1)
		return ds_err_set(err, DS_EINVAL, "%s", e->line[0]);
	int shown = e->n < DS_CONFIG_MAX_ERRS ? e->n : DS_CONFIG_MAX_ERRS;
	for (int i = 0; i < shown; i++)
		ds_log_error("%s", e->line[i]);
	if (e->n > shown)
		return ds_err_set(err, DS_EINVAL, "%s: %d errors (the first %d above, %d more not shown)", name, e->n, shown,
				  e->n - shown);
	return ds_err_set(err, DS_EINVAL, "%s: %d errors (above)", name, e->n);
}

char *ds_config_table_underscores(const char *name, char *buf, size_t n)
{
	snprintf(buf, n, "%s", name);
	for (char *p = buf; *p; p++)
		if (*p == '-')
			*p = '_';
	return buf;
}
