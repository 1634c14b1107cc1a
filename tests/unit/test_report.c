/* test_report.c - lib/app: the feature table, the CLI helpers, machine facts
 * and ds-report's row model, checked against independent sources
 * (/proc/cpuinfo, hand-computed sizes, DS_FEATURES parsed another way).
 */
#include "config.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "unit.h"
#include "app/app.h"
#include "app/sysinfo.h"
#include "app/blas_core.h"
#include "cli.h"
#include "driver/report.h"

static void test_format_bytes(void **state)
{
	char b[32];

	assert_string_equal(ds_sysinfo_format_bytes(0, b, sizeof b), "0.00 B");
	assert_string_equal(ds_sysinfo_format_bytes(1023, b, sizeof b), "1023.00 B");
	assert_string_equal(ds_sysinfo_format_bytes(1024, b, sizeof b), "1.00 KiB");
	assert_string_equal(ds_sysinfo_format_bytes(1536, b, sizeof b), "1.50 KiB");
	assert_string_equal(ds_sysinfo_format_bytes(512ULL << 20, b, sizeof b), "512.00 MiB");
	assert_string_equal(ds_sysinfo_format_bytes(64ULL << 30, b, sizeof b), "64.00 GiB");
	assert_string_equal(ds_sysinfo_format_bytes(3ULL << 40, b, sizeof b), "3.00 TiB");
	assert_string_equal(ds_sysinfo_format_bytes(5ULL << 50, b, sizeof b), "5120.00 TiB");
}

static void test_shm_warning(void **state)
{
	assert_non_null(ds_report_shm_warning(0));
	assert_non_null(ds_report_shm_warning(64ULL << 20)); /* Docker's default */
	assert_non_null(ds_report_shm_warning((512ULL << 20) - 1));
	assert_null(ds_report_shm_warning(512ULL << 20));
	assert_null(ds_report_shm_warning(1ULL << 30));
	assert_non_null(strstr(ds_report_shm_warning(1), "--shm-size"));
}

static void test_normalize_args(void **state)
{
	char a0[] = "ds-x", a1[] = "--deepspeed_config=my_file.json", a2[] = "-x_y",
	     a3[] = "--nvme_dir", a4[] = "/local_nvme/my_dir", a5[] = "--json", a6[] = "--",
	     a7[] = "--after_dd";
	char *argv[] = { a0, a1, a2, a3, a4, a5, a6, a7, NULL };

	ds_cli_normalize_args(8, argv);
	assert_string_equal(argv[1], "--deepspeed-config=my_file.json"); /* value untouched */
	assert_string_equal(argv[2], "-x_y");                            /* short options untouched */
	assert_string_equal(argv[3], "--nvme-dir");
	assert_string_equal(argv[4], "/local_nvme/my_dir");
	assert_string_equal(argv[5], "--json");
	assert_string_equal(argv[7], "--after_dd");                      /* operand after "--" */
}

/* DS_FEATURES split on spaces, the slow obvious way. */
static int has_word(const char *w)
{
	char buf[512], *save = NULL;

	snprintf(buf, sizeof buf, "%s", DS_FEATURES);
	for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save))
		if (strcmp(t, w) == 0)
			return 1;
	return 0;
}

static void test_app_has(void **state)
{
	static const char *const words[] = { "openmp", "mpi", "libaio", "cuda", "nccl", "hdf5-parallel",
					     "hdf5-serial", "blas", "blas-openmp", "open", "aio", "" };

	assert_int_equal(ds_app_has("openmp"), 1); /* required, always built */
	assert_int_equal(ds_app_has("blas"), 0);   /* only a prefix of blas-... */
	for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
		assert_int_equal(ds_app_has(words[i]), has_word(words[i]));
}

static void test_app_require(void **state)
{
	static const struct { const char *feat, *word, *flag; } t[] = {
		{ "mpi", "mpi", "--with-mpi" },       { "libaio", "libaio", "--with-libaio" },
		{ "async_io", "libaio", "--with-libaio" }, { "cuda", "cuda", "--with-cuda" },
		{ "nccl", "nccl", "--with-cuda" },    { "hdf5-parallel", "hdf5-parallel", "--with-mpi" },
	};
	struct ds_err err = DS_ERR_INIT;

	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		int rc;
		ds_err_clear(&err);
		rc = ds_app_require(t[i].feat, &err);
		if (has_word(t[i].word)) {
			assert_int_equal(rc, 0);
		} else {
			assert_int_equal(rc, DS_ENOTSUP);
			assert_int_equal(ds_exit_code(rc), 3);
			assert_non_null(strstr(err.msg, t[i].flag));
			assert_non_null(strstr(err.msg, "built without"));
		}
	}
	assert_int_equal(ds_app_require("warp-drive", &err), DS_EINTERNAL);
}

