/* ds-train - train a GPT-family model with DeepSpeed's configuration
 * (lib/driver/train.h), or with --check validate the DeepSpeed and model
 * configs and print the effective configuration.  The options live in
 * struct ds_train_opts (lib/config/train_opts.h).  This file owns what a
 * process owns: the communicator, the signal handlers, stdout/stderr and
 * the decision to end the whole job when a rank fails.
 */
#include "config.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "compute/compute.h"
#include "config/config.h"
#include "config/neox.h"
#include "config/train_opts.h"
#include "driver/train.h"
#include "monitor/out.h"
#include "util/err.h"
#include "util/log.h"
#include "util/mem.h"

#define TOOL "ds-train"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: ds-train [--deepspeed_config FILE] [--model FILE] [OPTIONS]\n"
		"       ds-train --check --deepspeed_config FILE --model FILE [--world-size N]\n"
		"       ds-train [--check] --conf A.yml [B.yml ...] [OPTIONS]\n"
		"Train a GPT-family model with a DeepSpeed JSON config (defaults: the bundled\n"
		"share/configs/default.json and share/models/gpt-tiny.json).\n"
		"\n"
		"  -c, --deepspeed-config=FILE  DeepSpeed JSON config (also --deepspeed_config)\n"
		"  -m, --model=FILE          model JSON (GPT-NeoX/Megatron key names)\n"
		"      --conf A.yml [B.yml...]  GPT-NeoX YAML configs, read in order as NeoX's\n"
		"                            launcher reads them, instead of the two files\n"
		"      --check               validate both files, print the effective\n"
		"                            configuration and the memory estimate per rank,\n"
		"                            and exit (0 valid, 2 invalid)\n"
		"      --world-size=N        --check: ranks of the job, tp x pp x dp (the batch triad\n"
		"                            counts the dp data-parallel ones; default 1)\n"
		"      --tensor-model-parallel-size=N  split every layer over N ranks (Megatron's\n"
		"                            tensor parallelism; default 1)\n"
		"      --pipeline-model-parallel-size=N  split the layers into N pipeline stages\n"
		"                            (DeepSpeed's pipeline engine; default: pipeline.stages\n"
		"                            of the DeepSpeed config, else 1)\n"
		"      --lenient             unknown DeepSpeed keys are warnings, not errors\n"
		"      --json                --check: print the configuration as JSON\n"
		"      --list-keys           print every DeepSpeed and dstk key: type, default,\n"
		"                            status (implemented, inherent, unsupported) and help\n"
		"      --train-iters=N       optimizer steps to run\n"
		"      --save=DIR            checkpoint directory\n"
		"      --save-interval=N     save every N steps\n"
		"      --keep-last-n-checkpoints=N  remove older global_step* after each save\n"
		"      --load=DIR|auto       resume from DIR's latest tag (auto: newest valid under --save)\n"
		"      --no-load-optim       load weights only, not optimizer state\n"
		"      --seed=N              seed of initialisation, dropout and data order (default 1234)\n"
		"      --data=PATH           training data (raw text, Megatron .bin/.idx prefix, llm.c shards),\n"
		"                            or a blend \"W1 PATH1 W2 PATH2 ...\" (Megatron's blend form)\n"
		"      --valid-data=PATH     validation data (a path or a blend)\n"
		"      --test-data=PATH      test data (a path or a blend), evaluated after the last step\n"
		"      --split=A,B[,C]       train/validation weights when there is no --valid-data\n"
		"      --eval-interval=N     evaluate every N steps\n"
		"      --eval-iters=N        batches per evaluation (default 10)\n"
		"      --log-interval=N      log line every N steps (default: steps_per_print)\n"
		"      --exit-interval=N     stop after N steps of this run\n"
		"      --peak-gflops=X       MFU reference instead of the measured sgemm ceiling\n"
		"      --metrics-json=FILE   write measured step metrics as JSON\n"
		"      --device=cpu|cuda|auto  where the model computes (default: dstk.device,\n"
		"                            auto: cuda when built, a GPU answers and the cuda\n"
		"                            backend is usable -- not yet -- else cpu)\n"
		"Values for \"auto\" in the DeepSpeed config (Hugging Face's convention; without\n"
		"the flag an \"auto\" key takes its documented default):\n"
		"      --lr=X  --weight-decay=X  --adam-beta1=X  --adam-beta2=X  --adam-eps=X\n"
		"      --clip-grad=X  --micro-batch-size=N  --global-batch-size=N\n"
		"      --lr-warmup-iters=N  --fp16  --bf16  (and --train-iters for total_num_steps)\n"
		"      --mem-per-rank=SIZE   budget of micro batch \"auto\", the largest that fits\n"
		"                            (default: Slurm's memory or 90%% of MemAvailable)\n"
		"  -h, --help                this help\n"
		"      --version             version and compiled features\n"
		"\n"
		"Examples:\n"
		"  ds-train --check --deepspeed_config share/configs/zero2.json \\\n"
		"           --model share/models/gpt-test.json --world-size 4\n");
}

