/* topo.h - the 3D layout of a job (issue 19): tensor (model) x pipeline x
 * data parallel ranks, their coordinates and their process groups.
 *
 * Rank placement is DeepSpeed's PipeModelDataParallelTopology (axes pipe,
 * data, model, the last varying fastest) and Megatron's order (tp
 * innermost, then dp, then pp):
 *     rank = pp_rank * (dp * tp) + dp_rank * tp + tp_rank
 * so a tensor-parallel group is tp neighbouring ranks (one node when tp
 * divides the ranks per node), and a pipeline's stages are dp*tp apart.
 */
#ifndef DS_COMM_TOPO_H
#define DS_COMM_TOPO_H

#include "comm/comm.h"
#include "util/err.h"

struct ds_topo {
	int world, rank;             /* the job */
	int tp, pp, dp;              /* sizes: tp * pp * dp = world */
	int tp_rank, pp_rank, dp_rank;
};

/* The layout of `world` ranks as tp x pp x dp and the coordinates of
 * `rank`.  Returns 0 or DS_EINVAL (a size < 1, or tp * pp not dividing
 * world: names the three numbers). */
int ds_topo_init(struct ds_topo *t, int world, int rank, int tp, int pp, struct ds_err *err);

/* Global rank of coordinates (pp_rank, dp_rank, tp_rank). */
int ds_topo_rank_of(const struct ds_topo *t, int pp_rank, int dp_rank, int tp_rank);

/* The process groups of one rank.  world is borrowed; the others are
 * sub-communicators of it, owned here:
 *   tp    the tp ranks of this (pp, dp): tensor-parallel collectives
 *   pp    the pp stages of this (dp, tp), ranked by stage: sends, the loss
 *   dp    the dp ranks of this (pp, tp): ZeRO's collectives
 *   tie   the first and last stage of this (dp, tp) (tied embedding
 *         gradients); on other stages, and when pp is 1, a group of one */
struct ds_groups {
	struct ds_comm *world, *tp, *pp, *dp, *tie;
};

/* Split world into t's groups (collective over world).  Returns 0 or a
 * ds_comm_split error; release with ds_groups_release (accepts a zeroed
 * struct). */
int ds_groups_create(struct ds_groups *g, struct ds_comm *world, const struct ds_topo *t, struct ds_err *err);
void ds_groups_release(struct ds_groups *g);

#endif
