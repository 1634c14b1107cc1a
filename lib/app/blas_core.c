/* blas_core.c - OpenBLAS's Prescott fallback replaced by the kernel set the
 * CPU has (see blas_core.h).
 */
#include "config.h"
#include "app/blas_core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <cblas.h>

void ds_blas_cpu_get(struct ds_blas_cpu *c)
{
	memset(c, 0, sizeof *c);
#if defined(__x86_64__) || defined(__i386__)
	__builtin_cpu_init();
	c->avx = __builtin_cpu_supports("avx") != 0;
	c->avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
	c->avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
		    __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
	c->avx512_bf16 = c->avx512 && __builtin_cpu_supports("avx512bf16");
	c->amd = __builtin_cpu_is("amd") != 0;
#endif
}

const char *ds_blas_core_for(const struct ds_blas_cpu *c)
{
	if (c->avx512 && c->avx2_fma)
		return c->avx512_bf16 ? "Cooperlake" : "SkylakeX";
	if (c->avx2_fma)
		return c->amd ? "Zen" : "Haswell";
	if (c->avx)
		return "Sandybridge";
	return NULL;
}

const char *ds_blas_core_decide(const char *config, const char *loaded, const char *env, const char *best)
{
	if (env && env[0])
		return NULL;   /* the user's choice, always kept */
	if (!config || !strstr(config, "DYNAMIC_ARCH"))
		return NULL;   /* a build for one core ignores OPENBLAS_CORETYPE */
	if (!loaded || strcasecmp(loaded, "Prescott") != 0 || !best)
		return NULL;
	return best;
}

static const char *loaded_core(void)
{
	const char *t = getenv(DS_BLAS_CORE_TEST_ENV);

	return t && t[0] ? t : openblas_get_corename();
}

static const char *best_core(void)
{
	struct ds_blas_cpu c;

	ds_blas_cpu_get(&c);
	return ds_blas_core_for(&c);
}

int ds_blas_core_reexec(char **argv)
{
	const char *loaded = loaded_core();
	const char *want = ds_blas_core_decide(openblas_get_config(), loaded, getenv("OPENBLAS_CORETYPE"), best_core());
	int e;

	if (!want || !argv || !argv[0])
		return 0;
	if (setenv(DS_BLAS_CORE_FROM_ENV, loaded, 1) != 0 || setenv("OPENBLAS_CORETYPE", want, 1) != 0) {
		e = errno;
		unsetenv(DS_BLAS_CORE_FROM_ENV);
		errno = e;
		return -1;
	}
	fflush(NULL);
	execv("/proc/self/exe", argv);
	e = errno;   /* no /proc, or the binary is gone: run on as loaded */
	unsetenv("OPENBLAS_CORETYPE");
	unsetenv(DS_BLAS_CORE_FROM_ENV);
	errno = e;
	return -1;
}

int ds_blas_core_note(char *buf, size_t n)
{
	const char *loaded = openblas_get_corename();
	const char *from = getenv(DS_BLAS_CORE_FROM_ENV);
	const char *env = getenv("OPENBLAS_CORETYPE");
	const char *best = best_core();

	if (n)
		buf[0] = '\0';
	if (from && from[0] && env && env[0]) {
		if (strcasecmp(loaded, env) == 0) {
			snprintf(buf, n, "OpenBLAS chose its %s kernels (it does not know this CPU); dstk runs it with "
				 "OPENBLAS_CORETYPE=%s, the best set cpuid allows (set OPENBLAS_CORETYPE to choose)",
				 from, env);
			return 1;
		}
		snprintf(buf, n, "OpenBLAS chose its %s kernels (it does not know this CPU); dstk set "
			 "OPENBLAS_CORETYPE=%s but OpenBLAS loaded %s", from, env, loaded);
		return 2;
	}
	if (strcasecmp(loaded, "Prescott") == 0 && best && strstr(openblas_get_config(), "DYNAMIC_ARCH")) {
		if (env && env[0])
			snprintf(buf, n, "OpenBLAS runs its Prescott (SSE3) kernels because OPENBLAS_CORETYPE=%s, on a "
				 "CPU that runs its %s kernels (sgemm several times faster): unset OPENBLAS_CORETYPE",
				 env, best);
		else
			snprintf(buf, n, "OpenBLAS runs its Prescott (SSE3) kernels, on a CPU that runs its %s kernels "
				 "(sgemm several times faster): set OPENBLAS_CORETYPE=%s", best, best);
		return 2;
	}
	return 0;
}
