/* test_compute.c - the compute backend (lib/compute): --device's choice on
 * machines played by struct ds_compute_env, the local rank from the
 * launchers' variables and the device it gives, and the cpu table's
 * matrix products against hand-computed values. */
#include "config.h"
#include "unit.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"
#include "util/half.h"

/* a stand-in cuda backend: only its name is read by the choice */
static const struct ds_compute_ops fake_cuda = { .name = "cuda" };

static struct ds_compute_env env_of(int built, int backend, int ndev, const char *ompi, const char *slurm)
{
	struct ds_compute_env e;
	memset(&e, 0, sizeof e);
	e.cuda_built = built;
	e.cuda = backend ? &fake_cuda : NULL;
	e.device_count = ndev;
	if (!ndev)
		strcpy(e.why_none, "cudaGetDeviceCount: no CUDA device");
	e.ompi_local_rank = ompi;
	e.slurm_localid = slurm;
	return e;
}

static void test_device_names(void **st)
{
	(void)st;
	assert_int_equal(ds_device_parse("cpu"), DS_DEVICE_CPU);
	assert_int_equal(ds_device_parse("cuda"), DS_DEVICE_CUDA);
	assert_int_equal(ds_device_parse("auto"), DS_DEVICE_AUTO);
	assert_int_equal(ds_device_parse("gpu"), -1);
	assert_int_equal(ds_device_parse("CPU"), -1);
	assert_int_equal(ds_device_parse(""), -1);
	assert_int_equal(ds_device_parse(NULL), -1);
	assert_string_equal(ds_device_name(DS_DEVICE_CUDA), "cuda");
	assert_string_equal(ds_device_name(7), "?");
}

/* OMPI_COMM_WORLD_LOCAL_RANK wins over SLURM_LOCALID; neither: 0; the
 * first one set must be a whole number, and is not skipped when it is not */
static void test_local_rank(void **st)
{
	(void)st;
	struct ds_err err = DS_ERR_INIT;
	int r = -5;
	assert_int_equal(ds_compute_local_rank(NULL, NULL, &r, &err), 0);
	assert_int_equal(r, 0);
	assert_int_equal(ds_compute_local_rank("3", NULL, &r, &err), 0);
	assert_int_equal(r, 3);
	assert_int_equal(ds_compute_local_rank(NULL, "5", &r, &err), 0);
	assert_int_equal(r, 5);
	assert_int_equal(ds_compute_local_rank("2", "7", &r, &err), 0);   /* OpenMPI's first */
	assert_int_equal(r, 2);
	assert_int_equal(ds_compute_local_rank("0", "7", &r, &err), 0);
	assert_int_equal(r, 0);
	assert_int_equal(ds_compute_local_rank("65535", NULL, &r, &err), 0);
	assert_int_equal(r, 65535);
	const char *bad[] = { "", "x", "-1", "1a", " 1", "1 ", "+1", "65536", "99999999999999999999999", "0x1", "1.0" };
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		ds_err_clear(&err);
		r = -5;
		assert_int_equal(ds_compute_local_rank(bad[i], "4", &r, &err), DS_EINVAL);
		assert_non_null(strstr(err.msg, "OMPI_COMM_WORLD_LOCAL_RANK"));
		assert_int_equal(r, 0);
		ds_err_clear(&err);
		assert_int_equal(ds_compute_local_rank(NULL, bad[i], &r, &err), DS_EINVAL);
		assert_non_null(strstr(err.msg, "SLURM_LOCALID"));
	}
}

static void test_device_for(void **st)
{
	(void)st;
	assert_int_equal(ds_compute_device_for(0, 4), 0);
	assert_int_equal(ds_compute_device_for(3, 4), 3);
	assert_int_equal(ds_compute_device_for(5, 4), 1);   /* more ranks than GPUs: round-robin */
	assert_int_equal(ds_compute_device_for(7, 1), 0);
	assert_int_equal(ds_compute_device_for(8, 8), 0);
	assert_int_equal(ds_compute_device_for(0, 0), -1);
	assert_int_equal(ds_compute_device_for(1, -2), -1);
	assert_int_equal(ds_compute_device_for(-1, 2), -1);
}