/* Whether /proc/cpuinfo's flags line lists flag (an independent source). */
static int cpuinfo_flag(const char *flag)
{
	char line[8192];
	int found = 0;
	FILE *f = fopen("/proc/cpuinfo", "r");

	if (f == NULL)
		return -1;
	while (!found && fgets(line, sizeof line, f)) {
		if (strncmp(line, "flags", 5) != 0)
			continue;
		for (char *p = strtok(line + 5, " \t:\n"); p; p = strtok(NULL, " \t\n"))
			if (strcmp(p, flag) == 0)
				found = 1;
		break;
	}
	fclose(f);
	return found;
}

static void test_cpu_flags(void **state)
{
	static const char *const flags[] = { "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile" };
	struct ds_err err = DS_ERR_INIT;

	for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
		int want = cpuinfo_flag(flags[i]);
		if (want < 0)
			skip();
		assert_int_equal(ds_sysinfo_cpu_has(flags[i], &err), want);
	}
	assert_int_equal(ds_sysinfo_cpu_has("avx9000", &err), DS_EINVAL);
}

/* OpenBLAS's kernel-set names by hand from the feature sets (OpenBLAS's
 * dynamic.c: Sandybridge AVX, Haswell/Zen AVX2+FMA, SkylakeX AVX-512
 * F/BW/DQ/VL, Cooperlake + AVX512_BF16), and the rule that only the
 * Prescott fallback of a DYNAMIC_ARCH build without OPENBLAS_CORETYPE is
 * replaced. */
static void test_blas_core(void **state)
{
	struct ds_blas_cpu sse = { 0 }, avx = { .avx = 1 }, hsw = { .avx = 1, .avx2_fma = 1 };
	struct ds_blas_cpu zen = { .avx = 1, .avx2_fma = 1, .amd = 1 };
	struct ds_blas_cpu skx = { .avx = 1, .avx2_fma = 1, .avx512 = 1 };
	struct ds_blas_cpu cpl = { .avx = 1, .avx2_fma = 1, .avx512 = 1, .avx512_bf16 = 1 };
	struct ds_blas_cpu zen4 = { .avx = 1, .avx2_fma = 1, .avx512 = 1, .avx512_bf16 = 1, .amd = 1 };
	const char *dyn = "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY USE_OPENMP Prescott MAX_THREADS=64";

	assert_null(ds_blas_core_for(&sse));
	assert_string_equal(ds_blas_core_for(&avx), "Sandybridge");
	assert_string_equal(ds_blas_core_for(&hsw), "Haswell");
	assert_string_equal(ds_blas_core_for(&zen), "Zen");
	assert_string_equal(ds_blas_core_for(&skx), "SkylakeX");
	assert_string_equal(ds_blas_core_for(&cpl), "Cooperlake");
	assert_string_equal(ds_blas_core_for(&zen4), "Cooperlake");

	assert_string_equal(ds_blas_core_decide(dyn, "Prescott", NULL, "Cooperlake"), "Cooperlake");
	assert_string_equal(ds_blas_core_decide(dyn, "PRESCOTT", "", "Zen"), "Zen");
	assert_null(ds_blas_core_decide(dyn, "Prescott", "Prescott", "Cooperlake"));   /* the user's */
	assert_null(ds_blas_core_decide(dyn, "Prescott", "Haswell", "Cooperlake"));
	assert_null(ds_blas_core_decide(dyn, "Haswell", NULL, "Cooperlake"));   /* OpenBLAS chose it */
	assert_null(ds_blas_core_decide(dyn, "Zen", NULL, "Cooperlake"));
	assert_null(ds_blas_core_decide(dyn, "Prescott", NULL, NULL));   /* SSE only: Prescott is right */
	assert_null(ds_blas_core_decide("OpenBLAS 0.3.21 NO_LAPACKE USE_OPENMP Prescott", "Prescott", NULL,
					"Cooperlake"));   /* one core compiled in: the variable is ignored */
	assert_null(ds_blas_core_decide(NULL, NULL, NULL, NULL));

	/* this CPU's set agrees with /proc/cpuinfo's flags */
	struct ds_blas_cpu me;
	ds_blas_cpu_get(&me);
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[8192];
	int found = 0;
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "flags", 5)) {
			found = 1;
			break;
		}
	if (f)
		fclose(f);
	if (!found)
		return;
	line[strcspn(line, "\n")] = ' ';
