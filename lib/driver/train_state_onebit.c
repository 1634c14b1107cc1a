/* state_onebit.c - what a checkpoint keeps of a 1-bit optimizer beyond its
 * element states (exp_avg, exp_avg_sq, momentum_accumulator or
 * exp_avg_sq_fresh, stored per tensor like any optimizer's), so that a
 * resume at the same world size continues bit for bit:
 *
 *   /optimizer/onebit                  attributes: its counters and flags
 *                                      (step, freeze_key, ...), world_size
 *   /optimizer/onebit/<value>          OneBitLamb's per-tensor doubles, one
 *                                      attribute per tensor name
 *   /optimizer/worker_error/<unit>     f32 [world, padded]: rank r's row
 *   /optimizer/server_error/<unit>     f32 [padded]: rank r's chunk at r
 *   /optimizer/onebit_pad              OneBitLamb: the fused momentum's
 *                                      kept padding (the same on all ranks)
 *   /optimizer/rank_local/<state>/<name>  f32 [world, numel]: ZeroOneAdam
 *                                      after var_freeze_step, when ranks'
 *                                      weights, exp_avg and accumulator
 *                                      differ; /model holds rank 0's
 *
 * A unit is a tensor (named by it) or the fused model ("fused").  The error
 * feedback depends on the world size: resumed at another, it starts from
 * zero with a warning (DeepSpeed resets it at every load), and 0/1 Adam's
 * ranks continue from rank 0's weights and momentum.
 *
 * Test-only (tests/mpi/onebit.bats; never set in production):
 * DS_TEST_FAULT_ONEBIT_RESET=1 makes a load treat the error feedback as
 * saved at another world size, so that a resume must leave the continuous
 * run's losses.
 */
#include "driver/train_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/ckpt.h"
#include "util/log.h"

#define GRP "optimizer/onebit"

static const char *unit_name(struct ds_onebit *ob, const struct ds_gpt *m, int u)
{
	int t = ds_onebit_unit_tensor(ob, u);
	return t < 0 ? "fused" : ds_gpt_tensor(m, t)->name;
}

static const char *const local_states[] = { "model", "exp_avg", "momentum_accumulator" };

/* rank-local state k of tensor i: this rank's whole tensor */
static float *local_ptr(struct ds_engine *e, int k, int i)
{
	int64_t b, en;
	return k == 0 ? ds_engine_param_range(e, i, &b, &en)
		      : ds_engine_state(e, i, local_states[k], &b, &en);
}