static int sel(int kind, const struct ds_compute_env *e, const struct ds_compute_ops **ops, int *dev, char *why,
	       struct ds_err *err)
{
	ds_err_clear(err);
	*ops = &fake_cuda;
	*dev = 99;
	return ds_compute_select(kind, e, NULL, ops, dev, why, 256, err);
}

/* --device cpu: always cpu, whatever the machine; the variables are not read */
static void test_select_cpu(void **st)
{
	(void)st;
	struct ds_err err;
	const struct ds_compute_ops *ops;
	int dev;
	char why[256];
	struct ds_compute_env e = env_of(1, 1, 4, "garbage", NULL);
	assert_int_equal(sel(DS_DEVICE_CPU, &e, &ops, &dev, why, &err), 0);
	assert_ptr_equal(ops, &ds_compute_cpu);
	assert_int_equal(dev, -1);
	assert_string_equal(why, "device cpu");
}

/* --device cuda: each reason it cannot be had is its own status, and the
 * backend stays cpu */
static void test_select_cuda(void **st)
{
	(void)st;
	struct ds_err err;
	const struct ds_compute_ops *ops;
	int dev;
	char why[256];
	struct ds_compute_env e = env_of(0, 0, 0, NULL, NULL);
	assert_int_equal(sel(DS_DEVICE_CUDA, &e, &ops, &dev, why, &err), DS_ENOTSUP);   /* exit 3 */
	assert_non_null(strstr(err.msg, "--with-cuda"));
	assert_ptr_equal(ops, &ds_compute_cpu);
	assert_int_equal(dev, -1);

	e = env_of(1, 0, 2, NULL, NULL);   /* CUDA built, GPUs there, no backend (a build that has none) */
	assert_int_equal(sel(DS_DEVICE_CUDA, &e, &ops, &dev, why, &err), DS_ENOTSUP);
	assert_non_null(strstr(err.msg, "no usable cuda compute backend"));
	assert_ptr_equal(ops, &ds_compute_cpu);

	e = env_of(1, 1, 0, NULL, NULL);   /* no device answers: the machine, exit 1 */
	assert_int_equal(sel(DS_DEVICE_CUDA, &e, &ops, &dev, why, &err), DS_EIO);
	assert_non_null(strstr(err.msg, "no CUDA device answers (cudaGetDeviceCount: no CUDA device)"));
	assert_ptr_equal(ops, &ds_compute_cpu);
	assert_int_equal(dev, -1);

	e = env_of(1, 1, 4, "6", "1");     /* local rank 6 of OpenMPI on 4 GPUs */
	assert_int_equal(sel(DS_DEVICE_CUDA, &e, &ops, &dev, why, &err), 0);
	assert_ptr_equal(ops, &fake_cuda);
	assert_int_equal(dev, 2);
	assert_string_equal(why, "device cuda: GPU 2 of 4");

	e = env_of(1, 1, 4, NULL, "3");    /* Slurm alone */
	assert_int_equal(sel(DS_DEVICE_CUDA, &e, &ops, &dev, why, &err), 0);
	assert_int_equal(dev, 3);

	e = env_of(1, 1, 4, NULL, NULL);   /* no launcher: GPU 0 */
	assert_int_equal(sel(DS_DEVICE_CUDA, &e, &ops, &dev, why, &err), 0);
	assert_int_equal(dev, 0);

	e = env_of(1, 1, 4, "two", "1");   /* garbage: input error, exit 2 */
	assert_int_equal(sel(DS_DEVICE_CUDA, &e, &ops, &dev, why, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "OMPI_COMM_WORLD_LOCAL_RANK='two'"));
	assert_ptr_equal(ops, &ds_compute_cpu);
}

/* auto: cpu saying why; where cuda would be had, that it has not yet run
 * on a GPU and how to ask for it */
