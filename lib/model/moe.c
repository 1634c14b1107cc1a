/* moe.c - one Mixture-of-Experts MLP forward and backward (moe.h).
 *
 * Shapes: N tokens, C width, E experts of the layer (El = E/ep here), cap
 * the capacity, F the MLP width and F2 its c_fc width (2F when gated).
 * Per kept activation set: the gate's input and probabilities, each
 * choice's expert, slot and weight, the experts' inputs and activations
 * and their returned outputs, and PR-MoE's residual MLP.  Tensor operations
 * go through the compute backend (compute.h); matrix products are fp32
 * (bf16 runs keep fp32 products here); a 16-bit run rounds
 * what a GPU stores in 16 bits (the experts' activations and outputs, the
 * layer's output, and their gradients), the gate staying fp32 as
 * DeepSpeed's.  Non-goals: top-k for k > 2, Tutel, expert tensor
 * parallelism.
 */
#include "model/moe.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compute/compute.h"
#include "util/half.h"
#include "util/mem.h"
#include "util/rng.h"

/* what one forward keeps for its backward */
struct set {
	int l, N, E, cap, train;
	double aux;
	float *xj, *jit;        /* (N,C) gate input and its jitter multipliers (Jitter only) */
	float *gates;           /* (N,E) */
	float *cnt1;            /* (E) first choices per expert (before dropping) */
	int32_t *idx, *loc;     /* (k,N) expert and slot of each choice; idx -1: dropped */
	int32_t *idx0;          /* (k,N) the choice before dropping */
	float *w, *g;           /* (k,N) weight and raw gate value (0 when dropped) */
	float *xe, *h, *a;      /* (El*ep*cap, C|F2|F) experts' inputs and activations */
	float *y;               /* (E*cap, C) expert outputs back in this rank's slots */
	float *ym;              /* (N,C) the experts' combined output (PR-MoE) */
	float *hr, *ar, *r;     /* (N,F2), (N,F), (N,C) residual MLP */
	float *coef;            /* (N,2) */
};

struct ds_moe_ws {
	struct ds_model_config m;
	int ep, ep_rank, nsets, C, F, F2, Emax, k, half;
	int64_t Nmax, capmax;
	struct set *sets;
	float *sbuf, *rbuf;     /* (Emax*capmax*max(C,..)) all-to-all send and receive */
	float *scr;             /* scratch: the gate's logits and counts, backward's dH and dA */
	int64_t scr_n;
	float *base;            /* the one allocation */
	size_t bytes;
	struct ds_moe_stats st;
	const struct ds_compute_ops *ops; /* compute backend (compute.h): cpu unless set */
};

enum { NOTR = 0, TRANS = 1 };   /* gemm's ta, tb */

static void rnd(const struct ds_moe_ws *w, float *x, int64_t n)
{
	if (w->half)
		w->ops->half_round(w->half, x, (size_t)n);
}

int64_t ds_moe_capacity(const struct ds_model_config *m, int l, int64_t N, int train)
{
	const int E = ds_moe_experts(m, l), k = m->moe.k;
	if (E < 2)
		return 0;
	/* DeepSpeed's _capacity: ceil((tokens / experts) * factor) in float32,
	 * the factor being a float32 tensor of cf (top-1) or cf * 2 (top-2) */
	const float f = (float)((train ? m->moe.capacity_factor : m->moe.eval_capacity_factor) * k);
	int64_t cap = (int64_t)ceilf((float)((double)N / E) * f);
	return cap < m->moe.min_capacity ? m->moe.min_capacity : cap;
}

/* the most slots an expert can need for Nmax tokens */
static int64_t cap_bound(const struct ds_model_config *m, int64_t Nmax)
{
	int64_t c = 0;
	for (int l = 0; l < m->num_layers; l++) {
		if (ds_moe_experts(m, l) < 2)
			continue;
		int64_t a = ds_moe_capacity(m, l, Nmax, 1), b = ds_moe_capacity(m, l, Nmax, 0);
		c = a > c ? a : c;
		c = b > c ? b : c;
	}
	if (!m->moe.drop_tokens && Nmax > c)
		c = Nmax;
	return c;
}

static int max_experts(const struct ds_model_config *m)
{
	int e = 0;
	for (int l = 0; l < m->num_layers; l++)
		e = ds_moe_experts(m, l) > e ? ds_moe_experts(m, l) : e;
	return e;
}

