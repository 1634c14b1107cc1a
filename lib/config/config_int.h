/* config_int.h - lib/config's internals shared by config.c and rules.c. */
#ifndef DS_CONFIG_CONFIG_INT_H
#define DS_CONFIG_CONFIG_INT_H

#include <jansson.h>

#include "config/config.h"
#include "config/table.h"

struct ds_config_ent {
	char *path;   /* concrete dotted path */
	int key;      /* table index */
	json_t *val;  /* owned reference */
	int src;      /* enum ds_config_source */
	int seq;      /* insertion order, for a stable sort */
	int resolved; /* an "auto" resolved from ds-train's flags or a default (src is FILE) */
};

/* What a load noted besides the values: keys of switched-off sections it
 * ignored, spellings and settings it accepted with a warning, and "auto"
 * values it resolved.  --check prints them; a run logs them. */
enum ds_config_note_kind { DS_NOTE_IGNORED, DS_NOTE_WARNING, DS_NOTE_RESOLVED };
struct ds_config_note {
	int kind;   /* enum ds_config_note_kind */
	char *text; /* one line, without the file name */
};

struct ds_config {
	char *name;
	json_t *tree;  /* the file after normalisation and aliases */
	struct ds_config_ent *ents;
	int nents, cap;
	struct ds_config_opts o;
	struct ds_config_batch batch;
	struct ds_config_values v;  /* every acted-on value, stored as it is recorded */
	json_t *keep;               /* the defaults that "auto" fields point into */
	struct ds_config_note *notes;
	int nnotes, ncap;
	struct ds_config_errs errs;  /* every error of the file (table.h) */
};

/* Record one error of the file (the load goes on, to report every error
 * in one run); returns DS_EINVAL so `return ds_config_error(...)` reads
 * like ds_err_set. */
int ds_config_error(struct ds_config *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Record a note; a warning is also logged (ds_log_warn) as "file: text".
 * 0 or DS_ENOMEM. */
int ds_config_note(struct ds_config *c, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Append a value (takes a new reference) and store it in its field of
 * c->v when the key has one; 0 or DS_ENOMEM. */
int ds_config_add_ent(struct ds_config *c, const char *path, int key, json_t *val, int src);
/* The entry of a concrete path, or NULL. */
struct ds_config_ent *ds_config_find_ent(const struct ds_config *c, const char *path);
/* Add an inferred value (steals v); 0, DS_ENOMEM or DS_EINTERNAL. */
int ds_config_set_inferred(struct ds_config *c, const char *path, json_t *v);

int ds_config_rules(struct ds_config *c, struct ds_err *err);        /* spec §2 constraints */
int ds_config_unsupported(struct ds_config *c, struct ds_err *err);  /* unsupported keys in use */
int ds_config_triad(struct ds_config *c, struct ds_err *err);        /* batch triad, spec §1 */
int ds_config_infer(struct ds_config *c);
/* 0 for optimizer/scheduler params the configured type does not take. */
int ds_config_applies(const struct ds_config *c, const char *path);                            /* overlap_comm, dtypes */

#endif
