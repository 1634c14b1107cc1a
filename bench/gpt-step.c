/* gpt-step.c - benchmark of one GPT forward+backward step on CPU next to the
 * sgemm ceiling measured in the same run (DESIGN.md "Benchmarks").
 *
 * Usage: bench/gpt-step [gpt2|tiny|L C NH V B T] [steps] [ckpt] [dtype[,dtype...]]
 *   gpt2: 12 layers, 768, 12 heads, vocab 50304, B=4, T=64 (default)
 *   tiny: 6 layers, 384, 6 heads, vocab 256, B=8, T=128
 *   dtype: fp32 (default), fp16, bf16 (matrix products as ds-train's
 *   dstk.bf16_matmul "auto"), bf16-onednn, bf16-kernel (dstk.bf16_matmul
 *   "onednn", "avx512_bf16"), bf16-sgemm (bf16 activations, fp32 sgemm:
 *   dstk.bf16_matmul "fp32"); 16-bit runs use parameters rounded to that
 *   format, as the engine's 16-bit copy, and bf16 runs get that copy in
 *   bf16 through the params16 hook, as ds-train's engine gives it.
 *   Several dtypes, comma-separated, run in the same process, step by step in turn (so a shared machine's
 *   load falls on each alike), and each one's step time is also given as
 *   a ratio to the first's (ratio_step_<dtype>: mean, best and median of
 *   the per-step ratios; ratio_cpu_<dtype>: of the process's CPU time over
 *   the counted steps, which with OMP_NUM_THREADS=1 a heavily shared
 *   machine's load barely moves, where wall times of single steps do).
 * Prints ms/step for forward and backward, tokens/s, achieved GFLOP/s
 * (model flops of lib/model/count: 3 x forward) and its ratio to the sgemm
 * ceiling, which implementation ran the matrix products, the time spent
 * inside the backend's product calls and the rest of the step
 * (products_ms, non_matrix_ms: the element-wise kernels and the model's
 * conversions, as a ratio to the first dtype's too), and the time of
 * the step's matrix products alone in fp32 sgemm with the same shapes (the
 * bound the step can reach with this BLAS; skip it with
 * GPT_STEP_NO_MATMUL_ONLY=1), the CPU and the load average at the start and
 * end.  Best-of figures matter on a shared machine.
 * Not a test: it asserts nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>
#include <cblas.h>

#include "cpu/ceiling.h"
#include "app/blas_core.h"
#include "compute/compute.h"
#include "model/count.h"
#include "cpu/gemm_bf16.h"
#include "model/gpt.h"
#include "util/half.h"
#include "util/mem.h"
#include "util/timer.h"

/* The cpu backend with its matrix-product entries timed: prod_s gathers
 * the wall seconds spent inside them (the products, with the operand
 * conversions and copies an implementation makes inside the call), so a
 * step's remaining time is its non-matrix work (element-wise kernels,
 * the model's packs and unpacks, the rounding passes outside products). */
static struct ds_compute_ops timed;
static double prod_s;

static void t_gemm(int mm, const struct ds_gemm_bf16_batch *bt, int ta, int tb, int M, int N, int K, float alpha,
		   const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
	const double t0 = ds_now();
	ds_compute_cpu.gemm(mm, bt, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
	prod_s += ds_now() - t0;
}

static void t_gemm_keep_b(int mm, int same, int M0, int ta, int tb, int M, int N, int K, float alpha, const float *A,
			  int lda, const float *B, int ldb, const uint16_t *a16, const uint16_t *b16, float beta,
			  float *C, int ldc)
{
	const double t0 = ds_now();
	ds_compute_cpu.gemm_keep_b(mm, same, M0, ta, tb, M, N, K, alpha, A, lda, B, ldb, a16, b16, beta, C, ldc);
	prod_s += ds_now() - t0;
}

static int t_gemm16(int token, unsigned flags, int ta, int tb, int M, int N, int K, float alpha, const void *A,
		    int lda, const float *B, int ldb, const uint16_t *b16, float beta, void *C, int ldc)
{
	const double t0 = ds_now();
	const int rc = ds_compute_cpu.gemm16(token, flags, ta, tb, M, N, K, alpha, A, lda, B, ldb, b16, beta, C, ldc);
	prod_s += ds_now() - t0;
	return rc;
}

/* The matrix products of one training step, alone, with the model's shapes:
 * the best a step can do with this BLAS (attention matmuls not included). */
static double sgemm_only_step(int L, int C, int F, int V, int N)
{
	int64_t big = (int64_t)N * V > (int64_t)V * C ? (int64_t)N * V : (int64_t)V * C;
	if ((int64_t)4 * C * F > big)
		big = (int64_t)4 * C * F;
	float *a = ds_alloc((size_t)big * 4), *b = ds_alloc((size_t)big * 4), *c = ds_alloc((size_t)big * 4);
	const int shp[4][2] = { { C, 3 * C }, { C, C }, { C, F }, { F, C } };   /* in, out */
	double t0 = ds_now();
	for (int l = 0; l < L; l++)
		for (int k = 0; k < 4; k++) {
			int in = shp[k][0], out = shp[k][1];
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, out, in, 1, a, in, b, in, 1, c, out);
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, out, 1, a, out, b, in, 0, c, in);
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, N, 1, a, out, b, in, 1, c, in);
		}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, V, C, 1, a, C, b, C, 0, c, V);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, V, 1, a, V, b, C, 0, c, C);
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, C, N, 1, a, V, b, C, 1, c, C);
	double t = ds_now() - t0;
	ds_free(a);
	ds_free(b);
	ds_free(c);
	return t;
}

