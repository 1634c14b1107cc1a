/* cuda_emu.cpp - the scheduler behind cuda_emu.h: a launch runs its blocks
 * one after another, each block's threads as fibers that run to their next
 * barrier in the order ds_emu_set_order chose (a fiber is made once with
 * makecontext and then switched with _setjmp/_longjmp, which costs no
 * system call, and runs block after block); barriers release
 * only when every live thread of the block (or every lane of the warp mask)
 * has arrived, and anything else (a barrier after some threads exited, a
 * warp operation on an exited lane, mixed masks, a deadlock) stops the
 * launch with one line on stderr and cudaErrorLaunchFailure.
 *
 * Device memory: each cudaMalloc is its own mmap (whole pages), listed in
 * dev_regions and kept PROT_NONE; ds_emu_enter/leave (the outermost of
 * nested calls, any thread) make every listed region readable and writable
 * and protect them again, adjacent regions in one mprotect.  A SIGSEGV at
 * an address inside a listed region is a host access of device memory: the
 * handler says so on stderr and aborts; any other SIGSEGV goes to the
 * handler that was there before (the default: a plain crash; cmocka's in
 * a test case).
 */
/* _longjmp between fiber stacks: glibc's fortified longjmp would refuse */
#undef _FORTIFY_SOURCE
#include "cuda_emu.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "util/half.h"

uint3 ds_emu_threadIdx, ds_emu_blockIdx;
dim3 ds_emu_blockDim, ds_emu_gridDim;

