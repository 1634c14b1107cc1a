/* dataset.h - token datasets behind one interface, and the sample order.
 *
 * Three readers (DESIGN.md "Datasets"): raw bytes of a text file (vocab 256),
 * the Megatron/GPT-NeoX indexed dataset (prefix.bin + prefix.idx) and llm.c
 * token shards (spec/formats.md).  Every reader memory-maps its files and
 * presents one flat token stream: a Megatron dataset is its documents
 * concatenated in file order, llm.c shards are concatenated in sorted-glob or
 * list order.  Samples are then fixed windows over that stream (sampler below).
 */
#ifndef DS_IO_DATASET_H
#define DS_IO_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

enum ds_data_format {
	DS_DATA_AUTO = 0,     /* detect: prefix.idx -> megatron, llm.c magic -> llmc, else text */
	DS_DATA_TEXT = 1,     /* every byte a token, vocab 256 */
	DS_DATA_MEGATRON = 2, /* MMIDIDX .idx + .bin */
	DS_DATA_LLMC = 3      /* 256 x int32 header (20240520 v1 u16 | 20240801 v7 u32) + tokens */
};

struct ds_dataset;

/* "auto", "text", "megatron" or "llmc" to enum ds_data_format in *out.
 * Returns 0 or DS_EINVAL listing the names. */
int ds_data_format_parse(const char *name, int *out, struct ds_err *err);

/* A reader: designated initialisers in dataset_<name>.c (STYLE rules 12-13).
 * read fills out[0..n) with tokens [off, off+n) of the stream; the caller has
 * checked off + n <= num_tokens.  where names the file and byte offset of
 * token `off` for error messages. */
struct ds_dataset_ops {
	const char *name;
	int (*open)(struct ds_dataset *d, const char *path, struct ds_err *err);
	uint64_t (*num_tokens)(const struct ds_dataset *d);
	void (*read)(const struct ds_dataset *d, uint64_t off, size_t n, uint32_t *out);
	void (*where)(const struct ds_dataset *d, uint64_t off, const char **file, uint64_t *byte_off);
	uint64_t (*num_docs)(const struct ds_dataset *d);  /* documents (NULL: the format has no index of them) */
	void (*close)(struct ds_dataset *d);
};

/* Every reader, NULL-terminated (STYLE rule 13). */
extern const struct ds_dataset_ops *const ds_dataset_all[];

/* Open path with format (DS_DATA_AUTO detects).  path is a text file, a
 * Megatron prefix (or prefix.bin / prefix.idx), or for llm.c one shard, a
 * glob ("data/shard_*.bin") or a comma-separated list of shards.  Returns
 * 0 or DS_EINVAL (missing file) / DS_ECORRUPT (bad header, truncated);
 * the message names the file and byte offset.  Free with ds_dataset_destroy. */
int ds_dataset_open(struct ds_dataset **out, const char *path, int format, struct ds_err *err);
void ds_dataset_destroy(struct ds_dataset *d);  /* accepts NULL */

/* The bundled default corpus (share/data/devils-dictionary.txt): the
 * installed copy under the package data directory when it exists, else the
 * source tree's (an uninstalled build).  Static string. */
const char *ds_data_default_corpus(void);

/* Total tokens of the stream. */
uint64_t ds_dataset_num_tokens(const struct ds_dataset *d);
/* Reader name ("text", "megatron", "llmc") and the path as given (borrowed). */
const char *ds_dataset_format_name(const struct ds_dataset *d);
const char *ds_dataset_path(const struct ds_dataset *d);

/* Every token read from now on must be < vocab_size (0: no check). */
void ds_dataset_set_vocab(struct ds_dataset *d, uint64_t vocab_size);

/* Tokens [off, off+n) into out.  Returns 0, DS_EINVAL if the range is past
 * the end, or DS_EINVAL naming the file and offset of the first token
 * >= vocab_size. */
int ds_dataset_read(const struct ds_dataset *d, uint64_t off, size_t n, uint32_t *out, struct ds_err *err);
/* The same into int32 (token ids are < 2^31 once checked against the vocab). */
int ds_dataset_read_i32(const struct ds_dataset *d, uint64_t off, size_t n, int32_t *out, struct ds_err *err);

/* Documents in d (a Megatron .idx's sequence count, as NeoX's
 * weight_by_num_documents counts them): 0 or DS_EINVAL naming the file when
 * its format has no document index. */
int ds_dataset_num_docs(const struct ds_dataset *d, uint64_t *out, struct ds_err *err);

/* Scan the whole stream against the vocab set above (up-front validation,
 * a few hundred million tokens a second).  Returns 0 or the error of
 * ds_dataset_read. */
