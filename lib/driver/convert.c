/* convert.c - ds_convert_run: detect the input, open it as a tensor source,
 * and stream it tensor by tensor into the requested writer (convert_st.c,
 * convert_llmc.c, convert_ckpt.c); inspect's report.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver/convert_hf.h"
#include "driver/convert_int.h"
#include "io/convert_out.h"
#include "io/llmc.h"
#include "io/safetensors.h"
#include "util/half.h"
#include "util/log.h"
#include "util/mem.h"

static const char *const fmt_names[] = { "auto", "hdf5", "safetensors", "llmc", "fp32", "fp16", "bf16", NULL };

const char *ds_convert_fmt_name(int fmt)
{
	return fmt >= 0 && fmt <= DS_FMT_BF16 ? fmt_names[fmt] : "?";
}

int ds_convert_fmt_parse(const char *s)
{
	for (int i = 0; fmt_names[i]; i++)
		if (!strcmp(s, fmt_names[i]))
			return i;
	if (!strcmp(s, "ckpt") || !strcmp(s, "checkpoint"))
		return DS_FMT_CKPT;
	if (!strcmp(s, "llm.c"))
		return DS_FMT_LLMC;
	return -1;
}

void ds_convert_narrow_inplace(float *buf, size_t n, int bf16)
{
	/* block by block through a small buffer: block i's 16-bit output
	 * [2i, 2i + 2B) never reaches the fp32 input of a later block (>= 4(i + B)) */
	enum { B = 4096 };
	uint16_t tmp[B];
	uint16_t *out = (uint16_t *)buf;
	for (size_t i = 0; i < n; i += B) {
		size_t k = n - i < B ? n - i : B;
		if (bf16)
			ds_fp32_to_bf16_n(tmp, buf + i, k);
		else
			ds_fp32_to_fp16_n(tmp, buf + i, k);
		memcpy(out + i, tmp, k * sizeof(uint16_t));
	}
}

/* ---- sources ------------------------------------------------------------ */

int ds_csrc_setup(struct ds_csrc *s, struct ds_err *err)
{
	int rc = ds_gpt_create(&s->model, &s->cfg, err);
	if (rc < 0)
		return ds_err_prefix(err, "%s: ", s->path);
	s->cfg = *ds_gpt_config(s->model);
	if (!s->model_json && !(s->model_json = ds_convert_model_json(&s->cfg)))
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	return 0;
}

void ds_csrc_release(struct ds_csrc *s)
{
	if (s->close && s->ctx)
		s->close(s->ctx);
	ds_gpt_destroy(s->model);
	free(s->model_json);
	memset(s, 0, sizeof(*s));
}

uint64_t ds_csrc_largest(const struct ds_csrc *s)
{
	uint64_t m = 0;
	for (int i = 0; i < ds_gpt_num_tensors(s->model); i++)
		if ((uint64_t)ds_gpt_tensor(s->model, i)->numel > m)
			m = (uint64_t)ds_gpt_tensor(s->model, i)->numel;
	return m * sizeof(float);
}

/* ---- inspect output ---------------------------------------------------- */

void ds_cinfo_release(struct ds_cinfo *ci)
{
	free(ci->config_json);
	free(ci->model_json);
	free(ci->t);
	memset(ci, 0, sizeof(*ci));
}