namespace {

enum { READY, AT_BAR, AT_WARP, DONE };

const size_t kStack = 512u << 10;  /* per fiber, plus a guard page */
const size_t kGuard = 4096;
const size_t kSmemDefault = 48u << 10;
const int kSmemOptin = 166912;     /* sm_80's opt-in limit (sm_90 allows 232448) */

struct fiber {
	ucontext_t ctx;
	jmp_buf jb;
	bool started;
	int state;
	unsigned mask;
	uint3 tid;
	long mma;   /* wmma loads and products this thread made in this block */
};

/* a warp's last wmma load or product, for the lanes after the first */
struct mma_cache {
	long gen;
	float out[256];
};

struct emu {
	std::vector<char *> stacks;
	std::vector<fiber> th;
	std::vector<unsigned long long> slot;
	std::vector<mma_cache> mma;
	unsigned char *dyn = nullptr;   /* the block's dynamic shared memory */
	size_t dyn_n = 0;
	std::map<const void *, int> smem_attr;
	ucontext_t sched;
	jmp_buf sched_jb;
	const std::function<void()> *body = nullptr;
	const char *kname = "";
	unsigned n = 0, cur = 0;
	int order = DS_EMU_FORWARD;
	unsigned long long rng = 0x9E3779B97F4A7C15ull;
	bool stop = false, in_fiber = false;
	cudaError_t err = cudaSuccess;
	long launches = 0, failures = 0;
};

emu E;

unsigned long long next_rand()
{
	E.rng ^= E.rng << 13;
	E.rng ^= E.rng >> 7;
	E.rng ^= E.rng << 17;
	return E.rng;
}

/* the order of n items for one pass */
void permutation(std::vector<unsigned> &p, unsigned n)
{
	p.resize(n);
	for (unsigned i = 0; i < n; i++)
		p[i] = E.order == DS_EMU_REVERSE ? n - 1 - i : i;
	if (E.order == DS_EMU_SHUFFLE)
		for (unsigned i = n; i > 1; i--) {
			unsigned j = (unsigned)(next_rand() % i);
			unsigned t = p[i - 1];
			p[i - 1] = p[j];
			p[j] = t;
		}
}

/* back to the scheduler, to continue here when resumed */
void yield()
{
	if (!_setjmp(E.th[E.cur].jb))
		_longjmp(E.sched_jb, 1);
}

/* a fiber runs the launch's body once per block, for as long as it lives */
void fiber_entry()
{
	for (;;) {
		(*E.body)();
		E.th[E.cur].state = DONE;
		yield();
	}
}

/* run fiber i until it yields */
void resume(unsigned i)
{
	fiber &f = E.th[i];
	E.cur = i;
	E.in_fiber = true;
	if (!_setjmp(E.sched_jb)) {
		if (f.started) {
			_longjmp(f.jb, 1);
		} else {
			f.started = true;
			getcontext(&f.ctx);
			f.ctx.uc_stack.ss_sp = E.stacks[i] + kGuard;
			f.ctx.uc_stack.ss_size = kStack;
			f.ctx.uc_link = nullptr;
			makecontext(&f.ctx, fiber_entry, 0);
			swapcontext(&E.sched, &f.ctx);  /* comes back through sched_jb */
		}
	}
	E.in_fiber = false;
}

bool ensure_stacks(unsigned n)
{
	while (E.stacks.size() < n) {
		void *p = mmap(nullptr, kStack + kGuard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
			       -1, 0);
		if (p == MAP_FAILED)
			return false;
		mprotect(p, kGuard, PROT_NONE);  /* a stack overflow faults at once */
		E.stacks.push_back((char *)p);
	}
	return true;
}

void set_ids(unsigned t)
{
	ds_emu_threadIdx = E.th[t].tid;
}

/* Release what can be released after a pass; false when nothing can. */
bool release()
{
	unsigned done = 0, bar = 0, warp = 0;
	for (unsigned i = 0; i < E.n; i++) {
		done += E.th[i].state == DONE;
		bar += E.th[i].state == AT_BAR;
		warp += E.th[i].state == AT_WARP;
	}
	bool any = false;
	for (unsigned w = 0; w * 32 < E.n && warp; w++) {
		unsigned lo = w * 32, hi = lo + 32 < E.n ? lo + 32 : E.n;
		unsigned mask = 0;
		bool have = false;
		for (unsigned i = lo; i < hi; i++)
			if (E.th[i].state == AT_WARP) {
				if (have && E.th[i].mask != mask) {
					ds_emu_fail("warp %u: lanes wait with different masks (%#x, %#x)", w, mask, E.th[i].mask);
					return false;
				}
				mask = E.th[i].mask;
				have = true;
				if (!(mask >> (i - lo) & 1u)) {
					ds_emu_fail("warp %u lane %u: a warp operation whose mask %#x leaves it out", w, i - lo, mask);
					return false;
				}
			}
		if (!have)
			continue;
		bool all = true;
		for (unsigned l = 0; l < 32; l++) {
			if (!(mask >> l & 1u))
				continue;
			if (lo + l >= E.n) {
				ds_emu_fail("warp %u: mask %#x names lane %u, past the block's %u threads", w, mask, l, E.n);
				return false;
			}
			int s = E.th[lo + l].state;
			if (s == DONE) {
				ds_emu_fail("warp %u: lane %u exited, lanes of mask %#x wait for it", w, l, mask);
				return false;
			}
			all &= s == AT_WARP;
		}
		if (all) {
			for (unsigned l = 0; l < 32; l++)
				if (mask >> l & 1u)
					E.th[lo + l].state = READY;
			any = true;
		}
	}
	if (any)
		return true;
	if (bar && !warp) {
		if (done) {
			ds_emu_fail("__syncthreads reached by %u threads while %u have exited", bar, done);
			return false;
		}
		for (unsigned i = 0; i < E.n; i++)
			E.th[i].state = READY;
		return true;
	}
	ds_emu_fail("deadlock: %u threads at __syncthreads, %u at warp operations, %u exited", bar, warp, done);
	return false;
}

/* one block to completion; false when it was stopped */
bool run_block()
{
	std::vector<unsigned> perm;
	for (unsigned i = 0; i < E.n; i++) {
		E.th[i].state = READY;
		E.th[i].mma = 0;
	}
	E.mma.assign((E.n + 31) / 32, mma_cache{ -1, {} });
	for (;;) {
		permutation(perm, E.n);
		for (unsigned k = 0; k < E.n; k++) {
			unsigned i = perm[k];
			if (E.th[i].state != READY)
				continue;
			set_ids(i);
			resume(i);
			if (E.stop)
				return false;
		}
		bool all_done = true;
		for (unsigned i = 0; i < E.n; i++)
			all_done &= E.th[i].state == DONE;
		if (all_done)
			return true;
		if (!release())
			return false;
	}
}

} // namespace