int ds_dataset_scan(const struct ds_dataset *d, struct ds_err *err);

/* A fingerprint of the stream for checkpoints: CRC-32C over the token
 * count and the first and last 4096 tokens (as uint32), so a resume can
 * notice that --data changed.  Returns 0 or the read error. */
int ds_dataset_fingerprint(const struct ds_dataset *d, uint32_t *out, struct ds_err *err);

/* ---- samples ----------------------------------------------------------
 * Window w of a dataset is tokens [w*T, w*T + T + 1): input = first T,
 * target = the same shifted by one.  Windows do not overlap except for that
 * one shared boundary token, and cross document boundaries (as Megatron's
 * GPT dataset does, without its document shuffle); a dataset of n tokens has
 * floor((n - 1) / T) windows and the tail is dropped.  A sampler covers
 * windows [first, first + count) and orders them per epoch by a
 * pseudo-random permutation keyed by (seed, stream, epoch) through the
 * Philox RNG (a Feistel network, so any rank maps a global sample index in
 * O(1) without materialising the permutation):
 *     global sample g -> epoch g / count, window first + perm_epoch(g % count).
 */
struct ds_blend;

struct ds_sampler {
	const struct ds_dataset *ds;  /* borrowed (a blend: its first part's, for messages) */
	const struct ds_blend *blend; /* borrowed; non-NULL: sample g comes from the blend (below) */
	uint64_t seq_length;          /* T */
	uint64_t first, count;        /* windows [first, first + count) */
	uint64_t seed;
	uint32_t stream;              /* DS_SPLIT_*: keeps train/valid orders independent */
	int shuffle;                  /* 0: epoch order is window order */
};

enum { DS_SPLIT_TRAIN = 0, DS_SPLIT_VALID = 1, DS_SPLIT_TEST = 2 };

/* Windows of length T in d: floor((n-1)/T); DS_EINVAL (naming the file,
 * its token count and the T+1 needed) when that is 0. */
int ds_dataset_num_windows(const struct ds_dataset *d, uint64_t seq_length, uint64_t *out, struct ds_err *err);

/* Megatron's train/valid/test split of n windows: "949,50,1" (or with '/')
 * weights, normalised, rounded half-to-even and the rounding excess taken off
 * every boundary, as Megatron's get_train_valid_test_split_.  Fills
 * begin[3]/end[3].  Returns 0 or DS_EINVAL naming the string. */
int ds_data_split_parse(const char *split, uint64_t n, uint64_t begin[3], uint64_t end[3], struct ds_err *err);

/* Initialise a sampler over windows [first, first + count) of d (count 0:
 * an empty split, whose ds_sampler_get is DS_EINVAL).  Shuffles by default.
 * Returns 0 or DS_EINVAL (too short, range past the windows). */
int ds_sampler_init(struct ds_sampler *s, const struct ds_dataset *d, uint64_t seq_length,
		    uint64_t first, uint64_t count, uint64_t seed, uint32_t stream, struct ds_err *err);

/* Map global sample g to its epoch and window index (in the dataset; a
 * blend's sampler: in the dataset of the part g comes from). */
void ds_sampler_locate(const struct ds_sampler *s, uint64_t g, uint64_t *epoch, uint64_t *window);

/* Tokens of global sample g: out[0..T] (T + 1 tokens: x = out[0..T),
 * y = out[1..T]). */
int ds_sampler_get(const struct ds_sampler *s, uint64_t g, int32_t *out, struct ds_err *err);

/* The permutation itself, exposed for tests: a bijection of [0, n) keyed by
 * (seed, stream, epoch). */
uint64_t ds_data_permute(uint64_t i, uint64_t n, uint64_t seed, uint32_t stream, uint64_t epoch);

/* ---- blends -------------------------------------------------------------
 * Several samplers ("parts") mixed by weight, as Megatron's and GPT-NeoX's
 * BlendableDataset mixes datasets: blend sample i is sample k_i of part
 * d_i, where d_i is the part furthest behind its share (helpers.cpp
 * build_blending_indices: the largest w_d x max(i, 1) - drawn_d, the first
 * part on a tie) and k_i the number of samples drawn from d_i before i.
 * The sequence depends only on the weights, so it is the same for any
 * world size or micro-batch split.  After `size` samples (the sum of the
 * parts' counts below) the sequence repeats, each part continuing where it
 * stopped (its own sampler goes on into its next epochs).  Memory: one
 * row of counts per 256 samples, the sequence is replayed from there.
 */

