/* emu_selftest_api.h - cuda_emu_selftest.cpp's kernels, for the emulated
 * kernel test: each returns the cudaError_t its launch left (0: success). */
#ifndef DS_TESTS_EMU_SELFTEST_API_H
#define DS_TESTS_EMU_SELFTEST_API_H
int ds_emu_selftest_shfl(float out[4], unsigned bal[2]);
int ds_emu_selftest_race(float out[32]);
int ds_emu_selftest_exit_sync(int *x);
int ds_emu_selftest_deadlock(int *x);
int ds_emu_selftest_limits(int *x);
#endif