/* ---- device memory ------------------------------------------------------ */
namespace {

pthread_mutex_t dev_mu = PTHREAD_MUTEX_INITIALIZER;
std::map<uintptr_t, size_t> dev_regions;   /* base -> length (whole pages) */
std::map<uintptr_t, size_t> pinned;        /* cudaMallocHost: base -> bytes */
bool strict_args;
int dev_depth;                              /* emulated calls in progress */
struct sigaction dev_old_segv;
size_t dev_page;

/* every region to prot, adjacent ones in one call (under dev_mu) */
void dev_protect_all(int prot)
{
	uintptr_t lo = 0, hi = 0;
	for (auto &r : dev_regions) {
		if (r.first != hi) {
			if (hi > lo)
				mprotect((void *)lo, hi - lo, prot);
			lo = r.first;
		}
		hi = r.first + r.second;
	}
	if (hi > lo)
		mprotect((void *)lo, hi - lo, prot);
}

/* the region holding address a, or nullptr (no lock: the signal handler
 * reads the map the faulting thread was not changing) */
const std::pair<const uintptr_t, size_t> *dev_region_of(uintptr_t a)
{
	auto it = dev_regions.upper_bound(a);
	if (it == dev_regions.begin())
		return nullptr;
	--it;
	return a < it->first + it->second ? &*it : nullptr;
}

void dev_segv(int sig, siginfo_t *si, void *uc)
{
	uintptr_t a = (uintptr_t)si->si_addr;
	const std::pair<const uintptr_t, size_t> *r = dev_region_of(a);
	if (!r) {
		/* not ours: the previous handler (or the default) takes it when
		 * the access faults again */
		sigaction(SIGSEGV, &dev_old_segv, nullptr);
		(void)sig;
		(void)uc;
		return;
	}
	char msg[200];
	int n = snprintf(msg, sizeof msg,
			 "cuda_emu: host access of emulated device memory at %p (offset %zu of the %zu-byte allocation at "
			 "%p): only kernels, cudaMemcpy/cudaMemset and cuBLAS may touch it\n",
			 si->si_addr, (size_t)(a - r->first), r->second, (void *)r->first);
	if (n > 0 && write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1) < 0)
		n = 0;
	signal(SIGABRT, SIG_DFL);
	abort();
}

/* (re)install the handler, under dev_mu: at each allocation and each
 * return to PROT_NONE, since others replace it (cmocka does around every
 * test case); what was there is where other faults go */
void dev_arm_handler()
{
	if (!dev_page) {
		dev_page = (size_t)sysconf(_SC_PAGESIZE);
		/* an alternate stack, so that a fiber's stack overflow still
		 * reaches the previous action rather than faulting in the handler */
		static char alt[64 << 10];
		stack_t ss = {};
		ss.ss_sp = alt;
		ss.ss_size = sizeof alt;
		sigaltstack(&ss, nullptr);
	}
	struct sigaction cur;
	if (sigaction(SIGSEGV, nullptr, &cur) || ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == dev_segv))
		return;
	struct sigaction sa = {};
	sa.sa_sigaction = dev_segv;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	dev_old_segv = cur;
	sigaction(SIGSEGV, &sa, nullptr);
}

} // namespace

void ds_emu_enter(void)
{
	pthread_mutex_lock(&dev_mu);
	if (dev_depth++ == 0)
		dev_protect_all(PROT_READ | PROT_WRITE);
	pthread_mutex_unlock(&dev_mu);
}

void ds_emu_leave(void)
{
	pthread_mutex_lock(&dev_mu);
	if (--dev_depth == 0 && !dev_regions.empty()) {
		dev_protect_all(PROT_NONE);
		dev_arm_handler();
	}
	pthread_mutex_unlock(&dev_mu);
}

/* Device memory's size (cudaMemGetInfo's total): DS_EMU_DEVICE_MEM
 * bytes when set (the free memory starts there), else 2 GiB with 1 GiB
 * free (taken by "other processes"), so that a test can make the device
 * small.  dev_held: the pages cudaMalloc holds. */