enum { O_CHECK = 256, O_WS, O_LENIENT, O_JSON, O_ITERS, O_SAVE, O_SAVEINT, O_LOAD, O_NOLOADOPT, O_SEED,
       O_DATA, O_VALID, O_TEST, O_SPLIT, O_EVALINT, O_EVALITERS, O_LOGINT, O_EXITINT, O_PEAK, O_METRICS, O_VERSION, O_KEYS,
       O_CONF, O_KEEP, O_LR, O_WD, O_B1, O_B2, O_EPS, O_CLIP, O_MBS, O_GBS, O_WARM, O_FP16, O_BF16, O_MEM, O_TP, O_PP, O_DEVICE };

static const struct option longopts[] = {
	{ "deepspeed-config", required_argument, NULL, 'c' },
	{ "model", required_argument, NULL, 'm' },
	{ "check", no_argument, NULL, O_CHECK },
	{ "world-size", required_argument, NULL, O_WS },
	{ "lenient", no_argument, NULL, O_LENIENT },
	{ "json", no_argument, NULL, O_JSON },
	{ "list-keys", no_argument, NULL, O_KEYS },
	{ "train-iters", required_argument, NULL, O_ITERS },
	{ "save", required_argument, NULL, O_SAVE },
	{ "save-interval", required_argument, NULL, O_SAVEINT },
	{ "load", required_argument, NULL, O_LOAD },
	{ "no-load-optim", no_argument, NULL, O_NOLOADOPT },
	{ "seed", required_argument, NULL, O_SEED },
	{ "data", required_argument, NULL, O_DATA },
	{ "valid-data", required_argument, NULL, O_VALID },
	{ "test-data", required_argument, NULL, O_TEST },
	{ "split", required_argument, NULL, O_SPLIT },
	{ "eval-interval", required_argument, NULL, O_EVALINT },
	{ "eval-iters", required_argument, NULL, O_EVALITERS },
	{ "log-interval", required_argument, NULL, O_LOGINT },
	{ "exit-interval", required_argument, NULL, O_EXITINT },
	{ "peak-gflops", required_argument, NULL, O_PEAK },
	{ "metrics-json", required_argument, NULL, O_METRICS },
	{ "conf", required_argument, NULL, O_CONF },
	{ "keep-last-n-checkpoints", required_argument, NULL, O_KEEP },
	{ "lr", required_argument, NULL, O_LR },
	{ "weight-decay", required_argument, NULL, O_WD },
	{ "adam-beta1", required_argument, NULL, O_B1 },
	{ "adam-beta2", required_argument, NULL, O_B2 },
	{ "adam-eps", required_argument, NULL, O_EPS },
	{ "clip-grad", required_argument, NULL, O_CLIP },
	{ "micro-batch-size", required_argument, NULL, O_MBS },
	{ "global-batch-size", required_argument, NULL, O_GBS },
	{ "lr-warmup-iters", required_argument, NULL, O_WARM },
	{ "fp16", no_argument, NULL, O_FP16 },
	{ "bf16", no_argument, NULL, O_BF16 },
	{ "mem-per-rank", required_argument, NULL, O_MEM },
	{ "tensor-model-parallel-size", required_argument, NULL, O_TP },
	{ "pipeline-model-parallel-size", required_argument, NULL, O_PP },
	{ "device", required_argument, NULL, O_DEVICE },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, O_VERSION },
	{ NULL, 0, NULL, 0 }
};

/* An integer option in [lo, hi] into *out; nonzero (the usage status) if not. */
static int num(const char *s, uint64_t lo, uint64_t hi, const char *what, int64_t *out)
{
	uint64_t u;
	if (ds_parse_u64(s, lo, hi, &u) < 0)
		return ds_cli_usage_error(TOOL, "%s '%s': expected an integer in [%llu, %llu]", what, s,
					  (unsigned long long)lo, (unsigned long long)hi);
	*out = (int64_t)u;
	return 0;
}

/* SIGTERM/SIGUSR1 (Slurm's --signal): ask the run to save and stop at the
 * next step boundary (exit 4), remembering when the first one came. */
