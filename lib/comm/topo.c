/* topo.c - rank coordinates of a tp x pp x dp job and its process groups
 * (topo.h).  The groups are sub-communicators made by ds_comm_split: every
 * rank makes the same four splits in the same order. */
#include "comm/topo.h"

#include <string.h>

int ds_topo_init(struct ds_topo *t, int world, int rank, int tp, int pp, struct ds_err *err)
{
	memset(t, 0, sizeof *t);
	if (tp < 1 || pp < 1 || world < 1)
		return ds_err_set(err, DS_EINVAL, "tensor-parallel size %d and pipeline-parallel size %d must be >= 1",
				  tp, pp);
	if (world % (tp * pp))
		return ds_err_set(err, DS_EINVAL,
				  "world size %d is not a multiple of tensor-parallel size %d x pipeline-parallel size %d; "
				  "start tp x pp x dp ranks", world, tp, pp);
	t->world = world;
	t->rank = rank;
	t->tp = tp;
	t->pp = pp;
	t->dp = world / (tp * pp);
	t->tp_rank = rank % tp;
	t->dp_rank = rank / tp % t->dp;
	t->pp_rank = rank / (tp * t->dp);
	return 0;
}

int ds_topo_rank_of(const struct ds_topo *t, int pp_rank, int dp_rank, int tp_rank)
{
	return (pp_rank * t->dp + dp_rank) * t->tp + tp_rank;
}

int ds_groups_create(struct ds_groups *g, struct ds_comm *world, const struct ds_topo *t, struct ds_err *err)
{
	memset(g, 0, sizeof *g);
	g->world = world;
	const int p = t->pp_rank, d = t->dp_rank, m = t->tp_rank;
	/* colors: the coordinates that stay fixed inside the group */
	int rc = ds_comm_split(world, p * t->dp + d, m, &g->tp, err);
	if (rc == 0)
		rc = ds_comm_split(world, d * t->tp + m, p, &g->pp, err);
	if (rc == 0)
		rc = ds_comm_split(world, p * t->tp + m, d, &g->dp, err);
	/* first and last stage of a (dp, tp) pair together; every other rank
	 * alone (colors past the pairs' range) */
	int ends = t->pp > 1 && (p == 0 || p == t->pp - 1);
	if (rc == 0)
		rc = ds_comm_split(world, ends ? d * t->tp + m : t->dp * t->tp + t->rank, p, &g->tie, err);
	if (rc < 0)
		ds_groups_release(g);
	return rc;
}

void ds_groups_release(struct ds_groups *g)
{
	ds_comm_destroy(g->tie);
	ds_comm_destroy(g->dp);
	ds_comm_destroy(g->pp);
	ds_comm_destroy(g->tp);
	memset(g, 0, sizeof *g);
}