static size_t dev_held;
static void dev_size(size_t *total, size_t *avail)
{
	const char *e = getenv("DS_EMU_DEVICE_MEM");
	unsigned long long v = e && *e ? strtoull(e, nullptr, 0) : 0;
	*total = v ? (size_t)v : (size_t)1 << 31;
	*avail = v ? (size_t)v : (size_t)1 << 30;
}

cudaError_t ds_emu_mem_info(size_t *f, size_t *t)
{
	size_t avail;
	pthread_mutex_lock(&dev_mu);
	dev_size(t, &avail);
	*f = avail > dev_held ? avail - dev_held : 0;
	pthread_mutex_unlock(&dev_mu);
	return cudaSuccess;
}

cudaError_t ds_emu_dev_alloc(void **p, size_t n)
{
	pthread_mutex_lock(&dev_mu);
	dev_arm_handler();
	size_t len = ((n ? n : 1) + dev_page - 1) / dev_page * dev_page, total, avail;
	dev_size(&total, &avail);
	if (dev_held + len > avail) {
		*p = nullptr;
		E.err = cudaErrorMemoryAllocation;
		pthread_mutex_unlock(&dev_mu);
		return cudaErrorMemoryAllocation;
	}
	void *m = mmap(nullptr, len, dev_depth ? PROT_READ | PROT_WRITE : PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cudaError_t e = cudaSuccess;
	if (m == MAP_FAILED) {
		*p = nullptr;
		e = E.err = cudaErrorMemoryAllocation;
	} else {
		dev_regions[(uintptr_t)m] = len;
		dev_held += len;
		*p = m;
	}
	pthread_mutex_unlock(&dev_mu);
	return e;
}

cudaError_t ds_emu_dev_free(void *p)
{
	if (!p)
		return cudaSuccess;
	pthread_mutex_lock(&dev_mu);
	auto it = dev_regions.find((uintptr_t)p);
	cudaError_t e = cudaSuccess;
	if (it == dev_regions.end()) {
		fprintf(stderr, "cuda_emu: cudaFree of %p, which cudaMalloc did not return\n", p);
		E.failures++;
		e = E.err = cudaErrorInvalidValue;
	} else {
		munmap(p, it->second);
		dev_held -= it->second;
		dev_regions.erase(it);
	}
	pthread_mutex_unlock(&dev_mu);
	return e;
}

/* Pinned host memory: DS_EMU_PINNED_MEM bytes when set (a cudaMallocHost
 * past it fails with cudaErrorMemoryAllocation, as page-locking past the
 * machine's limit does), else unlimited.  pinned_held: what it holds. */
static size_t pinned_held;

cudaError_t ds_emu_host_alloc(void **p, size_t n)
{
	const char *e = getenv("DS_EMU_PINNED_MEM");
	const unsigned long long cap = e && *e ? strtoull(e, nullptr, 0) : 0;
	const size_t want = n ? n : 1;
	pthread_mutex_lock(&dev_mu);
	const bool over = cap && pinned_held + want > cap;
	pthread_mutex_unlock(&dev_mu);
	*p = over ? nullptr : malloc(want);
	if (!*p)
		return E.err = cudaErrorMemoryAllocation;
	pthread_mutex_lock(&dev_mu);
	pinned[(uintptr_t)*p] = want;
	pinned_held += want;
	pthread_mutex_unlock(&dev_mu);
	return cudaSuccess;
}

cudaError_t ds_emu_host_free(void *p)
{
	if (!p)
		return cudaSuccess;
	pthread_mutex_lock(&dev_mu);
	auto it = pinned.find((uintptr_t)p);
	size_t gone = 0;
	if (it != pinned.end()) {
		pinned_held -= it->second;
		pinned.erase(it);
		gone = 1;
	}
	pthread_mutex_unlock(&dev_mu);
	if (!gone) {
		fprintf(stderr, "cuda_emu: cudaFreeHost of %p, which cudaMallocHost did not return\n", p);
		E.failures++;
		return E.err = cudaErrorInvalidValue;
	}
	free(p);
	return cudaSuccess;
}

extern "C" void ds_emu_strict_args(int on) { strict_args = on != 0; }

/* p inside (or just past the end of) a region of m */
static bool in_regions(const std::map<uintptr_t, size_t> &m, uintptr_t p)
{
	auto it = m.upper_bound(p);
	if (it == m.begin())
		return false;
	--it;
	return p <= it->first + it->second;
}

void ds_emu_check_arg(const char *kernel, int i, const void *p)
{
	if (!strict_args || !p)
		return;
	pthread_mutex_lock(&dev_mu);
	bool ok = in_regions(dev_regions, (uintptr_t)p) || in_regions(pinned, (uintptr_t)p);
	pthread_mutex_unlock(&dev_mu);
	if (ok)
		return;
	fprintf(stderr, "cuda_emu: launch of %s: argument %d (%p) is neither device memory nor pinned host memory, "
		"which a GPU cannot read\n", kernel, i + 1, p);
	fflush(stderr);
	signal(SIGABRT, SIG_DFL);
	abort();
}

cudaError_t ds_emu_copy(void *d, const void *src, size_t n)
{
	ds_emu_call c;
	if (n)
		memmove(d, src, n);
	return cudaSuccess;
}

cudaError_t ds_emu_set(void *d, int v, size_t n)
{
	ds_emu_call c;
	memset(d, v, n);
	return cudaSuccess;
}

extern "C" void ds_emu_set_order(enum ds_emu_order o)
{
	E.order = o;
	E.rng = 0x9E3779B97F4A7C15ull + (unsigned long long)o;
}

extern "C" long ds_emu_launches(void) { return E.launches; }
extern "C" long ds_emu_failures(void) { return E.failures; }

void ds_emu_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "cuda_emu: %s block (%u,%u,%u) thread %u: ", E.kname, ds_emu_blockIdx.x, ds_emu_blockIdx.y,
		ds_emu_blockIdx.z, E.cur);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	E.err = cudaErrorLaunchFailure;
	E.stop = true;
	E.failures++;
	/* called from a fiber: leave it for good (the scheduler sees stop; the
	 * fibers restart from scratch at the next launch) */
	if (E.in_fiber)
		_longjmp(E.sched_jb, 1);
}

