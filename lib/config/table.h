/* table.h - key-table mechanics shared by config.c and model.c (internal).
 * Patterns are dotted paths; a "<name>" component matches any name.
 */
#ifndef DS_CONFIG_TABLE_H
#define DS_CONFIG_TABLE_H

#include <jansson.h>
#include <stddef.h>

#include "config/config.h"
#include "config/keys.h"

/* Index of the key declaring `path` (exact names preferred over <name>), or -1. */
int ds_config_table_find(const struct ds_config_key *t, int n, const char *path);
/* 1 when some key lies below `path` (so path is an object of keys). */
int ds_config_table_is_node(const struct ds_config_key *t, int n, const char *path);
int ds_config_table_is_wild(const char *pattern);
/* The closest declared path to an unknown `path` into buf ("" if none). */
void ds_config_table_suggest(const struct ds_config_key *t, int n, const char *path, char *buf, size_t len);
/* Check v against k; *norm is a new normalised value to store instead
 * (integral float -> integer, enum spelling), or NULL.  0 or DS_EINVAL with
 * "file: key 'path': ..." in err. */
int ds_config_table_check(const struct ds_config_key *k, const char *file, const char *path, json_t *v,
		   json_t **norm, struct ds_err *err);
const char *ds_config_table_type_name(int type);
/* A value as JSON text into buf, reals in the fewest digits that read back exactly. */
void ds_config_table_fmt_value(json_t *v, char *buf, size_t n);
/* "file:line:column: text" for a jansson parse error; returns DS_EINVAL. */
int ds_config_table_parse_error(const char *file, const json_error_t *je, struct ds_err *err);

/* Parse a JSON file (duplicates rejected) into *root (caller decrefs);
 * 0 or DS_EINVAL naming the file (missing, a directory, line:column). */
int ds_config_table_load_file(const char *path, json_t **root, struct ds_err *err);

/* A key name as NeoX and Megatron read it: '-' and '_' alike.  Copies name
 * into buf (n bytes, truncated) with every '-' made '_'; returns buf. */
char *ds_config_table_underscores(const char *name, char *buf, size_t n);

/* Every error of one input, reported in one run: the first
 * DS_CONFIG_MAX_ERRS lines kept, all counted. */
#define DS_CONFIG_MAX_ERRS 20
struct ds_config_errs {
	char line[DS_CONFIG_MAX_ERRS][DS_ERR_MSG_MAX];
	int n;
};
/* Keep msg (one line) and count it. */
void ds_config_errs_add(struct ds_config_errs *e, const char *msg);
/* The errors as err (n > 0): the one error itself, or each logged as its
 * own line (ds_log_error) and "name: N errors (...)" in err.  DS_EINVAL. */
int ds_config_errs_report(const struct ds_config_errs *e, const char *name, struct ds_err *err);

#endif
