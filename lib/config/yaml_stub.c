/* yaml_stub.c - ds_yaml_load_file in a build without libyaml (yaml.h). */
#include "config/yaml.h"

int ds_yaml_load_file(const char *path, json_t **out, struct ds_err *err)
{
	*out = NULL;
	return ds_err_set(err, DS_ENOTSUP, "%s: GPT-NeoX YAML needs libyaml: built without it; "
			  "apt-get install libyaml-dev and reconfigure --with-libyaml", path);
}