static volatile sig_atomic_t stop_signal, signal_at;

static void on_signal(int sig)
{
	struct timespec t;
	if (!stop_signal && clock_gettime(CLOCK_MONOTONIC, &t) == 0)
		signal_at = (sig_atomic_t)t.tv_sec;
	stop_signal = sig;
}

static void install_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
}

/* A rank failed where the others may be waiting in a collective it will
 * not join: say why and take the whole job down with this failure's exit
 * status, rather than leave them hanging. */
static void on_stranded(void *ctx, struct ds_comm *comm, int rc, const struct ds_err *err)
{
	(void)ctx;
	ds_log_error("%s", err->msg);
	ds_comm_abort(comm, ds_exit_code(rc));
}

/* A number option in [lo, hi) into *out; nonzero (the usage status) if not. */
static int real(const char *s, double lo, double hi, const char *what, double *out)
{
	char *end;
	*out = strtod(s, &end);
	if (end == s || *end || !(*out >= lo && *out < hi))
		return ds_cli_usage_error(TOOL, "%s '%s': expected a number in [%g, %g)", what, s, lo, hi);
	return 0;
}

/* The hang watchdog's report, from its thread while the main thread is
 * stuck: print it and end this rank with status 5 so the job ends. */
static void on_watchdog(void *ctx, const char *report, int first)
{
	(void)ctx;
	(void)first;
	fprintf(stderr, "%s: %s", TOOL, report);
	fflush(stderr);
	_exit(ds_exit_code(DS_ETIMEOUT));
}

/* The run: rank and world from the launcher, results on rank 0's stdout,
 * the progress bar on a terminal's stderr. */
static int train(const struct ds_train_opts *o)
{
	struct ds_err err = DS_ERR_INIT;
	struct ds_comm *comm = NULL;
	struct ds_train_result res;
	if (ds_comm_create(&comm, "auto", &err) < 0)
		return ds_cli_fail(TOOL, &err);
	ds_log_init(ds_comm_rank(comm), DS_LOG_INFO, 0);
	install_signals();
	const struct ds_monitor_out out = { stdout, isatty(2) ? stderr : NULL };
	const struct ds_train_hooks h = { .out = &out, .stop = &stop_signal, .stop_at = &signal_at,
					  .on_watchdog = on_watchdog, .on_stranded = on_stranded };
	int rc = ds_train_run(o, comm, &h, &res, &err);
	ds_comm_destroy(comm);
	return rc < 0 ? ds_cli_fail(TOOL, &err) : 0;
}

