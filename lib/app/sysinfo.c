/* sysinfo.c - machine facts from /proc/cpuinfo, /proc/meminfo, statvfs,
 * sched_getaffinity and cpuid (see sysinfo.h).
 *
 * cpuid goes through GCC's __builtin_cpu_supports, which also checks that
 * the OS saves the AVX/AVX-512 registers (XGETBV), so "yes" means usable.
 */
#include "config.h"
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>
#include "app/sysinfo.h"

/* Value after "key<spaces>:" in a /proc file, first match, into out. */
static int proc_field(const char *path, const char *key, char *out, size_t n)
{
	char line[512];
	size_t klen = strlen(key);
	int found = 0;
	FILE *f = fopen(path, "r");

	if (f == NULL)
		return 0;
	while (!found && fgets(line, sizeof line, f)) {
		char *p = line + klen;
		if (strncmp(line, key, klen) != 0 || (*p != ' ' && *p != '\t' && *p != ':'))
			continue;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p++ != ':')
			continue;
		while (*p == ' ' || *p == '\t')
			p++;
		p[strcspn(p, "\n")] = '\0';
		snprintf(out, n, "%s", p);
		found = 1;
	}
	fclose(f);
	return found;
}

/* /proc/meminfo "Key: N kB" in bytes, 0 when absent. */
static unsigned long long meminfo_bytes(const char *key)
{
	char v[64];
	unsigned long long kb = 0;

	if (proc_field("/proc/meminfo", key, v, sizeof v) && sscanf(v, "%llu", &kb) == 1)
		return kb * 1024;
	return 0;
}

int ds_sysinfo_get(struct ds_sysinfo *si, struct ds_err *err)
{
	struct utsname u;
	struct statvfs sv;
	cpu_set_t set;
	long n;

	memset(si, 0, sizeof *si);
	if (gethostname(si->hostname, sizeof si->hostname - 1) != 0)
		si->hostname[0] = '\0';
	proc_field("/proc/cpuinfo", "model name", si->cpu_model, sizeof si->cpu_model);
	if (uname(&u) == 0)
		snprintf(si->kernel, sizeof si->kernel, "%.40s %.64s %.16s", u.sysname, u.release, u.machine);
	n = sysconf(_SC_NPROCESSORS_ONLN);
	si->cpus_online = n > 0 ? (int)n : 0;
	CPU_ZERO(&set);
	si->cpus_usable = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : si->cpus_online;
	si->mem_total = meminfo_bytes("MemTotal");
	si->mem_available = meminfo_bytes("MemAvailable");
	if (statvfs("/dev/shm", &sv) == 0) {
		si->shm_bytes = (unsigned long long)sv.f_blocks * sv.f_frsize;
		si->shm_known = 1;
	}
	return 0;
}

int ds_sysinfo_cpu_has(const char *flag, struct ds_err *err)
{
	__builtin_cpu_init();
	if (strcmp(flag, "avx2") == 0)
		return __builtin_cpu_supports("avx2") != 0;
	if (strcmp(flag, "fma") == 0)
		return __builtin_cpu_supports("fma") != 0;
	if (strcmp(flag, "f16c") == 0)
		return __builtin_cpu_supports("f16c") != 0;
	if (strcmp(flag, "avx512f") == 0)
		return __builtin_cpu_supports("avx512f") != 0;
	if (strcmp(flag, "avx512_bf16") == 0)
		return __builtin_cpu_supports("avx512bf16") != 0;
	if (strcmp(flag, "amx_bf16") == 0 || strcmp(flag, "amx_tile") == 0) {
		/* CPUID.(EAX=7,ECX=0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE, and
		 * the OS's tile state in XCR0 (bits 17, 18: Linux >= 5.16, which
		 * then grants it per process) */
		unsigned a = 0, b = 0, c = 0, d = 0;
#if defined(__x86_64__) || defined(__i386__)
		if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
			d = 0;
		unsigned c1 = 0, lo = 0, hi = 0;
		if (!__get_cpuid(1, &a, &b, &c1, &hi) || !(c1 >> 27 & 1u))
			d = 0;   /* no OSXSAVE: no XCR0 to read */
		else {
			__asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
			if ((lo >> 17 & 3u) != 3u)
				d = 0;
		}
#endif
		return (d >> (flag[4] == 'b' ? 22 : 24) & 1u) != 0;
	}
	return ds_err_set(err, DS_EINVAL, "unknown CPU flag '%s' (avx2, fma, f16c, avx512f, avx512_bf16, amx_bf16, amx_tile)",
			  flag);
}

char *ds_sysinfo_format_bytes(unsigned long long bytes, char *buf, unsigned long n)
{
	static const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)bytes;
	int u = 0;

	while (v >= 1024.0 && u < 4) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, n, "%.2f %s", v, unit[u]);
	return buf;
}
