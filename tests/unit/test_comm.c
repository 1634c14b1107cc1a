/* test_comm.c - the communicator in a world of one: the self backend's
 * collectives leave data as a one-rank world must, requests complete, the
 * logger sees every operation, and asking for MPI in a build without it
 * fails with DS_ENOTSUP naming --with-mpi.  Device buffers: the choice
 * between NCCL and staging against hand-made rank tables, the NCCL id
 * bootstrap, and every collective on simulated device memory
 * (comm_devsim.h).  Multi-rank behaviour is tested under mpirun by
 * tests/mpi/comm.bats. */
#include "config.h"
#include "unit.h"

#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/topo.h"
#include "comm_devsim.h"

static int nlogged;
static size_t lastbytes;
static void logger(void *ctx, const struct ds_comm_record *r)
{
	nlogged++;
	lastbytes = r->bytes;
}

static void test_self_collectives(void **state)
{
	struct ds_comm *c;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_comm_create(&c, "self", &err), 0);
	assert_int_equal(ds_comm_rank(c), 0);
	assert_int_equal(ds_comm_size(c), 1);
	assert_string_equal(ds_comm_backend(c), "self");
	ds_comm_set_logger(c, logger, NULL);
	float a[4] = { 1, 2, 3, 4 }, b[4] = { 0 };
	assert_int_equal(ds_comm_allreduce(c, a, 4, DS_F32, DS_SUM, &err), 0);
	assert_true(a[0] == 1 && a[3] == 4);
	assert_int_equal(ds_comm_reduce_scatter(c, a, b, 4, DS_F32, DS_SUM, &err), 0);
	assert_memory_equal(a, b, sizeof a);
	memset(b, 0, sizeof b);
	assert_int_equal(ds_comm_allgather(c, a, b, 4, DS_F32, &err), 0);
	assert_memory_equal(a, b, sizeof a);
	assert_int_equal(ds_comm_broadcast(c, a, 4, DS_F32, 0, &err), 0);
	assert_int_equal(ds_comm_broadcast(c, a, 4, DS_F32, 1, &err), DS_EINVAL);
	assert_int_equal(ds_comm_barrier(c, &err), 0);
	struct ds_comm_req *r;
	memset(b, 0, sizeof b);
	assert_int_equal(ds_comm_iallgather(c, a, b, 4, DS_F32, &r, &err), 0);
	assert_int_equal(ds_comm_wait(c, r, &err), 0);
	assert_memory_equal(a, b, sizeof a);
	assert_int_equal(nlogged, 6);
	assert_int_equal(lastbytes, 16);
	/* all_to_all_single of a world of one: its one block comes back, logged
	 * with DeepSpeed's message size (the whole input) */
	memset(b, 0, sizeof b);
	assert_int_equal(ds_comm_alltoall(c, a, b, 4, DS_F32, &err), 0);
	assert_memory_equal(a, b, sizeof a);
	assert_int_equal(nlogged, 7);
	assert_int_equal(lastbytes, 16);
	ds_comm_destroy(c);
}

/* a world of one splits into worlds of one whose operations reach the
 * parent's logger; it has no peer to send to */
static void test_self_groups(void **state)
{
	struct ds_comm *c, *g;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_comm_create(&c, "self", &err), 0);
	nlogged = 0;
	ds_comm_set_logger(c, logger, NULL);
	assert_int_equal(ds_comm_split(c, 3, 0, &g, &err), 0);
	assert_int_equal(ds_comm_rank(g), 0);
	assert_int_equal(ds_comm_size(g), 1);
	double v = 2.5;
	assert_int_equal(ds_comm_allreduce(g, &v, 1, DS_F64, DS_SUM, &err), 0);
	assert_true(v == 2.5);
	assert_int_equal(nlogged, 1);
	assert_int_equal(lastbytes, 8);
	assert_int_equal(ds_comm_send(g, &v, 1, DS_F64, 0, 0, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "peer 0"));
	assert_int_equal(ds_comm_recv(c, &v, 1, DS_F64, 1, 0, &err), DS_EINVAL);
	ds_comm_destroy(g);
	assert_int_equal(ds_comm_split(c, -2, 0, &g, &err), DS_EINVAL);
	assert_null(g);
	ds_comm_destroy(c);
}

/* DeepSpeed's ProcessTopology(axes=['pipe', 'data', 'model']) numbers the
 * cartesian product with the model axis fastest: rank -> (pipe, data, model) */
