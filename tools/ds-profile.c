/* ds-profile - DeepSpeed-style flops profile of a model: params, MACs and
 * flops per module and per depth, counted analytically from the model file.
 * The work is ds_profile_run (lib/driver/profile_run.h); this file parses
 * the command line and owns the output stream.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "compute/compute.h"
#include "model/count.h"
#include "driver/profile.h"
#include "driver/profile_run.h"
#include "util/err.h"
#include "util/mem.h"

#define TOOL "ds-profile"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: ds-profile --model FILE --batch-size B --seq-length T [OPTIONS]\n"
		"Print the flops profile of a model (params, MACs, flops per module and depth)\n"
		"in DeepSpeed's flops-profiler layout, counted from the model file.\n"
		"\n"
		"  -m, --model=FILE         model JSON (family gpt or bert)\n"
		"  -b, --batch-size=B       micro-batch size per GPU\n"
		"  -s, --seq-length=T       sequence length\n"
		"  -d, --module-depth=D     depths of the aggregated profile (default: -1, all but\n"
		"                           the deepest, as DeepSpeed)\n"
		"  -k, --top-modules=K      modules per depth in the aggregated profile (default: 1)\n"
		"      --detailed           also print the module tree\n"
		"      --convention=C       current (default): attention matmuls counted; legacy:\n"
		"                           DeepSpeed 0.3's count (Linear MACs and softmax only)\n"
		"      --mlm-tokens=N       bert: positions the MLM decoder sees (default: all B*T)\n"
		"      --measure            also time forward, backward and an Adam step here\n"
		"                           (gpt family): latencies, FLOPS, MFU against sgemm\n"
		"      --warmup=N           --measure: untimed iterations first (default: 2)\n"
		"      --iters=N            --measure: timed iterations (default: 3)\n"
		"      --checkpointing      --measure with activation checkpointing (backward\n"
		"                           counted as 3 x forward: recompute_fwd_factor 1)\n"
		"      --device=D           --measure on cpu, cuda (this rank's GPU, MFU against\n"
		"                           cuBLAS's fp32 GEMM) or auto (default, as ds-train's)\n"
		"      --tensor-model-parallel-size=N  gpt: one rank's figures of Megatron's\n"
		"                           tensor parallelism over N ranks, model parallel size\n"
		"                           N x the stages (DeepSpeed's per-GPU view)\n"
		"      --pipeline-model-parallel-size=P  gpt: one rank of a pipeline stage of P\n"
		"      --pipe-stage=S       which stage (default 0, the one DeepSpeed's rank 0 profiles)\n"
		"      --partition-method=M DeepSpeed's parameters (default), uniform or type:REGEX\n"
		"      --json               JSON instead of text\n"
		"      --csv                one CSV row per module\n"
		"  -o, --output=FILE        write to FILE (replaced only when complete)\n"
		"  -h, --help               this help\n"
		"      --version            version and compiled features\n"
		"\n"
		"Examples:\n"
		"  ds-profile --model share/models/gpt2-124m.json --batch-size 8 --seq-length 1024\n"
		"  ds-profile --model share/models/bert-large.json --batch-size 80 --seq-length 128 \\\n"
		"             --convention legacy --mlm-tokens 1159 --top-modules 3 --detailed\n");
}

enum { O_DETAILED = 256, O_JSON, O_CSV, O_VERSION, O_CONV, O_MLM, O_MEASURE, O_WARMUP, O_ITERS, O_CKPT, O_TP, O_PP,
       O_STAGE, O_PART, O_DEVICE };

static const struct option longopts[] = {
	{ "model", required_argument, NULL, 'm' },
	{ "batch-size", required_argument, NULL, 'b' },
	{ "seq-length", required_argument, NULL, 's' },
	{ "module-depth", required_argument, NULL, 'd' },
	{ "top-modules", required_argument, NULL, 'k' },
	{ "detailed", no_argument, NULL, O_DETAILED },
	{ "convention", required_argument, NULL, O_CONV },
	{ "mlm-tokens", required_argument, NULL, O_MLM },
	{ "measure", no_argument, NULL, O_MEASURE },
	{ "warmup", required_argument, NULL, O_WARMUP },
	{ "iters", required_argument, NULL, O_ITERS },
	{ "checkpointing", no_argument, NULL, O_CKPT },
	{ "device", required_argument, NULL, O_DEVICE },
	{ "tensor-model-parallel-size", required_argument, NULL, O_TP },
	{ "pipeline-model-parallel-size", required_argument, NULL, O_PP },
	{ "pipe-stage", required_argument, NULL, O_STAGE },
	{ "partition-method", required_argument, NULL, O_PART },
	{ "json", no_argument, NULL, O_JSON },
	{ "csv", no_argument, NULL, O_CSV },
	{ "output", required_argument, NULL, 'o' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, O_VERSION },
	{ NULL, 0, NULL, 0 }
};

/* A number option in [lo, hi]; nonzero (the usage status) when it is not. */
static int num(const char *s, uint64_t lo, uint64_t hi, const char *what, uint64_t *out)
{
	if (ds_parse_u64(s, lo, hi, out) < 0)
		return ds_cli_usage_error(TOOL, "%s '%s': expected an integer in [%llu, %llu]", what, s,
					  (unsigned long long)lo, (unsigned long long)hi);
	return 0;
}

