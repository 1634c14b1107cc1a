/* unit.h - common includes for the cmocka unit tests (tests/unit).
 * cmocka needs these system headers first (spec/platform.md §6). */
#ifndef DS_TESTS_UNIT_H
#define DS_TESTS_UNIT_H
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

/* Absolute path of a file in the source tree (tests/data/...). */
#define DS_TEST_SRC(rel) DS_SRCDIR "/" rel

/* Per-tensor tolerance of DESIGN.md: max|a-b| <= rtol * max|b|. */
static inline int ds_test_close(const float *a, const float *b, long n, double rtol, double *err_out)
{
	double md = 0, mb = 0;
	for (long i = 0; i < n; i++) {
		double d = (double)a[i] - (double)b[i];
		if (d < 0) d = -d;
		if (d > md || d != d) md = d;
		double ab = b[i] < 0 ? -(double)b[i] : (double)b[i];
		if (ab > mb) mb = ab;
	}
	if (err_out) *err_out = mb > 0 ? md / mb : md;
	return md <= rtol * mb;
}
#endif
