/* log.c - stdout step/eval lines, the progress bar, Python-style float text
 * and the wall_clock_breakdown line.  Pure formatting: nothing here prints.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "monitor/log.h"
#include "util/mem.h"

/* An snprintf cursor: appends while there is room and counts what the full
 * text needs, so callers get snprintf's contract for the whole line. */
struct put {
	char *buf;
	size_t n;
	size_t len;
};

static void put(struct put *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct put *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	size_t room = p->len < p->n ? p->n - p->len : 0;
	int k = vsnprintf(room ? p->buf + p->len : NULL, room, fmt, ap);
	va_end(ap);
	if (k > 0)
		p->len += (size_t)k;
}

static int put_end(struct put *p)
{
	if (p->n && p->len >= p->n)
		p->buf[p->n - 1] = '\0';
	else if (p->n && p->len == 0)
		p->buf[0] = '\0';
	return (int)p->len;
}

/* Loss scales are powers of two or integers; show them without decimals. */
static void put_scale(struct put *p, double v)
{
	if (isfinite(v) && v == floor(v) && fabs(v) < 1e18)
		put(p, " | loss_scale %.0f", v);
	else
		put(p, " | loss_scale %g", v);
}

int ds_monitor_step_line(char *buf, size_t n, const struct ds_monitor_step *s)
{
	struct put p = { buf, n, 0 };
	if (s->total_steps > 0)
		put(&p, "step %lld/%lld", s->step, s->total_steps);
	else
		put(&p, "step %lld", s->step);
	if (s->consumed_samples >= 0)
		put(&p, " | samples %lld", s->consumed_samples);
	put(&p, " | loss %.6f | lr %.3e", s->loss, s->lr);
	if (!(s->grad_norm < 0))
		put(&p, " | grad_norm %.4f", s->grad_norm);
	if (s->moe)
		put(&p, " | moe_loss %.6f | dropped %.4f", s->moe_loss, s->moe_dropped);
	if (s->fp16)
		put_scale(&p, s->loss_scale);
	if (s->fp16 || s->skipped)
		put(&p, " | skipped %lld", s->skipped);
	if (!(s->samples_per_s < 0))
		put(&p, " | samples/s %.1f", s->samples_per_s);
	if (!(s->tokens_per_s < 0))
		put(&p, " | tokens/s %.0f", s->tokens_per_s);
	if (!(s->tflops < 0))
		put(&p, " | TFLOPS %.3f", s->tflops);
	if (!(s->mfu < 0))
		put(&p, " | MFU %.2f", s->mfu);
	if (s->peak_rss_bytes > 0) {
		char b[32];
		put(&p, " | mem %s", ds_fmt_bytes(s->peak_rss_bytes, b, sizeof b));
	}
	return put_end(&p);
}

static int loss_line(char *buf, size_t n, const char *what, long long step, double loss)
{
	struct put p = { buf, n, 0 };
	put(&p, "%s step %lld | loss %.6f | ppl %.4f", what, step, loss, exp(loss));
	return put_end(&p);
}

int ds_monitor_eval_line(char *buf, size_t n, long long step, double loss)
{
	return loss_line(buf, n, "eval", step, loss);
}

int ds_monitor_test_line(char *buf, size_t n, long long step, double loss)
{
	return loss_line(buf, n, "test", step, loss);
}

static void put_hms(struct put *p, double sec)
{
	if (!(sec >= 0) || sec > 1e9) {
		put(p, "--:--");
		return;
	}
	long long t = (long long)(sec + 0.5);
	if (t >= 3600)
		put(p, "%lld:%02lld:%02lld", t / 3600, t / 60 % 60, t % 60);
	else
		put(p, "%lld:%02lld", t / 60, t % 60);
}

