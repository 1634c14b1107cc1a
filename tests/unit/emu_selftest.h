/* emu_selftest.h - cases of test_kernels_cuda_emu.c on the emulator
 * itself (cuda_emu_selftest.cpp): if it let these through, its passes on
 * the real kernels would mean little. */
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/ds_cuda.h"
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

/* what a forked child that runs f(arg) ends with: its signal (0: it
 * exited) and the start of its stderr in err */
static int emu_child(void (*f)(void *), void *arg, char *err, size_t errsz)
{
	int fd[2];
	assert_int_equal(pipe(fd), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(fd[1], 2);
		close(fd[0]);
		f(arg);
		_exit(0);
	}
	close(fd[1]);
	size_t n = 0;
	ssize_t r;
	while (n + 1 < errsz && (r = read(fd[0], err + n, errsz - 1 - n)) > 0)
		n += (size_t)r;
	err[n] = 0;
	close(fd[0]);
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	return WIFSIGNALED(st) ? WTERMSIG(st) : 0;
}

static void emu_read_dev(void *p) { (void)*(volatile float *)p; }
static void emu_write_dev(void *p) { ((volatile float *)p)[5] = 1.0f; }
/* with the default action under the emulation's handler (an emulated call
 * puts it back on top), as in a program outside cmocka */
static void emu_read_none(void *p)
{
	signal(SIGSEGV, SIG_DFL);
	float x = 0;
	void *d = NULL;
	if (ds_cuda_malloc(&d, sizeof x) || ds_cuda_memcpy(d, &x, sizeof x, NULL))
		_exit(3);
	(void)*(volatile char *)p;
}

/* kernels in strict mode: handed host memory, the launch aborts naming
 * it; handed device memory, it runs */
static void emu_strict_host(void *p)
{
	(void)p;
	float out[4];
	unsigned bal[2];
	ds_emu_strict_args(1);
	ds_emu_selftest_shfl(out, bal);
}
static void emu_strict_dev(void *p)
{
	(void)p;
	float *out = NULL;
	unsigned *bal = NULL;
	ds_emu_strict_args(1);
	if (ds_cuda_malloc((void **)&out, 4 * sizeof(float)) || ds_cuda_host_alloc((void **)&bal, 2 * sizeof(unsigned)) ||
	    ds_emu_selftest_shfl(out, bal))
		_exit(3);
	_exit(bal[0] == 0xaaaaaaaau ? 0 : 4);   /* pinned: the host reads it */
}

static void test_emu_strict_args(void **state)
{
	(void)state;
	char err[512];
	assert_int_equal(emu_child(emu_strict_host, NULL, err, sizeof err), SIGABRT);
	assert_non_null(strstr(err, "launch of shfl_k: argument 1"));
	assert_non_null(strstr(err, "is neither device memory nor pinned host memory"));
	assert_int_equal(emu_child(emu_strict_dev, NULL, err, sizeof err), 0);
	assert_string_equal(err, "");
}

/* device memory: reachable by copies and kernels, not by host code (which
 * dies naming it), while other faults stay plain SIGSEGVs */
static void test_emu_device_memory(void **state)
{
	(void)state;
	float h[64], back[64], *d = NULL, *d2 = NULL;
	for (int i = 0; i < 64; i++)
		h[i] = (float)i + 0.5f;
	assert_int_equal(ds_cuda_malloc((void **)&d, sizeof h), 0);
	assert_int_equal(ds_cuda_malloc((void **)&d2, sizeof h), 0);
	assert_int_equal(ds_cuda_memcpy(d, h, sizeof h, NULL), 0);         /* host to device */
	assert_int_equal(ds_cuda_memcpy(d2, d, sizeof h, NULL), 0);        /* device to device */
	assert_int_equal(ds_cuda_memset(d, 0, sizeof h, NULL), 0);
	memset(back, 0xff, sizeof back);
	assert_int_equal(ds_cuda_memcpy(back, d2, sizeof back, NULL), 0);  /* device to host */
	assert_memory_equal(back, h, sizeof h);
	assert_int_equal(ds_cuda_memcpy(back, d, sizeof back, NULL), 0);
	assert_true(back[0] == 0.0f && back[63] == 0.0f);

	char err[512];
	assert_int_equal(emu_child(emu_read_dev, d, err, sizeof err), SIGABRT);
	assert_non_null(strstr(err, "host access of emulated device memory at"));
	assert_int_equal(emu_child(emu_write_dev, d2, err, sizeof err), SIGABRT);
	assert_non_null(strstr(err, "host access of emulated device memory at"));
	/* pinned host memory is host memory */
	float *pin = NULL;
	assert_int_equal(ds_cuda_host_alloc((void **)&pin, sizeof h), 0);
	assert_int_equal(emu_child(emu_read_dev, pin, err, sizeof err), 0);
	assert_int_equal(ds_cuda_host_free(pin), 0);
	/* a fault elsewhere is not blamed on device memory */
	void *none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(none != MAP_FAILED);
	assert_int_equal(emu_child(emu_read_none, none, err, sizeof err), SIGSEGV);
	assert_null(strstr(err, "device memory"));
	munmap(none, 4096);
	assert_int_equal(ds_cuda_free(d), 0);
	assert_int_equal(ds_cuda_free(d2), 0);
}

#define DS_EMU_SELF_CASES                                                                                  \
	cmocka_unit_test(test_emu_warp), cmocka_unit_test(test_emu_race), cmocka_unit_test(test_emu_refuses), \
		cmocka_unit_test(test_emu_device_memory), cmocka_unit_test(test_emu_strict_args)