int main(int argc, char **argv)
{
	struct ds_profile_opts o = DS_PROFILE_OPTS_INIT;
	struct ds_err err = DS_ERR_INIT;
	const char *outpath = NULL;
	uint64_t u;
	int c;

	ds_cli_blas_core(argv);   /* first: may run this program again (cli.h) */
	ds_cli_normalize_args(argc, argv);
	while ((c = getopt_long(argc, argv, "m:b:s:d:k:o:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'm': o.model_path = optarg; break;
		case 'b': if (num(optarg, 1, 1 << 24, "--batch-size", &u)) return 2; o.batch = (int)u; break;
		case 's': if (num(optarg, 1, 1 << 24, "--seq-length", &u)) return 2; o.seq = (int)u; break;
		case 'd':
			if (strcmp(optarg, "-1") && num(optarg, 0, 1000, "--module-depth", &u))
				return 2;
			o.module_depth = strcmp(optarg, "-1") ? (int)u : -1;
			break;
		case 'k': if (num(optarg, 1, 1000, "--top-modules", &u)) return 2; o.top_modules = (int)u; break;
		case O_MLM: if (num(optarg, 1, 1ULL << 40, "--mlm-tokens", &u)) return 2; o.mlm_tokens = (int64_t)u; break;
		case O_WARMUP: if (num(optarg, 0, 1000, "--warmup", &u)) return 2; o.warmup = (int)u; break;
		case O_ITERS: if (num(optarg, 1, 1000, "--iters", &u)) return 2; o.iters = (int)u; break;
		case O_DETAILED: o.detailed = 1; break;
		case O_MEASURE: o.measure = 1; break;
		case O_CKPT: o.checkpointing = 1; break;
		case O_DEVICE:
			if ((o.device = ds_device_parse(optarg)) < 0)
				return ds_cli_usage_error(TOOL, "--device '%s': expected cpu, cuda or auto", optarg);
			break;
		case O_TP: if (num(optarg, 1, 65536, "--tensor-model-parallel-size", &u)) return 2; o.tp = (int)u; break;
		case O_PP: if (num(optarg, 1, 65536, "--pipeline-model-parallel-size", &u)) return 2; o.pp = (int)u; break;
		case O_STAGE: if (num(optarg, 0, 65535, "--pipe-stage", &u)) return 2; o.stage = (int)u; break;
		case O_PART: o.partition = optarg; break;
		case O_JSON: o.format = DS_PROFILE_JSON; break;
		case O_CSV: o.format = DS_PROFILE_CSV; break;
		case O_CONV:
			if (strcmp(optarg, "current") && strcmp(optarg, "legacy"))
				return ds_cli_usage_error(TOOL, "--convention '%s': expected current or legacy", optarg);
			o.convention = strcmp(optarg, "legacy") ? DS_COUNT_CURRENT : DS_COUNT_LEGACY;
			break;
		case 'o': outpath = optarg; break;
		case 'h': usage(stdout); return 0;
		case O_VERSION: return ds_cli_version(TOOL);
		default: return ds_cli_try_help(TOOL);
		}
	}
	if (optind < argc)
		return ds_cli_usage_error(TOOL, "unexpected argument '%s'", argv[optind]);
	if (!o.model_path || !o.batch || !o.seq)
		return ds_cli_usage_error(TOOL, "--model, --batch-size and --seq-length are required");

	/* -o: write next to FILE and rename when complete, so a failed run keeps the old file */
	char tmp[4096];
	FILE *out = stdout;
	if (outpath) {
		snprintf(tmp, sizeof(tmp), "%s.tmp", outpath);
		if (!(out = fopen(tmp, "w"))) {
			fprintf(stderr, "ds-profile: %s: cannot write: %m\n", tmp);
			return 2;
		}
	}
	int rc = ds_profile_run(&o, out, NULL, &err);
	if (outpath) {
		if (fclose(out) != 0 && rc == 0)
			rc = ds_err_set(&err, DS_EIO, "%s: write failed", tmp);
		if (rc == 0 && rename(tmp, outpath) != 0)
			rc = ds_err_set(&err, DS_EIO, "%s: rename failed", outpath);
		if (rc < 0)
			remove(tmp);
	}
	return rc < 0 ? ds_cli_fail(TOOL, &err) : 0;
}