/* Lay the memory out (base NULL: only count); returns floats. */
static int64_t layout(struct ds_moe_ws *w, float *base)
{
	int64_t off = 0;
#define TAKE(p, n) do { int64_t n_ = ((int64_t)(n) + 15) & ~(int64_t)15; if (base) (p) = base + off; off += n_; } while (0)
	const int64_t N = w->Nmax, C = w->C, E = w->Emax, S = E * w->capmax, k = w->k;
	const int jit = w->m.moe.noisy_gate_policy == DS_MOE_NOISE_JITTER, res = w->m.moe.use_residual;
	float *d;
	for (int i = 0; i < w->nsets; i++) {
		struct set tmp, *s = base ? &w->sets[i] : &tmp;
		if (jit) {
			TAKE(s->xj, N * C);
			TAKE(s->jit, N * C);
		}
		TAKE(s->gates, N * E);
		TAKE(s->cnt1, E);
		TAKE(d, 5 * k * N);   /* idx, loc, idx0 (int32), w, g */
		if (base) {
			s->idx = (int32_t *)(void *)d;
			s->loc = s->idx + k * N;
			s->idx0 = s->loc + k * N;
			s->w = (float *)(void *)(s->idx0 + k * N);
			s->g = s->w + k * N;
		}
		TAKE(s->xe, S * C);
		TAKE(s->h, S * w->F2);
		TAKE(s->a, S * w->F);
		TAKE(s->y, S * C);
		if (res) {
			TAKE(s->ym, N * C);
			TAKE(s->hr, N * w->F2);
			TAKE(s->ar, N * w->F);
			TAKE(s->r, N * C);
			TAKE(s->coef, N * 2);
		}
	}
	const int64_t SN = S > N ? S : N;   /* the exchange buffers also hold (N, C) */
	TAKE(w->sbuf, SN * C);
	TAKE(w->rbuf, SN * C);
	int64_t sc = S * w->F2 + S * w->F;   /* backward's dH and dA */
	if (N * (E + 4) + 4 * E > sc)
		sc = N * (E + 4) + 4 * E;
	if (N * (C + k) > sc)
		sc = N * (C + k);
	if (res && N * (w->F2 + w->F + C) > sc)
		sc = N * (w->F2 + w->F + C);
	TAKE(w->scr, sc);
	if (!base)
		w->scr_n = sc;
#undef TAKE
	return off;
}

static void init_dims(struct ds_moe_ws *w, const struct ds_model_config *m, int ep, int64_t Nmax, int sets)
{
	w->m = *m;
	w->ep = ep;
	w->nsets = sets;
	w->C = m->hidden_size;
	w->F = m->intermediate_size > 0 ? m->intermediate_size : 4 * m->hidden_size;
	w->F2 = ds_activation_gated(m->activation) ? 2 * w->F : w->F;
	w->Emax = max_experts(m);
	w->k = m->moe.k;
	w->Nmax = Nmax;
	w->capmax = cap_bound(m, Nmax);
}

size_t ds_moe_ws_bytes_for(const struct ds_model_config *m, int ep, int64_t Nmax, int sets)
{
	if (!m->moe.enabled)
		return 0;
	struct ds_moe_ws w;
	memset(&w, 0, sizeof w);
	init_dims(&w, m, ep, Nmax, sets);
	return (size_t)layout(&w, NULL) * sizeof(float);
}

int ds_moe_ws_create(struct ds_moe_ws **out, const struct ds_model_config *m, int ep, int ep_rank, int64_t Nmax,
		     int sets, int half, struct ds_err *err)
{
	*out = NULL;
	if (!m->moe.enabled || sets < 1 || Nmax < 1 || ep < 1 || ep_rank < 0 || ep_rank >= ep)
		return ds_err_set(err, DS_EINVAL, "moe: workspace for %d sets of %lld tokens at rank %d of %d", sets,
				  (long long)Nmax, ep_rank, ep);
	struct ds_moe_ws *w = calloc(1, sizeof *w);
	if (!w)
		return ds_err_set(err, DS_ENOMEM, "moe: out of memory");
	init_dims(w, m, ep, Nmax, sets);
	w->ops = &ds_compute_cpu;
	w->ep_rank = ep_rank;
	w->half = half;
	w->sets = calloc((size_t)sets, sizeof *w->sets);
	int64_t n = layout(w, NULL);
	w->bytes = (size_t)n * sizeof(float);
	float *base = w->sets ? ds_alloc(w->bytes) : NULL;
	if (!base) {
		free(w->sets);
		free(w);
		return ds_err_set(err, DS_ENOMEM, "moe: out of memory for %zu bytes of expert activations", (size_t)n * 4);
	}
	memset(base, 0, w->bytes);
	w->base = base;
	layout(w, base);
	*out = w;
	return 0;
}

void ds_moe_ws_destroy(struct ds_moe_ws *w)
{
	if (!w)
		return;
	ds_free(w->base);
	free(w->sets);
	free(w);
}

