/* watchdog.c - per-rank hang watchdog (see watchdog.h).
 *
 * The thread only reads atomics and writes files; it never calls MPI, so it
 * works while the main thread is stuck inside a collective.
 */
#include "driver/watchdog.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "config/config.h"
#include "util/log.h"
#include "util/progress.h"

#define HOST_MAX 128
#define REPORT_MAX 16384

struct ds_watchdog {
	struct ds_watchdog_opts o;
	char dir[4096], host[HOST_MAX];
	pthread_t thread;
	atomic_int quit;
	pthread_mutex_t mu;  /* with wake: stop ends the thread's poll wait at once */
	pthread_cond_t wake;
	atomic_llong step;
	_Atomic(const char *) phase;
	atomic_ullong beats;
	int stall_rank;
	long long stall_step;
};

static double mono_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static double wall_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

/* one rank's heartbeat, as written and read back */
struct beat {
	int rank, pid, stalled;
	long long step;
	unsigned long long done;
	double idle, op_age, t;  /* seconds without progress, in the current op; written at */
	char host[HOST_MAX], phase[64], op[64];
};

static void write_beat(struct ds_watchdog *wd, const struct beat *b)
{
	char path[4200], tmp[4210];
	snprintf(path, sizeof path, "%s/rank%d.hb", wd->dir, b->rank);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "rank %d host %s pid %d step %lld phase %s op %s op_age %.3f done %llu idle %.3f t %.3f stalled %d\n",
		b->rank, b->host, b->pid, b->step, b->phase, b->op, b->op_age, b->done, b->idle, b->t, b->stalled);
	if (fclose(f) == 0)
		rename(tmp, path);
}

static int read_beat(const char *dir, int rank, struct beat *b)
{
	char path[4200];
	snprintf(path, sizeof path, "%s/rank%d.hb", dir, rank);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	int n = fscanf(f, "rank %d host %127s pid %d step %lld phase %63s op %63s op_age %lf done %llu idle %lf t %lf stalled %d",
		       &b->rank, b->host, &b->pid, &b->step, b->phase, b->op, &b->op_age, &b->done, &b->idle, &b->t,
		       &b->stalled);
	fclose(f);
	return n == 11 ? 0 : -1;
}

static void describe(char *out, size_t n, const struct beat *b, double now)
{
	char op[128];
	if (strcmp(b->op, "-"))
		snprintf(op, sizeof op, "in %s for %.1f s", b->op, b->op_age);
	else
		snprintf(op, sizeof op, "not in a collective");
	double late = now - b->t;
	char heard[64] = "";
	if (late > 5)
		snprintf(heard, sizeof heard, "; not heard from for %.0f s", late);
	snprintf(out, n, "rank %d on %s (pid %d): step %lld, %s, %s, no progress for %.1f s, %llu collectives done%s",
		 b->rank, b->host, b->pid, b->step, b->phase, op, b->idle, b->done, heard);
}

/* The full report: every rank's heartbeat, then the verdict naming the
 * ranks that lag (lowest step; at the same step those outside any
 * collective while others wait in one; else those with fewer collectives). */