static void test_topology(void **state)
{
	static const int want[8][3] = { { 0, 0, 0 }, { 0, 0, 1 }, { 0, 1, 0 }, { 0, 1, 1 },
					{ 1, 0, 0 }, { 1, 0, 1 }, { 1, 1, 0 }, { 1, 1, 1 } };
	struct ds_topo t;
	struct ds_err err = DS_ERR_INIT;
	for (int r = 0; r < 8; r++) {
		assert_int_equal(ds_topo_init(&t, 8, r, 2, 2, &err), 0);
		assert_int_equal(t.dp, 2);
		assert_int_equal(t.pp_rank, want[r][0]);
		assert_int_equal(t.dp_rank, want[r][1]);
		assert_int_equal(t.tp_rank, want[r][2]);
		assert_int_equal(ds_topo_rank_of(&t, want[r][0], want[r][1], want[r][2]), r);
	}
	/* 12 ranks as tp 2 x pp 3 x dp 2: rank 7 is stage 1, replica 1, shard 1 */
	assert_int_equal(ds_topo_init(&t, 12, 7, 2, 3, &err), 0);
	assert_true(t.pp_rank == 1 && t.dp_rank == 1 && t.tp_rank == 1 && t.dp == 2);
	assert_int_equal(ds_topo_init(&t, 6, 0, 4, 1, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "world size 6"));
	assert_int_equal(ds_topo_init(&t, 4, 0, 0, 1, &err), DS_EINVAL);
	/* a world of one has groups of one */
	struct ds_comm *c;
	struct ds_groups g;
	assert_int_equal(ds_comm_create(&c, "self", &err), 0);
	assert_int_equal(ds_topo_init(&t, 1, 0, 1, 1, &err), 0);
	assert_int_equal(ds_groups_create(&g, c, &t, &err), 0);
	assert_true(ds_comm_size(g.tp) == 1 && ds_comm_size(g.pp) == 1 && ds_comm_size(g.dp) == 1 &&
		    ds_comm_size(g.tie) == 1);
	ds_groups_release(&g);
	ds_comm_destroy(c);
}

static void test_backend_choice(void **state)
{
	struct ds_comm *c;
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_comm_create(&c, "tcp", &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "tcp"));
#ifndef HAVE_MPI
	assert_int_equal(ds_comm_create(&c, "mpi", &err), DS_ENOTSUP);
	assert_non_null(strstr(err.msg, "--with-mpi"));
#endif
	/* not started by a launcher: auto is self */
	assert_int_equal(ds_comm_create(&c, "auto", &err), 0);
	assert_string_equal(ds_comm_backend(c), "self");
	ds_comm_destroy(c);
	assert_int_equal(ds_dtype_size(DS_BF16), 2);
	assert_int_equal(ds_dtype_size(DS_I64), 8);
}

/* keys for a world of n: rank r on host[r] with device dev[r] */
static char *keys_of(int n, const char *const *host, const char *const *dev)
{
	char *k = calloc((size_t)n, DS_COMM_DEVKEY);
	for (int r = 0; r < n; r++)
		ds_comm_devkey(k + (size_t)r * DS_COMM_DEVKEY, host[r], r, dev[r]);
	return k;
}