/* NeoX's get_normalized_weights_and_num_samples: norm[d] = w[d] / sum(w),
 * count[d] = ceil(total x norm[d] x 1.005) (count NULL: not wanted).
 * DS_EINVAL when a weight is negative or not finite, or they sum to 0. */
int ds_blend_weights(const double *w, int n, uint64_t total, double *norm, uint64_t *count, struct ds_err *err);

/* NeoX's weights_by_num_docs: p_d = docs_d / sum, q_d = p_d^alpha
 * normalised, w_d = q_d (1 - p_d) normalised (one part: 1). */
void ds_blend_weights_by_docs(const uint64_t *docs, int n, double alpha, double *w);

/* The first `size` entries of the sequence, for tests and reports:
 * part[i] (may be NULL) and sample[i] (may be NULL). w as normalised. */
void ds_blend_sequence(const double *w, int n, uint64_t size, int *part, uint64_t *sample);

/* A blend of parts[0..n) (copied) with weights w (normalised inside, as
 * BlendableDataset normalises again) over `size` samples; count[0..n)
 * (may be NULL) is what ds_blend_part reports.  Returns 0, DS_EINVAL (bad
 * weights, n outside [1, 255], size 0) or DS_ENOMEM. */
int ds_blend_create(struct ds_blend **out, const struct ds_sampler *parts, const double *w, const uint64_t *count,
		    int n, uint64_t size, struct ds_err *err);
void ds_blend_destroy(struct ds_blend *b);  /* accepts NULL */

/* Part and that part's sample index of blend sample g. */
void ds_blend_locate(const struct ds_blend *b, uint64_t g, int *part, uint64_t *k);
/* Samples drawn from each part among blend samples [0, g): drawn[0..n). */
void ds_blend_drawn(const struct ds_blend *b, uint64_t g, uint64_t *drawn);

int ds_blend_num_parts(const struct ds_blend *b);
uint64_t ds_blend_size(const struct ds_blend *b);
/* Part i: its sampler, normalised weight and count (the samples the
 * blend's size assumes it gives). */
const struct ds_sampler *ds_blend_part(const struct ds_blend *b, int i, double *weight, uint64_t *count);

/* A sampler drawing from b (count = its size). */
void ds_sampler_blend(struct ds_sampler *s, const struct ds_blend *b);

/* ---- train / valid / test -------------------------------------------
 * Each of --data, --valid-data and --test-data is a path, or a blend in
 * Megatron's --data-path form "W1 PATH1 W2 PATH2 ..." (whitespace between,
 * the first word a number).  Without --valid-data every train dataset is
 * split by --split and the blends are of the same parts of each; the
 * parts' counts come from the samples the run draws (samples[], as NeoX's
 * train_iters x train_batch_size), or when that is unknown from one epoch
 * of every part.  Every part of a blend uses the same permutation keys
 * as a dataset alone (as NeoX seeds each dataset alike), so a blend whose
 * weight is all on its first dataset draws that dataset's samples in the
 * same order as --data alone would.
 */
struct ds_data_opts {
	const char *path;        /* --data */
	const char *valid_path;  /* --valid-data, or NULL: split path instead */
	const char *test_path;   /* --test-data, or NULL: the split's test part (none with valid_path) */
	const char *split;       /* "969,30,1" when NULL (Megatron's default) */
	int format;              /* enum ds_data_format, every dataset */
	uint64_t seq_length;     /* T */
	uint64_t vocab_size;     /* tokens must be < this (0: no check) */
	uint64_t seed;
	uint64_t scan_limit;     /* scan up front when the stream has fewer tokens; 0: 1<<28 */
	uint64_t samples[3];     /* samples the run draws from train/valid/test (0: unknown) */
	int weight_by_docs;      /* blend weights from document counts (NeoX's weight_by_num_documents) */
	double alpha;            /* its weighted_sampler_alpha */
};

struct ds_data {
	struct ds_dataset *train_ds, *valid_ds;  /* the first train / valid dataset (valid_ds NULL when split) */
	struct ds_sampler train, valid, test;    /* count 0: that part is empty */
	struct ds_blend *blend[3];               /* train/valid/test blends (NULL: one dataset) */
	struct ds_dataset **ds;                  /* every dataset opened (owned) */
	int nds;
};

/* Open the datasets and build the samplers.  A train part of 0 windows is
 * DS_EINVAL naming the file and sizes; a bad blend (an odd word count, a
 * weight that is not a non-negative number) DS_EINVAL naming it.  Release
 * with ds_data_release. */
int ds_data_open(struct ds_data *dd, const struct ds_data_opts *o, struct ds_err *err);
void ds_data_release(struct ds_data *dd);

#endif