int ds_monitor_progress(char *buf, size_t n, long long done, long long total, double rate, int width)
{
	struct put p = { buf, n, 0 };
	if (width <= 0)
		width = 30;
	put(&p, "\r");
	if (total > 0) {
		long long d = done < 0 ? 0 : done > total ? total : done;
		int fill = (int)(d * width / total);
		put(&p, "[");
		for (int i = 0; i < width; i++)
			put(&p, "%c", i < fill ? '#' : '.');
		int digits = snprintf(NULL, 0, "%lld", total);
		put(&p, "] %*lld/%lld %3d%%", digits, done, total, (int)(d * 100 / total));
	} else {
		put(&p, "%lld", done);
	}
	if (rate > 0) {
		put(&p, " %.1f it/s eta ", rate);
		if (total > 0)
			put_hms(&p, done >= total ? 0 : (double)(total - done) / rate);
		else
			put(&p, "--:--");
	} else {
		put(&p, " eta --:--");
	}
	put(&p, "\033[K");
	return put_end(&p);
}

/* Python 3's float repr: the shortest round-tripping digits, fixed notation
 * for decimal exponents -4..15 (with ".0" when integral), else "1.5e+16". */
int ds_monitor_fmt_double(char *buf, size_t n, double v)
{
	struct put p = { buf, n, 0 };
	if (isnan(v)) {
		put(&p, "nan");
		return put_end(&p);
	}
	if (isinf(v)) {
		put(&p, "%s", v < 0 ? "-inf" : "inf");
		return put_end(&p);
	}
	char e[40];
	int prec = 1;
	for (; prec <= 17; prec++) {
		snprintf(e, sizeof e, "%.*e", prec - 1, v);
		if (strtod(e, NULL) == v)
			break;
	}
	/* e is "-d.ddde+XX": split into sign, digits and exponent */
	const char *s = e;
	int neg = *s == '-';
	if (neg)
		s++;
	char dig[20];
	int nd = 0;
	for (; *s && *s != 'e'; s++)
		if (*s != '.')
			dig[nd++] = *s;
	dig[nd] = '\0';
	int x = atoi(s + 1);
	while (nd > 1 && dig[nd - 1] == '0') /* %.Ne may pad; repr does not */
		dig[--nd] = '\0';
	if (v == 0)
		x = 0;
	if (neg)
		put(&p, "-");
	if (x < -4 || x >= 16) {
		put(&p, "%c", dig[0]);
		if (nd > 1)
			put(&p, ".%s", dig + 1);
		put(&p, "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
	} else if (x < 0) {
		put(&p, "0.");
		for (int i = 0; i < -x - 1; i++)
			put(&p, "0");
		put(&p, "%s", dig);
	} else {
		for (int i = 0; i <= x; i++)
			put(&p, "%c", i < nd ? dig[i] : '0');
		put(&p, ".%s", nd > x + 1 ? dig + x + 1 : "0");
	}
	return put_end(&p);
}

static const char *const wc_names[DS_WC_N] = { "fwd", "bwd", "bwd_inner", "bwd_allreduce", "step" };
static const char *const wc_tags[DS_WC_N] = {
	"Train/Samples/elapsed_time_ms_forward",
	"Train/Samples/elapsed_time_ms_backward",
	"Train/Samples/elapsed_time_ms_backward_inner",
	"Train/Samples/elapsed_time_ms_backward_allreduce",
	"Train/Samples/elapsed_time_ms_step",
};

void ds_monitor_wallclock_add(struct ds_monitor_wallclock *w, enum ds_monitor_wc_timer t, double seconds)
{
	if ((unsigned)t >= DS_WC_N)
		return;
	w->micro_ms[t] += seconds * 1e3;
	w->global_ms[t] += seconds * 1e3;
	w->used |= 1u << t;
}

int ds_monitor_wallclock_line(struct ds_monitor_wallclock *w, int microstep, char *buf, size_t n)
{
	struct put p = { buf, n, 0 };
	double *ms = microstep ? w->micro_ms : w->global_ms;
	put(&p, "time (ms)");
	for (int t = 0; t < DS_WC_N; t++) {
		if (!(w->used & (1u << t)))
			continue;
		put(&p, " | %s%s: %.2f", wc_names[t], microstep ? "_microstep" : "", ms[t]);
		ms[t] = 0;
	}
	return put_end(&p);
}

double ds_monitor_wallclock_ms(const struct ds_monitor_wallclock *w, enum ds_monitor_wc_timer t)
{
	return (unsigned)t < DS_WC_N ? w->global_ms[t] : 0;
}

const char *ds_monitor_wallclock_tag(enum ds_monitor_wc_timer t)
{
	return (unsigned)t < DS_WC_N ? wc_tags[t] : NULL;
}
