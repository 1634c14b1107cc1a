/* ds-nvme-tune - find the fastest async-I/O ("aio") settings for a set of
 * NVMe directories, DeepSpeed's ds_nvme_tune with a faster search.  The
 * work is ds_nvme_tune_run (lib/driver/nvme_tune.h); this file parses the
 * command line, shows progress, and owns stdout, the CSV and the config copy.
 */
#include "config.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "cli.h"
#include "driver/nvme_tune.h"
#include "util/mem.h"

#define TOOL "ds-nvme-tune"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: " TOOL " --nvme_dir DIR... [OPTIONS]\n"
		"Measure read and write bandwidth of DIR(s) over aio settings and print the best\n"
		"GB/s (2^30 bytes/s, as DeepSpeed) and a paste-ready \"aio\" config section.\n"
		"\n"
		"  -d, --nvme-dir=DIR...        directories to test, driven in parallel as one\n"
		"                               device set (repeat, or list after the flag)\n"
		"      --sweep-config=FILE      JSON {\"key\": [values]} replacing the default space\n"
		"      --no-read, --no-write    skip reads / writes\n"
		"      --io-size=SIZE           bytes per directory and operation (default: 400M)\n"
		"      --loops=N                repetitions per trial (default: 1)\n"
		"      --log-dir=DIR            also write DeepSpeed-named per-trial logs there\n"
		"      --flush-page-cache       drop the test files' cached pages before each I/O\n"
		"      --engine=E               aio, posix or null (default: aio if built, else posix)\n"
		"      --buffered               use the page cache (no O_DIRECT); needed where the\n"
		"                               file system refuses O_DIRECT\n"
		"      --exhaustive             every combination, not coarse sweep + refinement\n"
		"      --csv=FILE               one CSV row per trial ('-': stdout)\n"
		"      --json                   print the result as JSON\n"
		"      --deepspeed-config=FILE  write a copy of FILE with the best \"aio\" merged in:\n"
		"                               to --output, or FILE itself, replaced only when\n"
		"                               the new copy is complete\n"
		"  -o, --output=FILE            where --deepspeed-config's copy goes\n"
		"      --gpu, --gds             GPU buffers / GPUDirect Storage (CUDA builds)\n"
		"  -v, --verbose                one line per trial on stderr\n"
		"  -q, --quiet                  no progress on stderr\n"
		"  -h, --help                   this help\n"
		"      --version                version and compiled features\n"
		"\n"
		"Long options accept '_' for '-' (--nvme_dir).  Exit status: 0 ok, 1 I/O failure,\n"
		"2 bad input, 3 feature not built in.\n"
		"\n"
		"Examples:\n"
		"  " TOOL " --nvme_dir /local_nvme\n"
		"  " TOOL " --nvme_dir /nvme0 /nvme1 --csv trials.csv --deepspeed_config ds.json\n");
}

enum { O_SWEEP = 256, O_NOREAD, O_NOWRITE, O_IOSIZE, O_LOOPS, O_LOGDIR, O_FLUSH, O_ENGINE, O_BUFFERED,
       O_EXHAUSTIVE, O_CSV, O_JSON, O_DSCONFIG, O_GPU, O_GDS, O_VERSION };

