/* emu_selftest.h - cases of test_kernels_cuda_emu.c on the emulator
 * itself (cuda_emu_selftest.cpp): if it let these through, its passes on
 * the real kernels would mean little. */
#include "emu_selftest_api.h"

static void test_emu_warp(void **state)
{
	(void)state;
	float out[4];
	unsigned bal[2];
	ds_emu_set_order(DS_EMU_SHUFFLE);
	assert_int_equal(ds_emu_selftest_shfl(out, bal), 0);
	assert_true(out[0] == 496.0f && out[1] == 1520.0f);   /* 0+..+31, 32+..+63 */
	assert_int_equal(bal[0], 0xaaaaaaaau);
	assert_int_equal(bal[1], 0xaaaaaaaau);
	assert_true(out[2] == 1.0f && out[3] == 33.0f);        /* lane 0 reads lane 1 */
}

/* a missing barrier: thread order changes what is read */
static void test_emu_race(void **state)
{
	(void)state;
	float a[32], b[32];
	ds_emu_set_order(DS_EMU_FORWARD);
	assert_int_equal(ds_emu_selftest_race(a), 0);
	ds_emu_set_order(DS_EMU_REVERSE);
	assert_int_equal(ds_emu_selftest_race(b), 0);
	assert_true(memcmp(a, b, sizeof(a)) != 0);
}

static void test_emu_refuses(void **state)
{
	(void)state;
	int x[2048];
	long f0 = ds_emu_failures();
	ds_emu_set_order(DS_EMU_FORWARD);
	assert_int_equal(ds_emu_selftest_exit_sync(x), 719);   /* cudaErrorLaunchFailure */
	assert_int_equal(ds_emu_selftest_deadlock(x), 719);
	assert_int_equal(ds_emu_selftest_limits(x), 0);
	assert_int_equal(ds_emu_failures() - f0, 4);
}

#define DS_EMU_SELF_CASES                                                                                  \
	cmocka_unit_test(test_emu_warp), cmocka_unit_test(test_emu_race), cmocka_unit_test(test_emu_refuses)
