/* app.h - what this build of dstk has compiled in, for the tools.
 *
 * One table names every optional feature with the configure flag and the
 * Debian packages that turn it on; ds-report's fix hints and the exit-3
 * message of every tool come from it.  The truth is config.h's DS_FEATURES.
 */
#ifndef DS_APP_APP_H
#define DS_APP_APP_H

#include "util/err.h"

/* One optional feature of the build. */
struct ds_app_feature {
	const char *name;  /* word in DS_FEATURES: "mpi", "libaio", "cuda", "nccl" */
	const char *what;  /* what it gives, e.g. "the libaio async-I/O engine" */
	const char *flag;  /* configure flag that turns it on */
	const char *howto; /* what to install first, e.g. "apt-get install libaio-dev" */
};

/* The word list DS_FEATURES of this build (static string). */
const char *ds_app_features(void);

/* 1 when word (e.g. "mpi", "hdf5-parallel") is in DS_FEATURES, else 0. */
int ds_app_has(const char *word);

/* The table entry for name ("mpi", "libaio" or its alias "async_io",
 * "cuda", "nccl", "hdf5-parallel"), or NULL; borrowed, static. */
const struct ds_app_feature *ds_app_feature_find(const char *name);

/* 0 when feature is built in.  Otherwise DS_ENOTSUP (exit 3) with the
 * standard message: "built without libaio (the libaio async-I/O engine);
 * reconfigure --with-libaio after apt-get install libaio-dev".  An unknown
 * name is DS_EINTERNAL (a bug in the caller). */
int ds_app_require(const char *feature, struct ds_err *err);

#endif