void ds_train_save_onebit(struct ds_ckpt *ck, struct ds_engine *e, int W, int rank, struct ds_err *later)
{
	struct ds_onebit *ob = ds_engine_onebit(e);
	const struct ds_gpt *m = ds_engine_model(e);
	char name[DS_CKPT_NAME_MAX];
	if (!ob)
		return;
	struct ds_onebit_var v[DS_ONEBIT_MAX_VARS];
	int nv = ds_onebit_vars(ob, v);
	for (int k = 0; k < nv; k++) {
		if (v[k].i)
			ds_ckpt_attr_set_i64(ck, GRP, v[k].name, *v[k].i, later);
		else
			ds_ckpt_attr_set_f64(ck, GRP, v[k].name, *v[k].d, later);
	}
	ds_ckpt_attr_set_i64(ck, GRP, "world_size", W, later);
	const int rl = ds_onebit_rank_local(ob);
	ds_ckpt_attr_set_i64(ck, GRP, "rank_local", rl, later);
	for (int k = 0; k < ds_onebit_num_tensor_vars(ob); k++) {
		const double *d = ds_onebit_tensor_var(ob, k);
		snprintf(name, sizeof name, GRP "/%s", ds_onebit_tensor_var_name(ob, k));
		for (int i = 0; i < ds_gpt_num_tensors(m); i++)
			ds_ckpt_attr_set_f64(ck, name, ds_gpt_tensor(m, i)->name, d[i], later);
	}
	for (int u = 0; W > 1 && u < ds_onebit_num_units(ob); u++) {
		const uint64_t P = ds_onebit_unit_padded(ob, u), C = P / (uint64_t)W;
		const uint64_t wshape[2] = { (uint64_t)W, P };
		snprintf(name, sizeof name, "optimizer/worker_error/%s", unit_name(ob, m, u));
		ds_ckpt_tensor_create(ck, name, DS_CKPT_F32, 2, wshape, later);
		ds_ckpt_tensor_write(ck, name, (uint64_t)rank * P, (uint64_t)(rank + 1) * P, ds_onebit_worker_error(ob, u),
				     later);
		snprintf(name, sizeof name, "optimizer/server_error/%s", unit_name(ob, m, u));
		ds_ckpt_tensor_create(ck, name, DS_CKPT_F32, 1, &P, later);
		ds_ckpt_tensor_write(ck, name, (uint64_t)rank * C, (uint64_t)(rank + 1) * C, ds_onebit_server_error(ob, u),
				     later);
	}
	size_t npad = 0;
	const float *pad = ds_onebit_lamb_pad(ob, &npad);
	if (pad && npad) {
		uint64_t n = npad;
		ds_ckpt_tensor_create(ck, "optimizer/onebit_pad", DS_CKPT_F32, 1, &n, later);
		ds_ckpt_tensor_write(ck, "optimizer/onebit_pad", 0, rank == 0 ? n : 0, pad, later);
	}
	for (int k = 0; rl && k < 3; k++)
		for (int i = 0; i < ds_gpt_num_tensors(m); i++) {
			const struct ds_gpt_tensor *t = ds_gpt_tensor(m, i);
			const uint64_t shape[2] = { (uint64_t)W, (uint64_t)t->numel }, n = (uint64_t)t->numel;
			snprintf(name, sizeof name, "optimizer/rank_local/%s/%s", local_states[k], t->name);
			ds_ckpt_tensor_create(ck, name, DS_CKPT_F32, 2, shape, later);
			ds_ckpt_tensor_write(ck, name, (uint64_t)rank * n, (uint64_t)(rank + 1) * n, local_ptr(e, k, i), later);
		}
}

/* this rank's slice [b, e) of dataset name, when it has exactly numel
 * elements; 1 when read, 0 when absent or of another size */
static int read_if(struct ds_ckpt *ck, const char *name, uint64_t numel, uint64_t b, uint64_t en, float *dst,
		   int *rc, struct ds_err *err)
{
	struct ds_ckpt_tensor_info info;
	if (*rc < 0 || ds_ckpt_tensor_info(ck, name, &info, NULL) < 0 || info.dtype != DS_CKPT_F32 || info.numel != numel)
		return 0;
	*rc = ds_ckpt_tensor_read(ck, name, b, en, dst, err);
	return *rc == 0;
}

