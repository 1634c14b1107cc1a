/* log.h - the text the trainer shows: the stdout step and eval lines, the
 * stderr progress bar and DeepSpeed's wall_clock_breakdown line.
 *
 * Every function here only formats into a caller buffer; the caller prints
 * (libds never writes to a stream).  Each returns the length that the full
 * text needs, like snprintf, so a short buffer truncates but never overflows.
 */
#ifndef DS_MONITOR_LOG_H
#define DS_MONITOR_LOG_H

#include <stddef.h>

/* One training step as the stdout line shows it (DESIGN.md "Observability"):
 *   step 120/1000 | samples 3840 | loss 2.345678 | lr 3.000e-04 | grad_norm 0.8123
 *   | loss_scale 65536 | skipped 0 | samples/s 812.3 | tokens/s 103974
 *   | TFLOPS 0.123 | MFU 0.71 | mem 1.2 GiB
 * Fields that a caller does not know are left out:
 *   total_steps <= 0        -> "step 120" without "/total"
 *   consumed_samples < 0    -> no "samples"
 *   grad_norm, samples_per_s, tokens_per_s, tflops, mfu < 0 -> that field
 *                              left out (NaN and inf are shown: they matter)
 *   peak_rss_bytes == 0     -> no "mem"
 * loss_scale is shown only when fp16 is set (it is 1 otherwise); skipped
 * (the cumulative count of skipped steps) when fp16 is set or it is nonzero,
 * so a bf16 or fp32 run that skips a non-finite step still says so. */
struct ds_monitor_step {
	long long step;             /* optimizer steps done, 1-based as logged */
	long long total_steps;      /* --train-iters; <= 0 unknown */
	long long consumed_samples; /* global samples so far; < 0 to leave out */
	double loss;                /* %.6f */
	double lr;                  /* %.3e */
	double grad_norm;           /* %.4f */
	int fp16;                   /* show loss_scale (and skipped) */
	double loss_scale;          /* integral values without decimals */
	long long skipped;          /* cumulative skipped steps */
	double samples_per_s;       /* %.1f */
	double tokens_per_s;        /* %.0f */
	double tflops;              /* achieved, %.3f */
	double mfu;                 /* fraction of the ceiling, %.2f */
	double peak_rss_bytes;      /* "1.2 GiB" (1024 steps) */
	int moe;                    /* an MoE model: show moe_loss and dropped */
	double moe_loss;            /* the aux loss summed over MoE layers (%.6f, before loss_coeff) */
	double moe_dropped;         /* fraction of token choices dropped for capacity (%.4f) */
};

/* Format the step line (no newline) into buf; returns snprintf's length. */
int ds_monitor_step_line(char *buf, size_t n, const struct ds_monitor_step *s);

/* "eval step N | loss 2.345678 | ppl 10.4404" (ppl = exp(loss), %.4f). */
int ds_monitor_eval_line(char *buf, size_t n, long long step, double loss);
/* The same for the test data after training: "test step N | loss ... | ppl ...". */
int ds_monitor_test_line(char *buf, size_t n, long long step, double loss);

/* A progress bar for stderr on a terminal (the caller checks isatty(2) and
 * -q): "\r[#########...........]  45/100  45% 12.3 it/s eta 0:04\033[K".
 * The line starts with '\r' and ends with "erase to end of line" so each
 * call overwrites the last; the caller prints '\n' when the work is done.
 * width is the number of bar cells (<= 0: 30); rate in items per second,
 * <= 0 when unknown ("eta --:--").  total <= 0 draws no bar. */
int ds_monitor_progress(char *buf, size_t n, long long done, long long total, double rate, int width);

/* Python's repr() of a double ("0.001", "65536.0", "1e-05",
 * "0.30000000000000004"): the shortest text that reads back as the same
 * double, laid out as Python 3 does.  DeepSpeed's CSV monitor writes
 * values with str(), so this gives the same bytes and full precision. */
int ds_monitor_fmt_double(char *buf, size_t n, double v);

/* wall_clock_breakdown (spec/deepspeed-tools.md §6).  The trainer adds the
 * seconds each phase took; every micro-step it may print the
 * "*_microstep" line, and at each optimizer-step boundary the global line:
 *   time (ms) | fwd: 12.34 | bwd: 25.00 | bwd_inner: 20.00 | bwd_allreduce: 5.00 | step: 3.10
 * Each value is the sum since that line was last formatted (formatting
 * resets it, as DeepSpeed's timers.log does); a timer never added to is
 * left out of the line. */
enum ds_monitor_wc_timer {
	DS_WC_FWD, DS_WC_BWD, DS_WC_BWD_INNER, DS_WC_BWD_ALLREDUCE, DS_WC_STEP, DS_WC_N
};
struct ds_monitor_wallclock {
	double micro_ms[DS_WC_N];  /* since the last microstep line */
	double global_ms[DS_WC_N]; /* since the last boundary line */
	unsigned used;             /* bit per timer ever added to */
};
#define DS_MONITOR_WALLCLOCK_INIT { { 0 }, { 0 }, 0 }

/* Add seconds to a timer (both the micro-step and the global sum). */
void ds_monitor_wallclock_add(struct ds_monitor_wallclock *w, enum ds_monitor_wc_timer t, double seconds);
/* Format the micro-step line (microstep != 0: names "fwd_microstep", ...)
 * or the boundary line, and reset the sums it shows. */
int ds_monitor_wallclock_line(struct ds_monitor_wallclock *w, int microstep, char *buf, size_t n);
/* Milliseconds in the global sum of t (before the boundary line resets it):
 * the value for the TensorBoard/CSV tag ds_monitor_wallclock_tag(t). */
double ds_monitor_wallclock_ms(const struct ds_monitor_wallclock *w, enum ds_monitor_wc_timer t);
/* DeepSpeed's monitor tag for t, "Train/Samples/elapsed_time_ms_forward",
 * ..._backward, _backward_inner, _backward_allreduce, _step (static). */
const char *ds_monitor_wallclock_tag(enum ds_monitor_wc_timer t);

#endif
