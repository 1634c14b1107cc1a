/* convert_llmc.c - llm.c model files as a tensor source and as an output
 * (layer-stacked in llm.c's order, fp32 version 3 or bf16 version 5), for
 * ds_convert_run.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/file.h"
#include "driver/convert_int.h"
#include "io/convert_out.h"
#include "io/llmc.h"
#include "util/half.h"
#include "util/mem.h"

/* llm.c model file. */
struct llmc_src {
	int fd;
	struct ds_llmc_header h;
	char *path;
};

static int llmc_read(void *ctx, const struct ds_gpt_tensor *t, float *dst, struct ds_err *err)
{
	struct llmc_src *x = ctx;
	int64_t off, n;
	int bf = x->h.version == DS_LLMC_V_BF16;
	if (ds_llmc_locate(&x->h, t->name, &off, &n) < 0)
		return ds_err_set(err, DS_EINTERNAL, "%s: no llm.c slot for '%s'", x->path, t->name);
	memset(dst, 0, (size_t)t->numel * sizeof(float));
	if (ds_pread_full(x->fd, dst, (size_t)n * (bf ? 2 : 4), DS_LLMC_HEADER_BYTES + (uint64_t)off * (bf ? 2 : 4)))
		return ds_err_set(err, DS_ECORRUPT, "%s: tensor '%s': short read: truncated?", x->path, t->name);
	if (bf) {
		/* widen in place from the back: bf16 element i sits in bytes 2i..2i+1 */
		const uint16_t *h = (const uint16_t *)dst;
		for (int64_t i = n - 1; i >= 0; i--)
			dst[i] = ds_bf16_to_fp32(h[i]);
	}
	return 0;
}

static void llmc_close(void *ctx)
{
	struct llmc_src *x = ctx;
	if (x->fd >= 0)
		close(x->fd);
	free(x->path);
	free(x);
}

int ds_csrc_open_llmc(struct ds_csrc *s, const char *path, struct ds_err *err)
{
	struct llmc_src *x = calloc(1, sizeof(*x));
	int32_t w[256];
	struct stat st;
	int rc;
	memset(s, 0, sizeof(*s));
	s->kind = "llm.c";
	snprintf(s->path, sizeof(s->path), "%s", path);
	if (!x || !(x->path = strdup(path))) {
		free(x);
		return ds_err_set(err, DS_ENOMEM, "out of memory");
	}
	x->fd = -1;
	s->ctx = x;
	s->read = llmc_read;
	s->close = llmc_close;
	x->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (x->fd < 0)
		return ds_err_set(err, DS_EINVAL, "%s: cannot open: %s", path, strerror(errno));
	if (fstat(x->fd, &st) != 0 || st.st_size < DS_LLMC_HEADER_BYTES || ds_pread_full(x->fd, w, sizeof(w), 0))
		return ds_err_set(err, DS_ECORRUPT, "%s: shorter than llm.c's 1024-byte header", path);
	if ((rc = ds_llmc_parse_header(w, (uint64_t)st.st_size, path, &x->h, err)) < 0)
		return rc;
	ds_llmc_config(&x->h, &s->cfg);
	return ds_csrc_setup(s, err);
}

/* ---- writer ------------------------------------------------------------- */

int ds_convert_write_llmc(struct ds_csrc *s, const char *path, int version, uint64_t *bytes,
			  struct ds_err *err)
{
	struct ds_llmc_header h;
	struct ds_outfile o = { 0 };
	int32_t w[256];
	float *a = NULL;
	char name[96];
	int rc, bf = version == DS_LLMC_V_BF16;
	if ((rc = ds_llmc_header_for(&s->cfg, version, &h, err)) < 0)
		return ds_err_prefix(err, "%s: ", s->path);
	/* one buffer: the largest tensor, or llm.c's wte if dstk pads less */
	{
		uint64_t wte = (uint64_t)h.Vp * h.C * 4;
		a = ds_alloc((ds_csrc_largest(s) > wte ? ds_csrc_largest(s) : wte) + 64);
	}
	if (!a) {
		rc = ds_err_set(err, DS_ENOMEM, "out of memory");
		goto out;
	}
	ds_llmc_encode_header(&h, w);
	if ((rc = ds_outfile_open(&o, path, err)) < 0 || (rc = ds_outfile_write(&o, w, sizeof(w), err)) < 0)
		goto out;
	for (int k = 0; k < ds_llmc_tensor_count(&h); k++) {
		int i;
		const struct ds_gpt_tensor *t;
		int64_t off, n, total;
		ds_llmc_tensor_name(&h, k, name, sizeof(name));
		if ((i = ds_gpt_find(s->model, name)) < 0) {
			rc = ds_err_set(err, DS_EINTERNAL, "no tensor '%s'", name);
			goto out;
		}
		t = ds_gpt_tensor(s->model, i);
		ds_llmc_locate(&h, name, &off, &n);
		if ((rc = s->read(s->ctx, t, a, err)) < 0)
			goto out;
		/* wte: rows [0, V) then zeros up to llm.c's Vp */
		total = k == 0 ? (int64_t)h.Vp * h.C : n;
		if (total > n)
			memset(a + n, 0, (size_t)(total - n) * sizeof(float));
		if (bf) {
			ds_convert_narrow_inplace(a, (size_t)total, 1);
			rc = ds_outfile_write(&o, a, (size_t)total * 2, err);
		} else {
			rc = ds_outfile_write(&o, a, (size_t)total * 4, err);
		}
		if (rc < 0)
			goto out;
		*bytes += (uint64_t)total * (bf ? 2 : 4);
	}
	rc = ds_outfile_commit(&o, err);
out:
	ds_outfile_abort(&o);
	ds_free(a);
	return rc;
}