static void test_select_auto(void **st)
{
	(void)st;
	struct ds_err err;
	const struct ds_compute_ops *ops;
	int dev;
	char why[256];
	struct ds_compute_env e = env_of(0, 0, 0, NULL, NULL);
	assert_int_equal(sel(DS_DEVICE_AUTO, &e, &ops, &dev, why, &err), 0);
	assert_ptr_equal(ops, &ds_compute_cpu);
	assert_int_equal(dev, -1);
	assert_string_equal(why, "device auto: cpu (built without CUDA)");

	e = env_of(1, 0, 2, NULL, NULL);
	assert_int_equal(sel(DS_DEVICE_AUTO, &e, &ops, &dev, why, &err), 0);
	assert_ptr_equal(ops, &ds_compute_cpu);
	assert_string_equal(why, "device auto: cpu (no usable cuda compute backend yet)");

	/* no device answers (or, as the probe does for auto now, none asked) */
	e = env_of(1, 1, 0, NULL, NULL);
	assert_int_equal(sel(DS_DEVICE_AUTO, &e, &ops, &dev, why, &err), 0);
	assert_ptr_equal(ops, &ds_compute_cpu);
	assert_string_equal(why, "device auto: cpu (the cuda backend has not yet run on a GPU; ask for it with --device "
			    "cuda)");

	/* a device answers and the run is covered, where --device cuda gives
	 * GPU 1 of 2: auto keeps to cpu until the backend has run on a GPU */
	e = env_of(1, 1, 2, "3", NULL);
	assert_int_equal(sel(DS_DEVICE_CUDA, &e, &ops, &dev, why, &err), 0);
	assert_ptr_equal(ops, &fake_cuda);
	assert_int_equal(dev, 1);
	assert_int_equal(sel(DS_DEVICE_AUTO, &e, &ops, &dev, why, &err), 0);
	assert_ptr_equal(ops, &ds_compute_cpu);
	assert_int_equal(dev, -1);
	assert_string_equal(why, "device auto: cpu (the cuda backend has not yet run on a GPU; ask for it with --device "
			    "cuda)");

	/* auto never uses the local rank, so a garbage one is not an error
	 * there (it is for --device cuda, above) */
	e = env_of(1, 1, 2, NULL, "-3");
	assert_int_equal(sel(DS_DEVICE_AUTO, &e, &ops, &dev, why, &err), 0);
	assert_ptr_equal(ops, &ds_compute_cpu);
	assert_int_equal(dev, -1);
	/* ... nor without a device */
	e = env_of(0, 0, 0, "garbage", NULL);
	assert_int_equal(sel(DS_DEVICE_AUTO, &e, &ops, &dev, why, &err), 0);
	assert_ptr_equal(ops, &ds_compute_cpu);
}

/* a backend that does not cover what the run needs: cuda is refused
 * naming it, auto falls back to cpu saying it; cpu covers everything */
static const char *no_moe(const struct ds_compute_needs *n) { return n->moe ? "a Mixture-of-Experts model" : NULL; }
static const struct ds_compute_ops partial_cuda = { .name = "cuda", .uncovered = no_moe };

static void test_select_needs(void **st)
{
	(void)st;
	struct ds_err err = DS_ERR_INIT;
	const struct ds_compute_ops *ops;
	int dev;
	char why[256];
	struct ds_compute_env e = env_of(1, 1, 2, NULL, NULL);
	e.cuda = &partial_cuda;
	const struct ds_compute_needs dense = { 0, 0, 1, 1, 0, 0 }, moe = { 0, 1, 1, 1, 0, 0 };
	assert_int_equal(ds_compute_select(DS_DEVICE_CUDA, &e, &dense, &ops, &dev, why, sizeof why, &err), 0);
	assert_ptr_equal(ops, &partial_cuda);
	assert_int_equal(ds_compute_select(DS_DEVICE_CUDA, &e, &moe, &ops, &dev, why, sizeof why, &err), DS_ENOTSUP);
	assert_string_equal(err.msg, "a Mixture-of-Experts model is not on the cuda backend yet; use --device cpu");
	assert_ptr_equal(ops, &ds_compute_cpu);
	assert_int_equal(ds_compute_select(DS_DEVICE_AUTO, &e, &moe, &ops, &dev, why, sizeof why, &err), 0);
	assert_ptr_equal(ops, &ds_compute_cpu);
	assert_string_equal(why, "device auto: cpu (a Mixture-of-Experts model is not on the cuda backend yet; use "
			    "--device cpu)");
	/* needs are asked before devices: the reason is the run, not the machine */
	e.device_count = 0;
	assert_int_equal(ds_compute_select(DS_DEVICE_CUDA, &e, &moe, &ops, &dev, why, sizeof why, &err), DS_ENOTSUP);
	const struct ds_compute_needs all = { 2, 1, 2, 2, 1, 1 };
	assert_null(ds_compute_cpu.uncovered(&all));
}