static void test_devpath_choose(void **state)
{
	struct ds_err err = DS_ERR_INIT;
	char why[256];
	const char *h2[] = { "a", "a" }, *own2[] = { "0000:3b:00.0", "0000:5e:00.0" };
	const char *one2[] = { "0000:3b:00.0", "0000:3b:00.0" };
	const char *h4[] = { "a", "a", "b", "b" }, *d4[] = { "GPU-1", "GPU-2", "GPU-1", "GPU-2" };
	const char *d4s[] = { "GPU-1", "GPU-2", "GPU-1", "GPU-1" };
	char *own = keys_of(2, h2, own2), *shared = keys_of(2, h2, one2), *four = keys_of(4, h4, d4);
	char *four_shared = keys_of(4, h4, d4s);

	/* each rank its own device: NCCL, unless not asked for or not built */
	assert_int_equal(ds_comm_devpath_choose(1, DS_COMM_NCCL_AUTO, 2, own, why, sizeof why, &err),
			 DS_COMM_PATH_NCCL);
	assert_non_null(strstr(why, "NCCL"));
	assert_int_equal(ds_comm_devpath_choose(1, DS_COMM_NCCL_REQUIRE, 2, own, why, sizeof why, &err),
			 DS_COMM_PATH_NCCL);
	assert_int_equal(ds_comm_devpath_choose(1, DS_COMM_NCCL_NEVER, 2, own, why, sizeof why, &err),
			 DS_COMM_PATH_STAGED);
	assert_int_equal(ds_comm_devpath_choose(0, DS_COMM_NCCL_AUTO, 2, own, why, sizeof why, &err),
			 DS_COMM_PATH_STAGED);
	assert_non_null(strstr(why, "--with-cuda"));
	assert_int_equal(ds_comm_devpath_choose(0, DS_COMM_NCCL_REQUIRE, 2, own, why, sizeof why, &err),
			 DS_ENOTSUP);
	assert_non_null(strstr(err.msg, "--with-cuda"));
	/* the same device on one host: NCCL refuses it, so staged, naming both */
	assert_int_equal(ds_comm_devpath_choose(1, DS_COMM_NCCL_AUTO, 2, shared, why, sizeof why, &err),
			 DS_COMM_PATH_STAGED);
	assert_non_null(strstr(why, "ranks 0 and 1 share device a/0000:3b:00.0"));
	assert_int_equal(ds_comm_devpath_choose(1, DS_COMM_NCCL_REQUIRE, 2, shared, why, sizeof why, &err),
			 DS_EINVAL);
	assert_non_null(strstr(err.msg, "ranks 0 and 1 share device a/0000:3b:00.0"));
	/* the same device name on two hosts is two devices */
	assert_int_equal(ds_comm_devpath_choose(1, DS_COMM_NCCL_AUTO, 4, four, why, sizeof why, &err),
			 DS_COMM_PATH_NCCL);
	assert_int_equal(ds_comm_devpath_choose(1, DS_COMM_NCCL_AUTO, 4, four_shared, why, sizeof why, &err),
			 DS_COMM_PATH_STAGED);
	assert_non_null(strstr(why, "ranks 2 and 3 share device b/GPU-1"));
	/* one rank: nothing crosses, unless NCCL is required */
	assert_int_equal(ds_comm_devpath_choose(1, DS_COMM_NCCL_AUTO, 1, own, why, sizeof why, &err),
			 DS_COMM_PATH_STAGED);
	assert_int_equal(ds_comm_devpath_choose(1, DS_COMM_NCCL_REQUIRE, 1, own, why, sizeof why, &err),
			 DS_COMM_PATH_NCCL);
	assert_int_equal(ds_comm_devpath_choose(0, DS_COMM_NCCL_AUTO, 1, own, why, sizeof why, &err),
			 DS_COMM_PATH_STAGED);
	assert_non_null(strstr(why, "one rank"));
	assert_int_equal(ds_comm_devpath_choose(0, DS_COMM_NCCL_REQUIRE, 1, own, why, sizeof why, &err),
			 DS_ENOTSUP);
	/* no NCCL: the reason is that, whatever the devices */
	assert_int_equal(ds_comm_devpath_choose(0, DS_COMM_NCCL_AUTO, 2, shared, why, sizeof why, &err),
			 DS_COMM_PATH_STAGED);
	assert_non_null(strstr(why, "built without NCCL"));
	free(own);
	free(shared);
	free(four);
	free(four_shared);
}

/* the staged path's pinned bytes per call: what each call copies, in
 * whole 64 KiB steps */
static void test_staged_bytes(void **state)
{
	size_t step = 64 << 10;
	assert_int_equal(ds_comm_staged_bytes(DS_COMM_ALLREDUCE, 1000, DS_F32, 1), 0);
	assert_int_equal(ds_comm_staged_bytes(DS_COMM_ALLREDUCE, 1000, DS_F32, 2), step);
	assert_int_equal(ds_comm_staged_bytes(DS_COMM_ALLREDUCE, step / 4, DS_F32, 2), 2 * step);
	/* reduce-scatter: 4 blocks in, 1 out */
	assert_int_equal(ds_comm_staged_bytes(DS_COMM_REDUCE_SCATTER, 10 * step / 2, DS_BF16, 4), 51 * step);
	/* allgather: the whole output */
	assert_int_equal(ds_comm_staged_bytes(DS_COMM_ALLGATHER, 3 * step / 8, DS_F64, 4), 13 * step);
	assert_int_equal(ds_comm_staged_bytes(DS_COMM_BROADCAST, 5, DS_U8, 8), step);
}

