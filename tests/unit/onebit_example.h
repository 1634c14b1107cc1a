/* onebit_example.h - a compressed allreduce (DeepSpeed's
 * compressed_allreduce) of 2 ranks over 2 steps, worked by hand; used by
 * tests/unit/test_onebit.c (the ranks simulated in one process) and
 * tests/mpi/onebit_check.c (2 real ranks).  16 elements, so each rank is
 * server of a chunk of 8 (16 is already DeepSpeed's padded size at 2
 * ranks).  Every value is a small integer, so float arithmetic is exact.
 *
 * Step 1, the errors all zero.  Rank 0 sends fifteen +-1 and one 7: sum of
 * squares 64, scale sqrt(64/16) = 2; its worker error is x - 2*sign(x):
 * -+1 for +-1, 5 for 7.  Rank 1 sends fifteen +-2 and one 14: scale 4,
 * errors -+2 and 10.  Server 0 (elements 0-7) adds sign0 * 2/2 + sign1 *
 * 4/2 = +-1 +-2: -1 1 -3 -1 -3 -3 1 -1, sum of squares 32, scale
 * sqrt(32/8) = 2, error c - 2*sign(c): 1 -1 -1 1 -1 -1 -1 1, result
 * 2*sign(c).  Server 1 (elements 8-15): -1 -1 -1 1 -3 -3 3 1, scale 2,
 * error 1 1 1 -1 -1 -1 1 -1.  Both ranks get the same 16 values.
 *
 * Step 2 feeds in inputs chosen so that input + step-1 worker error is
 * again fifteen +-1 and one -7 (rank 0: scale 2) and fifteen +-2 and one
 * 14 (rank 1: scale 4); the servers add their step-1 errors: server 0 gets
 * 4 2 -2 0 0 2 0 2, server 1 gets 2 0 4 0 0 -2 2 -2, each with sum of
 * squares 32 and scale 2; a 0 counts as + (so its error is -2).
 */
#ifndef DS_TEST_ONEBIT_EXAMPLE_H
#define DS_TEST_ONEBIT_EXAMPLE_H

#define EX_N 16

/* [step][rank] */
static const float ex_in[2][2][EX_N] = {
	{ { 1, -1, -1, 1, -1, -1, -1, 1, 1, 1, 7, -1, -1, -1, 1, -1 },
	  { -2, 2, -2, -2, -2, -2, 14, -2, -2, -2, -2, 2, -2, -2, 2, 2 } },
	{ { 2, 0, 0, 2, -2, 0, -2, 0, -6, 2, -4, -2, -2, 0, 0, 0 },
	  { 0, 4, -4, -4, 12, 0, -8, 0, 0, -4, 0, 4, 0, -4, 4, 0 } },
};
/* the result, the same on both ranks: [step] */
static const float ex_out[2][EX_N] = {
	{ -2, 2, -2, -2, -2, -2, 2, -2, -2, -2, -2, 2, -2, -2, 2, 2 },
	{ 2, 2, -2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, -2, 2, -2 },
};
/* worker errors after the step: [step][rank] */
static const float ex_werr[2][2][EX_N] = {
	{ { -1, 1, 1, -1, 1, 1, 1, -1, -1, -1, 5, 1, 1, 1, -1, 1 },
	  { 2, -2, 2, 2, 2, 2, 10, 2, 2, 2, 2, -2, 2, 2, -2, -2 } },
	{ { -1, -1, -1, -1, 1, -1, 1, 1, -5, -1, -1, 1, 1, -1, 1, -1 },
	  { -2, -2, 2, 2, 10, -2, -2, -2, -2, 2, -2, -2, -2, 2, -2, 2 } },
};
/* server errors after the step (rank r serves elements 8r .. 8r+7): [step][rank] */
static const float ex_serr[2][2][EX_N / 2] = {
	{ { 1, -1, -1, 1, -1, -1, -1, 1 }, { 1, 1, 1, -1, -1, -1, 1, -1 } },
	{ { 2, 0, 0, -2, -2, 0, -2, 0 }, { 0, -2, 2, -2, -2, 0, 0, 0 } },
};
/* the workers' and the servers' scales: [step][rank] */
static const float ex_wscale[2][2] = { { 2, 4 }, { 2, 4 } };
static const float ex_sscale[2][2] = { { 2, 2 }, { 2, 2 } };

#endif