#define FLAG(x) (strstr(line, " " x " ") != NULL)
	assert_int_equal(me.avx2_fma, FLAG("avx2") && FLAG("fma"));
	assert_int_equal(me.avx512, FLAG("avx512f") && FLAG("avx512bw") && FLAG("avx512dq") && FLAG("avx512vl"));
	assert_int_equal(me.avx512_bf16, me.avx512 && FLAG("avx512_bf16"));
#undef FLAG
}

static void test_report_rows(void **state)
{
	static const char *const feats[] = { "openmp", "blas", "blas_threads", "mpi", "hdf5_parallel",
					     "async_io", "gds", "cuda", "nccl", "avx2", "fma", "f16c",
					     "avx512f", "avx512_bf16" };
	static struct ds_report rep;
	struct ds_report_opts o = { 0 };
	struct ds_err err = DS_ERR_INIT;
	const struct ds_report_row *w;

	o.shm_override = "1000";
	assert_int_equal(ds_report_run(&o, &rep, &err), 0);
	for (size_t i = 0; i < sizeof feats / sizeof feats[0]; i++) {
		w = ds_report_find(&rep, DS_REPORT_FEATURE, feats[i]);
		assert_non_null(w);
		/* Everything not fine says why and what to do. */
		if (!w->installed || !w->compatible) {
			assert_true(w->reason[0] != '\0');
			assert_true(w->fix[0] != '\0');
		}
	}
	assert_int_equal(ds_report_find(&rep, DS_REPORT_FEATURE, "mpi")->installed, has_word("mpi"));
	assert_int_equal(ds_report_find(&rep, DS_REPORT_FEATURE, "async_io")->installed, has_word("libaio"));
	assert_int_equal(ds_report_find(&rep, DS_REPORT_FEATURE, "gds")->installed, 0);
	w = ds_report_find(&rep, DS_REPORT_FEATURE, "async_io");
	if (!w->installed)
		assert_non_null(strstr(w->fix, "--with-libaio"));
	w = ds_report_find(&rep, DS_REPORT_MACHINE, "shm_size");
	assert_non_null(w);
	assert_int_equal(w->num, 1000);
	assert_string_equal(w->value, "1000.00 B");
	assert_true(w->warning[0] != '\0');
	/* GPUs are listed exactly when the build has CUDA. */
	assert_int_equal(ds_report_find(&rep, DS_REPORT_MACHINE, "gpus") != NULL, has_word("cuda"));

	o.shm_override = "1073741824";
	assert_int_equal(ds_report_run(&o, &rep, &err), 0);
	w = ds_report_find(&rep, DS_REPORT_MACHINE, "shm_size");
	assert_string_equal(w->value, "1.00 GiB");
	assert_string_equal(w->warning, "");

	o.shm_override = "12abc";
	assert_int_equal(ds_report_run(&o, &rep, &err), DS_EINVAL);
	assert_non_null(strstr(err.msg, "DS_REPORT_SHM_BYTES"));
	o.shm_override = "-5";
	assert_int_equal(ds_report_run(&o, &rep, &err), DS_EINVAL);
}

static void test_report_json(void **state)
{
	static struct ds_report rep;
	struct ds_report_opts o = { 0 };
	struct ds_err err = DS_ERR_INIT;
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	json_error_t je;
	json_t *j, *mpi;

	o.shm_override = "67108864";
	o.json = 1;
	assert_int_equal(ds_report_run(&o, &rep, &err), 0);
	assert_int_equal(ds_report_write(f, &rep, &o, &err), 0);
	fclose(f);
	j = json_loads(buf, 0, &je);
	assert_non_null(j);
	mpi = json_object_get(json_object_get(j, "features"), "mpi");
	assert_non_null(mpi);
	assert_int_equal(json_is_true(json_object_get(mpi, "installed")), has_word("mpi"));
	assert_int_equal(json_integer_value(json_object_get(json_object_get(j, "machine"), "shm_size_bytes")),
			 64 << 20);
	assert_string_equal(json_string_value(json_object_get(json_object_get(j, "build"), "features")),
			    DS_FEATURES);
	assert_true(json_array_size(json_object_get(j, "warnings")) >= 1);
	json_decref(j);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_bytes),
		cmocka_unit_test(test_shm_warning),
		cmocka_unit_test(test_normalize_args),
		cmocka_unit_test(test_app_has),
		cmocka_unit_test(test_app_require),
		cmocka_unit_test(test_cpu_flags),
		cmocka_unit_test(test_blas_core),
		cmocka_unit_test(test_report_rows),
		cmocka_unit_test(test_report_json),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