static cudaError_t refuse(const char *name, cudaError_t e, const char *why)
{
	fprintf(stderr, "cuda_emu: launch of %s refused: %s\n", name, why);
	E.failures++;
	E.err = e;
	return e;
}

cudaError_t ds_emu_launch(const char *name, const void *fn, dim3 g, dim3 b, size_t shmem, cudaStream_t stream,
			  const std::function<void()> &body)
{
	(void)stream;  /* one queue: every launch runs to completion at once */
	ds_emu_call call;  /* the kernel may touch any device allocation */
	E.launches++;
	unsigned long long nt = (unsigned long long)b.x * b.y * b.z;
	if (!b.x || !b.y || !b.z || !g.x || !g.y || !g.z)
		return refuse(name, cudaErrorInvalidConfiguration, "a zero grid or block dimension");
	if (nt > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64)
		return refuse(name, cudaErrorInvalidConfiguration, "more than 1024 threads per block (or y > 1024, z > 64)");
	if (g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535)
		return refuse(name, cudaErrorInvalidConfiguration, "grid dimension over the limit (x < 2^31, y, z <= 65535)");
	size_t lim = kSmemDefault;
	auto it = E.smem_attr.find(fn);
	if (it != E.smem_attr.end() && (size_t)it->second > lim)
		lim = (size_t)it->second;
	if (shmem > lim)
		return refuse(name, cudaErrorInvalidValue,
			      "dynamic shared memory over 48 KiB without cudaFuncSetAttribute (or over its value)");
	if (!ensure_stacks((unsigned)nt))
		return refuse(name, cudaErrorMemoryAllocation, "no memory for the fiber stacks");
	E.n = (unsigned)nt;
	if (E.th.size() < E.n)
		E.th.resize(E.n);
	for (auto &f : E.th)
		f.started = f.started && !E.stop;  /* after a stopped launch, fresh fibers */
	for (unsigned z = 0, i = 0; z < b.z; z++)
		for (unsigned y = 0; y < b.y; y++)
			for (unsigned x = 0; x < b.x; x++, i++)
				E.th[i].tid = uint3{ x, y, z };
	E.slot.assign(E.n, 0);
	/* exactly the bytes asked for (rounded to the 128-byte alignment), so
	 * that ASan sees a kernel that runs past its shared memory */
	free(E.dyn);
	E.dyn_n = (shmem + 127) / 128 * 128;
	E.dyn = (unsigned char *)aligned_alloc(128, E.dyn_n ? E.dyn_n : 128);
	if (!E.dyn)
		return refuse(name, cudaErrorMemoryAllocation, "no memory for the dynamic shared memory");
	E.body = &body;
	E.kname = name;
	E.stop = false;
	ds_emu_blockDim = b;
	ds_emu_gridDim = g;
	unsigned long long nb = (unsigned long long)g.x * g.y * g.z;
	std::vector<unsigned> perm;
	if (nb > 0xffffffffull)
		return refuse(name, cudaErrorInvalidConfiguration, "too many blocks for the emulation");
	permutation(perm, (unsigned)nb);
	bool ok = true;
	for (unsigned k = 0; k < nb && ok; k++) {
		unsigned bi = perm[k];
		ds_emu_blockIdx = uint3{ bi % g.x, bi / g.x % g.y, bi / g.x / g.y };
		memset(E.dyn, 0xff, E.dyn_n);   /* NaN bytes: a read before any write shows */
		ok = run_block();
	}
	E.body = nullptr;
	return ok ? cudaSuccess : cudaErrorLaunchFailure;
}

