/* yaml.h - a YAML file as a jansson value (lib/config internal), for
 * GPT-NeoX configs: block and flow mappings and sequences, comments,
 * trailing commas, YAML 1.1 scalars (true/True/yes, false/False/no, null/~,
 * integers, reals such as 1.0e-8 or 6e-4, else strings; quoted scalars stay
 * strings).  Built with libyaml (HAVE_LIBYAML); without it the loader
 * returns DS_ENOTSUP naming the configure flag.
 */
#ifndef DS_CONFIG_YAML_H
#define DS_CONFIG_YAML_H

#include <jansson.h>

#include "util/err.h"

/* Parse path (one document) into *out (a new reference).  0; DS_EINVAL
 * with "file:line:column: what" for bad YAML and a duplicate key; DS_EIO
 * when the file cannot be read; DS_ENOTSUP without libyaml. */
int ds_yaml_load_file(const char *path, json_t **out, struct ds_err *err);

#endif
