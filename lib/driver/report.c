/* report.c - ds-report's row model and its two renderers (see report.h).
 *
 * Every fact is probed at run time (OpenBLAS's threading, cpuid, the CUDA
 * driver, kernel AIO) so the report describes the libraries actually loaded,
 * not just what configure saw.  Text and JSON are both written from rows.
 */
#include "config.h"
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <omp.h>
#include <cblas.h>
#include "app/blas_core.h"
#include <csv.h>
#include <hdf5.h>
#include <jansson.h>
#include "app/app.h"
#include "app/gpu.h"
#include "app/mpiver.h"
#include "app/sysinfo.h"
#include "cpu/gemm_bf16.h"
#include "driver/report.h"

#define SEP "--------------------------------------------------"
#define GREEN "\033[92m"
#define YELLOW "\033[93m"
#define END "\033[0m"

static const char *const section_name[] = { "features", "build", "machine", "versions" };

static struct ds_report_row *add(struct ds_report *r, int section, const char *name,
				 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Append a row (the table is sized for every row this file adds). */
static struct ds_report_row *add(struct ds_report *r, int section, const char *name,
				 const char *fmt, ...)
{
	static struct ds_report_row overflow;
	struct ds_report_row *w = r->n < DS_REPORT_MAX_ROWS ? &r->row[r->n++] : &overflow;
	va_list ap;

	memset(w, 0, sizeof *w);
	w->section = section;
	w->installed = w->compatible = 1;
	snprintf(w->name, sizeof w->name, "%s", name);
	va_start(ap, fmt);
	vsnprintf(w->value, sizeof w->value, fmt, ap);
	va_end(ap);
	return w;
}

static void set_num(struct ds_report_row *w, long long v, const char *unit)
{
	w->is_num = 1;
	w->num = v;
	w->unit = unit;
}

/* A feature row whose "installed" comes from DS_FEATURES and the app table:
 * when missing, reason and fix name the configure flag and the packages. */
static struct ds_report_row *feature(struct ds_report *r, const char *name, const char *word,
				     int compatible, const char *why_not, const char *fix_not)
{
	const struct ds_app_feature *f = ds_app_feature_find(word);
	struct ds_report_row *w = add(r, DS_REPORT_FEATURE, name, "-");

	w->installed = ds_app_has(word);
	w->compatible = compatible;
	if (!w->installed) {
		snprintf(w->reason, sizeof w->reason, "built without %s (%s)%s%s", f->name, f->what,
			 compatible ? "" : "; ", compatible ? "" : why_not);
		snprintf(w->fix, sizeof w->fix, "reconfigure %s after %s", f->flag, f->howto);
	} else if (!compatible) {
		snprintf(w->reason, sizeof w->reason, "%s", why_not);
		snprintf(w->fix, sizeof w->fix, "%s", fix_not);
	}
	return w;
}

/* 1 when an executable called prog is on PATH. */
static int on_path(const char *prog)
{
	const char *path = getenv("PATH");
	char dir[PATH_MAX], file[PATH_MAX + 64];

	while (path && *path) {
		size_t n = strcspn(path, ":");
		snprintf(dir, sizeof dir, "%.*s", (int)n, path);
		snprintf(file, sizeof file, "%s/%s", n ? dir : ".", prog);
		if (access(file, X_OK) == 0)
			return 1;
		path += n + (path[n] == ':');
	}
	return 0;
}

/* CUDA's 13000 as "13.0", 0 (no driver) as "none"; returns buf (16 bytes). */
static const char *cuda_ver(int v, char *buf)
{
	if (v <= 0)
		return "none";
	snprintf(buf, 16, "%d.%d", v / 1000, v % 1000 / 10);
	return buf;
}

static const char *openmp_version(void)
{
	switch (_OPENMP) {
	case 201307: return "4.0";
	case 201511: return "4.5";
	case 201811: return "5.0";
	case 202011: return "5.1";
	case 202111: return "5.2";
	default: return "(unknown)";
	}
}

static void rows_openmp_blas(struct ds_report *r, const struct ds_sysinfo *si)
{
	static const char *const par[] = { "sequential", "pthreads", "openmp" };
	struct ds_report_row *w;
	int omp = omp_get_max_threads();
	int p = openblas_get_parallel();
	const char *pname = p >= 0 && p <= 2 ? par[p] : "unknown";

	w = add(r, DS_REPORT_FEATURE, "openmp", "OpenMP %s, max %d threads", openmp_version(), omp);
	if (si->cpus_usable > 0 && omp > si->cpus_usable)
		snprintf(w->warning, sizeof w->warning,
			 "OpenMP will start %d threads on %d usable CPUs: set OMP_NUM_THREADS=%d",
			 omp, si->cpus_usable, si->cpus_usable);

	/* A DYNAMIC_ARCH build names the core it picked in the config string. */
	if (strstr(openblas_get_config(), openblas_get_corename()))
		add(r, DS_REPORT_FEATURE, "blas", "%s", openblas_get_config());
	else
		add(r, DS_REPORT_FEATURE, "blas", "%s (core %s)", openblas_get_config(), openblas_get_corename());

	{   /* OpenBLAS's Prescott fallback, replaced by the tools or not (app/blas_core.h) */
		struct ds_report_row *b = &r->row[r->n - 1];
		char bn[sizeof b->warning];
		int k = ds_blas_core_note(bn, sizeof bn);
		if (k == 1) {   /* the same facts as the log line, split into why and what was done */
			snprintf(b->reason, sizeof b->reason, "OpenBLAS chose its %s kernels: it does not know this CPU",
				 getenv(DS_BLAS_CORE_FROM_ENV));
			snprintf(b->fix, sizeof b->fix, "none needed: dstk's tools run it with OPENBLAS_CORETYPE=%s, "
				 "the best set cpuid allows (set OPENBLAS_CORETYPE to choose)", getenv("OPENBLAS_CORETYPE"));
		} else if (k == 2) {
			snprintf(b->warning, sizeof b->warning, "%s", bn);
		}
	}

	w = add(r, DS_REPORT_FEATURE, "blas_threads", "%s, %d threads (configure linked: %s)",
		pname, openblas_get_num_threads(), DS_BLAS_THREADING);
	w->compatible = p == 2;
	if (p == 1) {
		snprintf(w->reason, sizeof w->reason,
			 "the pthreads OpenBLAS is loaded; its thread pool fights OpenMP's (about 2x slower)");
		if (strcmp(DS_BLAS_THREADING, "openmp") == 0)
			snprintf(w->fix, sizeof w->fix, "the OpenMP build was linked but another loaded: "
				 "check LD_LIBRARY_PATH and the libopenblas.so.0 alternative");
		else
			snprintf(w->fix, sizeof w->fix, "reconfigure after apt-get install libopenblas-openmp-dev "
				 "(configure then links the OpenMP build with an rpath)");
	} else if (p != 2) {
		snprintf(w->reason, sizeof w->reason, "%s OpenBLAS: matrix products use one core", pname);
		snprintf(w->fix, sizeof w->fix, "reconfigure after apt-get install libopenblas-openmp-dev");
	}
}

/* 130100 as "13.1.0" (cuBLAS, NCCL: major*10000 + minor*100 + patch); 0
 * as "unknown"; returns buf (16 bytes). */
static const char *lib_ver(int v, char *buf)
{
	if (v <= 0)
		return "unknown";
	snprintf(buf, 16, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
	return buf;
}

/* CUDA with cuBLAS, and NCCL: built in or not, the versions loaded, the
 * devices, and whether each part worked on device 0 (ds_gpu_probe). */
static void rows_cuda(struct ds_report *r, const struct ds_gpu_info *gi, const struct ds_gpu_usable *gu,
		      int gpu_rc)
{
	int have_dev = gpu_rc == 0 ? gi->count > 0 : access("/dev/nvidiactl", F_OK) == 0;
	const char *why = gpu_rc == 0 ? gi->why_none : "no /dev/nvidiactl (no NVIDIA driver)";
	const char *fix = "run on a node with an NVIDIA GPU and its driver";
	const char *fix_lib = "check that the driver (nvidia-smi) supports this CUDA runtime and that "
			      "LD_LIBRARY_PATH reaches the libcublas and libnccl dstk was built with";
	char v1[16], v2[16], v3[16], why2[224];
	struct ds_report_row *w;

	if (gpu_rc == 0 && have_dev) {
		/* a device answers: usable is what the probe saw */
		snprintf(why2, sizeof why2, "%s%.200s", gu->cuda ? "cuBLAS: " : "",
			 gu->cuda ? gu->cublas_why : gu->cuda_why);
		w = feature(r, "cuda", "cuda", gu->cuda && gu->cublas, why2, fix_lib);
	} else {
		w = feature(r, "cuda", "cuda", have_dev, why, fix);
	}
	if (gpu_rc == 0)
		snprintf(w->value, sizeof w->value, "runtime %s, driver %s, cuBLAS %s; %d device%s; CUDA %s, cuBLAS %s",
			 cuda_ver(gi->runtime_version, v1), cuda_ver(gi->driver_version, v2),
			 lib_ver(gi->cublas_version, v3), gi->count, gi->count == 1 ? "" : "s",
			 gu->cuda ? "usable" : "not usable", gu->cublas ? "usable" : "not usable");
	if (gpu_rc == 0 && have_dev)
		w = feature(r, "nccl", "nccl", gu->nccl, gu->nccl_why, fix_lib);
	else
		w = feature(r, "nccl", "nccl", have_dev, why, fix);
	if (gpu_rc == 0)
		snprintf(w->value, sizeof w->value, "NCCL %s; %s", lib_ver(gi->nccl_version, v1),
			 gu->nccl ? "usable" : "not usable");
}

static void rows_comm_io(struct ds_report *r, const struct ds_gpu_info *gi, int gpu_rc)
{
	struct ds_err e = DS_ERR_INIT;
	char ver[160];
	unsigned maj = 0, min = 0, rel = 0;
	int launcher = on_path("mpirun") || on_path("mpiexec") || on_path("srun");
	const char *no_launcher = "no mpirun, mpiexec or srun on PATH";
	struct ds_report_row *w;
	long ctx = 0;
	int aio_ok, aio_errno = 0;

	w = feature(r, "mpi", "mpi", launcher, no_launcher, "apt-get install openmpi-bin, or run under Slurm");
	if (ds_mpiver_get(ver, sizeof ver, &e) == 0)
		snprintf(w->value, sizeof w->value, "%s", ver);

	H5get_libversion(&maj, &min, &rel);
	w = feature(r, "hdf5_parallel", "hdf5-parallel", launcher, no_launcher,
		    "apt-get install openmpi-bin, or run under Slurm");
	snprintf(w->value, sizeof w->value, "HDF5 %u.%u.%u %s", maj, min, rel,
		 ds_app_has("hdf5-parallel") ? "parallel (MPI-IO)" : "serial");

	/* Kernel AIO, probed with the raw syscalls so the answer does not
	 * depend on libaio being linked. */
	aio_ok = syscall(SYS_io_setup, 1, &ctx) == 0;
	if (aio_ok)
		syscall(SYS_io_destroy, ctx);
	else
		aio_errno = errno;
	snprintf(ver, sizeof ver, "io_setup: %s (kernel without AIO, or fs.aio-max-nr used up)",
		 strerror(aio_errno));
	w = feature(r, "async_io", "libaio", aio_ok, ver,
		    "raise fs.aio-max-nr with sysctl, or use the posix I/O engine");
	snprintf(w->value, sizeof w->value, "%s; kernel AIO %s",
		 w->installed ? "libaio engine" : "posix engine only", aio_ok ? "works" : "unavailable");

	w = add(r, DS_REPORT_FEATURE, "gds", "-");
	w->installed = 0;
	w->compatible = access("/proc/driver/nvidia-fs", F_OK) == 0;
	snprintf(w->reason, sizeof w->reason, "dstk has no GPUDirect Storage (cuFile) engine%s",
		 w->compatible ? "" : "; no nvidia-fs driver on this machine");
	snprintf(w->fix, sizeof w->fix, "use async_io (configure --with-libaio) for NVMe offload");
}

/* bf16 matrix products (kernels/cpu/gemm_bf16): which implementation
 * bf16 training with dstk.bf16_matmul "auto" uses on this build and CPU,
 * and why.  dstk's AVX512_BF16 kernel is always built; oneDNN (AMX,
 * AVX512_BF16) only with --with-dnnl. */
static void row_bf16_matmul(struct ds_report *r)
{
	int amx_cpu = ds_sysinfo_cpu_has("amx_bf16", NULL) == 1 && ds_sysinfo_cpu_has("amx_tile", NULL) == 1;
	char plan[512];
	int ok = ds_gemm_bf16_plan(DS_BF16_MM_AUTO, plan, sizeof plan);
	struct ds_report_row *w = add(r, DS_REPORT_FEATURE, "bf16_matmul", "%s", "");
	w->compatible = ok;
	if (!ok) {   /* the plan is "fp32 sgemm: why" */
		const char *why = strncmp(plan, "fp32 sgemm: ", 12) ? plan : plan + 12;
		snprintf(w->value, sizeof w->value, "bf16 training uses fp32 sgemm");
		snprintf(w->reason, sizeof w->reason, "%.*s", (int)sizeof w->reason - 1, why);
		snprintf(w->fix, sizeof w->fix, "%s",
			 amx_cpu ? "check ONEDNN_MAX_CPU_ISA and the kernel's AMX support (Linux >= 5.16)"
			 : ds_gemm_bf16_available(DS_BF16_KERNEL, NULL)
				 ? "none needed (dstk.bf16_matmul \"avx512_bf16\" forces the kernel)"
				 : "none needed: bf16 training uses fp32 sgemm");
		return;
	}
	const char *p = strncmp(plan, "bf16 on ", 8) ? plan : plan + 8;
	if (amx_cpu && !ds_gemm_bf16_amx())
		snprintf(w->value, sizeof w->value, "%.*s; AMX unused: oneDNN is not built in or does not reach it",
			 (int)sizeof w->value - 64, p);
	else
		snprintf(w->value, sizeof w->value, "%.*s", (int)sizeof w->value - 1, p);
}

/* CPU SIMD used by CPU-Adam, the 16-bit conversions and the bf16
 * products: the build always carries these code paths (chosen at run
 * time), so "compatible" is the answer that matters. */
static void rows_simd(struct ds_report *r)
{
	static const struct { const char *flag, *use, *fallback; } simd[] = {
		{ "avx2", "CPU-Adam 256-bit path", "CPU-Adam falls back to scalar code" },
		{ "fma", "fused multiply-add in the 256/512-bit paths", "CPU-Adam falls back to scalar code" },
		{ "f16c", "fp16 <-> fp32 conversions (fp16 runs' 16-bit copies, the 16-bit allreduce's sum)",
		  "fp16 is converted by scalar code, several times slower" },
		{ "avx512f", "CPU-Adam 512-bit path; 16-lane fp16 and bf16 conversions", "CPU-Adam uses the 256-bit path" },
		{ "avx512_bf16", "dstk's bf16 matrix-product kernel (vdpbf16ps; see bf16_matmul)",
		  "bf16 products run on oneDNN (AMX) or fp32 sgemm" },
	};

	for (size_t i = 0; i < sizeof simd / sizeof simd[0]; i++) {
		struct ds_report_row *w = add(r, DS_REPORT_FEATURE, simd[i].flag, "%s", simd[i].use);
		w->compatible = ds_sysinfo_cpu_has(simd[i].flag, NULL) == 1;
		if (!w->compatible) {
			snprintf(w->reason, sizeof w->reason, "this CPU has no %s", simd[i].flag);
			snprintf(w->fix, sizeof w->fix, "none needed: %s", simd[i].fallback);
		}
	}
}

const char *ds_report_shm_warning(unsigned long long bytes)
{
	if (bytes >= DS_SYSINFO_SHM_MIN)
		return NULL;
	return "/dev/shm is smaller than 512 MiB: MPI and NCCL shared-memory transfers may fail; "
	       "in a container, start it with --shm-size=1g or more";
}

static int rows_machine(struct ds_report *r, const struct ds_report_opts *o, const struct ds_sysinfo *si,
			const struct ds_gpu_info *gi, int gpu_rc, struct ds_err *err)
{
	char b[64];
	unsigned long long shm = si->shm_bytes;
	int shm_known = si->shm_known;
	struct ds_report_row *w;

	if (o->shm_override) {
		char *end;
		errno = 0;
		shm = strtoull(o->shm_override, &end, 10);
		if (errno || end == o->shm_override || *end || o->shm_override[0] == '-')
			return ds_err_set(err, DS_EINVAL, "DS_REPORT_SHM_BYTES: '%s' is not a byte count",
					  o->shm_override);
		shm_known = 1;
	}
	add(r, DS_REPORT_MACHINE, "hostname", "%s", si->hostname);
	add(r, DS_REPORT_MACHINE, "cpu_model", "%s", si->cpu_model[0] ? si->cpu_model : "unknown");
	add(r, DS_REPORT_MACHINE, "kernel", "%s", si->kernel);
	set_num(add(r, DS_REPORT_MACHINE, "cpus_online", "%d", si->cpus_online), si->cpus_online, NULL);
	set_num(add(r, DS_REPORT_MACHINE, "cpus_usable", "%d", si->cpus_usable), si->cpus_usable, NULL);
	w = add(r, DS_REPORT_MACHINE, "memory_total", "%s", ds_sysinfo_format_bytes(si->mem_total, b, sizeof b));
	set_num(w, (long long)si->mem_total, "bytes");
	w = add(r, DS_REPORT_MACHINE, "memory_available", "%s",
		ds_sysinfo_format_bytes(si->mem_available, b, sizeof b));
	set_num(w, (long long)si->mem_available, "bytes");
	if (shm_known) {
		const char *warn = ds_report_shm_warning(shm);
		w = add(r, DS_REPORT_MACHINE, "shm_size", "%s", ds_sysinfo_format_bytes(shm, b, sizeof b));
		set_num(w, (long long)shm, "bytes");
		if (warn)
			snprintf(w->warning, sizeof w->warning, "%s", warn);
	} else {
		w = add(r, DS_REPORT_MACHINE, "shm_size", "unknown");
		snprintf(w->warning, sizeof w->warning, "/dev/shm is missing: MPI and NCCL shared memory will fail");
	}
	if (gpu_rc != 0)
		return 0; /* GPUs are listed only by a CUDA build */
	set_num(add(r, DS_REPORT_MACHINE, "gpus", "%d", gi->count), gi->count, NULL);
	for (int i = 0; i < gi->count && i < DS_GPU_MAX; i++) {
		char name[24];
		snprintf(name, sizeof name, "gpu%d", i);
		add(r, DS_REPORT_MACHINE, name, "%s (sm_%d%d, %s)", gi->dev[i].name, gi->dev[i].cc_major,
		    gi->dev[i].cc_minor, ds_sysinfo_format_bytes(gi->dev[i].mem_bytes, b, sizeof b));
	}
	return 0;
}

static void rows_versions(struct ds_report *r, const struct ds_gpu_info *gi, int gpu_rc)
{
	struct ds_err e = DS_ERR_INIT;
	unsigned maj = 0, min = 0, rel = 0;
	char mpi[160];

#if defined(__clang__)
	add(r, DS_REPORT_VERSION, "compiler", "%s", __VERSION__); /* "Clang 16.0.6 ..." */
#else
	add(r, DS_REPORT_VERSION, "compiler", "GCC %s", __VERSION__); /* gcc's says "12.2.0" */
#endif
	add(r, DS_REPORT_VERSION, "openmp", "%s (_OPENMP %d)", openmp_version(), _OPENMP);
	add(r, DS_REPORT_VERSION, "jansson", "%s", jansson_version_str());
	H5get_libversion(&maj, &min, &rel);
	add(r, DS_REPORT_VERSION, "hdf5", "%u.%u.%u", maj, min, rel);
	add(r, DS_REPORT_VERSION, "libcsv", "%d.%d.%d", CSV_MAJOR, CSV_MINOR, CSV_RELEASE);
	add(r, DS_REPORT_VERSION, "openblas", "%s", openblas_get_config());
	if (ds_mpiver_get(mpi, sizeof mpi, &e) == 0)
		add(r, DS_REPORT_VERSION, "mpi", "%s", mpi);
	if (gpu_rc == 0) {
		char v[16];
		add(r, DS_REPORT_VERSION, "cuda_runtime", "%s", cuda_ver(gi->runtime_version, v));
		add(r, DS_REPORT_VERSION, "cuda_driver", "%s", cuda_ver(gi->driver_version, v));
		add(r, DS_REPORT_VERSION, "cublas", "%s", lib_ver(gi->cublas_version, v));
		add(r, DS_REPORT_VERSION, "nccl", "%s", lib_ver(gi->nccl_version, v));
	}
}

int ds_report_run(const struct ds_report_opts *opts, struct ds_report *rep, struct ds_err *err)
{
	struct ds_err e = DS_ERR_INIT;
	struct ds_sysinfo si;
	static struct ds_gpu_info gi; /* 2 KiB: keep it off small thread stacks */
	static struct ds_gpu_usable gu;
	const char *args;
	int gpu_rc;

	memset(rep, 0, sizeof *rep);
	ds_sysinfo_get(&si, NULL);
	gpu_rc = ds_gpu_query(&gi, &e);
	if (gpu_rc == 0)
		ds_gpu_probe(&gi, &gu, &e);

	add(rep, DS_REPORT_BUILD, "version", "%s", PACKAGE_VERSION);
	args = DS_CONFIGURE_ARGS + strspn(DS_CONFIGURE_ARGS, " "); /* autoconf starts it with a space */
	add(rep, DS_REPORT_BUILD, "configure_args", "%s", args[0] ? args : "(none)");
	add(rep, DS_REPORT_BUILD, "features", "%s", DS_FEATURES);
	add(rep, DS_REPORT_BUILD, "blas_threading", "%s", DS_BLAS_THREADING);

	rows_openmp_blas(rep, &si);
	rows_comm_io(rep, &gi, gpu_rc);
	rows_cuda(rep, &gi, &gu, gpu_rc);
	rows_simd(rep);
	row_bf16_matmul(rep);
	DS_TRY(rows_machine(rep, opts, &si, &gi, gpu_rc, err));
	rows_versions(rep, &gi, gpu_rc);
	return 0;
}

const struct ds_report_row *ds_report_find(const struct ds_report *rep, int section, const char *name)
{
	for (int i = 0; i < rep->n; i++)
		if (rep->row[i].section == section && strcmp(rep->row[i].name, name) == 0)
			return &rep->row[i];
	return NULL;
}

/* "[YES] ......" style cell: tag, then dots up to width (DeepSpeed's look). */
static void cell(FILE *f, const char *tag, int good, int width, int color)
{
	int pad = width - (int)strlen(tag) - 1;

	fprintf(f, "%s%s%s %.*s", color ? (good ? GREEN : YELLOW) : "", tag, color ? END : "",
		pad, "....................");
}

static void write_text(FILE *f, const struct ds_report *r, const struct ds_report_opts *o)
{
	const char *dots = "........................................";

	fprintf(f, "%s\ndstk %s environment report\n%s\n", SEP, PACKAGE_VERSION, SEP);
	if (!o->hide_features) {
		fprintf(f, "NOTE: installed = compiled into this build (ds-report --version);\n"
			   "      compatible = this machine can use it now.\n%s\n", SEP);
		fprintf(f, "# feature %.*s installed .. compatible .. detail\n", 14, dots);
		for (int i = 0; i < r->n; i++) {
			const struct ds_report_row *w = &r->row[i];
			if (w->section != DS_REPORT_FEATURE)
				continue;
			fprintf(f, "%s %.*s ", w->name, 23 - (int)strlen(w->name), dots);
			cell(f, w->installed ? "[YES]" : "[NO]", w->installed, 12, o->color);
			fputc(' ', f);
			cell(f, w->compatible ? "[OKAY]" : "[NO]", w->compatible, 13, o->color);
			fprintf(f, " %s\n", w->value);
			if (!o->hide_warnings && w->reason[0])
				fprintf(f, "    reason: %s\n    fix:    %s\n", w->reason, w->fix);
			if (!o->hide_warnings && w->warning[0])
				fprintf(f, "    %s[WARNING]%s %s\n", o->color ? YELLOW : "", o->color ? END : "",
					w->warning);
		}
	}
	for (int s = DS_REPORT_BUILD; s <= DS_REPORT_VERSION; s++) {
		fprintf(f, "%s\n# %s\n", SEP, section_name[s]);
		for (int i = 0; i < r->n; i++) {
			const struct ds_report_row *w = &r->row[i];
			if (w->section != s)
				continue;
			fprintf(f, "%s %.*s %s\n", w->name, 33 - (int)strlen(w->name), dots, w->value);
			if (!o->hide_warnings && w->warning[0])
				fprintf(f, "    %s[WARNING]%s %s\n", o->color ? YELLOW : "", o->color ? END : "",
					w->warning);
		}
	}
	fprintf(f, "%s\n", SEP);
}

/* JSON: {"build":{}, "features":{name:{installed,compatible,detail,reason,fix}},
 * "machine":{}, "versions":{}, "warnings":[{"name","message"}]}. */
static json_t *to_json(const struct ds_report *r)
{
	json_t *root = json_object(), *sec[4], *warn = json_array();

	for (int s = 0; s < 4; s++)
		sec[s] = json_object();
	json_object_set_new(root, "build", sec[DS_REPORT_BUILD]);
	json_object_set_new(root, "features", sec[DS_REPORT_FEATURE]);
	json_object_set_new(root, "machine", sec[DS_REPORT_MACHINE]);
	json_object_set_new(root, "versions", sec[DS_REPORT_VERSION]);
	json_object_set_new(root, "warnings", warn);
	for (int i = 0; i < r->n; i++) {
		const struct ds_report_row *w = &r->row[i];
		char key[40];

		if (w->section == DS_REPORT_FEATURE) {
			json_t *o = json_object();
			json_object_set_new(o, "installed", json_boolean(w->installed));
			json_object_set_new(o, "compatible", json_boolean(w->compatible));
			json_object_set_new(o, "detail", json_string(w->value));
			json_object_set_new(o, "reason", w->reason[0] ? json_string(w->reason) : json_null());
			json_object_set_new(o, "fix", w->fix[0] ? json_string(w->fix) : json_null());
			json_object_set_new(sec[w->section], w->name, o);
		} else if (w->is_num) {
			snprintf(key, sizeof key, "%s%s%s", w->name, w->unit ? "_" : "", w->unit ? w->unit : "");
			json_object_set_new(sec[w->section], key, json_integer(w->num));
		} else {
			json_object_set_new(sec[w->section], w->name, json_string(w->value));
		}
		if (w->warning[0])
			json_array_append_new(warn, json_pack("{s:s,s:s}", "name", w->name, "message", w->warning));
	}
	return root;
}

int ds_report_write(FILE *f, const struct ds_report *rep, const struct ds_report_opts *opts,
		    struct ds_err *err)
{
	if (opts->json) {
		json_t *j = to_json(rep);
		int rc;

		if (j == NULL)
			return ds_err_set(err, DS_ENOMEM, "building the JSON report");
		rc = json_dumpf(j, f, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		json_decref(j);
		if (rc != 0 || fputc('\n', f) == EOF)
			return ds_err_set(err, DS_EIO, "writing the JSON report: %s", strerror(errno));
	} else {
		write_text(f, rep, opts);
	}
	if (fflush(f) != 0 || ferror(f))
		return ds_err_set(err, DS_EIO, "writing the report: %s", strerror(errno));
	return 0;
}