static void build_report(struct ds_watchdog *wd, const struct beat *self, char *rep, size_t n)
{
	int W = wd->o.world;
	struct beat *all = calloc((size_t)W, sizeof *all);
	int *have = calloc((size_t)W, sizeof *have);
	size_t len = 0;
	double now = wall_now();
#define ADD(...) do { if (len < n) len += (size_t)snprintf(rep + len, n - len, __VA_ARGS__); } while (0)
	ADD("watchdog: rank %d on %s made no progress for %.1f s (dstk.watchdog_timeout_s %g); ranks last seen:\n",
	    self->rank, self->host, self->idle, wd->o.timeout_s);
	if (!all || !have) {
		ADD("  (out of memory reading the heartbeats)\n");
		free(all);
		free(have);
		return;
	}
	long long minstep = -1;
	int missing = 0, in_op = 0, seen = 0;
	unsigned long long mindone = 0;
	for (int r = 0; r < W; r++) {
		char line[512];
		if (r == self->rank) {
			all[r] = *self;
			have[r] = 1;
		} else {
			have[r] = read_beat(wd->dir, r, &all[r]) == 0;
		}
		if (!have[r]) {
			ADD("  rank %d: no heartbeat in %s (another node's directory, or not started)\n", r, wd->dir);
			missing++;
			continue;
		}
		describe(line, sizeof line, &all[r], now);
		ADD("  %s\n", line);
		if (minstep < 0 || all[r].step < minstep)
			minstep = all[r].step;
		if (!seen || all[r].done < mindone)
			mindone = all[r].done;
		seen++;
		in_op += strcmp(all[r].op, "-") != 0;
	}
	/* verdict */
	char who[4096];
	size_t wl = 0;
	who[0] = 0;
	int laggards = 0, same_step = 1;
	for (int r = 0; r < W; r++)
		if (have[r] && all[r].step != minstep)
			same_step = 0;
	for (int r = 0; r < W; r++) {
		if (!have[r])
			continue;
		int lag;
		if (!same_step)
			lag = all[r].step == minstep;
		else if (in_op > 0 && in_op < seen)
			lag = !strcmp(all[r].op, "-");
		else
			lag = all[r].done == mindone;
		if (lag && wl < sizeof who) {
			wl += (size_t)snprintf(who + wl, sizeof who - wl, "%s%d on %s", laggards ? ", rank " : "rank ", r,
					       all[r].host);
			laggards++;
		}
	}
	const char *why = !same_step ? "behind the others' step"
			  : (in_op > 0 && in_op < seen) ? "outside any collective while the others wait in one"
			  : in_op == seen ? "every rank waits in a collective" : "no rank is in a collective";
	if (laggards == seen && seen > 1)
		ADD("watchdog: all %d ranks heard from are stalled (%s)%s; exiting with status 5\n", seen, why,
		    missing ? ", some ranks unheard" : "");
	else
		ADD("watchdog: stalled: %s (%s); exiting with status 5\n", who, why);
	ADD("watchdog: this report is kept in %s/report\n", wd->dir);
#undef ADD
	free(all);
	free(have);
}