cudaError_t ds_emu_take_error(int clear)
{
	cudaError_t e = E.err;
	if (clear)
		E.err = cudaSuccess;
	return e;
}

void ds_emu_set_error(cudaError_t e) { E.err = e; }

/* 128-byte aligned, as CUDA's dynamic shared memory declared __align__(128) */
void *ds_emu_dyn_smem(void) { return E.dyn; }

cudaError_t ds_emu_set_smem_attr(const void *fn, int bytes)
{
	if (bytes < 0 || bytes > kSmemOptin) {
		fprintf(stderr, "cuda_emu: cudaFuncSetAttribute: %d bytes of dynamic shared memory is over sm_80's %d\n",
			bytes, kSmemOptin);
		E.failures++;
		return E.err = cudaErrorInvalidValue;
	}
	E.smem_attr[fn] = bytes;
	return cudaSuccess;
}

const char *ds_emu_error_string(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument";
	case cudaErrorLaunchFailure: return "unspecified launch failure (emulated)";
	}
	return "unknown error";
}

unsigned ds_emu_linear_tid(void) { return E.cur; }
unsigned ds_emu_block_threads(void) { return E.n; }

void ds_emu_syncthreads(void)
{
	E.th[E.cur].state = AT_BAR;
	yield();
}

void ds_emu_warp_wait(unsigned mask)
{
	E.th[E.cur].state = AT_WARP;
	E.th[E.cur].mask = mask;
	yield();
}

void ds_emu_slot_put(unsigned long long v) { E.slot[E.cur] = v; }

unsigned long long ds_emu_slot_get(unsigned t, unsigned mask)
{
	if (t >= E.n || !(mask >> (t & 31u) & 1u)) {
		ds_emu_fail("warp operation reads lane %u, outside the mask %#x or the block", t & 31u, mask);
		return 0;
	}
	return E.slot[t];
}

namespace nvcuda {
namespace wmma {
float *ds_emu_wmma_slot(int *first)
{
	mma_cache &c = E.mma[E.cur / 32];
	long g = E.th[E.cur].mma++;
	*first = c.gen != g;
	c.gen = g;
	return c.out;
}

float ds_emu_wmma_read(const __half *p) { return ds_f16_to_f32_exact(p->x); }
float ds_emu_wmma_read(const __nv_bfloat16 *p) { return ds_bf16_to_f32_exact(p->x); }
void ds_emu_wmma_check(const void *p, unsigned ldm, size_t elem, const char *what)
{
	if ((uintptr_t)p % 32)
		ds_emu_fail("%s: pointer %p is not 32-byte aligned", what, p);
	else if ((ldm * elem) % 16)
		ds_emu_fail("%s: ldm %u elements is not a multiple of 16 bytes", what, ldm);
}
} // namespace wmma
} // namespace nvcuda