/* the probe reads the launchers' variables and, on a CPU run, nothing else */
static void test_probe(void **st)
{
	(void)st;
	struct ds_compute_env e;
	setenv("OMPI_COMM_WORLD_LOCAL_RANK", "4", 1);
	unsetenv("SLURM_LOCALID");
	ds_compute_probe(&e, DS_DEVICE_CPU);
	assert_non_null(e.ompi_local_rank);
	assert_string_equal(e.ompi_local_rank, "4");
	assert_null(e.slurm_localid);
	assert_int_equal(e.device_count, 0);
#ifdef HAVE_CUDA
	assert_int_equal(e.cuda_built, 1);
	assert_ptr_equal(e.cuda, &ds_compute_cuda);   /* selectable with --device cuda */
	assert_ptr_equal(ds_compute_all[1], &ds_compute_cuda);
	/* auto does not choose cuda yet, so it asks no device either */
	ds_compute_probe(&e, DS_DEVICE_AUTO);
	assert_int_equal(e.device_count, 0);
	assert_string_equal(e.why_none, "not asked");
#else
	assert_null(e.cuda);
	assert_null(ds_compute_all[1]);
	assert_int_equal(e.cuda_built, 0);
	assert_string_equal(e.why_none, "built without CUDA");
#endif
	unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
	/* the registry lists cpu first and every backend by a distinct name */
	assert_ptr_equal(ds_compute_all[0], &ds_compute_cpu);
	for (int i = 0; ds_compute_all[i]; i++)
		for (int j = 0; j < i; j++)
			assert_string_not_equal(ds_compute_all[i]->name, ds_compute_all[j]->name);
}

/* every entry of the cpu table is filled (the members after the name are
 * all function pointers) */
static void test_cpu_table_complete(void **st)
{
	(void)st;
	typedef void (*fn)(void);
	const size_t off = offsetof(struct ds_compute_ops, init);
	const size_t n = (sizeof(struct ds_compute_ops) - off) / sizeof(fn);
	assert_true(n >= 40);
	/* comm_devmem is a device backend's only: host memory needs no
	 * registering with the communicator */
	const size_t devmem = offsetof(struct ds_compute_ops, comm_devmem);
	assert_null(ds_compute_cpu.comm_devmem);
	for (size_t i = 0; i < n; i++) {
		fn f;
		if (off + i * sizeof f == devmem)
			continue;
		memcpy(&f, (const char *)&ds_compute_cpu + off + i * sizeof f, sizeof f);
		if (!f)
			fail_msg("ds_compute_cpu: entry %zu after init is NULL", i);
	}
	assert_string_equal(ds_compute_cpu.name, "cpu");
	struct ds_err err = DS_ERR_INIT;
	assert_int_equal(ds_compute_cpu.init(0, &err), 0);
}

/* gemm's contract on hand-computed products: row-major, both
 * transpositions, alpha/beta, leading dimensions, and a strided batch */
