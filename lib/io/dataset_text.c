/* dataset_text.c - a text file as a token stream: every byte is a token
 * (vocabulary 256), the bundled default corpus's reader. */
#include "io/dataset_int.h"

#include <stdlib.h>

static int text_open(struct ds_dataset *d, const char *path, struct ds_err *err)
{
	struct ds_dataset_map *m = calloc(1, sizeof *m);
	int rc;
	if (!m)
		return ds_err_set(err, DS_ENOMEM, "%s: out of memory", path);
	rc = ds_dataset_map_open(m, path, err);
	if (rc < 0) {
		free(m);
		return rc;
	}
	d->priv = m;
	return 0;
}

static uint64_t text_num_tokens(const struct ds_dataset *d)
{
	return ((const struct ds_dataset_map *)d->priv)->size;
}

static void text_read(const struct ds_dataset *d, uint64_t off, size_t n, uint32_t *out)
{
	const struct ds_dataset_map *m = d->priv;
	ds_dataset_tok_convert(DS_TOK_U8, m->p + off, n, out);
}

static void text_where(const struct ds_dataset *d, uint64_t off, const char **file, uint64_t *byte_off)
{
	*file = ((const struct ds_dataset_map *)d->priv)->file;
	*byte_off = off;
}

static void text_close(struct ds_dataset *d)
{
	if (d->priv)
		ds_dataset_map_close(d->priv);
	free(d->priv);
	d->priv = NULL;
}

const struct ds_dataset_ops ds_dataset_text_ops = {
	.name = "text",
	.open = text_open,
	.num_tokens = text_num_tokens,
	.read = text_read,
	.where = text_where,
	.close = text_close,
};