size_t ds_moe_ws_bytes(const struct ds_moe_ws *w) { return w->bytes; }
void ds_moe_ws_set_compute(struct ds_moe_ws *w, const struct ds_compute_ops *ops) { w->ops = ops ? ops : &ds_compute_cpu; }
void ds_moe_stats_reset(struct ds_moe_ws *w) { memset(&w->st, 0, sizeof w->st); }
void ds_moe_stats_get(const struct ds_moe_ws *w, struct ds_moe_stats *s) { *s = w->st; }
double ds_moe_last_aux(const struct ds_moe_ws *w, int set) { return w->sets[set].aux; }
int64_t ds_moe_last_capacity(const struct ds_moe_ws *w, int set) { return w->sets[set].cap; }

const int32_t *ds_moe_last_route(const struct ds_moe_ws *w, int set, const float **weight)
{
	if (weight)
		*weight = w->sets[set].w;
	return w->sets[set].idx;
}

/* ---- random draws (header of moe.h) -------------------------------------- */

static void stream(const struct ds_moe_rand *r, int64_t s, int site, struct ds_rng *g)
{
	uint64_t sample = (uint64_t)(r->sample_offset + s / r->T);
	ds_rng_init(g, r->seed, r->step, (sample << 20) | ((uint64_t)(r->layer & 0xFFFF) << 4) | (uint64_t)site);
}

/* draw n per token: element (s % T) * n + j of the sample's stream */
static float draw(const struct ds_moe_rand *r, int64_t s, int site, int64_t n, int64_t j)
{
	struct ds_rng g;
	stream(r, s, site, &g);
	return ds_rng_uniform(&g, (uint64_t)((s % r->T) * n + j));
}

static float gumbel(const struct ds_moe_rand *r, int64_t s, int E, int e)
{
	if (r->gumbel)
		return r->gumbel[s * E + e];
	return -logf(-logf(draw(r, s, 5, E, e)));
}

/* ---- all-to-all ------------------------------------------------------------ */

static int exchange(struct ds_moe_ws *w, const struct ds_moe_a2a *a2a, const float *send, float *recv, int64_t count,
		    struct ds_err *err)
{
	w->st.a2a_floats += count * (w->ep - 1);
	if (w->ep == 1) {
		memcpy(recv, send, (size_t)count * sizeof(float));
		return 0;
	}
	if (!a2a || !a2a->fn)
		return ds_err_set(err, DS_EINVAL, "moe: expert parallelism needs an all-to-all");
	int rc = a2a->fn(a2a->ctx, send, recv, count);
	if (rc < 0)
		return ds_err_set(err, rc, "moe: the expert all-to-all failed");
	return 0;
}

/* ---- gating ---------------------------------------------------------------- */

static int argmax_row(const float *v, int E, int skip)
{
	int b = -1;
	for (int e = 0; e < E; e++)
		if (e != skip && (b < 0 || v[e] > v[b]))
			b = e;
	return b;
}