static void test_devkey(void **state)
{
	char k[DS_COMM_DEVKEY], host[100];
	ds_comm_devkey(k, "node7", 3, NULL);
	assert_string_equal(k, "node7/cuda:3");
	ds_comm_devkey(k, "node7", 3, "");
	assert_string_equal(k, "node7/cuda:3");
	ds_comm_devkey(k, "node7", 3, "0000:3b:00.0");
	assert_string_equal(k, "node7/0000:3b:00.0");
	/* long names are cut, never overflow the key */
	memset(host, 'h', sizeof host - 1);
	host[sizeof host - 1] = '\0';
	ds_comm_devkey(k, host, 0, "GPU-0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab");
	assert_true(strlen(k) < DS_COMM_DEVKEY);
}

static int made;
static int make_ok(void *id, size_t n, void *ctx, struct ds_err *err)
{
	made++;
	memset(id, 0x42, n);
	return 0;
}
static int make_fails(void *id, size_t n, void *ctx, struct ds_err *err)
{
	made++;
	return ds_err_set(err, DS_EIO, "ncclGetUniqueId failed (here): no network interface");
}

static void test_share_id(void **state)
{
	struct ds_comm *c;
	struct ds_err err = DS_ERR_INIT, local = DS_ERR_INIT;
	unsigned char id[128] = { 0 }, want[128];
	assert_int_equal(ds_comm_create(&c, "self", &err), 0);
	made = 0;
	assert_int_equal(ds_comm_share_id(c, 1, NULL, make_ok, NULL, id, sizeof id, &err), 0);
	memset(want, 0x42, sizeof want);
	assert_memory_equal(id, want, sizeof id);
	assert_int_equal(made, 1);
	/* rank 0's failure comes back with make's message */
	assert_int_equal(ds_comm_share_id(c, 1, NULL, make_fails, NULL, id, sizeof id, &err), DS_EIO);
	assert_non_null(strstr(err.msg, "no network interface"));
	/* a rank that failed locally does not make an id and says why */
	made = 0;
	ds_err_set(&local, DS_EIO, "cudaSetDevice failed (x.c:1): invalid device ordinal");
	assert_int_equal(ds_comm_share_id(c, 0, &local, make_ok, NULL, id, sizeof id, &err), DS_EIO);
	assert_int_equal(made, 0);
	assert_non_null(strstr(err.msg, "invalid device ordinal"));
	assert_int_equal(ds_comm_share_id(c, 1, NULL, make_ok, NULL, id, 4096, &err), DS_EINVAL);
	assert_int_equal(ds_comm_agree(c, 1, &err), 1);
	assert_int_equal(ds_comm_agree(c, 0, &err), 0);
	ds_comm_destroy(c);
}

static void test_set_devmem_refuses(void **state)
{
	struct ds_comm *c;
	struct ds_err err = DS_ERR_INIT;
	struct devsim sim = { 0 };
	struct ds_comm_devmem dm = devsim_devmem(&sim, 0, "devsim0");
	assert_int_equal(ds_comm_create(&c, "self", &err), 0);
	assert_string_equal(ds_comm_devpath_why(c), "");
	dm.is_dev = NULL;
	assert_int_equal(ds_comm_set_devmem(c, &dm, DS_COMM_NCCL_AUTO, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "is_dev"));
	dm.is_dev = devsim_is_dev;
	assert_int_equal(ds_comm_set_devmem(c, &dm, 7, &err), DS_EINVAL);
#ifndef HAVE_CUDA
	/* NCCL required of a build without it: exit 3's code, naming the flag */
	assert_int_equal(ds_comm_set_devmem(c, &dm, DS_COMM_NCCL_REQUIRE, &err), DS_ENOTSUP);
	assert_non_null(strstr(err.msg, "--with-cuda"));
	assert_int_equal(ds_comm_nccl_built(), 0);
#else
	assert_int_equal(ds_comm_nccl_built(), 1);
#endif
	assert_string_equal(ds_comm_backend(c), "self");
	assert_int_equal(ds_comm_set_devmem(c, &dm, DS_COMM_NCCL_AUTO, &err), 0);
	assert_int_equal(ds_comm_set_devmem(c, &dm, DS_COMM_NCCL_AUTO, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "twice"));
	ds_comm_destroy(c);
}

/* Every collective on simulated device buffers in a world of one: results
 * as on host buffers, nothing staged, the logger's device bytes. */
