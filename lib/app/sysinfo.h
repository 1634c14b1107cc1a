/* sysinfo.h - facts about this machine that decide how dstk can run here:
 * CPUs, memory, /dev/shm, the SIMD extensions CPU-Adam uses.
 *
 * Read-only probes of /proc, sysfs, statvfs and cpuid; nothing is cached.
 */
#ifndef DS_APP_SYSINFO_H
#define DS_APP_SYSINFO_H

#include "util/err.h"

struct ds_sysinfo {
	char hostname[256];
	char cpu_model[128];         /* /proc/cpuinfo "model name", "" if absent */
	char kernel[128];           /* uname: "Linux 6.1.0-18-amd64" */
	int cpus_online;             /* logical CPUs online */
	int cpus_usable;             /* CPUs in this process's affinity mask */
	unsigned long long mem_total;     /* bytes, MemTotal; 0 when unknown */
	unsigned long long mem_available; /* bytes, MemAvailable; 0 when unknown */
	unsigned long long shm_bytes;     /* size of /dev/shm in bytes */
	int shm_known;               /* 1 when statvfs(/dev/shm) worked */
};

/* Fill si.  Returns 0; a fact that cannot be read is left 0/"" (a missing
 * /proc is not an error: the report says "unknown"). */
int ds_sysinfo_get(struct ds_sysinfo *si, struct ds_err *err);

/* 1 when the CPU (and the OS, for the AVX state) supports the extension
 * named by flag: "avx2", "fma", "f16c", "avx512f", "avx512_bf16",
 * "amx_bf16", "amx_tile" (CPUID and the tile state in XCR0);
 * 0 when not; DS_EINVAL for another name. */
int ds_sysinfo_cpu_has(const char *flag, struct ds_err *err);

/* Below this /dev/shm size MPI's and NCCL's shared-memory transports may
 * fail (DeepSpeed's ds_report warns at the same 512 MiB). */
#define DS_SYSINFO_SHM_MIN (512ULL << 20)

/* Format bytes as "%.2f UNIT" with UNIT in B, KiB, MiB, GiB, TiB (steps of
 * 1024) into buf; returns buf. */
char *ds_sysinfo_format_bytes(unsigned long long bytes, char *buf, unsigned long n);

#endif