/* choices, capacity, slots and weights of set s for x (N,C); aux */
static int gate_forward(struct ds_moe_ws *w, struct set *s, const struct ds_moe_params *p, const float *x,
			const struct ds_moe_rand *r, const struct ds_moe_a2a *a2a, struct ds_err *err)
{
	const struct ds_moe_config *mc = &w->m.moe;
	const int64_t N = s->N, C = w->C;
	const int E = s->E, k = w->k;
	const float *xg = x;
	if (mc->noisy_gate_policy == DS_MOE_NOISE_JITTER && s->train) {
		/* multiplicative_jitter: x * uniform(1 - 1e-2, 1 + 1e-2) */
#pragma omp parallel for schedule(static)
		for (int64_t i = 0; i < N; i++)
			for (int64_t c = 0; c < C; c++) {
				float u = r->jitter ? r->jitter[i * C + c] : 0.99f + 0.02f * draw(r, i, 4, C, c);
				s->jit[i * C + c] = u;
				s->xj[i * C + c] = x[i * C + c] * u;
			}
		xg = s->xj;
	}
	/* logits (N,E) = xg @ gate^T; gates = softmax */
	float *logits = w->scr;
	w->ops->gemm(-1, NULL, NOTR, TRANS, (int)N, E, (int)C, 1.0f, xg, (int)C, p->gate, (int)C, 0.0f,
		    logits, E);
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < N; i++) {
		const float *z = logits + i * E;
		float *g = s->gates + i * E, mx = z[0], sum = 0;
		for (int e = 1; e < E; e++)
			mx = z[e] > mx ? z[e] : mx;
		for (int e = 0; e < E; e++)
			sum += g[e] = expf(z[e] - mx);
		for (int e = 0; e < E; e++)
			g[e] /= sum;
	}
	/* the choices */
	int32_t *i1 = s->idx0, *i2 = s->idx0 + N;
	const int rsample = k == 1 && s->train && mc->noisy_gate_policy == DS_MOE_NOISE_RSAMPLE;
	for (int64_t i = 0; i < N; i++) {
		const float *g = s->gates + i * E, *z = logits + i * E;
		if (rsample) {
			float *zn = w->scr + N * E;  /* one row */
			for (int e = 0; e < E; e++)
				zn[e] = z[e] + gumbel(r, i, E, e);
			i1[i] = argmax_row(zn, E, -1);
		} else {
			i1[i] = argmax_row(g, E, -1);
		}
		if (k == 2) {
			float *zn = w->scr + N * E;
			for (int e = 0; e < E; e++)
				zn[e] = mc->top2_2nd_expert_sampling ? z[e] + gumbel(r, i, E, e) : z[e];
			i2[i] = argmax_row(zn, E, i1[i]);
		}
	}
	/* load and aux: E * sum_e mean(gates[:,e]) * mean(first choice == e) */
	float *cnt2 = w->scr + N * E + E;   /* second choices per expert */
	memset(s->cnt1, 0, (size_t)E * sizeof(float));
	memset(cnt2, 0, (size_t)E * sizeof(float));
	for (int64_t i = 0; i < N; i++) {
		s->cnt1[i1[i]] += 1;
		if (k == 2)
			cnt2[i2[i]] += 1;
	}
	double aux = 0;
	for (int e = 0; e < E; e++) {
		double me = 0;
		for (int64_t i = 0; i < N; i++)
			me += s->gates[i * E + e];
		aux += (me / N) * (s->cnt1[e] / N);
	}
	s->aux = aux * E;
	/* the capacity */
	int64_t cap;
	if (mc->drop_tokens) {
		if (k == 1 && N < mc->min_capacity)
			return ds_err_set(err, DS_EINVAL, "moe: layer %d: %lld tokens per micro-batch, fewer than "
					  "moe.min_capacity %d (DeepSpeed asserts the same; lower min_capacity or raise the "
					  "micro batch)", s->l, (long long)N, mc->min_capacity);
		cap = ds_moe_capacity(&w->m, s->l, N, s->train);
	} else {
		float mx = 0;  /* the largest load, then over the expert-parallel group */
		for (int e = 0; e < E; e++)
			mx = s->cnt1[e] + cnt2[e] > mx ? s->cnt1[e] + cnt2[e] : mx;
		if (w->ep > 1) {
			float *sv = w->sbuf, *rv = w->rbuf;
			for (int q = 0; q < w->ep; q++)
				sv[q] = mx;
			DS_TRY(exchange(w, a2a, sv, rv, 1, err));
			w->st.a2a_floats -= w->ep - 1;   /* not an expert exchange */
			for (int q = 0; q < w->ep; q++)
				mx = rv[q] > mx ? rv[q] : mx;
		}
		cap = (int64_t)mx;
		if (k == 1 && cap > N)
			cap = N;
	}
	s->cap = (int)cap;
	/* slots: top-1 keeps per expert the cap tokens with the largest
	 * uniform draws (use_rts) or the first ones, in token order; top-2
	 * numbers first choices, then second choices after all first ones */
	int32_t *own = (int32_t *)(void *)(w->scr + N * E + 2 * E);   /* N: kept flag of choice 1 */
	if (k == 1) {
		for (int e = 0; e < E; e++) {
			int64_t n = (int64_t)s->cnt1[e];
			for (int64_t i = 0; i < N; i++)
				if (i1[i] == e)
					own[i] = n <= cap;
			if (n <= cap)
				continue;
			if (!mc->use_rts) {
				int64_t c = 0;
				for (int64_t i = 0; i < N; i++)
					if (i1[i] == e)
						own[i] = c++ < cap;
				continue;
			}
			/* the cap largest draws: a token is kept when fewer than cap
			 * tokens of e draw more (ties: the earlier token wins) */
			float *u = w->scr + N * E + 2 * E + N;   /* N draws */
			for (int64_t i = 0; i < N; i++)
				if (i1[i] == e)
					u[i] = r->rts ? r->rts[i * E + e] : draw(r, i, 6, E, e);
			for (int64_t i = 0; i < N; i++) {
				if (i1[i] != e)
					continue;
				int64_t above = 0;
				for (int64_t j = 0; j < N && above < cap; j++)
					above += i1[j] == e && (u[j] > u[i] || (u[j] == u[i] && j < i));
				own[i] = above < cap;
			}
		}
		float *fill = w->scr + N * E + E;   /* reuse cnt2: slots used per expert */
		memset(fill, 0, (size_t)E * sizeof(float));
		for (int64_t i = 0; i < N; i++) {
			const int e = i1[i];
			s->g[i] = s->gates[i * E + e];
			if (own[i]) {
				s->idx[i] = e;
				s->loc[i] = (int32_t)fill[e]++;
				s->w[i] = s->g[i];
			} else {
				s->idx[i] = -1;
				s->loc[i] = 0;
				s->w[i] = 0;
			}
		}
	} else {
		float *f1 = w->scr + N * E + 2 * E + N, *f2 = f1 + E;
		memset(f1, 0, 2 * (size_t)E * sizeof(float));
		const float eps = FLT_EPSILON;
		for (int64_t i = 0; i < N; i++) {
			const int e1 = i1[i], e2 = i2[i];
			const int64_t l1 = (int64_t)f1[e1]++, l2 = (int64_t)(f2[e2]++ + s->cnt1[e2]);
			const int k1 = l1 < cap, k2 = l2 < cap;
			const float g1 = k1 ? s->gates[i * E + e1] : 0, g2 = k2 ? s->gates[i * E + e2] : 0;
			float den = g1 + g2;
			den = den < eps ? eps : den;
			s->g[i] = g1;
			s->g[N + i] = g2;
			s->idx[i] = k1 ? e1 : -1;
			s->idx[N + i] = k2 ? e2 : -1;
			s->loc[i] = k1 ? (int32_t)l1 : 0;
			s->loc[N + i] = k2 ? (int32_t)l2 : 0;
			s->w[i] = g1 / den;
			s->w[N + i] = g2 / den;
		}
	}
	return 0;
}