static void test_cpu_gemm(void **st)
{
	(void)st;
	const struct ds_compute_ops *o = &ds_compute_cpu;
	/* A (2,3) = [1 2 3; 4 5 6], B (3,2) = [1 0; 0 1; 1 1] -> A B = [4 5; 10 11] */
	const float A[6] = { 1, 2, 3, 4, 5, 6 }, B[6] = { 1, 0, 0, 1, 1, 1 };
	float C[4] = { 100, 100, 100, 100 };
	o->gemm(-1, NULL, 0, 0, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, C, 2);   /* beta 0 overwrites */
	const float ab[4] = { 4, 5, 10, 11 };
	assert_memory_equal(C, ab, sizeof ab);
	/* C = 2 A B + C */
	o->gemm(-1, NULL, 0, 0, 2, 2, 3, 2.0f, A, 3, B, 2, 1.0f, C, 2);
	const float ab3[4] = { 12, 15, 30, 33 };
	assert_memory_equal(C, ab3, sizeof ab3);
	/* op(A) = A^T (3,2), A stored (K,M) = (2,3); op(B) = I^T, B stored
	 * (N,K): the product is A^T = [1 4; 2 5; 3 6] */
	const float I2[4] = { 1, 0, 0, 1 };
	float D[6];
	o->gemm(-1, NULL, 1, 1, 3, 2, 2, 1.0f, A, 3, I2, 2, 0.0f, D, 2);
	const float at[6] = { 1, 4, 2, 5, 3, 6 };
	assert_memory_equal(D, at, sizeof at);
	/* ldc wider than N: the gap untouched */
	float E[6] = { -1, -1, -1, -1, -1, -1 };
	o->gemm(-1, NULL, 0, 0, 2, 2, 3, 1.0f, A, 3, B, 2, 0.0f, E, 3);
	const float e3[6] = { 4, 5, -1, 10, 11, -1 };
	assert_memory_equal(E, e3, sizeof e3);
	/* a batch of 2 x 2 products (outer 2, inner 2) of 1x1x1 at strides */
	const float a4[4] = { 1, 2, 3, 4 }, b4[4] = { 10, 20, 30, 40 };
	float c4[4] = { 0 };
	const struct ds_gemm_bf16_batch bt = { 4, 2, { 2, 1 }, { 2, 1 }, { 2, 1 }, DS_GEMM_BF16_DENSE, 0, NULL, NULL };
	o->gemm(-1, &bt, 0, 0, 1, 1, 1, 1.0f, a4, 1, b4, 1, 0.0f, c4, 1);
	const float p4[4] = { 10, 40, 90, 160 };
	assert_memory_equal(c4, p4, sizeof p4);
	/* the head's chunked product: two row chunks give the whole product */
	float F[4];
	o->gemm_keep_b(-1, 0, 1, 0, 0, 1, 2, 3, 1.0f, A, 3, B, 2, NULL, NULL, 0.0f, F, 2);
	o->gemm_keep_b(-1, 1, 1, 0, 0, 1, 2, 3, 1.0f, A + 3, 3, B, 2, NULL, NULL, 0.0f, F + 2, 2);
	assert_memory_equal(F, ab, sizeof ab);
	/* fp32 runs never keep bf16 logits */
	assert_int_equal(o->head16(-1, 64, 256, 64), 0);
}

/* fp32's batch of per-head products, shared out over the threads an entry
 * each (compute_cpu.c): every entry at its strides equals a double
 * product (alpha, beta 1, both transposes), and the bits equal the
 * 1-thread run, which takes the serial loop */