#define MAXD 6

/* the 1-minute load average (-1 where /proc/loadavg cannot be read): a
 * shared machine's figures are only comparable at similar loads */
static double loadavg(void)
{
	double l = -1;
	FILE *f = fopen("/proc/loadavg", "r");
	if (f) {
		if (fscanf(f, "%lf", &l) != 1)
			l = -1;
		fclose(f);
	}
	return l;
}

/* the CPU's model name from /proc/cpuinfo, or "?" */
static void cpu_model(char *buf, size_t n)
{
	char line[256];
	snprintf(buf, n, "?");
	FILE *f = fopen("/proc/cpuinfo", "r");
	if (!f)
		return;
	while (fgets(line, sizeof line, f))
		if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
			const char *v = strchr(line, ':') + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			snprintf(buf, n, "%.*s", (int)strcspn(v, "\n"), v);
			break;
		}
	fclose(f);
}

/* one dtype's run: its workspace, 16-bit-rounded parameters and figures */
struct run {
	char name[16];
	int half, mm;
	struct ds_gpt_ws *ws;
	float *p;
	uint16_t *p16;   /* bf16 runs: the parameters' bf16 copy (the engine's 16-bit model) */
	double tf, tb, tp, best, *step, cpu;   /* tp: inside the products (timed); cpu: the process's CPU seconds over the counted steps */
	float loss;
};

static const struct ds_gpt *model;

/* the params16 hook: what ds-train's engine gives the model, its 16-bit
 * copy of the parameters (made once per optimizer step there, so not
 * part of a step's time here) */