int ds_train_load_onebit(struct ds_ckpt *ck, struct ds_engine *e, int W, int rank, struct ds_err *err)
{
	struct ds_onebit *ob = ds_engine_onebit(e);
	const struct ds_gpt *m = ds_engine_model(e);
	char name[DS_CKPT_NAME_MAX];
	int rc = 0;
	if (!ob)
		return 0;
	if (!ds_ckpt_attr_has(ck, GRP, "initialize")) {
		if (rank == 0)
			ds_log_info("%s: no 1-bit optimizer state (saved with another optimizer): its first step sets it up",
				    ds_ckpt_file(ck));
		return 0;
	}
	struct ds_onebit_var v[DS_ONEBIT_MAX_VARS];
	int nv = ds_onebit_vars(ob, v);
	for (int k = 0; k < nv && rc == 0; k++)
		rc = v[k].i ? ds_ckpt_attr_get_i64(ck, GRP, v[k].name, v[k].i, err)
			    : ds_ckpt_attr_get_f64(ck, GRP, v[k].name, v[k].d, err);
	for (int k = 0; k < ds_onebit_num_tensor_vars(ob) && rc == 0; k++) {
		double *d = ds_onebit_tensor_var(ob, k);
		snprintf(name, sizeof name, GRP "/%s", ds_onebit_tensor_var_name(ob, k));
		for (int i = 0; i < ds_gpt_num_tensors(m) && rc == 0; i++)
			rc = ds_ckpt_attr_get_f64(ck, name, ds_gpt_tensor(m, i)->name, &d[i], err);
	}
	int64_t sw = 0, rl = 0;
	if (rc == 0)
		rc = ds_ckpt_attr_get_i64(ck, GRP, "world_size", &sw, err);
	if (rc == 0)
		rc = ds_ckpt_attr_get_i64(ck, GRP, "rank_local", &rl, err);
	if (rc < 0)
		return ds_err_prefix(err, "%s: 1-bit optimizer state: ", ds_ckpt_file(ck));
	/* the error feedback: this rank's row of the same world size */
	const char *fault = getenv("DS_TEST_FAULT_ONEBIT_RESET");
	const int same = sw == W && !(fault && !strcmp(fault, "1"));
	int reset = 0;
	for (int u = 0; W > 1 && u < ds_onebit_num_units(ob); u++) {
		const uint64_t P = ds_onebit_unit_padded(ob, u), C = P / (uint64_t)W;
		float *we = ds_onebit_worker_error(ob, u), *se = ds_onebit_server_error(ob, u);
		int ok = same;
		snprintf(name, sizeof name, "optimizer/worker_error/%s", unit_name(ob, m, u));
		ok = ok && read_if(ck, name, (uint64_t)W * P, (uint64_t)rank * P, (uint64_t)(rank + 1) * P, we, &rc, err);
		snprintf(name, sizeof name, "optimizer/server_error/%s", unit_name(ob, m, u));
		ok = ok && read_if(ck, name, P, (uint64_t)rank * C, (uint64_t)(rank + 1) * C, se, &rc, err);
		if (rc < 0)
			return rc;
		if (!ok) {
			memset(we, 0, P * sizeof(float));
			memset(se, 0, C * sizeof(float));
			reset = 1;
		}
	}
	size_t npad = 0;
	float *pad = ds_onebit_lamb_pad(ob, &npad);
	if (pad && npad && !(same && read_if(ck, "optimizer/onebit_pad", npad, 0, npad, pad, &rc, err))) {
		if (rc < 0)
			return rc;
		memset(pad, 0, npad * sizeof(float));
		reset = 1;
	}
	if (reset && sw > 1 && rank == 0 && same)  /* a file saved without them */
		ds_log_warn("%s: the 1-bit optimizer's error feedback is missing: it starts from zero", ds_ckpt_file(ck));
	else if (reset && sw > 1 && rank == 0)
		ds_log_warn("%s: the 1-bit optimizer's error feedback was saved at %lld ranks and this run has %d: it "
			    "starts from zero (DeepSpeed resets it at every load)", ds_ckpt_file(ck), (long long)sw, W);
	/* 0/1 Adam between synchronisations: each rank its own weights and
	 * momentum, or at another world size rank 0's (already in /model) */
	if (rl && sw == W) {
		for (int k = 0; k < 3; k++)
			for (int i = 0; i < ds_gpt_num_tensors(m); i++) {
				const uint64_t n = (uint64_t)ds_gpt_tensor(m, i)->numel;
				snprintf(name, sizeof name, "optimizer/rank_local/%s/%s", local_states[k],
					 ds_gpt_tensor(m, i)->name);
				if (!read_if(ck, name, (uint64_t)W * n, (uint64_t)rank * n, (uint64_t)(rank + 1) * n,
					     local_ptr(e, k, i), &rc, err))
					return rc < 0 ? rc : ds_err_set(err, DS_ECORRUPT, "%s: %s is missing or of the wrong "
									"size", ds_ckpt_file(ck), name);
			}
	} else if (rl && rank == 0) {
		ds_log_warn("%s: 0/1 Adam's ranks were between synchronisations at %lld ranks; every rank of this run "
			    "continues from rank 0's weights and momentum", ds_ckpt_file(ck), (long long)sw);
	}
	return 0;
}