static const struct option longopts[] = {
	{ "nvme-dir", required_argument, NULL, 'd' },   { "sweep-config", required_argument, NULL, O_SWEEP },
	{ "no-read", no_argument, NULL, O_NOREAD },      { "no-write", no_argument, NULL, O_NOWRITE },
	{ "io-size", required_argument, NULL, O_IOSIZE }, { "loops", required_argument, NULL, O_LOOPS },
	{ "log-dir", required_argument, NULL, O_LOGDIR }, { "flush-page-cache", no_argument, NULL, O_FLUSH },
	{ "engine", required_argument, NULL, O_ENGINE }, { "buffered", no_argument, NULL, O_BUFFERED },
	{ "exhaustive", no_argument, NULL, O_EXHAUSTIVE }, { "csv", required_argument, NULL, O_CSV },
	{ "json", no_argument, NULL, O_JSON },           { "deepspeed-config", required_argument, NULL, O_DSCONFIG },
	{ "output", required_argument, NULL, 'o' },      { "gpu", no_argument, NULL, O_GPU },
	{ "gds", no_argument, NULL, O_GDS },             { "verbose", no_argument, NULL, 'v' },
	{ "quiet", no_argument, NULL, 'q' },             { "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, O_VERSION },     { NULL, 0, NULL, 0 }
};

static volatile sig_atomic_t stop_sig;
static int verbose, progress;

static void on_signal(int sig) { stop_sig = sig; }

static void on_trial(void *arg, const struct ds_nvme_trial *t)
{
	(void)arg;
	if (verbose || progress)
		fprintf(stderr, "%strial %d (%s): block_size %llu queue_depth %d intra_op_parallelism %d single_submit %d "
			"overlap_events %d: read %.2f write %.2f GB/s%s", progress && !verbose ? "\r" : "", t->index,
			t->phase, (unsigned long long)t->aio.block_size, t->aio.queue_depth, t->aio.intra_op_parallelism,
			t->aio.single_submit, t->aio.overlap_events, t->read_gbps, t->write_gbps, verbose ? "\n" : "  ");
}

int main(int argc, char **argv)
{
	static const char *dirs[256];
	struct ds_nvme_tune_opts o = DS_NVME_TUNE_OPTS_INIT;
	struct ds_nvme_tune_res res;
	struct ds_err err = DS_ERR_INIT;
	const char *csv = NULL, *dsconf = NULL, *out = NULL;
	int c, json = 0, quiet = 0, gpu = 0, gds = 0, rc;
	uint64_t u;

	ds_cli_blas_core(argv);   /* first: may run this program again (cli.h) */
	ds_cli_normalize_args(argc, argv);
	while ((c = getopt_long(argc, argv, "d:o:vqh", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			if (o.ndirs == 256)
				return ds_cli_usage_error(TOOL, "--nvme_dir: at most 256 directories");
			dirs[o.ndirs++] = optarg;
			break;
		case O_SWEEP: o.sweep_config = optarg; break;
		case O_NOREAD: o.no_read = 1; break;
		case O_NOWRITE: o.no_write = 1; break;
		case O_IOSIZE:
			if (ds_parse_size(optarg, &o.io_size) < 0 || o.io_size == 0 || o.io_size > (1ull << 50))
				return ds_cli_usage_error(TOOL, "--io_size '%s': expected a size up to 1P (e.g. 400M)", optarg);
			break;
		case O_LOOPS:
			if (ds_parse_u64(optarg, 1, 1000, &u) < 0)
				return ds_cli_usage_error(TOOL, "--loops '%s': expected an integer in [1, 1000]", optarg);
			o.loops = (int)u;
			break;
		case O_LOGDIR: o.log_dir = optarg; break;
		case O_FLUSH: o.flush_page_cache = 1; break;
		case O_ENGINE: o.engine = optarg; break;
		case O_BUFFERED: o.buffered = 1; break;
		case O_EXHAUSTIVE: o.exhaustive = 1; break;
		case O_CSV: csv = optarg; break;
		case O_JSON: json = 1; break;
		case O_DSCONFIG: dsconf = optarg; break;
		case 'o': out = optarg; break;
		case O_GPU: gpu = 1; break;
		case O_GDS: gds = 1; break;
		case 'v': verbose = 1; break;
		case 'q': quiet = 1; break;
		case 'h': usage(stdout); return 0;
		case O_VERSION: return ds_cli_version(TOOL);
		default: return ds_cli_try_help(TOOL);
		}
	}
	/* DeepSpeed's --nvme_dir takes several values: the rest are directories */
	while (optind < argc && o.ndirs > 0 && o.ndirs < 256)
		dirs[o.ndirs++] = argv[optind++];
	if (optind < argc)
		return ds_cli_usage_error(TOOL, "unexpected argument '%s'", argv[optind]);
	if (o.ndirs == 0)
		return ds_cli_usage_error(TOOL, "--nvme_dir DIR is required");
	if (out && !dsconf)
		return ds_cli_usage_error(TOOL, "--output names where --deepspeed_config's copy goes; give both");
	if (gds && ds_err_set(&err, DS_ENOTSUP, "--gds: built without GPUDirect Storage (NVIDIA cuFile); reconfigure "
			      "--with-cuda on a machine with GDS installed"))
		return ds_cli_fail(TOOL, &err);
	if (gpu && (ds_app_require("cuda", &err) < 0 ||
		    ds_err_set(&err, DS_ENOTSUP, "--gpu: transfers to GPU memory are not implemented yet; "
			       "measure host buffers (leave out --gpu)")))
		return ds_cli_fail(TOOL, &err);
	if (o.engine == NULL && strcmp(ds_aio_default_engine(), "aio") != 0 && !quiet)
		fprintf(stderr, TOOL ": the aio engine is not built (reconfigure --with-libaio); measuring with %s\n",
			ds_aio_default_engine());
	if (dsconf && ds_nvme_tune_config_check(dsconf, &err) < 0)
		return ds_cli_fail(TOOL, &err);

	o.dirs = dirs;
	o.stop = &stop_sig;
	o.on_trial = on_trial;
	progress = !quiet && isatty(STDERR_FILENO);
	struct sigaction sa = { .sa_handler = on_signal, .sa_flags = SA_RESETHAND };
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	rc = ds_nvme_tune_run(&o, &res, &err);
	if (progress && res.ntrials > 0)
		fputc('\n', stderr);
	if (rc == DS_ESIGNAL) {
		fprintf(stderr, TOOL ": %s\n", err.msg);
		signal((int)stop_sig, SIG_DFL);
		raise((int)stop_sig);
	}
	if (rc < 0)
		return ds_cli_fail(TOOL, &err);

	if ((json ? ds_nvme_tune_write_json(stdout, &res, &err) : ds_nvme_tune_write_text(stdout, &res, &err)) < 0 ||
	    (csv && (!strcmp(csv, "-") ? ds_nvme_tune_write_csv(stdout, &res, &err)
				       : ds_nvme_tune_csv_file(csv, &res, &err)) < 0) ||
	    (dsconf && ds_nvme_tune_config_merge(dsconf, out ? out : dsconf, &res, &err) < 0)) {
		ds_nvme_tune_res_release(&res);
		return ds_cli_fail(TOOL, &err);
	}
	if (dsconf && !quiet)
		fprintf(stderr, TOOL ": wrote %s with the best \"aio\" section\n", out ? out : dsconf);
	ds_nvme_tune_res_release(&res);
	return 0;
}