static void test_cpu_gemm_batch_threads(void **st)
{
	(void)st;
	const struct ds_compute_ops *o = &ds_compute_cpu;
	enum { OUT = 4, IN = 6, NE = OUT * IN, M = 19, N = 23, K = 31 };
	/* A entries (M,K) at lda 2K, B entries stored (N,K) at ldb K, C (M,N) at ldc N+3 */
	const int lda = 2 * K, ldb = K, ldc = N + 3;
	const struct ds_gemm_bf16_batch bt = { NE, IN, { (long)IN * M * lda, K }, { (long)IN * N * ldb, (long)N * ldb },
					       { (long)IN * M * ldc, (long)M * ldc }, DS_GEMM_BF16_DENSE, 0, NULL, NULL };
	const size_t na = (size_t)NE * M * lda, nb = (size_t)NE * N * ldb, nc = (size_t)NE * M * ldc;
	float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * nb);
	float *c2 = malloc(sizeof(float) * nc), *c1 = malloc(sizeof(float) * nc);
	assert_true(A && B && c2 && c1);
	uint32_t x = 777;
	for (size_t i = 0; i < na; i++)
		A[i] = (float)((x = x * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f;
	for (size_t i = 0; i < nb; i++)
		B[i] = (float)((x = x * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f;
	for (size_t i = 0; i < nc; i++)
		c2[i] = c1[i] = (float)(i % 5) * 0.25f;
	const int nt = omp_get_max_threads();
	omp_set_num_threads(2);
	o->gemm(-1, &bt, 0, 1, M, N, K, 0.5f, A, lda, B, ldb, 1.0f, c2, ldc);
	omp_set_num_threads(1);
	o->gemm(-1, &bt, 0, 1, M, N, K, 0.5f, A, lda, B, ldb, 1.0f, c1, ldc);
	omp_set_num_threads(nt);
	assert_memory_equal(c2, c1, sizeof(float) * nc);
	double worst = 0;
	for (int e = 0; e < NE; e++) {
		const long q = e / IN, r = e % IN;
		const float *a = A + q * bt.sa[0] + r * bt.sa[1], *b = B + q * bt.sb[0] + r * bt.sb[1];
		const long oc = q * bt.sc[0] + r * bt.sc[1];
		for (int i = 0; i < M; i++)
			for (int j = 0; j < ldc; j++) {
				const size_t at = (size_t)(oc + (long)i * ldc + j);
				double want = (double)(at % 5) * 0.25;   /* beta 1 */
				if (j < N)
					for (int k = 0; k < K; k++)
						want += 0.5 * (double)a[(long)i * lda + k] * (double)b[(long)j * ldb + k];
				const double d = fabs((double)c2[at] - want);
				worst = d > worst ? d : worst;
			}
	}
	if (worst > 1e-5)
		fail_msg("batched fp32 products differ from the double ones by %g", worst);
	free(A);
	free(B);
	free(c2);
	free(c1);
}

/* DS_GEMM_BF16_CR in a product's flags: C left rounded to bf16 values, bit
 * for bit the product without the flag and then half_round, whichever
 * implementation the mode takes (dstk's kernel rounds as it stores, the
 * others after), the gap beyond N untouched; single and batched */
static void test_cpu_gemm_cr(void **st)
{
	(void)st;
	const struct ds_compute_ops *o = &ds_compute_cpu;
	enum { M = 33, N = 40, K = 24, LDC = 43, NB = 3 };
	float *A = malloc(sizeof(float) * NB * M * K), *B = malloc(sizeof(float) * NB * N * K);
	float *c0 = malloc(sizeof(float) * NB * M * LDC), *c1 = malloc(sizeof(float) * NB * M * LDC);
	assert_true(A && B && c0 && c1);
	uint32_t x = 12345;
	for (int i = 0; i < NB * M * K; i++)
		A[i] = (float)((x = x * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f;
	for (int i = 0; i < NB * N * K; i++)
		B[i] = (float)((x = x * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f;
	const int modes[] = { -1, DS_BF16_MM_AUTO, DS_BF16_MM_ONEDNN, DS_BF16_MM_KERNEL, DS_BF16_MM_FP32,
			      DS_BF16_MM_PORTABLE };
	for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
		char why[256];
		if (modes[mi] >= 0 && o->mm_check(modes[mi], why, sizeof why) < 0)
			continue;   /* not on this machine or build */
		for (int nb = 1; nb <= NB; nb += NB - 1) {
			const struct ds_gemm_bf16_batch plain = { nb, 1, { (long)M * K, 0 }, { (long)N * K, 0 },
								  { (long)M * LDC, 0 }, DS_GEMM_BF16_DENSE, 0, NULL, NULL };
			struct ds_gemm_bf16_batch cr = plain;
			cr.flags = DS_GEMM_BF16_CR;
			for (int i = 0; i < NB * M * LDC; i++)
				c0[i] = c1[i] = (float)(i % 7) * 0.37f;   /* beta 1 reads them */
			o->gemm(modes[mi], &plain, 0, 1, M, N, K, 0.75f, A, K, B, K, 1.0f, c0, LDC);
			for (int e = 0; e < nb; e++)
				for (int i = 0; i < M; i++)
					o->half_round(2 /* bf16 */, c0 + (long)e * M * LDC + (long)i * LDC, N);
			o->gemm(modes[mi], &cr, 0, 1, M, N, K, 0.75f, A, K, B, K, 1.0f, c1, LDC);
			if (memcmp(c0, c1, sizeof(float) * NB * M * LDC))
				fail_msg("mode %d, %d entries: CR differs from the product and a rounding pass",
					 modes[mi], nb);
			for (int i = 0; i < M; i++)   /* rounded: no low 16 bits; the gap as it was */
				for (int j = 0; j < LDC; j++) {
					uint32_t u;
					memcpy(&u, &c1[(long)i * LDC + j], 4);
					if (j < N)
						assert_int_equal(u & 0xffffu, 0);
					else
						assert_true(c1[(long)i * LDC + j] == (float)((i * LDC + j) % 7) * 0.37f);
				}
		}
	}
	free(A);
	free(B);
	free(c0);
	free(c1);
}

/* A product given bf16 copies of A and B reads only the copies (the model
 * leaves activations that only products read in bf16: gemm_bf16.h), in
 * every mode, sgemm's included (-1, fp32, and whatever auto gives these
 * small shapes): the fp32 operands NaN, C bit for bit the same mode's
 * product of the copies' values in fp32 without copies; single products
 * and strided batches, NN and TN. */
static void test_cpu_gemm_copies_only(void **st)
{
	(void)st;
	const struct ds_compute_ops *o = &ds_compute_cpu;
	enum { M = 21, N = 34, K = 27, NB = 3, LD = 40 };
	const size_t na = (size_t)NB * K * LD + LD, nc = (size_t)NB * M * LD;
	float *A = malloc(sizeof(float) * na), *B = malloc(sizeof(float) * na), *Af = malloc(sizeof(float) * na);
	float *Bf = malloc(sizeof(float) * na), *c0 = malloc(sizeof(float) * nc), *c1 = malloc(sizeof(float) * nc);
	uint16_t *a16 = malloc(sizeof(uint16_t) * na), *b16 = malloc(sizeof(uint16_t) * na);
	assert_true(A && B && Af && Bf && c0 && c1 && a16 && b16);
	uint32_t x = 4242;
	for (size_t i = 0; i < na; i++) {
		a16[i] = ds_fp32_to_bf16((float)((x = x * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f);
		b16[i] = ds_fp32_to_bf16((float)((x = x * 1103515245u + 12345u) >> 8) / (float)(1u << 24) - 0.5f);
		Af[i] = ds_bf16_to_fp32(a16[i]);
		Bf[i] = ds_bf16_to_fp32(b16[i]);
		A[i] = B[i] = NAN;
	}
	const int modes[] = { -1, DS_BF16_MM_AUTO, DS_BF16_MM_ONEDNN, DS_BF16_MM_KERNEL, DS_BF16_MM_FP32,
			      DS_BF16_MM_PORTABLE };
	int ran = 0;
	for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++) {
		char why[256];
		if (modes[mi] >= 0 && o->mm_check(modes[mi], why, sizeof why) < 0)
			continue;
		for (int nb = 1; nb <= NB; nb += NB - 1)
			for (int ta = 0; ta < 2; ta++) {
				/* entries at strides (K rows of LD): A (M,K) or stored (K,M), B (K,N) */
				struct ds_gemm_bf16_batch plain = { nb, 1, { (long)K * LD, 0 }, { (long)K * LD, 0 },
								    { (long)M * LD, 0 }, DS_GEMM_BF16_DENSE, 0, NULL, NULL };
				struct ds_gemm_bf16_batch cp = plain;
				cp.a16 = a16;
				cp.b16 = b16;
				for (size_t i = 0; i < nc; i++)
					c0[i] = c1[i] = (float)(i % 3) * 0.5f;
				o->gemm(modes[mi], &plain, ta, 0, M, N, K, 0.75f, Af, LD, Bf, LD, 1.0f, c0, LD);
				o->gemm(modes[mi], &cp, ta, 0, M, N, K, 0.75f, A, LD, B, LD, 1.0f, c1, LD);
				struct ds_err err = DS_ERR_INIT;
				assert_int_equal(o->check(&err), 0);
				for (size_t i = 0; i < nc; i++)
					if (memcmp(&c0[i], &c1[i], sizeof(float)) || isnan(c1[i]))
						fail_msg("mode %d, %d entries, %s: C[%zu] = %g from the copies, %g from fp32",
							 modes[mi], nb, ta ? "TN" : "NN", i, c1[i], c0[i]);
				ran++;
			}
	}
	assert_true(ran >= 8);   /* -1 and fp32 (sgemm) and portable always run */
	free(A), free(B), free(Af), free(Bf), free(c0), free(c1), free(a16), free(b16);
}

/* buffers and 16-bit storage of the cpu backend */
static void test_cpu_buffers(void **st)
{
	(void)st;
	const struct ds_compute_ops *o = &ds_compute_cpu;
	float *d = o->alloc(4 * sizeof(float));
	assert_non_null(d);
	const float h[4] = { 1.0f, 1.00390625f, -3.0f, 65520.0f };
	o->from_host(d, h, sizeof h);
	float back[4];
	o->to_host(back, d, sizeof back);
	assert_memory_equal(back, h, sizeof h);
	o->half_round(2 /* bf16 */, d, 4);   /* 1 + 2^-8 is a tie: to even, 1 */
	o->to_host(back, d, sizeof back);
	assert_true(back[0] == 1.0f && back[1] == 1.0f && back[2] == -3.0f);
	uint16_t p[4];
	o->half_pack(1 /* fp16 */, p, h, 4);
	assert_int_equal(p[0], 0x3c00);
	assert_int_equal(p[3], 0x7c00);   /* 65520 rounds to inf in fp16 */
	o->zero(d, 2 * sizeof(float));
	o->to_host(back, d, sizeof back);
	assert_true(back[0] == 0.0f && back[1] == 0.0f && back[2] == -3.0f);
	o->free(d);
}

/* The bulk entries on buffers large enough to be shared out over the
 * threads (3 threads, an odd length so the last run is not whole lines):
 * every element as the single-threaded ds_half_* functions and memcpy /
 * memset give it, and nothing written past the end. */
static void test_cpu_bulk_threads(void **st)
{
	(void)st;
	const struct ds_compute_ops *o = &ds_compute_cpu;
	const size_t n = 3 * 65536 + 37;
	float *x = malloc((n + 1) * sizeof(float)), *y = malloc((n + 1) * sizeof(float)), *w = malloc(n * sizeof(float));
	uint16_t *p = malloc((n + 1) * 2), *q = malloc(n * 2);
	assert_non_null(x); assert_non_null(y); assert_non_null(w); assert_non_null(p); assert_non_null(q);
	for (size_t i = 0; i < n; i++)
		x[i] = (float)((double)(i * 2654435761u % 1000003u) / 7919.0 - 60.0);
	const int nt = omp_get_max_threads();
	omp_set_num_threads(3);
	for (int kind = 1; kind <= 2; kind++) {
		p[n] = 0xabcd;
		o->half_pack(kind, p, x, n);
		ds_half_pack_n((enum ds_half_kind)kind, q, x, n);
		assert_memory_equal(p, q, n * 2);
		assert_int_equal(p[n], 0xabcd);
		y[n] = 7.0f;
		o->half_unpack(kind, y, p, n);
		ds_half_unpack_n((enum ds_half_kind)kind, w, q, n);
		assert_memory_equal(y, w, n * sizeof(float));
		memcpy(y, x, n * sizeof(float));
		memcpy(w, x, n * sizeof(float));
		o->half_round(kind, y, n);
		ds_half_round_n((enum ds_half_kind)kind, w, n);
		assert_memory_equal(y, w, n * sizeof(float));
		assert_true(y[n] == 7.0f);
	}
	/* round_pack: the rounding's values and the pack's bits in one pass,
	 * into another buffer and in place */
	memcpy(w, x, n * sizeof(float));
	ds_half_round_n(DS_HALF_BF16, w, n);
	ds_half_pack_n(DS_HALF_BF16, q, x, n);
	p[n] = 0xabcd;
	o->half_round_pack(y, p, x, n);
	assert_memory_equal(y, w, n * sizeof(float));
	assert_memory_equal(p, q, n * 2);
	assert_int_equal(p[n], 0xabcd);
	assert_true(y[n] == 7.0f);
	memcpy(y, x, n * sizeof(float));
	memset(p, 0, n * 2);
	o->half_round_pack(y, p, y, n);
	assert_memory_equal(y, w, n * sizeof(float));
	assert_memory_equal(p, q, n * 2);
	o->copy(y, x, n * sizeof(float));
	assert_memory_equal(y, x, n * sizeof(float));
	o->zero(y, n * sizeof(float));
	for (size_t i = 0; i < n; i++)
		assert_true(y[i] == 0.0f);
	assert_true(y[n] == 7.0f);
	omp_set_num_threads(nt);
	free(x), free(y), free(w), free(p), free(q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_device_names),
		cmocka_unit_test(test_local_rank),
		cmocka_unit_test(test_device_for),
		cmocka_unit_test(test_select_cpu),
		cmocka_unit_test(test_select_cuda),
		cmocka_unit_test(test_select_auto),
		cmocka_unit_test(test_select_needs),
		cmocka_unit_test(test_probe),
		cmocka_unit_test(test_cpu_table_complete),
		cmocka_unit_test(test_cpu_gemm),
		cmocka_unit_test(test_cpu_gemm_batch_threads),
		cmocka_unit_test(test_cpu_gemm_cr),
		cmocka_unit_test(test_cpu_gemm_copies_only),
		cmocka_unit_test(test_cpu_buffers),
		cmocka_unit_test(test_cpu_bulk_threads),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
