/* test_comm.c - the communicator in a world of one: the self backend's
 * collectives leave data as a one-rank world must, requests complete, the
 * logger sees every operation, and asking for MPI in a build without it
 * fails with DS_ENOTSUP naming --with-mpi. Multi-rank behaviour is tested
 * under mpirun by tests/mpi/comm.bats. */
#include "config.h"
#include "unit.h"

#include <string.h>

#include "comm/comm.h"

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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_self_collectives),
		cmocka_unit_test(test_backend_choice),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
