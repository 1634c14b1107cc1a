/* test_onebit.c - the compressed allreduce of the 1-bit optimizers: its
 * element kernels (kernels/cpu/onebit.c) against numpy's packbits layout
 * and torch's sign rule, DeepSpeed's padded size, the worked 2-rank 2-step
 * example of onebit_example.h with the ranks simulated in one process
 * (each phase, the exchanges done by hand), and the comm operation itself
 * over the self backend: the same arithmetic at one rank, the four
 * collectives and their byte counts seen by the logger.  tests/mpi runs the
 * example between two real ranks. */
#include "unit.h"

#include <math.h>
#include <string.h>

#include "comm/comm.h"
#include "cpu/onebit.h"
#include "onebit_example.h"

static void test_padded(void **state)
{
	/* world * lcm(world, 8) */
	assert_int_equal(ds_onebit_padded(0, 2), 0);
	assert_int_equal(ds_onebit_padded(1, 1), 8);
	assert_int_equal(ds_onebit_padded(16, 2), 16);
	assert_int_equal(ds_onebit_padded(17, 2), 32);
	assert_int_equal(ds_onebit_padded(5, 3), 72);
	assert_int_equal(ds_onebit_padded(33, 4), 64);
	assert_int_equal(ds_onebit_padded(1, 6), 144);
	assert_int_equal(ds_onebit_padded(1000, 8), 1024);
}

static void test_pack_rule(void **state)
{
	/* numpy.packbits: element 0 in the high bit; torch's
	 * x.sign().add_(1).bool(): +0, -0 and NaN are + */
	const float x[16] = { 1, -1, 0, -0.0f, NAN, -2, 3, -4, -1, -1, -1, -1, -1, -1, -1, 5 };
	float err[16];
	uint8_t bits[2];
	ds_onebit_pack(x, 16, 2.0f, err, bits);
	assert_int_equal(bits[0], 0xBA);  /* 1011 1010 */
	assert_int_equal(bits[1], 0x01);
	const float want[16] = { -1, 1, -2, -2, NAN, 0, 1, -2, 1, 1, 1, 1, 1, 1, 1, 3 };
	for (int i = 0; i < 16; i++)
		if (i != 4)
			assert_true(err[i] == want[i]);
	assert_true(isnan(err[4]));
	float out[16];
	ds_onebit_unpack(bits, 16, 0.5f, out);
	for (int i = 0; i < 16; i++)
		assert_true(out[i] == (x[i] < 0 ? -0.5f : 0.5f));
	/* the scale: ||x|| / sqrt(n) */
	assert_true(ds_onebit_scale(64.0, 16) == 2.0f);
	assert_true(ds_onebit_scale(0.0, 0) == 0.0f);
	float y[4] = { 3, 0, 4, 0 }, e[4] = { 0, 1, 0, -1 };
	assert_true(ds_onebit_add_sumsq(y, e, 4) == 27.0);
	assert_true(y[1] == 1 && y[3] == -1);
}

/* The two ranks of the example played in one process: the phases as
 * lib/comm/compressed.c runs them, the all_to_all and all_gathers done by
 * copying. */
static void test_two_ranks_by_hand(void **state)
{
	const int W = 2;
	const size_t C = EX_N / 2;
	float werr[2][EX_N] = { { 0 } }, serr[2][EX_N / 2] = { { 0 } };
	for (int s = 0; s < 2; s++) {
		float buf[2][EX_N], wscale[2], sscale[2], tmp[EX_N / 2];
		uint8_t bits[2][EX_N / 8], recv[2][EX_N / 8], sbits[2][EX_N / 16], gathered[EX_N / 8];
		for (int r = 0; r < W; r++) {
			memcpy(buf[r], ex_in[s][r], sizeof buf[r]);
			wscale[r] = ds_onebit_compress(buf[r], werr[r], EX_N, bits[r]);
			assert_true(wscale[r] == ex_wscale[s][r]);
			assert_memory_equal(werr[r], ex_werr[s][r], sizeof werr[r]);
		}
		/* all_to_all: rank r receives chunk r of every worker, in rank order */
		for (int r = 0; r < W; r++)
			for (int q = 0; q < W; q++)
				memcpy(recv[r] + q * (C / 8), bits[q] + r * (C / 8), C / 8);
		for (int r = 0; r < W; r++) {
			sscale[r] = ds_onebit_server(recv[r], wscale, W, C, serr[r], tmp, sbits[r]);
			assert_true(sscale[r] == ex_sscale[s][r]);
			assert_memory_equal(serr[r], ex_serr[s][r], sizeof serr[r]);
		}
		for (int r = 0; r < W; r++)
			memcpy(gathered + r * (C / 8), sbits[r], C / 8);
		float out[EX_N];
		ds_onebit_decode(gathered, sscale, W, C, out);
		assert_memory_equal(out, ex_out[s], sizeof out);
	}
}

struct rec {
	int n;
	const char *op[8];
	size_t bytes[8];
};

static void logger(void *ctx, const struct ds_comm_record *r)
{
	struct rec *l = ctx;
	if (l->n < 8) {
		l->op[l->n] = r->op;
		l->bytes[l->n] = r->bytes;
	}
	l->n++;
}

/* One rank: the rank is the only worker and the server of everything.
 * Rank 0's step-1 input of the example: worker scale 2, the server sees
 * 2*sign (its scale 2, no error), and gives back 2*sign. */
static void test_self_backend(void **state)
{
	struct ds_comm *c;
	struct ds_comm_onebit *w;
	struct ds_err err = DS_ERR_INIT;
	struct rec l = { 0 };
	assert_int_equal(ds_comm_create(&c, "self", &err), 0);
	assert_int_equal(ds_comm_onebit_create(&w, &err), 0);
	ds_comm_set_logger(c, logger, &l);
	float buf[EX_N], werr[EX_N] = { 0 }, serr[EX_N] = { 0 };
	memcpy(buf, ex_in[0][0], sizeof buf);
	assert_int_equal(ds_comm_compressed_allreduce(c, w, buf, EX_N, werr, serr, &err), 0);
	for (int i = 0; i < EX_N; i++) {
		assert_true(buf[i] == (ex_in[0][0][i] < 0 ? -2.0f : 2.0f));
		assert_true(serr[i] == 0.0f);
	}
	assert_memory_equal(werr, ex_werr[0][0], sizeof werr);
	/* signs to the servers, the scale, the servers' signs, their scale */
	assert_int_equal(l.n, 4);
	assert_string_equal(l.op[0], "all_to_all_single");
	assert_int_equal(l.bytes[0], EX_N / 8);
	assert_string_equal(l.op[1], "all_gather");
	assert_int_equal(l.bytes[1], 4);
	assert_string_equal(l.op[2], "all_gather");
	assert_int_equal(l.bytes[2], EX_N / 8);
	assert_int_equal(l.bytes[3], 4);
	/* not a whole number of sign bytes per rank */
	assert_int_equal(ds_comm_compressed_allreduce(c, w, buf, 12, werr, serr, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "ds_onebit_padded"));
	/* the all_to_all primitive: one block to itself */
	uint8_t a[3] = { 1, 2, 3 }, b[3] = { 0 };
	assert_int_equal(ds_comm_alltoall(c, a, b, 3, DS_U8, &err), 0);
	assert_memory_equal(a, b, 3);
	ds_comm_onebit_destroy(w);
	ds_comm_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_padded),
		cmocka_unit_test(test_pack_rule),
		cmocka_unit_test(test_two_ranks_by_hand),
		cmocka_unit_test(test_self_backend),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
