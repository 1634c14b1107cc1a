/* ckpt_need.h - the list of tensors a resume reads, from a model, for
 * struct ds_ckpt_need (lib/io knows nothing of models: the driver lists
 * them).  Used by ds-train's load and ds-ckpt-convert verify.
 */
#ifndef DS_DRIVER_CKPT_NEED_H
#define DS_DRIVER_CKPT_NEED_H

#include <stdlib.h>

#include "io/ckpt.h"
#include "model/gpt.h"

/* A malloc'd array of m's tensors with their logical shapes (a
 * tensor-parallel shard's tensor is whole in a checkpoint; names borrowed
 * from m; free the array before m), NULL when out of memory. */
static inline struct ds_ckpt_need_tensor *ds_ckpt_need_tensors(const struct ds_gpt *m)
{
	int n = ds_gpt_num_tensors(m);
	struct ds_ckpt_need_tensor *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
	for (int i = 0; v && i < n; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(m, i);
		v[i] = (struct ds_ckpt_need_tensor){ t->name, t->ndim,
						     { (uint64_t)t->gshape[0], (uint64_t)(t->ndim > 1 ? t->gshape[1] : 0) } };
	}
	return v;
}

#endif
