/* yaml.c - a YAML file as a jansson value with libyaml's event parser
 * (yaml.h).  Scalars are typed as YAML 1.1 (PyYAML's resolver, which
 * GPT-NeoX's launcher uses) types them: plain true/false/yes/no/on/off in
 * any of its cases, null/~/empty, integers, reals; quoted scalars are
 * strings.  Anchors and aliases are refused (NeoX configs have none).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "config/yaml.h"

struct yctx {
	yaml_parser_t p;
	const char *path;
	struct ds_err *err;
};

static int at(struct yctx *y, const yaml_mark_t *m, const char *what, const char *arg)
{
	return ds_err_set(y->err, DS_EINVAL, "%s:%zu:%zu: %s%s", y->path, m->line + 1, m->column + 1, what,
			  arg ? arg : "");
}

static int next(struct yctx *y, yaml_event_t *ev)
{
	if (yaml_parser_parse(&y->p, ev))
		return 0;
	const yaml_mark_t *m = &y->p.problem_mark;
	char what[256];
	snprintf(what, sizeof(what), "%s%s%s", y->p.problem ? y->p.problem : "invalid YAML",
		 y->p.context ? " " : "", y->p.context ? y->p.context : "");
	return at(y, m, what, NULL);
}

static int is_one(const char *s, const char *const *l)
{
	for (; *l; l++)
		if (!strcmp(s, *l))
			return 1;
	return 0;
}

/* A plain scalar typed as YAML 1.1's resolver does. */
static json_t *plain(const char *s)
{
	static const char *const t[] = { "true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", NULL };
	static const char *const f[] = { "false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", NULL };
	static const char *const n[] = { "", "~", "null", "Null", "NULL", NULL };
	if (is_one(s, t))
		return json_true();
	if (is_one(s, f))
		return json_false();
	if (is_one(s, n))
		return json_null();
	char *end;
	errno = 0;
	long long i = strtoll(s, &end, 10);
	if (*s && !*end && errno == 0 && (isdigit((unsigned char)s[0]) || ((s[0] == '-' || s[0] == '+') && s[1])))
		return json_integer(i);
	double d = strtod(s, &end);
	/* a real needs a digit and a '.' or an exponent (YAML 1.1: 1.0e-8, 6e-4 in PyYAML needs the '.',
	 * but NeoX's own files write 6e-4 and mean a number: take it) */
	if (*s && !*end && strpbrk(s, "0123456789") && strpbrk(s, ".eE") && isfinite(d))
		return json_real(d);
	return json_string(s);
}

static int value(struct yctx *y, yaml_event_t *ev, json_t **out);

static int mapping(struct yctx *y, json_t **out)
{
	json_t *o = json_object();
	yaml_event_t k;
	int rc = 0;
	for (;;) {
		if ((rc = next(y, &k)) < 0)
			break;
		if (k.type == YAML_MAPPING_END_EVENT) {
			yaml_event_delete(&k);
			break;
		}
		if (k.type != YAML_SCALAR_EVENT) {
			rc = at(y, &k.start_mark, "a key must be a plain name", NULL);
			yaml_event_delete(&k);
			break;
		}
		char *key = strdup((const char *)k.data.scalar.value);
		yaml_mark_t km = k.start_mark;
		yaml_event_delete(&k);
		yaml_event_t v;
		json_t *jv = NULL;
		if (!key || (rc = next(y, &v)) < 0) {
			free(key);
			if (!key)
				rc = ds_err_set(y->err, DS_ENOMEM, "out of memory");
			break;
		}
		rc = value(y, &v, &jv);
		yaml_event_delete(&v);
		if (rc == 0 && json_object_get(o, key))
			rc = ds_err_set(y->err, DS_EINVAL, "%s:%zu:%zu: duplicate key '%s'", y->path, km.line + 1,
					km.column + 1, key);
		if (rc == 0 && json_object_set_new(o, key, jv))
			rc = ds_err_set(y->err, DS_ENOMEM, "out of memory");
		else if (rc < 0)
			json_decref(jv);
		free(key);
		if (rc < 0)
			break;
	}
	if (rc < 0) {
		json_decref(o);
		return rc;
	}
	*out = o;
	return 0;
}

static int sequence(struct yctx *y, json_t **out)
{
	json_t *a = json_array();
	int rc = 0;
	for (;;) {
		yaml_event_t ev;
		json_t *jv = NULL;
		if ((rc = next(y, &ev)) < 0)
			break;
		if (ev.type == YAML_SEQUENCE_END_EVENT) {
			yaml_event_delete(&ev);
			break;
		}
		rc = value(y, &ev, &jv);
		yaml_event_delete(&ev);
		if (rc < 0)
			break;
		json_array_append_new(a, jv);
	}
	if (rc < 0) {
		json_decref(a);
		return rc;
	}
	*out = a;
	return 0;
}

static int value(struct yctx *y, yaml_event_t *ev, json_t **out)
{
	switch (ev->type) {
	case YAML_SCALAR_EVENT: {
		const char *s = (const char *)ev->data.scalar.value;
		*out = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? plain(s) : json_string(s);
		return *out ? 0 : ds_err_set(y->err, DS_ENOMEM, "out of memory");
	}
	case YAML_MAPPING_START_EVENT:
		return mapping(y, out);
	case YAML_SEQUENCE_START_EVENT:
		return sequence(y, out);
	case YAML_ALIAS_EVENT:
		return at(y, &ev->start_mark, "anchors and aliases are not supported; write the value out", NULL);
	default:
		return at(y, &ev->start_mark, "unexpected YAML structure", NULL);
	}
}

int ds_yaml_load_file(const char *path, json_t **out, struct ds_err *err)
{
	struct yctx y = { .path = path, .err = err };
	yaml_event_t ev;
	int rc = 0;
	*out = NULL;
	FILE *f = fopen(path, "rb");
	if (!f)
		return ds_err_set(err, errno == ENOENT ? DS_EINVAL : DS_EIO, "%s: %s", path, strerror(errno));
	if (!yaml_parser_initialize(&y.p)) {
		fclose(f);
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	yaml_parser_set_input_file(&y.p, f);
	json_t *doc = NULL;
	/* stream start, document start, the value, document end */
	for (;;) {
		if ((rc = next(&y, &ev)) < 0)
			break;
		yaml_event_type_t t = ev.type;
		if (t == YAML_STREAM_END_EVENT) {
			yaml_event_delete(&ev);
			break;
		}
		if (t == YAML_STREAM_START_EVENT || t == YAML_DOCUMENT_START_EVENT || t == YAML_DOCUMENT_END_EVENT) {
			if (t == YAML_DOCUMENT_START_EVENT && doc) {
				rc = at(&y, &ev.start_mark, "more than one YAML document in the file", NULL);
				yaml_event_delete(&ev);
				break;
			}
			yaml_event_delete(&ev);
			continue;
		}
		rc = value(&y, &ev, &doc);
		yaml_event_delete(&ev);
		if (rc < 0)
			break;
	}
	yaml_parser_delete(&y.p);
	fclose(f);
	if (rc < 0) {
		json_decref(doc);
		return rc;
	}
	if (!json_is_object(doc)) {
		json_decref(doc);
		return ds_err_set(err, DS_EINVAL, "%s: expected a mapping of GPT-NeoX parameters", path);
	}
	*out = doc;
	return 0;
}
