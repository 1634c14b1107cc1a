/* convert_ckpt.c - the HDF5 side of ds-ckpt-convert: reading dstk
 * checkpoints as a tensor source, inspect/verify, weights-only files and
 * fresh checkpoints.  Waits for lib/io/ckpt.h (the checkpoint module);
 * until it lands every entry point says so.
 */
#include "io/convert_int.h"

int ds_csrc_open_ckpt(struct ds_csrc *s, const char *path, struct ds_err *err)
{
	(void)s;
	return ds_err_set(err, DS_ENOTSUP, "%s: HDF5 checkpoints need lib/io/ckpt (not built yet)", path);
}

int ds_convert_write_weights(struct ds_csrc *s, const char *path, int fmt, uint64_t *bytes, struct ds_err *err)
{
	(void)s; (void)fmt; (void)bytes;
	return ds_err_set(err, DS_ENOTSUP, "%s: HDF5 output needs lib/io/ckpt (not built yet)", path);
}

int ds_convert_write_ckpt(struct ds_csrc *s, const char *savedir, uint64_t *bytes, struct ds_err *err)
{
	(void)s; (void)bytes;
	return ds_err_set(err, DS_ENOTSUP, "%s: HDF5 output needs lib/io/ckpt (not built yet)", savedir);
}

int ds_convert_info_ckpt(const char *path, int verify, struct ds_cinfo *ci, struct ds_err *err)
{
	(void)verify; (void)ci;
	return ds_err_set(err, DS_ENOTSUP, "%s: HDF5 checkpoints need lib/io/ckpt (not built yet)", path);
}