static void print_shape(FILE *out, const struct ds_cinfo_tensor *t)
{
	fputc('[', out);
	for (int d = 0; d < t->ndim; d++)
		fprintf(out, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
	fputc(']', out);
}

void ds_cinfo_print(const struct ds_cinfo *ci, int json, FILE *out)
{
	if (json) {
		json_t *j = json_object(), *ts = json_array(), *v;
		json_object_set_new(j, "path", json_string(ci->path));
		json_object_set_new(j, "format", json_string(ci->format));
		json_object_set_new(j, "tag", ci->tag[0] ? json_string(ci->tag) : json_null());
		json_object_set_new(j, "step", ci->step >= 0 ? json_integer(ci->step) : json_null());
		json_object_set_new(j, "consumed_samples", ci->consumed >= 0 ? json_integer(ci->consumed) : json_null());
		json_object_set_new(j, "world_size", ci->world_size >= 0 ? json_integer(ci->world_size) : json_null());
		json_object_set_new(j, "zero_stage", ci->zero_stage >= 0 ? json_integer(ci->zero_stage) : json_null());
		json_object_set_new(j, "dtype", json_string(ci->dtype));
		v = ci->config_json ? json_loads(ci->config_json, 0, NULL) : NULL;
		json_object_set_new(j, "config", v ? v : (ci->config_json ? json_string(ci->config_json) : json_null()));
		v = ci->model_json ? json_loads(ci->model_json, 0, NULL) : NULL;
		json_object_set_new(j, "model", v ? v : (ci->model_json ? json_string(ci->model_json) : json_null()));
		for (int i = 0; i < ci->nt; i++) {
			json_t *sh = json_array();
			for (int d = 0; d < ci->t[i].ndim; d++)
				json_array_append_new(sh, json_integer(ci->t[i].shape[d]));
			json_array_append_new(ts, json_pack("{s:s, s:o, s:s, s:s}", "name", ci->t[i].name, "shape", sh,
							    "dtype", ci->t[i].dtype, "checksum", ci->t[i].status));
		}
		json_object_set_new(j, "tensors", ts);
		json_object_set_new(j, "bad_checksums", json_integer(ci->nbad));
		if (ci->verified) {
			json_object_set_new(j, "manifest", json_boolean(ci->manifest));
			json_object_set_new(j, "missing", json_integer(ci->nmissing));
		}
		json_dumpf(j, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		fputc('\n', out);
		json_decref(j);
		return;
	}
	fprintf(out, "# %s\n", ci->path);
	fprintf(out, "format       %s\n", ci->format);
	if (ci->tag[0])
		fprintf(out, "tag          %s\n", ci->tag);
	if (ci->step >= 0)
		fprintf(out, "step         %lld\n", (long long)ci->step);
	if (ci->consumed >= 0)
		fprintf(out, "consumed     %lld samples\n", (long long)ci->consumed);
	if (ci->world_size >= 0)
		fprintf(out, "world size   %d (at save)\n", ci->world_size);
	if (ci->zero_stage >= 0)
		fprintf(out, "zero stage   %d (at save)\n", ci->zero_stage);
	fprintf(out, "dtype        %s\n", ci->dtype);
	if (ci->config_json)
		fprintf(out, "config       %s\n", ci->config_json);
	if (ci->model_json) {
		json_t *m = json_loads(ci->model_json, 0, NULL);
		char *c = m ? json_dumps(m, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
		fprintf(out, "model        %s\n", c ? c : ci->model_json);
		free(c);
		json_decref(m);
	}
	fprintf(out, "# %-52s %-16s %-9s %s\n", "tensor", "shape", "dtype", "checksum");
	for (int i = 0; i < ci->nt; i++) {
		char sh[64];
		FILE *m = fmemopen(sh, sizeof(sh), "w");
		if (m) {
			print_shape(m, &ci->t[i]);
			fclose(m);
		} else {
			sh[0] = 0;
		}
		fprintf(out, "  %-52s %-16s %-9s %s\n", ci->t[i].name, sh, ci->t[i].dtype, ci->t[i].status);
	}
	fprintf(out, "# %d tensors, %d bad checksums\n", ci->nt - ci->nmissing, ci->nbad);
	if (!ci->verified)
		return;
	if (ci->manifest)
		fprintf(out, "# manifest: every byte of state.h5 checked\n");
	else
		fprintf(out, "# manifest: none (an older dstk's checkpoint): its HDF5 metadata has no checksum\n");
	if (ci->no_model)
		fprintf(out, "# contents: not checked (no model JSON: not a model checkpoint)\n");
	else if (ci->nmissing)
		fprintf(out, "# contents: %d missing or of another shape (MISSING above)\n", ci->nmissing);
	else
		fprintf(out, "# contents: everything a %s reads is there\n",
			strcmp(ci->format, "weights") ? "resume" : "load of the weights");
}

/* inspect of a safetensors or llm.c input: the file's tensors seen as dstk's. */
static int info_source(struct ds_csrc *s, struct ds_cinfo *ci, struct ds_err *err)
{
	int n = ds_gpt_num_tensors(s->model);
	memset(ci, 0, sizeof(*ci));
	ci->format = s->kind;
	snprintf(ci->path, sizeof(ci->path), "%s", s->path);
	ci->step = ci->consumed = -1;
	ci->world_size = ci->zero_stage = -1;
	snprintf(ci->dtype, sizeof(ci->dtype), "float32");
	ci->model_json = strdup(s->model_json);
	ci->t = calloc((size_t)n, sizeof(*ci->t));
	if (!ci->t || !ci->model_json)
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	for (int i = 0; i < n; i++) {
		const struct ds_gpt_tensor *t = ds_gpt_tensor(s->model, i);
		snprintf(ci->t[i].name, sizeof(ci->t[i].name), "%s", t->name);
		ci->t[i].ndim = t->ndim;
		ci->t[i].shape[0] = t->shape[0];
		ci->t[i].shape[1] = t->shape[1];
		ci->t[i].dtype = "float32";
		ci->t[i].status = "none";
	}
	ci->nt = n;
	return 0;
}

/* ---- detection and run -------------------------------------------------- */

static int detect(const char *path, struct ds_err *err)
{
	unsigned char b[16] = { 0 };
	char p[4096];
	struct stat st;
	int fd;
	ssize_t n;
	if (stat(path, &st) != 0)
		return ds_err_set(err, DS_EINVAL, "%s: %s", path, strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		snprintf(p, sizeof(p), "%s/model.safetensors", path);
		if (access(p, F_OK) == 0)
			return DS_FMT_SAFETENSORS;
		snprintf(p, sizeof(p), "%s/model.safetensors.index.json", path);
		if (access(p, F_OK) == 0)
			return DS_FMT_SAFETENSORS;
		return DS_FMT_CKPT;   /* SAVE dir or tag dir: the checkpoint reader says if not */
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ds_err_set(err, DS_EINVAL, "%s: cannot open: %s", path, strerror(errno));
	n = read(fd, b, sizeof(b));
	close(fd);
	if (n >= 8 && !memcmp(b, "\x89HDF\r\n\x1a\n", 8))
		return DS_FMT_CKPT;
	if (n >= 4 && b[0] == (DS_LLMC_MAGIC & 255) && b[1] == ((DS_LLMC_MAGIC >> 8) & 255) &&
	    b[2] == ((DS_LLMC_MAGIC >> 16) & 255) && b[3] == ((DS_LLMC_MAGIC >> 24) & 255))
		return DS_FMT_LLMC;
	if ((n >= 9 && b[8] == '{') || (strlen(path) > 11 && !strcmp(path + strlen(path) - 11, ".index.json")))
		return DS_FMT_SAFETENSORS;
	return ds_err_set(err, DS_EINVAL, "%s: not a dstk checkpoint, safetensors or llm.c model file (give "
			  "--from if it is one)", path);
}

static int open_source(int fmt, const struct ds_convert_opts *o, struct ds_csrc *s, struct ds_err *err)
{
	switch (fmt) {
	case DS_FMT_SAFETENSORS: return ds_csrc_open_safetensors(s, o->input, o->hf_config, o->approx_gelu, err);
	case DS_FMT_LLMC: return ds_csrc_open_llmc(s, o->input, err);
	case DS_FMT_CKPT: return ds_csrc_open_ckpt(s, o->input, err);
	default: return ds_err_set(err, DS_EINVAL, "--from %s: not an input format", ds_convert_fmt_name(fmt));
	}
}

/* Peak RSS of this process image: VmHWM, since getrusage's ru_maxrss
 * carries the pre-exec peak of a fat parent (a Python driver, say). */
static uint64_t peak_rss(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	unsigned long long kb = 0;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb ? kb * 1024 : ds_mem_peak_rss();
}

static void summary(const struct ds_convert_opts *o, const struct ds_csrc *s, const struct ds_convert_result *r,
		    FILE *out)
{
	if (o->json) {
		json_t *j = json_pack("{s:s, s:s, s:s, s:s, s:i, s:I, s:I, s:I}", "input", s->path, "from", s->kind,
				      "output", o->output, "to", ds_convert_fmt_name(o->to), "tensors", r->ntensors,
				      "bytes", (json_int_t)r->bytes_out, "largest_tensor_bytes",
				      (json_int_t)r->largest_bytes, "peak_rss_bytes", (json_int_t)r->peak_rss);
		json_dumpf(j, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		fputc('\n', out);
		json_decref(j);
		return;
	}
	fprintf(out, "%s: %d tensors, %llu bytes (%s -> %s); largest tensor %llu bytes, peak RSS %llu bytes\n",
		o->output, r->ntensors, (unsigned long long)r->bytes_out, s->kind, ds_convert_fmt_name(o->to),
		(unsigned long long)r->largest_bytes, (unsigned long long)r->peak_rss);
}

int ds_convert_run(const struct ds_convert_opts *o, FILE *out, struct ds_convert_result *res,
		   struct ds_err *err)
{
	struct ds_csrc s = { 0 };
	struct ds_cinfo ci = { 0 };
	int fmt = o->from, rc, dtype = o->dtype ? o->dtype : DS_FMT_FP32;
	int llmc_version = dtype == DS_FMT_BF16 ? DS_LLMC_V_BF16 : DS_LLMC_V_FP32;
	memset(res, 0, sizeof(*res));
	if (!o->input)
		return ds_err_set(err, DS_EINVAL, "no input given");
	if (fmt == DS_FMT_AUTO && (fmt = detect(o->input, err)) < 0)
		return fmt;
	if (fmt > DS_FMT_LLMC)
		return ds_err_set(err, DS_EINVAL, "--from %s: weights files are an output format; read them as "
				  "--from hdf5", ds_convert_fmt_name(fmt));
	if (o->cmd != DS_CONVERT_CONVERT) {
		if (fmt == DS_FMT_CKPT) {
			rc = ds_convert_info_ckpt(o->input, o->cmd == DS_CONVERT_VERIFY, &ci, err);
		} else if (o->cmd == DS_CONVERT_VERIFY) {
			rc = ds_err_set(err, DS_EINVAL, "%s: verify needs a dstk checkpoint (%s files carry no "
					"checksums)", o->input, ds_convert_fmt_name(fmt));
		} else if ((rc = open_source(fmt, o, &s, err)) == 0) {
			rc = info_source(&s, &ci, err);
		}
		if (rc == 0) {
			res->ntensors = ci.nt;
			res->bad = ci.nbad;
			ds_cinfo_print(&ci, o->json, out);
			if (ci.nbad) {
				int first = 0;
				while (first < ci.nt && strcmp(ci.t[first].status, "BAD"))
					first++;
				rc = ds_err_set(err, DS_ECHECK, "%s: %d dataset%s failed verification, first /%s (%s)",
						ci.path, ci.nbad, ci.nbad > 1 ? "s" : "",
						first < ci.nt ? ci.t[first].name : "?", ci.bad_msg);
			} else if (ci.nmissing) {
				rc = ds_err_set(err, DS_ECHECK, "%s: cannot be resumed from: %s", ci.path, ci.missing_msg);
			}
		}
		goto out;
	}
	if (!o->output) {
		rc = ds_err_set(err, DS_EINVAL, "no output given: use -o PATH");
		goto out;
	}
	if (o->to == DS_FMT_AUTO) {
		rc = ds_err_set(err, DS_EINVAL, "no output format: give --to hdf5|safetensors|llmc|fp32|fp16|bf16");
		goto out;
	}
	if (dtype != DS_FMT_FP32 && o->to != DS_FMT_SAFETENSORS && o->to != DS_FMT_LLMC) {
		rc = ds_err_set(err, DS_EINVAL, "--dtype applies to --to safetensors and llmc; for HDF5 weights "
				"use --to %s", ds_convert_fmt_name(dtype));
		goto out;
	}
	if (o->to == DS_FMT_LLMC && dtype == DS_FMT_FP16) {
		rc = ds_err_set(err, DS_EINVAL, "--dtype fp16: llm.c model files are fp32 (version 3) or bf16 "
				"(version 5)");
		goto out;
	}
	if ((rc = open_source(fmt, o, &s, err)) < 0)
		goto out;
	/* refuse an architecture the target cannot hold before any work */
	if (o->to == DS_FMT_SAFETENSORS &&
	    (rc = s.cfg.moe.enabled ? ds_convert_mixtral_check(&s.cfg, err) : ds_hf_arch_for(&s.cfg, err)) < 0) {
		ds_err_prefix(err, "%s: ", s.path);
		goto out;
	}
	if (o->to == DS_FMT_LLMC) {
		struct ds_llmc_header h;
		if ((rc = ds_llmc_header_for(&s.cfg, llmc_version, &h, err)) < 0) {
			ds_err_prefix(err, "%s: ", s.path);
			goto out;
		}
	}
	res->ntensors = ds_gpt_num_tensors(s.model);
	res->largest_bytes = ds_csrc_largest(&s);
	ds_log_info("%s (%s): %d tensors, %lld parameters -> %s %s", s.path, s.kind, res->ntensors,
		    (long long)ds_gpt_num_params(s.model), ds_convert_fmt_name(o->to), o->output);
	switch (o->to) {
	case DS_FMT_SAFETENSORS: rc = ds_convert_write_safetensors(&s, o->output, dtype, &res->bytes_out, err); break;
	case DS_FMT_LLMC: rc = ds_convert_write_llmc(&s, o->output, llmc_version, &res->bytes_out, err); break;
	case DS_FMT_CKPT: rc = ds_convert_write_ckpt(&s, o->output, &res->bytes_out, err); break;
	default: rc = ds_convert_write_weights(&s, o->output, o->to, &res->bytes_out, err); break;
	}
	res->peak_rss = peak_rss();
	if (rc == 0)
		summary(o, &s, res, out);
out:
	ds_cinfo_release(&ci);
	ds_csrc_release(&s);
	return rc;
}