/* ---- experts ----------------------------------------------------------- */

/* an expert's [c_fc.weight | c_fc.bias (use_bias_in_mlp) | c_proj.weight] */
static int64_t ebias(const struct ds_moe_ws *w) { return !w->m.no_bias_in_mlp ? w->F2 : 0; }
static int64_t expert_stride(const struct ds_moe_ws *w)
{
	return (int64_t)w->F2 * w->C + ebias(w) + (int64_t)w->C * w->F;
}

/* send (E, cap, C) of this rank's slots -> each local expert's rows
 * (ep * cap, C) in xe (or the reverse with back) */
static void to_experts(const struct ds_moe_ws *w, const struct set *s, const float *recv, float *xe, int back)
{
	const int El = s->E / w->ep;
	const int64_t blk = (int64_t)s->cap * w->C;
	for (int q = 0; q < w->ep; q++)
		for (int i = 0; i < El; i++) {
			float *a = xe + ((int64_t)i * w->ep + q) * blk;
			float *b = (float *)recv + ((int64_t)q * El + i) * blk;
			if (back)
				memcpy(b, a, (size_t)blk * sizeof(float));
			else
				memcpy(a, b, (size_t)blk * sizeof(float));
		}
}

int ds_moe_forward(struct ds_moe_ws *w, int set, int l, const struct ds_moe_params *p, const float *x, int64_t N,
		   int train, int recompute, const struct ds_moe_rand *r, const struct ds_moe_a2a *a2a, float *out,
		   struct ds_err *err)
{
	const int E = ds_moe_experts(&w->m, l);
	if (set < 0 || set >= w->nsets || N < 1 || N > w->Nmax || E < 2)
		return ds_err_set(err, DS_EINVAL, "moe: layer %d: set %d, %lld tokens outside the workspace", l, set,
				  (long long)N);
	struct set *s = &w->sets[set];
	const int64_t C = w->C, F = w->F, F2 = w->F2;
	const int k = w->k, El = E / w->ep;
	s->l = l;
	s->N = (int)N;
	s->E = E;
	s->train = train;
	DS_TRY(gate_forward(w, s, p, x, r, a2a, err));
	const int64_t cap = s->cap, S = (int64_t)E * cap, rows = (int64_t)w->ep * cap;
	/* dispatch: slot (e, c) of this rank's tokens */
	memset(w->sbuf, 0, (size_t)(S * C) * sizeof(float));
	for (int j = 0; j < k; j++)
		for (int64_t i = 0; i < N; i++) {
			const int e = s->idx[j * N + i];
			if (e >= 0)
				memcpy(w->sbuf + ((int64_t)e * cap + s->loc[j * N + i]) * C, x + i * C, (size_t)C * sizeof(float));
		}
	DS_TRY(exchange(w, a2a, w->sbuf, w->rbuf, (int64_t)El * cap * C, err));
	to_experts(w, s, w->rbuf, s->xe, 0);
	/* each local expert on its ep * cap rows */
	const int64_t es = expert_stride(w);
	for (int i = 0; i < El; i++) {
		const float *ew = p->experts + i * es, *eb = ebias(w) ? ew + F2 * C : NULL, *pw = ew + F2 * C + ebias(w);
		float *xe = s->xe + i * rows * C, *h = s->h + i * rows * F2, *a = s->a + i * rows * F;
		float *o = w->sbuf + i * rows * C;
		w->ops->bias_fill(h, eb, rows, (int)F2);
		w->ops->gemm(-1, NULL, NOTR, TRANS, (int)rows, (int)F2, (int)C, 1.0f, xe, (int)C, ew,
			    (int)C, 1.0f, h, (int)F2);
		rnd(w, h, rows * F2);
		w->ops->act_forward(a, h, rows, (int)F, w->m.activation, 0);
		rnd(w, a, rows * F);
		w->ops->gemm(-1, NULL, NOTR, TRANS, (int)rows, (int)C, (int)F, 1.0f, a, (int)F, pw, (int)F,
			    0.0f, o, (int)C);
		rnd(w, o, rows * C);
	}
	/* back to the tokens' ranks: y (E, cap, C) in this rank's slots */
	to_experts(w, s, w->rbuf, w->sbuf, 1);
	DS_TRY(exchange(w, a2a, w->rbuf, s->y, (int64_t)El * cap * C, err));
	float *ym = w->m.moe.use_residual ? s->ym : out;
#pragma omp parallel for schedule(static)
	for (int64_t i = 0; i < N; i++) {
		float *o = ym + i * C;
		memset(o, 0, (size_t)C * sizeof(float));
		for (int j = 0; j < k; j++) {
			const int e = s->idx[j * N + i];
			if (e < 0)
				continue;
			const float wt = s->w[j * N + i], *yv = s->y + ((int64_t)e * cap + s->loc[j * N + i]) * C;
			for (int64_t c = 0; c < C; c++)
				o[c] += wt * yv[c];
		}
	}
	if (w->m.moe.use_residual) {
		/* r = mlp(x) (no output bias); coef = softmax(x @ W^T + b) */
		w->ops->bias_fill(s->hr, p->fcb, N, (int)F2);
		w->ops->gemm(-1, NULL, NOTR, TRANS, (int)N, (int)F2, (int)C, 1.0f, x, (int)C, p->fcw,
			    (int)C, 1.0f, s->hr, (int)F2);
		rnd(w, s->hr, N * F2);
		w->ops->act_forward(s->ar, s->hr, N, (int)F, w->m.activation, 0);
		rnd(w, s->ar, N * F);
		w->ops->gemm(-1, NULL, NOTR, TRANS, (int)N, (int)C, (int)F, 1.0f, s->ar, (int)F, p->pw,
			    (int)F, 0.0f, s->r, (int)C);
		rnd(w, s->r, N * C);
		w->ops->bias_fill(s->coef, p->coefb, N, 2);
		w->ops->gemm(-1, NULL, NOTR, TRANS, (int)N, 2, (int)C, 1.0f, x, (int)C, p->coefw, (int)C,
			    1.0f, s->coef, 2);
#pragma omp parallel for schedule(static)
		for (int64_t i = 0; i < N; i++) {
			float *cf = s->coef + i * 2, mx = cf[0] > cf[1] ? cf[0] : cf[1];
			float a0 = expf(cf[0] - mx), a1 = expf(cf[1] - mx);
			cf[0] = a0 / (a0 + a1);
			cf[1] = a1 / (a0 + a1);
			for (int64_t c = 0; c < C; c++)
				out[i * C + c] = s->ym[i * C + c] * cf[0] + s->r[i * C + c] * cf[1];
		}
	}
	rnd(w, out, N * C);
	if (!recompute) {
		w->st.aux += s->aux;
		w->st.routed += N * k;
		for (int64_t i = 0; i < k * N; i++)
			w->st.dropped += s->idx[i] < 0;
	}
	return 0;
}

