/* test_kernels_cuda.c - the CUDA element-wise kernels (kernels/cuda) against
 * the CPU kernels on the same inputs: activations and the padded-vocabulary
 * cross-entropy.  Built only with CUDA; skips when no device answers.
 */
#include "unit.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/gpt_kernels.h"
#include "cuda/gpt_cuda.h"

static void *dev_copy(const void *h, size_t n)
{
	void *d = NULL;
	assert_int_equal(cudaMalloc(&d, n), cudaSuccess);
	assert_int_equal(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice), cudaSuccess);
	return d;
}

static void host_copy(void *h, const void *d, size_t n)
{
	assert_int_equal(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost), cudaSuccess);
}

static void test_act(void **state)
{
	(void)state;
	enum { N = 7, F = 33 };
	float in[N * 2 * F], g[N * F], o1[N * F], o2[N * F], d1[N * 2 * F], d2[N * 2 * F];
	for (int i = 0; i < N * 2 * F; i++)
		in[i] = 3.0f * sinf(0.37f * i);
	for (int i = 0; i < N * F; i++)
		g[i] = cosf(0.11f * i);
	for (int act = 0; act < 3; act++) {
		size_t w = act ? 2 * F : F;
		float *din = dev_copy(in, sizeof(in)), *dg = dev_copy(g, sizeof(g)), *dout, *dd;
		assert_int_equal(cudaMalloc((void **)&dout, sizeof(o2)), cudaSuccess);
		assert_int_equal(cudaMalloc((void **)&dd, sizeof(d2)), cudaSuccess);
		assert_int_equal(ds_kernel_cuda_act_forward(dout, din, N, F, act, NULL), 0);
		assert_int_equal(ds_kernel_cuda_act_backward(dd, dg, din, N, F, act, NULL), 0);
		host_copy(o2, dout, sizeof(o2));
		host_copy(d2, dd, N * w * sizeof(float));
		ds_kernel_act_forward(o1, in, N, F, act);
		ds_kernel_act_backward(d1, g, in, N, F, act);
		assert_true(ds_test_close(o2, o1, N * F, 1e-6, NULL));
		assert_true(ds_test_close(d2, d1, (long)(N * w), 1e-6, NULL));
		cudaFree(din);
		cudaFree(dg);
		cudaFree(dout);
		cudaFree(dd);
	}
}

static void test_xent(void **state)
{
	(void)state;
	enum { N = 5, V = 300, Vp = 384 };
	static float l[N * Vp], l2[N * Vp];
	float lse1[N], lse2[N], rows[N];
	int32_t t[N] = { 0, 299, 17, 150, 3 };
	for (int i = 0; i < N * Vp; i++)
		l[i] = (i % Vp) < V ? 4.0f * sinf(0.013f * i) : -INFINITY;
	float *dl = dev_copy(l, sizeof(l)), *dlse, *drows;
	int32_t *dt = dev_copy(t, sizeof(t));
	assert_int_equal(cudaMalloc((void **)&dlse, sizeof(lse2)), cudaSuccess);
	assert_int_equal(cudaMalloc((void **)&drows, sizeof(rows)), cudaSuccess);
	assert_int_equal(ds_kernel_cuda_xent_forward(dlse, drows, dl, dt, N, V, Vp, NULL), 0);
	assert_int_equal(ds_kernel_cuda_xent_backward(dl, dlse, dt, N, V, Vp, 0.5f, NULL), 0);
	host_copy(lse2, dlse, sizeof(lse2));
	host_copy(l2, dl, sizeof(l2));
	ds_kernel_xent_forward(lse1, l, t, N, V, Vp);
	ds_kernel_xent_backward(l, lse1, t, N, V, Vp, 0.5f);
	assert_true(ds_test_close(lse2, lse1, N, 1e-6, NULL));
	assert_true(ds_test_close(l2, l, N * Vp, 1e-5, NULL));
	cudaFree(dl);
	cudaFree(dt);
	cudaFree(dlse);
	cudaFree(drows);
}

int main(void)
{
	void *p = NULL;
	if (cudaMalloc(&p, 16) != cudaSuccess) {
		printf("1..0 # SKIP no CUDA device (%s)\n", cudaGetErrorString(cudaGetLastError()));
		return 0;
	}
	cudaFree(p);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_act),
		cmocka_unit_test(test_xent),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