static void *run(void *arg)
{
	struct ds_watchdog *wd = arg;
	double poll = wd->o.timeout_s / 4;
	if (poll > 1)
		poll = 1;
	if (poll < 0.02)
		poll = 0.02;
	unsigned long long last_beats = atomic_load(&wd->beats), last_done = ds_comm_ops_done();
	unsigned long long last_work = ds_progress_count();
	const char *last_op = NULL;
	double t_progress = mono_now(), t_op = t_progress;
	struct beat b;
	memset(&b, 0, sizeof b);
	b.rank = wd->o.rank;
	b.pid = (int)getpid();
	snprintf(b.host, sizeof b.host, "%s", wd->host);
	while (!atomic_load(&wd->quit)) {
		/* sleep a poll interval, or until ds_watchdog_stop (a run's exit
		 * must not wait out the interval) */
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += (time_t)poll;
		ts.tv_nsec += (long)((poll - (time_t)poll) * 1e9);
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&wd->mu);
		while (!atomic_load(&wd->quit) && pthread_cond_timedwait(&wd->wake, &wd->mu, &ts) == 0)
			;
		pthread_mutex_unlock(&wd->mu);
		if (atomic_load(&wd->quit))
			break;
		double now = mono_now();
		unsigned long long beats = atomic_load(&wd->beats), done = ds_comm_ops_done();
		unsigned long long work = ds_progress_count();
		const char *op = ds_comm_current_op();
		/* a new collective (or the same op again after one finished) restarts op_age */
		if (op != last_op || done != last_done) {
			last_op = op;
			t_op = now;
		}
		if (beats != last_beats || done != last_done || work != last_work) {
			last_beats = beats;
			last_done = done;
			last_work = work;
			t_progress = now;
		}
		const char *ph = atomic_load(&wd->phase);
		b.step = atomic_load(&wd->step);
		snprintf(b.phase, sizeof b.phase, "%s", ph ? ph : "start");
		snprintf(b.op, sizeof b.op, "%s", op ? op : "-");
		b.op_age = op ? now - t_op : 0;
		b.done = done;
		b.idle = now - t_progress;
		b.t = wall_now();
		b.stalled = b.idle >= wd->o.timeout_s;
		write_beat(wd, &b);
		if (!b.stalled || atomic_load(&wd->quit))
			continue;
		/* stalled: the first rank to claim the report describes everyone
		 * (the others' heartbeats are at most one poll old) */
		char path[4200];
		snprintf(path, sizeof path, "%s/report", wd->dir);
		int fd = open(path, O_CREAT | O_EXCL | O_WRONLY, 0644);
		char *rep = malloc(REPORT_MAX);
		if (!rep)
			return NULL;
		if (fd >= 0) {
			build_report(wd, &b, rep, REPORT_MAX);
			if (write(fd, rep, strlen(rep)) < 0)
				ds_log_warn("watchdog: cannot write %s", path);
			close(fd);
		} else {
			/* let the reporter write and print before this rank's exit
			 * makes the launcher kill the job (at most a few seconds) */
			struct stat sb;
			for (int i = 0; i < 100 && (stat(path, &sb) != 0 || sb.st_size == 0); i++)
				nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
			nanosleep(&(struct timespec){ 0, 200000000 }, NULL);
			char line[512];
			describe(line, sizeof line, &b, b.t);
			snprintf(rep, REPORT_MAX, "watchdog: %s (dstk.watchdog_timeout_s %g); exiting with status 5\n",
				 line, wd->o.timeout_s);
		}
		if (wd->o.on_stall)
			wd->o.on_stall(wd->o.ctx, rep, fd >= 0);
		else
			ds_log_error("%s", rep);
		free(rep);
		return NULL;
	}
	return NULL;
}

int ds_watchdog_start(struct ds_watchdog **out, const struct ds_watchdog_opts *o, struct ds_err *err)
{
	*out = NULL;
	struct ds_watchdog *wd = calloc(1, sizeof *wd);
	if (!wd)
		return ds_err_set(err, DS_ENOMEM, "out of memory for the watchdog");
	wd->o = *o;
	snprintf(wd->dir, sizeof wd->dir, "%s", o->dir);
	snprintf(wd->host, sizeof wd->host, "%s", o->host && *o->host ? o->host : "?");
	wd->o.dir = wd->dir;
	for (char *s = wd->host; *s; s++)
		if (*s == ' ')
			*s = '_';
	if (mkdir(wd->dir, 0755) != 0 && errno != EEXIST) {
		int e = errno;
		free(wd);
		return ds_err_set(err, DS_EINVAL, "dstk.watchdog_dir %s: %s; give a writable directory", o->dir, strerror(e));
	}
	wd->stall_rank = -1;
	const char *t = getenv("DS_TEST_WATCHDOG_STALL");
	if (t && sscanf(t, "%d:%lld", &wd->stall_rank, &wd->stall_step) != 2)
		wd->stall_rank = -1;
	atomic_store(&wd->phase, "start");
	pthread_mutex_init(&wd->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&wd->wake, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&wd->thread, NULL, run, wd) != 0) {
		free(wd);
		return ds_err_set(err, DS_EIO, "cannot start the watchdog thread");
	}
	*out = wd;
	return 0;
}

void ds_watchdog_beat(struct ds_watchdog *wd, long long step, const char *phase)
{
	if (!wd)
		return;
	atomic_store(&wd->step, step);
	atomic_store(&wd->phase, phase);
	atomic_fetch_add(&wd->beats, 1);
	if (wd->stall_rank == wd->o.rank && wd->stall_step == step && !strcmp(phase, "train_step")) {
		atomic_store(&wd->phase, "train_step(DS_TEST_WATCHDOG_STALL)");
		for (;;)
			pause();
	}
}