int ds_moe_backward(struct ds_moe_ws *w, int set, int l, const struct ds_moe_params *p, struct ds_moe_params *g,
		    const float *x, const float *dout, float daux, const struct ds_moe_a2a *a2a, float *dx,
		    struct ds_err *err)
{
	struct set *s = &w->sets[set];
	if (set < 0 || set >= w->nsets || s->l != l || s->N < 1)
		return ds_err_set(err, DS_EINVAL, "moe: layer %d: backward without its forward", l);
	const int64_t N = s->N, C = w->C, F = w->F, F2 = w->F2, cap = s->cap, rows = (int64_t)w->ep * cap;
	const int E = s->E, k = w->k, El = E / w->ep;
	const float *dy = dout;
	float *dyb = NULL;
	memset(dx, 0, (size_t)(N * C) * sizeof(float));
	if (w->m.moe.use_residual) {
		/* out = ym c0 + r c1: dym = dout c0 (into dx's memory later? keep
		 * it in scratch), dr = dout c1, dcoef via softmax */
		float *dr = w->scr, *dh = dr + N * C, *da = dh + N * F2;
		dyb = w->rbuf;   /* N*C <= S*C */
		float *dz = w->sbuf;  /* (N,2) */
		for (int64_t i = 0; i < N; i++) {
			const float *cf = s->coef + i * 2;
			double d0 = 0, d1 = 0;
			for (int64_t c = 0; c < C; c++) {
				const float go = dout[i * C + c];
				dyb[i * C + c] = go * cf[0];
				dr[i * C + c] = go * cf[1];
				d0 += (double)go * s->ym[i * C + c];
				d1 += (double)go * s->r[i * C + c];
			}
			const double dot = cf[0] * d0 + cf[1] * d1;
			dz[i * 2] = (float)(cf[0] * (d0 - dot));
			dz[i * 2 + 1] = (float)(cf[1] * (d1 - dot));
		}
		rnd(w, dyb, N * C);
		rnd(w, dr, N * C);
		/* coefficient: dW += dz^T x, db += sum dz, dx += dz W */
		w->ops->gemm(-1, NULL, TRANS, NOTR, 2, (int)C, (int)N, 1.0f, dz, 2, x, (int)C, 1.0f,
			    g->coefw, (int)C);
		w->ops->bias_backward(g->coefb, dz, N, 2);
		w->ops->gemm(-1, NULL, NOTR, NOTR, (int)N, (int)C, 2, 1.0f, dz, 2, p->coefw, (int)C,
			    1.0f, dx, (int)C);
		/* residual MLP */
		w->ops->gemm(-1, NULL, NOTR, NOTR, (int)N, (int)F, (int)C, 1.0f, dr, (int)C, p->pw,
			    (int)F, 0.0f, da, (int)F);
		w->ops->gemm(-1, NULL, TRANS, NOTR, (int)C, (int)F, (int)N, 1.0f, dr, (int)C, s->ar,
			    (int)F, 1.0f, g->pw, (int)F);
		rnd(w, da, N * F);
		w->ops->act_backward(dh, da, s->hr, N, (int)F, w->m.activation, 0);
		rnd(w, dh, N * F2);
		w->ops->gemm(-1, NULL, TRANS, NOTR, (int)F2, (int)C, (int)N, 1.0f, dh, (int)F2, x, (int)C,
			    1.0f, g->fcw, (int)C);
		if (g->fcb)
			w->ops->bias_backward(g->fcb, dh, N, (int)F2);
		w->ops->gemm(-1, NULL, NOTR, NOTR, (int)N, (int)C, (int)F2, 1.0f, dh, (int)F2, p->fcw,
			    (int)C, 1.0f, dx, (int)C);
		dy = dyb;
	}
	/* combine: dy (E, cap, C) slots <- w * dy; dw = <dy, y> */
	float *dw = w->scr;   /* (k,N) */
	float *dslot = w->sbuf;
	const int64_t S = (int64_t)E * cap;
	if (dyb) {  /* dyb lives in rbuf: move it out of the way of the exchange */
		float *t = w->scr + k * N;
		memcpy(t, dyb, (size_t)(N * C) * sizeof(float));
		dy = t;
	}
	memset(dslot, 0, (size_t)(S * C) * sizeof(float));
	for (int j = 0; j < k; j++)
		for (int64_t i = 0; i < N; i++) {
			const int e = s->idx[j * N + i];
			dw[j * N + i] = 0;
			if (e < 0)
				continue;
			const int64_t sl = ((int64_t)e * cap + s->loc[j * N + i]) * C;
			const float wt = s->w[j * N + i];
			double d = 0;
			for (int64_t c = 0; c < C; c++) {
				dslot[sl + c] = wt * dy[i * C + c];
				d += (double)dy[i * C + c] * s->y[sl + c];
			}
			dw[j * N + i] = (float)d;
		}
	rnd(w, dslot, S * C);
	/* dw sits in scratch the experts' backward reuses: keep a copy */
	float *dwk = malloc((size_t)(k * N) * sizeof(float));
	if (!dwk)
		return ds_err_set(err, DS_ENOMEM, "moe: out of memory");
	memcpy(dwk, dw, (size_t)(k * N) * sizeof(float));
	int rc = exchange(w, a2a, dslot, w->rbuf, (int64_t)El * cap * C, err);
	if (rc < 0)
		goto out;
	/* the experts' backward: dO (ep*cap, C) per local expert */
	float *dO = w->sbuf;   /* (El, rows, C): each local expert's rows */
	to_experts(w, s, w->rbuf, dO, 0);
	const int64_t es = expert_stride(w);
	float *dH = w->scr, *dA = dH + rows * F2;
	for (int i = 0; i < El; i++) {
		const float *ew = p->experts + i * es, *pw = ew + F2 * C + ebias(w);
		float *gw = g->experts + i * es, *gb = ebias(w) ? gw + F2 * C : NULL, *gp = gw + F2 * C + ebias(w);
		const float *xe = s->xe + i * rows * C, *h = s->h + i * rows * F2, *a = s->a + i * rows * F;
		float *d = dO + i * rows * C;
		w->ops->gemm(-1, NULL, NOTR, NOTR, (int)rows, (int)F, (int)C, 1.0f, d, (int)C, pw,
			    (int)F, 0.0f, dA, (int)F);
		w->ops->gemm(-1, NULL, TRANS, NOTR, (int)C, (int)F, (int)rows, 1.0f, d, (int)C, a, (int)F,
			    1.0f, gp, (int)F);
		rnd(w, dA, rows * F);
		w->ops->act_backward(dH, dA, h, rows, (int)F, w->m.activation, 0);
		rnd(w, dH, rows * F2);
		w->ops->gemm(-1, NULL, TRANS, NOTR, (int)F2, (int)C, (int)rows, 1.0f, dH, (int)F2, xe,
			    (int)C, 1.0f, gw, (int)C);
		if (gb)
			w->ops->bias_backward(gb, dH, rows, (int)F2);
		/* dxe overwrites d (its rows are used up) */
		w->ops->gemm(-1, NULL, NOTR, NOTR, (int)rows, (int)C, (int)F2, 1.0f, dH, (int)F2, ew,
			    (int)C, 0.0f, d, (int)C);
		rnd(w, d, rows * C);
	}
	to_experts(w, s, w->rbuf, dO, 1);
	if ((rc = exchange(w, a2a, w->rbuf, w->sbuf, (int64_t)El * cap * C, err)) < 0)
		goto out;
	/* dispatch backward: dx[i] += dslot of each kept choice */
	for (int j = 0; j < k; j++)
		for (int64_t i = 0; i < N; i++) {
			const int e = s->idx[j * N + i];
			if (e < 0)
				continue;
			const float *d = w->sbuf + ((int64_t)e * cap + s->loc[j * N + i]) * C;
			for (int64_t c = 0; c < C; c++)
				dx[i * C + c] += d[c];
		}
	/* the gate: dgates from the weights and from aux */
	float *dg = w->scr;   /* (N,E) */
	const float aux_w = daux * (float)E / (float)N;
	for (int64_t i = 0; i < N; i++)
		for (int e = 0; e < E; e++)
			dg[i * E + e] = aux_w * s->cnt1[e] / (float)N;
	if (k == 1) {
		for (int64_t i = 0; i < N; i++)
			if (s->idx[i] >= 0)
				dg[i * E + s->idx[i]] += dwk[i];
	} else {
		const float eps = FLT_EPSILON;
		for (int64_t i = 0; i < N; i++) {
			const float g1 = s->g[i], g2 = s->g[N + i], d1 = dwk[i], d2 = dwk[N + i];
			float dg1, dg2;
			if (g1 + g2 >= eps) {   /* w = g / (g1 + g2) */
				const float den = g1 + g2, t = (d1 * g1 + d2 * g2) / den;
				dg1 = (d1 - t) / den;
				dg2 = (d2 - t) / den;
			} else {                /* the clamped denominator is a constant */
				dg1 = d1 / eps;
				dg2 = d2 / eps;
			}
			if (s->idx[i] >= 0)
				dg[i * E + s->idx[i]] += dg1;
			if (s->idx[N + i] >= 0)
				dg[i * E + s->idx[N + i]] += dg2;
		}
	}
	/* softmax backward: dlogits = gates * (dg - <gates, dg>) */
	for (int64_t i = 0; i < N; i++) {
		const float *gt = s->gates + i * E;
		float *d = dg + i * E;
		double dot = 0;
		for (int e = 0; e < E; e++)
			dot += (double)gt[e] * d[e];
		for (int e = 0; e < E; e++)
			d[e] = gt[e] * (d[e] - (float)dot);
	}
	const int jit = w->m.moe.noisy_gate_policy == DS_MOE_NOISE_JITTER && s->train;
	const float *xg = jit ? s->xj : x;
	w->ops->gemm(-1, NULL, TRANS, NOTR, E, (int)C, (int)N, 1.0f, dg, E, xg, (int)C, 1.0f, g->gate,
		    (int)C);
	if (!jit) {
		w->ops->gemm(-1, NULL, NOTR, NOTR, (int)N, (int)C, E, 1.0f, dg, E, p->gate, (int)C, 1.0f,
			    dx, (int)C);
	} else {
		float *t = w->rbuf;   /* (N,C) */
		w->ops->gemm(-1, NULL, NOTR, NOTR, (int)N, (int)C, E, 1.0f, dg, E, p->gate, (int)C, 0.0f,
			    t, (int)C);
		for (int64_t i = 0; i < N * C; i++)
			dx[i] += t[i] * s->jit[i];
	}
	rnd(w, dx, N * C);
out:
	free(dwk);
	return rc;
}
