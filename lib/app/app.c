/* app.c - the optional-feature table and the exit-3 message (see app.h).
 *
 * Features are looked up in DS_FEATURES at run time, so no caller needs an
 * #ifdef: configure writes the word list once into config.h.
 */
#include "config.h"
#include <string.h>
#include "app/app.h"

static const struct ds_app_feature features[] = {
	{ "mpi", "the MPI communicator and parallel HDF5 checkpoints", "--with-mpi",
	  "apt-get install libopenmpi-dev openmpi-bin libhdf5-openmpi-dev" },
	{ "hdf5-parallel", "parallel HDF5 checkpoints through MPI-IO", "--with-mpi",
	  "apt-get install libopenmpi-dev openmpi-bin libhdf5-openmpi-dev" },
	{ "libaio", "the libaio async-I/O engine", "--with-libaio",
	  "apt-get install libaio-dev" },
	{ "libyaml", "GPT-NeoX YAML configs (ds-train --conf)", "--with-libyaml",
	  "apt-get install libyaml-dev" },
	{ "onednn", "bf16 matrix products on Intel AMX through oneDNN", "--with-dnnl",
	  "apt-get install libdnnl-dev" },
	{ "cuda", "CUDA kernels and cuBLAS", "--with-cuda",
	  "installing the CUDA toolkit (nvcc, cuBLAS) under /usr/local/cuda" },
	{ "nccl", "the NCCL communicator", "--with-cuda",
	  "installing the CUDA toolkit with NCCL (nccl.h) under /usr/local/cuda" },
};

const char *ds_app_features(void)
{
	return DS_FEATURES;
}

int ds_app_has(const char *word)
{
	static const char all[] = DS_FEATURES;
	size_t n = strlen(word);
	const char *p = all;

	if (n == 0)
		return 0;
	while ((p = strstr(p, word)) != NULL) {
		int starts = p == all || p[-1] == ' ';
		int ends = p[n] == '\0' || p[n] == ' ';
		if (starts && ends)
			return 1;
		p += n;
	}
	return 0;
}

const struct ds_app_feature *ds_app_feature_find(const char *name)
{
	if (strcmp(name, "async_io") == 0)
		name = "libaio";
	for (size_t i = 0; i < sizeof features / sizeof features[0]; i++)
		if (strcmp(features[i].name, name) == 0)
			return &features[i];
	return NULL;
}

int ds_app_require(const char *feature, struct ds_err *err)
{
	const struct ds_app_feature *f = ds_app_feature_find(feature);

	if (f == NULL)
		return ds_err_set(err, DS_EINTERNAL, "ds_app_require: unknown feature '%s'", feature);
	if (ds_app_has(f->name))
		return 0;
	return ds_err_set(err, DS_ENOTSUP, "built without %s (%s); reconfigure %s after %s",
			  f->name, f->what, f->flag, f->howto);
}
