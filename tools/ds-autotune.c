/* ds-autotune - find the fastest ZeRO stage and micro batch for a model by
 * running short ds-train trials, DeepSpeed's autotuner for dstk.  The work
 * is ds_autotune_run (lib/driver/autotune.h); this file parses the command
 * line and prints the summary table (stdout) or its CSV/JSON.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <signal.h>

#include "app/app.h"
#include "cli.h"
#include "driver/autotune.h"
#include "util/log.h"
#include "util/mem.h"

#define TOOL "ds-autotune"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: " TOOL " --deepspeed_config FILE --model FILE [OPTIONS]\n"
		"Resolve the config's \"auto\" values (micro batch, gradient accumulation, ZeRO\n"
		"stage \"auto\"/\"all\"/list) by running short ds-train trials, as its autotuning\n"
		"section says; write results_dir/ds_config_optimal.json and cmd_optimal.txt.\n"
		"\n"
		"  -c, --deepspeed-config=FILE  DeepSpeed JSON with \"auto\" values and \"autotuning\"\n"
		"  -m, --model=FILE             model JSON\n"
		"      --data=PATH              training data passed to every trial\n"
		"      --np=N                   ranks per trial (default: autotuning.num_gpus x\n"
		"                               num_nodes, else SLURM_NTASKS, else 1)\n"
		"      --launcher=\"CMD\"         prefix of each trial's command (default: none for\n"
		"                               1 rank, srun inside Slurm, else mpirun -np N)\n"
		"      --mem-per-rank=BYTES     memory budget per rank, e.g. 2G (default: from\n"
		"                               SLURM_MEM_PER_NODE, else 90%% of MemAvailable)\n"
		"      --results-dir=DIR        overrides autotuning.results_dir\n"
		"      --trial-timeout=S        seconds before a trial is killed (default 600)\n"
		"      --trainer=PATH           ds-train to run (default: next to " TOOL ")\n"
		"      --seed=N                 order of random / exploration picks (default 1)\n"
		"      --csv                    print the summary as CSV\n"
		"      --json                   print the result as JSON\n"
		"  -q, --quiet                  no per-trial progress on stderr\n"
		"  -h, --help                   this help\n"
		"      --version                version and compiled features\n"
		"\n"
		"Exit status: 0 a configuration was found, 1 every trial failed, 2 bad input,\n"
		"3 feature not built in.\n"
		"\n"
		"Examples:\n"
		"  " TOOL " --deepspeed_config ds.json --model gpt-350m.json --np 8\n"
		"  " TOOL " -c ds.json -m share/models/gpt-test.json --mem-per-rank 512M\n");
}

enum { O_DATA = 256, O_NP, O_LAUNCHER, O_MEM, O_RESULTS, O_TIMEOUT, O_TRAINER, O_SEED, O_CSV, O_JSON, O_VERSION };

static volatile int stop_sig;

static void on_signal(int sig) { stop_sig = sig; }

static const struct option longopts[] = {
	{ "deepspeed-config", required_argument, NULL, 'c' }, { "model", required_argument, NULL, 'm' },
	{ "data", required_argument, NULL, O_DATA },           { "np", required_argument, NULL, O_NP },
	{ "launcher", required_argument, NULL, O_LAUNCHER },   { "mem-per-rank", required_argument, NULL, O_MEM },
	{ "results-dir", required_argument, NULL, O_RESULTS }, { "trial-timeout", required_argument, NULL, O_TIMEOUT },
	{ "trainer", required_argument, NULL, O_TRAINER },     { "seed", required_argument, NULL, O_SEED },
	{ "csv", no_argument, NULL, O_CSV },                   { "json", no_argument, NULL, O_JSON },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },                    { "version", no_argument, NULL, O_VERSION },
	{ NULL, 0, NULL, 0 }
};

int main(int argc, char **argv)
{
	struct ds_autotune_opts o = DS_AUTOTUNE_OPTS_INIT;
	struct ds_err err = DS_ERR_INIT;
	int c, csv = 0, json = 0, quiet = 0, rc;
	uint64_t u;
	double d;

	ds_cli_blas_core(argv);   /* first: may run this program again (cli.h) */
	ds_cli_normalize_args(argc, argv);
	while ((c = getopt_long(argc, argv, "c:m:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': o.config = optarg; break;
		case 'm': o.model = optarg; break;
		case O_DATA: o.data = optarg; break;
		case O_NP:
			if (ds_parse_u64(optarg, 1, 65536, &u) < 0)
				return ds_cli_usage_error(TOOL, "--np '%s': expected an integer in [1, 65536]", optarg);
			o.np = (int)u;
			break;
		case O_LAUNCHER: o.launcher = optarg; break;
		case O_MEM:
			if (ds_parse_size(optarg, &o.mem_per_rank) < 0 || o.mem_per_rank == 0)
				return ds_cli_usage_error(TOOL, "--mem-per-rank '%s': expected a size such as 512M or 4G", optarg);
			break;
		case O_RESULTS: o.results_dir = optarg; break;
		case O_TIMEOUT:
			if (ds_parse_double(optarg, &d) < 0 || !(d > 0) || d > 1e7)
				return ds_cli_usage_error(TOOL, "--trial-timeout '%s': expected seconds > 0", optarg);
			o.trial_timeout = d;
			break;
		case O_TRAINER: o.trainer = optarg; break;
		case O_SEED:
			if (ds_parse_u64(optarg, 0, UINT64_MAX, &u) < 0)
				return ds_cli_usage_error(TOOL, "--seed '%s': expected a non-negative integer", optarg);
			o.seed = u;
			break;
		case O_CSV: csv = 1; break;
		case O_JSON: json = 1; break;
		case 'q': quiet = 1; break;
		case 'h': usage(stdout); return 0;
		case O_VERSION: return ds_cli_version(TOOL);
		default: return ds_cli_try_help(TOOL);
		}
	}
	if (optind < argc)
		return ds_cli_usage_error(TOOL, "unexpected argument '%s'", argv[optind]);
	if (!o.config || !o.model)
		return ds_cli_usage_error(TOOL, "--deepspeed_config FILE and --model FILE are required");
	if (csv && json)
		return ds_cli_usage_error(TOOL, "--csv and --json: choose one");
	/* several ranks per trial need an MPI build of ds-train (unless the user launches) */
	if (o.np > 1 && !o.launcher && ds_app_require("mpi", &err) < 0)
		return ds_cli_fail(TOOL, &err);
	ds_log_init(0, quiet ? DS_LOG_WARN : DS_LOG_INFO, 0);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	o.stop = &stop_sig;
	struct ds_autotune_res *res = calloc(1, sizeof(*res));
	if (!res)
		return ds_cli_fail(TOOL, &err);
	rc = ds_autotune_run(&o, res, &err);
	if (rc < 0) {
		free(res);
		return ds_cli_fail(TOOL, &err);
	}
	rc = csv ? ds_autotune_write_csv(res, stdout, &err)
	   : json ? ds_autotune_write_json(res, stdout, &err) : ds_autotune_print_summary(res, stdout, &err);
	if (rc < 0) {
		free(res);
		return ds_cli_fail(TOOL, &err);
	}
	if (res->search.best < 0) {
		int first = -1;
		for (int i = 0; i < res->space.n && first < 0; i++)
			if (res->space.p[i].status == DS_AT_FAILED)
				first = i;
		if (first >= 0)
			fprintf(stderr, TOOL ": no configuration found: all %d trials failed; first: z%d micro batch %d: %s "
				"(see %s/summary.csv)\n", res->search.trials, res->space.p[first].stage,
				res->space.p[first].mb, res->space.p[first].why, res->results_dir);
		else
			fprintf(stderr, TOOL ": no configuration found: all %d experiments were pruned before launch "
				"(%d over the memory budget of %.1f MiB per rank, %d by the batch or config); "
				"raise --mem-per-rank or lower autotuning.min_train_micro_batch_size_per_gpu\n",
				res->space.n, res->pruned_mem, (double)res->budget / 1048576.0, res->pruned_batch);
		free(res);
		return 1;
	}
	free(res);
	return 0;
}
