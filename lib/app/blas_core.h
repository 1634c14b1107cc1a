/* blas_core.h - OpenBLAS's kernel set on a CPU it does not know.
 *
 * A DYNAMIC_ARCH OpenBLAS (Debian's) picks its kernels from cpuid's family
 * and model when it is loaded.  A model newer than the library (Debian 12's
 * 0.3.21 on Intel's family 6 model 207, as on some of our VMs) gets its
 * fallback, the SSE3 "Prescott" kernels: sgemm at about a sixth of what the
 * same core does with its AVX-512 kernels (measured 23 against 140 GFLOP/s
 * per core).  OpenBLAS reads OPENBLAS_CORETYPE only while it loads, so
 * dstk's tools then run themselves again, first thing in main(), with
 * OPENBLAS_CORETYPE naming the best kernel set that cpuid and the OS allow.
 * A user's OPENBLAS_CORETYPE is always kept; only the Prescott fallback is
 * replaced, never a core OpenBLAS chose on purpose.
 */
#ifndef DS_APP_BLAS_CORE_H
#define DS_APP_BLAS_CORE_H

#include <stddef.h>

/* Set (to the core OpenBLAS had chosen) in the environment of the run that
 * dstk started with OPENBLAS_CORETYPE; read by ds_blas_core_note. */
#define DS_BLAS_CORE_FROM_ENV "DS_BLAS_CORE_FROM"

/* Test hook: pretend the loaded OpenBLAS chose this core (e.g. "Prescott"),
 * so the re-run is exercised on CPUs OpenBLAS knows. */
#define DS_BLAS_CORE_TEST_ENV "DS_TEST_BLAS_LOADED"

/* The CPU features that decide a kernel set. */
struct ds_blas_cpu {
	int avx;         /* AVX and the OS's YMM state */
	int avx2_fma;    /* AVX2 and FMA */
	int avx512;      /* AVX512F, BW, DQ, VL (SkylakeX's set) and the OS's ZMM state */
	int avx512_bf16; /* AVX512_BF16 besides */
	int amd;         /* an AMD CPU (its AVX2 kernel set is "Zen", Intel's "Haswell") */
};

/* This CPU's features (cpuid through __builtin_cpu_supports, which also
 * checks the OS's register state). */
void ds_blas_cpu_get(struct ds_blas_cpu *c);

/* The OPENBLAS_CORETYPE name of the best kernel set for c: "Cooperlake",
 * "SkylakeX", "Zen", "Haswell", "Sandybridge", or NULL when only SSE is
 * there (Prescott is then right). */
const char *ds_blas_core_for(const struct ds_blas_cpu *c);

/* The core to run OpenBLAS with instead of the loaded one, or NULL to keep
 * it.  config: openblas_get_config(); loaded: openblas_get_corename(); env:
 * OPENBLAS_CORETYPE or NULL; best: ds_blas_core_for().  Not NULL only when
 * the build is DYNAMIC_ARCH, env is unset or empty, loaded is "Prescott"
 * and best is a better set.  Pure. */
const char *ds_blas_core_decide(const char *config, const char *loaded, const char *env, const char *best);

/* Run this process again (execv of /proc/self/exe with argv unchanged)
 * with OPENBLAS_CORETYPE set, when ds_blas_core_decide says so for the
 * loaded OpenBLAS and this CPU.  Call first in main(), before threads, MPI
 * or output.  Returns 0 when nothing needed doing; -1 with errno when the
 * exec failed (the environment is then as it was, and the run goes on with
 * the loaded kernels).  Never returns after a successful exec. */
int ds_blas_core_reexec(char **argv);

/* One sentence for a log line or ds-report's blas row about the kernels
 * this process runs, "" (returns 0) when there is nothing to say; returns
 * 1 for a note (dstk chose the core), 2 for a warning (OpenBLAS runs its
 * Prescott kernels where cpuid allows better ones). */
int ds_blas_core_note(char *buf, size_t n);

#endif