static const uint16_t *params16(void *ctx, int seg)
{
	const struct run *r = ctx;
	return r->p16 + ds_gpt_segment(model, seg)->offset;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	(void)ds_blas_core_reexec(argv);   /* OpenBLAS's Prescott fallback replaced, as the tools do */
	int L = 12, C = 768, NH = 12, V = 50304, B = 4, T = 64, steps = 5, ckpt = 0, a = 1;
	if (argc > 1 && !strcmp(argv[1], "tiny")) {
		L = 6; C = 384; NH = 6; V = 256; B = 8; T = 128; a = 2;
	} else if (argc > 1 && !strcmp(argv[1], "gpt2")) {
		a = 2;
	} else if (argc > 6) {
		L = atoi(argv[1]); C = atoi(argv[2]); NH = atoi(argv[3]); V = atoi(argv[4]);
		B = atoi(argv[5]); T = atoi(argv[6]); a = 7;
	}
	if (argc > a)
		steps = atoi(argv[a]);
	if (argc > a + 1)
		ckpt = atoi(argv[a + 1]);
	if (steps < 1) {
		fprintf(stderr, "gpt-step: steps must be >= 1\n");
		return 2;
	}
	static const struct { const char *name; int half, mm; } dts[] = {
		{ "fp32", DS_HALF_NONE, 0 }, { "fp16", DS_HALF_FP16, 0 }, { "bf16", DS_HALF_BF16, DS_BF16_MM_AUTO },
		{ "bf16-onednn", DS_HALF_BF16, DS_BF16_MM_ONEDNN }, { "bf16-kernel", DS_HALF_BF16, DS_BF16_MM_KERNEL },
		{ "bf16-sgemm", DS_HALF_BF16, DS_BF16_MM_FP32 },
	};
	struct run rs[MAXD];
	int nd = 0;
	char list[128];
	snprintf(list, sizeof list, "%s", argc > a + 2 ? argv[a + 2] : "fp32");
	for (char *sv = NULL, *t = strtok_r(list, ",", &sv); t; t = strtok_r(NULL, ",", &sv)) {
		size_t k = 0;
		while (k < sizeof dts / sizeof dts[0] && strcmp(t, dts[k].name))
			k++;
		if (k == sizeof dts / sizeof dts[0] || nd == MAXD) {
			fprintf(stderr, "gpt-step: dtype '%s': give up to %d of fp32, fp16, bf16, bf16-onednn, "
				"bf16-kernel, bf16-sgemm\n", t, MAXD);
			return 2;
		}
		rs[nd] = (struct run){ .half = dts[k].half, .mm = dts[k].mm, .best = 1e30 };
		snprintf(rs[nd].name, sizeof rs[nd].name, "%s", t);
		nd++;
	}

	struct ds_model_config c;
	memset(&c, 0, sizeof(c));
	c.num_layers = L; c.hidden_size = C; c.num_attention_heads = NH;
	c.seq_length = T; c.max_position_embeddings = T > 1024 ? T : 1024;
	c.vocab_size = V; c.make_vocab_size_divisible_by = 128;
	c.layernorm_epsilon = 1e-5; c.init_method_std = 0.02; c.rotary_pct = 1; c.rotary_emb_base = 10000;
	struct ds_err err = DS_ERR_INIT;
	struct ds_gpt *m;
	if (ds_gpt_create(&m, &c, &err)) {
		fprintf(stderr, "gpt-step: %s\n", err.msg);
		return 2;
	}
	int64_t n = ds_gpt_num_params(m);
	model = m;
	timed = ds_compute_cpu;
	timed.gemm = t_gemm;
	timed.gemm_keep_b = t_gemm_keep_b;
	timed.gemm16 = t_gemm16;
	ds_gpt_set_compute(m, &timed);
	float *g = ds_alloc((size_t)n * 4);
	int32_t *tok = malloc((size_t)B * T * 4), *tgt = malloc((size_t)B * T * 4);
	for (int i = 0; i < B * T; i++) {
		tok[i] = (i * 7919) % V;
		tgt[i] = (i * 104729 + 1) % V;
	}
	for (int d = 0; d < nd; d++) {
		struct ds_gpt_ws_opts o = { .B = B, .T = T, .checkpointing = ckpt, .dropout_seed = 1, .half = rs[d].half,
					     .bf16_matmul = rs[d].mm };
		if (ds_gpt_ws_create(&rs[d].ws, m, &o, &err)) {
			fprintf(stderr, "gpt-step: %s: %s\n", rs[d].name, err.msg);
			return err.code == DS_ENOTSUP ? 3 : 1;
		}
		rs[d].p = ds_alloc((size_t)n * 4);
		rs[d].step = calloc((size_t)steps, sizeof(double));
		if (!rs[d].p || !rs[d].step) {
			fprintf(stderr, "gpt-step: out of memory\n");
			return 1;
		}
		ds_gpt_init(m, 1, rs[d].p, 0, n);
		ds_half_round_n((enum ds_half_kind)rs[d].half, rs[d].p, (size_t)n);
		if (rs[d].half == DS_HALF_BF16) {
			const struct ds_gpt_hooks h = { .ctx = &rs[d], .params16 = params16 };
			if (!(rs[d].p16 = ds_alloc((size_t)n * 2))) {
				fprintf(stderr, "gpt-step: out of memory\n");
				return 1;
			}
			ds_fp32_to_bf16_n(rs[d].p16, rs[d].p, (size_t)n);
			ds_gpt_ws_set_hooks(rs[d].ws, &h);
		}
	}
	struct ds_count_totals tot;
	ds_count_train_flops(ds_gpt_config(m), B, T, ckpt ? 1.0 : 0.0, &tot, &err);

	const double load0 = loadavg();
	double ceil_gf = ds_ceiling_sgemm_gflops(0, 1.0);
	double mm = 1e30;
	for (int s = -1; s < steps; s++) {   /* step -1 warms up */
		for (int d = 0; d < nd; d++) {
			struct run *r = &rs[d];
			memset(g, 0, (size_t)n * 4);
			struct timespec c0, c1;
			clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
			const double p0 = prod_s;
			double t0 = ds_now();
			ds_gpt_forward(m, r->ws, r->p, tok, tgt, B, T, s, 0, 1, &r->loss, &err);
			double t1 = ds_now();
			ds_gpt_backward(m, r->ws, r->p, g, 1.0f, &err);
			double t2 = ds_now();
			clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
			if (s < 0)
				continue;
			r->tf += t1 - t0;
			r->tb += t2 - t1;
			r->tp += prod_s - p0;
			r->step[s] = t2 - t0;
			r->cpu += (double)(c1.tv_sec - c0.tv_sec) + 1e-9 * (double)(c1.tv_nsec - c0.tv_nsec);
			if (t2 - t0 < r->best)
				r->best = t2 - t0;
		}
		double tm = getenv("GPT_STEP_NO_MATMUL_ONLY") ? 1e30
			: sgemm_only_step(L, C, 4 * C, ds_gpt_config(m)->padded_vocab_size, B * T);
		if (tm < mm)
			mm = tm;
	}
	double c2 = ds_ceiling_sgemm_gflops(0, 1.0);   /* again: the machine may be shared */
	if (c2 > ceil_gf)
		ceil_gf = c2;
	printf("# gpt-step: L=%d C=%d NH=%d V=%d B=%d T=%d ckpt=%d params=%lld threads=%d\n", L, C, NH, V, B,
	       T, ckpt, (long long)n, omp_get_max_threads());
	char cpu[128];
	cpu_model(cpu, sizeof cpu);
	printf("# cpu: %s; load average %.2f at the start, %.2f at the end\n", cpu, load0, loadavg());
	char bnote[512];
	printf("# blas: %s, core %s%s%s\n", openblas_get_config(), openblas_get_corename(),
	       ds_blas_core_note(bnote, sizeof bnote) ? "; " : "", bnote);
	printf("sgemm_ceiling_gflops %.1f\n", ceil_gf);
	if (mm < 1e30)
		printf("matmul_only_step_ms %.2f\n", 1e3 * mm);
	for (int d = 0; d < nd; d++) {
		struct run *r = &rs[d];
		char plan[512];
		ds_gpt_ws_bf16_matmul(r->ws, plan, sizeof plan);
		double step = (r->tf + r->tb) / steps;
		double gf = tot.train_flops_step / step / 1e9;
		double gfb = tot.train_flops_step / r->best / 1e9;
		printf("# dtype %s, matrix products: %s\n", r->name, plan);
		printf("forward_ms %.2f\nbackward_ms %.2f\nstep_ms %.2f\nbest_step_ms %.2f\n", 1e3 * r->tf / steps,
		       1e3 * r->tb / steps, 1e3 * step, 1e3 * r->best);
		printf("step_cpu_ms %.2f\n", 1e3 * r->cpu / steps);
		printf("products_ms %.2f\nnon_matrix_ms %.2f\n", 1e3 * r->tp / steps, 1e3 * (step - r->tp / steps));
		printf("tokens_per_s %.0f\nmodel_gflops %.1f\nfraction_of_sgemm %.3f\n", B * T / step, gf, gf / ceil_gf);
		printf("best_model_gflops %.1f\nbest_fraction_of_sgemm %.3f\n", gfb, gfb / ceil_gf);
		if (mm < 1e30)
			printf("best_step_over_matmul_only %.3f\n", mm / r->best);
		printf("activation_bytes %zu\nloss %.6f\n", ds_gpt_ws_bytes(r->ws), r->loss);
		if (d > 0) {   /* against the first dtype, step by step */
			double rat[steps];
			for (int s = 0; s < steps; s++)
				rat[s] = r->step[s] / rs[0].step[s];
			qsort(rat, (size_t)steps, sizeof rat[0], cmp_dbl);
			printf("ratio_cpu_%s_over_%s %.3f\n", r->name, rs[0].name, r->cpu / rs[0].cpu);
			printf("ratio_non_matrix_%s_over_%s %.3f\n", r->name, rs[0].name,
			       (r->tf + r->tb - r->tp) / (rs[0].tf + rs[0].tb - rs[0].tp));
			printf("ratio_step_%s_over_%s %.3f (best %.3f, median of steps %.3f)\n", r->name, rs[0].name,
			       step / ((rs[0].tf + rs[0].tb) / steps), r->best / rs[0].best,
			       steps % 2 ? rat[steps / 2] : 0.5 * (rat[steps / 2 - 1] + rat[steps / 2]));
		}
	}
	for (int d = 0; d < nd; d++) {
		ds_gpt_ws_destroy(rs[d].ws);
		ds_free(rs[d].p);
		free(rs[d].step);
	}
	ds_gpt_destroy(m);
	ds_free(g);
	free(tok);
	free(tgt);
	return 0;
}