int main(int argc, char **argv)
{
	struct ds_train_opts o;
	struct ds_err err = DS_ERR_INIT;
	int64_t v;
	int c, list = 0, rc;
	const char *conf[64];
	struct ds_neox nx = { 0 };

	ds_cli_blas_core(argv);   /* first: may run this program again (cli.h) */
	ds_train_opts_init(&o);
	ds_cli_normalize_args(argc, argv);
	while ((c = getopt_long(argc, argv, "c:m:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'c': o.deepspeed_config = optarg; break;
		case 'm': o.model = optarg; break;
		case O_CHECK: o.check = 1; break;
		case O_WS: if (num(optarg, 1, 1 << 24, "--world-size", &v)) return 2; o.world_size = (int)v; break;
		case O_LENIENT: o.lenient = 1; break;
		case O_JSON: o.json = 1; break;
		case O_KEYS: list = 1; break;
		case O_ITERS: if (num(optarg, 1, INT64_MAX, "--train-iters", &o.train_iters)) return 2; break;
		case O_SAVE: o.save = optarg; break;
		case O_SAVEINT: if (num(optarg, 1, INT64_MAX, "--save-interval", &o.save_interval)) return 2; break;
		case O_LOAD: o.load = optarg; break;
		case O_NOLOADOPT: o.no_load_optim = 1; break;
		case O_SEED: if (num(optarg, 0, INT64_MAX, "--seed", &v)) return 2; o.seed = (uint64_t)v; break;
		case O_DATA: o.data = optarg; break;
		case O_VALID: o.valid_data = optarg; break;
		case O_TEST: o.test_data = optarg; break;
		case O_SPLIT: o.split = optarg; break;
		case O_EVALINT: if (num(optarg, 1, INT64_MAX, "--eval-interval", &o.eval_interval)) return 2; break;
		case O_EVALITERS: if (num(optarg, 1, INT64_MAX, "--eval-iters", &o.eval_iters)) return 2; break;
		case O_LOGINT: if (num(optarg, 1, INT64_MAX, "--log-interval", &o.log_interval)) return 2; break;
		case O_EXITINT: if (num(optarg, 1, INT64_MAX, "--exit-interval", &o.exit_interval)) return 2; break;
		case O_PEAK: {
			char *end;
			o.peak_gflops = strtod(optarg, &end);
			if (*end || !(o.peak_gflops > 0))
				return ds_cli_usage_error(TOOL, "--peak-gflops '%s': expected a positive number", optarg);
			break;
		}
		case O_METRICS: o.metrics_json = optarg; break;
		case O_KEEP: if (num(optarg, 1, INT64_MAX, "--keep-last-n-checkpoints", &o.keep_last_n)) return 2; break;
		case O_CONF: if (o.nconf < 64) conf[o.nconf++] = optarg; break;
		case O_LR: if (real(optarg, 0, HUGE_VAL, "--lr", &o.autos.lr)) return 2; break;
		case O_WD: if (real(optarg, 0, HUGE_VAL, "--weight-decay", &o.autos.weight_decay)) return 2; break;
		case O_B1: if (real(optarg, 0, 1, "--adam-beta1", &o.autos.beta1)) return 2; break;
		case O_B2: if (real(optarg, 0, 1, "--adam-beta2", &o.autos.beta2)) return 2; break;
		case O_EPS: if (real(optarg, 0, HUGE_VAL, "--adam-eps", &o.autos.eps)) return 2; break;
		case O_CLIP: if (real(optarg, 0, HUGE_VAL, "--clip-grad", &o.autos.clip_grad)) return 2; break;
		case O_MBS: if (num(optarg, 1, INT32_MAX, "--micro-batch-size", &o.autos.micro_batch)) return 2; break;
		case O_GBS: if (num(optarg, 1, INT32_MAX, "--global-batch-size", &o.autos.global_batch)) return 2; break;
		case O_WARM: if (num(optarg, 0, INT64_MAX, "--lr-warmup-iters", &o.autos.warmup_iters)) return 2; break;
		case O_FP16: o.autos.fp16 = 1; break;
		case O_BF16: o.autos.bf16 = 1; break;
		case O_MEM:
			if (ds_parse_size(optarg, &o.mem_per_rank) < 0 || !o.mem_per_rank)
				return ds_cli_usage_error(TOOL, "--mem-per-rank '%s': expected a size such as 2G", optarg);
			break;
		case O_TP: if (num(optarg, 1, 65536, "--tensor-model-parallel-size", &v)) return 2; o.tp = (int)v; break;
		case O_PP: if (num(optarg, 1, 65536, "--pipeline-model-parallel-size", &v)) return 2; o.pp = (int)v; break;
		case O_DEVICE:
			if (ds_device_parse(optarg) < 0)
				return ds_cli_usage_error(TOOL, "--device '%s': expected cpu, cuda or auto", optarg);
			o.device = optarg;
			break;
		case 'h': usage(stdout); return 0;
		case O_VERSION: return ds_cli_version(TOOL);
		default: return ds_cli_try_help(TOOL);
		}
	}
	/* --conf a.yml b.yml: NeoX's deepy.py takes the files as one list */
	while (o.nconf && optind < argc && o.nconf < 64)
		conf[o.nconf++] = argv[optind++];
	if (optind < argc)
		return ds_cli_usage_error(TOOL, "unexpected argument '%s'", argv[optind]);
	if (o.nconf && (o.deepspeed_config || o.model))
		return ds_cli_usage_error(TOOL, "--conf replaces --deepspeed_config and --model: give one or the other");
	o.conf = conf;
	if (o.autos.fp16 > 0 && o.autos.bf16 > 0)
		return ds_cli_usage_error(TOOL, "--fp16 and --bf16: give one");
	if (list)
		return ds_config_print_keys(stdout, &err) < 0 ? ds_cli_fail(TOOL, &err) : 0;
	if (o.nconf && ds_train_opts_neox(&o, &nx, &err) < 0)
		return ds_cli_fail(TOOL, &err);
	char *piped[2];   /* --deepspeed_config <(jq ...): read once, it is read more than once */
	if (ds_train_opts_read_pipes(&o, piped, &err) < 0)
		return ds_cli_fail(TOOL, &err);
	if (o.check)
		rc = ds_train_check_run(&o, stdout, &err) < 0 ? ds_cli_fail(TOOL, &err) : 0;
	else
		rc = train(&o);
	ds_neox_release(&nx);
	free(piped[0]);
	free(piped[1]);
	return rc;
}