static void test_self_device_buffers(void **state)
{
	struct ds_comm *c;
	struct ds_err err = DS_ERR_INIT;
	struct devsim sim = { 0 };
	struct ds_comm_devmem dm = devsim_devmem(&sim, 0, "");
	struct ds_comm_req *r;
	float a[6] = { 1, 2, 3, 4, 5, 6 }, b[6], z[6] = { 0 };
	uint16_t h = 0x3c00;
	float *da = devsim_malloc(sizeof a), *db = devsim_malloc(sizeof a);
	int done = 0;

	assert_int_equal(ds_comm_create(&c, "self", &err), 0);
	assert_int_equal(ds_comm_set_devmem(c, &dm, DS_COMM_NCCL_AUTO, &err), 0);
	assert_string_equal(ds_comm_backend(c), "self");
	assert_non_null(strstr(ds_comm_devpath_why(c), "one rank"));
	ds_comm_set_logger(c, logger, NULL);
	nlogged = 0;
	devsim_put(da, a, sizeof a);
	assert_int_equal(ds_comm_allreduce(c, da, 6, DS_F32, DS_SUM, &err), 0);
	assert_int_equal(lastbytes, 24);
	assert_int_equal(ds_comm_reduce_scatter(c, da, db, 6, DS_F32, DS_SUM, &err), 0);
	devsim_get(b, db, sizeof b);
	assert_memory_equal(a, b, sizeof a);
	devsim_put(db, z, sizeof z);
	assert_int_equal(ds_comm_allgather(c, da, db, 6, DS_F32, &err), 0);
	devsim_get(b, db, sizeof b);
	assert_memory_equal(a, b, sizeof a);
	assert_int_equal(ds_comm_broadcast(c, da, 6, DS_F32, 0, &err), 0);
	assert_int_equal(ds_comm_broadcast(c, da, 6, DS_F32, 1, &err), DS_EINVAL);
	assert_int_equal(ds_comm_allreduce(c, da, 3, DS_BF16, DS_MAX, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "only sum"));
	devsim_put(db, z, sizeof z);
	assert_int_equal(ds_comm_iallgather(c, da, db, 6, DS_F32, &r, &err), 0);
	assert_int_equal(ds_comm_test(c, r, &done, &err), 0);
	assert_int_equal(done, 1);
	assert_int_equal(ds_comm_wait(c, r, &err), 0);
	devsim_get(b, db, sizeof b);
	assert_memory_equal(a, b, sizeof a);
	assert_int_equal(nlogged, 5);
	/* partly host, partly device memory */
	memset(b, 0, sizeof b);
	assert_int_equal(ds_comm_reduce_scatter(c, da, b, 6, DS_F32, DS_SUM, &err), 0);
	assert_memory_equal(a, b, sizeof a);
	devsim_put(db, z, sizeof z);
	assert_int_equal(ds_comm_allgather(c, a, db, 6, DS_F32, &err), 0);
	devsim_get(b, db, sizeof b);
	assert_memory_equal(a, b, sizeof a);
	/* host buffers still go to the host backend, untouched by the copies */
	long copies = sim.copies;
	assert_int_equal(ds_comm_allreduce(c, &h, 1, DS_F16, DS_SUM, &err), 0);
	assert_int_equal(ds_comm_allgather(c, a, b, 6, DS_F32, &err), 0);
	assert_int_equal(sim.copies, copies);
	/* nothing crosses in a world of one: no pinned memory */
	assert_int_equal(ds_comm_pinned_bytes(c), 0);
	assert_int_equal(sim.pinned_calls, 0);
	/* a device copy that fails is an error naming the collective */
	sim.fail_copies = 5;
	assert_int_equal(ds_comm_allgather(c, da, db, 6, DS_F32, &err), DS_EIO);
	assert_non_null(strstr(err.msg, "all_gather on device buffers: copying 24 bytes device to device failed"));
	ds_comm_destroy(c);
	assert_int_equal(sim.pinned_live, 0);
	devsim_free(da);
	devsim_free(db);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_self_collectives),
		cmocka_unit_test(test_self_groups),
		cmocka_unit_test(test_topology),
		cmocka_unit_test(test_backend_choice),
		cmocka_unit_test(test_devpath_choose),
		cmocka_unit_test(test_devkey),
		cmocka_unit_test(test_staged_bytes),
		cmocka_unit_test(test_share_id),
		cmocka_unit_test(test_set_devmem_refuses),
		cmocka_unit_test(test_self_device_buffers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
