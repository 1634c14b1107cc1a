/* ds-ckpt-convert - inspect, verify and convert dstk checkpoints: weights-only
 * HDF5 (fp32/fp16/bf16), Hugging Face safetensors (GPT-2 / GPT-NeoX) and
 * llm.c model files, in both directions.  The work is ds_convert_run
 * (lib/driver/convert.h); this file parses the command line.
 */
#include "config.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "driver/convert.h"
#include "util/err.h"
#include "util/log.h"

#define TOOL "ds-ckpt-convert"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: ds-ckpt-convert inspect|verify CKPT [--json]\n"
		"       ds-ckpt-convert [--from FMT] INPUT --to FMT -o OUTPUT [OPTIONS]\n"
		"Inspect, verify and convert checkpoints, streamed tensor by tensor.\n"
		"\n"
		"  inspect CKPT           tag, step, world size, ZeRO stage, dtype, configs and\n"
		"                         every tensor with shape, dtype and checksum status\n"
		"  verify CKPT            recompute every checksum; exit 1 naming a bad dataset\n"
		"  -t, --to=FMT           output: hdf5 (a fresh checkpoint under OUTPUT),\n"
		"                         fp32|fp16|bf16 (weights-only checkpoint under OUTPUT),\n"
		"                         safetensors (OUTPUT/model.safetensors + config.json),\n"
		"                         llmc (llm.c model file OUTPUT)\n"
		"  -f, --from=FMT         input: hdf5, safetensors or llmc (default: detected)\n"
		"  -o, --output=PATH      where to write (replaced only when complete)\n"
		"      --hf-config=FILE   config.json of a safetensors input (default: next to it)\n"
		"  -d, --dtype=T          --to safetensors: fp32 (default), fp16 or bf16;\n"
		"                         --to llmc: fp32 (version 3, default) or bf16 (version 5)\n"
		"      --approx-gelu      import the exact GELU (config.json's \"gelu\", e.g. Pythia)\n"
		"                         as dstk's tanh gelu, not gelu_exact (outputs differ slightly)\n"
		"      --json             JSON report\n"
		"  -q, --quiet            no progress on stderr (shown only on a terminal)\n"
		"  -h, --help             this help\n"
		"      --version          version and compiled features\n"
		"\n"
		"CKPT and an hdf5 INPUT may be a save directory (its `latest` tag), a tag\n"
		"directory or a state.h5 file.\n"
		"\n"
		"Examples:\n"
		"  ds-ckpt-convert inspect ckpt/\n"
		"  ds-ckpt-convert ckpt/ --to safetensors -o hf-export/\n"
		"  ds-ckpt-convert --from safetensors hf-export/ --to hdf5 -o finetune-init/\n");
}

enum { O_HFCONFIG = 256, O_JSON, O_VERSION, O_APPROX };

static const struct option longopts[] = {
	{ "to", required_argument, NULL, 't' },
	{ "from", required_argument, NULL, 'f' },
	{ "output", required_argument, NULL, 'o' },
	{ "hf-config", required_argument, NULL, O_HFCONFIG },
	{ "dtype", required_argument, NULL, 'd' },
	{ "json", no_argument, NULL, O_JSON },
	{ "approx-gelu", no_argument, NULL, O_APPROX },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, O_VERSION },
	{ NULL, 0, NULL, 0 }
};

static int fmt_arg(const char *opt, const char *s, int *out)
{
	int f = ds_convert_fmt_parse(s);
	if (f <= 0)
		return ds_cli_usage_error(TOOL, "%s '%s': expected hdf5, safetensors, llmc, fp32, fp16 or bf16", opt, s);
	*out = f;
	return 0;
}

int main(int argc, char **argv)
{
	struct ds_convert_opts o = DS_CONVERT_OPTS_INIT;
	struct ds_convert_result res;
	struct ds_err err = DS_ERR_INIT;
	int c, quiet = 0, rc;

	ds_cli_blas_core(argv);   /* first: may run this program again (cli.h) */
	ds_cli_normalize_args(argc, argv);
	while ((c = getopt_long(argc, argv, "t:f:o:d:qh", longopts, NULL)) != -1) {
		switch (c) {
		case 't': if (fmt_arg("--to", optarg, &o.to)) return 2; break;
		case 'f': if (fmt_arg("--from", optarg, &o.from)) return 2; break;
		case 'o': o.output = optarg; break;
		case O_HFCONFIG: o.hf_config = optarg; break;
		case 'd':
			if ((o.dtype = ds_convert_fmt_parse(optarg)) < DS_FMT_FP32)
				return ds_cli_usage_error(TOOL, "--dtype '%s': expected fp32, fp16 or bf16", optarg);
			break;
		case O_JSON: o.json = 1; break;
		case O_APPROX: o.approx_gelu = 1; break;
		case 'q': quiet = 1; break;
		case 'h': usage(stdout); return 0;
		case O_VERSION: return ds_cli_version(TOOL);
		default: return ds_cli_try_help(TOOL);
		}
	}
	if (optind < argc && (!strcmp(argv[optind], "inspect") || !strcmp(argv[optind], "verify"))) {
		o.cmd = argv[optind][0] == 'i' ? DS_CONVERT_INSPECT : DS_CONVERT_VERIFY;
		optind++;
		if (o.to || o.output)
			return ds_cli_usage_error(TOOL, "%s takes no --to or -o", argv[optind - 1]);
	}
	if (optind >= argc)
		return ds_cli_usage_error(TOOL, "no input given");
	o.input = argv[optind++];
	if (optind < argc)
		return ds_cli_usage_error(TOOL, "unexpected argument '%s'", argv[optind]);
	if (o.cmd == DS_CONVERT_CONVERT && (!o.to || !o.output))
		return ds_cli_usage_error(TOOL, "converting needs --to FMT and -o OUTPUT");
	/* progress only on a terminal (STYLE rule 18): in a pipeline or a test
	 * a failure stays the single line on stderr */
	ds_log_init(0, quiet || !isatty(2) ? DS_LOG_WARN : DS_LOG_INFO, 0);

	rc = ds_convert_run(&o, stdout, &res, &err);
	if (fflush(stdout) != 0 && rc == 0)
		rc = ds_err_set(&err, DS_EIO, "stdout: write failed");
	return rc < 0 ? ds_cli_fail(TOOL, &err) : 0;
}
