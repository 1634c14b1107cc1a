/* config_int.h - lib/config's internals shared by config.c and rules.c. */
#ifndef DS_CONFIG_CONFIG_INT_H
#define DS_CONFIG_CONFIG_INT_H

#include <jansson.h>

#include "config/config.h"

struct ds_config_ent {
	char *path;   /* concrete dotted path */
	int key;      /* table index */
	json_t *val;  /* owned reference */
	int src;      /* enum ds_config_source */
	int seq;      /* insertion order, for a stable sort */
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
};

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