void ds_watchdog_stop(struct ds_watchdog *wd)
{
	if (!wd)
		return;
	pthread_mutex_lock(&wd->mu);
	atomic_store(&wd->quit, 1);
	pthread_cond_signal(&wd->wake);
	pthread_mutex_unlock(&wd->mu);
	pthread_join(wd->thread, NULL);
	pthread_cond_destroy(&wd->wake);
	pthread_mutex_destroy(&wd->mu);
	char path[4200];
	snprintf(path, sizeof path, "%s/rank%d.hb", wd->dir, wd->o.rank);
	unlink(path);
	/* every rank tries: the directory goes once the last rank's file has */
	rmdir(wd->dir);
	free(wd);
}

/* Remove parent/ds-watchdog-<host>-<pid> directories whose process is gone
 * (a run killed by SIGKILL leaves its heartbeats behind).  Only this host's:
 * another node's pids mean nothing here. */
static void remove_stale(const char *parent, const char *host)
{
	char prefix[256], path[4400];
	DIR *d = opendir(parent);
	struct dirent *de;
	snprintf(prefix, sizeof prefix, "ds-watchdog-%s-", host);
	while (d && (de = readdir(d))) {
		const char *p = de->d_name + strlen(prefix);
		char *end;
		if (strncmp(de->d_name, prefix, strlen(prefix)))
			continue;
		long pid = strtol(p, &end, 10);
		if (end == p || *end || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof path, "%s/%s", parent, de->d_name);
		DIR *h = opendir(path);
		struct dirent *f;
		while (h && (f = readdir(h))) {
			char fp[4700];
			if (f->d_name[0] == '.')
				continue;
			snprintf(fp, sizeof fp, "%s/%s", path, f->d_name);
			unlink(fp);
		}
		if (h)
			closedir(h);
		rmdir(path);
	}
	if (d)
		closedir(d);
}

int ds_watchdog_from_config(struct ds_watchdog **out, const struct ds_config *cfg, struct ds_comm *comm,
			    ds_watchdog_fn on_stall, void *ctx, struct ds_err *err)
{
	const struct ds_config_values *v = ds_config_values(cfg);
	double t = v->dstk.watchdog_timeout_s;
	const char *parent = v->dstk.watchdog_dir;
	*out = NULL;
	if (!(t > 0))
		return 0;
	if (!parent || !*parent)
		parent = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	/* rank 0 creates the directory and broadcasts its name, or "" and the
	 * errno when it cannot: every rank returns the same error (none waits
	 * in a collective that rank 0 left) */
	char dir[4096];
	int32_t e = 0;
	memset(dir, 0, sizeof dir);
	if (ds_comm_rank(comm) == 0) {
		remove_stale(parent, ds_comm_hostname(comm));
		snprintf(dir, sizeof dir, "%s/ds-watchdog-%s-%d", parent, ds_comm_hostname(comm), (int)getpid());
		if (mkdir(dir, 0755) != 0 && errno != EEXIST)
			e = errno;
	}
	if (ds_comm_size(comm) > 1) {
		DS_TRY(ds_comm_broadcast(comm, dir, sizeof dir, DS_U8, 0, err));
		DS_TRY(ds_comm_broadcast(comm, &e, 1, DS_I32, 0, err));
	}
	dir[sizeof dir - 1] = 0;
	if (e)
		return ds_err_set(err, DS_EINVAL, "dstk.watchdog_dir %s: cannot create %s: %s; give a writable directory",
				  parent, dir, strerror(e));
	struct ds_watchdog_opts o = { t, dir, ds_comm_rank(comm), ds_comm_size(comm), ds_comm_hostname(comm), on_stall,
				      ctx };
	DS_TRY(ds_watchdog_start(out, &o, err));
	/* the default (on in every run) goes without saying; a chosen timeout is shown */
	if (ds_comm_rank(comm) == 0 && DS_CONFIG_GIVEN(v, dstk.watchdog_timeout_s))
		ds_log_info("watchdog: timeout %g s, heartbeats in %s", t, dir);
	return 0;
}
